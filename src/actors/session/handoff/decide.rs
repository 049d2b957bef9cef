//! What "stop and send now" does next, as one pure function:
//! [`decide`]`(snapshot, event) -> HandoffDecision`. The lane (`mod.rs`)
//! gathers the [`HandoffSnapshot`] from the store, commits each decision by
//! compare-and-swap on the entry version it names, and carries out its
//! effect (stop the pinned run, wait for it to settle, read the pinned
//! thread's history).
//!
//! The promises (property-tested below):
//! - A message the ledger or the history shows `sent` is never sent again:
//!   the handoff ends and the entry stays held.
//! - The ledger's claim is withdrawn only after the pinned run settled and
//!   the pinned thread's history proved the message missing (or nothing was
//!   ever claimed); the history searched is only the pinned thread's.
//! - Only the pinned run is stopped, only while its drive may still be
//!   working on it, and only while the runtime can start the message.
//! - The entry is queued again only from `revoked`.
//! - Every decision names the entry version it was made on.

use crate::domain::states::HandoffPhase;
use crate::domain::TaskId;
use crate::lifecycle::TaskState;

/// The run the handoff pinned, as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFact {
    pub task_id: TaskId,
    pub state: TaskState,
    pub state_version: i64,
}

impl RunFact {
    /// Its drive may still be working on its turn.
    fn live(&self) -> bool {
        matches!(
            self.state,
            TaskState::Leased
                | TaskState::Running
                | TaskState::AwaitingApproval
                | TaskState::CancelRequested
        )
    }
}

/// The ledger's row for the message's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Nothing was ever claimed: nothing can have reached the agent.
    None,
    /// `sending` or `accepted`: it may have.
    Open,
    /// `sent`: the agent has it.
    Sent,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffSnapshot {
    pub phase: HandoffPhase,
    pub entry_version: i64,
    pub claim: Claim,
    pub pinned_thread: Option<String>,
    pub pinned_turn: Option<String>,
    pub run: Option<RunFact>,
    /// The runtime can start the message's turn now (its process and
    /// account): a run is never stopped for a message that cannot follow.
    pub ready: bool,
}

/// What the pinned thread's history says of the message.
pub use super::super::steer::decide::Found;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoffEvent {
    Woken,
    /// The pinned run did not settle within the limit.
    SettleTimedOut,
    History(Found),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoffStep {
    /// `requested` → `interrupting`: stop the pinned run (when its drive may
    /// still be working) or, with none, ask Codex to stop the pinned turn.
    Interrupt {
        stop: Option<(TaskId, i64)>,
        turn: Option<(String, String)>,
    },
    /// The pinned run has not settled: wait for the end of a drive.
    AwaitSettle,
    /// Read the pinned thread's history for the message.
    LookUp {
        thread_id: String,
    },
    /// `interrupting` → `revoked`.
    Revoke,
    /// `revoked` → `dedicated`.
    Dedicate,
    /// The handoff ends; the entry stays held, for this reason.
    KeepHeld {
        reason: KeepReason,
        sent_in: Option<String>,
    },
    Nothing(Idle),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepReason {
    /// The ledger or the history shows the agent has it.
    AlreadySent,
    /// A claim with no thread: nothing can prove it missing.
    Unprovable,
}

impl KeepReason {
    pub fn as_str(self) -> &'static str {
        match self {
            KeepReason::AlreadySent => "already_sent",
            KeepReason::Unprovable => "delivery_unprovable",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Done (`dedicated`): the queue has it.
    Done,
    /// The run did not settle in time, or the history could not be read:
    /// tried again later, from the same phase.
    RetryLater,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffDecision {
    pub expected_version: i64,
    pub step: HandoffStep,
}

pub fn decide(snap: &HandoffSnapshot, event: &HandoffEvent) -> HandoffDecision {
    HandoffDecision {
        expected_version: snap.entry_version,
        step: step(snap, event),
    }
}

fn step(snap: &HandoffSnapshot, event: &HandoffEvent) -> HandoffStep {
    use HandoffPhase as P;
    let keep = |reason, sent_in| HandoffStep::KeepHeld { reason, sent_in };
    if snap.phase != P::Dedicated {
        if snap.claim == Claim::Sent {
            return keep(KeepReason::AlreadySent, None);
        }
        if let HandoffEvent::History(Found::Turn { turn_id }) = event {
            return keep(KeepReason::AlreadySent, Some(turn_id.clone()));
        }
    }
    match snap.phase {
        P::Dedicated => HandoffStep::Nothing(Idle::Done),
        P::Revoked => HandoffStep::Dedicate,
        P::Requested if !snap.ready => HandoffStep::Nothing(Idle::RetryLater),
        P::Requested => {
            let run = snap.run.as_ref().filter(|r| r.live());
            HandoffStep::Interrupt {
                stop: run
                    .filter(|r| r.state != TaskState::CancelRequested)
                    .map(|r| (r.task_id.clone(), r.state_version)),
                // No drive of ours follows the turn: Codex is asked directly.
                turn: match (run, &snap.pinned_thread, &snap.pinned_turn) {
                    (None, Some(th), Some(tu)) if snap.claim == Claim::Open => {
                        Some((th.clone(), tu.clone()))
                    }
                    _ => None,
                },
            }
        }
        P::Interrupting => match event {
            HandoffEvent::SettleTimedOut => HandoffStep::Nothing(Idle::RetryLater),
            HandoffEvent::History(Found::Missing) => HandoffStep::Revoke,
            HandoffEvent::History(Found::Unreadable | Found::Turn { .. }) => {
                HandoffStep::Nothing(Idle::RetryLater)
            }
            HandoffEvent::Woken => {
                if snap.run.as_ref().is_some_and(RunFact::live) {
                    return HandoffStep::AwaitSettle;
                }
                match (snap.claim, &snap.pinned_thread) {
                    (Claim::None, _) => HandoffStep::Revoke,
                    (_, Some(thread)) => HandoffStep::LookUp {
                        thread_id: thread.clone(),
                    },
                    (_, None) => keep(KeepReason::Unprovable, None),
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn task(n: u8) -> TaskId {
        TaskId::parse(&format!("task-{n:032x}")).expect("a task id")
    }

    fn phase() -> impl Strategy<Value = HandoffPhase> {
        prop::sample::select(HandoffPhase::ALL.to_vec())
    }

    fn state() -> impl Strategy<Value = TaskState> {
        prop::sample::select(TaskState::ALL.to_vec())
    }

    fn snapshot() -> impl Strategy<Value = HandoffSnapshot> {
        (
            phase(),
            0i64..50,
            prop::sample::select(vec![Claim::None, Claim::Open, Claim::Sent]),
            prop::option::of("thread-[ab]"),
            prop::option::of("turn-[ab]"),
            prop::option::of((state(), 0i64..9)),
            any::<bool>(),
        )
            .prop_map(|(phase, v, claim, th, tu, run, ready)| HandoffSnapshot {
                phase,
                entry_version: v,
                claim,
                pinned_thread: th,
                pinned_turn: tu,
                run: run.map(|(state, state_version)| RunFact {
                    task_id: task(1),
                    state,
                    state_version,
                }),
                ready,
            })
    }

    fn event() -> impl Strategy<Value = HandoffEvent> {
        prop_oneof![
            Just(HandoffEvent::Woken),
            Just(HandoffEvent::SettleTimedOut),
            "turn-[ab]".prop_map(|t| HandoffEvent::History(Found::Turn { turn_id: t })),
            Just(HandoffEvent::History(Found::Missing)),
            Just(HandoffEvent::History(Found::Unreadable)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn a_sent_message_is_never_sent_again(s in snapshot(), e in event()) {
            let d = decide(&s, &e);
            if s.claim == Claim::Sent {
                prop_assert!(!matches!(d.step, HandoffStep::Revoke | HandoffStep::Dedicate));
            }
            if matches!(e, HandoffEvent::History(Found::Turn { .. })) {
                prop_assert!(!matches!(d.step, HandoffStep::Revoke | HandoffStep::Dedicate));
            }
        }

        #[test]
        fn a_claim_is_withdrawn_only_after_the_run_settled_and_the_history_proved_it_missing(
            s in snapshot(), e in event()
        ) {
            if decide(&s, &e).step == HandoffStep::Revoke {
                prop_assert_eq!(s.phase, HandoffPhase::Interrupting);
                let proven = e == HandoffEvent::History(Found::Missing)
                    || (s.claim == Claim::None && e == HandoffEvent::Woken);
                prop_assert!(proven, "{:?} on {:?}", e, s);
                if e == HandoffEvent::Woken {
                    prop_assert!(!s.run.as_ref().is_some_and(RunFact::live));
                }
            }
        }

        #[test]
        fn only_the_pinned_thread_is_searched_and_only_the_pinned_run_stopped(
            s in snapshot(), e in event()
        ) {
            match decide(&s, &e).step {
                HandoffStep::LookUp { thread_id } => {
                    prop_assert_eq!(Some(thread_id), s.pinned_thread.clone());
                }
                HandoffStep::Interrupt { stop: Some((run, version)), .. } => {
                    prop_assert!(s.ready, "a run is stopped only for a message that can start");
                    let pinned = s.run.clone().expect("a pinned run");
                    prop_assert!(pinned.live());
                    prop_assert_eq!(run, pinned.task_id);
                    prop_assert_eq!(version, pinned.state_version);
                }
                _ => {}
            }
        }

        #[test]
        fn the_entry_is_queued_again_only_from_revoked_and_every_decision_names_its_version(
            s in snapshot(), e in event()
        ) {
            let d = decide(&s, &e);
            prop_assert_eq!(d.expected_version, s.entry_version);
            if d.step == HandoffStep::Dedicate {
                prop_assert_eq!(s.phase, HandoffPhase::Revoked);
            }
            if matches!(d.step, HandoffStep::Interrupt { .. }) {
                prop_assert_eq!(s.phase, HandoffPhase::Requested);
            }
        }
    }

    #[test]
    fn a_held_steer_goes_through_every_phase() {
        let mut s = HandoffSnapshot {
            phase: HandoffPhase::Requested,
            entry_version: 3,
            claim: Claim::Open,
            pinned_thread: Some("thread-a".into()),
            pinned_turn: Some("turn-a".into()),
            run: Some(RunFact {
                task_id: task(1),
                state: TaskState::Running,
                state_version: 4,
            }),
            ready: false,
        };
        assert_eq!(
            decide(&s, &HandoffEvent::Woken).step,
            HandoffStep::Nothing(Idle::RetryLater),
            "nothing is stopped while the runtime cannot start the message"
        );
        s.ready = true;
        assert_eq!(
            decide(&s, &HandoffEvent::Woken).step,
            HandoffStep::Interrupt {
                stop: Some((task(1), 4)),
                turn: None
            }
        );
        s.phase = HandoffPhase::Interrupting;
        if let Some(r) = s.run.as_mut() {
            r.state = TaskState::CancelRequested;
        }
        assert_eq!(
            decide(&s, &HandoffEvent::Woken).step,
            HandoffStep::AwaitSettle
        );
        if let Some(r) = s.run.as_mut() {
            r.state = TaskState::Aborted;
        }
        assert_eq!(
            decide(&s, &HandoffEvent::Woken).step,
            HandoffStep::LookUp {
                thread_id: "thread-a".into()
            }
        );
        assert_eq!(
            decide(&s, &HandoffEvent::History(Found::Missing)).step,
            HandoffStep::Revoke
        );
        s.phase = HandoffPhase::Revoked;
        assert_eq!(decide(&s, &HandoffEvent::Woken).step, HandoffStep::Dedicate);
    }
}
