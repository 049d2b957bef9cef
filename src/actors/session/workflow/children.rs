//! The delegation tools, answered inside the turn that called them, and
//! what a child's turn's end comes to. A call is authorised by the thread
//! it arrives on: a top-level thread delegates, reads and acknowledges its
//! children's results; a child's thread only records its own result, and
//! never acts for its parent or a sibling.

use super::WorkflowEnd;
use crate::actors::session::drive::{DriveError, TaskDrive};
use crate::agent::ToolAnswer;
use crate::domain::trust::{ExecutionPolicy, ThreadTrust};
use crate::domain::workflow::children::{child_exited, ChildExit, ChildMode};
use crate::domain::workflow::decide::WorkflowEvent;
use crate::domain::workflow::{Delegation, ResultReport};
use crate::domain::worktree::WorktreeId;
use crate::domain::ResultId;
use crate::store::models::Task;
use crate::store::workflows::children::{self, Assignment, Launched};
use crate::store::workflows::results::{self, Acked, NewResult};
use crate::store::workflows::{self, ContinueWith};
use crate::store::{now, DbConn, StoreError};

/// What a child that ended its turn without `record_result` is told.
pub const CHILD_RECOVERY_TEXT: &str = "You ended your turn without calling record_result, so \
your parent has no result from you. Record it now with the codex_bridge tool record_result: what \
you did, the files you changed, the checks you ran, the remaining risks and any blockers. If the \
work is not done, say so there: an honest incomplete result is a result.";

impl TaskDrive {
    /// `assign_child` / `handoff_child`: a child for the task's workflow, as
    /// its admission decides; a handoff's parent waits for its result.
    pub(super) async fn delegate(
        &mut self,
        mode: ChildMode,
        asked: Delegation,
    ) -> Result<ToolAnswer, DriveError> {
        // Fail closed: with no policy to delegate from, nothing is delegated.
        let Some(repo) = self.policy else {
            return Ok(refused(
                "the repository's policy is unknown here, so no work is delegated",
            ));
        };
        // A fork copies the conversation of the thread this call came on:
        // the parent's, as far as it got.
        let fork_from = match (asked.fork, self.turn.thread_id.clone()) {
            (false, _) => None,
            (true, Some(thread)) => Some(thread),
            (true, None) => {
                return Ok(refused(
                    "this turn's thread is not known here, so there is nothing to fork; ask \
                     again without `fork`",
                ))
            }
        };
        let own = ExecutionPolicy::of(self.thread_trust.unwrap_or(ThreadTrust::Trusted), &repo);
        let (task, title) = (self.task.clone(), self.workflow_title());
        let Delegation {
            title: child_title,
            instructions,
            ..
        } = asked;
        let settings = &self.deps.settings;
        let (max_children, instance) = (settings.max_children, settings.instance_id.clone());
        let launched = self
            .deps
            .store
            .write(move |c| {
                let w = workflows::join(c, &task, &title)?;
                children::launch(
                    c,
                    &Assignment {
                        parent: &w,
                        by: &task,
                        mode,
                        title: &child_title,
                        instructions: &instructions,
                        sandbox: own.sandbox,
                        approval: own.approval_policy,
                        fork_from: fork_from.as_deref(),
                        max_children,
                        instance_id: &instance,
                    },
                )
            })
            .await;
        let launched = match launched {
            Err(StoreError::Refused { message, .. }) => return Ok(refused(&message)),
            other => other?,
        };
        Ok(match launched {
            Launched::New { child } => {
                self.signals.queued(&self.task.repo_key);
                let next = match mode {
                    ChildMode::Assign => {
                        "Go on with your own work; its result comes to a later turn of this \
                         workflow, to read and acknowledge with ack_result."
                    }
                    ChildMode::Handoff => {
                        "This workflow now waits for its result: end your turn now with a short \
                         note; the bridge continues the workflow with the result."
                    }
                };
                ToolAnswer {
                    success: true,
                    text: format!(
                        "Child workflow {} is working on branch {}. {next}",
                        child.workflow_id,
                        WorktreeId::of(&child.session_key).branch()
                    ),
                }
            }
            Launched::Existing { child } => ToolAnswer {
                success: true,
                text: format!(
                    "This same work was handed over already: child workflow {} ({}). No second \
                     child is started; its result comes to this workflow.",
                    child.workflow_id,
                    child.state.as_str()
                ),
            },
            Launched::NotAdmitted { running } => refused(&format!(
                "not admitted now: this workflow has {running} children working, its most. \
                 Nothing was started; ask again with the same title and instructions once one of \
                 their results has arrived, or do the work yourself"
            )),
            Launched::ParentNotOpen { state } => refused(&format!(
                "this workflow is {}: it cannot delegate now",
                state.as_str()
            )),
        })
    }

    /// `record_result`: the child's one result, recorded immutable, its
    /// child workflow ended, and its delivery queued to the parent that
    /// asked for it (which moves on at once).
    pub(super) async fn record_result(
        &mut self,
        report: ResultReport,
    ) -> Result<ToolAnswer, DriveError> {
        let task = self.task.clone();
        let branch = WorktreeId::of(&task.session_key).branch();
        let (limits, instance) = (
            self.deps.settings.workflow_limits(),
            self.deps.settings.instance_id.clone(),
        );
        let recorded = self
            .deps
            .store
            .write(move |c| {
                let Some(child) = children::of_task(c, &task)? else {
                    return Err(StoreError::Refused {
                        code: results::CHILD_NOT_OPEN,
                        message: "this task belongs to no child workflow".into(),
                    });
                };
                let new = NewResult {
                    report: &report,
                    incomplete: false,
                    cancelled: false,
                    branch: Some(&branch),
                    by_task: Some(&task.task_id),
                };
                results::record(c, &child, &new, limits, &instance)
            })
            .await;
        Ok(match recorded {
            Ok(id) => {
                self.signals.queued(&self.task.repo_key);
                ToolAnswer {
                    success: true,
                    text: format!(
                        "Result {id} is recorded and goes to your parent. End your turn now."
                    ),
                }
            }
            Err(StoreError::Refused { message, .. }) => refused(&message),
            Err(e) => return Err(e.into()),
        })
    }

    /// `ack_result`: the workflow incorporated a result delivered to it.
    pub(super) async fn ack_result(&mut self, result: String) -> Result<ToolAnswer, DriveError> {
        let Ok(id) = ResultId::parse(&result) else {
            return Ok(refused(&format!(
                "{result:?} is not a result id (result-<32 hex>); list_results names them"
            )));
        };
        let (task, title) = (self.task.clone(), self.workflow_title());
        let acked = self
            .deps
            .store
            .write(move |c| {
                let w = workflows::join(c, &task, &title)?;
                results::ack(c, &w, &id, &task.task_id).map(|a| (a, id.clone()))
            })
            .await;
        Ok(match acked {
            Ok((Acked::Now, id)) => ToolAnswer {
                success: true,
                text: format!("Result {id} is acknowledged: it will not be delivered again."),
            },
            Ok((Acked::Already, id)) => ToolAnswer {
                success: true,
                text: format!("Result {id} was acknowledged already; nothing changed."),
            },
            Err(StoreError::Refused { message, .. }) => refused(&message),
            Err(e) => return Err(e.into()),
        })
    }

    /// `list_results`: the results of the workflow's children, with where
    /// each delivery stands.
    pub(super) async fn list_results(&mut self) -> Result<ToolAnswer, DriveError> {
        let (task, title) = (self.task.clone(), self.workflow_title());
        let listed = self
            .deps
            .store
            .write(move |c| {
                let w = workflows::join(c, &task, &title)?;
                let running = children::running(c, &w.workflow_id)?;
                Ok((results::list(c, &w.workflow_id)?, running))
            })
            .await?;
        let (list, running) = listed;
        let text = serde_json::json!({ "childrenWorking": running, "results": list });
        Ok(ToolAnswer {
            success: true,
            text: text.to_string(),
        })
    }
}

fn refused(text: &str) -> ToolAnswer {
    ToolAnswer {
        success: false,
        text: text.to_owned(),
    }
}

/// A child's task ended without the child's workflow ending (no result was
/// recorded): its bounded recovery asks again, and once that is spent one
/// `incomplete` result goes to the parent. Whatever the provider last
/// showed, only a recorded result is a success. `None`: the end is not the
/// child's exit (a capacity wait), and the workflow's own decision applies.
pub(super) fn child_ended(
    c: &mut DbConn,
    end: &WorkflowEnd,
    task: &Task,
    event: WorkflowEvent,
    w: &workflows::Workflow,
) -> Result<Option<()>, StoreError> {
    if matches!(event, WorkflowEvent::Denied) {
        return Ok(None);
    }
    if w.state.is_end() {
        return Ok(Some(()));
    }
    match child_exited(false, w.recovered, end.child_recovery) {
        ChildExit::Done => {}
        ChildExit::Recover { attempt } => {
            workflows::continue_with(
                c,
                w,
                &ContinueWith {
                    version: w.version,
                    seq: w.continuations + 1,
                    idle_finals: 0,
                    due_at: now(),
                    after: task,
                    instance_id: &end.instance_id,
                    text: CHILD_RECOVERY_TEXT,
                    why: "the child ended its turn without recording its result",
                },
            )?;
            children::count_recovery(c, w, attempt)?;
        }
        ChildExit::Incomplete => {
            let branch = WorktreeId::of(&w.session_key).branch();
            let report = ResultReport::incomplete(
                format!(
                    "The child ended {} turn(s) without recording a result, and its recovery is \
                     spent. Nothing it did is confirmed; its branch {branch} may hold partial work.",
                    w.recovered + 1
                ),
                "the work was not finished or not reported",
                "no result was recorded",
            );
            let new = NewResult {
                report: &report,
                incomplete: true,
                cancelled: false,
                branch: Some(&branch),
                by_task: None,
            };
            results::record(c, w, &new, end.limits, &end.instance_id)?;
        }
    }
    Ok(Some(()))
}
