//! The calls waiting for remote workers, in this server process: the
//! [`RemoteAgent`](super::RemoteAgent) submits a call for a repository, the
//! worker holding that repository's lease takes it with its next poll and
//! answers it; a started turn's events flow back on the call's stream.
//!
//! The hub judges nothing about leases: the worker API checks every poll,
//! answer and event batch against the store's lease first, and hands the
//! hub only the lease it found held. What the hub keeps is which lease each
//! call was handed to, so that when a lease ends (moved, revoked, its
//! worker gone) the calls it took fail closed: a call handed out may have
//! reached Codex, so its caller learns it is uncertain, never that it can
//! be sent again.

use super::convert;
use crate::agent::{AgentError, TurnEvent};
use crate::worker_api::{Call, CallBody, Event, Outcome};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot, Notify};

/// Where a call stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallState {
    /// Waiting for a worker to take it: nothing reached any runtime.
    Queued,
    /// A worker took it under this lease: it may have reached Codex.
    Delivered { lease_id: String },
}

/// What a call that is lost (its lease ended, its answer never came) means
/// to its caller, by where it stood: the admission boundary of a local
/// runtime, kept across the wire.
pub fn lost(state: &CallState, why: &str) -> AgentError {
    match state {
        CallState::Queued => AgentError::Unavailable(format!(
            "no remote worker took the call: {why}; check that a worker given this repository \
             runs and reaches the server"
        )),
        CallState::Delivered { .. } => AgentError::Uncertain(format!(
            "a remote worker took the call but its answer is lost: {why}"
        )),
    }
}

/// Why an answer or an event batch is not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmatched {
    /// No call (or stream) of that id waits for this lease: it was answered,
    /// abandoned, or handed to another lease.
    UnknownCall,
}

struct Pending {
    repository: String,
    state: CallState,
    reply: oneshot::Sender<Outcome>,
}

struct Stream {
    lease_id: String,
    /// How many of the stream's events were forwarded: a batch sent again
    /// adds nothing twice.
    taken: u64,
    tx: mpsc::UnboundedSender<TurnEvent>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    queued: HashMap<String, VecDeque<(String, CallBody)>>,
    pending: HashMap<String, Pending>,
    streams: HashMap<String, Stream>,
    /// The worker and the repository of each lease that polled, until it ends.
    lease_workers: HashMap<String, (String, String)>,
}

/// The hub; cheap to clone.
#[derive(Clone, Default)]
pub struct CallHub {
    state: Arc<Mutex<State>>,
    /// Wakes the polls waiting for calls (any repository: a poll looks
    /// again, and waits again if nothing is its own).
    arrived: Arc<Notify>,
}

/// A call submitted: its id, and where its answer comes.
pub struct Submitted {
    pub call_id: String,
    pub answer: oneshot::Receiver<Outcome>,
}

impl CallHub {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock left plain maps behind: still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a call for whichever worker holds `repository`'s lease.
    pub fn submit(&self, repository: &str, body: CallBody) -> Submitted {
        let (reply, answer) = oneshot::channel();
        let call_id = queue(&mut self.lock(), repository, body, reply);
        self.arrived.notify_waiters();
        Submitted { call_id, answer }
    }

    /// Queues a call that starts a turn, with the turn's event stream open
    /// before any worker can take it: events posted for the call come out of
    /// the receiver, in order, each once.
    pub fn submit_turn(
        &self,
        repository: &str,
        body: CallBody,
    ) -> (Submitted, mpsc::UnboundedReceiver<TurnEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (reply, answer) = oneshot::channel();
        let call_id = {
            let mut s = self.lock();
            let call_id = queue(&mut s, repository, body, reply);
            s.streams.insert(
                call_id.clone(),
                Stream {
                    lease_id: String::new(),
                    taken: 0,
                    tx,
                },
            );
            call_id
        };
        self.arrived.notify_waiters();
        (Submitted { call_id, answer }, rx)
    }

    /// Stops waiting for a call: gone from the queue if no worker took it.
    /// Where it stood, or `None` if it was already answered.
    pub fn abandon(&self, call_id: &str) -> Option<CallState> {
        let mut s = self.lock();
        let pending = s.pending.remove(call_id)?;
        if let Some(q) = s.queued.get_mut(&pending.repository) {
            q.retain(|(id, _)| id != call_id);
        }
        if pending.state == CallState::Queued {
            s.streams.remove(call_id);
        }
        Some(pending.state)
    }

    /// Hands the calls waiting for `repository` to `lease_id` (held by
    /// `worker_id`, as the store just said). Calls an earlier lease of the
    /// repository took and never answered are lost with it.
    pub fn take(&self, repository: &str, lease_id: &str, worker_id: &str) -> Vec<Call> {
        let mut s = self.lock();
        // A repository's newer lease replaces its older one.
        s.lease_workers
            .retain(|l, (_, r)| r != repository || l == lease_id);
        s.lease_workers.insert(
            lease_id.to_owned(),
            (worker_id.to_owned(), repository.to_owned()),
        );
        let stale: Vec<String> = s
            .pending
            .iter()
            .filter(|(_, p)| {
                p.repository == repository
                    && matches!(&p.state, CallState::Delivered { lease_id: l } if l != lease_id)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            fail(
                &mut s,
                &id,
                "the repository's lease moved to another worker",
            );
        }
        let queued: Vec<(String, CallBody)> = s
            .queued
            .get_mut(repository)
            .map(|q| q.drain(..).collect())
            .unwrap_or_default();
        let mut calls = Vec::with_capacity(queued.len());
        for (call_id, body) in queued {
            if let Some(p) = s.pending.get_mut(&call_id) {
                p.state = CallState::Delivered {
                    lease_id: lease_id.to_owned(),
                };
            }
            if let Some(stream) = s.streams.get_mut(&call_id) {
                stream.lease_id = lease_id.to_owned();
            }
            calls.push(Call {
                call_id,
                lease_id: lease_id.to_owned(),
                body,
            });
        }
        calls
    }

    /// Waits until a call may have arrived (or `wait` ran out).
    pub async fn wait(&self, repository: &str, wait: std::time::Duration) {
        let notified = self.arrived.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let empty = self
            .lock()
            .queued
            .get(repository)
            .is_none_or(VecDeque::is_empty);
        if empty {
            let _ = tokio::time::timeout(wait, notified).await;
        }
    }

    /// The answer to a call `lease_id` took.
    pub fn answer(&self, lease_id: &str, call_id: &str, outcome: Outcome) -> Result<(), Unmatched> {
        let mut s = self.lock();
        let mine = s.pending.get(call_id).is_some_and(
            |p| matches!(&p.state, CallState::Delivered { lease_id: l } if l == lease_id),
        );
        if !mine {
            return Err(Unmatched::UnknownCall);
        }
        let Some(p) = s.pending.remove(call_id) else {
            return Err(Unmatched::UnknownCall);
        };
        let failed = !matches!(outcome, Outcome::Ok { .. });
        // The caller may have stopped waiting: nothing to tell it then.
        let _ = p.reply.send(outcome);
        if failed {
            s.streams.remove(call_id);
        }
        Ok(())
    }

    /// Events of the turn call `stream` started, as the worker under
    /// `lease_id` sent them, the first at place `first` of the stream: those
    /// past the ones forwarded go on, once; the stream closes after the
    /// event that ends the turn. A batch that leaves a gap is refused: the
    /// worker sends its outbox in order, so a gap is a lost batch.
    pub fn events(
        &self,
        lease_id: &str,
        stream: &str,
        first: u64,
        events: Vec<Event>,
    ) -> Result<(), Unmatched> {
        let mut s = self.lock();
        let Some(st) = s.streams.get_mut(stream) else {
            return Err(Unmatched::UnknownCall);
        };
        if st.lease_id != lease_id || first > st.taken {
            return Err(Unmatched::UnknownCall);
        }
        let mut ended = false;
        for (i, e) in events.into_iter().enumerate() {
            if first + i as u64 != st.taken {
                continue;
            }
            st.taken += 1;
            ended = e.ends_turn();
            if let Some(event) = convert::from_wire(e) {
                // A receiver dropped: the session stopped listening (it
                // finds the turn again by lookup); the events are not lost
                // to the worker's journal.
                let _ = st.tx.send(event);
            }
            if ended {
                break;
            }
        }
        if ended {
            s.streams.remove(stream);
        }
        Ok(())
    }

    /// Ends a lease: the calls it took and never answered fail as
    /// uncertain, and the turns it streams end (their sessions look them
    /// up, or reconcile them). How many calls it had.
    pub fn end_lease(&self, lease_id: &str, why: &str) -> usize {
        let n = end_lease_locked(&mut self.lock(), lease_id, why);
        // Polls held open under it look again, and learn it ended.
        self.arrived.notify_waiters();
        n
    }

    /// The ids of the turn streams open now.
    #[cfg(test)]
    pub fn stream_ids(&self) -> Vec<String> {
        self.lock().streams.keys().cloned().collect()
    }

    /// The repositories whose lease polled and has not ended: where a
    /// runtime-wide call (reset) must go.
    pub fn leased_repositories(&self) -> Vec<String> {
        let mut repos: Vec<String> = self
            .lock()
            .lease_workers
            .values()
            .map(|(_, r)| r.clone())
            .collect();
        repos.sort();
        repos.dedup();
        repos
    }

    /// Ends every lease of a worker (revoked).
    pub fn end_worker(&self, worker_id: &str, why: &str) -> usize {
        let mut s = self.lock();
        let leases: Vec<String> = s
            .lease_workers
            .iter()
            .filter(|(_, (w, _))| w.as_str() == worker_id)
            .map(|(l, _)| l.clone())
            .collect();
        let n = leases
            .iter()
            .map(|l| end_lease_locked(&mut s, l, why))
            .sum();
        drop(s);
        self.arrived.notify_waiters();
        n
    }
}

fn queue(
    s: &mut State,
    repository: &str,
    body: CallBody,
    reply: oneshot::Sender<Outcome>,
) -> String {
    s.next_id += 1;
    let call_id = format!("call-{}-{}", std::process::id(), s.next_id);
    s.queued
        .entry(repository.to_owned())
        .or_default()
        .push_back((call_id.clone(), body));
    s.pending.insert(
        call_id.clone(),
        Pending {
            repository: repository.to_owned(),
            state: CallState::Queued,
            reply,
        },
    );
    call_id
}

fn end_lease_locked(s: &mut State, lease_id: &str, why: &str) -> usize {
    let ids: Vec<String> = s
        .pending
        .iter()
        .filter(|(_, p)| matches!(&p.state, CallState::Delivered { lease_id: l } if l == lease_id))
        .map(|(id, _)| id.clone())
        .collect();
    for id in &ids {
        fail(s, id, why);
    }
    s.streams.retain(|_, st| st.lease_id != lease_id);
    s.lease_workers.remove(lease_id);
    ids.len()
}

/// Answers a lost call with what its state means.
fn fail(s: &mut State, call_id: &str, why: &str) {
    if let Some(p) = s.pending.remove(call_id) {
        let outcome = match lost(&p.state, why) {
            AgentError::Unavailable(message) => Outcome::Unavailable { message },
            AgentError::Uncertain(message) => Outcome::Uncertain { message },
            AgentError::Refused(message) => Outcome::Refused { message },
        };
        let _ = p.reply.send(outcome);
    }
    s.streams.remove(call_id);
}

#[cfg(test)]
mod tests;
