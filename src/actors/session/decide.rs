//! Every decision the session makes about a task, as one pure function:
//! [`next`]`(snapshot, event) -> Decision`. No I/O, no actix, no clock. The
//! drive (`drive.rs`) gathers the [`Snapshot`] from the store, feeds it what
//! happened as an [`Event`], commits the decision's transition together with
//! its in-commit writes by compare-and-swap on the version it names, then
//! carries out its remaining [`Effect`]s, the last of which reports the next
//! event.
//!
//! The promises this function keeps (checked by the property test beside it):
//! - Nothing is sent to the agent again once its turn/start intent is in the
//!   ledger, unless the ledger proves it never reached the agent: an explicit
//!   "not admitted" answer releases the intent, and an operator's "send now"
//!   of a held entry is the one resend. A continuation is a new operation.
//! - An uncertain outcome (an admission that cannot be proven, a turn that
//!   cannot be found, an interrupt nobody confirmed) ends in
//!   `needs_reconciliation`, or `failed_reply` when only the reply is in doubt.
//! - At most one reply-retry turn and one REST fallback per task; a task
//!   whose reply the bridge posts itself (an untrusted thread) gets no
//!   reply-retry turn, and its one REST post ends it `succeeded`.
//! - A terminal state never changes; every transition is in the lifecycle table.
//! - Every decision names the `state_version` it was made on.

use crate::domain::trust::ReplyPath;
use crate::lifecycle::{self, TaskState};

/// Why a running turn is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// An operator's abort (the task goes through `cancel_requested`).
    Abort,
    /// The turn deadline (`timed_out` once the interrupt is confirmed).
    Deadline,
    /// A limit on what the task may spend (`max_task_secs`,
    /// `max_tokens_per_task`): `cancel_requested`, then `failed`
    /// (`budget_exceeded`) once the interrupt is confirmed.
    Budget,
}

/// How far the task's message got towards the agent, as the outbox entry and
/// the ledger record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The task has no outbox entry: there is nothing to send.
    NoEntry,
    /// Nothing was sent: no turn/start intent is recorded.
    NotSent,
    /// The turn/start intent is in the ledger: from here on, never replay.
    Intended,
}

/// The task's one reply-retry turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyRetry {
    /// Not used.
    Unused,
    /// Its intent is in the ledger and its turn has not ended.
    Intended,
    /// Used: its turn ended, or it was proven never admitted.
    Used,
}

/// The REST fallback post of a task's reply, as its comment row records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// The intent is recorded; whether Gitea got the post is not.
    Posting,
    /// Gitea accepted the post.
    Posted,
    /// Gitea refused it.
    Failed,
}

/// What the decisions need to know about a task, gathered from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub state: TaskState,
    pub state_version: i64,
    /// Attempts opened so far (the current one included).
    pub attempt: i64,
    /// Attempts a task gets before a transient failure is final.
    pub max_attempts: i64,
    pub admission: Admission,
    /// The active attempt belongs to this process (not to one that died).
    pub attempt_is_ours: bool,
    /// The repository's workspace folder can be named (under the root).
    pub workspace_named: bool,
    /// A turn of this task was recorded as started.
    pub turn_recorded: bool,
    pub reply_retry: ReplyRetry,
    pub fallback: Option<Fallback>,
    /// The task's own turn left a final text (what a reply publishes).
    pub final_text: bool,
    /// An interrupt was requested for the running turn, and why.
    pub stopping: Option<Stop>,
    /// The stop was asked for by a newer message (`/interrupt`,
    /// `/replace`): an abort ends `superseded`.
    pub superseded: bool,
    /// Who posts the answer, as the thread's trust says: the agent (verified,
    /// then retried, then the REST fallback), or the bridge itself (its REST
    /// post is the normal path, and a task that ends so has `succeeded`).
    pub reply_path: ReplyPath,
    /// The task owes a Gitea reply: a comment's task does, a workflow's
    /// continuation does not (its turn's end is the task's end).
    pub owes_reply: bool,
    /// The task is a logical input of a workflow: a turn of it cut by a
    /// restart ends the task, and the workflow continues in a new
    /// continuation instead of waiting for an operator.
    pub in_workflow: bool,
    /// The task's turn failed because the model's provider turned it away
    /// for capacity: the work is not at fault, and its workflow waits.
    pub denied: bool,
    /// The task may take another turn under `max_turns_per_task` (the
    /// reply-retry turn is one).
    pub turns_left: bool,
}

/// The commenter's permission, checked again when the task starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Allowed,
    Denied,
    /// The question could not be answered now (Gitea unreachable).
    Unknown,
    /// The session's workflow waits for its owner; the commenter is not.
    OwnerGate,
    /// A continuation's Issue or pull request was closed or merged: its
    /// workflow ends and nothing more runs for it.
    ResourceClosed,
    /// The task took `max_turns_per_task` turns already.
    OverBudget,
    /// A continuation's workflow ended or waits for its owner: the
    /// continuation was superseded before anything was sent.
    WorkflowNotOpen,
}

/// What came of asking the agent runtime to start a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The runtime accepted the turn.
    Admitted,
    /// Provably nothing reached the agent. `retryable`: worth another attempt.
    NotAdmitted { retryable: bool },
    /// It may have been admitted: look in the thread's history.
    Uncertain,
}

/// How a turn that was being read ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    Completed,
    Failed,
    Interrupted,
}

/// What the thread's history says about the task's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    Completed,
    Failed,
    Interrupted,
    /// No turn carries the operation.
    Missing,
    /// The turn did not end while we waited.
    StillRunning,
    /// The history could not be read.
    Unreadable,
    /// No thread is recorded for the task.
    NoThread,
}

/// The reply verifier's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Bot author + marker + resource found.
    Confirmed,
    /// Gitea said explicitly that it is not there.
    Missing,
    /// The query failed: nothing may be written on this basis.
    Unknown,
}

/// What came of the REST fallback post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackOutcome {
    /// Posted and found again.
    Confirmed,
    /// Gitea accepted it, but it cannot be found afterwards.
    NotFound,
    /// Gitea refused it.
    Failed,
}

/// Something that happened to the task, as the session saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A drive picked the task up (first time, or after any restart).
    Picked,
    Permission(Permission),
    /// The answer to the task's turn/start (or the thread before it).
    Started(Start),
    /// The agent asks for a person's approval.
    ApprovalRequested,
    /// An approval was decided (or declined on timeout).
    ApprovalDecided {
        accept: bool,
    },
    StopRequested(Stop),
    TurnEnded(TurnEnd),
    /// An interrupt was not confirmed within its grace period.
    InterruptUnconfirmed,
    History(Finding),
    /// The thread settled idle without a `turn/completed`, and nothing
    /// happened on it for a while: a candidate final.
    IdleSettled,
    /// What the thread's history says of a candidate final's turn.
    IdleChecked(Finding),
    Reply(Verdict),
    Fallback(FallbackOutcome),
    /// An operator asks to send a held entry now. `ledger_sent`: the ledger
    /// shows the operation reached the agent (then it is never sent again).
    SendNow {
        ledger_sent: bool,
    },
}

/// Which turn a start or an admission concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnKind {
    /// The task's own turn.
    Normal,
    /// The one turn that only re-posts the previous final text.
    ReplyRetry,
}

impl TurnKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnKind::Normal => "normal",
            TurnKind::ReplyRetry => "reply_retry",
        }
    }
}

/// When a task in `retry_wait` may run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// At once: nothing went wrong but a restart.
    Now,
    /// After the configured backoff.
    Backoff,
}

/// What a decision asks to be done. The first group is written in the same
/// commit as the decision's transition (and not at all when it turns out
/// stale); the second is carried out after that commit, in order, and the
/// last one that observes something reports the next [`Event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    // --- written with the transition ---
    /// Ends the active attempt, its outcome the decision's code (or state).
    EndAttempt,
    /// Sets when a task going to `retry_wait` runs again.
    Retry(RetryAfter),
    /// Forgets the turn/start intent: the runtime proved nothing was sent.
    ReleaseIntent,
    /// Records the accepted turn (turns row, the task's turn id, ledger `accepted`).
    RecordAdmission(TurnKind),
    /// The thread's history shows our operation: the ledger says `sent`.
    MarkSent,
    /// Stores how the turn ended and its final text.
    RecordTurnEnd(TurnEnd),
    /// Stores the approval the agent asked for.
    RecordApproval,
    /// Stores the verified reply comment.
    RecordReplyConfirmed,
    /// The reply-retry intent: `reply_attempt` 0 → 1 and the ledger `sending`.
    BeginReplyRetry,
    /// The reply-retry turn was not admitted: forget its intent (it stays used).
    ReleaseReplyRetry,
    /// An operator's "send now": the held entry goes back to the queue.
    RequeueEntry,
    /// A second failure before admission: the entry waits in the queue with
    /// auto-drain off, its reason the decision's code, for an operator.
    HoldEntry,

    // --- carried out after the commit ---
    /// Asks the forge whether the commenter may trigger work.
    CheckPermission,
    /// Opens the thread, records the turn/start intent, sends turn/start.
    StartTurn,
    /// Reads the running turn's events up to the next one that matters.
    ReadTurn,
    /// Waits for an approval decision (or declines on timeout).
    AwaitApproval,
    /// Hands the decision to the runtime.
    AnswerApproval { accept: bool },
    /// Sends turn/interrupt; confirmation arrives on the turn's events.
    Interrupt(Stop),
    /// Ends the runtime's process: an interrupt nobody confirmed.
    ResetAgent,
    /// Looks the task's operation up in the thread's history.
    LookUpHistory,
    /// Looks the turn of a candidate final up in the thread's history, once.
    ConfirmIdle,
    /// Asks Gitea whether the reply is there.
    VerifyReply,
    /// Starts the one reply-retry turn.
    StartReplyRetry,
    /// Posts the stored final text through the REST API, then looks for it
    /// (the REST fallback, or the bridge's own reply for an untrusted thread).
    PostRestFallback,
    /// Decide the same event again on the new state (a state that must be
    /// passed through first, such as `running` before `verifying_reply`).
    Again,
}

impl Effect {
    /// Whether the effect is written in the transition's own commit.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Effect::EndAttempt
                | Effect::Retry(_)
                | Effect::ReleaseIntent
                | Effect::RecordAdmission(_)
                | Effect::MarkSent
                | Effect::RecordTurnEnd(_)
                | Effect::RecordApproval
                | Effect::RecordReplyConfirmed
                | Effect::BeginReplyRetry
                | Effect::ReleaseReplyRetry
                | Effect::RequeueEntry
                | Effect::HoldEntry
        )
    }
}

/// A stable code for why a task ended where it did: stored as its
/// `errorCode`, shown by the API, named in audit events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    OutboxMissing,
    InterruptedByRestart,
    WorkspaceUnavailable,
    PermissionDenied,
    PermissionUnknown,
    RuntimeUnavailable,
    RuntimeRefused,
    TurnFailed,
    TurnInterrupted,
    TurnCompletedBeforeAbort,
    InterruptUnconfirmed,
    UncertainAdmission,
    HistoryUnreadable,
    McpReplyMissing,
    ReplyUnverifiable,
    ReplyRetryUncertain,
    NoFinalText,
    RestFallbackNotFound,
    RestFallbackFailed,
    BridgeReplyNotFound,
    BridgeReplyFailed,
    /// Stopped for a newer message (`/interrupt`, `/replace`).
    Superseded,
    /// The session's workflow waits for its owner, and this is not the owner.
    OwnerGateRequired,
    /// The Issue or pull request of a continuation was closed or merged.
    ResourceClosed,
    /// A limit on what the agent may spend was reached.
    BudgetExceeded,
    /// The model's provider turned the turn away for capacity (a usage or
    /// rate limit, an overload): its workflow waits and continues.
    CapacityDenied,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::OutboxMissing => "outbox_missing",
            Code::InterruptedByRestart => "interrupted_by_restart",
            Code::ResourceClosed => "resource_closed",
            Code::BudgetExceeded => "budget_exceeded",
            Code::CapacityDenied => "capacity_denied",
            Code::WorkspaceUnavailable => "workspace_unavailable",
            Code::PermissionDenied => "permission_denied",
            Code::PermissionUnknown => "permission_unknown",
            Code::RuntimeUnavailable => "runtime_unavailable",
            Code::RuntimeRefused => "runtime_refused",
            Code::TurnFailed => "turn_failed",
            Code::TurnInterrupted => "turn_interrupted",
            Code::TurnCompletedBeforeAbort => "turn_completed_before_abort",
            Code::InterruptUnconfirmed => "interrupt_unconfirmed",
            Code::UncertainAdmission => "uncertain_admission",
            Code::HistoryUnreadable => "history_unreadable",
            Code::McpReplyMissing => "mcp_reply_missing",
            Code::ReplyUnverifiable => "reply_unverifiable",
            Code::ReplyRetryUncertain => "reply_retry_uncertain",
            Code::NoFinalText => "no_final_text",
            Code::RestFallbackNotFound => "rest_fallback_not_found",
            Code::RestFallbackFailed => "rest_fallback_failed",
            Code::BridgeReplyNotFound => "bridge_reply_not_found",
            Code::BridgeReplyFailed => "bridge_reply_failed",
            Code::Superseded => "superseded",
            Code::OwnerGateRequired => "owner_gate_required",
        }
    }
}

/// What to do about one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The state to move to, if any.
    pub to: Option<TaskState>,
    /// The `state_version` the decision was made on: the transition is a
    /// compare-and-swap on it, and a stale one is decided again.
    pub expected_version: i64,
    /// Why, for the history row and the audit event.
    pub reason: &'static str,
    pub code: Option<Code>,
    pub effects: Vec<Effect>,
}

impl Decision {
    fn on(snap: &Snapshot, reason: &'static str) -> Decision {
        Decision {
            to: None,
            expected_version: snap.state_version,
            reason,
            code: None,
            effects: Vec::new(),
        }
    }

    fn to(mut self, to: TaskState) -> Decision {
        self.to = Some(to);
        self
    }

    fn code(mut self, code: Code) -> Decision {
        self.code = Some(code);
        self
    }

    fn then(mut self, effects: &[Effect]) -> Decision {
        self.effects.extend_from_slice(effects);
        self
    }

    /// An end of the task: its attempt ends in the same commit.
    fn ends(self, to: TaskState, code: Option<Code>) -> Decision {
        let d = self.to(to).then(&[Effect::EndAttempt]);
        match code {
            Some(c) => d.code(c),
            None => d,
        }
    }

    /// Whether the decision changes nothing and asks for nothing.
    pub fn is_idle(&self) -> bool {
        self.to.is_none() && self.effects.is_empty()
    }
}

use Effect as E;
use TaskState as S;

/// Decides what `event` means for the task in `snap`.
pub fn next(snap: &Snapshot, event: &Event) -> Decision {
    if snap.state.is_terminal() {
        return Decision::on(snap, "the task has ended");
    }
    if !snap.state.is_session_driven() && !matches!(event, Event::SendNow { .. }) {
        // Queued, waiting or held tasks are the scheduler's or an operator's.
        return Decision::on(snap, "the session does not drive a task in this state");
    }
    let d = match *event {
        Event::Picked => rules::picked(snap),
        Event::Permission(p) => rules::permission(snap, p),
        Event::Started(start) => rules::started(snap, start),
        Event::ApprovalRequested => match snap.state {
            S::Running => Decision::on(snap, "the agent asked for approval")
                .to(S::AwaitingApproval)
                .then(&[E::RecordApproval, E::AwaitApproval]),
            // An abort landed meanwhile: the turn is stopped, not approved.
            S::CancelRequested => rules::stop_requested(snap, Stop::Abort),
            _ => rules::ignored(snap),
        },
        Event::ApprovalDecided { accept } => match snap.state {
            S::AwaitingApproval => Decision::on(snap, "approval decided")
                .to(S::Running)
                .then(&[E::AnswerApproval { accept }, E::ReadTurn]),
            // Aborted while it waited: the agent hears the decision, then
            // the interrupt.
            S::CancelRequested if snap.stopping.is_none() => {
                Decision::on(snap, "approval decided after an abort was requested").then(&[
                    E::AnswerApproval { accept },
                    E::Interrupt(Stop::Abort),
                    E::ReadTurn,
                ])
            }
            _ => rules::ignored(snap),
        },
        Event::StopRequested(stop) => rules::stop_requested(snap, stop),
        Event::TurnEnded(end) => rules::turn_ended(snap, end),
        Event::InterruptUnconfirmed => match snap.state {
            S::Running | S::AwaitingApproval | S::CancelRequested => Decision::on(
                snap,
                "interrupt not confirmed in time; the agent runtime is reset",
            )
            .ends(S::NeedsReconciliation, Some(Code::InterruptUnconfirmed))
            .then(&[E::ResetAgent]),
            _ => rules::ignored(snap),
        },
        Event::History(finding) => rules::history(snap, finding),
        Event::IdleSettled => match snap.state {
            S::Running | S::CancelRequested => Decision::on(
                snap,
                "the thread settled idle without turn/completed; its history says whether the turn ended",
            )
            .then(&[E::ConfirmIdle]),
            _ => rules::ignored(snap),
        },
        // Only an end the history shows is an end; anything else voids the
        // candidate and the turn is read on.
        Event::IdleChecked(finding @ (Finding::Completed | Finding::Failed))
            if matches!(snap.state, S::Running | S::CancelRequested) =>
        {
            rules::history(snap, finding)
        }
        Event::IdleChecked(_) => match snap.state {
            S::Running | S::CancelRequested => {
                Decision::on(snap, "the history does not show the turn ended; it is read on")
                    .then(&[E::ReadTurn])
            }
            _ => rules::ignored(snap),
        },
        Event::Reply(verdict) => rules::reply(snap, verdict),
        Event::Fallback(outcome) => rules::fallback(snap, outcome),
        Event::SendNow { ledger_sent } => match snap.state {
            S::NeedsReconciliation if !ledger_sent => Decision::on(
                snap,
                "an operator sends the held entry now; it never reached the agent",
            )
            .to(S::Queued)
            .then(&[E::RequeueEntry]),
            _ => Decision::on(
                snap,
                "send now refused: the operation reached the agent, or the task is not held",
            ),
        },
    };
    debug_assert!(d
        .to
        .is_none_or(|to| lifecycle::check(snap.state, to).is_ok()));
    d
}

mod rules;

#[cfg(test)]
mod tests;
