//! A comment refused at intake, as a task born `rejected` with one receipt.

use super::decide::{delivery_row, record, task_row};
use super::lookups::BatchLookups;
use super::rows::{AuditDraft, BatchRows, ReceiptRow, TransitionRow};
use crate::domain::command::Command;
use crate::domain::{IngestRequest, ResourceKey, TaskId};
use crate::lifecycle::TaskState;

/// Why intake refuses a comment: its code, and what the audit and the
/// task's history say.
pub(super) struct Refusal {
    pub(super) code: &'static str,
    pub(super) reason: String,
    pub(super) meta: serde_json::Value,
}

/// A comment refused at intake (its session's outbox is full, or its
/// commenter's hourly limit is reached): a task born `rejected` with the
/// refusal's code, whose one receipt says why. The task holds the comment's
/// trigger, so a replay of the same comment is that task again, and never a
/// second receipt; a new comment is judged afresh. `None`: nothing names the
/// comment, so nothing was written.
pub(super) fn refuse(
    req: &IngestRequest,
    lookups: &mut BatchLookups,
    rows: &mut BatchRows,
    (repo_key, session_key, trigger_key): (&crate::domain::RepoKey, &ResourceKey, &str),
    command: Option<Command>,
    refusal: Refusal,
    at: &str,
) -> Option<TaskId> {
    let subject = req.subject.as_ref()?;
    let code = refusal.code;
    let task_id = TaskId::mint();
    record(
        lookups,
        rows,
        delivery_row(req, "rejected", Some(code), Some(&task_id), None, at),
    );
    rows.tasks.push(task_row(
        req,
        (&task_id, repo_key, session_key, trigger_key),
        (TaskState::Rejected, Some(code)),
        command,
        at,
    ));
    rows.transitions.push(TransitionRow {
        task_id: task_id.clone(),
        from_state: Some(TaskState::Received),
        to_state: TaskState::Rejected,
        state_version: 2,
        actor: "system".into(),
        reason: Some(refusal.reason),
        error_code: Some(code.to_owned()),
        at: at.to_owned(),
    });
    rows.receipts.push(ReceiptRow::pending(
        &task_id,
        TaskState::Rejected,
        session_key,
        at,
    ));
    let mut meta = refusal.meta;
    meta["stateVersion"] = 2.into();
    rows.audit(
        AuditDraft {
            task_id: Some(&task_id),
            states: (Some(TaskState::Received), Some(TaskState::Rejected)),
            delivery_id: Some(&req.delivery_id),
            comment_id: subject.comment_id,
            error_code: Some(code),
            ..AuditDraft::new("webhook.rejected", "system", meta)
        },
        at,
    );
    lookups.remember_task(
        trigger_key,
        &task_id,
        TaskState::Rejected,
        &req.delivery_key,
    );
    Some(task_id)
}
