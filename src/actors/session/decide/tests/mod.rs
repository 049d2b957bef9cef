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

mod progress;
mod properties;
