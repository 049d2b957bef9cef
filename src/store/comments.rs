//! What the bridge writes into Gitea threads, and proof of it: the
//! receipts (`taskId:status:<state>`), the agent's reply as observed and
//! verified (`taskId:reply`), and the one REST fallback (`taskId:rest_fallback`).
//!
//! A receipt row is `pending` from the moment its cause commits (the accept,
//! an abnormal end), `posting` while the worker writes it (the intent: after a
//! crash the worker looks for the marker before posting again), then `posted`,
//! `skipped` (no longer wanted) or `failed` (Gitea refused it for good).

use super::models::Comment;
use super::schema::{comments, tasks};
use super::{now, DbConn, StoreError};
use crate::domain::command::Command;
use crate::domain::states::{CommentKind, CommentStatus};
use crate::domain::{ResourceKey, TaskId};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;

/// The key of a task's reply row of `kind` (reply or REST fallback).
pub fn reply_key(task_id: &TaskId, kind: CommentKind) -> String {
    format!("{task_id}:{kind}")
}

/// The key of a task's receipt for `state` (`received` for the accept).
pub fn receipt_key(task_id: &TaskId, state: TaskState) -> String {
    format!("{task_id}:{RECEIPT_INFIX}{state}")
}

const RECEIPT_INFIX: &str = "status:";

/// The state a receipt's key was made for (see [`receipt_key`]).
pub fn receipt_state(comment_key: &str) -> Option<TaskState> {
    let (_, state) = comment_key.rsplit_once(RECEIPT_INFIX)?;
    TaskState::parse(state).ok()
}

/// The key of the comment announcing an approval the agent asked for.
pub fn approval_key(task_id: &TaskId, approval_id: &str) -> String {
    format!("{task_id}:approval:{approval_id}")
}

/// Queues a comment whose text is decided now (a command's answer, an
/// approval's announcement); a second call for the same key does nothing.
pub fn enqueue_note(
    conn: &mut DbConn,
    key: &str,
    task_id: &TaskId,
    resource_key: &ResourceKey,
    body: &str,
) -> Result<(), StoreError> {
    enqueue(
        conn,
        key,
        task_id,
        CommentKind::Answer,
        resource_key,
        Some(body),
    )
}

/// Queues a receipt; a second call for the same key does nothing.
pub fn enqueue_receipt(
    conn: &mut DbConn,
    task_id: &TaskId,
    resource_key: &ResourceKey,
    state: TaskState,
) -> Result<(), StoreError> {
    let key = receipt_key(task_id, state);
    enqueue(
        conn,
        &key,
        task_id,
        CommentKind::Receipt,
        resource_key,
        None,
    )
}

/// Queues `task_id`'s receipt for `state` with `detail` under its usual
/// text (the limit it reached, say). Written before or after the transition
/// that queues the plain receipt, the detail is kept while it is pending.
pub fn enqueue_receipt_detail(
    conn: &mut DbConn,
    task_id: &TaskId,
    resource_key: &ResourceKey,
    state: TaskState,
    detail: &str,
) -> Result<(), StoreError> {
    let key = receipt_key(task_id, state);
    enqueue(
        conn,
        &key,
        task_id,
        CommentKind::Receipt,
        resource_key,
        Some(detail),
    )?;
    with_conn!(conn, |c| diesel::update(
        comments::table
            .filter(comments::comment_key.eq(&key))
            .filter(comments::status.eq(CommentStatus::Pending))
    )
    .set(comments::body.eq(detail))
    .execute(c))?;
    Ok(())
}

/// Queues a `pending` row for the receipts worker; a second call for the
/// same key does nothing. `body`: text decided now (`None`: rendered when
/// posted).
fn enqueue(
    conn: &mut DbConn,
    key: &str,
    task_id: &TaskId,
    kind: CommentKind,
    resource_key: &ResourceKey,
    body: Option<&str>,
) -> Result<(), StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::insert_into(comments::table)
        .values((
            comments::comment_key.eq(key),
            comments::task_id.eq(task_id),
            comments::kind.eq(kind),
            comments::resource_key.eq(resource_key),
            comments::status.eq(CommentStatus::Pending),
            comments::body.eq(body),
            comments::created_at.eq(&at),
            comments::updated_at.eq(&at),
        ))
        .on_conflict_do_nothing()
        .execute(c))?;
    Ok(())
}

/// Queues the receipt of an abnormal end (called with every transition).
pub fn on_transition(
    conn: &mut DbConn,
    task_id: &TaskId,
    to_state: TaskState,
) -> Result<(), StoreError> {
    if !to_state.gets_receipt() {
        return Ok(());
    }
    let resource: Option<ResourceKey> = with_conn!(conn, |c| tasks::table
        .filter(tasks::task_id.eq(task_id))
        .select(tasks::resource_key)
        .first(c)
        .optional())?;
    match resource {
        Some(r) => enqueue_receipt(conn, task_id, &r, to_state),
        None => Ok(()),
    }
}

/// A receipt the worker should write now, with what it needs of its task.
#[derive(Debug, Clone)]
pub struct DueReceipt {
    pub row: Comment,
    pub state: TaskState,
    /// The task's `state_version` when the row was read: a decision about the
    /// task made on this row names it.
    pub state_version: i64,
    pub author: String,
    pub trigger_comment_id: Option<i64>,
    pub error_code: Option<String>,
    /// The task's command (an answer's marker depends on it).
    pub command: Option<Command>,
}

/// Unfinished rows, as the literal condition of the partial index
/// `comments_open` (migration 2026-11-30-000005): a planner uses a partial
/// index only for a query that contains its condition, so this is never a
/// bound parameter. With it the worker's queries read the unfinished rows
/// only, not every receipt ever written.
/// Kept as SQL text so that the query matches the partial index
/// `comments_open`, whose predicate is this exact list.
pub const OPEN: &str = "comments.status IN ('pending', 'posting')";

fn open_rows() -> diesel::expression::SqlLiteral<diesel::sql_types::Bool> {
    diesel::dsl::sql::<diesel::sql_types::Bool>(OPEN)
}

/// Receipts due at `at` (pending or left `posting` by a crash), oldest first.
pub fn due_receipts(
    conn: &mut DbConn,
    at: &str,
    limit: i64,
) -> Result<Vec<DueReceipt>, StoreError> {
    /// A receipt row with its task's state, author, trigger comment and error code.
    type Row = (
        Comment,
        TaskState,
        i64,
        String,
        Option<i64>,
        Option<String>,
        Option<Command>,
    );
    let rows: Vec<Row> = with_conn!(conn, |c| comments::table
        .inner_join(tasks::table.on(tasks::task_id.eq(comments::task_id)))
        .filter(comments::kind.eq_any([CommentKind::Receipt, CommentKind::Answer]))
        .filter(open_rows())
        .filter(
            comments::next_attempt_at
                .is_null()
                .or(comments::next_attempt_at.le(at)),
        )
        .order(comments::created_at.asc())
        .limit(limit)
        .select((
            Comment::as_select(),
            tasks::state,
            tasks::state_version,
            tasks::author,
            tasks::comment_id,
            tasks::error_code,
            tasks::command,
        ))
        .load(c))?;
    Ok(rows
        .into_iter()
        .map(
            |(row, state, state_version, author, trigger_comment_id, error_code, command)| {
                DueReceipt {
                    row,
                    state,
                    state_version,
                    author,
                    trigger_comment_id,
                    error_code,
                    command,
                }
            },
        )
        .collect())
}

/// When the earliest receipt waiting for a retry falls due (`None`: none
/// waits). Receipts due at once are not counted: the commit that queued them
/// woke the worker.
pub fn next_receipt_due(conn: &mut DbConn) -> Result<Option<String>, StoreError> {
    let next: Option<String> = with_conn!(conn, |c| comments::table
        .filter(comments::kind.eq_any([CommentKind::Receipt, CommentKind::Answer]))
        .filter(open_rows())
        .filter(comments::next_attempt_at.is_not_null())
        .select(diesel::dsl::min(comments::next_attempt_at))
        .first(c))?;
    Ok(next)
}

/// What became of one write into Gitea.
#[derive(Debug, Clone)]
pub struct Outcome<'a> {
    pub status: CommentStatus,
    pub comment_id: Option<i64>,
    pub html_url: Option<&'a str>,
    pub error: Option<&'a str>,
    /// When to try again (`pending` only).
    pub retry_at: Option<&'a str>,
    pub count_attempt: bool,
}

/// Back to `pending` with nothing else set: the worker tries again.
impl Default for Outcome<'_> {
    fn default() -> Self {
        Outcome {
            status: CommentStatus::Pending,
            comment_id: None,
            html_url: None,
            error: None,
            retry_at: None,
            count_attempt: false,
        }
    }
}

/// Records the outcome of a receipt or reply write.
pub fn mark(conn: &mut DbConn, key: &str, o: &Outcome<'_>) -> Result<(), StoreError> {
    let at = now();
    let bump: i64 = if o.count_attempt { 1 } else { 0 };
    with_conn!(conn, |c| diesel::update(comments::table.find(key))
        .set((
            comments::status.eq(o.status),
            comments::comment_id.eq(o.comment_id),
            comments::html_url.eq(o.html_url),
            comments::last_error.eq(o.error),
            comments::next_attempt_at.eq(o.retry_at),
            comments::attempts.eq(comments::attempts + bump),
            comments::updated_at.eq(&at),
        ))
        .execute(c))?;
    Ok(())
}

/// The intent before a receipt's write into Gitea: marks the row `posting`,
/// counts the attempt and claims it until `claim_until` (no other worker,
/// in this process or another, writes it before then; after a crash it is
/// due again then), if it is still unfinished, unclaimed and at `attempts`
/// as read. `false`: another worker took it or finished it; write nothing.
pub fn begin_post(
    conn: &mut DbConn,
    key: &str,
    attempts: i64,
    claim_until: &str,
) -> Result<bool, StoreError> {
    let at = now();
    let updated = with_conn!(conn, |c| diesel::update(
        comments::table
            .filter(comments::comment_key.eq(key))
            .filter(comments::attempts.eq(attempts))
            .filter(open_rows())
            .filter(
                comments::next_attempt_at
                    .is_null()
                    .or(comments::next_attempt_at.le(&at)),
            )
    )
    .set((
        comments::status.eq(CommentStatus::Posting),
        comments::attempts.eq(attempts + 1),
        comments::next_attempt_at.eq(claim_until),
        comments::updated_at.eq(&at),
    ))
    .execute(c))?;
    Ok(updated == 1)
}

/// Records what became of the attempt `attempts` (as [`begin_post`] counted
/// it). `false`: the row is no longer that attempt's (its claim ran out and
/// another worker took it), and is left as it is.
pub fn finish_post(
    conn: &mut DbConn,
    key: &str,
    attempts: i64,
    o: &Outcome<'_>,
) -> Result<bool, StoreError> {
    let at = now();
    let updated = with_conn!(conn, |c| diesel::update(
        comments::table
            .filter(comments::comment_key.eq(key))
            .filter(comments::attempts.eq(attempts))
            .filter(comments::status.eq(CommentStatus::Posting))
    )
    .set((
        comments::status.eq(o.status),
        comments::comment_id.eq(o.comment_id),
        comments::html_url.eq(o.html_url),
        comments::last_error.eq(o.error),
        comments::next_attempt_at.eq(o.retry_at),
        comments::updated_at.eq(&at),
    ))
    .execute(c))?;
    Ok(updated == 1)
}

/// Writes (or updates) the record of the agent's reply or the REST fallback.
#[expect(clippy::too_many_arguments, reason = "the columns of one reply record")]
pub fn record_reply(
    conn: &mut DbConn,
    task_id: &TaskId,
    kind: CommentKind,
    resource_key: &ResourceKey,
    turn_id: Option<&str>,
    status: CommentStatus,
    comment_id: Option<i64>,
    error: Option<&str>,
) -> Result<(), StoreError> {
    let at = now();
    let key = reply_key(task_id, kind);
    with_conn!(conn, |c| diesel::insert_into(comments::table)
        .values((
            comments::comment_key.eq(&key),
            comments::task_id.eq(task_id),
            comments::kind.eq(kind),
            comments::resource_key.eq(resource_key),
            comments::turn_id.eq(turn_id),
            comments::comment_id.eq(comment_id),
            comments::status.eq(status),
            comments::last_error.eq(error),
            comments::created_at.eq(&at),
            comments::updated_at.eq(&at),
        ))
        .on_conflict(comments::comment_key)
        .do_update()
        .set((
            comments::status.eq(status),
            comments::turn_id.eq(turn_id),
            comments::comment_id.eq(comment_id),
            comments::last_error.eq(error),
            comments::updated_at.eq(&at),
        ))
        .execute(c))?;
    Ok(())
}

/// One row by key.
pub fn find(conn: &mut DbConn, key: &str) -> Result<Option<Comment>, StoreError> {
    Ok(with_conn!(conn, |c| comments::table
        .find(key)
        .select(Comment::as_select())
        .first(c)
        .optional())?)
}

/// Every row of a task.
pub fn of_task(conn: &mut DbConn, task_id: &TaskId) -> Result<Vec<Comment>, StoreError> {
    Ok(with_conn!(conn, |c| comments::table
        .filter(comments::task_id.eq(task_id))
        .order(comments::created_at.asc())
        .select(Comment::as_select())
        .load(c))?)
}
