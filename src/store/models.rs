//! Rows (`Task`) and inserts (`NewTask`). Rows serialise in camelCase: they are
//! the admin API's shapes, so field names here are a contract.

use super::schema::*;
use crate::domain::command::Command;
use crate::domain::states::{
    CommentKind, CommentStatus, HandoffPhase, OutboxStatus, RepoStatus, SendMode, ThreadTrust,
};
use crate::domain::{OperationId, RepoKey, ResourceKey, ResourceKind, TaskId, WorkflowId};
use crate::lifecycle::TaskState;
use diesel::prelude::*;
use serde::Serialize;

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = repositories)]
#[serde(rename_all = "camelCase")]
pub struct Repository {
    pub repo_key: RepoKey,
    pub instance_id: String,
    pub owner: String,
    pub name: String,
    pub clone_url: Option<String>,
    pub default_branch: Option<String>,
    pub status: RepoStatus,
    pub registered_at: String,
    pub updated_at: String,
    pub version: i64,
}

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = sessions)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub session_key: ResourceKey,
    pub repo_key: RepoKey,
    pub kind: ResourceKind,
    pub number: i64,
    pub thread_id: Option<String>,
    pub status: String,
    pub last_task_id: Option<TaskId>,
    pub created_at: String,
    pub updated_at: String,
    pub version: i64,
    /// Outbox entries whose task has not ended (the capacity check's counter).
    pub open_entries: i64,
    /// What the thread was created to be trusted with (`None`: a thread made
    /// before trust was recorded, which had every tool).
    pub thread_trust: Option<ThreadTrust>,
    /// How many times the thread was started over (`/reset`, a change of
    /// trust).
    pub thread_generation: i64,
    /// The thread was started with the bridge's tools (its workflow can be
    /// completed, so it is continued).
    pub thread_tools: bool,
    /// Why the storm guard paused it (its tasks wait until it is resumed).
    pub paused_reason: Option<String>,
    pub paused_at: Option<String>,
    /// When an operator last resumed it: turns before no longer count.
    pub resumed_at: Option<String>,
    /// The Codex home whose app-server created the thread (`None`: not
    /// recorded; the thread is taken to be resumable here).
    pub thread_home: Option<String>,
    /// When the conversation the thread carries began (`None`: not
    /// recorded; a rebuild carries only the thread's own turns).
    pub conversation_since: Option<String>,
}

#[derive(Queryable, Selectable, Insertable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = webhook_deliveries, treat_none_as_default_value = false)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    pub delivery_key: String,
    pub delivery_id: String,
    pub event_type: String,
    pub action: Option<String>,
    pub status: String,
    pub reason: Option<String>,
    pub repo_key: Option<RepoKey>,
    pub resource_key: Option<ResourceKey>,
    pub comment_id: Option<i64>,
    pub content_key: Option<String>,
    pub duplicate_of: Option<String>,
    pub task_id: Option<TaskId>,
    pub sender: Option<String>,
    pub payload_hash: String,
    pub received_at: String,
}

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = tasks)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    #[serde(skip)]
    pub id: i64,
    pub task_id: TaskId,
    pub delivery_key: String,
    pub repo_key: RepoKey,
    pub session_key: ResourceKey,
    pub resource_key: ResourceKey,
    pub trigger_key: String,
    pub comment_id: Option<i64>,
    pub author: String,
    pub state: TaskState,
    pub state_version: i64,
    pub attempt: i64,
    pub reply_attempt: i64,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub lease_id: Option<String>,
    pub next_retry_at: Option<String>,
    pub error_code: Option<String>,
    pub head_ref: Option<String>,
    pub base_ref: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// What the comment asked besides an instruction (`@bot /stop`); `null`
    /// for an instruction.
    pub command: Option<Command>,
    /// A steer's: the task whose running turn took it in.
    pub steered_into: Option<TaskId>,
    /// The workflow the task is a logical input of (once it ran).
    pub workflow_id: Option<WorkflowId>,
    /// A continuation task's number in its workflow (`null`: a comment's).
    pub continuation: Option<i64>,
}

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = task_transitions)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    #[serde(skip)]
    pub id: i64,
    #[serde(skip)]
    pub task_id: TaskId,
    #[serde(rename = "from")]
    pub from_state: Option<TaskState>,
    #[serde(rename = "to")]
    pub to_state: TaskState,
    pub state_version: i64,
    pub actor: String,
    pub reason: Option<String>,
    pub error_code: Option<String>,
    pub at: String,
}

#[derive(Insertable, Debug, Clone)]
#[diesel(table_name = task_transitions)]
pub struct NewTransition<'a> {
    pub task_id: &'a TaskId,
    pub from_state: Option<TaskState>,
    pub to_state: TaskState,
    pub state_version: i64,
    pub actor: &'a str,
    pub reason: Option<&'a str>,
    pub error_code: Option<&'a str>,
    pub at: &'a str,
}

#[derive(Queryable, Selectable, Insertable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = attempts)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    pub attempt_id: String,
    pub task_id: TaskId,
    pub number: i64,
    pub lease_id: Option<String>,
    pub owner: Option<String>,
    pub status: String,
    pub outcome: Option<String>,
    pub started_at: String,
    pub ended_at: Option<String>,
}

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = outbox_entries)]
#[serde(rename_all = "camelCase", into = "OutboxView")]
pub struct OutboxEntry {
    #[serde(skip)]
    pub id: i64,
    pub queue_id: String,
    pub session_key: ResourceKey,
    pub task_id: TaskId,
    pub operation_id: OperationId,
    pub fingerprint: String,
    pub mode: SendMode,
    pub status: OutboxStatus,
    pub auto_drain: bool,
    pub hold_reason: Option<String>,
    /// The comment's instruction: stored for the turn, never logged.
    pub user_text: String,
    pub created_at: String,
    pub updated_at: String,
    pub version: i64,
    pub command: Option<Command>,
    /// What follows the command's word, as typed (an approval id, a steer's
    /// text); never logged.
    #[serde(skip)]
    pub command_argument: Option<String>,
    /// The turn a `steer-running` entry expects to be active.
    pub expected_turn_id: Option<String>,
    /// The turn that accepted the steer.
    pub accepted_turn_id: Option<String>,
    /// `/interrupt`, `/replace`: the task whose run this message stopped.
    pub supersedes: Option<TaskId>,
    /// `/replace`: the turn dropped from the thread before this is sent.
    pub revert_turn_id: Option<String>,
    /// When that turn was dropped.
    pub reverted_at: Option<String>,
    /// "Stop and send now": its phase, and what it pinned.
    pub handoff_phase: Option<HandoffPhase>,
    pub handoff_thread_id: Option<String>,
    pub handoff_turn_id: Option<String>,
    pub handoff_run_task_id: Option<TaskId>,
}

/// An outbox entry as the API shows it: its columns, and the seed's names
/// for its send controls, derived from `mode` and `expected_turn_id`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxView {
    queue_id: String,
    session_key: ResourceKey,
    task_id: TaskId,
    operation_id: OperationId,
    fingerprint: String,
    mode: SendMode,
    status: OutboxStatus,
    auto_drain: bool,
    hold_reason: Option<String>,
    /// The comment's instruction: stored for the turn, never logged.
    user_text: String,
    created_at: String,
    updated_at: String,
    version: i64,
    command: Option<Command>,
    /// The turn a `steer-running` entry expects to be active.
    expected_turn_id: Option<String>,
    /// The turn that accepted the steer.
    accepted_turn_id: Option<String>,
    /// `/interrupt`, `/replace`: the task whose run this message stopped.
    supersedes: Option<TaskId>,
    /// `/replace`: the turn dropped from the thread before this is sent.
    revert_turn_id: Option<String>,
    /// When that turn was dropped.
    reverted_at: Option<String>,
    /// `enqueue`, `automatic` or `replace-latest`.
    intent: &'static str,
    /// `queue`, `steer-running` or `interrupt-running`.
    send_mode: &'static str,
    /// A steer's run: the turn it expects to be active.
    expected_active_run_id: Option<String>,
    /// "Stop and send now" of a held entry: where it stands, and what it
    /// pinned.
    handoff_phase: Option<HandoffPhase>,
    handoff_thread_id: Option<String>,
    handoff_turn_id: Option<String>,
    handoff_run_task_id: Option<TaskId>,
}

impl From<OutboxEntry> for OutboxView {
    fn from(e: OutboxEntry) -> Self {
        OutboxView {
            intent: e.mode.intent(),
            send_mode: e.mode.send_mode(),
            handoff_phase: e.handoff_phase,
            handoff_thread_id: e.handoff_thread_id,
            handoff_turn_id: e.handoff_turn_id,
            handoff_run_task_id: e.handoff_run_task_id,
            queue_id: e.queue_id,
            session_key: e.session_key,
            task_id: e.task_id,
            operation_id: e.operation_id,
            fingerprint: e.fingerprint,
            mode: e.mode,
            status: e.status,
            auto_drain: e.auto_drain,
            hold_reason: e.hold_reason,
            user_text: e.user_text,
            created_at: e.created_at,
            updated_at: e.updated_at,
            version: e.version,
            command: e.command,
            expected_active_run_id: e.expected_turn_id.clone(),
            expected_turn_id: e.expected_turn_id,
            accepted_turn_id: e.accepted_turn_id,
            supersedes: e.supersedes,
            revert_turn_id: e.revert_turn_id,
            reverted_at: e.reverted_at,
        }
    }
}

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = turns)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    pub turn_id: String,
    pub task_id: TaskId,
    pub thread_id: String,
    pub kind: String,
    pub status: String,
    pub event_seq: i64,
    pub final_text: Option<String>,
    pub started_at: String,
    pub completed_at: Option<String>,
    /// Its thread settled idle without a `turn/completed`: a candidate
    /// final, until the history confirms it or activity voids it.
    pub idle_at: Option<String>,
}

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = comments)]
#[serde(rename_all = "camelCase")]
pub struct Comment {
    pub comment_key: String,
    pub task_id: TaskId,
    pub kind: CommentKind,
    pub resource_key: ResourceKey,
    pub turn_id: Option<String>,
    pub comment_id: Option<i64>,
    pub html_url: Option<String>,
    pub body_hash: Option<String>,
    pub status: CommentStatus,
    pub created_at: String,
    pub updated_at: String,
    pub attempts: i64,
    pub next_attempt_at: Option<String>,
    pub last_error: Option<String>,
    /// A command's answer, as decided (other kinds render their text when
    /// posted).
    pub body: Option<String>,
}

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = approvals)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub approval_id: String,
    pub task_id: TaskId,
    pub kind: String,
    pub detail: String,
    pub status: String,
    pub decision: Option<String>,
    pub decided_by: Option<String>,
    pub created_at: String,
    pub decided_at: Option<String>,
    #[serde(skip)]
    pub request_key: Option<String>,
}

#[derive(Queryable, Selectable, Debug, Clone, PartialEq)]
#[diesel(table_name = audit_events)]
pub struct AuditEvent {
    pub id: i64,
    pub event_id: String,
    pub task_id: Option<TaskId>,
    pub action: String,
    pub actor: String,
    pub from_state: Option<TaskState>,
    pub to_state: Option<TaskState>,
    pub delivery_id: Option<String>,
    pub turn_id: Option<String>,
    pub comment_id: Option<i64>,
    pub error_code: Option<String>,
    pub metadata: String,
    pub at: String,
}

#[derive(Insertable, Debug, Clone)]
#[diesel(table_name = audit_events)]
pub struct NewAuditEvent<'a> {
    pub event_id: &'a str,
    pub task_id: Option<&'a TaskId>,
    pub action: &'a str,
    pub actor: &'a str,
    pub from_state: Option<TaskState>,
    pub to_state: Option<TaskState>,
    pub delivery_id: Option<&'a str>,
    pub turn_id: Option<&'a str>,
    pub comment_id: Option<i64>,
    pub error_code: Option<&'a str>,
    pub metadata: &'a str,
    pub at: &'a str,
}

#[derive(Queryable, Selectable, Debug, Clone, PartialEq)]
#[diesel(table_name = control)]
pub struct Control {
    pub id: i64,
    pub global_paused: bool,
    pub pause_reason: Option<String>,
    pub updated_by: Option<String>,
    pub updated_at: String,
    pub version: i64,
}
