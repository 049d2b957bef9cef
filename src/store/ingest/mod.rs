//! The webhook's one transaction, on the hot path: the delivery
//! row, the repository and session (created on first sight), the task in
//! `queued`, its outbox entry, its history and the audit events, all or nothing.
//!
//! Deliveries are ingested in batches (the group-commit writer hands over what
//! arrived together): one round of lookups for the whole batch, every decision
//! made in memory in arrival order (so duplicates inside a batch are found too),
//! then one multi-row INSERT per table. A single delivery is a batch of one, so
//! there is only one code path.
//!
//! [`lookups`] reads what the store holds for the whole batch
//! ([`lookups::BatchLookups`]), [`decide`] decides each delivery against it,
//! and [`rows`] collects the rows those decisions write and writes them
//! ([`rows::BatchRows`]).

mod decide;
mod kept;
mod lookups;
mod refuse;
mod rows;
mod unnest;

use self::lookups::BatchLookups;
use self::rows::BatchRows;
use super::{now, DbConn, StoreError};
use crate::domain::{IngestRequest, RepoKey, ResourceKey, TaskId};

pub use crate::domain::limits::OUTBOX_CAPACITY;

/// What the transaction did; the webhook maps it to a status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestOutcome {
    Accepted {
        task_id: TaskId,
        state: String,
    },
    Duplicate {
        task_id: Option<TaskId>,
        state: Option<String>,
    },
    Ignored {
        reason: String,
        task_id: Option<TaskId>,
    },
    RepositoryDisabled {
        repo_key: RepoKey,
    },
    /// Refused: the session's outbox is full. `task_id`: the refused task
    /// that holds the comment and its one receipt.
    OutboxFull {
        session_key: ResourceKey,
        task_id: Option<TaskId>,
    },
    /// Refused: the commenter started `limit` tasks in the last hour
    /// (`user_triggers_per_hour`). `task_id`: the refused task, with its one
    /// receipt.
    RateLimited {
        task_id: TaskId,
        limit: i64,
    },
    /// Refused: the delivery id was stored already with another payload.
    /// The first delivery stands (`task_id`: its task); nothing of this one
    /// is kept but the audit of the conflict.
    DeliveryConflict {
        task_id: Option<TaskId>,
    },
}

/// What intake enforces besides the store's own limits (all off by
/// default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IngestRules {
    /// Tasks one commenter may start per hour (`user_triggers_per_hour`;
    /// 0: no limit).
    pub user_triggers_per_hour: i64,
}

/// Ingests one delivery in the caller's transaction.
pub fn ingest(conn: &mut DbConn, req: &IngestRequest) -> Result<IngestOutcome, StoreError> {
    ingest_with(conn, req, &IngestRules::default())
}

/// [`ingest`] under `rules`.
pub fn ingest_with(
    conn: &mut DbConn,
    req: &IngestRequest,
    rules: &IngestRules,
) -> Result<IngestOutcome, StoreError> {
    ingest_batch_with(conn, std::slice::from_ref(req), rules)?
        .pop()
        .ok_or_else(|| StoreError::Query("an ingest batch of one gave no outcome".into()))
}

/// Ingests deliveries in arrival order, in the caller's transaction: the
/// outcomes are the same as ingesting them one after the other.
pub fn ingest_batch(
    conn: &mut DbConn,
    reqs: &[IngestRequest],
) -> Result<Vec<IngestOutcome>, StoreError> {
    ingest_batch_with(conn, reqs, &IngestRules::default())
}

/// [`ingest_batch`] under `rules`.
pub fn ingest_batch_with(
    conn: &mut DbConn,
    reqs: &[IngestRequest],
    rules: &IngestRules,
) -> Result<Vec<IngestOutcome>, StoreError> {
    let at = now();
    if let DbConn::Pg(c) = conn {
        // Every lookup and write of the batch goes by a key its table
        // indexes; the generic plans PostgreSQL keeps for the batch's
        // statements are made here, and must not be sequential scans
        // chosen while a table was small (`lookups::InKeys`). Planning the
        // lookups for their own keys at every batch instead cost 15% of
        // PostgreSQL's time. (A statement no index serves still scans: this
        // only prices the scan out where an index can answer.)
        use diesel::connection::SimpleConnection;
        c.batch_execute("SET LOCAL enable_seqscan = off")?;
    }
    let mut lookups = BatchLookups::load(conn, reqs, rules)?;
    let mut rows = BatchRows::default();
    let mut outcomes = Vec::with_capacity(reqs.len());
    for req in reqs {
        outcomes.push(decide::delivery(req, rules, &mut lookups, &mut rows, &at)?);
    }
    rows.write(conn, &at)?;
    Ok(outcomes)
}
