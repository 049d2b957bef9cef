//! [`WorkerCalls`]: the route of the remote runtime's calls through the
//! store, so that every server process of a deployment serves the worker
//! API. The process whose session makes a call stores it and waits; a
//! worker's poll on any process takes it (`store::worker_calls::claim`);
//! the answer and the turn's events, posted to any process, are stored and
//! reach the waiting caller.
//!
//! Waiting is woken, never driven, by signals: a process that stores an
//! answer, events or a queued call wakes its own waiters at once and tells
//! the other processes (PostgreSQL `NOTIFY`); every waiter also looks at
//! the store every [`LOOK_EVERY`], so a lost signal only delays.

use crate::agent::remote::hub::{lost, Answered, CallRoute, Wakeups};
use crate::agent::AgentError;
use crate::store::signals::Signal;
use crate::store::worker_calls::{self as calls, CallId, Followed, Unmatched, Verdict};
use crate::store::worker_leases::{self, WorkerLease};
use crate::store::{instances, Store, StoreError};
use crate::worker_api::{Call, CallBody, Event, Outcome};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How often a waiter looks at the store when nothing woke it.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How often a process deletes what dead callers left.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

fn call_key(id: &CallId) -> String {
    format!("call:{id}")
}

fn repo_key(repository: &str) -> String {
    format!("repo:{repository}")
}

/// The calls this process makes and serves; cheap to clone.
#[derive(Clone)]
pub struct WorkerCalls {
    store: Store,
    wakeups: Wakeups,
    /// This process's `serverId`: the caller its calls name.
    server_id: String,
    /// How recently a caller must have beaten for its calls to be taken
    /// (and kept): shorter than the server leases' life, so that the calls
    /// of a process that died are no longer handed out by the time another
    /// process takes its repositories and recovers its sessions.
    caller_window: Duration,
}

impl WorkerCalls {
    pub fn new(store: Store, server_id: &str, caller_window: Duration) -> WorkerCalls {
        WorkerCalls {
            store,
            wakeups: Wakeups::default(),
            server_id: server_id.to_owned(),
            caller_window,
        }
    }

    /// The window a caller must have beaten in, for a server whose leases
    /// live `ttl` and are renewed every `heartbeat`.
    pub fn caller_window(ttl: Duration, heartbeat: Duration) -> Duration {
        ttl.saturating_sub(heartbeat).max(heartbeat)
    }

    /// Another process's signal: wakes what waits on it here.
    pub fn on_signal(&self, signal: &Signal) {
        match signal {
            Signal::WorkerCall { call_id } => self.wakeups.wake(&format!("call:{call_id}")),
            Signal::WorkerQueue { repository } => self.wakeups.wake(&repo_key(repository)),
            Signal::WorkerLeaseEnded => self.wakeups.wake_all(),
            _ => {}
        }
    }

    fn changed(&self, id: &CallId) {
        self.wakeups.wake(&call_key(id));
        self.store.signal(Signal::WorkerCall {
            call_id: id.to_string(),
        });
    }

    async fn alive_since(&self) -> Result<String, StoreError> {
        let window = self.caller_window;
        self.store
            .read(move |c| instances::alive_since(c, window))
            .await
    }

    /// Hands the calls waiting for `lease`'s repository to it (see
    /// `store::worker_calls::claim`).
    pub async fn take(&self, lease: &WorkerLease) -> Result<Vec<Call>, StoreError> {
        let l = lease.clone();
        if !self.store.read(move |c| calls::claim_due(c, &l)).await? {
            return Ok(Vec::new());
        }
        let since = self.alive_since().await?;
        let lease = lease.clone();
        let claimed = self
            .store
            .write(move |c| calls::claim(c, &lease, &since))
            .await?;
        for id in &claimed.lost {
            self.changed(id);
        }
        Ok(claimed.calls)
    }

    /// A waiter for calls queued for `repository`: made before the first
    /// [`WorkerCalls::take`], so a call queued in between wakes it.
    pub fn repository_waiter(&self, repository: &str) -> crate::agent::remote::hub::Waiter {
        self.wakeups.waiter(&repo_key(repository))
    }

    /// The answer of the worker under `lease_id` to a call it took.
    pub async fn answer(
        &self,
        lease_id: &str,
        call_id: &str,
        outcome: Outcome,
    ) -> Result<Result<(), Unmatched>, StoreError> {
        let Some(id) = CallId::parse(call_id) else {
            return Ok(Err(Unmatched::UnknownCall));
        };
        let (l, i) = (lease_id.to_owned(), id.clone());
        let answered = self
            .store
            .write(move |c| calls::answer(c, &l, &i, &outcome))
            .await?;
        if answered.is_ok() {
            self.changed(&id);
        }
        Ok(answered)
    }

    /// Events of the turn call `stream` started, from the worker under
    /// `lease_id`, the first at place `first` of the stream.
    pub async fn events(
        &self,
        lease_id: &str,
        stream: &str,
        first: u64,
        events: Vec<Event>,
    ) -> Result<Result<(), Unmatched>, StoreError> {
        let Some(id) = CallId::parse(stream) else {
            return Ok(Err(Unmatched::UnknownCall));
        };
        let (l, i) = (lease_id.to_owned(), id.clone());
        let added = self
            .store
            .write(move |c| calls::add_events(c, &l, &i, first, &events))
            .await?;
        match added {
            Ok(n) => {
                if n > 0 {
                    self.changed(&id);
                }
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    /// Ends a lease: the calls it took and never answered fail as
    /// uncertain, and the turns it streams end. How many calls it had.
    pub async fn end_lease(&self, lease_id: &str, why: &str) -> Result<usize, StoreError> {
        let (l, w) = (lease_id.to_owned(), why.to_owned());
        let lost = self
            .store
            .write(move |c| calls::end_lease(c, &l, &w))
            .await?;
        for id in &lost {
            self.changed(id);
        }
        // Polls held open under it look again, and learn it ended.
        self.wakeups.wake_all();
        Ok(lost.len())
    }

    /// A worker was revoked (the store ended its leases with it): every
    /// waiter looks again, here and in the other processes, and finds the
    /// calls it took lost.
    pub fn end_worker(&self, worker_id: &str, why: &str) {
        tracing::info!(worker.id = %worker_id, why, "a worker's leases ended: its calls fail closed");
        self.wakeups.wake_all();
        self.store.signal(Signal::WorkerLeaseEnded);
    }

    /// Deletes, now and then, what callers that died left behind.
    pub async fn keep_sweeping(self) {
        loop {
            tokio::time::sleep(SWEEP_EVERY).await;
            let window = self.caller_window * 2;
            let swept = self
                .store
                .write(move |c| {
                    let since = instances::alive_since(c, window)?;
                    calls::sweep(c, &since)
                })
                .await;
            match swept {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    calls = n,
                    "deleted the worker calls of server processes that stopped"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot sweep the worker calls of stopped server processes; trying again later")
                }
            }
        }
    }

    async fn wait_for_answer(
        self,
        repository: String,
        body: CallBody,
        stream: bool,
        timeout: Duration,
    ) -> Result<Answered, AgentError> {
        let kind = body.kind();
        let id = CallId::mint();
        let mut waiter = self.wakeups.waiter(&call_key(&id));
        let (i, r, caller) = (id.clone(), repository.clone(), self.server_id.clone());
        self.store
            .write(move |c| calls::insert(c, &i, &r, &caller, &body, stream, timeout))
            .await
            .map_err(|e| {
                AgentError::Unavailable(format!(
                    "the {kind} call could not be stored for a remote worker: {e}"
                ))
            })?;
        // From here on the call is ours to delete, however this ends.
        let mut guard = Cleanup {
            calls: self.clone(),
            id: Some(id.clone()),
        };
        self.wakeups.wake(&repo_key(&repository));
        self.store.signal(Signal::WorkerQueue {
            repository: repository.clone(),
        });
        let until = Instant::now() + timeout;
        loop {
            waiter.seen();
            let i = id.clone();
            match self.store.read(move |c| calls::watch(c, &i)).await {
                Ok(Verdict::Settled(outcome)) => {
                    let events = match (&outcome, stream) {
                        (Outcome::Ok { .. }, true) => Some(self.follow(guard.take())),
                        _ => None,
                    };
                    return Ok(Answered { outcome, events });
                }
                Ok(Verdict::Pending) => {}
                Err(e) => {
                    tracing::warn!(call.id = %id, error = %e, "cannot read a worker call; looking again");
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let why = format!("no answer to {kind} within {} s", timeout.as_secs());
                return self.give_up(guard.take(), &why).await;
            }
            waiter.wait(left.min(LOOK_EVERY)).await;
        }
    }

    /// The caller stops waiting: what the call came to.
    async fn give_up(&self, id: Option<CallId>, why: &str) -> Result<Answered, AgentError> {
        let Some(id) = id else {
            return Err(AgentError::Uncertain(format!(
                "{why}; the call was dropped"
            )));
        };
        let i = id.clone();
        match self.store.write(move |c| calls::give_up(c, &i)).await {
            // Answered just in time.
            Ok(Some(Ok(outcome))) => Ok(Answered {
                outcome,
                events: None,
            }),
            Ok(Some(Err(state))) => Err(lost(&state, why)),
            Ok(None) => Err(AgentError::Uncertain(format!(
                "{why}; the call is no longer in the store"
            ))),
            // Not deleted: a worker may still take it, so it may run.
            Err(e) => {
                drop(Cleanup {
                    calls: self.clone(),
                    id: Some(id),
                });
                Err(AgentError::Uncertain(format!(
                    "{why}; giving the call up failed ({e})"
                )))
            }
        }
    }

    /// The events of the turn the call started, read from the store as they
    /// come; the call goes from the store when the stream ends or is dropped.
    fn follow(&self, id: Option<CallId>) -> BoxStream<'static, Event> {
        let Some(id) = id else {
            return Box::pin(futures_util::stream::empty());
        };
        let follow = Follow {
            waiter: self.wakeups.waiter(&call_key(&id)),
            guard: Cleanup {
                calls: self.clone(),
                id: Some(id.clone()),
            },
            id,
            next: 0,
            ready: VecDeque::new(),
            done: false,
        };
        Box::pin(futures_util::stream::unfold(follow, |mut f| async move {
            loop {
                if let Some(e) = f.ready.pop_front() {
                    return Some((e, f));
                }
                if f.done {
                    return None;
                }
                f.waiter.seen();
                let (i, from) = (f.id.clone(), f.next);
                let store = f.guard.calls.store.clone();
                match store.read(move |c| calls::follow(c, &i, from)).await {
                    Ok(Followed { events, open }) => {
                        let none = events.is_empty();
                        for e in events {
                            f.next += 1;
                            let ends = e.ends_turn();
                            f.ready.push_back(e);
                            if ends {
                                f.done = true;
                                break;
                            }
                        }
                        if none && !open {
                            // The lease ended, or the call went: the session
                            // looks the turn up, or reconciles it.
                            f.done = true;
                        }
                        if !none || f.done {
                            continue;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(call.id = %f.id, error = %e, "cannot read a turn's events; looking again");
                    }
                }
                f.waiter.wait(LOOK_EVERY).await;
            }
        }))
    }
}

/// A stream being followed.
struct Follow {
    id: CallId,
    /// The place of the next event to read.
    next: u64,
    ready: VecDeque<Event>,
    /// The turn ended (or its lease did): nothing more comes.
    done: bool,
    waiter: crate::agent::remote::hub::Waiter,
    guard: Cleanup,
}

/// Deletes a call from the store once nobody waits for it any more (its
/// caller was dropped mid-wait, or its stream ended or was dropped): a
/// queued call is then never taken, and a worker's late answer is refused.
struct Cleanup {
    calls: WorkerCalls,
    id: Option<CallId>,
}

impl Cleanup {
    fn take(&mut self) -> Option<CallId> {
        self.id.take()
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // No runtime to write from: the sweep deletes it once this
            // process is gone, and until then its deadline keeps it from
            // being taken late.
            return;
        };
        let store = self.calls.store.clone();
        handle.spawn(async move {
            if let Err(e) = store.write(move |c| calls::delete(c, &id)).await {
                tracing::warn!(error = %e, "a worker call nobody waits for stays in the store until the sweep");
            }
        });
    }
}

impl CallRoute for WorkerCalls {
    fn call(
        &self,
        repository: &str,
        body: CallBody,
        stream: bool,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Answered, AgentError>> {
        Box::pin(
            self.clone()
                .wait_for_answer(repository.to_owned(), body, stream, timeout),
        )
    }

    fn leased_repositories(&self) -> BoxFuture<'static, Vec<String>> {
        let store = self.store.clone();
        Box::pin(async move {
            match store.read(worker_leases::held).await {
                Ok(leases) => leases.into_iter().map(|l| l.repository).collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the workers' leases");
                    Vec::new()
                }
            }
        })
    }

    fn holder_home(&self, repository: &str) -> BoxFuture<'static, Option<String>> {
        let (store, repository) = (self.store.clone(), repository.to_owned());
        Box::pin(async move {
            let r = repository.clone();
            match store.read(move |c| worker_leases::holder_home(c, &r)).await {
                Ok(home) => home,
                // Unknown: a thread is then resumed where it is asked to be,
                // and a worker on another home refuses it.
                Err(e) => {
                    tracing::warn!(repository = %repository, error = %e, "cannot read which worker holds the repository");
                    None
                }
            }
        })
    }
}

#[cfg(test)]
mod tests;
