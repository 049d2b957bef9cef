//! Group commit: the one place where rows are written.
//!
//! SQLite has one writer at a time, and every durable commit costs an fsync. A
//! writer thread takes what has arrived (up to `batch_max` operations), runs each
//! in its own savepoint inside one transaction, commits once, and only then
//! answers every caller. Nobody is ever told "stored" before the commit that
//! stored it. If the batch as a whole fails (a lost connection), or one of its
//! operations lost a race with another writer (a deadlock or serialization
//! failure on PostgreSQL, where several writers run), the batch is rolled back
//! and every operation is run again alone, retrying contention a few times, so
//! one bad neighbour cannot fail the others.

use super::{DbConn, DbManager, StoreError};
use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::time::Duration;
use tokio::sync::oneshot;

/// One queued write: run (possibly twice, see the module doc), then told
/// whether its transaction committed.
trait WriteOp: Send {
    /// Runs the operation in its own savepoint; `false` if it lost a race and
    /// the whole transaction must be retried.
    fn apply(&mut self, conn: &mut DbConn) -> bool;
    fn finish(self: Box<Self>, committed: Result<(), StoreError>);
    fn reset(&mut self);
}

struct TypedOp<T, F> {
    f: F,
    outcome: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> WriteOp for TypedOp<T, F>
where
    T: Send,
    F: FnMut(&mut DbConn) -> Result<T, StoreError> + Send,
{
    fn apply(&mut self, conn: &mut DbConn) -> bool {
        // Its own savepoint: an error rolls back this operation only.
        let f = &mut self.f;
        let outcome = conn.transaction(|c| f(c));
        let contended = matches!(outcome, Err(StoreError::Contended(_)));
        self.outcome = Some(outcome);
        !contended
    }

    fn finish(self: Box<Self>, committed: Result<(), StoreError>) {
        let result = match committed {
            Ok(()) => self
                .outcome
                .unwrap_or_else(|| Err(StoreError::Unavailable("write was not applied".into()))),
            Err(e) => Err(e),
        };
        // The caller may have gone away (client disconnected); the write stands.
        let _ = self.reply.send(result);
    }

    fn reset(&mut self) {
        self.outcome = None;
    }
}

/// Handle to the writer threads. Cloning is cheap.
#[derive(Clone)]
pub struct Writer {
    tx: Sender<Box<dyn WriteOp>>,
}

/// Tuning of the group-commit writer.
#[derive(Clone, Copy, Debug)]
pub struct WriterSettings {
    /// Most operations committed together (1 = one commit per request).
    pub batch_max: usize,
    /// Writer threads; 1 for SQLite (it has one writer anyway), more for PostgreSQL.
    pub threads: usize,
    /// Operations that may wait for the writer before callers get 503.
    pub queue_capacity: usize,
}

impl Writer {
    pub fn start(pool: r2d2::Pool<DbManager>, settings: WriterSettings) -> std::io::Result<Writer> {
        let (tx, rx) =
            crossbeam_channel::bounded::<Box<dyn WriteOp>>(settings.queue_capacity.max(1));
        for n in 0..settings.threads.max(1) {
            let rx = rx.clone();
            let pool = pool.clone();
            let batch_max = settings.batch_max.max(1);
            std::thread::Builder::new()
                .name(format!("store-writer-{n}"))
                .spawn(move || writer_loop(&rx, &pool, batch_max))?;
        }
        Ok(Writer { tx })
    }

    /// Queues `f` and resolves after the transaction holding it committed (or failed).
    /// `f` may run more than once (each time in a fresh transaction), so it must
    /// not have side effects outside the connection.
    pub async fn submit<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&mut DbConn) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let op: Box<dyn WriteOp> = Box::new(TypedOp {
            f,
            outcome: None,
            reply,
        });
        match self.tx.try_send(op) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(StoreError::Unavailable(
                    "the store's write queue is full; the database is not keeping up".into(),
                ))
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(StoreError::Unavailable(
                    "the store writer has stopped".into(),
                ))
            }
        }
        rx.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the store writer stopped mid-write".into(),
            ))
        })
    }
}

fn writer_loop(rx: &Receiver<Box<dyn WriteOp>>, pool: &r2d2::Pool<DbManager>, batch_max: usize) {
    let mut batch: Vec<Box<dyn WriteOp>> = Vec::with_capacity(batch_max);
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let mut conn = match pool.get() {
            Ok(conn) => conn,
            Err(e) => {
                let err =
                    StoreError::Unavailable(format!("no database connection for writing: {e}"));
                for op in batch.drain(..) {
                    op.finish(Err(err.clone()));
                }
                // Do not spin on a database that is down.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let committed = commit_batch(&mut conn, &mut batch);
        let retry = match &committed {
            Err(StoreError::Contended(_)) => true,
            Err(_) => batch.len() > 1,
            Ok(()) => false,
        };
        if retry {
            tracing::debug!(
                batch = batch.len(),
                error = %committed.as_ref().err().map(ToString::to_string).unwrap_or_default(),
                "group commit rolled back; committing its operations one by one"
            );
            for op in batch.drain(..) {
                commit_alone(&mut conn, op);
            }
        } else {
            for op in batch.drain(..) {
                op.finish(committed.clone());
            }
        }
    }
}

/// Commits one operation in its own transaction, retrying contention with a
/// short, growing pause.
fn commit_alone(conn: &mut DbConn, op: Box<dyn WriteOp>) {
    let mut single = vec![op];
    let mut result = Err(StoreError::Contended("not run".into()));
    for attempt in 0..6u64 {
        for op in single.iter_mut() {
            op.reset();
        }
        result = commit_batch(conn, &mut single);
        if !matches!(result, Err(StoreError::Contended(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2 << attempt));
    }
    for op in single {
        op.finish(result.clone());
    }
}

fn commit_batch(conn: &mut DbConn, batch: &mut [Box<dyn WriteOp>]) -> Result<(), StoreError> {
    conn.write_transaction(|c| {
        for op in batch.iter_mut() {
            if !op.apply(c) {
                // Roll back the whole transaction: its locks are what the
                // other writer waits for.
                return Err(StoreError::Contended("an operation lost a race".into()));
            }
        }
        Ok::<(), StoreError>(())
    })
    .map_err(|e| match e {
        StoreError::Unavailable(_) | StoreError::Contended(_) => e,
        other => StoreError::Unavailable(format!("commit failed: {other}")),
    })
}
