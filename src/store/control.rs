//! Operator controls: global pause, and the idempotency of every
//! control request: a repeated `requestId` returns the first result and does
//! nothing again.

use super::audit::{self, Audit, AuditView};
use super::models::Control;
use super::schema::{control, control_requests};
use super::{now, DbConn, StoreError};
use crate::domain::states::RepoStatus;
use crate::domain::{RepoKey, TaskId};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;

/// Who asked for a control action, and why.
#[derive(Debug, Clone)]
pub struct ControlRequest {
    pub request_id: String,
    pub reason: String,
    /// `admin:<operator>` as it appears in audit events.
    pub actor: String,
}

pub fn get(conn: &mut DbConn) -> Result<Control, StoreError> {
    Ok(with_conn!(conn, |c| control::table
        .find(1_i64)
        .select(Control::as_select())
        .first(c))?)
}

/// Runs `apply` once per `requestId`: a repeat with the same action and target
/// returns the stored result; the same id for anything else is refused.
pub fn idempotent<F>(
    conn: &mut DbConn,
    req: &ControlRequest,
    action: &str,
    target: impl AsRef<str>,
    apply: F,
) -> Result<AuditView, StoreError>
where
    F: FnOnce(&mut DbConn) -> Result<AuditView, StoreError>,
{
    let target = target.as_ref();
    let previous: Option<(String, String, String)> = with_conn!(conn, |c| control_requests::table
        .find(&req.request_id)
        .select((
            control_requests::action,
            control_requests::target,
            control_requests::result
        ))
        .first(c)
        .optional())?;
    if let Some((prev_action, prev_target, result)) = previous {
        if prev_action != action || prev_target != target {
            return Err(StoreError::Refused {
                code: "request_id_conflict",
                message: format!(
                    "requestId {} was already used for `{prev_action}` on `{prev_target}`; use a new requestId",
                    req.request_id
                ),
            });
        }
        let stored: serde_json::Value = serde_json::from_str(&result)
            .map_err(|e| StoreError::Query(format!("stored control result is not JSON: {e}")))?;
        return audit_view_from_json(&stored);
    }
    let event = apply(conn)?;
    let text = serde_json::to_string(&event).map_err(|e| StoreError::Query(e.to_string()))?;
    let at = now();
    with_conn!(conn, |c| diesel::insert_into(control_requests::table)
        .values((
            control_requests::request_id.eq(&req.request_id),
            control_requests::action.eq(action),
            control_requests::target.eq(target),
            control_requests::result.eq(&text),
            control_requests::created_at.eq(&at),
        ))
        .execute(c))?;
    Ok(event)
}

fn audit_view_from_json(v: &serde_json::Value) -> Result<AuditView, StoreError> {
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    Ok(AuditView {
        seq: 0,
        event_id: s("eventId")
            .ok_or_else(|| StoreError::Query("stored result has no eventId".into()))?,
        task_id: s("taskId")
            .map(|t| TaskId::parse(&t))
            .transpose()
            .map_err(|e| StoreError::Query(format!("stored control result: {e}")))?,
        action: s("action").unwrap_or_default(),
        actor: s("actor").unwrap_or_default(),
        from_state: s("fromState").and_then(|t| TaskState::parse(&t).ok()),
        to_state: s("toState").and_then(|t| TaskState::parse(&t).ok()),
        delivery_id: s("deliveryId"),
        turn_id: s("turnId"),
        comment_id: v.get("commentId").and_then(|x| x.as_i64()),
        error_code: s("errorCode"),
        timestamp: s("timestamp").unwrap_or_default(),
        metadata: v
            .get("metadata")
            .cloned()
            .unwrap_or(serde_json::Value::Null),
    })
}

/// Pauses (`paused = true`) or resumes intake scheduling. Webhooks are still
/// accepted and stored while paused; their tasks stay `queued`.
pub fn set_paused(
    conn: &mut DbConn,
    req: &ControlRequest,
    paused: bool,
) -> Result<AuditView, StoreError> {
    let action = if paused {
        "control.pause"
    } else {
        "control.resume"
    };
    idempotent(conn, req, action, "global", |conn| {
        let before = get(conn)?;
        let at = now();
        with_conn!(conn, |c| diesel::update(control::table.find(1_i64))
            .set((
                control::global_paused.eq(paused),
                control::pause_reason.eq(if paused {
                    Some(req.reason.as_str())
                } else {
                    None
                }),
                control::updated_by.eq(&req.actor),
                control::updated_at.eq(&at),
                control::version.eq(before.version + 1),
            ))
            .execute(c))?;
        audit::record(
            conn,
            &Audit::new(action, &req.actor).meta(serde_json::json!({
                "requestId": req.request_id,
                "reason": req.reason,
                "wasPaused": before.global_paused,
                "paused": paused,
                "version": before.version + 1,
            })),
        )
    })
}

/// Disables or enables a repository (webhooks for a disabled one get 409; its
/// queued tasks wait).
pub fn set_repository_enabled(
    conn: &mut DbConn,
    req: &ControlRequest,
    repo_key: &RepoKey,
    enabled: bool,
) -> Result<AuditView, StoreError> {
    let action = if enabled {
        "repository.enable"
    } else {
        "repository.disable"
    };
    idempotent(conn, req, action, repo_key.as_str(), |conn| {
        let status = if enabled {
            RepoStatus::Active
        } else {
            RepoStatus::Disabled
        };
        let before = super::queue::set_repository_status(conn, repo_key, status)?
            .ok_or_else(|| StoreError::NotFound(format!("repository {repo_key}")))?;
        audit::record(
            conn,
            &Audit::new(action, &req.actor).meta(serde_json::json!({
                "requestId": req.request_id,
                "reason": req.reason,
                "repoKey": repo_key,
                "before": before,
                "after": status,
            })),
        )
    })
}

/// Cancels a task that has not started (`queued`, `waiting_user`, `blocked_workspace`).
pub fn cancel_task(
    conn: &mut DbConn,
    req: &ControlRequest,
    task_id: &TaskId,
) -> Result<AuditView, StoreError> {
    use crate::lifecycle::TaskState;
    idempotent(conn, req, "task.cancel", task_id, |conn| {
        let task = super::tasks::find(conn, task_id)?
            .ok_or_else(|| StoreError::NotFound(format!("task {task_id}")))?;
        let cancellable = ["queued", "waiting_user", "blocked_workspace"];
        if !cancellable.contains(&task.state.as_str()) {
            return Err(StoreError::Refused {
                code: "not_cancellable",
                message: format!(
                    "task {task_id} is `{}`: cancel takes queued, waiting_user or blocked_workspace tasks; use abort for running work",
                    task.state
                ),
            });
        }
        child_stays_whole(conn, &task)?;
        transition_by_operator(conn, req, &task, TaskState::Cancelled, "task.cancel")
    })
}

/// Drops a held outbox entry: an entry whose delivery nothing proves (a
/// steer whose answer was lost and whose run does not show it, held with
/// auto-drain off) or whose task waits for reconciliation. Its task ends
/// `cancelled`; nothing is sent, now or later.
pub fn drop_entry(
    conn: &mut DbConn,
    req: &ControlRequest,
    queue_id: &str,
) -> Result<AuditView, StoreError> {
    use crate::lifecycle::TaskState;
    idempotent(conn, req, "outbox.drop", queue_id, |conn| {
        let (_, task) = held_entry(
            conn,
            queue_id,
            "drop takes held entries; cancel or abort the task instead",
        )?;
        child_stays_whole(conn, &task)?;
        transition_by_operator(conn, req, &task, TaskState::Cancelled, "outbox.drop")
    })
}

/// A held outbox entry by its queue id, with its task: an entry whose task
/// is queued with auto-drain off, or whose task waits for reconciliation.
/// Anything else is refused (`not_held`), `instead` saying what to do.
pub(super) fn held_entry(
    conn: &mut DbConn,
    queue_id: &str,
    instead: &str,
) -> Result<(super::models::OutboxEntry, super::models::Task), StoreError> {
    use crate::lifecycle::TaskState;
    let entry = super::sessions::entry_by_queue_id(conn, queue_id)?
        .ok_or_else(|| StoreError::NotFound(format!("outbox entry {queue_id}")))?;
    let task = super::tasks::find(conn, &entry.task_id)?
        .ok_or_else(|| StoreError::NotFound(format!("task {}", entry.task_id)))?;
    let held = (task.state == TaskState::Queued && !entry.auto_drain)
        || task.state == TaskState::NeedsReconciliation;
    if !held {
        return Err(StoreError::Refused {
            code: "not_held",
            message: format!(
                "outbox entry {queue_id} is not held (its task is `{}`, auto-drain {}): {instead}",
                task.state,
                if entry.auto_drain { "on" } else { "off" }
            ),
        });
    }
    Ok((entry, task))
}

/// Puts a `blocked_workspace` task back in the queue after an operator has
/// looked at (and cleaned) the workspace; nothing here touches the files.
/// The session's next turn takes its worktree as the operator left it.
pub fn clear_workspace(
    conn: &mut DbConn,
    req: &ControlRequest,
    task_id: &TaskId,
) -> Result<AuditView, StoreError> {
    use crate::lifecycle::TaskState;
    idempotent(conn, req, "task.clear_workspace", task_id, |conn| {
        let task = super::tasks::find(conn, task_id)?
            .ok_or_else(|| StoreError::NotFound(format!("task {task_id}")))?;
        if task.state != TaskState::BlockedWorkspace {
            return Err(StoreError::Refused {
                code: "not_blocked",
                message: format!(
                    "task {task_id} is `{}`: clear-workspace takes blocked_workspace tasks only",
                    task.state
                ),
            });
        }
        super::worktrees::accept(conn, &task.session_key)?;
        transition_by_operator(conn, req, &task, TaskState::Queued, "task.clear_workspace")
    })
}

/// Asks running work to stop: the task goes to `cancel_requested`; the session
/// actor interrupts the turn and settles it (`aborted`, or `needs_reconciliation`
/// when the interrupt is not confirmed).
pub fn abort_task(
    conn: &mut DbConn,
    req: &ControlRequest,
    task_id: &TaskId,
) -> Result<AuditView, StoreError> {
    use crate::lifecycle::TaskState;
    idempotent(conn, req, "task.abort", task_id, |conn| {
        let task = super::tasks::find(conn, task_id)?
            .ok_or_else(|| StoreError::NotFound(format!("task {task_id}")))?;
        let abortable = ["leased", "running", "awaiting_approval"];
        if !abortable.contains(&task.state.as_str()) {
            return Err(StoreError::Refused {
                code: "not_abortable",
                message: format!(
                    "task {task_id} is `{}`: abort takes leased, running or awaiting_approval tasks; use cancel for queued ones",
                    task.state
                ),
            });
        }
        transition_by_operator(conn, req, &task, TaskState::CancelRequested, "task.abort")
    })
}

/// An operator does not end one turn of a delegated child that is still
/// open: nothing would then run for the child, nor tell its parent (a
/// handoff's parent would wait for good). The child is cancelled whole
/// instead, which cancels its turn not yet started and gives the parent an
/// incomplete result; a turn that is still uncertain may be reconciled or
/// dropped after that.
fn child_stays_whole(conn: &mut DbConn, task: &super::models::Task) -> Result<(), StoreError> {
    if task.session_key.child().is_none() {
        return Ok(());
    }
    let child = match &task.workflow_id {
        Some(id) => super::workflows::find(conn, id)?,
        None => super::workflows::live(conn, &task.session_key)?,
    };
    match child {
        Some(w) if !w.state.is_end() => Err(StoreError::Refused {
            code: "child_open",
            message: format!(
                "task {} is a turn of delegated child workflow {}, which is `{}`: cancel the child \
                 instead (POST /api/gitea-workflow/workflows/{}/cancel), which cancels its turn \
                 not yet started and gives its parent an incomplete result",
                task.task_id, w.workflow_id, w.state, w.workflow_id
            ),
        }),
        _ => Ok(()),
    }
}

fn transition_by_operator(
    conn: &mut DbConn,
    req: &ControlRequest,
    task: &super::models::Task,
    to: crate::lifecycle::TaskState,
    action: &str,
) -> Result<AuditView, StoreError> {
    use super::tasks::{transition, TransitionOutcome, TransitionRequest};
    let out = transition(
        conn,
        &TransitionRequest {
            task_id: &task.task_id,
            to,
            expected_version: Some(task.state_version),
            actor: &req.actor,
            reason: Some(&req.reason),
            error_code: None,
        },
    )?;
    if !matches!(out, TransitionOutcome::Applied { .. }) {
        return Err(StoreError::Refused {
            code: "state_changed",
            message: format!(
                "task {} changed meanwhile ({out}); look again and retry",
                task.task_id
            ),
        });
    }
    audit::record(
        conn,
        &Audit::new(action, &req.actor)
            .task(&task.task_id)
            .states(Some(task.state), Some(to))
            .meta(serde_json::json!({ "requestId": req.request_id, "reason": req.reason })),
    )
}

/// The operator's reconciliation of a task's uncertain attempt, as the admin
/// API and the CLI both do it: refused for a turn of an open delegated child
/// (cancel the child first), otherwise [`super::tasks::reconcile`].
pub fn reconcile(
    conn: &mut DbConn,
    task_id: &TaskId,
    attempt_id: &str,
    verdict: super::tasks::Verdict,
    actor: &str,
    reason: &str,
) -> Result<AuditView, StoreError> {
    if let Some(task) = super::tasks::find(conn, task_id)? {
        child_stays_whole(conn, &task)?;
    }
    super::tasks::reconcile(conn, task_id, attempt_id, verdict, actor, reason)
}

/// The operator's reconciliation through the admin API, idempotent by its
/// `requestId`.
pub fn reconcile_task(
    conn: &mut DbConn,
    req: &ControlRequest,
    task_id: &TaskId,
    attempt_id: &str,
    verdict: super::tasks::Verdict,
) -> Result<AuditView, StoreError> {
    idempotent(conn, req, "task.reconcile", task_id, |conn| {
        reconcile(conn, task_id, attempt_id, verdict, &req.actor, &req.reason)
    })
}
