//! What a turnless command does to its session, as one pure function:
//! [`decide`]`(snapshot) -> CommandDecision`. The lane (`mod.rs`) gathers the
//! [`CommandSnapshot`] from the store and the forge, commits the decision's
//! writes in one transaction by compare-and-swap on every version it names
//! (the command task's and each task it moves), and carries out the wake-ups.
//!
//! The promises (property-tested in `tests.rs`):
//! - A command ends its own task exactly once: `succeeded` when carried out
//!   (including "nothing to do", which is answered), `rejected` when the
//!   commenter may not trigger work; an unknown permission decides nothing.
//! - `/cancel` moves only this session's queued tasks; `/stop` only the
//!   session's running task; neither touches the other's.
//! - `/approve` and `/deny` decide only a pending approval of this session,
//!   named exactly.
//! - Every command carried out gets exactly one answer; a rejection gets none
//!   (its receipt says why).
//! - Every decision names the versions it was made on.

use crate::domain::command::Command;
use crate::domain::workflow::WorkflowState;
use crate::domain::{ResourceKey, TaskId, WorkflowId};
use crate::lifecycle::TaskState;

/// The commenter's permission to trigger work, asked of the forge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permission {
    Allowed,
    Denied(String),
    /// The forge could not answer: nothing is decided on a guess.
    Unknown,
}

/// A task of the session, as a command sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFact {
    pub task_id: TaskId,
    pub state: TaskState,
    pub state_version: i64,
    pub command: Option<Command>,
    /// A continuation of the session's workflow (not someone's comment).
    pub continuation: bool,
}

/// The session's workflow that has not ended, as a command sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowFact {
    pub workflow_id: WorkflowId,
    pub state: WorkflowState,
    pub version: i64,
    /// The command's author is the workflow's owner.
    pub by_owner: bool,
}

/// A pending approval of one of the session's tasks, or of one of its
/// delegated children's (asked in the same thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalFact {
    pub approval_id: String,
    pub task_id: TaskId,
    /// The session that drives the task: a child's own, or this one.
    pub session_key: ResourceKey,
}

/// What a command is decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSnapshot {
    /// The command's own task.
    pub task: TaskFact,
    pub command: Command,
    /// What followed the word, as typed.
    pub argument: Option<String>,
    pub permission: Permission,
    /// The session's tasks that its actor drives (leased to cancel
    /// requested), oldest first.
    pub driven: Vec<TaskFact>,
    /// The session's other queued tasks that wait for a turn, oldest first.
    pub queued: Vec<TaskFact>,
    pub approvals: Vec<ApprovalFact>,
    /// The session's current Codex thread.
    pub thread_id: Option<String>,
    /// The session is a pull request's.
    pub on_pull: bool,
    pub workflow: Option<WorkflowFact>,
}

/// Why a command found nothing to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nothing {
    /// `/stop`: no turn runs on the session.
    NoRun,
    /// `/stop`: the running task is already being stopped.
    AlreadyStopping(TaskId),
    /// `/stop`: the running task's turn has ended; its answer is being posted.
    TurnEnded(TaskId),
    /// `/cancel`: nothing waits.
    NoQueued,
    /// `/reset`: the session has no thread yet.
    NoThread,
    /// `/approve`, `/deny`: no approval id was given.
    NoApprovalId { pending: Vec<String> },
    /// `/approve`, `/deny`: the id names no pending approval of this session.
    NoSuchApproval { given: String, pending: Vec<String> },
    /// `/steer`, `/interrupt`, `/replace` without the text to send.
    NoText(Command),
    /// `/review` on an Issue: no changes to review.
    NotAPull,
}

/// The one comment a carried-out command posts, as data; `answer.rs` words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `/help`, or a word that is no command (`unknown`).
    Grammar {
        unknown: bool,
    },
    Status {
        driven: Vec<TaskFact>,
        queued: Vec<TaskFact>,
    },
    /// `/stop`: the running task (if one runs) is stopped; `workflow`: the
    /// session's workflow now waits for its owner.
    Stopping {
        task: Option<TaskId>,
        workflow: bool,
    },
    /// `/cancel`: these queued tasks are cancelled; `workflow`: and the
    /// session's workflow with them.
    Cancelled {
        tasks: Vec<TaskId>,
        workflow: bool,
    },
    Reset {
        old_thread: String,
    },
    Decided {
        approval_id: String,
        accept: bool,
    },
    Nothing(Nothing),
}

/// A write of the decision besides the command task's own transition, each
/// in the same commit and each a compare-and-swap where it moves a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandEffect {
    /// A queued task of the session ends `cancelled`.
    Cancel { task_id: TaskId, version: i64 },
    /// The running task goes to `cancel_requested`; its drive interrupts it.
    Stop { task_id: TaskId, version: i64 },
    /// The session's workflow waits for its owner (`/stop`): no
    /// continuation follows.
    HaltWorkflow {
        workflow_id: WorkflowId,
        version: i64,
    },
    /// The session's workflow ends `cancelled` (the owner's `/cancel`).
    CancelWorkflow {
        workflow_id: WorkflowId,
        version: i64,
    },
    /// The session forgets its thread: the next task starts a new one.
    ResetThread { old_thread: String },
    /// A pending approval is decided.
    DecideApproval {
        approval_id: String,
        task_id: TaskId,
        accept: bool,
    },
    /// The command's answer comment, queued for the receipts worker.
    Answer(Answer),
    /// The permission could not be checked: ask again later.
    RetryLater,
}

/// What to do about a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandDecision {
    /// Where the command's own task goes (`None`: it stays).
    pub to: Option<TaskState>,
    /// The command task's `state_version` the decision was made on.
    pub expected_version: i64,
    pub reason: &'static str,
    pub code: Option<&'static str>,
    pub effects: Vec<CommandEffect>,
}

impl CommandDecision {
    fn on(snap: &CommandSnapshot, reason: &'static str) -> Self {
        CommandDecision {
            to: None,
            expected_version: snap.task.state_version,
            reason,
            code: None,
            effects: Vec::new(),
        }
    }

    fn done(snap: &CommandSnapshot, reason: &'static str, effects: Vec<CommandEffect>) -> Self {
        CommandDecision {
            to: Some(TaskState::Succeeded),
            effects,
            ..Self::on(snap, reason)
        }
    }

    /// The answer this decision posts, if any.
    pub fn answer(&self) -> Option<&Answer> {
        self.effects.iter().find_map(|e| match e {
            CommandEffect::Answer(a) => Some(a),
            _ => None,
        })
    }
}

/// States whose turn `/stop` interrupts (those an operator's abort takes).
fn stoppable(state: TaskState) -> bool {
    matches!(
        state,
        TaskState::Leased | TaskState::Running | TaskState::AwaitingApproval
    )
}

/// Decides what the command in `snap` does.
pub fn decide(snap: &CommandSnapshot) -> CommandDecision {
    use CommandEffect as E;
    let lanes = snap
        .command
        .answered_by_lane(snap.argument.as_deref(), snap.on_pull);
    if snap.task.state != TaskState::Queued || !lanes {
        return CommandDecision::on(snap, "not a queued command the lane answers");
    }
    match &snap.permission {
        Permission::Allowed => {}
        Permission::Denied(_) => {
            return CommandDecision {
                to: Some(TaskState::Rejected),
                code: Some("permission_denied"),
                ..CommandDecision::on(snap, "the commenter may not give the bot commands")
            }
        }
        Permission::Unknown => {
            let mut d =
                CommandDecision::on(snap, "the commenter's permission could not be checked");
            d.effects.push(E::RetryLater);
            return d;
        }
    }
    let answer = |a| vec![E::Answer(a)];
    let nothing = |n| vec![E::Answer(Answer::Nothing(n))];
    match snap.command {
        Command::Help | Command::Unknown => CommandDecision::done(
            snap,
            "answered with the grammar",
            answer(Answer::Grammar {
                unknown: snap.command == Command::Unknown,
            }),
        ),
        Command::Status => CommandDecision::done(
            snap,
            "answered with the session's tasks",
            answer(Answer::Status {
                driven: snap.driven.clone(),
                queued: snap.queued.clone(),
            }),
        ),
        Command::Cancel => {
            // The owner's `/cancel` ends the workflow too; anyone else's
            // leaves its continuation alone (a cancelled continuation would
            // leave the workflow open with nothing to carry it on).
            let workflow = snap
                .workflow
                .as_ref()
                .filter(|w| w.by_owner && !w.state.is_end());
            let cancel: Vec<&TaskFact> = snap
                .queued
                .iter()
                .filter(|t| workflow.is_some() || !t.continuation)
                .collect();
            if cancel.is_empty() && workflow.is_none() {
                return CommandDecision::done(
                    snap,
                    "nothing queued to cancel",
                    nothing(Nothing::NoQueued),
                );
            }
            let mut effects: Vec<_> = cancel
                .iter()
                .map(|t| E::Cancel {
                    task_id: t.task_id.clone(),
                    version: t.state_version,
                })
                .collect();
            if let Some(w) = workflow {
                effects.push(E::CancelWorkflow {
                    workflow_id: w.workflow_id.clone(),
                    version: w.version,
                });
            }
            effects.push(E::Answer(Answer::Cancelled {
                tasks: cancel.iter().map(|t| t.task_id.clone()).collect(),
                workflow: workflow.is_some(),
            }));
            CommandDecision::done(snap, "the session's queued tasks are cancelled", effects)
        }
        Command::Stop => {
            // A stopped workflow waits for its owner instead of continuing.
            let halt = snap
                .workflow
                .as_ref()
                .filter(|w| matches!(w.state, WorkflowState::Open | WorkflowState::WaitingChild))
                .map(|w| E::HaltWorkflow {
                    workflow_id: w.workflow_id.clone(),
                    version: w.version,
                });
            let halted = halt.is_some();
            match snap.driven.first() {
                Some(t) if stoppable(t.state) => CommandDecision::done(
                    snap,
                    "the session's running task is stopped",
                    [E::Stop {
                        task_id: t.task_id.clone(),
                        version: t.state_version,
                    }]
                    .into_iter()
                    .chain(halt)
                    .chain([E::Answer(Answer::Stopping {
                        task: Some(t.task_id.clone()),
                        workflow: halted,
                    })])
                    .collect(),
                ),
                _ if halted => CommandDecision::done(
                    snap,
                    "the session's workflow waits for its owner",
                    halt.into_iter()
                        .chain([E::Answer(Answer::Stopping {
                            task: None,
                            workflow: true,
                        })])
                        .collect(),
                ),
                Some(t) if t.state == TaskState::CancelRequested => CommandDecision::done(
                    snap,
                    "the running task is already being stopped",
                    nothing(Nothing::AlreadyStopping(t.task_id.clone())),
                ),
                Some(t) => CommandDecision::done(
                    snap,
                    "the running task's turn has ended",
                    nothing(Nothing::TurnEnded(t.task_id.clone())),
                ),
                None => CommandDecision::done(
                    snap,
                    "no turn runs on the session",
                    nothing(Nothing::NoRun),
                ),
            }
        }
        Command::Reset => match &snap.thread_id {
            Some(thread) => CommandDecision::done(
                snap,
                "the session's next task starts a new thread",
                vec![
                    E::ResetThread {
                        old_thread: thread.clone(),
                    },
                    E::Answer(Answer::Reset {
                        old_thread: thread.clone(),
                    }),
                ],
            ),
            None => CommandDecision::done(
                snap,
                "the session has no thread yet",
                nothing(Nothing::NoThread),
            ),
        },
        Command::Approve | Command::Deny => {
            let accept = snap.command == Command::Approve;
            let pending: Vec<String> = snap
                .approvals
                .iter()
                .map(|a| a.approval_id.clone())
                .collect();
            let given = snap
                .argument
                .as_deref()
                .and_then(|a| a.split_whitespace().next());
            let Some(given) = given else {
                return CommandDecision::done(
                    snap,
                    "no approval id was given",
                    nothing(Nothing::NoApprovalId { pending }),
                );
            };
            match snap.approvals.iter().find(|a| a.approval_id == given) {
                Some(a) => CommandDecision::done(
                    snap,
                    if accept {
                        "the approval is granted"
                    } else {
                        "the approval is refused"
                    },
                    vec![
                        E::DecideApproval {
                            approval_id: a.approval_id.clone(),
                            task_id: a.task_id.clone(),
                            accept,
                        },
                        E::Answer(Answer::Decided {
                            approval_id: a.approval_id.clone(),
                            accept,
                        }),
                    ],
                ),
                None => CommandDecision::done(
                    snap,
                    "no pending approval of this session has that id",
                    nothing(Nothing::NoSuchApproval {
                        given: given.chars().take(80).collect(),
                        pending,
                    }),
                ),
            }
        }
        Command::Steer | Command::Interrupt | Command::Replace => CommandDecision::done(
            snap,
            "no text to send",
            nothing(Nothing::NoText(snap.command)),
        ),
        Command::Review => CommandDecision::done(
            snap,
            "an Issue has no changes to review",
            nothing(Nothing::NotAPull),
        ),
    }
}

#[cfg(test)]
mod tests;
