//! The WAL's commit syncs, taken off the writer thread.
//!
//! A SQLite commit is two things: appending the transaction's frames to the
//! WAL, and syncing them. A writer that waits for the sync spends a fifth of
//! every group commit with nothing to do, so the writer thread's commit syncs
//! (see `walvfs`) only ask this syncer for one and return: the writer goes on
//! with the next batch while a thread of its own syncs, and one sync covers
//! every commit appended before it started.
//!
//! What keeps the store's promises:
//! - **Answers wait for durability.** The writer hands every committed
//!   batch's answers here with the ticket of the last sync asked for, and they
//!   go out only once a sync that started after that request has finished.
//!   Nobody is told "stored" before the sync that made it so.
//! - **Nothing is acted on before it is durable.** A commit is visible to other
//!   connections as soon as it is appended; a read returns only once every
//!   commit that was visible when it finished is durable (`Store::read` waits
//!   on [`Syncer::settled`]), and the change signal fires after the sync.
//! - **A failed sync stops the store.** After a failed sync nobody can say
//!   which appended commits reached the disk (the kernel may have dropped the
//!   pages), so every waiting answer, every later write and every later read
//!   fails, and the operator is told to restart: SQLite's recovery then keeps
//!   exactly what is in the WAL.
//!
//! Syncs that order the WAL against the database file (a checkpoint's) are
//! never deferred: `walvfs` defers only a sync that follows new appends.

use super::StoreError;
use std::collections::VecDeque;
use std::fs::File;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// Runs once a commit's fate is known: `Ok` after a sync covered it.
pub type Completion = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// What a failed sync tells every caller.
fn sync_failed(detail: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "the database's write-ahead log could not be synced to disk ({detail}); the store stopped \
         taking writes because it cannot tell which recent commits are on disk: check the disk, \
         then restart the server (SQLite recovers the log on open)"
    ))
}

#[derive(Default)]
struct State {
    /// The WAL file the latest request was for (a pooled connection may
    /// reopen it).
    file: Option<Arc<File>>,
    /// Tickets handed out so far: the latest request.
    requested: u64,
    /// Every request up to this ticket is on disk.
    durable: u64,
    /// Set by the first failed sync, forever.
    failed: Option<String>,
    /// Completions waiting for a ticket to become durable, in ticket order.
    waiting: VecDeque<(u64, Completion)>,
    stopping: bool,
}

/// Syncs one SQLite store's WAL for its writer thread (see the module doc).
pub struct Syncer {
    state: Mutex<State>,
    wake: Condvar,
    /// `durable`, for async readers; `u64::MAX` once a sync failed.
    durable_tx: tokio::sync::watch::Sender<u64>,
}

impl Syncer {
    /// Starts the syncing thread of a store.
    pub fn start() -> std::io::Result<Arc<Syncer>> {
        let syncer = Arc::new(Syncer {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            durable_tx: tokio::sync::watch::channel(0).0,
        });
        let worker = Arc::clone(&syncer);
        std::thread::Builder::new()
            .name("store-syncer".into())
            .spawn(move || worker.run())?;
        Ok(syncer)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the counters torn (each
        // update is one assignment), so a poisoned lock is used as it is.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks for a sync of `file` covering everything appended to it so far;
    /// returns the request's ticket.
    pub fn request(&self, file: &Arc<File>) -> u64 {
        let mut s = self.lock();
        s.requested += 1;
        if !s.file.as_ref().is_some_and(|f| Arc::ptr_eq(f, file)) {
            s.file = Some(Arc::clone(file));
        }
        let ticket = s.requested;
        drop(s);
        self.wake.notify_one();
        ticket
    }

    /// The writer thread synced the WAL itself (a sync that is never
    /// deferred): every request made before it is durable.
    pub fn synced_in_place(&self, covered: u64) {
        let done = {
            let mut s = self.lock();
            s.durable = s.durable.max(covered);
            take_settled(&mut s)
        };
        self.publish_and_run(done, Ok(()));
    }

    /// The latest ticket handed out.
    pub fn latest(&self) -> u64 {
        self.lock().requested
    }

    /// Why the store stopped, if a sync failed.
    pub fn failure(&self) -> Option<StoreError> {
        self.lock().failed.as_deref().map(sync_failed)
    }

    /// Runs `done` once every request up to `ticket` is durable (at once if it
    /// is), or with the error once a sync failed.
    pub fn after(&self, ticket: u64, done: Completion) {
        let mut s = self.lock();
        if let Some(detail) = &s.failed {
            let err = sync_failed(detail);
            drop(s);
            done(Err(err));
        } else if s.durable >= ticket {
            drop(s);
            done(Ok(()));
        } else {
            s.waiting.push_back((ticket, done));
        }
    }

    /// Resolves once everything committed so far is durable: a caller that
    /// read the store waits here before acting on what it read.
    pub async fn settled(&self) -> Result<(), StoreError> {
        let goal = self.latest();
        let mut rx = self.durable_tx.subscribe();
        // The sender lives as long as `self`, which outlives this call.
        let _ = rx.wait_for(|durable| *durable >= goal).await;
        match self.failure() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// Ends the syncing thread once everything requested is durable.
    pub fn stop(&self) {
        self.lock().stopping = true;
        self.wake.notify_one();
    }

    fn run(&self) {
        loop {
            let (file, goal) = {
                let mut s = self.lock();
                while s.requested == s.durable && s.failed.is_none() && !s.stopping {
                    s = self
                        .wake
                        .wait(s)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                if s.failed.is_some() || (s.stopping && s.requested == s.durable) {
                    return;
                }
                (s.file.clone(), s.requested)
            };
            let started = Instant::now();
            let synced = match &file {
                Some(file) => file.sync_data().map_err(|e| e.to_string()),
                None => Err("no WAL file to sync".to_owned()),
            };
            crate::metrics::writer::wal_sync(started.elapsed());
            let (done, outcome) = {
                let mut s = self.lock();
                match synced {
                    Ok(()) => {
                        s.durable = s.durable.max(goal);
                        (take_settled(&mut s), Ok(()))
                    }
                    Err(detail) => {
                        tracing::error!(
                            error = %detail,
                            "syncing the database's write-ahead log failed; the store stops \
                             taking writes until the server is restarted"
                        );
                        let err = sync_failed(&detail);
                        s.failed = Some(detail);
                        (s.waiting.drain(..).map(|(_, d)| d).collect(), Err(err))
                    }
                }
            };
            self.publish_and_run(done, outcome);
        }
    }

    fn publish_and_run(&self, done: Vec<Completion>, outcome: Result<(), StoreError>) {
        let durable = {
            let s = self.lock();
            if s.failed.is_some() {
                u64::MAX
            } else {
                s.durable
            }
        };
        self.durable_tx.send_if_modified(|d| {
            let moved = *d != durable;
            *d = durable;
            moved
        });
        for d in done {
            d(outcome.clone());
        }
    }
}

/// The completions whose ticket is durable now, in order.
fn take_settled(s: &mut State) -> Vec<Completion> {
    let mut done = Vec::new();
    while s.waiting.front().is_some_and(|(t, _)| *t <= s.durable) {
        if let Some((_, d)) = s.waiting.pop_front() {
            done.push(d);
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    const WAIT: Duration = Duration::from_secs(10);

    fn reporter(tx: &mpsc::Sender<Result<(), StoreError>>) -> Completion {
        let tx = tx.clone();
        Box::new(move |r| {
            let _ = tx.send(r);
        })
    }

    #[test]
    fn a_completion_runs_only_once_a_sync_covers_its_ticket() {
        let syncer = Syncer::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(File::create(dir.path().join("wal")).unwrap());
        let (tx, rx) = mpsc::channel();
        // Nothing asked yet: a ticket no one has requested is never synced.
        syncer.after(1, reporter(&tx));
        assert!(rx.try_recv().is_err());
        assert_eq!(syncer.request(&file), 1);
        rx.recv_timeout(WAIT).unwrap().unwrap();
        // What is durable already completes at once, on the caller's thread.
        syncer.after(1, reporter(&tx));
        rx.try_recv().unwrap().unwrap();
        // A sync the writer made itself covers what it says.
        syncer.after(2, reporter(&tx));
        syncer.synced_in_place(2);
        rx.try_recv().unwrap().unwrap();
        assert!(syncer.failure().is_none());
        syncer.stop();
    }

    #[test]
    fn a_failed_sync_fails_every_waiting_and_later_caller() {
        let syncer = Syncer::start().unwrap();
        // fdatasync on /dev/null fails (EINVAL), as a sync on a failing disk does.
        let file = Arc::new(File::open("/dev/null").unwrap());
        let (tx, rx) = mpsc::channel();
        let ticket = syncer.request(&file);
        syncer.after(ticket, reporter(&tx));
        let err = rx.recv_timeout(WAIT).unwrap().unwrap_err();
        assert!(err.to_string().contains("restart the server"), "{err}");
        // Later commits, even ones no sync was asked for, are refused.
        syncer.after(0, reporter(&tx));
        assert!(rx.try_recv().unwrap().is_err());
        assert!(syncer.failure().is_some());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert!(rt.block_on(syncer.settled()).is_err());
    }

    #[test]
    fn a_read_settles_once_what_it_could_see_is_durable() {
        let syncer = Syncer::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(File::create(dir.path().join("wal")).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Nothing committed: settled at once.
            syncer.settled().await.unwrap();
            for _ in 0..50 {
                let ticket = syncer.request(&file);
                tokio::time::timeout(WAIT, syncer.settled())
                    .await
                    .unwrap()
                    .unwrap();
                assert!(syncer.lock().durable >= ticket);
            }
        });
        syncer.stop();
    }
}
