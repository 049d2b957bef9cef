//! Wake-ups between server processes on one PostgreSQL (`LISTEN/NOTIFY`).
//!
//! A process that committed work another process may have to act on (a
//! task queued for a repository, a lease given back, a command for a
//! session) publishes a [`Signal`] after the commit; every other process
//! listening wakes that repository's or session's actor at once. Signals
//! are hints: one lost while a connection is down changes nothing but the
//! delay, because each process's registry sweep still finds all work in the
//! tables. SQLite has one process, whose own commits wake it directly.
//!
//! Both sides hold a connection of their own, outside the writer:
//! - the notifier sends each signal with `pg_notify` in a transaction of its
//!   own. A NOTIFY inside the writer's transaction would make every commit
//!   that carries one take PostgreSQL's cluster-wide notify lock until its
//!   WAL flush ends, one writer after the other; a transaction that only
//!   notifies writes no WAL and waits for no flush.
//! - the listener polls its connection for notifications every [`POLL`]:
//!   diesel hands out the notifications libpq has read but not the socket to
//!   wait on, and a poll is one non-blocking read.

use super::StoreError;
use crate::domain::{RepoKey, ResourceKey, TaskId};
use crossbeam_channel::{Receiver, Sender};
use diesel::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The channel every process of a deployment listens on.
pub const CHANNEL: &str = "codex_bridge_work";

/// How often the listener reads its connection for notifications.
pub const POLL: Duration = Duration::from_millis(25);

/// Between two attempts to reconnect a lost connection.
const RECONNECT: Duration = Duration::from_secs(1);

/// How long the notifier gathers signals before it sends them.
const COALESCE: Duration = Duration::from_millis(10);

/// Signals a notifier may hold before it drops new ones (each is a hint;
/// the sweep finds the work anyway).
const BACKLOG: usize = 4096;

/// Work committed that another process may have to act on.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Signal {
    /// The repository has work to schedule: a task queued, or its lease
    /// given back.
    Repo { repo_key: RepoKey },
    /// The session has a command, an edit or a deletion to carry out now.
    Session {
        session_key: ResourceKey,
        repo_key: RepoKey,
    },
    /// An approval of the task was decided: the session waiting for it
    /// goes on.
    Approval {
        session_key: ResourceKey,
        repo_key: RepoKey,
        task_id: TaskId,
    },
    /// An operator aborted the task: the session running its turn
    /// interrupts it.
    Abort {
        session_key: ResourceKey,
        repo_key: RepoKey,
        task_id: TaskId,
    },
    /// Work may wait anywhere (the deployment's pause was lifted): each
    /// process sweeps the store as its registry does on a timer.
    Sweep,
    /// A remote worker's call was answered, got events, or was lost with
    /// its lease: the process waiting for it looks again.
    WorkerCall { call_id: String },
    /// A call was queued for the repository: a poll of the worker leasing
    /// it, held open on any process, looks again.
    WorkerQueue { repository: String },
    /// A worker's leases ended (it was revoked): every process's waiting
    /// calls look again.
    WorkerLeaseEnded,
}

/// A signal as it travels: who sent it, so a process skips its own.
#[derive(Serialize, Deserialize, Debug)]
struct Envelope {
    from: String,
    #[serde(flatten)]
    signal: Signal,
}

/// Sends signals from a thread and connection of its own.
#[derive(Clone)]
pub(super) struct Notifier {
    tx: Sender<Signal>,
}

impl Notifier {
    pub(super) fn start(url: String, origin: String) -> Result<Notifier, StoreError> {
        let (tx, rx) = crossbeam_channel::bounded(BACKLOG);
        std::thread::Builder::new()
            .name("pg-notifier".into())
            .spawn(move || notify_loop(&url, &origin, &rx))
            .map_err(|e| {
                StoreError::Unavailable(format!("cannot start the notifier thread: {e}"))
            })?;
        Ok(Notifier { tx })
    }

    /// Queues `signal` for sending; never waits (a full backlog drops it).
    pub(super) fn send(&self, signal: Signal) {
        if self.tx.try_send(signal).is_err() {
            tracing::debug!("signal backlog full; the registry sweep finds that work");
        }
    }
}

fn notify_loop(url: &str, origin: &str, rx: &Receiver<Signal>) {
    let mut conn: Option<PgConnection> = None;
    while let Ok(first) = rx.recv() {
        // What queues within a moment goes out with it, each signal once:
        // under a stream of webhooks one statement carries many, instead of
        // one round trip (and one wake-up of every listener) per webhook.
        std::thread::sleep(COALESCE);
        let mut batch = std::collections::BTreeSet::from([first]);
        batch.extend(rx.try_iter());
        if conn.is_none() {
            conn = PgConnection::establish(url)
                .map_err(|e| tracing::warn!(error = %e, "notifier cannot connect; signals dropped until it can"))
                .ok();
        }
        let Some(c) = conn.as_mut() else {
            std::thread::sleep(RECONNECT);
            continue;
        };
        let payloads: Vec<String> = batch
            .into_iter()
            .filter_map(|signal| {
                serde_json::to_string(&Envelope {
                    from: origin.to_owned(),
                    signal,
                })
                .ok()
            })
            .collect();
        let sent = diesel::sql_query("SELECT pg_notify($1, p) FROM unnest($2) AS p")
            .bind::<diesel::sql_types::Text, _>(CHANNEL)
            .bind::<diesel::sql_types::Array<diesel::sql_types::Text>, _>(&payloads)
            .execute(c);
        if let Err(e) = sent {
            tracing::warn!(error = %e, "notifier lost its connection; reconnecting");
            conn = None;
        }
    }
}

/// Listens for other processes' signals on a thread and connection of its
/// own, for as long as the process runs, and hands each to `on`.
pub(super) fn listen(
    url: String,
    origin: String,
    wanted: impl Fn() -> bool + Send + 'static,
    on: impl Fn(Signal) + Send + 'static,
) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("pg-listener".into())
        .spawn(move || {
            while wanted() {
                match listening(&url) {
                    Ok(mut conn) => {
                        tracing::info!(
                            channel = CHANNEL,
                            "listening for other server processes' signals"
                        );
                        match receive(&mut conn, &origin, &wanted, &on) {
                            Ok(()) => return,
                            Err(e) => {
                                tracing::warn!(error = %e, "listener lost its connection; reconnecting")
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "listener cannot connect; retrying"),
                }
                std::thread::sleep(RECONNECT);
            }
        })
        .map_err(|e| StoreError::Unavailable(format!("cannot start the listener thread: {e}")))?;
    Ok(())
}

fn listening(url: &str) -> Result<PgConnection, StoreError> {
    let mut conn = PgConnection::establish(url)
        .map_err(|e| StoreError::Unavailable(format!("cannot connect: {e}")))?;
    diesel::sql_query(format!("LISTEN {CHANNEL}")).execute(&mut conn)?;
    Ok(conn)
}

/// Hands on every signal that arrives until the connection fails (`Err`)
/// or nobody wants them any more (`Ok`).
fn receive(
    conn: &mut PgConnection,
    origin: &str,
    wanted: &impl Fn() -> bool,
    on: &impl Fn(Signal),
) -> Result<(), StoreError> {
    let mut idle = Duration::ZERO;
    while wanted() {
        let mut any = false;
        for note in conn.notifications_iter() {
            let note = note?;
            any = true;
            match serde_json::from_str::<Envelope>(&note.payload) {
                Ok(e) if e.from == origin => {}
                Ok(e) => on(e.signal),
                Err(e) => tracing::warn!(error = %e, "ignored a signal this version cannot read"),
            }
        }
        // A connection that died quietly reports nothing: ask it now and
        // then, so the listener reconnects instead of waiting forever.
        idle = if any { Duration::ZERO } else { idle + POLL };
        if idle >= Duration::from_secs(30) {
            diesel::sql_query("SELECT 1").execute(conn)?;
            idle = Duration::ZERO;
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}
