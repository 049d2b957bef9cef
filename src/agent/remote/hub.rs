//! How the remote runtime's calls reach the workers, as the runtime sees
//! it: [`CallRoute`] hands a call to whichever worker holds its repository's
//! lease and waits for the answer (and, for a call that starts a turn, the
//! turn's events). The route the server uses keeps the calls in the store,
//! so a worker may poll any server process of the deployment
//! (`actors::worker_calls`); this module holds what needs no store: what a
//! lost call means, and the wake-ups that let a waiting caller or poll look
//! again at once instead of at its next poll.

use crate::agent::AgentError;
use crate::worker_api::{CallBody, Event, Outcome};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;

/// Where a call stands, for its caller.
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

/// A call's answer; for a call that starts a turn, the turn's events too,
/// in order, each once, ending after the event that ends the turn (or
/// earlier, when the lease it runs under ends).
pub struct Answered {
    pub outcome: Outcome,
    pub events: Option<BoxStream<'static, Event>>,
}

/// Where the remote runtime sends its calls.
pub trait CallRoute: Send + Sync {
    /// Hands `body` to the worker holding `repository`'s lease and waits up
    /// to `timeout` for its answer; `stream`: the call starts a turn, whose
    /// events come with the answer. An error says the call was lost:
    /// unavailable if no worker took it, uncertain if one did.
    fn call(
        &self,
        repository: &str,
        body: CallBody,
        stream: bool,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Answered, AgentError>>;

    /// The repositories a worker leases now: where a runtime-wide call
    /// (reset) must go.
    fn leased_repositories(&self) -> BoxFuture<'static, Vec<String>>;

    /// The Codex home of the worker that holds `repository`'s lease now:
    /// where a thread opened for it now lives (`None`: no worker holds it,
    /// or the one that does did not say).
    fn holder_home(&self, repository: &str) -> BoxFuture<'static, Option<String>>;
}

/// Wake-ups within this process, by key (a call, a repository), plus one
/// for everything. A wake-up is a hint to look at the store again: whoever
/// waits also looks on a timer, so one that is missed (or sent by a
/// process whose signal was lost) only delays.
#[derive(Clone, Default)]
pub struct Wakeups {
    keys: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
    all: Arc<watch::Sender<u64>>,
}

impl Wakeups {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<u64>>> {
        // A panic while holding the lock left a plain map behind: still usable.
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A waiter on `key`: made before the first look at the store, so a
    /// wake-up between that look and the wait is not missed.
    pub fn waiter(&self, key: &str) -> Waiter {
        let rx = self
            .lock()
            .entry(key.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        Waiter {
            key: key.to_owned(),
            rx,
            all: self.all.subscribe(),
            wakeups: self.clone(),
        }
    }

    /// Wakes whoever waits on `key`.
    pub fn wake(&self, key: &str) {
        if let Some(tx) = self.lock().get(key) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wakes every waiter.
    pub fn wake_all(&self) {
        self.all.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// One wait on a key (see [`Wakeups::waiter`]).
pub struct Waiter {
    key: String,
    rx: watch::Receiver<u64>,
    all: watch::Receiver<u64>,
    wakeups: Wakeups,
}

impl Waiter {
    /// Takes the wake-ups so far as seen: call it before each look at the
    /// store, so that [`Waiter::wait`] returns at once for any that comes
    /// after the look.
    pub fn seen(&mut self) {
        self.rx.borrow_and_update();
        self.all.borrow_and_update();
    }

    /// Waits for a wake-up not yet seen, or `at_most`.
    pub async fn wait(&mut self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, async {
            tokio::select! {
                _ = self.rx.changed() => {}
                _ = self.all.changed() => {}
            }
        })
        .await;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut keys = self.wakeups.lock();
        // The last waiter on a key takes its channel with it.
        if keys
            .get(&self.key)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            keys.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests;
