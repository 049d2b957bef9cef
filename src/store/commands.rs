//! The rows a session's command lane reads and writes: its queued turnless
//! commands (through the partial index `tasks_queued_commands`), the facts a
//! command is decided on, and the one transaction that carries a decision
//! out.

use super::audit::{self, Audit};
use super::models::{Approval, Task};
use super::queue::literal;
use super::schema::{approvals, outbox_entries, sessions, tasks};
use super::sessions::{driven_tasks_of_session, session};
use super::tasks::{transition, TransitionOutcome, TransitionRequest};
use super::{now, DbConn, StoreError};
use crate::domain::command::Command;
use crate::domain::{RepoKey, ResourceKey, TaskId};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;

/// Queued commands, as the literal condition of the partial index
/// `tasks_queued_commands` (migration 2026-12-03-000016): SQLite uses a partial
/// index only for a query that contains its condition as written.
pub const QUEUED_COMMANDS: &str = "state = 'queued' AND command IS NOT NULL";

/// The stored names of the commands that need no turn.
fn turnless_names() -> Vec<&'static str> {
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

/// The session's oldest queued turnless command, with what followed its word.
pub fn next_command(
    conn: &mut DbConn,
    session_key: &ResourceKey,
) -> Result<Option<(Task, Option<String>)>, StoreError> {
    let task: Option<Task> = with_conn!(conn, |c| tasks::table
        .filter(literal(QUEUED_COMMANDS))
        .filter(tasks::session_key.eq(session_key))
        .filter(tasks::command.eq_any(turnless_names()))
        .order(tasks::id.asc())
        .select(Task::as_select())
        .first(c)
        .optional())?;
    let Some(task) = task else {
        return Ok(None);
    };
    let argument: Option<Option<String>> = with_conn!(conn, |c| outbox_entries::table
        .filter(outbox_entries::task_id.eq(&task.task_id))
        .select(outbox_entries::command_argument)
        .first(c)
        .optional())?;
    Ok(Some((task, argument.flatten())))
}

/// Sessions with a queued turnless command (the registry's sweep: commands
/// accepted by a process that died, or by another instance).
pub fn sessions_with_commands(
    conn: &mut DbConn,
) -> Result<Vec<(ResourceKey, RepoKey)>, StoreError> {
    Ok(with_conn!(conn, |c| tasks::table
        .filter(literal(QUEUED_COMMANDS))
        .filter(tasks::command.eq_any(turnless_names()))
        .select((tasks::session_key, tasks::repo_key))
        .distinct()
        .load(c))?)
}

/// What a session's command is decided on, besides the command itself.
#[derive(Debug, Clone)]
pub struct SessionFacts {
    /// Tasks its actor drives, oldest first.
    pub driven: Vec<Task>,
    /// Queued tasks that wait for a turn (queued commands left out), oldest
    /// first.
    pub queued: Vec<Task>,
    /// Pending approvals of its tasks, oldest first.
    pub approvals: Vec<Approval>,
    pub thread_id: Option<String>,
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
    let approvals: Vec<Approval> = with_conn!(conn, |c| approvals::table
        .inner_join(tasks::table.on(tasks::task_id.eq(approvals::task_id)))
        .filter(tasks::session_key.eq(session_key))
        .filter(approvals::status.eq("pending"))
        .order(approvals::created_at.asc())
        .select(Approval::as_select())
        .load(c))?;
    let thread_id = session(conn, session_key)?.and_then(|s| s.thread_id);
    Ok(SessionFacts {
        driven,
        queued,
        approvals,
        thread_id,
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
