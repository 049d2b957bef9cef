//! A turn's rows: the turn/start intent written before the request leaves
//! (and undone when the runtime proved nothing was sent), the turn admitted
//! and finished, and the task's one reply-retry turn.

use super::audit::{self, Audit};
use super::models::{OutboxEntry, Task, Turn};
use super::schema::{operation_ledger, outbox_entries, sessions, tasks, turns};
use super::{ledger, now, DbConn, StoreError};
use crate::domain::{OperationId, TaskId};
use crate::with_conn;
use diesel::prelude::*;

/// The turn/start intent: written before the request leaves. After
/// this, a crash means reconciliation, never replay.
pub fn record_turn_intent(
    conn: &mut DbConn,
    task: &Task,
    entry: &OutboxEntry,
    thread_id: &str,
    attempt_id: &str,
) -> Result<(), StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        outbox_entries::table
            .filter(outbox_entries::queue_id.eq(&entry.queue_id))
            .filter(outbox_entries::version.eq(entry.version))
    )
    .set((
        outbox_entries::status.eq("sending"),
        outbox_entries::updated_at.eq(&at),
        outbox_entries::version.eq(entry.version + 1),
    ))
    .execute(c))?;
    if n == 0 {
        return Err(StoreError::Refused {
            code: "outbox_changed",
            message: format!("outbox entry {} changed before sending", entry.queue_id),
        });
    }
    with_conn!(conn, |c| {
        diesel::update(tasks::table.filter(tasks::task_id.eq(&task.task_id)))
            .set((tasks::thread_id.eq(thread_id), tasks::updated_at.eq(&at)))
            .execute(c)?;
        // The session's last task: the one that last reached the agent.
        diesel::update(sessions::table.find(&task.session_key))
            .set((
                sessions::last_task_id.eq(&task.task_id),
                sessions::updated_at.eq(&at),
            ))
            .execute(c)
    })?;
    ledger::sending(
        conn,
        &entry.operation_id,
        &task.task_id,
        &entry.queue_id,
        Some(attempt_id).filter(|a| !a.is_empty()),
        thread_id,
    )?;
    audit::record(
        conn,
        &Audit::new("turn.start_intent", "system")
            .task(&task.task_id)
            .meta(serde_json::json!({
                "threadId": thread_id,
                "operationId": entry.operation_id,
                "queueId": entry.queue_id,
                "attemptId": attempt_id,
            })),
    )?;
    Ok(())
}

/// Records an accepted turn: the ledger's `accepted`, the turns row and the
/// task's turn id. The move to `running` is the caller's decision, written in
/// the same commit.
pub fn record_turn_admitted(
    conn: &mut DbConn,
    task_id: &TaskId,
    thread_id: &str,
    turn_id: &str,
    kind: &str,
    operation_id: &OperationId,
) -> Result<(), StoreError> {
    ledger::accepted(conn, operation_id, turn_id)?;
    let at = now();
    with_conn!(conn, |c| {
        diesel::insert_into(turns::table)
            .values((
                turns::turn_id.eq(turn_id),
                turns::task_id.eq(task_id),
                turns::thread_id.eq(thread_id),
                turns::kind.eq(kind),
                turns::status.eq("started"),
                turns::event_seq.eq(0_i64),
                turns::started_at.eq(&at),
            ))
            .on_conflict_do_nothing()
            .execute(c)?;
        diesel::update(tasks::table.filter(tasks::task_id.eq(task_id)))
            .set(tasks::turn_id.eq(turn_id))
            .execute(c)
    })?;
    audit::record(
        conn,
        &Audit::new("turn.started", "system")
            .task(task_id)
            .meta(serde_json::json!({ "threadId": thread_id, "turnId": turn_id, "kind": kind })),
    )?;
    Ok(())
}

/// Undoes the turn/start intent when the runtime proved nothing was sent
/// (pre-admission failure): the entry is queued again, not "sending", and the
/// ledger forgets the attempt, but only while it still says `sending`.
pub fn release_intent(conn: &mut DbConn, task_id: &TaskId) -> Result<(), StoreError> {
    let at = now();
    with_conn!(conn, |c| {
        diesel::delete(
            operation_ledger::table
                .filter(operation_ledger::task_id.eq(task_id))
                .filter(operation_ledger::status.eq("sending")),
        )
        .execute(c)?;
        diesel::update(
            outbox_entries::table
                .filter(outbox_entries::task_id.eq(task_id))
                .filter(outbox_entries::status.eq("sending")),
        )
        .set((
            outbox_entries::status.eq("queued"),
            outbox_entries::updated_at.eq(&at),
            outbox_entries::version.eq(outbox_entries::version + 1),
        ))
        .execute(c)
    })?;
    Ok(())
}

/// Marks (`true`) or clears the turn's idle candidate: its thread settled
/// idle without a `turn/completed`, or is active again.
pub fn set_idle_candidate(conn: &mut DbConn, turn_id: &str, idle: bool) -> Result<(), StoreError> {
    let at = idle.then(now);
    with_conn!(conn, |c| diesel::update(
        turns::table
            .find(turn_id)
            .filter(turns::completed_at.is_null())
    )
    .set(turns::idle_at.eq(at))
    .execute(c))?;
    Ok(())
}

/// Stores how a turn ended and its final agent message (kept durably: a reply
/// can be published from it without running the model again). An idle
/// candidate it still held is moot now that the end is known.
pub fn record_turn_finished(
    conn: &mut DbConn,
    turn_id: &str,
    status: &str,
    final_text: Option<&str>,
    event_seq: i64,
) -> Result<(), StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(turns::table.find(turn_id))
        .set((
            turns::status.eq(status),
            turns::final_text.eq(final_text),
            turns::event_seq.eq(event_seq),
            turns::completed_at.eq(&at),
            turns::idle_at.eq(None::<String>),
        ))
        .execute(c))?;
    Ok(())
}

/// One turn by id.
pub fn turn(conn: &mut DbConn, turn_id: &str) -> Result<Option<Turn>, StoreError> {
    Ok(with_conn!(conn, |c| turns::table
        .find(turn_id)
        .select(Turn::as_select())
        .first(c)
        .optional())?)
}

/// The final text of the task's own turn (not of a reply-retry turn): what a
/// reply publishes, durable since the turn ended.
pub fn original_final_text(
    conn: &mut DbConn,
    task_id: &TaskId,
) -> Result<Option<String>, StoreError> {
    let text: Option<Option<String>> = with_conn!(conn, |c| turns::table
        .filter(turns::task_id.eq(task_id))
        .filter(turns::kind.eq("normal"))
        .filter(turns::final_text.is_not_null())
        .order(turns::started_at.desc())
        .select(turns::final_text)
        .first(c)
        .optional())?;
    Ok(text.flatten())
}

/// Whether the task's reply-retry turn has ended (completed, failed or interrupted).
pub fn reply_retry_finished(conn: &mut DbConn, task_id: &TaskId) -> Result<bool, StoreError> {
    let n: i64 = with_conn!(conn, |c| turns::table
        .filter(turns::task_id.eq(task_id))
        .filter(turns::kind.eq("reply_retry"))
        .filter(turns::status.ne("started"))
        .count()
        .get_result(c))?;
    Ok(n > 0)
}

/// The intent of the task's one reply-retry turn, before its turn/start
/// leaves: `reply_attempt` goes from 0 to 1 (refused if it is not 0: there is
/// only one), and the ledger holds the new operation as `sending`.
pub fn begin_reply_retry(
    conn: &mut DbConn,
    task_id: &TaskId,
    operation_id: &OperationId,
    queue_id: &str,
    thread_id: &str,
) -> Result<(), StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        tasks::table
            .filter(tasks::task_id.eq(task_id))
            .filter(tasks::reply_attempt.eq(0_i64))
    )
    .set((tasks::reply_attempt.eq(1_i64), tasks::updated_at.eq(&at)))
    .execute(c))?;
    if n == 0 {
        return Err(StoreError::Refused {
            code: "reply_retry_used",
            message: format!("task {task_id} already had its one reply-retry turn"),
        });
    }
    ledger::sending(conn, operation_id, task_id, queue_id, None, thread_id)?;
    audit::record(
        conn,
        &Audit::new("turn.start_intent", "system")
            .task(task_id)
            .meta(serde_json::json!({
                "threadId": thread_id,
                "operationId": operation_id,
                "kind": "reply_retry",
            })),
    )?;
    Ok(())
}

/// The reply-retry turn/start was not admitted: forget its intent (the
/// attempt stays used).
pub fn release_reply_retry(
    conn: &mut DbConn,
    operation_id: &OperationId,
) -> Result<(), StoreError> {
    with_conn!(conn, |c| diesel::delete(
        operation_ledger::table
            .filter(operation_ledger::operation_id.eq(operation_id))
            .filter(operation_ledger::status.eq("sending")),
    )
    .execute(c))?;
    Ok(())
}

/// What a task has spent so far: its first lease (where `max_task_secs`
/// counts from), the turns it took and the tokens they used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskUsage {
    pub first_lease_at: Option<String>,
    pub turns: i64,
    pub tokens: i64,
}

/// `current`: the turn running now, whose tokens the caller counts itself.
pub fn task_usage(
    conn: &mut DbConn,
    task_id: &TaskId,
    current: Option<&str>,
) -> Result<TaskUsage, StoreError> {
    use super::schema::{attempts, turn_token_usage};
    let first_lease_at: Option<String> = with_conn!(conn, |c| attempts::table
        .filter(attempts::task_id.eq(task_id))
        .order(attempts::number.asc())
        .select(attempts::started_at)
        .first(c)
        .optional())?;
    let ids: Vec<String> = with_conn!(conn, |c| turns::table
        .filter(turns::task_id.eq(task_id))
        .select(turns::turn_id)
        .load(c))?;
    let earlier: Vec<&String> = ids.iter().filter(|t| Some(t.as_str()) != current).collect();
    let used: Vec<(i64, i64)> = with_conn!(conn, |c| turn_token_usage::table
        .filter(turn_token_usage::turn_id.eq_any(&earlier))
        .select((
            turn_token_usage::start_total_tokens,
            turn_token_usage::end_total_tokens,
        ))
        .load(c))?;
    Ok(TaskUsage {
        first_lease_at,
        turns: ids.len() as i64,
        tokens: used.iter().map(|(start, end)| (end - start).max(0)).sum(),
    })
}

/// Turns the repository's tasks started today (UTC), for
/// `repo_turns_per_day`.
pub fn repo_turns_today(
    conn: &mut DbConn,
    repo_key: &crate::domain::RepoKey,
) -> Result<i64, StoreError> {
    let now = chrono::Utc::now();
    let midnight = super::format_time(
        now.date_naive()
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc())
            .unwrap_or(now),
    );
    Ok(with_conn!(conn, |c| turns::table
        .inner_join(tasks::table.on(tasks::task_id.eq(turns::task_id)))
        .filter(tasks::repo_key.eq(repo_key))
        .filter(turns::started_at.ge(&midnight))
        .count()
        .get_result(c))?)
}
