//! What a turn's progress may do to its task. A remote worker's reports
//! (its answer to turn/start, the approvals its Codex asks for, the
//! decisions it hands back, an idle thread that turns out still busy) reach
//! the task only as these events, decided here on the server: they move a
//! task to `running` or `awaiting_approval` and nowhere else, and never
//! overwrite `cancel_requested` (an operator's or a limit's stop) or
//! `needs_reconciliation` (an operator's to settle).

use super::*;

/// Every event a running turn's progress becomes, its end aside.
fn progress() -> impl Strategy<Value = Event> {
    prop_oneof![
        Just(Event::Started(Start::Admitted)),
        Just(Event::ApprovalRequested),
        any::<bool>().prop_map(|accept| Event::ApprovalDecided { accept }),
        Just(Event::IdleSettled),
        proptest::sample::select(vec![
            Finding::Missing,
            Finding::StillRunning,
            Finding::Unreadable,
            Finding::NoThread,
            Finding::Interrupted,
        ])
        .prop_map(Event::IdleChecked),
    ]
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    (
        proptest::sample::select(TaskState::ALL.to_vec()),
        proptest::sample::select(vec![
            Admission::NoEntry,
            Admission::NotSent,
            Admission::Intended,
        ]),
        proptest::sample::select(vec![
            ReplyRetry::Unused,
            ReplyRetry::Intended,
            ReplyRetry::Used,
        ]),
        proptest::sample::select(vec![
            None,
            Some(Stop::Abort),
            Some(Stop::Deadline),
            Some(Stop::Budget),
        ]),
        any::<u16>(),
    )
        .prop_map(
            |(state, admission, reply_retry, stopping, flags)| Snapshot {
                state,
                admission,
                reply_retry,
                stopping,
                attempt_is_ours: flags & 1 != 0,
                workspace_named: flags & 2 != 0,
                turn_recorded: flags & 4 != 0,
                final_text: flags & 8 != 0,
                superseded: flags & 16 != 0,
                owes_reply: flags & 32 != 0,
                in_workflow: flags & 64 != 0,
                denied: flags & 128 != 0,
                turns_left: flags & 256 != 0,
                reply_path: if flags & 512 != 0 {
                    ReplyPath::BridgeViaRest
                } else {
                    ReplyPath::AgentViaMcp
                },
                fallback: None,
                ..leased()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn progress_moves_a_task_only_to_running_or_awaiting_approval(
        snap in snapshot(),
        event in progress(),
    ) {
        let d = next(&snap, &event);
        prop_assert!(
            matches!(d.to, None | Some(S::Running | S::AwaitingApproval)),
            "{:?} moved {:?} to {:?}", event, snap.state, d.to
        );
        if matches!(snap.state, S::CancelRequested | S::NeedsReconciliation) {
            prop_assert_eq!(
                d.to, None,
                "{:?} overwrote {:?}", event, snap.state
            );
        }
    }
}

/// The two states the rule protects, against every progress event, each
/// checked once whatever the random walk above happened to draw.
#[test]
fn progress_never_overwrites_a_stop_or_an_uncertainty() {
    let events = [
        Event::Started(Start::Admitted),
        Event::ApprovalRequested,
        Event::ApprovalDecided { accept: true },
        Event::ApprovalDecided { accept: false },
        Event::IdleSettled,
        Event::IdleChecked(Finding::StillRunning),
    ];
    for state in [S::CancelRequested, S::NeedsReconciliation] {
        for admission in [Admission::NotSent, Admission::Intended] {
            for reply_retry in [ReplyRetry::Unused, ReplyRetry::Intended] {
                let snap = Snapshot {
                    state,
                    admission,
                    reply_retry,
                    turn_recorded: true,
                    ..leased()
                };
                for event in &events {
                    let d = next(&snap, event);
                    assert_eq!(d.to, None, "{event:?} overwrote {state:?}: {d:?}");
                }
            }
        }
    }
}
