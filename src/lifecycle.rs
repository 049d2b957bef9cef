//! The task lifecycle as data: every state, the transition table, and a
//! pure `check` that the store calls before each compare-and-swap. Nothing here does
//! I/O, so the table can be read, printed and property-tested on its own.

use crate::domain::sql::text_column;
use diesel::sql_types::Text;
use diesel::{AsExpression, FromSqlRow};
use std::fmt;
use std::str::FromStr;

/// Every state a task can be in. Names are the stable snake_case strings stored in
/// the database and shown by the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
pub enum TaskState {
    Received,
    Queued,
    Leased,
    Running,
    AwaitingApproval,
    WaitingUser,
    VerifyingReply,
    RetryWait,
    BlockedWorkspace,
    CancelRequested,
    NeedsReconciliation,
    Succeeded,
    SucceededWithRestFallback,
    Failed,
    FailedReply,
    Cancelled,
    Aborted,
    TimedOut,
    Ignored,
    Duplicate,
    Rejected,
}

use TaskState::*;

impl TaskState {
    /// All states, non-terminal first, each group in lifecycle order.
    pub const ALL: [TaskState; 21] = [
        Received,
        Queued,
        Leased,
        Running,
        AwaitingApproval,
        WaitingUser,
        VerifyingReply,
        RetryWait,
        BlockedWorkspace,
        CancelRequested,
        NeedsReconciliation,
        Succeeded,
        SucceededWithRestFallback,
        Failed,
        FailedReply,
        Cancelled,
        Aborted,
        TimedOut,
        Ignored,
        Duplicate,
        Rejected,
    ];

    /// The states no transition ever leaves. The store's UPDATE refuses to touch a
    /// row in one of these (and a database trigger refuses any other UPDATE).
    pub const TERMINAL: [TaskState; 10] = [
        Succeeded,
        SucceededWithRestFallback,
        Failed,
        FailedReply,
        Cancelled,
        Aborted,
        TimedOut,
        Ignored,
        Duplicate,
        Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Received => "received",
            Queued => "queued",
            Leased => "leased",
            Running => "running",
            AwaitingApproval => "awaiting_approval",
            WaitingUser => "waiting_user",
            VerifyingReply => "verifying_reply",
            RetryWait => "retry_wait",
            BlockedWorkspace => "blocked_workspace",
            CancelRequested => "cancel_requested",
            NeedsReconciliation => "needs_reconciliation",
            Succeeded => "succeeded",
            SucceededWithRestFallback => "succeeded_with_rest_fallback",
            Failed => "failed",
            FailedReply => "failed_reply",
            Cancelled => "cancelled",
            Aborted => "aborted",
            TimedOut => "timed_out",
            Ignored => "ignored",
            Duplicate => "duplicate",
            Rejected => "rejected",
        }
    }

    pub fn is_terminal(self) -> bool {
        Self::TERMINAL.contains(&self)
    }

    /// Ends (and the one uncertain stop) that the thread is told about with a
    /// receipt: the commenter would otherwise wait for an answer that never
    /// comes. A success speaks for itself through the agent's reply.
    pub fn gets_receipt(self) -> bool {
        matches!(
            self,
            TaskState::Failed
                | TaskState::TimedOut
                | TaskState::Aborted
                | TaskState::FailedReply
                | TaskState::NeedsReconciliation
                | TaskState::Rejected
        )
    }

    /// A session actor drives a task in this state, from the lease to its
    /// settling: it holds the turn (or is about to start or verify it). The
    /// store's partial index `tasks_session_driven` lists the same states.
    pub fn is_session_driven(self) -> bool {
        matches!(
            self,
            TaskState::Leased
                | TaskState::Running
                | TaskState::AwaitingApproval
                | TaskState::VerifyingReply
                | TaskState::CancelRequested
        )
    }

    /// Only an operator moves a task on from this state: the workspace must
    /// be looked at, or what the agent did must be reconciled.
    pub fn awaits_operator(self) -> bool {
        matches!(
            self,
            TaskState::BlockedWorkspace | TaskState::NeedsReconciliation
        )
    }

    /// A task in this state holds its repository: no other task of the
    /// repository starts while it is there, be it driven by its session or
    /// waiting for an operator.
    pub fn holds_repository(self) -> bool {
        self.is_session_driven() || self.awaits_operator()
    }

    /// The states this one may move to (empty for terminal states).
    pub fn successors(self) -> &'static [TaskState] {
        TRANSITIONS
            .iter()
            .find(|(from, _)| *from == self)
            .map(|(_, to)| *to)
            .unwrap_or(&[])
    }
}

/// The transition table, row by row: `(from, [to...])`. Terminal states have no row.
pub const TRANSITIONS: &[(TaskState, &[TaskState])] = &[
    (Received, &[Queued, Ignored, Duplicate, Rejected]),
    // rejected: the commenter's permission is checked again after accept and
    // when the task starts.
    // `succeeded`: a turnless command was carried out by its session.
    (Queued, &[Leased, Cancelled, Rejected, Succeeded]),
    // queued: a second failure before admission holds the entry for an
    // operator (auto-drain off); nothing reached the agent.
    // cancelled: a continuation whose Issue/PR was closed, before anything
    // was sent.
    (
        Leased,
        &[
            Cancelled,
            Running,
            BlockedWorkspace,
            RetryWait,
            Failed,
            CancelRequested,
            NeedsReconciliation,
            Rejected,
            Queued,
        ],
    ),
    // succeeded: a workflow's continuation turn ended; it owes no Gitea reply.
    (
        Running,
        &[
            Succeeded,
            AwaitingApproval,
            WaitingUser,
            VerifyingReply,
            RetryWait,
            CancelRequested,
            TimedOut,
            Failed,
            NeedsReconciliation,
        ],
    ),
    (
        AwaitingApproval,
        &[Running, CancelRequested, NeedsReconciliation],
    ),
    (WaitingUser, &[Queued, Cancelled, Failed]),
    (
        VerifyingReply,
        // running: the one reply-retry turn, straight on the same lease, so
        // the scheduler can never mistake it for a retry of the instruction.
        &[
            Succeeded,
            SucceededWithRestFallback,
            Running,
            RetryWait,
            FailedReply,
        ],
    ),
    // cancelled: a continuation whose workflow ended or waits for its owner,
    // during its backoff (nothing reached the agent: `retry_wait` follows
    // only a failure before admission).
    (
        RetryWait,
        &[Leased, Running, VerifyingReply, Failed, Cancelled],
    ),
    (BlockedWorkspace, &[Queued, Cancelled]),
    (
        CancelRequested,
        &[Aborted, Cancelled, NeedsReconciliation, Failed],
    ),
    // queued: an operator's "send now" of a held entry, only once the ledger
    // proves the operation never reached the agent.
    // verifying_reply: a worker came back with the durable final of the
    // same attempt; its reply is verified, the model never runs again.
    (
        NeedsReconciliation,
        &[Succeeded, Failed, Queued, VerifyingReply],
    ),
];

/// What the server does with the durable final a worker's journal holds for
/// one attempt of a task, offered after the server stopped waiting for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LateFinal {
    /// Take it: `needs_reconciliation → verifying_reply`, as a
    /// compare-and-swap on this `state_version`.
    Take { expected_version: i64 },
    /// The task is not waiting for one: nothing changes.
    NotUncertain(TaskState),
    /// The final is of an attempt that is not the task's latest: nothing
    /// changes (a stale attempt's end says nothing about the latest one).
    AnotherAttempt,
}

/// Whether the final of `offered` is taken by a task in `state` at
/// `state_version` whose latest attempt is `latest`. Only the attempt that
/// made the task uncertain, and only while it is uncertain: anything else
/// fails closed.
pub fn late_final(
    state: TaskState,
    state_version: i64,
    latest: Option<&str>,
    offered: &str,
) -> LateFinal {
    if latest != Some(offered) {
        return LateFinal::AnotherAttempt;
    }
    if state != NeedsReconciliation {
        return LateFinal::NotUncertain(state);
    }
    LateFinal::Take {
        expected_version: state_version,
    }
}

/// Why a requested transition is not allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The task is in a terminal state: it never changes again.
    Terminal,
    /// The pair is not in the transition table.
    NotInTable,
}

impl Refusal {
    pub fn code(self) -> &'static str {
        match self {
            Refusal::Terminal => "terminal_state",
            Refusal::NotInTable => "illegal_transition",
        }
    }
}

/// Whether `from → to` is allowed by the transition table.
pub fn check(from: TaskState, to: TaskState) -> Result<(), Refusal> {
    if from.is_terminal() {
        return Err(Refusal::Terminal);
    }
    if from.successors().contains(&to) {
        Ok(())
    } else {
        Err(Refusal::NotInTable)
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state name that is not one of the lifecycle's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown task state `{0}` (expected a snake_case task state name such as queued)")]
pub struct UnknownState(pub String);

impl TaskState {
    pub fn parse(s: &str) -> Result<TaskState, UnknownState> {
        TaskState::ALL
            .iter()
            .copied()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.chars().take(100).collect()))
    }
}

impl FromStr for TaskState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskState::parse(s)
    }
}

text_column!(TaskState);

/// Serialised as its stored name: the admin API's shapes carry it.
impl serde::Serialize for TaskState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for TaskState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        TaskState::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for st in TaskState::ALL {
            assert_eq!(st.as_str().parse::<TaskState>(), Ok(st));
        }
        assert!("preparing".parse::<TaskState>().is_err());
    }

    #[test]
    fn every_non_terminal_state_has_exactly_one_row_and_terminals_none() {
        for st in TaskState::ALL {
            let rows = TRANSITIONS.iter().filter(|(f, _)| *f == st).count();
            assert_eq!(rows, usize::from(!st.is_terminal()), "{st}");
        }
    }

    #[test]
    fn terminal_states_refuse_everything() {
        for from in TaskState::TERMINAL {
            for to in TaskState::ALL {
                assert_eq!(check(from, to), Err(Refusal::Terminal));
            }
        }
    }

    #[test]
    fn design_rows_spot_checks() {
        assert!(check(Queued, Leased).is_ok());
        assert!(check(Queued, Running).is_err());
        assert!(check(NeedsReconciliation, Succeeded).is_ok());
        // Reconciliation never runs the task again by itself: the one way back
        // to the queue is an operator's "send now".
        assert!(check(NeedsReconciliation, Running).is_err());
        assert!(check(NeedsReconciliation, Leased).is_err());
        assert!(check(NeedsReconciliation, Queued).is_ok());
        // A worker's durable final of the same attempt: verified, not re-run.
        assert!(check(NeedsReconciliation, VerifyingReply).is_ok());
        assert!(check(VerifyingReply, SucceededWithRestFallback).is_ok());
        assert!(check(Received, Queued).is_ok());
        // Every state is reachable from `received`.
        let mut seen = vec![Received];
        let mut i = 0;
        while i < seen.len() {
            for next in seen[i].successors() {
                if !seen.contains(next) {
                    seen.push(*next);
                }
            }
            i += 1;
        }
        assert_eq!(seen.len(), TaskState::ALL.len());
    }

    fn any_state() -> impl proptest::strategy::Strategy<Value = TaskState> {
        proptest::sample::select(TaskState::ALL.to_vec())
    }

    proptest::proptest! {
        /// A late final moves only an uncertain task, only for its latest
        /// attempt, only on the version it was decided on, and only along
        /// an edge of the table.
        #[test]
        fn a_late_final_is_taken_only_for_the_uncertain_latest_attempt(
            state in any_state(),
            version in 0i64..1000,
            latest in proptest::option::of(proptest::sample::select(vec!["att-1", "att-2"])),
            offered in proptest::sample::select(vec!["att-1", "att-2"]),
        ) {
            let d = late_final(state, version, latest, offered);
            match d {
                LateFinal::Take { expected_version } => {
                    proptest::prop_assert_eq!(state, NeedsReconciliation);
                    proptest::prop_assert_eq!(latest, Some(offered));
                    proptest::prop_assert_eq!(expected_version, version);
                    proptest::prop_assert!(check(state, VerifyingReply).is_ok());
                }
                LateFinal::NotUncertain(s) => {
                    proptest::prop_assert_eq!(s, state);
                    proptest::prop_assert_ne!(state, NeedsReconciliation);
                    proptest::prop_assert_eq!(latest, Some(offered));
                }
                LateFinal::AnotherAttempt => proptest::prop_assert_ne!(latest, Some(offered)),
            }
        }
    }
}
