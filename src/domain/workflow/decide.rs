//! What happens to a session's workflow, as one pure function:
//! [`decide`]`(snapshot, event) -> WorkflowDecision`. The session gathers
//! the [`WorkflowSnapshot`] and commits the decision in the transaction that
//! ends the task it is about, by compare-and-swap on the version it names.
//!
//! The promises (property-tested below):
//! - A provider's final never ends a workflow: only the agent's
//!   `complete_workflow`, the owner's cancel, a closed Issue/PR or a failure
//!   that exhausted its recovery do, and an ended workflow stays ended.
//! - An open workflow whose turn ended with an ordinary final continues
//!   through one continuation at a time, numbered in order, due after a
//!   bounded backoff.
//! - `max_idle_finals` finals in a row without durable progress open a gate
//!   instead of another continuation; owner input and durable results reset
//!   the count.
//! - While it waits for its owner, only the owner's input resumes it; others'
//!   input is refused.
//! - A capacity refusal by the model's provider never ends a workflow nor
//!   counts as a final: it waits (a wait that doubles with each refusal in
//!   a row) and continues.
//! - While its children work and no result of theirs waits, an open
//!   workflow's final neither continues it nor counts as idle; a child's
//!   result continues it at once (a handoff's waiting parent opens again).
//! - Every decision names the workflow's version it was made on.

use crate::domain::workflow::{GateKind, WorkflowState};
use crate::lifecycle::TaskState;
use std::time::Duration;

/// The longest a continuation waits, however many finals came before it.
pub const MAX_CONTINUATION_DELAY: Duration = Duration::from_secs(600);

/// The longest a workflow waits after capacity refusals, however many in a
/// row: a usage allowance may come back within the hour.
pub const MAX_CAPACITY_WAIT: Duration = Duration::from_secs(3600);

/// The workflow as the decision needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowSnapshot {
    pub state: WorkflowState,
    pub version: i64,
    /// Finals in a row without durable progress.
    pub idle_finals: i64,
    /// Continuations created so far: the next one is number `continuations + 1`.
    pub continuations: i64,
    /// A continuation exists that has not ended.
    pub continuation_pending: bool,
    /// `workflow_max_idle_finals`.
    pub max_idle_finals: i64,
    /// Turns all the workflow's tasks took.
    pub turns: i64,
    /// `max_turns_per_workflow`.
    pub max_turns: i64,
    /// Capacity refusals in a row.
    pub denials: i64,
    /// Children of the workflow work that have not recorded a result.
    pub children_running: bool,
    /// Results of its children wait to be carried to it.
    pub results_waiting: bool,
}

/// The limits a workflow's decisions apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkflowLimits {
    /// `workflow_max_idle_finals`.
    pub max_idle_finals: i64,
    /// `max_turns_per_workflow`.
    pub max_turns: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowEvent {
    /// A task's turn ended with an ordinary final; `progress`: the task
    /// brought durable progress (owner input, a child's result).
    Final { progress: bool },
    /// The agent called `complete_workflow`.
    Complete,
    /// The agent called `request_owner_gate`.
    GateAsked(GateKind),
    /// The owner stopped the run (`/stop`), or a limit was reached: the
    /// workflow waits for its owner instead of continuing.
    Halted(GateKind),
    /// The owner's comment was admitted as the workflow's next input.
    OwnerInput,
    /// An operator answered the gate on the owner's behalf (the admin
    /// view): there is no comment to be the next input, so a continuation
    /// carries the answer.
    OperatorResume,
    /// Someone else's comment arrived for the workflow.
    OtherInput,
    /// The owner cancelled it (`/cancel`, the admin view).
    Cancel,
    /// Its Issue or pull request was closed or merged.
    ResourceClosed,
    /// A failure exhausted the workflow's recovery.
    Failed,
    /// The model's provider turned the turn away for capacity.
    Denied,
    /// The agent handed work to a child (`handoff_child`): the workflow
    /// waits for its result.
    HandoffAsked,
    /// A child's result was recorded for the workflow.
    ResultArrived,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowStep {
    /// Create continuation number `seq`, due after `delay`; the count of
    /// finals without progress is now `idle_finals`.
    Continue {
        seq: i64,
        idle_finals: i64,
        delay_steps: u32,
    },
    /// Count the final; a continuation is pending already.
    Count {
        idle_finals: i64,
    },
    /// Wait for the owner behind a gate of this kind (a bot comment).
    Gate(GateKind),
    /// The owner answered: open again, the count reset.
    Resume,
    /// An operator answered for the owner: open again, the count reset,
    /// and continuation number `seq` (due now) carries the answer.
    ResumeWith {
        seq: i64,
    },
    /// Wait out a capacity refusal: continuation number `seq` carries the
    /// work on after the wait for `denials` refusals in a row.
    Wait {
        seq: i64,
        denials: i64,
    },
    /// Owner input while open: the count starts again.
    ResetIdle,
    /// Wait for the child the work was handed to (`waiting_child`).
    AwaitChild,
    /// The pending continuation is due now: a child's result waits for it.
    Hasten,
    /// Not the owner's to resume: refuse the input (`owner_gate_required`).
    Refuse,
    /// The workflow ends in `state` for `code`.
    End {
        state: WorkflowState,
        code: &'static str,
    },
    Nothing(Idle),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// It has ended: nothing changes it any more.
    Ended,
    /// The event does not apply in this state (a final while it waits).
    NotOpen,
    /// Input from anyone while open is an ordinary message.
    OrdinaryInput,
    /// A continuation is pending already: it carries the work on.
    ContinuationPending,
    /// Its children work: their results continue the workflow.
    AwaitingChildren,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkflowDecision {
    pub expected_version: i64,
    pub step: WorkflowStep,
}

pub fn decide(snap: &WorkflowSnapshot, event: WorkflowEvent) -> WorkflowDecision {
    WorkflowDecision {
        expected_version: snap.version,
        step: step(snap, event),
    }
}

fn step(snap: &WorkflowSnapshot, event: WorkflowEvent) -> WorkflowStep {
    use WorkflowEvent as E;
    use WorkflowState as W;
    use WorkflowStep as S;
    if snap.state.is_end() {
        return S::Nothing(Idle::Ended);
    }
    match event {
        E::Cancel => S::End {
            state: W::Cancelled,
            code: "cancelled",
        },
        E::ResourceClosed => S::End {
            state: W::Cancelled,
            code: "resource_closed",
        },
        E::Failed => S::End {
            state: W::Failed,
            code: "recovery_exhausted",
        },
        E::OwnerInput => match snap.state {
            W::WaitingOwner => S::Resume,
            _ => S::ResetIdle,
        },
        // A continuation still running (the one that asked for the gate)
        // carries the work on when it ends.
        E::OperatorResume => match snap.state {
            W::WaitingOwner if snap.continuation_pending => S::Resume,
            W::WaitingOwner => S::ResumeWith {
                seq: snap.continuations + 1,
            },
            _ => S::Nothing(Idle::NotOpen),
        },
        E::OtherInput => match snap.state {
            W::WaitingOwner => S::Refuse,
            _ => S::Nothing(Idle::OrdinaryInput),
        },
        E::Complete if snap.state == W::Open => S::End {
            state: W::Completed,
            code: "completed",
        },
        E::GateAsked(kind) | E::Halted(kind) if snap.state == W::Open => S::Gate(kind),
        E::HandoffAsked if snap.state == W::Open => S::AwaitChild,
        E::ResultArrived => match snap.state {
            W::WaitingChild if snap.continuation_pending => S::Resume,
            W::WaitingChild => S::ResumeWith {
                seq: snap.continuations + 1,
            },
            W::Open if snap.continuation_pending => S::Hasten,
            W::Open => S::Continue {
                seq: snap.continuations + 1,
                idle_finals: snap.idle_finals,
                delay_steps: 0,
            },
            // An owner's gate comes first; the result waits for the answer.
            _ => S::Nothing(Idle::NotOpen),
        },
        E::Final { progress } if snap.state == W::Open => {
            let idle_finals = if progress { 0 } else { snap.idle_finals + 1 };
            if snap.turns >= snap.max_turns.max(1) {
                S::Gate(GateKind::Budget)
            } else if snap.children_running && !snap.results_waiting && !snap.continuation_pending {
                // Waiting for children is not idleness: their results
                // continue the workflow.
                S::Nothing(Idle::AwaitingChildren)
            } else if idle_finals >= snap.max_idle_finals.max(1) {
                S::Gate(GateKind::IdleFinals)
            } else if snap.continuation_pending {
                S::Count { idle_finals }
            } else {
                S::Continue {
                    seq: snap.continuations + 1,
                    idle_finals,
                    delay_steps: u32::try_from(idle_finals.clamp(0, 16)).unwrap_or(16),
                }
            }
        }
        // Not a failure of the work, so not the end of it; the limit on a
        // workflow's turns still holds.
        E::Denied if snap.state == W::Open => {
            if snap.turns >= snap.max_turns.max(1) {
                S::Gate(GateKind::Budget)
            } else if snap.continuation_pending {
                S::Nothing(Idle::ContinuationPending)
            } else {
                S::Wait {
                    seq: snap.continuations + 1,
                    denials: snap.denials + 1,
                }
            }
        }
        E::Complete
        | E::GateAsked(_)
        | E::Halted(_)
        | E::Final { .. }
        | E::Denied
        | E::HandoffAsked => S::Nothing(Idle::NotOpen),
    }
}

/// How a task's end moves the workflow it is an input of (`None`: it does
/// not). `code` is the task's `errorCode`; `progress`: the task brought
/// durable progress (a comment's input, a child's result carried to it) —
/// a continuation's final alone is none.
///
/// - A final (posted or not) continues the workflow, as does a turn cut by a
///   restart after its input was admitted: the work goes on in a new
///   continuation, never by replaying the input.
/// - A budget hit or a timeout, and a run stopped by its owner, wait for the
///   owner; a run stopped for a newer message leaves the workflow to it.
/// - A capacity refusal by the provider waits and continues.
/// - Any other failure has used up the task's bounded recovery.
pub fn event_of_end(state: TaskState, code: Option<&str>, progress: bool) -> Option<WorkflowEvent> {
    use TaskState as T;
    match (state, code) {
        (T::Succeeded | T::SucceededWithRestFallback | T::FailedReply, _) => {
            Some(WorkflowEvent::Final { progress })
        }
        (T::Failed, Some("interrupted_by_restart")) => Some(WorkflowEvent::Final { progress }),
        (T::Failed, Some("capacity_denied")) => Some(WorkflowEvent::Denied),
        (T::Failed, Some("budget_exceeded")) | (T::TimedOut, _) => {
            Some(WorkflowEvent::Halted(GateKind::Budget))
        }
        (T::Cancelled, Some("resource_closed")) => Some(WorkflowEvent::ResourceClosed),
        (T::Aborted, Some("superseded")) => None,
        (T::Aborted, _) => Some(WorkflowEvent::Halted(GateKind::Stopped)),
        (T::Failed, _) => Some(WorkflowEvent::Failed),
        _ => None,
    }
}

/// How long a workflow waits after `denials` capacity refusals in a row:
/// the base doubled for each refusal before the last, at most
/// [`MAX_CAPACITY_WAIT`].
pub fn capacity_wait(base: Duration, denials: i64) -> Duration {
    let n = u32::try_from(denials.clamp(0, 17)).unwrap_or(17);
    doubled(base, n, MAX_CAPACITY_WAIT)
}

/// How long continuation `delay_steps` waits: the base doubled for each
/// final without progress before it, at most [`MAX_CONTINUATION_DELAY`].
pub fn continuation_delay(base: Duration, delay_steps: u32) -> Duration {
    doubled(base, delay_steps, MAX_CONTINUATION_DELAY)
}

/// `base` doubled for each of `n` steps after the first, at most `cap`.
fn doubled(base: Duration, n: u32, cap: Duration) -> Duration {
    let factor = 1u32 << n.saturating_sub(1).min(16);
    base.saturating_mul(factor).min(cap)
}

#[cfg(test)]
mod tests;
