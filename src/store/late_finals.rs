//! A worker comes back with the durable final of an attempt the server
//! stopped waiting for (its lease ran out, no worker answered the history
//! lookup) and the task went to `needs_reconciliation` meanwhile. The
//! server takes that final, once, as `needs_reconciliation →
//! verifying_reply`: the turn's end and final text are stored on the
//! attempt's turn, and the session verifies the reply the agent posted;
//! the model never runs again. A final of another attempt, of a task that
//! is not uncertain (or has ended), or from a worker that cannot have run
//! the attempt changes nothing and is refused with a stable code.

use crate::domain::TaskId;
use crate::lifecycle::{self, LateFinal, TaskState};
use crate::store::attempts::AttemptOwner;
use crate::store::audit::{self, Audit, AuditView};
use crate::store::control::{self, ControlRequest};
use crate::store::models::{Attempt, Turn};
use crate::store::schema::{attempts, turns};
use crate::store::tasks::{self, TransitionOutcome, TransitionRequest};
use crate::store::workers::{reconcile, Worker};
use crate::store::{DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;

/// The end of one attempt's turn as the worker's journal holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableFinal {
    /// Codex's id of the turn, when the journal learnt it.
    pub turn_id: Option<String>,
    /// The agent's final message.
    pub final_text: Option<String>,
}

fn refused(code: &'static str, message: String) -> StoreError {
    StoreError::Refused { code, message }
}

/// Takes `final_` of `attempt_id` of `task_id`, offered by `worker`: the
/// task moves to `verifying_reply` once; a repeat (after a lost answer)
/// gets the first audit event and changes nothing.
pub fn take(
    conn: &mut DbConn,
    worker: &Worker,
    task_id: &TaskId,
    attempt_id: &str,
    final_: &DurableFinal,
) -> Result<AuditView, StoreError> {
    let actor = AttemptOwner::Worker(worker.worker_id.clone()).stored();
    let req = ControlRequest {
        request_id: format!("{}:late-final:{attempt_id}", worker.worker_id),
        reason: format!(
            "the durable final of attempt {attempt_id}, from worker {}'s journal",
            worker.name.as_str()
        ),
        actor: actor.clone(),
    };
    let target = format!("{task_id}:{attempt_id}");
    control::idempotent(conn, &req, "task.late_final", target, |conn| {
        let task = tasks::find(conn, task_id)?.ok_or_else(|| {
            StoreError::NotFound(format!(
                "task {task_id}: this server has no such task (is the worker pointed at the \
                 server that handed it the turn?)"
            ))
        })?;
        let offered: Attempt = with_conn!(conn, |c| attempts::table
            .filter(attempts::attempt_id.eq(attempt_id))
            .filter(attempts::task_id.eq(task_id))
            .select(Attempt::as_select())
            .first(c)
            .optional())?
        .ok_or_else(|| StoreError::NotFound(format!("attempt {attempt_id} of task {task_id}")))?;
        reconcile::may_reconcile(worker, &task.repo_key, &offered)
            .map_err(|r| r.into_error(task_id, attempt_id))?;
        let latest: Option<String> = with_conn!(conn, |c| attempts::table
            .filter(attempts::task_id.eq(task_id))
            .order(attempts::number.desc())
            .select(attempts::attempt_id)
            .first(c)
            .optional())?;
        let expected_version = match lifecycle::late_final(
            task.state,
            task.state_version,
            latest.as_deref(),
            attempt_id,
        ) {
            LateFinal::Take { expected_version } => expected_version,
            // Ended for good: it never waits for a final again, and the
            // worker may stop offering it.
            LateFinal::NotUncertain(state) if state.is_terminal() => {
                return Err(refused(
                    "task_ended",
                    format!(
                        "task {task_id} ended `{state}`: it will never wait for this final, and \
                         nothing changed"
                    ),
                ))
            }
            LateFinal::NotUncertain(state) => {
                return Err(refused(
                    "not_uncertain",
                    format!(
                        "task {task_id} is `{state}`, not `needs_reconciliation`: the server \
                             does not wait for this final, and nothing changed"
                    ),
                ))
            }
            LateFinal::AnotherAttempt => {
                return Err(refused(
                    "attempt_mismatch",
                    format!(
                        "attempt {attempt_id} is not the latest attempt of task {task_id}: its \
                             final says nothing about the attempt the task waits on, and nothing \
                             changed"
                    ),
                ))
            }
        };
        let outcome = tasks::transition(
            conn,
            &TransitionRequest {
                task_id,
                to: TaskState::VerifyingReply,
                expected_version: Some(expected_version),
                actor: &actor,
                reason: Some("a durable final of the same attempt turned up in a worker's journal"),
                error_code: None,
            },
        )?;
        if !matches!(outcome, TransitionOutcome::Applied { .. }) {
            return Err(refused(
                "state_changed",
                format!("task {task_id} changed while its late final was taken ({outcome}); offer it again"),
            ));
        }
        record_end(conn, task_id, final_)?;
        audit::record(
            conn,
            &Audit::new("task.late_final_taken", &actor)
                .task(task_id)
                .states(
                    Some(TaskState::NeedsReconciliation),
                    Some(TaskState::VerifyingReply),
                )
                .meta(serde_json::json!({
                    "attemptId": attempt_id,
                    "turnId": final_.turn_id,
                    "worker": worker.name.as_str(),
                })),
        )
    })
}

/// Stores the turn's end on the attempt's own turn (the one its start
/// recorded, or the task's latest normal turn that has no end yet), so the
/// reply is verified, and if need be published, from the agent's text.
fn record_end(
    conn: &mut DbConn,
    task_id: &TaskId,
    final_: &DurableFinal,
) -> Result<(), StoreError> {
    let open: Vec<Turn> = with_conn!(conn, |c| turns::table
        .filter(turns::task_id.eq(task_id))
        .filter(turns::kind.eq("normal"))
        .filter(turns::completed_at.is_null())
        .order(turns::started_at.desc())
        .select(Turn::as_select())
        .load(c))?;
    let turn = open
        .iter()
        .find(|t| final_.turn_id.as_deref() == Some(t.turn_id.as_str()))
        .or(open.first());
    if let Some(t) = turn {
        crate::store::turns::record_turn_finished(
            conn,
            &t.turn_id,
            "completed",
            final_.final_text.as_deref(),
            t.event_seq,
        )?;
    }
    Ok(())
}
