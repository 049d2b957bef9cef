//! The rows the steer lane reads and writes: the session's queue head when it
//! is a `/steer`, the turn it may join, and one transaction per decision, each
//! by compare-and-swap on the steer task's version (and the entry's, where
//! the entry changes). A decision whose facts moved writes nothing and is
//! made again.

use super::audit::{self, Audit};
use super::commands::{answer_key, entry_of, oldest_queued, turnless_names};
use super::models::{OutboxEntry, Task};
use super::schema::{audit_events, operation_ledger, outbox_entries, tasks};
use super::sessions::driven_tasks_of_session;
use super::tasks::{transition, TransitionOutcome, TransitionRequest};
use super::{now, DbConn, StoreError};
use crate::domain::command::Command;
use crate::domain::states::{OutboxStatus, SendMode};
use crate::domain::{ResourceKey, TaskId};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;

/// The audit action of a steer whose `turn/steer` joined no turn; its
/// `turn_id` names the turn that refused it.
const NOT_ADMITTED: &str = "steer.not_admitted";

/// A `/steer` at the head of its session's queue, and what it may join.
#[derive(Debug, Clone)]
pub struct SteerHead {
    pub task: Task,
    pub entry: OutboxEntry,
    /// The thread the ledger says its send went to, if a send began.
    pub sent_thread: Option<String>,
    /// The session's running task whose turn it may join.
    pub run: Option<Task>,
    /// No other message of the session waits before it.
    pub head: bool,
    /// The turn whose `turn/steer` last found no active turn for it: that
    /// turn has ended in Codex, even while the store still shows it
    /// running, and is never steered into again.
    pub refused_turn: Option<String>,
}

/// The session's oldest queued `/steer`, if any, with what it is decided on.
pub fn next_steer(
    conn: &mut DbConn,
    session_key: &ResourceKey,
) -> Result<Option<SteerHead>, StoreError> {
    let Some(task) = oldest_queued(conn, session_key, &[Command::Steer.as_str()])? else {
        return Ok(None);
    };
    let entry = entry_of(conn, &task)?;
    // Nothing to send: its session's command lane answers it.
    if task
        .command
        .is_some_and(|c| c.answered_by_lane(entry.command_argument.as_deref(), true))
    {
        return Ok(None);
    }
    // Being sent now by an operator, or sent so: it runs as a turn of its
    // own and is never steered again.
    if entry.handoff_phase.is_some() {
        return Ok(None);
    }
    // Messages before it that wait for a turn (turnless commands never do).
    let turnless = turnless_names();
    let before: i64 = with_conn!(conn, |c| tasks::table
        .filter(tasks::session_key.eq(session_key))
        .filter(tasks::state.eq(TaskState::Queued.as_str()))
        .filter(tasks::id.lt(task.id))
        .filter(tasks::command.is_null().or(tasks::command.ne_all(turnless)))
        .count()
        .get_result(c))?;
    let sent_thread: Option<Option<String>> = with_conn!(conn, |c| operation_ledger::table
        .find(&entry.operation_id)
        .select(operation_ledger::thread_id)
        .first(c)
        .optional())?;
    let run = driven_tasks_of_session(conn, session_key)?
        .into_iter()
        .find(is_steerable);
    let refused_turn: Option<Option<String>> = with_conn!(conn, |c| audit_events::table
        .filter(audit_events::task_id.eq(&task.task_id))
        .filter(audit_events::action.eq(NOT_ADMITTED))
        .order(audit_events::id.desc())
        .select(audit_events::turn_id)
        .first(c)
        .optional())?;
    Ok(Some(SteerHead {
        task,
        entry,
        sent_thread: sent_thread.flatten(),
        run,
        head: before == 0,
        refused_turn: refused_turn.flatten(),
    }))
}

/// A task whose turn may take a steer: its own turn runs (not the reply
/// retry's, which only posts an answer again).
fn is_steerable(t: &Task) -> bool {
    matches!(t.state, TaskState::Running | TaskState::AwaitingApproval)
        && t.reply_attempt == 0
        && t.thread_id.is_some()
        && t.turn_id.is_some()
}

/// `Refused { code: STALE }`: the message's task or its entry changed since
/// the decision; nothing was written. (The interrupt lane's writes use it
/// too.)
pub const STALE: &str = "message_stale";

pub(super) fn stale(what: String) -> StoreError {
    StoreError::Refused {
        code: STALE,
        message: what,
    }
}

/// The steer task is still queued at the version decided on. Written as an
/// update so that it takes the task's row lock: on PostgreSQL a claim by the
/// repository that races this decision waits for it and then finds the entry
/// changed (see [`claimable`]).
pub(super) fn unchanged(
    conn: &mut DbConn,
    task_id: &TaskId,
    version: i64,
) -> Result<(), StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        tasks::table
            .filter(tasks::task_id.eq(task_id))
            .filter(tasks::state_version.eq(version))
            .filter(tasks::state.eq(TaskState::Queued.as_str()))
    )
    .set(tasks::updated_at.eq(&at))
    .execute(c))?;
    if n == 0 {
        return Err(stale(format!(
            "task {task_id} is no longer queued at version {version}"
        )));
    }
    Ok(())
}

/// Whether the repository may claim a queued `/steer` as a turn of its own:
/// its entry waits in the queue (not being sent into a running turn, not
/// held). An update, so it waits for a steer decision that holds the entry.
pub fn claimable(conn: &mut DbConn, task_id: &TaskId) -> Result<bool, StoreError> {
    let n = with_conn!(conn, |c| diesel::update(
        outbox_entries::table
            .filter(outbox_entries::task_id.eq(task_id))
            .filter(outbox_entries::status.eq(OutboxStatus::Queued))
            .filter(outbox_entries::auto_drain.eq(true))
    )
    .set(outbox_entries::version.eq(outbox_entries::version))
    .execute(c))?;
    Ok(n > 0)
}

/// Whether the task's entry is held for an operator (auto-drain off) or
/// being sent: the queue starts neither. By an update, so that on
/// PostgreSQL the entry's row stays locked until the claim commits. A task
/// with no entry is not held (its drive fails it as `outbox_missing`).
pub fn held_or_sending(conn: &mut DbConn, task_id: &TaskId) -> Result<bool, StoreError> {
    let n = with_conn!(conn, |c| diesel::update(
        outbox_entries::table
            .filter(outbox_entries::task_id.eq(task_id))
            .filter(
                outbox_entries::auto_drain
                    .eq(false)
                    .or(outbox_entries::status.ne(OutboxStatus::Queued)),
            )
    )
    .set(outbox_entries::version.eq(outbox_entries::version))
    .execute(c))?;
    if n > 0 {
        return Ok(true);
    }
    // Lock the entry as it is (queued, auto-drain on) for the claim too.
    claimable(conn, task_id).map(|_| false)
}

/// The entry is still as its send left it (`sending`, at the version the
/// admission wrote): a late answer or a recovery changes nothing that a
/// newer decision (a hold, an operator's drop) wrote since.
fn still_sending(conn: &mut DbConn, entry: &OutboxEntry) -> Result<(), StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        outbox_entries::table
            .filter(outbox_entries::queue_id.eq(&entry.queue_id))
            .filter(outbox_entries::version.eq(entry.version))
            .filter(outbox_entries::status.eq(OutboxStatus::Sending))
    )
    .set(outbox_entries::updated_at.eq(&at))
    .execute(c))?;
    if n == 0 {
        return Err(stale(format!(
            "outbox entry {} is no longer as its send left it (version {})",
            entry.queue_id, entry.version
        )));
    }
    Ok(())
}

/// The admission: the entry becomes `sending` into the turn it expects, and
/// the ledger's `sending` row names the thread, before `turn/steer` leaves.
pub fn admit(
    conn: &mut DbConn,
    entry: &OutboxEntry,
    version: i64,
    thread_id: &str,
    turn_id: &str,
) -> Result<(), StoreError> {
    // The run a steer was aimed at is part of what it asks: aiming the same
    // operation at another run is a conflict, never a quiet redirect.
    if let Some(aimed) = entry.expected_turn_id.as_deref().filter(|t| *t != turn_id) {
        return Err(StoreError::Refused {
            code: "steer_redirect",
            message: format!(
                "outbox entry {} was aimed at turn {aimed}; it is not sent to turn {turn_id}",
                entry.queue_id
            ),
        });
    }
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        outbox_entries::table
            .filter(outbox_entries::queue_id.eq(&entry.queue_id))
            .filter(outbox_entries::version.eq(entry.version))
            .filter(outbox_entries::status.eq(OutboxStatus::Queued))
            .filter(outbox_entries::auto_drain.eq(true))
            .filter(
                outbox_entries::expected_turn_id
                    .is_null()
                    .or(outbox_entries::expected_turn_id.eq(turn_id)),
            )
    )
    .set((
        outbox_entries::status.eq(OutboxStatus::Sending),
        outbox_entries::mode.eq(SendMode::Steer),
        outbox_entries::expected_turn_id.eq(turn_id),
        outbox_entries::updated_at.eq(&at),
        outbox_entries::version.eq(entry.version + 1),
    ))
    .execute(c))?;
    if n == 0 {
        return Err(stale(format!(
            "outbox entry {} changed before the steer",
            entry.queue_id
        )));
    }
    unchanged(conn, &entry.task_id, version)?;
    super::ledger::sending(
        conn,
        &entry.operation_id,
        &entry.task_id,
        &entry.queue_id,
        None,
        thread_id,
    )?;
    audit::record(
        conn,
        &Audit::new("steer.admitted", "system")
            .task(&entry.task_id)
            .meta(serde_json::json!({
                "decidedOnVersion": version,
                "operationId": entry.operation_id,
                "queueId": entry.queue_id,
                "threadId": thread_id,
                "expectedTurnId": turn_id,
            })),
    )?;
    Ok(())
}

/// Codex took the steer into `turn_id`: the ledger and the entry say so,
/// and the steer's task ends `succeeded`, naming the task whose turn it
/// joined; `answer` tells the thread.
pub fn accept(
    conn: &mut DbConn,
    entry: &OutboxEntry,
    version: i64,
    turn_id: &str,
    answer: impl FnOnce(Option<&TaskId>) -> String,
) -> Result<Option<TaskId>, StoreError> {
    unchanged(conn, &entry.task_id, version)?;
    still_sending(conn, entry)?;
    let into = super::turns::turn(conn, turn_id)?.map(|t| t.task_id);
    // `sent` already when the running turn saw the echo first.
    super::ledger::accepted(conn, &entry.operation_id, turn_id)?;
    let at = now();
    with_conn!(conn, |c| {
        diesel::update(outbox_entries::table.filter(outbox_entries::queue_id.eq(&entry.queue_id)))
            .set((
                outbox_entries::accepted_turn_id.eq(turn_id),
                outbox_entries::updated_at.eq(&at),
                outbox_entries::version.eq(outbox_entries::version + 1),
            ))
            .execute(c)?;
        diesel::update(tasks::table.filter(tasks::task_id.eq(&entry.task_id)))
            .set(tasks::steered_into.eq(into.as_ref()))
            .execute(c)
    })?;
    let reason = match &into {
        Some(t) => format!("steered into the running turn of task {t}"),
        None => format!("steered into turn {turn_id}"),
    };
    let out = transition(
        conn,
        &TransitionRequest {
            task_id: &entry.task_id,
            to: TaskState::Succeeded,
            expected_version: Some(version),
            actor: "system",
            reason: Some(&reason),
            error_code: None,
        },
    )?;
    moved(out, &entry.task_id)?;
    super::comments::enqueue_note(
        conn,
        &answer_key(&entry.task_id),
        &entry.task_id,
        &entry.session_key,
        &answer(into.as_ref()),
    )?;
    audit::record(
        conn,
        &Audit::new("steer.accepted", "system")
            .task(&entry.task_id)
            .meta(serde_json::json!({
                "decidedOnVersion": version,
                "operationId": entry.operation_id,
                "turnId": turn_id,
                "steeredInto": into,
            })),
    )?;
    Ok(into)
}

/// The steer joined nothing: the ledger forgets the send that never
/// happened and the entry waits in the queue again, drained automatically.
pub fn release(
    conn: &mut DbConn,
    entry: &OutboxEntry,
    version: i64,
    why: &str,
) -> Result<(), StoreError> {
    unchanged(conn, &entry.task_id, version)?;
    still_sending(conn, entry)?;
    let at = now();
    with_conn!(conn, |c| {
        diesel::delete(
            operation_ledger::table
                .filter(operation_ledger::operation_id.eq(&entry.operation_id))
                .filter(operation_ledger::status.eq("sending")),
        )
        .execute(c)?;
        diesel::update(outbox_entries::table.filter(outbox_entries::queue_id.eq(&entry.queue_id)))
            .set((
                outbox_entries::status.eq(OutboxStatus::Queued),
                outbox_entries::mode.eq(SendMode::Enqueue),
                outbox_entries::expected_turn_id.eq(None::<String>),
                outbox_entries::updated_at.eq(&at),
                outbox_entries::version.eq(outbox_entries::version + 1),
            ))
            .execute(c)
    })?;
    let mut event = Audit::new(NOT_ADMITTED, "system").task(&entry.task_id);
    if let Some(turn) = &entry.expected_turn_id {
        event = event.turn(turn);
    }
    audit::record(
        conn,
        &event.meta(serde_json::json!({
            "decidedOnVersion": version,
            "operationId": entry.operation_id,
            "expectedTurnId": entry.expected_turn_id,
            "why": why,
        })),
    )?;
    Ok(())
}

/// Nothing proves where the steer went: the entry is held with auto-drain
/// off and its reason, for an operator; the ledger keeps its `sending` row,
/// so it is never sent again by itself.
pub fn hold(
    conn: &mut DbConn,
    entry: &OutboxEntry,
    version: i64,
    reason: &str,
) -> Result<(), StoreError> {
    unchanged(conn, &entry.task_id, version)?;
    still_sending(conn, entry)?;
    let at = now();
    with_conn!(conn, |c| diesel::update(
        outbox_entries::table.filter(outbox_entries::queue_id.eq(&entry.queue_id))
    )
    .set((
        outbox_entries::status.eq(OutboxStatus::Queued),
        outbox_entries::auto_drain.eq(false),
        outbox_entries::hold_reason.eq(reason),
        outbox_entries::updated_at.eq(&at),
        outbox_entries::version.eq(outbox_entries::version + 1),
    ))
    .execute(c))?;
    audit::record(
        conn,
        &Audit::new("steer.held", "system")
            .task(&entry.task_id)
            .error(reason)
            .meta(serde_json::json!({
                "decidedOnVersion": version,
                "operationId": entry.operation_id,
                "expectedTurnId": entry.expected_turn_id,
            })),
    )?;
    Ok(())
}

/// A second failure before admission: the task's entry waits in the queue
/// with auto-drain off and `reason`, for an operator's drop or send-now.
/// Nothing reached the agent (the intent, if any, was released first).
pub fn hold_before_admission(
    conn: &mut DbConn,
    task_id: &TaskId,
    reason: &str,
) -> Result<(), StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        outbox_entries::table
            .filter(outbox_entries::task_id.eq(task_id))
            .filter(outbox_entries::status.eq(OutboxStatus::Queued))
    )
    .set((
        outbox_entries::auto_drain.eq(false),
        outbox_entries::hold_reason.eq(reason),
        outbox_entries::updated_at.eq(&at),
        outbox_entries::version.eq(outbox_entries::version + 1),
    ))
    .execute(c))?;
    if n == 0 {
        return Err(stale(format!(
            "the outbox entry of task {task_id} is not queued; it cannot be held"
        )));
    }
    audit::record(
        conn,
        &Audit::new("outbox.held", "system")
            .task(task_id)
            .error(reason)
            .meta(serde_json::json!({ "reason": reason })),
    )?;
    Ok(())
}

/// The commenter may not trigger work: the message (a steer, an interrupt)
/// ends `rejected` (its receipt says why).
pub fn reject(conn: &mut DbConn, task_id: &TaskId, version: i64) -> Result<(), StoreError> {
    let out = transition(
        conn,
        &TransitionRequest {
            task_id,
            to: TaskState::Rejected,
            expected_version: Some(version),
            actor: "system",
            reason: Some("the commenter may not trigger work"),
            error_code: Some("permission_denied"),
        },
    )?;
    moved(out, task_id)
}

pub(super) fn moved(out: TransitionOutcome, task_id: &TaskId) -> Result<(), StoreError> {
    match out {
        TransitionOutcome::Applied { .. } => Ok(()),
        other => Err(stale(format!("task {task_id}: {other}"))),
    }
}
