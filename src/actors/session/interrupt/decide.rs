//! What `/interrupt` and `/replace` do, as one pure function:
//! [`decide`]`(snapshot, event) -> InterruptDecision`. The lane (`mod.rs`)
//! gathers the [`InterruptSnapshot`], commits each decision by
//! compare-and-swap on the versions it names, and waits for the settle event
//! the session's drive sends when a run ends.
//!
//! The promises (property-tested below):
//! - Only a run whose own turn runs is stopped, only while the runtime can
//!   start the message's turn, and only for a commenter who may trigger work.
//! - A message goes before the queue only once the run it stopped settled;
//!   a newer run in its place, or no settle within the limit, puts it back
//!   in the queue's order. It never starts a turn itself.
//! - Every decision names the message task's version it was made on.

use crate::domain::states::{OutboxStatus, SendMode};
use crate::domain::TaskId;
use crate::lifecycle::TaskState;

pub use super::super::command::decide::Permission;

/// The session's run, as the lane sees it: its oldest task that its actor
/// drives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFact {
    pub task_id: TaskId,
    pub state: TaskState,
    pub state_version: i64,
    /// The run's own turn, once admitted (not the reply retry's).
    pub turn_id: Option<String>,
    /// That turn is in the session's thread (a `/review` runs in a thread
    /// of its own): only such a turn is reverted by `/replace`.
    pub in_session_thread: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptSnapshot {
    /// `Interrupt` or `Replace`: what the comment asked for.
    pub wants: SendMode,
    pub state: TaskState,
    pub state_version: i64,
    pub entry_mode: SendMode,
    pub entry_status: OutboxStatus,
    pub auto_drain: bool,
    /// The run this message already stopped.
    pub supersedes: Option<TaskId>,
    pub permission: Permission,
    /// The runtime can start the message's turn now (its process and account).
    pub ready: bool,
    pub run: Option<RunFact>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptEvent {
    /// Woken, or a run of the session ended: look again.
    Woken,
    /// The run it stopped did not settle within the limit.
    SettleTimedOut,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterruptStep {
    Nothing(Idle),
    /// Refuse it: the commenter may not trigger work.
    Reject,
    /// Stop the run (it ends `aborted`, `superseded`) and mark the message
    /// to go first once it settled; `revert_turn` for `/replace`.
    Supersede {
        run: TaskId,
        run_version: i64,
        revert_turn: Option<String>,
    },
    /// The stopped run has not settled yet: wait for its end.
    AwaitSettle,
    /// The stopped run settled: the repository starts this message next.
    Ready,
    /// Back in the queue's order, as an ordinary message.
    Demote(Demotion),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    NotQueued,
    /// Being sent, or held for an operator.
    NotWaiting,
    PermissionUnknown,
    /// Nothing runs: it is an ordinary message, started in the queue's order.
    NoRun,
    /// The run is not at a point where it can be stopped (preparing, its
    /// answer being checked, already being stopped).
    RunNotStoppable,
    /// The runtime could not start the message's turn now: nothing is stopped.
    NotReady,
    /// It stopped a run once and went back to the queue's order: it stops
    /// nothing again.
    BackInQueue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demotion {
    /// Another run took the place of the one it stopped.
    NewerRun,
    /// The stopped run did not settle within the limit.
    NotSettled,
}

impl Demotion {
    pub fn as_str(self) -> &'static str {
        match self {
            Demotion::NewerRun => "newer_run",
            Demotion::NotSettled => "not_settled",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptDecision {
    pub expected_version: i64,
    pub step: InterruptStep,
}

fn sends_now(mode: SendMode) -> bool {
    matches!(mode, SendMode::Interrupt | SendMode::Replace)
}

pub fn decide(snap: &InterruptSnapshot, event: InterruptEvent) -> InterruptDecision {
    InterruptDecision {
        expected_version: snap.state_version,
        step: step(snap, event),
    }
}

fn step(snap: &InterruptSnapshot, event: InterruptEvent) -> InterruptStep {
    use InterruptStep as S;
    if snap.state != TaskState::Queued {
        return S::Nothing(Idle::NotQueued);
    }
    if snap.entry_status != OutboxStatus::Queued || !snap.auto_drain {
        return S::Nothing(Idle::NotWaiting);
    }
    if sends_now(snap.entry_mode) {
        // It stopped a run already: follow that run to its end.
        return match (&snap.run, &snap.supersedes) {
            (None, _) => S::Ready,
            (Some(run), Some(stopped)) if run.task_id == *stopped => match event {
                InterruptEvent::Woken => S::AwaitSettle,
                InterruptEvent::SettleTimedOut => S::Demote(Demotion::NotSettled),
            },
            (Some(_), _) => S::Demote(Demotion::NewerRun),
        };
    }
    if snap.supersedes.is_some() {
        return S::Nothing(Idle::BackInQueue);
    }
    match &snap.permission {
        Permission::Denied(_) => return S::Reject,
        Permission::Unknown => return S::Nothing(Idle::PermissionUnknown),
        Permission::Allowed => {}
    }
    let Some(run) = &snap.run else {
        return S::Nothing(Idle::NoRun);
    };
    let stoppable = matches!(run.state, TaskState::Running | TaskState::AwaitingApproval);
    match (&run.turn_id, stoppable) {
        (Some(turn), true) if snap.ready => S::Supersede {
            run: run.task_id.clone(),
            run_version: run.state_version,
            revert_turn: (snap.wants == SendMode::Replace && run.in_session_thread)
                .then(|| turn.clone()),
        },
        (Some(_), true) => S::Nothing(Idle::NotReady),
        _ => S::Nothing(Idle::RunNotStoppable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn task(n: u8) -> TaskId {
        TaskId::parse(&format!("task-{:032x}", u128::from(n) + 1)).expect("a task id")
    }

    fn run() -> impl Strategy<Value = Option<RunFact>> {
        prop::option::of(
            (
                0_u8..3,
                prop::sample::select(TaskState::ALL.to_vec()),
                0_i64..20,
                prop::option::of("turn-[a-c]"),
                any::<bool>(),
            )
                .prop_map(|(n, state, state_version, turn_id, in_session_thread)| {
                    RunFact {
                        task_id: task(n),
                        state,
                        state_version,
                        turn_id,
                        in_session_thread,
                    }
                }),
        )
    }

    fn mode() -> impl Strategy<Value = SendMode> {
        prop::sample::select(vec![
            SendMode::Enqueue,
            SendMode::Steer,
            SendMode::Interrupt,
            SendMode::Replace,
        ])
    }

    fn snapshot() -> impl Strategy<Value = InterruptSnapshot> {
        (
            prop::sample::select(vec![SendMode::Interrupt, SendMode::Replace]),
            prop::sample::select(TaskState::ALL.to_vec()),
            0_i64..50,
            mode(),
            prop::sample::select(vec![OutboxStatus::Queued, OutboxStatus::Sending]),
            any::<bool>(),
            prop::option::of((0_u8..3).prop_map(task)),
            prop::sample::select(vec![
                Permission::Allowed,
                Permission::Denied("read only".into()),
                Permission::Unknown,
            ]),
            any::<bool>(),
            run(),
        )
            .prop_map(
                |(
                    wants,
                    state,
                    state_version,
                    entry_mode,
                    entry_status,
                    auto_drain,
                    supersedes,
                    permission,
                    ready,
                    run,
                )| {
                    InterruptSnapshot {
                        wants,
                        state,
                        state_version,
                        entry_mode,
                        entry_status,
                        auto_drain,
                        supersedes,
                        permission,
                        ready,
                        run,
                    }
                },
            )
    }

    fn event() -> impl Strategy<Value = InterruptEvent> {
        prop::sample::select(vec![InterruptEvent::Woken, InterruptEvent::SettleTimedOut])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn every_decision_names_the_version_it_was_made_on(s in snapshot(), e in event()) {
            prop_assert_eq!(decide(&s, e).expected_version, s.state_version);
        }

        #[test]
        fn only_a_running_turn_is_stopped_and_only_when_the_message_can_start(s in snapshot(), e in event()) {
            if let InterruptStep::Supersede { run, run_version, revert_turn } = decide(&s, e).step {
                let r = s.run.clone().expect("a run");
                prop_assert_eq!(run, r.task_id);
                prop_assert_eq!(run_version, r.state_version);
                prop_assert!(matches!(r.state, TaskState::Running | TaskState::AwaitingApproval));
                prop_assert!(r.turn_id.is_some() && s.ready);
                prop_assert_eq!(&s.permission, &Permission::Allowed);
                prop_assert_eq!(s.state, TaskState::Queued);
                prop_assert!(!sends_now(s.entry_mode), "it stops one run, once");
                prop_assert!(s.supersedes.is_none(), "never again once back in the queue");
                // Only `/replace` reverts, only the turn it stopped, and
                // only from the session's own thread.
                match s.wants {
                    SendMode::Replace if r.in_session_thread => {
                        prop_assert_eq!(revert_turn, r.turn_id)
                    }
                    _ => prop_assert_eq!(revert_turn, None),
                }
            }
        }

        #[test]
        fn it_goes_first_only_once_the_run_it_stopped_is_gone(s in snapshot(), e in event()) {
            if decide(&s, e).step == InterruptStep::Ready {
                prop_assert!(s.run.is_none());
                prop_assert!(sends_now(s.entry_mode));
            }
        }

        #[test]
        fn a_newer_run_or_no_settle_puts_it_back_in_order(s in snapshot()) {
            let waiting = s.state == TaskState::Queued
                && s.entry_status == OutboxStatus::Queued
                && s.auto_drain
                && sends_now(s.entry_mode);
            let Some(run) = s.run.clone() else { return Ok(()) };
            if !waiting {
                return Ok(());
            }
            let woken = decide(&s, InterruptEvent::Woken).step;
            let timed_out = decide(&s, InterruptEvent::SettleTimedOut).step;
            if s.supersedes.as_ref() == Some(&run.task_id) {
                prop_assert_eq!(woken, InterruptStep::AwaitSettle);
                prop_assert_eq!(timed_out, InterruptStep::Demote(Demotion::NotSettled));
            } else {
                prop_assert_eq!(woken, InterruptStep::Demote(Demotion::NewerRun));
            }
        }

        #[test]
        fn permission_decides_before_anything_is_stopped(s in snapshot(), e in event()) {
            let step = decide(&s, e).step;
            if s.permission != Permission::Allowed {
                let stops = matches!(step, InterruptStep::Supersede { .. });
                prop_assert!(!stops);
            }
        }
    }
}
