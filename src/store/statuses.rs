//! The commit statuses the bridge owes Gitea for pull request tasks (a
//! durable outbox), and the commit each such task's workspace was checked
//! out at.
//!
//! A row is queued by the transition that asks for it, in that transition's
//! commit ([`on_transition`], what to queue being decided by
//! `domain::statuses`). The statuses worker then marks it `posting` before
//! its POST (the intent, compare-and-swap on the attempts count, so two
//! workers never both post it), and `posted`, `pending` with a later retry,
//! `superseded` or `failed` after it.

use super::schema::{commit_statuses, task_heads, tasks};
use super::{now, DbConn, StoreError};
use crate::domain::states::{CommitStatusState, StatusProgress};
use crate::domain::statuses::{intent_for, LastStatus, QueuedStatus};
use crate::domain::{RepoKey, ResourceKey, TaskId};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;

/// One status on its way into Gitea.
#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = commit_statuses)]
#[serde(rename_all = "camelCase")]
pub struct CommitStatusRow {
    /// Queue order: per commit, a higher id is newer.
    pub id: i64,
    pub task_id: TaskId,
    pub repo_key: RepoKey,
    pub resource_key: ResourceKey,
    pub sha: String,
    pub state: CommitStatusState,
    pub description: String,
    /// The task state whose transition queued it.
    pub task_state: TaskState,
    pub progress: StatusProgress,
    pub attempts: i64,
    pub next_attempt_at: Option<String>,
    pub last_error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// Records the commit a pull request task's workspace was checked out at,
/// for the statuses of its next turn (a later attempt records its own).
pub fn record_head(conn: &mut DbConn, task_id: &TaskId, sha: &str) -> Result<(), StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::insert_into(task_heads::table)
        .values((
            task_heads::task_id.eq(task_id),
            task_heads::sha.eq(sha),
            task_heads::recorded_at.eq(&at),
        ))
        .on_conflict(task_heads::task_id)
        .do_update()
        .set((task_heads::sha.eq(sha), task_heads::recorded_at.eq(&at)))
        .execute(c))?;
    Ok(())
}

/// Queues the status a task's move to `to` asks for, if any (called with
/// every transition, in its transaction). Only tasks with a recorded head
/// (pull requests whose workspace was prepared) ever get one, so an Issue's
/// transitions cost one read by primary key at most.
pub fn on_transition(
    conn: &mut DbConn,
    task_id: &TaskId,
    to: TaskState,
    error_code: Option<&str>,
) -> Result<(), StoreError> {
    if crate::domain::statuses::state_for(to).is_none() {
        return Ok(());
    }
    let head: Option<String> = with_conn!(conn, |c| task_heads::table
        .find(task_id)
        .select(task_heads::sha)
        .first(c)
        .optional())?;
    let Some(head) = head else {
        return Ok(());
    };
    let last = last_of_task(conn, task_id)?;
    let Some(intent) = intent_for(
        to,
        error_code,
        task_id,
        Some(&head),
        last.as_ref().map(|l| LastStatus {
            state: l.state,
            sha: &l.sha,
            description: &l.description,
        }),
    ) else {
        return Ok(());
    };
    let keys: Option<(RepoKey, ResourceKey)> = with_conn!(conn, |c| tasks::table
        .filter(tasks::task_id.eq(task_id))
        .select((tasks::repo_key, tasks::resource_key))
        .first(c)
        .optional())?;
    let Some((repo_key, resource_key)) = keys else {
        return Ok(());
    };
    let at = now();
    with_conn!(conn, |c| diesel::insert_into(commit_statuses::table)
        .values((
            commit_statuses::task_id.eq(task_id),
            commit_statuses::repo_key.eq(&repo_key),
            commit_statuses::resource_key.eq(&resource_key),
            commit_statuses::sha.eq(&intent.sha),
            commit_statuses::state.eq(intent.state),
            commit_statuses::description.eq(&intent.description),
            commit_statuses::task_state.eq(to),
            commit_statuses::progress.eq(StatusProgress::Pending),
            commit_statuses::created_at.eq(&at),
            commit_statuses::updated_at.eq(&at),
        ))
        .execute(c))?;
    Ok(())
}

fn last_of_task(
    conn: &mut DbConn,
    task_id: &TaskId,
) -> Result<Option<CommitStatusRow>, StoreError> {
    Ok(with_conn!(conn, |c| commit_statuses::table
        .filter(commit_statuses::task_id.eq(task_id))
        .order(commit_statuses::id.desc())
        .select(CommitStatusRow::as_select())
        .first(c)
        .optional())?)
}

/// Unfinished rows, as the literal condition of the partial index
/// `commit_statuses_open`: a planner uses a partial index only for a query
/// that contains its condition, so this is never a bound parameter.
pub const OPEN: &str = "commit_statuses.progress IN ('pending', 'posting')";

fn open_rows() -> diesel::expression::SqlLiteral<diesel::sql_types::Bool> {
    diesel::dsl::sql::<diesel::sql_types::Bool>(OPEN)
}

/// Rows due at `at` (pending, or left `posting` by a crash), in queue order.
pub fn due(conn: &mut DbConn, at: &str, limit: i64) -> Result<Vec<CommitStatusRow>, StoreError> {
    Ok(with_conn!(conn, |c| commit_statuses::table
        .filter(open_rows())
        .filter(
            commit_statuses::next_attempt_at
                .is_null()
                .or(commit_statuses::next_attempt_at.le(at)),
        )
        .order(commit_statuses::id.asc())
        .limit(limit)
        .select(CommitStatusRow::as_select())
        .load(c))?)
}

/// When the earliest unfinished row falls due after `at`: a retry, or a
/// claim running out (`None`: none waits). Rows due by `at` are not
/// counted: the pass at `at` took them, or they wait behind a claim that is.
pub fn next_due(conn: &mut DbConn, at: &str) -> Result<Option<String>, StoreError> {
    let next: Option<String> = with_conn!(conn, |c| commit_statuses::table
        .filter(open_rows())
        .filter(commit_statuses::next_attempt_at.gt(at))
        .select(diesel::dsl::min(commit_statuses::next_attempt_at))
        .first(c))?;
    Ok(next)
}

/// The rows of one commit of one repository from `from_id` on, in queue
/// order, as `domain::statuses::settle` decides on them at `at`.
pub fn of_commit(
    conn: &mut DbConn,
    repo_key: &RepoKey,
    sha: &str,
    from_id: i64,
    at: &str,
) -> Result<Vec<QueuedStatus>, StoreError> {
    let rows: Vec<(i64, StatusProgress, Option<String>)> = with_conn!(conn, |c| {
        commit_statuses::table
            .filter(commit_statuses::repo_key.eq(repo_key))
            .filter(commit_statuses::sha.eq(sha))
            .filter(commit_statuses::id.ge(from_id))
            .order(commit_statuses::id.asc())
            .select((
                commit_statuses::id,
                commit_statuses::progress,
                commit_statuses::next_attempt_at,
            ))
            .load(c)
    })?;
    Ok(rows
        .into_iter()
        .map(|(id, progress, until)| QueuedStatus {
            id,
            progress,
            in_flight: progress == StatusProgress::Posting
                && until.is_some_and(|until| until.as_str() > at),
        })
        .collect())
}

/// The intent before a POST: marks the row `posting`, counts the attempt
/// and claims the row until `claim_until` (no other worker posts it before
/// then; after a crash it is due again then), if it is still unfinished and
/// unclaimed with `attempts` as read. `false`: another worker (another
/// instance) took it, or it was finished meanwhile; do not post.
pub fn begin_post(
    conn: &mut DbConn,
    id: i64,
    attempts: i64,
    claim_until: &str,
) -> Result<bool, StoreError> {
    let at = now();
    let updated = with_conn!(conn, |c| diesel::update(
        commit_statuses::table
            .filter(commit_statuses::id.eq(id))
            .filter(commit_statuses::attempts.eq(attempts))
            .filter(open_rows())
            .filter(
                commit_statuses::next_attempt_at
                    .is_null()
                    .or(commit_statuses::next_attempt_at.le(&at)),
            )
    )
    .set((
        commit_statuses::progress.eq(StatusProgress::Posting),
        commit_statuses::attempts.eq(attempts + 1),
        commit_statuses::next_attempt_at.eq(claim_until),
        commit_statuses::updated_at.eq(&at),
    ))
    .execute(c))?;
    Ok(updated == 1)
}

/// What became of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    Posted,
    /// Not posted; tried again at the time given.
    Retry {
        error: &'a str,
        at: &'a str,
    },
    Failed {
        error: &'a str,
    },
}

/// Records what became of the attempt `attempts` of a row (as
/// [`begin_post`] counted it): `posted`, `failed`, or `pending` again with
/// the time of its retry. `false`: the row is no longer that attempt's
/// (its claim ran out and another worker took it), and is left as it is.
pub fn finish(
    conn: &mut DbConn,
    id: i64,
    attempts: i64,
    outcome: Outcome<'_>,
) -> Result<bool, StoreError> {
    let at = now();
    let (progress, error, retry_at) = match outcome {
        Outcome::Posted => (StatusProgress::Posted, None, None),
        Outcome::Retry { error, at } => (StatusProgress::Pending, Some(error), Some(at)),
        Outcome::Failed { error } => (StatusProgress::Failed, Some(error), None),
    };
    let updated = with_conn!(conn, |c| diesel::update(
        commit_statuses::table
            .filter(commit_statuses::id.eq(id))
            .filter(commit_statuses::attempts.eq(attempts))
            .filter(commit_statuses::progress.eq(StatusProgress::Posting))
    )
    .set((
        commit_statuses::progress.eq(progress),
        commit_statuses::last_error.eq(error),
        commit_statuses::next_attempt_at.eq(retry_at),
        commit_statuses::updated_at.eq(&at),
    ))
    .execute(c))?;
    Ok(updated == 1)
}

/// Marks an unfinished row `superseded` (never posted: a newer status of
/// its commit came first), unless a worker claimed it meanwhile. `false`:
/// it was finished or claimed.
pub fn supersede(conn: &mut DbConn, id: i64) -> Result<bool, StoreError> {
    use commit_statuses::{next_attempt_at, progress};
    let at = now();
    let unclaimed = progress.eq(StatusProgress::Pending).or(progress
        .eq(StatusProgress::Posting)
        .and(next_attempt_at.is_null().or(next_attempt_at.le(at.clone()))));
    let updated = with_conn!(conn, |c| diesel::update(
        commit_statuses::table
            .filter(commit_statuses::id.eq(id))
            .filter(unclaimed.clone())
    )
    .set((
        commit_statuses::progress.eq(StatusProgress::Superseded),
        commit_statuses::next_attempt_at.eq(None::<String>),
        commit_statuses::updated_at.eq(&at),
    ))
    .execute(c))?;
    Ok(updated == 1)
}

/// One row by id.
pub fn find(conn: &mut DbConn, id: i64) -> Result<Option<CommitStatusRow>, StoreError> {
    Ok(with_conn!(conn, |c| commit_statuses::table
        .find(id)
        .select(CommitStatusRow::as_select())
        .first(c)
        .optional())?)
}

/// Every row of a task, in queue order.
pub fn of_task(conn: &mut DbConn, task_id: &TaskId) -> Result<Vec<CommitStatusRow>, StoreError> {
    Ok(with_conn!(conn, |c| commit_statuses::table
        .filter(commit_statuses::task_id.eq(task_id))
        .order(commit_statuses::id.asc())
        .select(CommitStatusRow::as_select())
        .load(c))?)
}
