//! The rows the interrupt lane reads and writes: the session's oldest queued
//! `/interrupt` or `/replace`, the run it may stop, and one transaction per
//! decision, each by compare-and-swap on the versions it names.

use super::audit::{self, Audit};
use super::commands::{entry_of, oldest_queued};
use super::models::{OutboxEntry, Task};
use super::schema::outbox_entries;
use super::sessions::driven_tasks_of_session;
use super::steer::{moved, stale, unchanged};
use super::tasks::{transition, TransitionRequest};
use super::{now, DbConn, StoreError};
use crate::domain::command::Command;
use crate::domain::states::{OutboxStatus, SendMode};
use crate::domain::{ResourceKey, TaskId};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;

/// The stored `errorCode` of a run stopped for a newer message.
pub const SUPERSEDED: &str = "superseded";

/// A queued `/interrupt` or `/replace`, and the session's run.
#[derive(Debug, Clone)]
pub struct InterruptHead {
    pub task: Task,
    pub entry: OutboxEntry,
    /// The session's oldest task that its actor drives.
    pub run: Option<Task>,
}

/// The session's oldest queued `/interrupt` or `/replace`, if any.
pub fn next_interrupt(
    conn: &mut DbConn,
    session_key: &ResourceKey,
) -> Result<Option<InterruptHead>, StoreError> {
    let names = [Command::Interrupt.as_str(), Command::Replace.as_str()];
    let Some(task) = oldest_queued(conn, session_key, &names)? else {
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
    let run = driven_tasks_of_session(conn, session_key)?
        .into_iter()
        .next();
    Ok(Some(InterruptHead { task, entry, run }))
}

/// What a supersede writes.
#[derive(Debug, Clone)]
pub struct Supersede {
    /// The message's entry, as read, and its task's version.
    pub entry: OutboxEntry,
    pub version: i64,
    /// `Interrupt` or `Replace`.
    pub mode: SendMode,
    /// The run to stop, at the version decided on.
    pub run: TaskId,
    pub run_version: i64,
    /// `/replace`: the turn to drop from the thread before the message is sent.
    pub revert_turn: Option<String>,
}

/// Stops the run for the message: the run goes to `cancel_requested` with
/// `errorCode` `superseded` (its drive interrupts the turn), and the message's
/// entry is marked to go before the queue once the run settled.
pub fn supersede(conn: &mut DbConn, w: &Supersede) -> Result<(), StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        outbox_entries::table
            .filter(outbox_entries::queue_id.eq(&w.entry.queue_id))
            .filter(outbox_entries::version.eq(w.entry.version))
            .filter(outbox_entries::status.eq(OutboxStatus::Queued))
            .filter(outbox_entries::mode.eq(SendMode::Enqueue))
    )
    .set((
        outbox_entries::mode.eq(w.mode),
        outbox_entries::supersedes.eq(&w.run),
        outbox_entries::revert_turn_id.eq(w.revert_turn.as_deref()),
        outbox_entries::updated_at.eq(&at),
        outbox_entries::version.eq(w.entry.version + 1),
    ))
    .execute(c))?;
    if n == 0 {
        return Err(stale(format!(
            "outbox entry {} changed before the interrupt",
            w.entry.queue_id
        )));
    }
    unchanged(conn, &w.entry.task_id, w.version)?;
    let why = format!(
        "superseded by task {} (`/{}`)",
        w.entry.task_id,
        if w.mode == SendMode::Replace {
            "replace"
        } else {
            "interrupt"
        }
    );
    stop_superseded(conn, &w.run, w.run_version, &why)?;
    audit::record(
        conn,
        &Audit::new("message.supersedes", "system")
            .task(&w.entry.task_id)
            .meta(serde_json::json!({
                "decidedOnVersion": w.version,
                "mode": w.mode,
                "supersedes": w.run,
                "runVersion": w.run_version,
                "revertTurnId": w.revert_turn,
            })),
    )?;
    Ok(())
}

/// Stops a run for a newer message: `cancel_requested` with `errorCode`
/// `superseded` at the version decided on (its drive interrupts the turn).
pub(super) fn stop_superseded(
    conn: &mut DbConn,
    run: &TaskId,
    version: i64,
    why: &str,
) -> Result<(), StoreError> {
    let out = transition(
        conn,
        &TransitionRequest {
            task_id: run,
            to: TaskState::CancelRequested,
            expected_version: Some(version),
            actor: "system",
            reason: Some(why),
            error_code: Some(SUPERSEDED),
        },
    )?;
    moved(out, run)
}

/// The message goes back to the queue's order as an ordinary one (nothing
/// is reverted for it): a newer run took the stopped one's place, or that
/// run did not settle in time.
pub fn demote(
    conn: &mut DbConn,
    entry: &OutboxEntry,
    version: i64,
    why: &str,
) -> Result<(), StoreError> {
    unchanged(conn, &entry.task_id, version)?;
    let at = now();
    with_conn!(conn, |c| diesel::update(
        outbox_entries::table.filter(outbox_entries::queue_id.eq(&entry.queue_id))
    )
    .set((
        outbox_entries::mode.eq(SendMode::Enqueue),
        outbox_entries::revert_turn_id.eq(None::<String>),
        outbox_entries::updated_at.eq(&at),
        outbox_entries::version.eq(outbox_entries::version + 1),
    ))
    .execute(c))?;
    audit::record(
        conn,
        &Audit::new("message.back_in_queue", "system")
            .task(&entry.task_id)
            .error(why)
            .meta(serde_json::json!({
                "decidedOnVersion": version,
                "supersedes": entry.supersedes,
            })),
    )?;
    Ok(())
}

/// The `/replace`'s turn was dropped from the thread: recorded once, before
/// the message's own turn is intended, with an answer saying that files
/// stay as they are. A steer that turn had taken in is told so in its audit.
pub fn record_reverted(
    conn: &mut DbConn,
    entry: &OutboxEntry,
    thread_id: &str,
    turn_id: &str,
    answer: &str,
) -> Result<(), StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(
        outbox_entries::table
            .filter(outbox_entries::queue_id.eq(&entry.queue_id))
            .filter(outbox_entries::reverted_at.is_null())
    )
    .set((
        outbox_entries::reverted_at.eq(&at),
        outbox_entries::updated_at.eq(&at),
        outbox_entries::version.eq(outbox_entries::version + 1),
    ))
    .execute(c))?;
    super::comments::enqueue_note(
        conn,
        &reverted_key(&entry.task_id),
        &entry.task_id,
        &entry.session_key,
        answer,
    )?;
    audit::record(
        conn,
        &Audit::new("thread.reverted", "system")
            .task(&entry.task_id)
            .meta(serde_json::json!({
                "threadId": thread_id,
                "beforeTurnId": turn_id,
                "supersedes": entry.supersedes,
            })),
    )?;
    let steers: Vec<TaskId> = with_conn!(conn, |c| outbox_entries::table
        .filter(outbox_entries::accepted_turn_id.eq(turn_id))
        .select(outbox_entries::task_id)
        .load(c))?;
    for steer in &steers {
        audit::record(
            conn,
            &Audit::new("steer.reverted", "system")
                .task(steer)
                .meta(serde_json::json!({
                    "turnId": turn_id,
                    "revertedBy": entry.task_id,
                })),
        )?;
    }
    Ok(())
}

/// The key of the answer that says a `/replace` dropped a turn.
pub fn reverted_key(task_id: &TaskId) -> String {
    format!("{task_id}:reverted")
}
