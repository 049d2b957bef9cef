//! "Stop and send now" of a held entry: the one resend the bridge makes,
//! and only when the ledger (or the thread's history) proves the message
//! never reached the agent. Each phase is one transaction, by
//! compare-and-swap on the entry's version, so a process that dies between
//! two phases leaves a state the next one continues from:
//! `requested` (the entry pins the run, thread and turn it may have reached)
//! → `interrupting` (that run is stopped) → `revoked` (the ledger's claim
//! for exactly that thread is withdrawn, never once `sent`) → `dedicated`
//! (queued again, auto-drain on, the same operation id, ahead of the queue
//! as an interrupting message is).

use super::audit::{self, Audit, AuditView};
use super::control::{idempotent, ControlRequest};
use super::ledger::{self, LedgerEntry};
use super::models::{OutboxEntry, Task};
use super::schema::{operation_ledger, outbox_entries};
use super::steer::{moved, stale};
use super::tasks::{self, transition, TransitionRequest};
use super::{now, DbConn, StoreError};
use crate::domain::states::{HandoffPhase, OutboxStatus, SendMode};
use crate::domain::{RepoKey, ResourceKey, TaskId};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;

/// The phases a session's handoff lane still has work in.
const UNDER_WAY: [&str; 3] = ["requested", "interrupting", "revoked"];

/// A handoff under way, with what its next decision reads.
#[derive(Debug, Clone)]
pub struct HandoffHead {
    pub entry: OutboxEntry,
    pub task: Task,
    /// The pinned run, as it is now.
    pub run: Option<Task>,
    /// The ledger's row for the entry's operation.
    pub ledger: Option<LedgerEntry>,
}

/// The session's oldest handoff still under way.
pub fn next_handoff(
    conn: &mut DbConn,
    session_key: &ResourceKey,
) -> Result<Option<HandoffHead>, StoreError> {
    let entry: Option<OutboxEntry> = with_conn!(conn, |c| outbox_entries::table
        .filter(outbox_entries::session_key.eq(session_key))
        .filter(outbox_entries::handoff_phase.eq_any(UNDER_WAY))
        .order(outbox_entries::id.asc())
        .select(OutboxEntry::as_select())
        .first(c)
        .optional())?;
    let Some(entry) = entry else {
        return Ok(None);
    };
    let task = tasks::find(conn, &entry.task_id)?
        .ok_or_else(|| StoreError::NotFound(format!("task {}", entry.task_id)))?;
    let run = match &entry.handoff_run_task_id {
        Some(id) => tasks::find(conn, id)?,
        None => None,
    };
    let ledger = ledger::find(conn, &entry.operation_id)?;
    Ok(Some(HandoffHead {
        entry,
        task,
        run,
        ledger,
    }))
}

/// Sessions with a handoff under way (the sweep wakes them after a restart).
pub fn sessions_with_handoffs(
    conn: &mut DbConn,
) -> Result<Vec<(ResourceKey, RepoKey)>, StoreError> {
    let keys: Vec<ResourceKey> = with_conn!(conn, |c| outbox_entries::table
        .filter(outbox_entries::handoff_phase.eq_any(UNDER_WAY))
        .select(outbox_entries::session_key)
        .distinct()
        .load(c))?;
    Ok(keys
        .into_iter()
        .map(|k| {
            let repo = k.repo().clone();
            (k, repo)
        })
        .collect())
}

/// The operator's "stop and send now" of a held entry: pins what the
/// message may have reached and records `requested`. Refused for an entry
/// that is not held, one already handed off, and one whose ledger says the
/// agent has it (`already_sent`: only dropping it is left).
pub fn request(
    conn: &mut DbConn,
    req: &ControlRequest,
    queue_id: &str,
) -> Result<AuditView, StoreError> {
    idempotent(conn, req, "outbox.send_now", queue_id, |conn| {
        let (entry, task) =
            super::control::held_entry(conn, queue_id, "send-now takes held entries only")?;
        if let Some(phase) = entry
            .handoff_phase
            .filter(|p| *p != HandoffPhase::Dedicated)
        {
            return Err(StoreError::Refused {
                code: "handoff_in_progress",
                message: format!(
                    "outbox entry {queue_id} is already being sent now (phase `{phase}`)"
                ),
            });
        }
        let claim = ledger::find(conn, &entry.operation_id)?;
        if let Some(sent) = claim.as_ref().filter(|l| l.status == "sent") {
            return Err(already_sent(queue_id, sent.turn_id.as_deref()));
        }
        // What the message may have reached: a steer's expected turn (and
        // the task whose turn it is), else the task's own thread and turn.
        let thread = claim
            .as_ref()
            .and_then(|l| l.thread_id.clone())
            .or(task.thread_id.clone());
        let turn = entry
            .expected_turn_id
            .clone()
            .or(claim.as_ref().and_then(|l| l.turn_id.clone()))
            .or(task.turn_id.clone());
        let run = match &entry.expected_turn_id {
            Some(t) => super::turns::turn(conn, t)?.map(|t| t.task_id),
            None => None,
        };
        let at = now();
        let n = with_conn!(conn, |c| diesel::update(
            outbox_entries::table
                .filter(outbox_entries::queue_id.eq(&entry.queue_id))
                .filter(outbox_entries::version.eq(entry.version))
        )
        .set((
            outbox_entries::handoff_phase.eq(HandoffPhase::Requested),
            outbox_entries::handoff_thread_id.eq(thread.as_deref()),
            outbox_entries::handoff_turn_id.eq(turn.as_deref()),
            outbox_entries::handoff_run_task_id.eq(run.as_ref()),
            outbox_entries::updated_at.eq(&at),
            outbox_entries::version.eq(entry.version + 1),
        ))
        .execute(c))?;
        if n == 0 {
            return Err(StoreError::Refused {
                code: "state_changed",
                message: format!("outbox entry {queue_id} changed meanwhile; look again and retry"),
            });
        }
        audit::record(
            conn,
            &Audit::new("outbox.send_now", &req.actor)
                .task(&task.task_id)
                .meta(serde_json::json!({
                    "requestId": req.request_id,
                    "reason": req.reason,
                    "queueId": queue_id,
                    "operationId": entry.operation_id,
                    "phase": HandoffPhase::Requested,
                    "threadId": thread,
                    "turnId": turn,
                    "runTaskId": run,
                })),
        )
    })
}

fn already_sent(queue_id: &str, turn: Option<&str>) -> StoreError {
    StoreError::Refused {
        code: "already_sent",
        message: format!(
            "the agent has outbox entry {queue_id}'s message (turn {}); sending it again would \
             ask for the work twice, so it is not sent: drop it if it is no longer wanted",
            turn.unwrap_or("unknown")
        ),
    }
}

/// Moves the entry from `from` to `to` at the version read; stale otherwise.
fn advance(
    conn: &mut DbConn,
    entry: &OutboxEntry,
    from: HandoffPhase,
    to: Option<HandoffPhase>,
) -> Result<String, StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        outbox_entries::table
            .filter(outbox_entries::queue_id.eq(&entry.queue_id))
            .filter(outbox_entries::version.eq(entry.version))
            .filter(outbox_entries::handoff_phase.eq(from))
    )
    .set((
        outbox_entries::handoff_phase.eq(to),
        outbox_entries::updated_at.eq(&at),
        outbox_entries::version.eq(entry.version + 1),
    ))
    .execute(c))?;
    if n == 0 {
        return Err(stale(format!(
            "outbox entry {} left handoff phase `{from}`",
            entry.queue_id
        )));
    }
    Ok(at)
}

fn record(
    conn: &mut DbConn,
    entry: &OutboxEntry,
    action: &str,
    meta: serde_json::Value,
) -> Result<(), StoreError> {
    audit::record(
        conn,
        &Audit::new(action, "system")
            .task(&entry.task_id)
            .meta(serde_json::json!({
                "queueId": entry.queue_id,
                "operationId": entry.operation_id,
                "decidedOnEntryVersion": entry.version,
                "detail": meta,
            })),
    )
    .map(|_| ())
}

/// `requested` → `interrupting`; `stop`: the pinned run, at the version
/// decided on, goes to `cancel_requested` (`superseded`), and its drive
/// interrupts its turn.
pub fn interrupting(
    conn: &mut DbConn,
    entry: &OutboxEntry,
    stop: Option<(&TaskId, i64)>,
) -> Result<(), StoreError> {
    advance(
        conn,
        entry,
        HandoffPhase::Requested,
        Some(HandoffPhase::Interrupting),
    )?;
    if let Some((run, version)) = stop {
        let why = format!(
            "stopped so that task {}'s held message is sent now",
            entry.task_id
        );
        super::interrupt::stop_superseded(conn, run, version, &why)?;
    }
    record(
        conn,
        entry,
        "outbox.handoff.interrupting",
        serde_json::json!({ "stops": stop.map(|(t, v)| serde_json::json!({"taskId": t, "version": v})) }),
    )
}

/// `interrupting` → `revoked`: the ledger's claim for the operation in the
/// pinned thread is withdrawn, so its own turn may claim it again. Never a
/// claim that is `sent` (refused: `already_sent`, nothing written), never
/// one in another thread.
pub fn revoke(conn: &mut DbConn, entry: &OutboxEntry) -> Result<(), StoreError> {
    advance(
        conn,
        entry,
        HandoffPhase::Interrupting,
        Some(HandoffPhase::Revoked),
    )?;
    let claim = ledger::find(conn, &entry.operation_id)?;
    if let Some(sent) = claim.as_ref().filter(|l| l.status == "sent") {
        return Err(already_sent(&entry.queue_id, sent.turn_id.as_deref()));
    }
    let withdrawn = with_conn!(conn, |c| {
        let mut q = diesel::delete(operation_ledger::table)
            .filter(operation_ledger::operation_id.eq(&entry.operation_id))
            .filter(operation_ledger::status.ne("sent"))
            .into_boxed();
        if let Some(thread) = &entry.handoff_thread_id {
            q = q.filter(operation_ledger::thread_id.eq(thread));
        }
        q.execute(c)
    })?;
    if claim.is_some() && withdrawn == 0 {
        return Err(stale(format!(
            "the ledger's claim of {} is not in the pinned thread",
            entry.operation_id
        )));
    }
    record(
        conn,
        entry,
        "outbox.handoff.revoked",
        serde_json::json!({
            "withdrawn": claim.map(|l| serde_json::json!({
                "status": l.status, "threadId": l.thread_id, "turnId": l.turn_id,
            })),
        }),
    )
}

/// `revoked` → `dedicated`: queued again with auto-drain on and the same
/// operation id, ahead of the queue (as an interrupting message is); a task
/// that waited for reconciliation is queued again too.
pub fn dedicate(conn: &mut DbConn, entry: &OutboxEntry, task: &Task) -> Result<(), StoreError> {
    let at = advance(
        conn,
        entry,
        HandoffPhase::Revoked,
        Some(HandoffPhase::Dedicated),
    )?;
    with_conn!(conn, |c| diesel::update(
        outbox_entries::table.filter(outbox_entries::queue_id.eq(&entry.queue_id))
    )
    .set((
        outbox_entries::status.eq(OutboxStatus::Queued),
        outbox_entries::auto_drain.eq(true),
        outbox_entries::hold_reason.eq(None::<String>),
        outbox_entries::mode.eq(SendMode::Interrupt),
        outbox_entries::expected_turn_id.eq(None::<String>),
        outbox_entries::supersedes.eq(entry.handoff_run_task_id.as_ref()),
        outbox_entries::updated_at.eq(&at),
    ))
    .execute(c))?;
    match task.state {
        TaskState::Queued => {}
        TaskState::NeedsReconciliation => {
            let out = transition(
                conn,
                &TransitionRequest {
                    task_id: &task.task_id,
                    to: TaskState::Queued,
                    expected_version: Some(task.state_version),
                    actor: "system",
                    reason: Some(
                        "sent now by an operator: the ledger proves it never reached the agent",
                    ),
                    error_code: None,
                },
            )?;
            moved(out, &task.task_id)?;
        }
        other => {
            return Err(stale(format!(
                "task {} is `{other}`, not held",
                task.task_id
            )))
        }
    }
    record(
        conn,
        entry,
        "outbox.handoff.dedicated",
        serde_json::json!({}),
    )
}

/// The history shows the message reached the agent, or nothing can prove
/// it did not: the entry stays held (the handoff ends, its reason says
/// why), and a found turn is recorded as `sent`.
pub fn keep_held(
    conn: &mut DbConn,
    entry: &OutboxEntry,
    from: HandoffPhase,
    reason: &str,
    sent_in: Option<&str>,
) -> Result<(), StoreError> {
    advance(conn, entry, from, None)?;
    with_conn!(conn, |c| diesel::update(
        outbox_entries::table.filter(outbox_entries::queue_id.eq(&entry.queue_id))
    )
    .set(outbox_entries::hold_reason.eq(reason))
    .execute(c))?;
    if let Some(turn) = sent_in {
        ledger::sent(conn, &entry.operation_id, Some(turn))?;
    }
    record(
        conn,
        entry,
        "outbox.handoff.refused",
        serde_json::json!({ "reason": reason, "sentInTurn": sent_in }),
    )
}
