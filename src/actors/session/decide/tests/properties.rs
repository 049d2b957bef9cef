//! The promises every decision keeps, walked whole or under random lives.

use super::*;

// --- properties ---

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        Just(Event::Picked),
        proptest::sample::select(vec![
            Permission::Allowed,
            Permission::Denied,
            Permission::Unknown,
            Permission::OwnerGate
        ])
        .prop_map(Event::Permission),
        prop_oneof![
            Just(Start::Admitted),
            Just(Start::Uncertain),
            any::<bool>().prop_map(|retryable| Start::NotAdmitted { retryable }),
        ]
        .prop_map(Event::Started),
        Just(Event::ApprovalRequested),
        any::<bool>().prop_map(|accept| Event::ApprovalDecided { accept }),
        proptest::sample::select(vec![Stop::Abort, Stop::Deadline]).prop_map(Event::StopRequested),
        proptest::sample::select(vec![
            TurnEnd::Completed,
            TurnEnd::Failed,
            TurnEnd::Interrupted
        ])
        .prop_map(Event::TurnEnded),
        Just(Event::InterruptUnconfirmed),
        findings().prop_map(Event::History),
        Just(Event::IdleSettled),
        findings().prop_map(Event::IdleChecked),
        proptest::sample::select(vec![Verdict::Confirmed, Verdict::Missing, Verdict::Unknown])
            .prop_map(Event::Reply),
        proptest::sample::select(vec![
            FallbackOutcome::Confirmed,
            FallbackOutcome::NotFound,
            FallbackOutcome::Failed,
        ])
        .prop_map(Event::Fallback),
        any::<bool>().prop_map(|ledger_sent| Event::SendNow { ledger_sent }),
    ]
}

/// Every history finding.
const FINDINGS: [Finding; 7] = [
    Finding::Completed,
    Finding::Failed,
    Finding::Interrupted,
    Finding::Missing,
    Finding::StillRunning,
    Finding::Unreadable,
    Finding::NoThread,
];

fn findings() -> impl Strategy<Value = Finding> {
    proptest::sample::select(FINDINGS.to_vec())
}

/// Whether the event leaves the task's fate in doubt.
fn uncertain(event: &Event) -> bool {
    matches!(
        event,
        Event::InterruptUnconfirmed
            | Event::History(
                Finding::Missing | Finding::StillRunning | Finding::Unreadable | Finding::NoThread
            )
    )
}

/// One step of a simulated task's life: an event for the session, or
/// something that happens around it.
#[derive(Debug, Clone)]
enum Step {
    Event(Event),
    /// The scheduler claims a queued or waiting task for a new attempt.
    Claim,
    /// The process restarts: a new drive picks the task up.
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => event().prop_map(Step::Event),
        1 => Just(Step::Claim),
        1 => Just(Step::Restart),
    ]
}

/// The promises every single decision keeps, whatever the snapshot.
fn keeps_the_promises(snap: &Snapshot, event: Event) -> Result<(), TestCaseError> {
    let d = next(snap, &event);
    prop_assert_eq!(d.expected_version, snap.state_version);
    if snap.state.is_terminal() {
        prop_assert!(d.is_idle(), "a terminal task changed: {:?}", d);
    }
    if let Some(to) = d.to {
        prop_assert!(
            lifecycle::check(snap.state, to).is_ok(),
            "{:?} -> {:?}",
            snap.state,
            to
        );
    }
    if d.effects.contains(&E::StartTurn) {
        prop_assert_eq!(
            snap.admission,
            Admission::NotSent,
            "a turn/start after its intent"
        );
        prop_assert_eq!(snap.state, S::Leased);
        prop_assert!(snap.workspace_named, "a turn without a workspace");
        prop_assert_eq!(event, Event::Permission(Permission::Allowed));
    }
    // Only a task that owes no reply succeeds straight from its turn; one
    // that owes a reply succeeds only once its reply was verified.
    if d.to == Some(S::Succeeded) && snap.state == S::Running {
        prop_assert!(!snap.owes_reply, "a reply owed was never verified");
    }
    // (A continuation never reaches verification, a reply retry or the
    // fallback, so those snapshots say nothing about one.)
    if !snap.owes_reply
        && snap.state != S::VerifyingReply
        && snap.reply_retry == ReplyRetry::Unused
        && snap.fallback.is_none()
    {
        prop_assert!(
            !d.effects.contains(&E::VerifyReply) && d.to != Some(S::VerifyingReply),
            "a continuation waited for a reply it does not owe"
        );
    }
    if d.effects.contains(&E::StartReplyRetry) {
        prop_assert_eq!(snap.reply_retry, ReplyRetry::Unused);
        prop_assert!(d.effects.contains(&E::BeginReplyRetry));
    }
    if d.effects.contains(&E::PostRestFallback) {
        prop_assert!(matches!(snap.fallback, None | Some(Fallback::Posting)));
        // The bridge's own reply is the normal path: no retry turn first;
        // nor for a task that may take no other turn.
        prop_assert!(
            snap.reply_retry != ReplyRetry::Unused
                || snap.fallback.is_some()
                || snap.reply_path == ReplyPath::BridgeViaRest
                || !snap.turns_left,
            "the REST fallback comes after the reply-retry turn"
        );
    }
    if d.effects.contains(&E::StartReplyRetry) {
        prop_assert!(
            snap.turns_left,
            "a reply-retry turn past max_turns_per_task"
        );
    }
    if uncertain(&event) {
        if let Some(to) = d.to {
            prop_assert!(
                matches!(to, S::NeedsReconciliation | S::FailedReply),
                "{:?} after {:?}",
                to,
                event
            );
        }
        prop_assert!(!d.effects.iter().any(|e| matches!(
            e,
            E::StartTurn | E::StartReplyRetry | E::PostRestFallback | E::ReleaseIntent
        )));
    }
    if d.to == Some(S::Queued) {
        // Back to the queue only by an operator's send-now of something the
        // ledger proves never sent, or held (for an operator) after the last
        // attempt failed before admission, its intent released first.
        let send_now = event == Event::SendNow { ledger_sent: false };
        let held = d.effects.contains(&E::HoldEntry)
            && snap.state == S::Leased
            && snap.attempt >= snap.max_attempts
            && (snap.admission != Admission::Intended || d.effects.contains(&E::ReleaseIntent))
            && matches!(
                event,
                Event::Picked
                    | Event::Permission(Permission::Unknown)
                    | Event::Started(Start::NotAdmitted { retryable: true })
            );
        prop_assert!(send_now || held, "{:?} after {:?}", d, event);
    }
    if d.effects.contains(&E::HoldEntry) {
        prop_assert_eq!(d.to, Some(S::Queued));
    }
    if snap.reply_path == ReplyPath::BridgeViaRest {
        // The bridge's post is the normal path: no reply-retry turn, and
        // never the fallback's state.
        prop_assert!(!d.effects.contains(&E::StartReplyRetry));
        prop_assert!(!d.effects.contains(&E::BeginReplyRetry));
        prop_assert_ne!(d.to, Some(S::SucceededWithRestFallback));
    }
    if d.to == Some(S::RetryWait) && snap.admission == Admission::Intended {
        prop_assert!(
            d.effects.contains(&E::ReleaseIntent),
            "a retry of something that may have reached the agent"
        );
        prop_assert!(
            matches!(event, Event::Started(Start::NotAdmitted { .. })),
            "{:?}",
            event
        );
    }
    Ok(())
}

/// Every snapshot a session can be asked about, with every event: the
/// space is small enough to walk whole, so no case is left to chance.
#[test]
fn every_decision_keeps_the_promises() {
    let mut events = vec![
        Event::Picked,
        Event::ApprovalRequested,
        Event::InterruptUnconfirmed,
    ];
    for p in [
        Permission::Allowed,
        Permission::Denied,
        Permission::Unknown,
        Permission::OwnerGate,
        Permission::ResourceClosed,
        Permission::OverBudget,
        Permission::WorkflowNotOpen,
    ] {
        events.push(Event::Permission(p));
    }
    for st in [
        Start::Admitted,
        Start::Uncertain,
        Start::NotAdmitted { retryable: true },
        Start::NotAdmitted { retryable: false },
    ] {
        events.push(Event::Started(st));
    }
    for b in [true, false] {
        events.push(Event::ApprovalDecided { accept: b });
        events.push(Event::SendNow { ledger_sent: b });
    }
    for stop in [Stop::Abort, Stop::Deadline, Stop::Budget] {
        events.push(Event::StopRequested(stop));
    }
    for end in [TurnEnd::Completed, TurnEnd::Failed, TurnEnd::Interrupted] {
        events.push(Event::TurnEnded(end));
    }
    for f in FINDINGS {
        events.push(Event::History(f));
        events.push(Event::IdleChecked(f));
    }
    events.push(Event::IdleSettled);
    for v in [Verdict::Confirmed, Verdict::Missing, Verdict::Unknown] {
        events.push(Event::Reply(v));
    }
    for o in [
        FallbackOutcome::Confirmed,
        FallbackOutcome::NotFound,
        FallbackOutcome::Failed,
    ] {
        events.push(Event::Fallback(o));
    }
    let mut checked = 0;
    for state in TaskState::ALL {
        for admission in [Admission::NoEntry, Admission::NotSent, Admission::Intended] {
            // A refused turn is one the task admitted: `denied` only then;
            // turns left matter only to a reply being verified.
            let top = match (admission, state) {
                (Admission::Intended, TaskState::VerifyingReply) => 1023,
                (Admission::Intended, _) => 511,
                _ => 255,
            };
            for flags in 0u16..=top {
                for reply_retry in [ReplyRetry::Unused, ReplyRetry::Intended, ReplyRetry::Used] {
                    for fallback in [
                        None,
                        Some(Fallback::Posting),
                        Some(Fallback::Posted),
                        Some(Fallback::Failed),
                    ] {
                        for stopping in [
                            None,
                            Some(Stop::Abort),
                            Some(Stop::Deadline),
                            Some(Stop::Budget),
                        ] {
                            for (attempt, max_attempts) in [(1, 2), (2, 2)] {
                                let snap = Snapshot {
                                    state,
                                    state_version: 7,
                                    attempt,
                                    max_attempts,
                                    admission,
                                    attempt_is_ours: flags & 1 != 0,
                                    workspace_named: flags & 2 != 0,
                                    turn_recorded: flags & 4 != 0,
                                    reply_retry,
                                    fallback,
                                    final_text: flags & 8 != 0,
                                    stopping,
                                    superseded: flags & 32 != 0,
                                    reply_path: if flags & 16 != 0 {
                                        ReplyPath::BridgeViaRest
                                    } else {
                                        ReplyPath::AgentViaMcp
                                    },
                                    owes_reply: flags & 64 == 0,
                                    in_workflow: flags & 128 != 0,
                                    denied: flags & 256 != 0,
                                    turns_left: flags & 512 == 0,
                                };
                                for event in &events {
                                    if let Err(e) = keeps_the_promises(&snap, *event) {
                                        panic!("{e}\n{snap:?}\n{event:?}");
                                    }
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 1_000_000, "{checked}");
}

proptest! {
    // Failing cases are kept beside the integration tests' and replayed first.
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct(
                "tests/proptest-regressions/session-decide.txt"
            )
        )),
        ..ProptestConfig::default()
    })]

    /// A task's whole life under random events, claims and restarts.
    #[test]
    fn a_task_is_never_sent_twice_and_never_leaves_an_end(steps in proptest::collection::vec(step(), 1..60)) {
        let mut s = leased();
        let (mut sends, mut proofs, mut retries, mut fallbacks) = (0, 0, 0, 0);
        for step in steps {
            match step {
                Step::Claim => {
                    if matches!(s.state, S::Queued | S::RetryWait) {
                        s.state = S::Leased;
                        s.state_version += 1;
                        s.attempt += 1;
                        s.attempt_is_ours = true;
                        s.stopping = None;
                    }
                }
                Step::Restart => {
                    s.attempt_is_ours = false;
                    s.stopping = None;
                    let before = s.state;
                    feed(&mut s, Event::Picked);
                    prop_assert!(!before.is_terminal() || s.state == before);
                }
                Step::Event(event) => {
                    if let Event::Fallback(_) = event {
                        if s.fallback != Some(Fallback::Posting) {
                            continue; // only the fallback's own post reports one
                        }
                        s.fallback = Some(Fallback::Posted);
                    }
                    let before = s.clone();
                    for d in feed(&mut s, event) {
                        prop_assert!(!before.state.is_terminal() || d.is_idle());
                        for e in &d.effects {
                            match e {
                                E::StartTurn => sends += 1,
                                E::ReleaseIntent if before.admission == Admission::Intended => proofs += 1,
                                E::RequeueEntry => proofs += 1,
                                E::StartReplyRetry => retries += 1,
                                E::PostRestFallback if before.fallback.is_none() => fallbacks += 1,
                                _ => {}
                            }
                        }
                    }
                }
            }
            prop_assert!(sends <= 1 + proofs, "sent {} times with {} proofs of non-delivery", sends, proofs);
            prop_assert!(retries <= 1, "{} reply-retry turns", retries);
            prop_assert!(fallbacks <= 1, "{} REST fallbacks", fallbacks);
        }
    }
}

proptest! {
    /// A thread that settled idle never ends its turn by itself: only the
    /// history's word that the turn completed or failed does; anything else
    /// reads the turn on.
    #[test]
    fn an_idle_thread_ends_a_turn_only_on_the_historys_word(
        state in proptest::sample::select(TaskState::ALL.to_vec()),
        owes_reply in any::<bool>(),
        in_workflow in any::<bool>(),
        f in findings()) {
        let s = Snapshot { state, owes_reply, in_workflow, turn_recorded: true, ..leased() };
        let settled = next(&s, &Event::IdleSettled);
        prop_assert_eq!(settled.to, None);
        let checked = next(&s, &Event::IdleChecked(f));
        if matches!(s.state, S::Running | S::CancelRequested) {
            if matches!(f, Finding::Completed | Finding::Failed) {
                prop_assert_eq!(&checked, &next(&s, &Event::History(f)));
            } else {
                prop_assert_eq!(checked.to, None);
                prop_assert_eq!(checked.effects.as_slice(), &[E::ReadTurn][..]);
            }
        }
    }
}
