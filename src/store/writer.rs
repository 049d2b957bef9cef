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
//!
//! On SQLite the commit's sync runs on the store's syncer thread
//! (`super::durable`) while this thread goes on with the next batch; a batch's
//! callers are answered once a sync covering its commit has finished.

use super::checkpointer::{self, Handoff};
use super::durable::{Completion, Syncer};
use super::ingest::{self, IngestOutcome, IngestRules};
use super::{DbConn, DbManager, StoreError};
use crate::domain::IngestRequest;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::sync::Arc;
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
        let mark = crate::metrics::pending_mark();
        let outcome = conn.transaction(|c| f(c));
        if outcome.is_err() {
            crate::metrics::rollback_to(mark);
        }
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

/// Where a delivery's outcome goes once its batch has committed (or failed).
type IngestReply = oneshot::Sender<Result<IngestOutcome, StoreError>>;

/// A webhook delivery to ingest: these are batched into one `ingest_batch`.
struct IngestJob {
    req: IngestRequest,
    reply: IngestReply,
}

impl IngestJob {
    /// The same delivery as an ordinary operation (for the one-by-one path).
    fn into_op(self, rules: IngestRules) -> Box<dyn WriteOp> {
        let req = self.req;
        Box::new(TypedOp {
            f: move |c: &mut DbConn| ingest::ingest_with(c, &req, &rules),
            outcome: None,
            reply: self.reply,
        })
    }
}

enum Job {
    Op(Box<dyn WriteOp>),
    Ingest(Box<IngestJob>),
}

/// Handle to the writer threads. Cloning is cheap.
#[derive(Clone)]
pub struct Writer {
    tx: Sender<Job>,
}

/// Bumped by the writer threads after each transaction they commit (see
/// [`super::Store::changes`]): once per batch, however many writes it held.
pub type Changes = std::sync::Arc<tokio::sync::watch::Sender<u64>>;

fn bump(changes: &Changes) {
    changes.send_modify(|n| *n = n.wrapping_add(1));
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
    /// What intake enforces (the commenters' hourly limit).
    pub ingest: IngestRules,
}

impl Writer {
    /// Starts the writer threads; `syncer`, on SQLite, takes their commit
    /// syncs.
    pub fn start(
        pool: r2d2::Pool<DbManager>,
        settings: WriterSettings,
        changes: Changes,
        syncer: Option<Arc<Syncer>>,
        handoff: Option<Arc<Handoff>>,
    ) -> std::io::Result<Writer> {
        let (tx, rx) = crossbeam_channel::bounded::<Job>(settings.queue_capacity.max(1));
        for n in 0..settings.threads.max(1) {
            let rx = rx.clone();
            let pool = pool.clone();
            let changes = changes.clone();
            let batch_max = settings.batch_max.max(1);
            let rules = settings.ingest;
            let syncer = syncer.clone();
            let handoff = handoff.clone();
            std::thread::Builder::new()
                .name(format!("store-writer-{n}"))
                .spawn(move || {
                    let done = Settle {
                        syncer: syncer.clone(),
                        handoff,
                    };
                    super::walvfs::defer_commit_syncs(syncer);
                    writer_loop(&rx, &pool, batch_max, &changes, rules, &done);
                    super::walvfs::defer_commit_syncs(None);
                    if let Some(syncer) = &done.syncer {
                        syncer.stop();
                    }
                })?;
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
        self.send(Job::Op(op))?;
        rx.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the store writer stopped mid-write".into(),
            ))
        })
    }

    /// Queues one webhook delivery; deliveries that arrive together are
    /// ingested as one batch. Resolves after the commit.
    pub async fn ingest(&self, req: IngestRequest) -> Result<IngestOutcome, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.send(Job::Ingest(Box::new(IngestJob { req, reply })))?;
        rx.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the store writer stopped mid-write".into(),
            ))
        })
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        match self.tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(StoreError::Unavailable(
                "the store's write queue is full; the database is not keeping up".into(),
            )),
            Err(TrySendError::Disconnected(_)) => Err(StoreError::Unavailable(
                "the store writer has stopped".into(),
            )),
        }
    }
}

/// Where a committed transaction's callers wait for its sync.
struct Settle {
    syncer: Option<Arc<Syncer>>,
    /// The checkpointer's request to take the WAL's last checkpoint.
    handoff: Option<Arc<Handoff>>,
}

impl Settle {
    /// Runs `done` once everything committed so far is durable.
    fn after_commit(&self, done: Completion) {
        match &self.syncer {
            Some(syncer) => syncer.after(syncer.latest(), done),
            None => done(Ok(())),
        }
    }

    /// After a commit: the checkpoint that lets the WAL start over at the
    /// next transaction, when the checkpointer has copied nearly all of it.
    /// A failed one changes nothing committed; the next offer tries again.
    fn checkpoint_if_due(&self, conn: &mut DbConn) {
        if self.handoff.as_ref().is_some_and(|h| h.take()) {
            if let Err(e) = checkpointer::pass(conn) {
                tracing::debug!(error = %e, "the writer's WAL checkpoint failed");
            }
        }
    }

    /// Why nothing may be written any more (a failed sync).
    fn failure(&self) -> Option<StoreError> {
        self.syncer.as_ref().and_then(|s| s.failure())
    }
}

fn writer_loop(
    rx: &Receiver<Job>,
    pool: &r2d2::Pool<DbManager>,
    batch_max: usize,
    changes: &Changes,
    rules: IngestRules,
    settle: &Settle,
) {
    // Task transitions written here are counted in the metrics once committed.
    crate::metrics::collect_transitions_on_this_thread();
    let mut ops: Vec<Box<dyn WriteOp>> = Vec::with_capacity(batch_max);
    // The batch's deliveries and, in the same order, who waits for each.
    let mut reqs: Vec<IngestRequest> = Vec::with_capacity(batch_max);
    let mut replies: Vec<IngestReply> = Vec::with_capacity(batch_max);
    while let Ok(first) = rx.recv() {
        let mut take = |job: Job| match job {
            Job::Op(op) => ops.push(op),
            Job::Ingest(job) => {
                let IngestJob { req, reply } = *job;
                reqs.push(req);
                replies.push(reply);
            }
        };
        take(first);
        let mut n = 1;
        while n < batch_max {
            match rx.try_recv() {
                Ok(job) => {
                    take(job);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        if let Some(err) = settle.failure() {
            fail_all(&mut ops, &mut reqs, &mut replies, &err);
            continue;
        }
        let mut conn = match pool.get() {
            Ok(conn) => conn,
            Err(e) => {
                let err =
                    StoreError::Unavailable(format!("no database connection for writing: {e}"));
                fail_all(&mut ops, &mut reqs, &mut replies, &err);
                // Do not spin on a database that is down.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        // First without a savepoint around the deliveries (a savepoint copies
        // every page it touches into the statement journal); if the batch
        // fails, that transaction is rolled back whole and the batch runs
        // again the careful way, so the outcomes are the same either way.
        let committed = match try_commit(&mut conn, &reqs, &mut ops, false, &rules) {
            Err(Retry::Carefully) => try_commit(&mut conn, &reqs, &mut ops, true, &rules),
            other => other,
        };
        let committed = committed.map_err(|e| match e {
            Retry::Carefully => StoreError::Unavailable("the batch failed twice".into()),
            Retry::No(e) => e,
        });
        match committed {
            Ok(outcomes) => {
                reqs.clear();
                let replies = std::mem::take(&mut replies);
                let done = std::mem::take(&mut ops);
                let changes = Arc::clone(changes);
                settle.after_commit(Box::new(move |durable| {
                    if durable.is_ok() {
                        // Before the answers: whoever waits for this commit
                        // (the receipts worker, the live view) starts while
                        // they go out.
                        bump(&changes);
                    }
                    for (reply, outcome) in replies.into_iter().zip(outcomes) {
                        let _ = reply.send(durable.clone().and(outcome));
                    }
                    for op in done {
                        op.finish(durable.clone());
                    }
                }));
                settle.checkpoint_if_due(&mut conn);
            }
            Err(e) if ops.len() + replies.len() == 1 && !matches!(e, StoreError::Contended(_)) => {
                fail_all(&mut ops, &mut reqs, &mut replies, &unavailable(e));
            }
            Err(e) => {
                tracing::debug!(
                    batch = ops.len() + replies.len(),
                    error = %e,
                    "group commit rolled back; committing its operations one by one"
                );
                let singles: Vec<Box<dyn WriteOp>> = reqs
                    .drain(..)
                    .zip(replies.drain(..))
                    .map(|(req, reply)| IngestJob { req, reply }.into_op(rules))
                    .chain(ops.drain(..))
                    .collect();
                for op in singles {
                    commit_alone(&mut conn, op, changes, settle);
                }
            }
        }
    }
}

/// Tells everyone waiting on the batch that it was not stored.
fn fail_all(
    ops: &mut Vec<Box<dyn WriteOp>>,
    reqs: &mut Vec<IngestRequest>,
    replies: &mut Vec<IngestReply>,
    err: &StoreError,
) {
    for op in ops.drain(..) {
        op.finish(Err(err.clone()));
    }
    for reply in replies.drain(..) {
        let _ = reply.send(Err(err.clone()));
    }
    reqs.clear();
}

/// Why [`try_commit`] did not commit.
enum Retry {
    /// The deliveries failed as one batch outside a savepoint: run it again
    /// with `careful` (the transaction was rolled back, nothing is stored).
    Carefully,
    No(StoreError),
}

impl From<diesel::result::Error> for Retry {
    fn from(e: diesel::result::Error) -> Self {
        Retry::No(e.into())
    }
}

/// One transaction holding the batch's deliveries and operations.
/// Outside `careful`, the deliveries are ingested as one batch without a
/// savepoint of their own, and any failure of it rolls the transaction back.
fn try_commit(
    conn: &mut DbConn,
    reqs: &[IngestRequest],
    ops: &mut [Box<dyn WriteOp>],
    careful: bool,
    rules: &IngestRules,
) -> Result<Vec<Result<IngestOutcome, StoreError>>, Retry> {
    crate::metrics::transaction_finished(false);
    let timer = TransactionTimer::start();
    let committed = conn.write_transaction(|c| {
        let outcomes = if careful || reqs.is_empty() {
            ingest_all(c, reqs, rules).map_err(Retry::No)?
        } else {
            match ingest::ingest_batch_with(c, reqs, rules) {
                Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
                Err(StoreError::Contended(m)) => return Err(Retry::No(StoreError::Contended(m))),
                Err(_) => return Err(Retry::Carefully),
            }
        };
        for op in ops.iter_mut() {
            if !op.apply(c) {
                // Roll back the whole transaction: its locks are what the
                // other writer waits for.
                return Err(Retry::No(StoreError::Contended(
                    "an operation lost a race".into(),
                )));
            }
        }
        Ok(outcomes)
    });
    timer.finish(reqs.len() + ops.len());
    crate::metrics::transaction_finished(committed.is_ok());
    committed
}

/// Measures one writer transaction for the store's metrics.
struct TransactionTimer {
    wall: std::time::Instant,
    cpu: Duration,
}

impl TransactionTimer {
    fn start() -> TransactionTimer {
        TransactionTimer {
            wall: std::time::Instant::now(),
            cpu: crate::metrics::writer::thread_cpu(),
        }
    }

    fn finish(self, operations: usize) {
        let cpu = crate::metrics::writer::thread_cpu().saturating_sub(self.cpu);
        crate::metrics::writer::transaction(operations, self.wall.elapsed(), cpu);
    }
}

/// The batch's deliveries, each with its own result. One `ingest_batch` in a
/// savepoint; if it fails as a whole (say a unique key that another instance
/// just took), each delivery is ingested alone in its own savepoint, so one
/// bad delivery cannot fail the others.
fn ingest_all(
    c: &mut DbConn,
    reqs: &[IngestRequest],
    rules: &IngestRules,
) -> Result<Vec<Result<IngestOutcome, StoreError>>, StoreError> {
    if reqs.is_empty() {
        return Ok(Vec::new());
    }
    let mark = crate::metrics::pending_mark();
    let batch = c.transaction(|c| ingest::ingest_batch_with(c, reqs, rules));
    if batch.is_err() {
        crate::metrics::rollback_to(mark);
    }
    match batch {
        Ok(outcomes) => return Ok(outcomes.into_iter().map(Ok).collect()),
        Err(StoreError::Contended(m)) => return Err(StoreError::Contended(m)),
        Err(e) if reqs.len() == 1 => return Ok(vec![Err(e)]),
        Err(e) => tracing::debug!(error = %e, "batch ingest failed; ingesting one by one"),
    }
    let mut out = Vec::with_capacity(reqs.len());
    for req in reqs {
        let mark = crate::metrics::pending_mark();
        let one = c.transaction(|c| ingest::ingest_with(c, req, rules));
        if one.is_err() {
            crate::metrics::rollback_to(mark);
        }
        match one {
            Err(StoreError::Contended(m)) => return Err(StoreError::Contended(m)),
            other => out.push(other),
        }
    }
    Ok(out)
}

fn unavailable(e: StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(_) | StoreError::Contended(_) => e,
        other => StoreError::Unavailable(format!("commit failed: {other}")),
    }
}
/// Commits one operation in its own transaction, retrying contention with a
/// short, growing pause.
fn commit_alone(conn: &mut DbConn, op: Box<dyn WriteOp>, changes: &Changes, settle: &Settle) {
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
    if result.is_err() {
        for op in single {
            op.finish(result.clone());
        }
        return;
    }
    let changes = Arc::clone(changes);
    settle.after_commit(Box::new(move |durable| {
        if durable.is_ok() {
            bump(&changes);
        }
        for op in single {
            op.finish(durable.clone());
        }
    }));
}

fn commit_batch(conn: &mut DbConn, batch: &mut [Box<dyn WriteOp>]) -> Result<(), StoreError> {
    crate::metrics::transaction_finished(false);
    let timer = TransactionTimer::start();
    let committed = conn.write_transaction(|c| {
        for op in batch.iter_mut() {
            if !op.apply(c) {
                // Roll back the whole transaction: its locks are what the
                // other writer waits for.
                return Err(StoreError::Contended("an operation lost a race".into()));
            }
        }
        Ok::<(), StoreError>(())
    });
    timer.finish(batch.len());
    crate::metrics::transaction_finished(committed.is_ok());
    committed.map_err(unavailable)
}
