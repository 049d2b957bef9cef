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
        E::Final { progress } if snap.state == W::Open => {
            let idle_finals = if progress { 0 } else { snap.idle_finals + 1 };
            if snap.turns >= snap.max_turns.max(1) {
                S::Gate(GateKind::Budget)
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
        E::Complete | E::GateAsked(_) | E::Halted(_) | E::Final { .. } | E::Denied => {
            S::Nothing(Idle::NotOpen)
        }
    }
}

/// How a task's end moves the workflow it is an input of (`None`: it does
/// not). `code` is the task's `errorCode`; `continuation`: the task is one
/// of the workflow's continuations (its final is no progress by itself).
///
/// - A final (posted or not) continues the workflow, as does a turn cut by a
///   restart after its input was admitted: the work goes on in a new
///   continuation, never by replaying the input.
/// - A budget hit or a timeout, and a run stopped by its owner, wait for the
///   owner; a run stopped for a newer message leaves the workflow to it.
/// - A capacity refusal by the provider waits and continues.
/// - Any other failure has used up the task's bounded recovery.
pub fn event_of_end(
    state: TaskState,
    code: Option<&str>,
    continuation: bool,
) -> Option<WorkflowEvent> {
    use TaskState as T;
    let progress = !continuation;
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn snapshot() -> impl Strategy<Value = WorkflowSnapshot> {
        (
            proptest::sample::select(WorkflowState::ALL.to_vec()),
            0i64..50,
            0i64..70,
            0i64..20,
            any::<bool>(),
            1i64..70,
            (0i64..30, 1i64..30, 0i64..20),
        )
            .prop_map(
                |(
                    state,
                    version,
                    idle_finals,
                    continuations,
                    continuation_pending,
                    max,
                    (turns, max_turns, denials),
                )| {
                    WorkflowSnapshot {
                        state,
                        version,
                        idle_finals: idle_finals.min(max - 1),
                        continuations,
                        continuation_pending,
                        max_idle_finals: max,
                        turns,
                        max_turns,
                        denials,
                    }
                },
            )
    }

    fn event() -> impl Strategy<Value = WorkflowEvent> {
        use WorkflowEvent as E;
        prop_oneof![
            any::<bool>().prop_map(|progress| E::Final { progress }),
            Just(E::Complete),
            proptest::sample::select(GateKind::ALL.to_vec()).prop_map(E::GateAsked),
            proptest::sample::select(vec![GateKind::Stopped, GateKind::Budget]).prop_map(E::Halted),
            Just(E::OwnerInput),
            Just(E::OperatorResume),
            Just(E::OtherInput),
            Just(E::Cancel),
            Just(E::ResourceClosed),
            Just(E::Failed),
            Just(E::Denied),
        ]
    }

    /// The state a step leaves the workflow in.
    fn after(snap: &WorkflowSnapshot, step: WorkflowStep) -> WorkflowState {
        match step {
            WorkflowStep::Gate(_) => WorkflowState::WaitingOwner,
            WorkflowStep::Resume | WorkflowStep::ResumeWith { .. } => WorkflowState::Open,
            WorkflowStep::End { state, .. } => state,
            _ => snap.state,
        }
    }

    proptest! {
        #[test]
        fn every_decision_names_the_version_it_was_made_on(s in snapshot(), e in event()) {
            prop_assert_eq!(decide(&s, e).expected_version, s.version);
        }

        #[test]
        fn a_final_never_ends_a_workflow_and_an_end_is_for_good(s in snapshot(), e in event()) {
            let step = decide(&s, e).step;
            if s.state.is_end() {
                prop_assert_eq!(step, WorkflowStep::Nothing(Idle::Ended));
            }
            if let (WorkflowEvent::Final { .. }, false) = (e, s.state.is_end()) {
                prop_assert!(!after(&s, step).is_end(), "{:?}", step);
            }
            if !s.state.is_end() && after(&s, step) == WorkflowState::Completed {
                prop_assert_eq!(e, WorkflowEvent::Complete);
            }
        }

        #[test]
        fn one_continuation_at_a_time_numbered_in_order(s in snapshot(), e in event()) {
            if let WorkflowStep::Continue { seq, .. } = decide(&s, e).step {
                prop_assert_eq!(s.state, WorkflowState::Open);
                prop_assert!(!s.continuation_pending);
                prop_assert_eq!(seq, s.continuations + 1);
            }
        }

        #[test]
        fn finals_without_progress_open_a_gate_at_the_limit(s in snapshot(), progress in any::<bool>()) {
            let step = decide(&s, WorkflowEvent::Final { progress }).step;
            if s.state == WorkflowState::Open {
                let count = if progress { 0 } else { s.idle_finals + 1 };
                match step {
                    WorkflowStep::Gate(GateKind::Budget) => {
                        prop_assert!(s.turns >= s.max_turns, "a budget gate only past max_turns_per_workflow");
                    }
                    WorkflowStep::Gate(kind) => {
                        prop_assert_eq!(kind, GateKind::IdleFinals);
                        prop_assert!(count >= s.max_idle_finals);
                        prop_assert!(s.turns < s.max_turns);
                    }
                    WorkflowStep::Continue { idle_finals, .. } | WorkflowStep::Count { idle_finals } => {
                        prop_assert_eq!(idle_finals, count);
                        prop_assert!(idle_finals < s.max_idle_finals);
                    }
                    other => prop_assert!(false, "{:?}", other),
                }
            }
        }

        #[test]
        fn only_the_owner_resumes_a_waiting_workflow(s in snapshot(), e in event()) {
            let step = decide(&s, e).step;
            if s.state == WorkflowState::WaitingOwner && after(&s, step) == WorkflowState::Open {
                prop_assert!(matches!(e, WorkflowEvent::OwnerInput | WorkflowEvent::OperatorResume));
            }
            if let WorkflowStep::ResumeWith { seq } = step {
                prop_assert_eq!(s.state, WorkflowState::WaitingOwner);
                prop_assert!(!s.continuation_pending);
                prop_assert_eq!(seq, s.continuations + 1);
            }
            if s.state == WorkflowState::WaitingOwner && e == WorkflowEvent::OtherInput {
                prop_assert_eq!(step, WorkflowStep::Refuse);
            }
        }

        #[test]
        fn a_capacity_refusal_waits_and_continues_and_never_ends_the_work(s in snapshot()) {
            let step = decide(&s, WorkflowEvent::Denied).step;
            prop_assert!(!matches!(step, WorkflowStep::End { .. }), "{:?}", step);
            if s.state != WorkflowState::Open {
                prop_assert!(matches!(step, WorkflowStep::Nothing(_)), "{:?}", step);
            }
            match step {
                WorkflowStep::Wait { seq, denials } => {
                    prop_assert_eq!(s.state, WorkflowState::Open);
                    prop_assert!(!s.continuation_pending);
                    prop_assert!(s.turns < s.max_turns);
                    prop_assert_eq!(seq, s.continuations + 1);
                    prop_assert_eq!(denials, s.denials + 1);
                }
                WorkflowStep::Gate(kind) => {
                    prop_assert_eq!(kind, GateKind::Budget);
                    prop_assert!(s.turns >= s.max_turns);
                }
                WorkflowStep::Nothing(_) => {
                    prop_assert!(s.state != WorkflowState::Open || s.continuation_pending);
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }

        #[test]
        fn a_capacity_wait_grows_with_each_refusal_in_a_row_up_to_an_hour(
            base in 1u64..120, a in 0i64..40, b in 0i64..40,
        ) {
            let base = Duration::from_secs(base);
            let (lo, hi) = (a.min(b), a.max(b));
            prop_assert!(capacity_wait(base, lo) <= capacity_wait(base, hi));
            prop_assert!(capacity_wait(base, hi) <= MAX_CAPACITY_WAIT);
            prop_assert_eq!(capacity_wait(base, 1), base);
        }

        #[test]
        fn a_continuation_waits_longer_after_each_idle_final_but_never_past_the_cap(
            base in 1u64..30, a in 0u32..40, b in 0u32..40,
        ) {
            let base = Duration::from_secs(base);
            let (lo, hi) = (a.min(b), a.max(b));
            prop_assert!(continuation_delay(base, lo) <= continuation_delay(base, hi));
            prop_assert!(continuation_delay(base, hi) <= MAX_CONTINUATION_DELAY.max(base));
        }
    }

    proptest! {
        /// Only a terminal task moves its workflow, and only a failure that
        /// is neither a limit nor a restart ends it.
        #[test]
        fn a_task_end_moves_its_workflow_only_as_its_outcome_says(
            state in proptest::sample::select(TaskState::ALL.to_vec()),
            code in proptest::option::of(proptest::sample::select(vec![
                "superseded", "budget_exceeded", "interrupted_by_restart", "turn_failed",
                "turn_interrupted", "capacity_denied",
            ])),
            continuation in any::<bool>(),
        ) {
            let event = event_of_end(state, code, continuation);
            if !state.is_terminal() {
                prop_assert_eq!(event, None);
            }
            if event == Some(WorkflowEvent::Failed) {
                prop_assert_eq!(state, TaskState::Failed);
                prop_assert!(!matches!(
                    code,
                    Some("budget_exceeded" | "interrupted_by_restart" | "capacity_denied")
                ));
            }
            if let Some(WorkflowEvent::Final { progress }) = event {
                prop_assert_eq!(progress, !continuation);
            }
            if event == Some(WorkflowEvent::Denied) {
                prop_assert_eq!((state, code), (TaskState::Failed, Some("capacity_denied")));
            }
            if code == Some("superseded") && state == TaskState::Aborted {
                prop_assert_eq!(event, None);
            }
        }
    }

    #[test]
    fn an_open_workflow_continues_then_completes_only_when_the_agent_says_so() {
        let mut s = WorkflowSnapshot {
            state: WorkflowState::Open,
            version: 1,
            idle_finals: 0,
            continuations: 0,
            continuation_pending: false,
            max_idle_finals: 3,
            turns: 2,
            max_turns: 200,
            denials: 0,
        };
        assert_eq!(
            decide(&s, WorkflowEvent::Final { progress: true }).step,
            WorkflowStep::Continue {
                seq: 1,
                idle_finals: 0,
                delay_steps: 0
            }
        );
        s.idle_finals = 2;
        assert_eq!(
            decide(&s, WorkflowEvent::Final { progress: false }).step,
            WorkflowStep::Gate(GateKind::IdleFinals)
        );
        assert_eq!(
            decide(&s, WorkflowEvent::Complete).step,
            WorkflowStep::End {
                state: WorkflowState::Completed,
                code: "completed"
            }
        );
    }
}
