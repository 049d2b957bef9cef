//! The session's command lane: turnless commands (`/status`, `/help`, an
//! unknown word, `/cancel`, `/stop`, `/approve`, `/deny`, `/reset`) carried
//! out at once, beside whatever turn the session runs, never through the
//! repository's queue. Each pass takes the session's queued commands
//! oldest first: asks the forge whether the commenter may give commands,
//! reads the session's tasks, decides with the pure [`decide::decide`], and
//! commits the decision's writes in one transaction (`store::commands`). A
//! decision that finds something moved meanwhile is decided again.

pub mod answer;
pub mod change;
pub mod decide;

use super::ActorDeps;
use crate::domain::{ResourceKey, TaskId};
use crate::forge::TriggerCheck;
use crate::store::commands::{self, ChangeEffect, CommandWrite, SessionFacts, STALE};
use crate::store::models::Task;
use crate::store::StoreError;
use decide::{ApprovalFact, CommandEffect, CommandSnapshot, Permission, TaskFact, WorkflowFact};
use std::sync::Arc;

/// A decision found its facts moved this many times in a row: give up for
/// this pass (the next wake-up or sweep tries again).
const MAX_STALE_IN_A_ROW: u32 = 5;

/// What a pass did that the actor must follow up.
#[derive(Debug, Default)]
pub(super) struct CommandPass {
    /// Tasks moved to `cancel_requested`: their drive interrupts the turn.
    pub stopped: Vec<TaskId>,
    /// Tasks whose pending approval was decided, with the session that
    /// drives each (a delegated child's own, or this one).
    pub decided: Vec<(TaskId, ResourceKey)>,
    /// A permission could not be checked: run again later.
    pub retry_later: bool,
}

fn fact(t: &Task) -> TaskFact {
    TaskFact {
        task_id: t.task_id.clone(),
        state: t.state,
        state_version: t.state_version,
        command: t.command,
        continuation: t.continuation.is_some(),
    }
}

fn snapshot(
    task: &Task,
    argument: Option<String>,
    permission: Permission,
    facts: SessionFacts,
) -> Option<CommandSnapshot> {
    Some(CommandSnapshot {
        task: fact(task),
        command: task.command?,
        argument,
        permission,
        driven: facts.driven.iter().map(fact).collect(),
        queued: facts
            .queued
            .iter()
            .filter(|t| t.task_id != task.task_id)
            .map(fact)
            .collect(),
        approvals: facts
            .approvals
            .into_iter()
            .map(|(a, session_key)| ApprovalFact {
                approval_id: a.approval_id,
                task_id: a.task_id,
                session_key,
            })
            .collect(),
        thread_id: facts.thread_id,
        on_pull: task.resource_key.is_pull(),
        workflow: facts.workflow.map(|w| WorkflowFact {
            by_owner: w.owner.eq_ignore_ascii_case(&task.author),
            workflow_id: w.workflow_id,
            state: w.state,
            version: w.version,
        }),
    })
}

/// Whether the commenter of `task` may trigger work, as the forge says; one
/// it cannot answer is `Unknown` (logged: who `did` what), never a guess.
pub(super) async fn permission(deps: &ActorDeps, task: &Task, did: &str) -> Permission {
    match deps
        .verifier
        .may_trigger(task.resource_key.clone(), task.author.clone())
        .await
    {
        TriggerCheck::Allowed => Permission::Allowed,
        TriggerCheck::Denied(why) => Permission::Denied(why),
        TriggerCheck::Unknown(why) => {
            tracing::warn!(task.id = %task.task_id, error = %why, "cannot check who {did}; trying again later");
            Permission::Unknown
        }
    }
}

/// Carries out the session's queued turnless commands, oldest first.
pub(super) async fn run(
    deps: Arc<ActorDeps>,
    session_key: ResourceKey,
) -> Result<CommandPass, StoreError> {
    let mut pass = CommandPass::default();
    let mut stale_in_a_row = 0;
    loop {
        let key = session_key.clone();
        let Some((task, argument)) = deps
            .store
            .read(move |c| commands::next_command(c, &key))
            .await?
        else {
            break;
        };
        let permission = permission(&deps, &task, "gave a command").await;
        let key = session_key.clone();
        let facts = deps
            .store
            .read(move |c| commands::session_facts(c, &key))
            .await?;
        let Some(snap) = snapshot(&task, argument, permission, facts) else {
            break;
        };
        let d = decide::decide(&snap);
        if d.effects.contains(&CommandEffect::RetryLater) {
            pass.retry_later = true;
            break;
        }
        let Some(to) = d.to else {
            // Nothing to decide on a task the query says is a queued
            // command: it moved meanwhile; read again.
            stale_in_a_row += 1;
            if stale_in_a_row >= MAX_STALE_IN_A_ROW {
                break;
            }
            continue;
        };
        let mut write = CommandWrite {
            task_id: task.task_id.clone(),
            session_key: session_key.clone(),
            command: snap.command,
            expected_version: d.expected_version,
            to,
            actor: format!("gitea:user:{}", task.author),
            reason: d.reason.to_owned(),
            code: d.code.map(str::to_owned),
            cancel: Vec::new(),
            stop: None,
            reset_thread: None,
            approval: None,
            workflow: None,
            answer: d
                .answer()
                .map(|a| answer::text(a, snap.command, &deps.settings.bot_login)),
        };
        let (mut stopped, mut decided) = (None, None);
        for e in &d.effects {
            match e {
                CommandEffect::Cancel { task_id, version } => {
                    write.cancel.push((task_id.clone(), *version))
                }
                CommandEffect::Stop { task_id, version } => {
                    write.stop = Some((task_id.clone(), *version));
                    stopped = Some(task_id.clone());
                }
                CommandEffect::HaltWorkflow {
                    workflow_id,
                    version,
                } => {
                    write.workflow = Some(commands::WorkflowWrite::Halt {
                        workflow_id: workflow_id.clone(),
                        version: *version,
                        question: format!("@{} stopped the work with `/stop`.", task.author),
                    })
                }
                CommandEffect::CancelWorkflow {
                    workflow_id,
                    version,
                } => {
                    write.workflow = Some(commands::WorkflowWrite::Cancel {
                        workflow_id: workflow_id.clone(),
                        version: *version,
                    })
                }
                CommandEffect::ResetThread { old_thread } => {
                    write.reset_thread = Some(old_thread.clone())
                }
                CommandEffect::DecideApproval {
                    approval_id,
                    task_id,
                    accept,
                } => {
                    write.approval = Some((approval_id.clone(), *accept));
                    let session = snap
                        .approvals
                        .iter()
                        .find(|a| &a.task_id == task_id)
                        .map(|a| a.session_key.clone())
                        .unwrap_or_else(|| session_key.clone());
                    decided = Some((task_id.clone(), session));
                }
                CommandEffect::Answer(_) | CommandEffect::RetryLater => {}
            }
        }
        match deps
            .store
            .write(move |c| commands::carry_out(c, &write))
            .await
        {
            Ok(()) => {
                stale_in_a_row = 0;
                tracing::info!(task.id = %task.task_id, command = %snap.command, to = %to, "command carried out");
                pass.stopped.extend(stopped);
                pass.decided.extend(decided);
            }
            Err(StoreError::Refused { code, message }) if code == STALE => {
                stale_in_a_row += 1;
                tracing::info!(task.id = %task.task_id, why = %message, "command decided on facts that moved; deciding again");
                if stale_in_a_row >= MAX_STALE_IN_A_ROW {
                    break;
                }
            }
            Err(e) => return Err(e),
        }
    }
    changes(&deps, &session_key).await?;
    Ok(pass)
}

/// Decides the session's pending comment edits and deletions, oldest first.
async fn changes(deps: &Arc<ActorDeps>, session_key: &ResourceKey) -> Result<(), StoreError> {
    let mut stale_in_a_row = 0;
    loop {
        let key = session_key.clone();
        let Some((row, task)) = deps
            .store
            .read(move |c| commands::next_change(c, &key))
            .await?
        else {
            return Ok(());
        };
        let kind = row.kind;
        let (d, reason) = change::decide(&change::ChangeSnapshot {
            kind,
            state: task.state,
            state_version: task.state_version,
            command: task.command,
        });
        let effect = match d {
            change::ChangeDecision::Cancel { version } => ChangeEffect::Cancel { version },
            change::ChangeDecision::Rewrite { version } => ChangeEffect::Rewrite { version },
            change::ChangeDecision::TooLate { tell } => ChangeEffect::TooLate {
                receipt: tell.then(|| answer::late_edit(&task.task_id)),
            },
            change::ChangeDecision::Nothing => ChangeEffect::Nothing,
        };
        let task_id = task.task_id.clone();
        match deps
            .store
            .write(move |c| commands::apply_change(c, &row, &task, &effect, reason))
            .await
        {
            Ok(()) => {
                stale_in_a_row = 0;
                tracing::info!(task.id = %task_id, kind = ?kind, why = reason, "comment change decided");
            }
            Err(StoreError::Refused { code, message }) if code == STALE => {
                stale_in_a_row += 1;
                tracing::info!(task.id = %task_id, why = %message, "comment change decided on a task that moved; deciding again");
                if stale_in_a_row >= MAX_STALE_IN_A_ROW {
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
    }
}
