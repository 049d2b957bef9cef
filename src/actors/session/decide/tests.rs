use super::*;
use proptest::prelude::*;

fn leased() -> Snapshot {
    Snapshot {
        state: S::Leased,
        state_version: 3,
        attempt: 1,
        max_attempts: 2,
        admission: Admission::NotSent,
        attempt_is_ours: true,
        workspace_named: true,
        turn_recorded: false,
        reply_retry: ReplyRetry::Unused,
        fallback: None,
        final_text: true,
        stopping: None,
        superseded: false,
        reply_path: ReplyPath::AgentViaMcp,
        owes_reply: true,
        in_workflow: false,
        denied: false,
        turns_left: true,
    }
}

/// Applies a decision to a snapshot as the drive would: the transition, and
/// what each effect changes in what the store then says.
fn apply(snap: &mut Snapshot, d: &Decision) {
    if let Some(to) = d.to {
        snap.state = to;
        snap.state_version += 1;
    }
    for e in &d.effects {
        match e {
            E::StartTurn => snap.admission = Admission::Intended,
            E::ReleaseIntent | E::RequeueEntry if snap.admission == Admission::Intended => {
                snap.admission = Admission::NotSent
            }
            E::RecordAdmission(_) => snap.turn_recorded = true,
            E::RecordTurnEnd(_) if snap.reply_retry == ReplyRetry::Intended => {
                snap.reply_retry = ReplyRetry::Used
            }
            E::BeginReplyRetry => snap.reply_retry = ReplyRetry::Intended,
            E::ReleaseReplyRetry => snap.reply_retry = ReplyRetry::Used,
            E::PostRestFallback => snap.fallback = Some(Fallback::Posting),
            E::Interrupt(stop) => snap.stopping = Some(*stop),
            _ => {}
        }
    }
}

/// Feeds `event`, following `Again` as the drive does; the decisions made.
fn feed(snap: &mut Snapshot, event: Event) -> Vec<Decision> {
    let mut out = Vec::new();
    loop {
        let d = next(snap, &event);
        apply(snap, &d);
        let again = d.effects.contains(&E::Again);
        out.push(d);
        if !again || out.len() > 4 {
            return out;
        }
    }
}

#[test]
fn the_happy_path_checks_permission_starts_reads_and_verifies() {
    let mut s = leased();
    let d = next(&s, &Event::Picked);
    assert_eq!((d.to, &d.effects[..]), (None, &[E::CheckPermission][..]));
    let d = next(&s, &Event::Permission(Permission::Allowed));
    assert_eq!(d.effects, [E::StartTurn]);
    apply(&mut s, &d);
    let d = next(&s, &Event::Started(Start::Admitted));
    assert_eq!(d.to, Some(S::Running));
    assert_eq!(d.expected_version, 3);
    apply(&mut s, &d);
    let d = next(&s, &Event::TurnEnded(TurnEnd::Completed));
    assert_eq!(d.to, Some(S::VerifyingReply));
    assert_eq!(d.expected_version, 4);
    apply(&mut s, &d);
    let d = next(&s, &Event::Reply(Verdict::Confirmed));
    assert_eq!(d.to, Some(S::Succeeded));
    assert!(d.effects.contains(&E::EndAttempt));
}

#[test]
fn a_workspace_that_cannot_be_named_fails_the_task_and_starts_nothing() {
    let s = Snapshot {
        workspace_named: false,
        ..leased()
    };
    let d = next(&s, &Event::Picked);
    assert_eq!(d.to, Some(S::Failed));
    assert_eq!(d.code, Some(Code::WorkspaceUnavailable));
    assert!(!d.effects.contains(&E::CheckPermission));
    assert!(!d.effects.contains(&E::StartTurn));
}

#[test]
fn a_dead_process_lease_is_retried_once_then_held() {
    let s = Snapshot {
        attempt_is_ours: false,
        ..leased()
    };
    let d = next(&s, &Event::Picked);
    assert_eq!(d.to, Some(S::RetryWait));
    assert!(d.effects.contains(&E::Retry(RetryAfter::Now)));
    let s = Snapshot { attempt: 2, ..s };
    let d = next(&s, &Event::Picked);
    assert_eq!(d.to, Some(S::Queued));
    assert!(d.effects.contains(&E::HoldEntry));
}

#[test]
fn permission_denied_rejects_and_unknown_retries_before_anything_is_sent() {
    let d = next(&leased(), &Event::Permission(Permission::Denied));
    assert_eq!(
        (d.to, d.code),
        (Some(S::Rejected), Some(Code::PermissionDenied))
    );
    let d = next(&leased(), &Event::Permission(Permission::Unknown));
    assert_eq!(
        (d.to, d.code),
        (Some(S::RetryWait), Some(Code::PermissionUnknown))
    );
}

#[test]
fn an_uncertain_start_is_looked_up_and_a_missing_turn_is_held_for_an_operator() {
    let mut s = Snapshot {
        admission: Admission::Intended,
        ..leased()
    };
    let d = next(&s, &Event::Started(Start::Uncertain));
    assert_eq!((d.to, &d.effects[..]), (None, &[E::LookUpHistory][..]));
    let d = next(&s, &Event::History(Finding::Missing));
    assert_eq!(d.to, Some(S::NeedsReconciliation));
    // Found in history while leased: through running, then verification.
    let ds = feed(&mut s, Event::History(Finding::Completed));
    let states: Vec<_> = ds.iter().filter_map(|d| d.to).collect();
    assert_eq!(states, [S::Running, S::VerifyingReply]);
    assert_eq!(
        ds[1].expected_version, 4,
        "the second decision sees the first"
    );
}

#[test]
fn a_missing_reply_gets_one_retry_turn_then_one_rest_fallback() {
    let mut s = Snapshot {
        state: S::VerifyingReply,
        admission: Admission::Intended,
        turn_recorded: true,
        ..leased()
    };
    let d = next(&s, &Event::Reply(Verdict::Missing));
    assert_eq!(d.effects, [E::BeginReplyRetry, E::StartReplyRetry]);
    apply(&mut s, &d);
    let d = next(&s, &Event::Started(Start::Admitted));
    assert_eq!(
        d.effects,
        [E::RecordAdmission(TurnKind::ReplyRetry), E::ReadTurn]
    );
    apply(&mut s, &d);
    let d = next(&s, &Event::TurnEnded(TurnEnd::Completed));
    apply(&mut s, &d);
    assert_eq!(s.state, S::VerifyingReply);
    let d = next(&s, &Event::Reply(Verdict::Missing));
    assert_eq!(d.effects, [E::PostRestFallback]);
    apply(&mut s, &d);
    let d = next(&s, &Event::Fallback(FallbackOutcome::Confirmed));
    assert_eq!(d.to, Some(S::SucceededWithRestFallback));
}

#[test]
fn an_unknown_verdict_never_writes() {
    let s = Snapshot {
        state: S::VerifyingReply,
        ..leased()
    };
    let d = next(&s, &Event::Reply(Verdict::Unknown));
    assert_eq!(
        (d.to, d.code),
        (Some(S::FailedReply), Some(Code::ReplyUnverifiable))
    );
    assert!(!d.effects.iter().any(|e| matches!(
        e,
        E::PostRestFallback | E::StartReplyRetry | E::BeginReplyRetry
    )));
}

#[test]
fn an_abort_while_running_interrupts_and_a_confirmed_interrupt_aborts() {
    let mut s = Snapshot {
        state: S::Running,
        admission: Admission::Intended,
        turn_recorded: true,
        ..leased()
    };
    let d = next(&s, &Event::StopRequested(Stop::Abort));
    assert_eq!(d.to, Some(S::CancelRequested));
    assert_eq!(d.effects, [E::Interrupt(Stop::Abort), E::ReadTurn]);
    apply(&mut s, &d);
    let d = next(&s, &Event::TurnEnded(TurnEnd::Interrupted));
    assert_eq!(d.to, Some(S::Aborted));
}

/// The states the session drives are the ones the store's partial index
/// finds for it: a state in one list and not the other would be a task no
/// session ever picks up, or one it picks up and cannot decide about.
#[test]
fn the_driven_states_are_the_stores_session_index() {
    let condition = crate::store::sessions::SESSION_DRIVEN_STATES;
    for state in TaskState::ALL {
        let listed = condition.contains(&format!("'{}'", state.as_str()));
        assert_eq!(state.is_session_driven(), listed, "{state}");
    }
}

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

/// An untrusted thread's reply: looked for, posted once by the bridge, and
/// found again: the task has `succeeded`, with no reply-retry turn and no
/// fallback state on the way.
#[test]
fn a_continuations_turn_ends_the_task_and_a_comments_turn_is_verified() {
    let running = Snapshot {
        state: S::Running,
        admission: Admission::Intended,
        turn_recorded: true,
        ..leased()
    };
    let continuation = Snapshot {
        owes_reply: false,
        ..running.clone()
    };
    let d = next(&continuation, &Event::TurnEnded(TurnEnd::Completed));
    assert_eq!(d.to, Some(S::Succeeded));
    assert!(!d.effects.contains(&E::VerifyReply), "{d:?}");
    let d = next(&continuation, &Event::History(Finding::Completed));
    assert_eq!(d.to, Some(S::Succeeded));
    let d = next(&running, &Event::TurnEnded(TurnEnd::Completed));
    assert_eq!(d.to, Some(S::VerifyingReply));
}

#[test]
fn the_bridges_own_reply_ends_the_task_succeeded() {
    let mut s = Snapshot {
        state: S::VerifyingReply,
        admission: Admission::Intended,
        turn_recorded: true,
        reply_path: ReplyPath::BridgeViaRest,
        ..leased()
    };
    let d = next(&s, &Event::Reply(Verdict::Missing));
    assert_eq!(d.to, None);
    assert_eq!(d.effects, vec![E::PostRestFallback]);
    s.fallback = Some(Fallback::Posted);
    let d = next(&s, &Event::Fallback(FallbackOutcome::Confirmed));
    assert_eq!((d.to, d.code), (Some(S::Succeeded), None));
    assert_eq!(d.reason, "reply posted by the bridge");
    // Found on a later look (a restart after the post): succeeded too.
    let d = next(&s, &Event::Reply(Verdict::Confirmed));
    assert_eq!((d.to, d.code), (Some(S::Succeeded), None));
    let d = next(&s, &Event::Fallback(FallbackOutcome::Failed));
    assert_eq!(
        (d.to, d.code),
        (Some(S::FailedReply), Some(Code::BridgeReplyFailed))
    );
}

/// A run stopped for a newer message ends `aborted` with `superseded`,
/// whichever way its end is learnt; an operator's abort keeps its own codes.
#[test]
fn a_superseded_run_ends_aborted_superseded() {
    let s = Snapshot {
        state: S::CancelRequested,
        admission: Admission::Intended,
        turn_recorded: true,
        stopping: Some(Stop::Abort),
        superseded: true,
        ..leased()
    };
    for event in [
        Event::TurnEnded(TurnEnd::Interrupted),
        Event::TurnEnded(TurnEnd::Completed),
        Event::History(Finding::Interrupted),
        Event::History(Finding::Completed),
    ] {
        let d = next(&s, &event);
        assert_eq!(d.to, Some(S::Aborted), "{event:?}");
        assert_eq!(d.code, Some(Code::Superseded), "{event:?}");
    }
    let operator = Snapshot {
        superseded: false,
        ..s
    };
    let d = next(&operator, &Event::TurnEnded(TurnEnd::Interrupted));
    assert_eq!(d.code, Some(Code::TurnInterrupted));
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
