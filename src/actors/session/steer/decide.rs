//! What the steer lane does with the session's queue head, as one pure
//! function: [`decide`]`(snapshot, event) -> SteerDecision`. The lane
//! (`mod.rs`) gathers the [`SteerSnapshot`] from the store and the forge,
//! commits each decision by compare-and-swap on the versions it names, and
//! carries out its one effect (the `turn/steer`, or the history lookup).
//!
//! The promises (property-tested below):
//! - A steer is sent only as the session's queue head, only into a turn that
//!   runs, only once: an entry already `sending` is looked up in the thread's
//!   history, never sent again.
//! - It never starts a turn. With no run to join it is left to the queue,
//!   where it starts its own turn like any instruction.
//! - Only an answer that proves it joined nothing gives it back to the queue;
//!   an uncertain answer goes through the history, and a steer the history
//!   cannot show is held for an operator.
//! - A commenter who may not trigger work is refused; an unknown permission
//!   decides nothing.
//! - Every decision names the task version it was made on.

use crate::domain::states::OutboxStatus;
use crate::domain::TaskId;
use crate::lifecycle::TaskState;

pub use super::super::command::decide::Permission;

/// The session's running turn a steer may join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub task_id: TaskId,
    pub thread_id: String,
    pub turn_id: String,
}

/// What a steer is decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteerSnapshot {
    /// The steer task's state and version.
    pub state: TaskState,
    pub state_version: i64,
    pub entry_status: OutboxStatus,
    /// `false`: held for an operator; nothing drains it.
    pub auto_drain: bool,
    /// The thread a send that began wrote in the ledger (the only one its
    /// history lookup may search).
    pub sent_thread: Option<String>,
    /// No other message of the session waits before it.
    pub head: bool,
    /// The session's running turn, if one runs now.
    pub run: Option<Run>,
    /// A turn that answered this steer's `turn/steer` with "no active
    /// turn": it ended in Codex, whatever the store shows yet.
    pub refused_turn: Option<String>,
    pub permission: Permission,
}

/// What the lane learnt since the last decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SteerEvent {
    /// Woken: look at the head.
    Woken,
    /// What `turn/steer` answered.
    Answered(SteerAnswer),
    /// What the thread's history says of the steer's operation id.
    History(Found),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SteerAnswer {
    /// The turn that took it in.
    Accepted { turn_id: String },
    /// The answer proves it joined nothing (no such active turn, nothing sent).
    NotAdmitted,
    /// It may have joined the turn: the answer was lost.
    Uncertain,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A turn of the thread carries the steer's operation id.
    Turn { turn_id: String },
    /// No turn carries it (it may still wait inside a turn for the model).
    Missing,
    /// The history could not be read.
    Unreadable,
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SteerStep {
    /// Nothing for the steer lane now.
    Nothing(Idle),
    /// Refuse it: the commenter may not trigger work.
    Reject,
    /// Write `sending` with the run it expects, then `turn/steer` into it.
    Admit(Run),
    /// Record that `turn_id` took it in; its task ends `succeeded`.
    Accept { turn_id: String },
    /// It joined nothing: back to the queue, drained automatically.
    Release,
    /// Look the operation up in the thread the ledger names.
    LookUp { thread_id: String },
    /// Held for an operator, never sent again by itself.
    Hold(HoldReason),
}

/// Why the lane leaves the head alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// It is no longer queued (carried out, cancelled).
    NotQueued,
    /// Held for an operator.
    Held,
    /// Another message waits before it.
    NotHead,
    /// No turn runs: it starts its own when the queue gets to it.
    NoRun,
    /// The forge could not say whether its commenter may trigger work.
    PermissionUnknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldReason {
    /// The answer was lost and the history does not show the steer.
    Unconfirmed,
    /// The answer was lost and the history could not be read.
    HistoryUnreadable,
}

impl HoldReason {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::Unconfirmed => "steer_unconfirmed",
            HoldReason::HistoryUnreadable => "history_unreadable",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteerDecision {
    /// The steer task's version the decision was made on.
    pub expected_version: i64,
    pub step: SteerStep,
}

pub fn decide(snap: &SteerSnapshot, event: &SteerEvent) -> SteerDecision {
    SteerDecision {
        expected_version: snap.state_version,
        step: step(snap, event),
    }
}

fn step(snap: &SteerSnapshot, event: &SteerEvent) -> SteerStep {
    if snap.state != TaskState::Queued {
        return SteerStep::Nothing(Idle::NotQueued);
    }
    match event {
        SteerEvent::Woken => woken(snap),
        SteerEvent::Answered(SteerAnswer::Accepted { turn_id }) => SteerStep::Accept {
            turn_id: turn_id.clone(),
        },
        SteerEvent::Answered(SteerAnswer::NotAdmitted) => SteerStep::Release,
        SteerEvent::Answered(SteerAnswer::Uncertain) => look_up(snap),
        SteerEvent::History(Found::Turn { turn_id }) => SteerStep::Accept {
            turn_id: turn_id.clone(),
        },
        SteerEvent::History(Found::Missing) => SteerStep::Hold(HoldReason::Unconfirmed),
        SteerEvent::History(Found::Unreadable) => SteerStep::Hold(HoldReason::HistoryUnreadable),
    }
}

fn woken(snap: &SteerSnapshot) -> SteerStep {
    // A send that began (before a crash, say) is proven from the history,
    // never sent again: the turn may hold it already.
    if snap.entry_status == OutboxStatus::Sending {
        return look_up(snap);
    }
    if !snap.auto_drain {
        return SteerStep::Nothing(Idle::Held);
    }
    match &snap.permission {
        Permission::Denied(_) => return SteerStep::Reject,
        Permission::Unknown => return SteerStep::Nothing(Idle::PermissionUnknown),
        Permission::Allowed => {}
    }
    if !snap.head {
        return SteerStep::Nothing(Idle::NotHead);
    }
    match &snap.run {
        // Steering into it again could only be refused again (or, with its
        // answer lost, leave the steer uncertain): it waits for a turn of
        // its own.
        Some(run) if snap.refused_turn.as_deref() == Some(run.turn_id.as_str()) => {
            SteerStep::Nothing(Idle::NoRun)
        }
        Some(run) => SteerStep::Admit(run.clone()),
        None => SteerStep::Nothing(Idle::NoRun),
    }
}

fn look_up(snap: &SteerSnapshot) -> SteerStep {
    match &snap.sent_thread {
        Some(thread_id) => SteerStep::LookUp {
            thread_id: thread_id.clone(),
        },
        // Nothing says where it went: no thread may be searched in its place.
        None => SteerStep::Hold(HoldReason::HistoryUnreadable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run() -> impl Strategy<Value = Option<Run>> {
        prop::option::of(("[a-c]", "[a-c]").prop_map(|(th, tu)| Run {
            task_id: TaskId::parse(&format!("task-{:032x}", 7)).expect("a task id"),
            thread_id: format!("thread-{th}"),
            turn_id: format!("turn-{tu}"),
        }))
    }

    fn snapshot() -> impl Strategy<Value = SteerSnapshot> {
        (
            prop::sample::select(TaskState::ALL.to_vec()),
            0_i64..50,
            prop::sample::select(vec![OutboxStatus::Queued, OutboxStatus::Sending]),
            any::<bool>(),
            prop::option::of("thread-[a-c]"),
            any::<bool>(),
            (run(), prop::option::of("turn-[a-c]")),
            prop::sample::select(vec![
                Permission::Allowed,
                Permission::Denied("read only".into()),
                Permission::Unknown,
            ]),
        )
            .prop_map(
                |(
                    state,
                    state_version,
                    entry_status,
                    auto_drain,
                    sent_thread,
                    head,
                    (run, refused_turn),
                    permission,
                )| {
                    SteerSnapshot {
                        state,
                        state_version,
                        entry_status,
                        auto_drain,
                        sent_thread,
                        head,
                        run,
                        refused_turn,
                        permission,
                    }
                },
            )
    }

    fn event() -> impl Strategy<Value = SteerEvent> {
        prop_oneof![
            Just(SteerEvent::Woken),
            "turn-[a-c]"
                .prop_map(|turn_id| SteerEvent::Answered(SteerAnswer::Accepted { turn_id })),
            Just(SteerEvent::Answered(SteerAnswer::NotAdmitted)),
            Just(SteerEvent::Answered(SteerAnswer::Uncertain)),
            "turn-[a-c]".prop_map(|turn_id| SteerEvent::History(Found::Turn { turn_id })),
            Just(SteerEvent::History(Found::Missing)),
            Just(SteerEvent::History(Found::Unreadable)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn every_decision_names_the_version_it_was_made_on(s in snapshot(), e in event()) {
            prop_assert_eq!(decide(&s, &e).expected_version, s.state_version);
        }

        #[test]
        fn a_steer_is_sent_only_as_the_head_into_a_running_turn_once(s in snapshot(), e in event()) {
            if let SteerStep::Admit(run) = decide(&s, &e).step {
                prop_assert_eq!(&e, &SteerEvent::Woken);
                prop_assert_eq!(s.state, TaskState::Queued);
                prop_assert_eq!(s.entry_status, OutboxStatus::Queued);
                prop_assert!(s.auto_drain && s.head);
                prop_assert_eq!(&s.permission, &Permission::Allowed);
                // Never into a turn that already refused it.
                prop_assert_ne!(Some(&run.turn_id), s.refused_turn.as_ref());
                prop_assert_eq!(Some(run), s.run.clone());
            }
        }

        #[test]
        fn a_send_that_began_is_never_sent_again(s in snapshot()) {
            let d = decide(&s, &SteerEvent::Woken);
            if s.entry_status == OutboxStatus::Sending && s.state == TaskState::Queued {
                let looked_up = matches!(d.step, SteerStep::LookUp { .. } | SteerStep::Hold(_));
                prop_assert!(looked_up, "{:?}", d.step);
            }
        }

        #[test]
        fn only_a_proven_refusal_gives_it_back_to_the_queue(s in snapshot(), e in event()) {
            if decide(&s, &e).step == SteerStep::Release {
                prop_assert_eq!(e, SteerEvent::Answered(SteerAnswer::NotAdmitted));
            }
        }

        #[test]
        fn a_lookup_searches_only_the_thread_the_ledger_names(s in snapshot(), e in event()) {
            if let SteerStep::LookUp { thread_id } = decide(&s, &e).step {
                prop_assert_eq!(Some(thread_id), s.sent_thread.clone());
            }
        }

        #[test]
        fn acceptance_comes_only_from_codex(s in snapshot(), e in event()) {
            if let SteerStep::Accept { turn_id } = decide(&s, &e).step {
                let from_codex = matches!(&e,
                    SteerEvent::Answered(SteerAnswer::Accepted { turn_id: t })
                    | SteerEvent::History(Found::Turn { turn_id: t }) if *t == turn_id);
                prop_assert!(from_codex);
            }
        }

        #[test]
        fn a_task_no_longer_queued_is_left_alone(s in snapshot(), e in event()) {
            if s.state != TaskState::Queued {
                prop_assert_eq!(decide(&s, &e).step, SteerStep::Nothing(Idle::NotQueued));
            }
        }

        #[test]
        fn permission_decides_before_anything_is_sent(s in snapshot()) {
            let step = decide(&s, &SteerEvent::Woken).step;
            match &s.permission {
                Permission::Denied(_) => prop_assert!(!matches!(step, SteerStep::Admit(_))),
                Permission::Unknown => prop_assert!(!matches!(step, SteerStep::Admit(_) | SteerStep::Reject)),
                Permission::Allowed => prop_assert_ne!(step, SteerStep::Reject),
            }
        }
    }

    #[test]
    fn no_run_leaves_it_to_the_queue_and_an_uncertain_answer_is_looked_up() {
        let snap = SteerSnapshot {
            state: TaskState::Queued,
            state_version: 1,
            entry_status: OutboxStatus::Queued,
            auto_drain: true,
            sent_thread: None,
            head: true,
            run: None,
            refused_turn: None,
            permission: Permission::Allowed,
        };
        assert_eq!(
            decide(&snap, &SteerEvent::Woken).step,
            SteerStep::Nothing(Idle::NoRun)
        );
        let sending = SteerSnapshot {
            entry_status: OutboxStatus::Sending,
            sent_thread: Some("thread-a".into()),
            ..snap
        };
        assert_eq!(
            decide(&sending, &SteerEvent::Answered(SteerAnswer::Uncertain)).step,
            SteerStep::LookUp {
                thread_id: "thread-a".into()
            }
        );
        assert_eq!(
            decide(&sending, &SteerEvent::History(Found::Missing)).step,
            SteerStep::Hold(HoldReason::Unconfirmed)
        );
    }
}
