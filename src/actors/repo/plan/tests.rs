use super::{affinity, decide, Affinity, Plan, Snapshot};
use crate::actors::health::RepoActorStatus;
use crate::domain::states::RepoStatus;
use crate::lifecycle::TaskState;
use crate::store::queue::HOLDING_STATES;
use proptest::prelude::*;

/// A repository with a due task, nothing running, one place, all running.
fn due() -> Snapshot {
    Snapshot {
        held: false,
        draining: false,
        agent_ready: true,
        circuit_open: false,
        paused: false,
        repo: Some(RepoStatus::Active),
        running: 0,
        places: 1,
        awaiting: None,
        next: true,
        next_storming: false,
        day_spent: false,
        retire: false,
        yield_to_previous: false,
    }
}

#[test]
fn a_session_goes_on_where_its_thread_lives_else_where_the_repository_was_held() {
    assert_eq!(affinity(Some("home-a"), Some("home-a")), Affinity::Here);
    assert_eq!(
        affinity(Some("home-a"), Some("home-b")),
        Affinity::Home("home-a".into())
    );
    // This process cannot say its home: the thread's is another's.
    assert_eq!(
        affinity(Some("home-a"), None),
        Affinity::Home("home-a".into())
    );
    assert_eq!(affinity(None, Some("home-b")), Affinity::PreviousHolder);
}

#[test]
fn a_new_task_waits_for_the_serving_process_that_held_its_repository_last() {
    let elsewhere = Snapshot {
        yield_to_previous: true,
        ..due()
    };
    assert_eq!(
        decide(&elsewhere),
        Plan::Keep(RepoActorStatus::BusyElsewhere)
    );
    // Tasks this process runs already are driven on, and another place may
    // be claimed: the repository is this process's now.
    assert_eq!(
        decide(&Snapshot {
            running: 1,
            places: 2,
            ..elsewhere
        }),
        Plan::Run { claim: true }
    );
}

#[test]
fn a_repository_past_its_turns_for_the_day_starts_nothing_and_says_why() {
    let spent = Snapshot {
        day_spent: true,
        ..due()
    };
    assert_eq!(decide(&spent), Plan::Release(RepoActorStatus::DayLimit));
    // A task already under way is driven on: the limit gates new turns,
    // never one under way.
    let running = Snapshot {
        running: 1,
        places: 2,
        ..spent
    };
    assert_eq!(decide(&running), Plan::Run { claim: false });
}

#[test]
fn a_due_task_is_claimed_only_while_the_agent_can_run_it() {
    assert_eq!(decide(&due()), Plan::Run { claim: true });
    let waiting = Snapshot {
        agent_ready: false,
        ..due()
    };
    assert_eq!(
        decide(&waiting),
        Plan::Release(RepoActorStatus::AgentUnavailable)
    );
}

#[test]
fn turns_of_one_repository_run_at_once_up_to_its_places() {
    let one_running = Snapshot {
        running: 1,
        ..due()
    };
    // One place (the default): one turn at a time.
    assert_eq!(decide(&one_running), Plan::Run { claim: false });
    // Three places: a second and a third start beside it, not a fourth.
    let three = Snapshot {
        places: 3,
        ..one_running
    };
    assert_eq!(decide(&three), Plan::Run { claim: true });
    let full = Snapshot {
        running: 3,
        ..three
    };
    assert_eq!(decide(&full), Plan::Run { claim: false });
}

#[test]
fn a_blocked_or_uncertain_session_holds_only_itself() {
    for state in [TaskState::BlockedWorkspace, TaskState::NeedsReconciliation] {
        // Another session's task starts beside it.
        let other_due = Snapshot {
            awaiting: Some(state),
            ..due()
        };
        assert_eq!(decide(&other_due), Plan::Run { claim: true });
        // Nothing else due: the status says who waits for an operator.
        let alone = Snapshot {
            next: false,
            ..other_due
        };
        let status = match state {
            TaskState::BlockedWorkspace => RepoActorStatus::Blocked,
            _ => RepoActorStatus::Uncertain,
        };
        assert_eq!(decide(&alone), Plan::Release(status));
    }
}

#[test]
fn running_tasks_keep_their_lease_but_are_not_driven_while_the_agent_cannot_run() {
    let running = Snapshot {
        running: 1,
        next: false,
        ..due()
    };
    assert_eq!(decide(&running), Plan::Run { claim: false });
    assert_eq!(
        decide(&Snapshot {
            agent_ready: false,
            ..running
        }),
        Plan::Keep(RepoActorStatus::AgentUnavailable)
    );
}

#[test]
fn worktrees_are_retired_only_by_an_idle_repository() {
    let idle = Snapshot {
        next: false,
        retire: true,
        ..due()
    };
    assert_eq!(decide(&idle), Plan::Retire);
    assert_eq!(
        decide(&Snapshot { next: true, ..idle }),
        Plan::Run { claim: true }
    );
    assert_eq!(
        decide(&Snapshot { running: 1, ..idle }),
        Plan::Run { claim: false }
    );
}

#[test]
fn an_open_circuit_keeps_queued_tasks_waiting_and_drives_what_runs() {
    let open = Snapshot {
        circuit_open: true,
        ..due()
    };
    assert_eq!(decide(&open), Plan::Release(RepoActorStatus::CircuitOpen));
    assert_eq!(
        decide(&Snapshot {
            running: 1,
            places: 2,
            ..open
        }),
        Plan::Run { claim: false }
    );
}

#[test]
fn a_draining_server_starts_nothing_new_and_drives_what_runs_to_its_end() {
    let draining = Snapshot {
        draining: true,
        ..due()
    };
    assert_eq!(decide(&draining), Plan::Release(RepoActorStatus::Draining));
    assert_eq!(
        decide(&Snapshot {
            running: 1,
            places: 2,
            ..draining
        }),
        Plan::Run { claim: false }
    );
    assert_eq!(
        decide(&Snapshot {
            next: false,
            retire: true,
            ..draining
        }),
        Plan::Release(RepoActorStatus::Draining)
    );
}

#[test]
fn the_operators_and_the_configurations_word_comes_before_the_agents() {
    let no_agent = Snapshot {
        agent_ready: false,
        ..due()
    };
    assert_eq!(
        decide(&Snapshot {
            held: true,
            ..no_agent
        }),
        Plan::Release(RepoActorStatus::Held)
    );
    assert_eq!(
        decide(&Snapshot {
            paused: true,
            ..no_agent
        }),
        Plan::Release(RepoActorStatus::Paused)
    );
    assert_eq!(
        decide(&Snapshot {
            repo: Some(RepoStatus::Disabled),
            ..no_agent
        }),
        Plan::Release(RepoActorStatus::Disabled)
    );
    assert_eq!(
        decide(&Snapshot {
            next: false,
            ..no_agent
        }),
        Plan::Release(RepoActorStatus::Idle)
    );
}

fn snapshots() -> impl Strategy<Value = Snapshot> {
    let repo = prop_oneof![
        Just(None),
        Just(Some(RepoStatus::Active)),
        Just(Some(RepoStatus::Disabled)),
        Just(Some(RepoStatus::Blocked)),
    ];
    let awaiting = prop_oneof![
        Just(None),
        Just(Some(TaskState::BlockedWorkspace)),
        Just(Some(TaskState::NeedsReconciliation)),
    ];
    (any::<[bool; 10]>(), repo, 0..5_usize, 1..4_usize, awaiting).prop_map(
        |(
            [held, draining, agent_ready, circuit_open, paused, next, next_storming, day_spent, retire, yield_to_previous],
            repo,
            running,
            places,
            awaiting,
        )| {
            Snapshot {
                held,
                draining,
                agent_ready,
                circuit_open,
                paused,
                repo,
                running,
                places,
                awaiting,
                next,
                next_storming,
                day_spent,
                retire,
                yield_to_previous,
            }
        },
    )
}

proptest! {
    /// A task starts only while nothing forbids it and a place is free;
    /// running tasks are driven only while the agent can run them.
    #[test]
    fn no_task_starts_unless_everything_allows_it(s in snapshots()) {
        match decide(&s) {
            Plan::Run { claim } => {
                prop_assert!(s.agent_ready && !s.held);
                prop_assert!(s.running > 0 || claim);
                if claim {
                    prop_assert!(!s.paused && !s.draining && !s.circuit_open && s.next && !s.day_spent);
                    prop_assert!(!s.next_storming, "a storming session's task never starts");
                    prop_assert!(s.running < s.places);
                    prop_assert_eq!(s.repo, Some(RepoStatus::Active));
                    prop_assert!(!s.yield_to_previous || s.running > 0, "the process that held it last gets the first go");
                }
            }
            Plan::Retire => {
                // Worktrees go only while nothing runs in the repository
                // and nothing waits to start in it.
                prop_assert!(s.retire && !s.held && !s.paused && !s.draining && !s.next);
                prop_assert_eq!(s.running, 0);
                prop_assert_eq!(s.repo, Some(RepoStatus::Active));
            }
            Plan::PauseNext => {
                // Only where its task would otherwise have started.
                prop_assert!(s.next_storming && s.next && s.agent_ready && !s.held);
                prop_assert!(!s.paused && !s.draining && !s.circuit_open && !s.day_spent);
                prop_assert!(s.running < s.places);
            }
            Plan::Keep(_) | Plan::Release(_) => {}
        }
    }
}

/// The store finds the tasks that hold sessions by its own list of states;
/// the scheduler acts on what the lifecycle says holds one.
#[test]
fn the_stores_holding_states_are_the_lifecycles() {
    for state in TaskState::ALL {
        assert_eq!(
            state.holds_repository(),
            HOLDING_STATES.contains(&state),
            "{state}"
        );
    }
}
