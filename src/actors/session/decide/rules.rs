//! The rules behind [`super::next`], one function per kind of event.

use super::*;
use Effect as E;
use TaskState as S;

/// An event that does not apply to the task's state: nothing changes. (A
/// late event of a turn the task has already moved past, say.)
pub(super) fn ignored(snap: &Snapshot) -> Decision {
    Decision::on(snap, "the event does not apply to the task's state")
}

/// A drive found the task: carry on from where the store says it is.
pub(super) fn picked(snap: &Snapshot) -> Decision {
    let on = |reason| Decision::on(snap, reason);
    if snap.admission == Admission::NoEntry {
        return on("the task has no outbox entry")
            .ends(failure_state(snap.state), Some(Code::OutboxMissing));
    }
    match snap.state {
        S::Leased if snap.admission == Admission::NotSent && !snap.attempt_is_ours => {
            // A process that died before sending anything had it: safe to run
            // again, once.
            let d = on("interrupted by a restart before turn/start");
            if snap.attempt < snap.max_attempts {
                d.ends(S::RetryWait, Some(Code::InterruptedByRestart))
                    .then(&[E::Retry(RetryAfter::Now)])
            } else {
                held(d, Code::InterruptedByRestart)
            }
        }
        S::Leased if snap.admission == Admission::NotSent => {
            if snap.workspace_named {
                on("the commenter's permission is checked before the turn")
                    .then(&[E::CheckPermission])
            } else {
                // Never fall back to some other directory: a turn runs with
                // full access to its working directory.
                on("the repository's workspace cannot be named")
                    .ends(S::Failed, Some(Code::WorkspaceUnavailable))
            }
        }
        S::CancelRequested if !snap.turn_recorded && snap.admission == Admission::NotSent => {
            on("cancelled before a turn started").ends(S::Cancelled, None)
        }
        S::VerifyingReply if snap.reply_retry == ReplyRetry::Intended => {
            // The reply-retry turn was intended: how it went is in the
            // thread's history, never guessed.
            on("the reply-retry turn is looked up in the thread's history")
                .then(&[E::LookUpHistory])
        }
        // The final text is durable: verify again, never run the model again.
        S::VerifyingReply => on("the reply is verified again").then(&[E::VerifyReply]),
        _ => on("the turn is looked up in the thread's history").then(&[E::LookUpHistory]),
    }
}

/// Where a task that cannot go on ends, from the states a session drives.
pub(super) fn failure_state(state: TaskState) -> TaskState {
    match state {
        S::VerifyingReply => S::FailedReply,
        S::AwaitingApproval => S::NeedsReconciliation,
        _ => S::Failed,
    }
}

pub(super) fn permission(snap: &Snapshot, p: Permission) -> Decision {
    if snap.state != S::Leased || snap.admission != Admission::NotSent {
        return ignored(snap);
    }
    match p {
        Permission::Allowed if snap.workspace_named => {
            Decision::on(snap, "the commenter may trigger work").then(&[E::StartTurn])
        }
        Permission::Allowed => Decision::on(snap, "the repository's workspace cannot be named")
            .ends(S::Failed, Some(Code::WorkspaceUnavailable)),
        Permission::Denied => Decision::on(snap, "the commenter may not trigger work")
            .ends(S::Rejected, Some(Code::PermissionDenied)),
        Permission::OwnerGate => Decision::on(
            snap,
            "the workflow waits for its owner, who did not write this",
        )
        .ends(S::Rejected, Some(Code::OwnerGateRequired)),
        Permission::ResourceClosed => Decision::on(
            snap,
            "the continuation's Issue or pull request is closed; nothing was sent",
        )
        .ends(S::Cancelled, Some(Code::ResourceClosed)),
        Permission::WorkflowNotOpen => Decision::on(
            snap,
            "the continuation's workflow ended or waits for its owner; nothing was sent",
        )
        .ends(S::Cancelled, Some(Code::Superseded)),
        Permission::OverBudget => Decision::on(snap, "the task took all the turns it may take")
            .ends(S::Failed, Some(Code::BudgetExceeded)),
        Permission::Unknown => not_admitted(
            snap,
            "the commenter's permission could not be checked",
            Code::PermissionUnknown,
            true,
        ),
    }
}

/// Nothing reached the agent: retry later, or fail once attempts are used up.
pub(super) fn not_admitted(
    snap: &Snapshot,
    reason: &'static str,
    code: Code,
    retryable: bool,
) -> Decision {
    let d = Decision::on(snap, reason).then(&[E::ReleaseIntent]);
    if retryable && snap.attempt < snap.max_attempts {
        d.ends(S::RetryWait, Some(code))
            .then(&[E::Retry(RetryAfter::Backoff)])
    } else if retryable {
        held(d, code)
    } else {
        d.ends(S::Failed, Some(code))
    }
}

/// A failure before admission that its retry did not get past: nothing
/// reached the agent, so nothing is lost by waiting. The task goes back to
/// `queued` with its entry held (auto-drain off, the code as its reason)
/// until an operator drops it or sends it now; the repository goes on.
fn held(d: Decision, code: Code) -> Decision {
    d.ends(S::Queued, Some(code)).then(&[E::HoldEntry])
}

pub(super) fn started(snap: &Snapshot, start: Start) -> Decision {
    let kind = match (snap.state, snap.reply_retry) {
        (S::Leased, _) => TurnKind::Normal,
        (S::VerifyingReply, ReplyRetry::Intended) => TurnKind::ReplyRetry,
        _ => return ignored(snap),
    };
    if kind == TurnKind::Normal && snap.admission != Admission::Intended {
        // turn/start is only ever answered after its intent was recorded,
        // except for a thread that could not be opened (nothing was sent).
        return match start {
            Start::NotAdmitted { retryable } => thread_failed(snap, retryable),
            _ => ignored(snap),
        };
    }
    match (start, kind) {
        (Start::Admitted, _) => Decision::on(snap, "turn accepted")
            .to(S::Running)
            .then(&[E::RecordAdmission(kind), E::ReadTurn]),
        (Start::Uncertain, _) => Decision::on(
            snap,
            "turn/start answer uncertain; the thread's history decides",
        )
        .then(&[E::LookUpHistory]),
        (Start::NotAdmitted { retryable }, TurnKind::Normal) => thread_failed(snap, retryable),
        (Start::NotAdmitted { .. }, TurnKind::ReplyRetry) => {
            // Not admitted, and the retry is used: verification proves the
            // reply still missing before the REST fallback posts anything.
            Decision::on(snap, "the reply-retry turn could not start")
                .then(&[E::ReleaseReplyRetry, E::VerifyReply])
        }
    }
}

pub(super) fn thread_failed(snap: &Snapshot, retryable: bool) -> Decision {
    if retryable {
        not_admitted(
            snap,
            "agent runtime unavailable before admission",
            Code::RuntimeUnavailable,
            true,
        )
    } else {
        not_admitted(
            snap,
            "the agent runtime refused the turn",
            Code::RuntimeRefused,
            false,
        )
    }
}

/// Where a stopped task ends: `failed` (`budget_exceeded`) when a limit
/// stopped it, else `aborted` for why it was stopped.
fn stopped(snap: &Snapshot, code: Code) -> (TaskState, Code) {
    if snap.stopping == Some(Stop::Budget) {
        (S::Failed, Code::BudgetExceeded)
    } else {
        (S::Aborted, aborted(snap, code))
    }
}

/// Why an aborted task ended: a newer message stopped it, or `code`.
fn aborted(snap: &Snapshot, code: Code) -> Code {
    if snap.superseded {
        Code::Superseded
    } else {
        code
    }
}

pub(super) fn stop_requested(snap: &Snapshot, stop: Stop) -> Decision {
    let interrupt = [E::Interrupt(stop), E::ReadTurn];
    match (snap.state, stop) {
        _ if snap.stopping.is_some() => {
            Decision::on(snap, "an interrupt is already requested").then(&[E::ReadTurn])
        }
        (S::Running | S::AwaitingApproval, Stop::Abort) => Decision::on(snap, "abort requested")
            .to(S::CancelRequested)
            .then(&interrupt),
        (S::Running | S::AwaitingApproval, Stop::Budget) => {
            Decision::on(snap, "the task reached a limit on what it may spend")
                .to(S::CancelRequested)
                .code(Code::BudgetExceeded)
                .then(&interrupt)
        }
        (S::CancelRequested, _) => Decision::on(snap, "abort requested").then(&interrupt),
        (S::Running, Stop::Deadline) => {
            Decision::on(snap, "the turn deadline passed").then(&interrupt)
        }
        _ => ignored(snap),
    }
}

pub(super) fn turn_ended(snap: &Snapshot, end: TurnEnd) -> Decision {
    let on = |reason| Decision::on(snap, reason).then(&[E::RecordTurnEnd(end)]);
    let retry_turn = snap.reply_retry != ReplyRetry::Unused;
    match (snap.state, end) {
        (S::AwaitingApproval, _) => Decision::on(snap, "the turn ended while awaiting approval")
            .to(S::Running)
            .then(&[E::Again]),
        (S::Running, TurnEnd::Completed) if !snap.owes_reply => {
            on("the continuation's turn completed; it owes no reply").ends(S::Succeeded, None)
        }
        (S::Running, TurnEnd::Completed) => on("turn completed")
            .to(S::VerifyingReply)
            .then(&[E::VerifyReply]),
        // The reply-retry turn failing leaves the reply missing: verification
        // decides, and the REST fallback follows.
        (S::Running, TurnEnd::Failed) if retry_turn => on("the reply-retry turn failed")
            .to(S::VerifyingReply)
            .then(&[E::VerifyReply]),
        (S::Running, TurnEnd::Failed) if snap.denied => {
            on("the model's provider turned the turn away for capacity")
                .ends(S::Failed, Some(Code::CapacityDenied))
        }
        (S::CancelRequested, TurnEnd::Failed) if snap.stopping == Some(Stop::Budget) => {
            on("the turn failed after reaching a limit").ends(S::Failed, Some(Code::BudgetExceeded))
        }
        (S::Running | S::CancelRequested, TurnEnd::Failed) => {
            on("the turn failed").ends(S::Failed, Some(Code::TurnFailed))
        }
        (S::CancelRequested, TurnEnd::Completed) => {
            let (to, code) = stopped(snap, Code::TurnCompletedBeforeAbort);
            on("the turn completed before the interrupt took effect").ends(to, Some(code))
        }
        (S::CancelRequested, TurnEnd::Interrupted) => {
            let (to, code) = stopped(snap, Code::TurnInterrupted);
            on("the turn was interrupted").ends(to, Some(code))
        }
        (S::Running, TurnEnd::Interrupted) => match snap.stopping {
            Some(Stop::Deadline) => {
                on("the turn was interrupted").ends(S::TimedOut, Some(Code::TurnInterrupted))
            }
            _ => on("the turn was interrupted").ends(S::Failed, Some(Code::TurnInterrupted)),
        },
        _ => ignored(snap),
    }
}

pub(super) fn history(snap: &Snapshot, finding: Finding) -> Decision {
    let on = |reason| Decision::on(snap, reason);
    if snap.state == S::VerifyingReply {
        // Only the reply-retry turn is looked up from here; the task's own
        // final text is durable, so doubt about the retry is doubt about the
        // reply alone.
        return match finding {
            Finding::Completed => {
                on("the reply-retry turn ended (confirmed from history)").then(&[
                    E::MarkSent,
                    E::RecordTurnEnd(TurnEnd::Completed),
                    E::VerifyReply,
                ])
            }
            Finding::Failed => on("the reply-retry turn ended (confirmed from history)").then(&[
                E::MarkSent,
                E::RecordTurnEnd(TurnEnd::Failed),
                E::VerifyReply,
            ]),
            _ => on("the reply-retry turn cannot be confirmed from history")
                .ends(S::FailedReply, Some(Code::ReplyRetryUncertain)),
        };
    }
    if !matches!(
        snap.state,
        S::Leased | S::Running | S::AwaitingApproval | S::CancelRequested
    ) {
        return ignored(snap);
    }
    let admitted = |reason| {
        // A turn in history carries our operation: it was delivered.
        let d = on(reason);
        match snap.state {
            S::Leased => d.to(S::Running).then(&[
                E::RecordAdmission(TurnKind::Normal),
                E::MarkSent,
                E::Again,
            ]),
            S::AwaitingApproval => d.to(S::Running).then(&[E::MarkSent, E::Again]),
            _ => d,
        }
    };
    let retry_turn = snap.reply_retry != ReplyRetry::Unused;
    match finding {
        // The reply-retry turn ended, however: verification decides.
        Finding::Completed | Finding::Failed if snap.state == S::Running && retry_turn => {
            let end = if finding == Finding::Completed {
                TurnEnd::Completed
            } else {
                TurnEnd::Failed
            };
            on("the reply-retry turn ended (confirmed from history)")
                .to(S::VerifyingReply)
                .then(&[E::MarkSent, E::RecordTurnEnd(end), E::VerifyReply])
        }
        Finding::Completed => match snap.state {
            S::Running if !snap.owes_reply => {
                on("the continuation's turn completed (confirmed from history)")
                    .ends(S::Succeeded, None)
                    .then(&[E::MarkSent, E::RecordTurnEnd(TurnEnd::Completed)])
            }
            S::Running => on("turn completed (confirmed from history)")
                .to(S::VerifyingReply)
                .then(&[
                    E::MarkSent,
                    E::RecordTurnEnd(TurnEnd::Completed),
                    E::VerifyReply,
                ]),
            S::CancelRequested => {
                let (to, code) = stopped(snap, Code::TurnCompletedBeforeAbort);
                on("the turn completed before the interrupt took effect")
                    .ends(to, Some(code))
                    .then(&[E::MarkSent, E::RecordTurnEnd(TurnEnd::Completed)])
            }
            _ => admitted("turn admitted (confirmed from history)"),
        },
        Finding::Failed => match snap.state {
            S::Running if snap.denied => on(
                "the model's provider turned the turn away for capacity (confirmed from history)",
            )
            .ends(S::Failed, Some(Code::CapacityDenied))
            .then(&[E::MarkSent, E::RecordTurnEnd(TurnEnd::Failed)]),
            S::Running | S::CancelRequested => on("the turn failed (confirmed from history)")
                .ends(S::Failed, Some(Code::TurnFailed))
                .then(&[E::MarkSent, E::RecordTurnEnd(TurnEnd::Failed)]),
            _ => admitted("turn admitted (confirmed from history)"),
        },
        // A workflow's turn cut by a restart after its input was admitted:
        // the work goes on in a new continuation, never by replaying it.
        Finding::Interrupted if snap.state == S::Running && snap.in_workflow => {
            on("the turn was cut by a restart; its workflow continues")
                .ends(S::Failed, Some(Code::InterruptedByRestart))
                .then(&[E::MarkSent, E::RecordTurnEnd(TurnEnd::Interrupted)])
        }
        Finding::Interrupted if snap.state == S::CancelRequested => {
            let (to, code) = stopped(snap, Code::TurnInterrupted);
            on("interrupt confirmed from history").ends(to, Some(code))
        }
        Finding::NoThread => on("no thread recorded for a started task")
            .ends(S::NeedsReconciliation, Some(Code::HistoryUnreadable)),
        Finding::Interrupted | Finding::Missing | Finding::StillRunning | Finding::Unreadable => {
            on("the turn cannot be confirmed from the thread's history")
                .ends(S::NeedsReconciliation, Some(Code::UncertainAdmission))
        }
    }
}

pub(super) fn reply(snap: &Snapshot, verdict: Verdict) -> Decision {
    if snap.state != S::VerifyingReply {
        return ignored(snap);
    }
    if snap.reply_path == ReplyPath::BridgeViaRest {
        return bridge_reply(snap, verdict);
    }
    let on = |reason| Decision::on(snap, reason);
    match verdict {
        Verdict::Confirmed => match snap.fallback {
            Some(Fallback::Posting | Fallback::Posted) => {
                on("reply posted by the REST fallback; the agent's own reply failed")
                    .ends(S::SucceededWithRestFallback, Some(Code::McpReplyMissing))
                    .then(&[E::RecordReplyConfirmed])
            }
            _ => on("reply confirmed")
                .ends(S::Succeeded, None)
                .then(&[E::RecordReplyConfirmed]),
        },
        Verdict::Unknown => on("the reply could not be verified")
            .ends(S::FailedReply, Some(Code::ReplyUnverifiable)),
        Verdict::Missing => match snap.fallback {
            Some(Fallback::Posted) => {
                on("the REST fallback was accepted by Gitea but cannot be found")
                    .ends(S::FailedReply, Some(Code::RestFallbackNotFound))
            }
            Some(Fallback::Failed) => {
                on("the REST fallback failed").ends(S::FailedReply, Some(Code::RestFallbackFailed))
            }
            _ if !snap.final_text => {
                on("the reply is missing and the turn left no final text to post")
                    .ends(S::FailedReply, Some(Code::NoFinalText))
            }
            // `posting`: a crash after the intent; the verdict just proved it
            // missing, so posting it now is safe.
            Some(Fallback::Posting) => {
                on("the reply is still missing: the REST fallback").then(&[E::PostRestFallback])
            }
            None if snap.reply_retry != ReplyRetry::Unused => {
                on("the reply is still missing: the REST fallback").then(&[E::PostRestFallback])
            }
            // Another turn would pass `max_turns_per_task`: the answer the
            // turn left is posted as it is.
            None if !snap.turns_left => on(
                "the reply is missing and the task took all the turns it may take: the REST fallback",
            )
            .then(&[E::PostRestFallback]),
            None => on("the reply is missing: one reply-retry turn")
                .then(&[E::BeginReplyRetry, E::StartReplyRetry]),
        },
    }
}

/// The verdict on a reply the bridge posts itself: looked for first (a
/// post made before a restart is found, never made twice), then posted once.
fn bridge_reply(snap: &Snapshot, verdict: Verdict) -> Decision {
    let on = |reason| Decision::on(snap, reason);
    match verdict {
        Verdict::Confirmed => on("reply posted by the bridge")
            .ends(S::Succeeded, None)
            .then(&[E::RecordReplyConfirmed]),
        Verdict::Unknown => on("the reply could not be verified")
            .ends(S::FailedReply, Some(Code::ReplyUnverifiable)),
        Verdict::Missing => match snap.fallback {
            Some(Fallback::Posted) => {
                on("Gitea accepted the bridge's reply but it cannot be found")
                    .ends(S::FailedReply, Some(Code::BridgeReplyNotFound))
            }
            Some(Fallback::Failed) => on("the bridge could not post the reply")
                .ends(S::FailedReply, Some(Code::BridgeReplyFailed)),
            _ if !snap.final_text => on("the turn left no final text to post")
                .ends(S::FailedReply, Some(Code::NoFinalText)),
            Some(Fallback::Posting) | None => {
                on("the bridge posts the reply").then(&[E::PostRestFallback])
            }
        },
    }
}

pub(super) fn fallback(snap: &Snapshot, outcome: FallbackOutcome) -> Decision {
    if snap.state != S::VerifyingReply {
        return ignored(snap);
    }
    let on = |reason| Decision::on(snap, reason);
    match (outcome, snap.reply_path) {
        (FallbackOutcome::Confirmed, ReplyPath::BridgeViaRest) => on("reply posted by the bridge")
            .ends(S::Succeeded, None)
            .then(&[E::RecordReplyConfirmed]),
        (FallbackOutcome::NotFound, ReplyPath::BridgeViaRest) => {
            on("Gitea accepted the bridge's reply but it cannot be found")
                .ends(S::FailedReply, Some(Code::BridgeReplyNotFound))
        }
        (FallbackOutcome::Failed, ReplyPath::BridgeViaRest) => {
            on("the bridge could not post the reply")
                .ends(S::FailedReply, Some(Code::BridgeReplyFailed))
        }
        (FallbackOutcome::Confirmed, ReplyPath::AgentViaMcp) => {
            on("reply posted by the REST fallback; the agent's own reply failed")
                .ends(S::SucceededWithRestFallback, Some(Code::McpReplyMissing))
                .then(&[E::RecordReplyConfirmed])
        }
        (FallbackOutcome::NotFound, ReplyPath::AgentViaMcp) => {
            on("Gitea accepted the REST fallback but it cannot be found")
                .ends(S::FailedReply, Some(Code::RestFallbackNotFound))
        }
        (FallbackOutcome::Failed, ReplyPath::AgentViaMcp) => {
            on("the REST fallback failed").ends(S::FailedReply, Some(Code::RestFallbackFailed))
        }
    }
}
