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
        (any::<bool>(), any::<bool>()),
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
                (children_running, results_waiting),
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
                    children_running,
                    results_waiting,
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
        Just(E::HandoffAsked),
        Just(E::ResultArrived),
    ]
}

/// The state a step leaves the workflow in.
fn after(snap: &WorkflowSnapshot, step: WorkflowStep) -> WorkflowState {
    match step {
        WorkflowStep::Gate(_) => WorkflowState::WaitingOwner,
        WorkflowStep::AwaitChild => WorkflowState::WaitingChild,
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
                WorkflowStep::Nothing(Idle::AwaitingChildren) => {
                    prop_assert!(s.children_running && !s.results_waiting);
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
            prop_assert!(matches!(s.state, WorkflowState::WaitingOwner | WorkflowState::WaitingChild));
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
        progressed in any::<bool>(),
    ) {
        let event = event_of_end(state, code, progressed);
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
            prop_assert_eq!(progress, progressed);
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
        children_running: false,
        results_waiting: false,
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

proptest! {
    /// A child's result continues its open parent at once (a pending
    /// continuation is made due, never a second one), opens a handoff's
    /// waiting parent, and never moves one that waits for its owner or has
    /// ended.
    #[test]
    fn a_childs_result_continues_its_parent_at_once(s in snapshot()) {
        let step = decide(&s, WorkflowEvent::ResultArrived).step;
        match s.state {
            WorkflowState::Open if s.continuation_pending => prop_assert_eq!(step, WorkflowStep::Hasten),
            WorkflowState::Open => prop_assert_eq!(step, WorkflowStep::Continue {
                seq: s.continuations + 1,
                idle_finals: s.idle_finals,
                delay_steps: 0,
            }),
            WorkflowState::WaitingChild => prop_assert_eq!(after(&s, step), WorkflowState::Open),
            _ => prop_assert!(matches!(step, WorkflowStep::Nothing(_)), "{:?}", step),
        }
    }

    /// While children work and nothing of theirs waits, a final neither
    /// continues the workflow nor counts toward its idle gate; only an open
    /// workflow hands work off and waits.
    #[test]
    fn waiting_for_children_is_neither_a_continuation_nor_idleness(s in snapshot(), progress in any::<bool>()) {
        let step = decide(&s, WorkflowEvent::Final { progress }).step;
        if s.state == WorkflowState::Open
            && s.children_running
            && !s.results_waiting
            && !s.continuation_pending
            && s.turns < s.max_turns
        {
            prop_assert_eq!(step, WorkflowStep::Nothing(Idle::AwaitingChildren));
        }
        let handoff = decide(&s, WorkflowEvent::HandoffAsked).step;
        prop_assert_eq!(
            handoff == WorkflowStep::AwaitChild,
            s.state == WorkflowState::Open
        );
    }
}
