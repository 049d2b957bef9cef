//! A child's result on its way to the parent, decided with no I/O. A
//! result is immutable once recorded; its delivery is bound to the exact
//! parent workflow (and the logical turn) that created the child, and moves
//! `pending → delivered → acknowledged`, or ends `terminalised` when that
//! workflow has ended. A workflow waiting for its owner has not: its
//! results wait with it and the turn that follows the owner's answer
//! carries them (the gate fences the pending continuation, which would
//! otherwise run past the owner, not the child's finished work).
//!
//! The promises (property-tested below):
//! - Delivery is at least once: a delivered result not yet acknowledged is
//!   delivered again after a restart.
//! - Acknowledging is exactly once: a second acknowledgement changes
//!   nothing; one for a result never delivered to that workflow, or by
//!   another workflow, is refused.
//! - A delivery whose workflow ended is terminalised, never moved to
//!   another workflow; an end is for good.

use crate::domain::states::text_enum;
use crate::domain::workflow::WorkflowState;

text_enum!(
    /// Where a result's delivery to its parent stands.
    DeliveryState, "delivery state" {
        /// Recorded; the parent's next turn carries it.
        Pending = "pending",
        /// A turn of the parent carried it; not acknowledged yet.
        Delivered = "delivered",
        /// The parent said it incorporated it (`ack_result`).
        Acknowledged = "acknowledged",
        /// Its workflow ended: it goes nowhere.
        Terminalised = "terminalised",
    }
);

impl DeliveryState {
    pub fn is_end(self) -> bool {
        matches!(
            self,
            DeliveryState::Acknowledged | DeliveryState::Terminalised
        )
    }
}

text_enum!(
    /// What an operator reads of a result at a glance: an incomplete one
    /// says so whatever became of its delivery (its times say that);
    /// otherwise how far its delivery got.
    ResultStatus, "result status" {
        /// Recorded; no turn of the parent has carried it yet.
        Recorded = "recorded",
        /// A turn of the parent carried it; not acknowledged yet.
        Delivered = "delivered",
        Acknowledged = "acknowledged",
        /// The child's work did not end in a result of its own (or ended
        /// unfinished): nothing in it is claimed done.
        Incomplete = "incomplete",
        /// Its parent ended before acknowledging it.
        Terminalised = "terminalised",
    }
);

impl ResultStatus {
    /// `ever_delivered`: a turn carried it at least once (a restart makes
    /// a delivered result pending again; it was still delivered).
    pub fn of(incomplete: bool, delivery: DeliveryState, ever_delivered: bool) -> ResultStatus {
        match (incomplete, delivery) {
            (true, _) => ResultStatus::Incomplete,
            (false, DeliveryState::Acknowledged) => ResultStatus::Acknowledged,
            (false, DeliveryState::Terminalised) => ResultStatus::Terminalised,
            (false, DeliveryState::Delivered) => ResultStatus::Delivered,
            (false, DeliveryState::Pending) if ever_delivered => ResultStatus::Delivered,
            (false, DeliveryState::Pending) => ResultStatus::Recorded,
        }
    }
}

/// What a delivery's decision is made on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliverySnapshot {
    pub state: DeliveryState,
    pub version: i64,
    /// The state of the workflow the delivery is bound to.
    pub parent: WorkflowState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryEvent {
    /// A turn of the bound workflow was admitted carrying the result.
    Carried,
    /// The process restarted: what was carried but not acknowledged may
    /// not have been read.
    Restarted,
    /// `ack_result` from a workflow: `bound`, whether it is the one the
    /// delivery is bound to.
    Ack { bound: bool },
    /// The bound workflow ended or the reconciliation found it not open.
    Reconcile,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStep {
    /// Move to this state.
    To(DeliveryState),
    /// Already acknowledged: the same answer, nothing written.
    AlreadyAcknowledged,
    /// The acknowledgement is refused, for this reason.
    RefuseAck(AckRefusal),
    Nothing,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckRefusal {
    /// Another workflow's result.
    NotYours,
    /// Never carried to the workflow: it cannot have been incorporated.
    NotDelivered,
    /// Its workflow ended before it was acknowledged.
    Terminalised,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryDecision {
    pub expected_version: i64,
    pub step: DeliveryStep,
}

pub fn decide(snap: &DeliverySnapshot, event: DeliveryEvent) -> DeliveryDecision {
    DeliveryDecision {
        expected_version: snap.version,
        step: step(snap, event),
    }
}

fn step(snap: &DeliverySnapshot, event: DeliveryEvent) -> DeliveryStep {
    use DeliveryState as D;
    use DeliveryStep as S;
    let open = !snap.parent.is_end();
    match (snap.state, event) {
        (_, DeliveryEvent::Ack { bound: false }) => S::RefuseAck(AckRefusal::NotYours),
        (D::Acknowledged, DeliveryEvent::Ack { .. }) => S::AlreadyAcknowledged,
        (D::Terminalised, DeliveryEvent::Ack { .. }) => S::RefuseAck(AckRefusal::Terminalised),
        (D::Pending, DeliveryEvent::Ack { .. }) => S::RefuseAck(AckRefusal::NotDelivered),
        (D::Delivered, DeliveryEvent::Ack { .. }) => S::To(D::Acknowledged),
        (state, _) if state.is_end() => S::Nothing,
        // Ended: it goes nowhere, and is never bound to another workflow.
        (_, DeliveryEvent::Reconcile | DeliveryEvent::Carried | DeliveryEvent::Restarted)
            if !open =>
        {
            S::To(D::Terminalised)
        }
        (D::Pending, DeliveryEvent::Carried) => S::To(D::Delivered),
        (D::Delivered, DeliveryEvent::Restarted) => S::To(D::Pending),
        _ => S::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn snapshot() -> impl Strategy<Value = DeliverySnapshot> {
        (
            proptest::sample::select(DeliveryState::ALL.to_vec()),
            0i64..50,
            proptest::sample::select(WorkflowState::ALL.to_vec()),
        )
            .prop_map(|(state, version, parent)| DeliverySnapshot {
                state,
                version,
                parent,
            })
    }

    fn event() -> impl Strategy<Value = DeliveryEvent> {
        prop_oneof![
            Just(DeliveryEvent::Carried),
            Just(DeliveryEvent::Restarted),
            any::<bool>().prop_map(|bound| DeliveryEvent::Ack { bound }),
            Just(DeliveryEvent::Reconcile),
        ]
    }

    #[test]
    fn a_results_status_says_incomplete_first_then_how_far_it_got() {
        use DeliveryState as D;
        use ResultStatus as R;
        for d in DeliveryState::ALL {
            for ever in [false, true] {
                assert_eq!(ResultStatus::of(true, *d, ever), R::Incomplete);
            }
        }
        assert_eq!(ResultStatus::of(false, D::Pending, false), R::Recorded);
        assert_eq!(ResultStatus::of(false, D::Pending, true), R::Delivered);
        assert_eq!(ResultStatus::of(false, D::Delivered, true), R::Delivered);
        assert_eq!(
            ResultStatus::of(false, D::Acknowledged, true),
            R::Acknowledged
        );
        assert_eq!(
            ResultStatus::of(false, D::Terminalised, false),
            R::Terminalised
        );
    }

    fn after(s: &DeliverySnapshot, step: DeliveryStep) -> DeliveryState {
        match step {
            DeliveryStep::To(to) => to,
            _ => s.state,
        }
    }

    proptest! {
        #[test]
        fn every_decision_names_the_version_it_was_made_on(s in snapshot(), e in event()) {
            prop_assert_eq!(decide(&s, e).expected_version, s.version);
        }

        #[test]
        fn an_end_is_for_good(s in snapshot(), e in event()) {
            if s.state.is_end() {
                prop_assert_eq!(after(&s, decide(&s, e).step), s.state);
            }
        }

        #[test]
        fn only_a_result_carried_to_its_own_workflow_is_acknowledged(s in snapshot(), e in event()) {
            let step = decide(&s, e).step;
            if after(&s, step) == DeliveryState::Acknowledged && s.state != DeliveryState::Acknowledged {
                prop_assert_eq!(s.state, DeliveryState::Delivered);
                prop_assert_eq!(e, DeliveryEvent::Ack { bound: true });
            }
            if s.state == DeliveryState::Acknowledged && e == (DeliveryEvent::Ack { bound: true }) {
                prop_assert_eq!(step, DeliveryStep::AlreadyAcknowledged);
            }
            if e == (DeliveryEvent::Ack { bound: false }) {
                prop_assert_eq!(step, DeliveryStep::RefuseAck(AckRefusal::NotYours));
            }
        }

        #[test]
        fn a_delivery_for_a_workflow_that_ended_goes_nowhere(s in snapshot(), e in event()) {
            let open = !s.parent.is_end();
            let to = after(&s, decide(&s, e).step);
            if !open && !s.state.is_end() && !matches!(e, DeliveryEvent::Ack { .. }) {
                prop_assert_eq!(to, DeliveryState::Terminalised);
            }
            if to == DeliveryState::Terminalised && s.state != to {
                prop_assert!(!open);
            }
        }

        /// Carried and restarted at random, a result is carried again until
        /// it is acknowledged, and acknowledged once — whether its workflow
        /// works, waits for a child or waits for its owner.
        #[test]
        fn delivery_is_at_least_once_and_acknowledgement_exactly_once(
            events in proptest::collection::vec(event(), 1..40),
            parent in proptest::sample::select(vec![
                WorkflowState::Open, WorkflowState::WaitingChild, WorkflowState::WaitingOwner,
            ]),
        ) {
            let mut s = DeliverySnapshot { state: DeliveryState::Pending, version: 0, parent };
            let mut acks = 0;
            for e in events {
                let d = decide(&s, e);
                if let DeliveryStep::To(to) = d.step {
                    if to == DeliveryState::Acknowledged {
                        acks += 1;
                    }
                    s.state = to;
                    s.version += 1;
                }
                if e == DeliveryEvent::Restarted {
                    prop_assert!(s.state != DeliveryState::Delivered, "a restart redelivers");
                }
            }
            prop_assert!(acks <= 1);
            prop_assert!(s.state != DeliveryState::Terminalised, "its workflow stayed open");
        }
    }
}
