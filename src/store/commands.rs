//! The rows a session's command lane reads and writes: its queued turnless
//! commands (through the partial index `tasks_queued_commands`), the facts a
//! command is decided on, and the one transaction that carries a decision
//! out.

use super::audit::{self, Audit};
use super::models::{Approval, OutboxEntry, Task};
use super::queue::literal;
use super::schema::{approvals, comment_changes, outbox_entries, sessions, tasks};
use super::sessions::{driven_tasks_of_session, session};
use super::tasks::{transition, TransitionOutcome, TransitionRequest};
use super::{now, DbConn, StoreError};
use crate::domain::command::Command;
use crate::domain::fingerprint::{prompt_text, Fingerprint};
use crate::domain::states::ChangeKind;
use crate::domain::{RepoKey, ResourceKey, TaskId, WorkflowId};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;
use std::collections::HashMap;

/// Queued commands, as the literal condition of the partial index
/// `tasks_queued_commands` (migration 2026-12-03-000016): SQLite uses a partial
/// index only for a query that contains its condition as written.
pub const QUEUED_COMMANDS: &str = "state = 'queued' AND command IS NOT NULL";

/// The stored names of the commands that need no turn.
pub(super) fn turnless_names() -> Vec<&'static str> {
    Command::ALL
        .into_iter()
        .filter(|c| c.is_turnless())
        .map(Command::as_str)
        .collect()
}

/// The key of a command task's answer row.
pub fn answer_key(task_id: &TaskId) -> String {
    format!("{task_id}:answer")
}

/// The session's oldest queued command among `names` (through the partial
/// index `tasks_queued_commands`): what each of the session's lanes works on.
pub(super) fn oldest_queued(
    conn: &mut DbConn,
    session_key: &ResourceKey,
    names: &[&str],
) -> Result<Option<Task>, StoreError> {
    Ok(with_conn!(conn, |c| tasks::table
        .filter(literal(QUEUED_COMMANDS))
        .filter(tasks::session_key.eq(session_key))
        .filter(tasks::command.eq_any(names))
        .order(tasks::id.asc())
        .select(Task::as_select())
        .first(c)
        .optional())?)
}

/// The outbox entry of a queued command's task; every task the ingest
/// accepts has one, so a missing one is a defect to report, not skip.
pub(super) fn entry_of(conn: &mut DbConn, task: &Task) -> Result<OutboxEntry, StoreError> {
    super::sessions::outbox_entry(conn, &task.task_id)?
        .ok_or_else(|| StoreError::NotFound(format!("the outbox entry of task {}", task.task_id)))
}

/// The session's oldest queued command its lane answers (a turnless
/// command, or a turn command with nothing to act on), with what followed
/// its word.
pub fn next_command(
    conn: &mut DbConn,
    session_key: &ResourceKey,
) -> Result<Option<(Task, Option<String>)>, StoreError> {
    // The queued commands through their partial index, then what followed
    // each one's word: two reads, however many wait.
    let queued: Vec<Task> = with_conn!(conn, |c| tasks::table
        .filter(literal(QUEUED_COMMANDS))
        .filter(tasks::session_key.eq(session_key))
        .order(tasks::id.asc())
        .select(Task::as_select())
        .load(c))?;
    let ids: Vec<&TaskId> = queued.iter().map(|t| &t.task_id).collect();
    let arguments: HashMap<TaskId, Option<String>> = with_conn!(conn, |c| outbox_entries::table
        .filter(outbox_entries::task_id.eq_any(&ids))
        .select((outbox_entries::task_id, outbox_entries::command_argument))
        .load::<(TaskId, Option<String>)>(c))?
    .into_iter()
    .collect();
    Ok(queued.into_iter().find_map(|task| {
        let argument = arguments.get(&task.task_id).cloned().flatten();
        let lanes = task
            .command
            .is_some_and(|c| c.answered_by_lane(argument.as_deref(), task.resource_key.is_pull()));
        lanes.then_some((task, argument))
    }))
}

/// Sessions with a queued command (every command may be its lanes' to act
/// on: `/review` too, which on an Issue its lane answers), a comment change
/// to decide on, or a handoff under way: the registry's sweep wakes them
/// (work accepted by a process that died, or by another instance).
pub fn sessions_with_commands(
    conn: &mut DbConn,
) -> Result<Vec<(ResourceKey, RepoKey)>, StoreError> {
    let mut sessions: Vec<(ResourceKey, RepoKey)> = with_conn!(conn, |c| tasks::table
        .filter(literal(QUEUED_COMMANDS))
        .select((tasks::session_key, tasks::repo_key))
        .distinct()
        .load(c))?;
    // And those with a comment edit or deletion to decide on.
    let changed: Vec<ResourceKey> = with_conn!(conn, |c| comment_changes::table
        .filter(literal(CHANGES_PENDING))
        .select(comment_changes::session_key)
        .distinct()
        .load(c))?;
    for key in changed {
        if !sessions.iter().any(|(s, _)| *s == key) {
            let repo = key.repo().clone();
            sessions.push((key, repo));
        }
    }
    // And those with a "stop and send now" under way.
    for (key, repo) in super::handoff::sessions_with_handoffs(conn)? {
        if !sessions.iter().any(|(s, _)| *s == key) {
            sessions.push((key, repo));
        }
    }
    Ok(sessions)
}

/// What a session's command is decided on, besides the command itself.
#[derive(Debug, Clone)]
pub struct SessionFacts {
    /// Tasks its actor drives, oldest first.
    pub driven: Vec<Task>,
    /// Queued tasks that wait for a turn (queued commands left out), oldest
    /// first.
    pub queued: Vec<Task>,
    /// Pending approvals of its tasks and of its delegated children's
    /// (whose approvals are asked in the same thread), oldest first, each
    /// with the session that drives its task.
    pub approvals: Vec<(Approval, ResourceKey)>,
    pub thread_id: Option<String>,
    /// The session's workflow that has not ended.
    pub workflow: Option<super::workflows::Workflow>,
}

pub fn session_facts(
    conn: &mut DbConn,
    session_key: &ResourceKey,
) -> Result<SessionFacts, StoreError> {
    let driven = driven_tasks_of_session(conn, session_key)?;
    let turnless = turnless_names();
    let queued: Vec<Task> = with_conn!(conn, |c| tasks::table
        .filter(tasks::session_key.eq(session_key))
        .filter(tasks::state.eq(TaskState::Queued.as_str()))
        .filter(tasks::command.is_null().or(tasks::command.ne_all(turnless)),)
        .order(tasks::id.asc())
        .select(Task::as_select())
        .load(c))?;
    let approvals: Vec<(Approval, ResourceKey)> = with_conn!(conn, |c| approvals::table
        .inner_join(tasks::table.on(tasks::task_id.eq(approvals::task_id)))
        .filter(tasks::resource_key.eq(session_key))
        .filter(approvals::status.eq("pending"))
        .order(approvals::created_at.asc())
        .select((Approval::as_select(), tasks::session_key))
        .load(c))?;
    let thread_id = session(conn, session_key)?.and_then(|s| s.thread_id);
    let workflow = super::workflows::live(conn, session_key)?;
    Ok(SessionFacts {
        driven,
        queued,
        approvals,
        thread_id,
        workflow,
    })
}

/// A command decision as the store carries it out.
#[derive(Debug, Clone)]
pub struct CommandWrite {
    pub task_id: TaskId,
    pub session_key: ResourceKey,
    pub command: Command,
    pub expected_version: i64,
    pub to: TaskState,
    /// `gitea:user:<login>`: who gave the command.
    pub actor: String,
    pub reason: String,
    pub code: Option<String>,
    /// Queued tasks to cancel, each at the version decided on.
    pub cancel: Vec<(TaskId, i64)>,
    /// The running task to stop, at the version decided on.
    pub stop: Option<(TaskId, i64)>,
    /// The thread to forget.
    pub reset_thread: Option<String>,
    /// An approval to decide: id, accept.
    pub approval: Option<(String, bool)>,
    /// The answer's text.
    pub answer: Option<String>,
    /// What the command does to the session's workflow.
    pub workflow: Option<WorkflowWrite>,
}

/// A command's write to the session's workflow, at the version decided on.
#[derive(Debug, Clone)]
pub enum WorkflowWrite {
    /// `/stop`: it waits for its owner behind a gate asking `question` (the
    /// command's answer is its comment).
    Halt {
        workflow_id: WorkflowId,
        version: i64,
        question: String,
    },
    /// The owner's `/cancel`: it ends `cancelled`.
    Cancel {
        workflow_id: WorkflowId,
        version: i64,
    },
}

/// `Refused { code: STALE }`: something the decision named changed; the
/// whole write is rolled back and the command decided again.
pub const STALE: &str = "command_stale";

fn stale(what: String) -> StoreError {
    StoreError::Refused {
        code: STALE,
        message: what,
    }
}

fn moved(out: TransitionOutcome, task_id: &TaskId) -> Result<(), StoreError> {
    match out {
        TransitionOutcome::Applied { .. } => Ok(()),
        other => Err(stale(format!("task {task_id}: {other}"))),
    }
}

/// Carries a command decision out in one transaction: the command task's
/// transition and every write it implies, each task moved by compare-and-swap
/// on the version decided on. Anything moved meanwhile rolls it all back
/// (`Refused { code: STALE }`).
/// The workflow a command decided on; stale if it is gone.
fn live_workflow(
    conn: &mut DbConn,
    id: &WorkflowId,
) -> Result<super::workflows::Workflow, StoreError> {
    super::workflows::find(conn, id)?.ok_or_else(|| stale(format!("workflow {id} is gone")))
}

/// A workflow that moved on is a fact the command decided on that moved.
fn restale(e: StoreError) -> StoreError {
    match e {
        StoreError::Refused { code, message } if code == super::steer::STALE => stale(message),
        e => e,
    }
}

pub fn carry_out(conn: &mut DbConn, w: &CommandWrite) -> Result<(), StoreError> {
    let own = transition(
        conn,
        &TransitionRequest {
            task_id: &w.task_id,
            to: w.to,
            expected_version: Some(w.expected_version),
            actor: &w.actor,
            reason: Some(&w.reason),
            error_code: w.code.as_deref(),
        },
    )?;
    moved(own, &w.task_id)?;
    let why = format!("`/{}` (task {})", w.command, w.task_id);
    for (task_id, version) in &w.cancel {
        let out = transition(
            conn,
            &TransitionRequest {
                task_id,
                to: TaskState::Cancelled,
                expected_version: Some(*version),
                actor: &w.actor,
                reason: Some(&why),
                error_code: Some("cancelled_by_command"),
            },
        )?;
        moved(out, task_id)?;
    }
    if let Some((task_id, version)) = &w.stop {
        let out = transition(
            conn,
            &TransitionRequest {
                task_id,
                to: TaskState::CancelRequested,
                expected_version: Some(*version),
                actor: &w.actor,
                reason: Some(&why),
                error_code: None,
            },
        )?;
        moved(out, task_id)?;
    }
    match &w.workflow {
        Some(WorkflowWrite::Halt {
            workflow_id,
            version,
            question,
        }) => {
            let wf = live_workflow(conn, workflow_id)?;
            super::workflows::gate(
                conn,
                &wf,
                *version,
                crate::domain::workflow::GateKind::Stopped,
                question,
                &w.task_id,
            )
            .map_err(restale)?;
        }
        Some(WorkflowWrite::Cancel {
            workflow_id,
            version,
        }) => {
            let wf = live_workflow(conn, workflow_id)?;
            super::workflows::end(
                conn,
                &wf,
                *version,
                crate::domain::workflow::WorkflowState::Cancelled,
                "cancelled",
                None,
                Some(&w.task_id),
            )
            .map_err(restale)?;
        }
        None => {}
    }
    if let Some(old) = &w.reset_thread {
        let at = now();
        let n = with_conn!(conn, |c| diesel::update(
            sessions::table
                .filter(sessions::session_key.eq(&w.session_key))
                .filter(sessions::thread_id.eq(old))
        )
        .set((
            sessions::thread_id.eq(None::<String>),
            sessions::thread_trust.eq(None::<crate::domain::states::ThreadTrust>),
            sessions::thread_tools.eq(false),
            sessions::thread_home.eq(None::<String>),
            sessions::conversation_since.eq(None::<String>),
            sessions::thread_generation.eq(sessions::thread_generation + 1),
            sessions::updated_at.eq(&at),
        ))
        .execute(c))?;
        if n == 0 {
            return Err(stale(format!(
                "session {}: its thread changed",
                w.session_key
            )));
        }
        audit::record(
            conn,
            &Audit::new("session.thread_reset", &w.actor)
                .task(&w.task_id)
                .meta(serde_json::json!({ "sessionKey": w.session_key, "oldThreadId": old })),
        )?;
    }
    if let Some((approval_id, accept)) = &w.approval {
        let request_id = format!("{}:{approval_id}", w.task_id);
        match super::approvals::record_decision(
            conn,
            approval_id,
            *accept,
            &w.actor,
            &why,
            Some(&request_id),
        ) {
            Ok(_) => {}
            Err(StoreError::Refused {
                code: "already_decided",
                message,
            }) => return Err(stale(message)),
            Err(e) => return Err(e),
        }
    }
    if let Some(body) = &w.answer {
        super::comments::enqueue_note(
            conn,
            &answer_key(&w.task_id),
            &w.task_id,
            &w.session_key,
            body,
        )?;
    }
    audit::record(
        conn,
        &Audit::new(&format!("command.{}", w.command), &w.actor)
            .task(&w.task_id)
            .meta(serde_json::json!({
                "decidedOnVersion": w.expected_version,
                "to": w.to,
                "reason": w.reason,
                "cancelled": w.cancel.iter().map(|(t, _)| t).collect::<Vec<_>>(),
                "stopped": w.stop.as_ref().map(|(t, _)| t),
                "threadReset": w.reset_thread,
                "approval": w.approval.as_ref().map(|(a, accept)| serde_json::json!({"approvalId": a, "accept": accept})),
            })),
    )?;
    Ok(())
}

/// Pending comment changes, as the literal condition of the partial index
/// `comment_changes_pending`.
pub const CHANGES_PENDING: &str = "comment_changes.status = 'pending'";

/// An edit or deletion of a task's comment, waiting for its session.
#[derive(Queryable, Selectable, Debug, Clone)]
#[diesel(table_name = comment_changes)]
pub struct CommentChange {
    pub id: i64,
    pub task_id: TaskId,
    pub session_key: ResourceKey,
    pub kind: ChangeKind,
    /// The edited text; never logged.
    pub body: Option<String>,
    pub command: Option<Command>,
    pub command_argument: Option<String>,
    pub written_at: String,
    /// The edited comment's attachments: a JSON array of asset ids.
    pub attachments: String,
}

impl CommentChange {
    pub fn attachment_ids(&self) -> Vec<i64> {
        serde_json::from_str(&self.attachments).unwrap_or_default()
    }
}

/// The session's oldest pending comment change, with its task.
pub fn next_change(
    conn: &mut DbConn,
    session_key: &ResourceKey,
) -> Result<Option<(CommentChange, Task)>, StoreError> {
    let row: Option<(CommentChange, Task)> = with_conn!(conn, |c| comment_changes::table
        .inner_join(tasks::table.on(tasks::task_id.eq(comment_changes::task_id)))
        .filter(literal(CHANGES_PENDING))
        .filter(comment_changes::session_key.eq(session_key))
        .order(comment_changes::id.asc())
        .select((CommentChange::as_select(), Task::as_select()))
        .first(c)
        .optional())?;
    Ok(row)
}

/// What a session decided about a comment change, as the store carries it.
#[derive(Debug, Clone)]
pub enum ChangeEffect {
    /// The task, still queued at this version, ends `cancelled`.
    Cancel { version: i64 },
    /// The task, still queued at this version, gets the edited text as its
    /// message: same queue id, new operation id, new fingerprint.
    Rewrite { version: i64 },
    /// Too late to change anything; `receipt`: the thread is told once.
    TooLate { receipt: Option<String> },
    /// Nothing to do (the task ended without its message ever being sent).
    Nothing,
}

impl ChangeEffect {
    fn outcome(&self) -> &'static str {
        match self {
            ChangeEffect::Cancel { .. } => "cancelled",
            ChangeEffect::Rewrite { .. } => "rewritten",
            ChangeEffect::TooLate { .. } => "too_late",
            ChangeEffect::Nothing => "nothing",
        }
    }
}

/// What the thread is told, once, when an edit asks something else under
/// the operation id its comment already claimed.
const EDIT_CONFLICT: &str = "✏️ This comment was edited within the same second as the version \
before it, so the edit cannot be told apart from it as a request: the request stays as first \
written. To ask for the change, post it as a new comment.";

/// The key of the one receipt saying a task's comment was edited too late.
pub fn late_edit_key(task_id: &TaskId) -> String {
    format!("{task_id}:late_edit")
}

/// Carries out a decision about a comment change in one transaction; a task
/// that moved since the decision rolls it back (`Refused { code: STALE }`).
pub fn apply_change(
    conn: &mut DbConn,
    change: &CommentChange,
    task: &Task,
    effect: &ChangeEffect,
    reason: &str,
) -> Result<(), StoreError> {
    let actor = format!("gitea:user:{}", task.author);
    let mut conflict = false;
    let still_queued = |conn: &mut DbConn, version: i64| -> Result<(), StoreError> {
        match super::attempts::task_version(conn, &task.task_id)? {
            Some((TaskState::Queued, v)) if v == version => Ok(()),
            other => Err(stale(format!("task {} is now {other:?}", task.task_id))),
        }
    };
    match effect {
        ChangeEffect::Cancel { version } => {
            let out = transition(
                conn,
                &TransitionRequest {
                    task_id: &task.task_id,
                    to: TaskState::Cancelled,
                    expected_version: Some(*version),
                    actor: &actor,
                    reason: Some(reason),
                    error_code: Some("comment_deleted"),
                },
            )?;
            moved(out, &task.task_id)?;
        }
        ChangeEffect::Rewrite { version } => {
            still_queued(conn, *version)?;
            let text = change.body.clone().unwrap_or_default();
            let operation_id =
                crate::domain::OperationId::of_comment(&task.trigger_key, &change.written_at);
            let at = now();
            let entry = super::sessions::outbox_entry(conn, &task.task_id)?
                .ok_or_else(|| StoreError::NotFound(format!("outbox entry of {}", task.task_id)))?;
            let session = super::sessions::session(conn, &change.session_key)?;
            let attachments = change.attachment_ids();
            let fingerprint = Fingerprint {
                session_key: change.session_key.as_str(),
                queue_id: &entry.queue_id,
                user_text: &text,
                prompt_text: prompt_text(&text, change.command, change.command_argument.as_deref()),
                attachments: &attachments,
                thread_id: session.as_ref().and_then(|s| s.thread_id.as_deref()),
                thread_generation: session.as_ref().map_or(0, |s| s.thread_generation),
                access_mode: session
                    .as_ref()
                    .and_then(|s| s.thread_trust)
                    .map(|t| t.as_str()),
                rollback_before_send: change.command == Some(Command::Replace),
                created_at: &change.written_at,
            }
            .hash();
            if operation_id == entry.operation_id && fingerprint != entry.fingerprint {
                // Edited within the second Gitea stamps it with: the same
                // operation asking something else. The first claim stands.
                conflict = true;
                super::comments::enqueue_note(
                    conn,
                    &format!("{}:edit_conflict", task.task_id),
                    &task.task_id,
                    &task.resource_key,
                    EDIT_CONFLICT,
                )?;
                audit::record(
                    conn,
                    &Audit::new("outbox.fingerprint_conflict", &actor)
                        .task(&task.task_id)
                        .meta(serde_json::json!({
                            "queueId": entry.queue_id,
                            "operationId": operation_id,
                            "fingerprint": entry.fingerprint,
                            "refusedFingerprint": fingerprint,
                        })),
                )?;
            } else {
                with_conn!(conn, |c| diesel::update(
                    outbox_entries::table
                        .filter(outbox_entries::task_id.eq(&task.task_id))
                        .filter(outbox_entries::version.eq(entry.version))
                )
                .set((
                    outbox_entries::user_text.eq(&text),
                    outbox_entries::operation_id.eq(&operation_id),
                    outbox_entries::fingerprint.eq(&fingerprint),
                    outbox_entries::command.eq(change.command),
                    outbox_entries::command_argument.eq(&change.command_argument),
                    outbox_entries::version.eq(entry.version + 1),
                    outbox_entries::updated_at.eq(&at),
                ))
                .execute(c))?;
                with_conn!(conn, |c| diesel::update(
                    tasks::table
                        .filter(tasks::task_id.eq(&task.task_id))
                        .filter(tasks::state_version.eq(version))
                )
                .set((tasks::command.eq(change.command), tasks::updated_at.eq(&at)))
                .execute(c))?;
                audit::record(
                    conn,
                    &Audit::new("outbox.rewritten", &actor)
                        .task(&task.task_id)
                        .meta(serde_json::json!({
                            "queueId": entry.queue_id,
                            "operationId": operation_id,
                            "previousOperationId": entry.operation_id,
                            "fingerprint": fingerprint,
                        })),
                )?;
            }
        }
        ChangeEffect::TooLate { receipt } => {
            if let Some(body) = receipt {
                super::comments::enqueue_note(
                    conn,
                    &late_edit_key(&task.task_id),
                    &task.task_id,
                    &task.resource_key,
                    body,
                )?;
            }
        }
        ChangeEffect::Nothing => {}
    }
    let at = now();
    let outcome = if conflict {
        "conflict"
    } else {
        effect.outcome()
    };
    with_conn!(conn, |c| diesel::update(
        comment_changes::table.find(change.id)
    )
    .set((
        comment_changes::status.eq("decided"),
        comment_changes::outcome.eq(outcome),
        comment_changes::decided_at.eq(&at),
    ))
    .execute(c))?;
    audit::record(
        conn,
        &Audit::new(&format!("comment.{}_{}", change.kind, outcome), &actor)
            .task(&task.task_id)
            .meta(serde_json::json!({
                "changeId": change.id,
                "taskState": task.state,
                "decidedOnVersion": task.state_version,
                "reason": reason,
            })),
    )?;
    Ok(())
}
