//! The states and modes stored in columns besides a task's own state (which
//! is the lifecycle's): each is an enum whose text is what the column and the
//! admin API hold.

/// A column value the enum does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a {what}")]
pub struct UnknownValue {
    what: &'static str,
    text: String,
}

impl UnknownValue {
    pub(crate) fn new(what: &'static str, text: &str) -> UnknownValue {
        UnknownValue {
            what,
            text: text.chars().take(100).collect(),
        }
    }
}

/// An enum stored as text: `as_str`, `parse`, `ALL`, Display, serde and the
/// column mapping, from one list of (variant, text) pairs.
macro_rules! text_enum {
    ($(#[$doc:meta])* $ty:ident, $what:literal { $($(#[$vdoc:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, diesel::AsExpression, diesel::FromSqlRow, serde::Serialize, serde::Deserialize)]
        #[diesel(sql_type = diesel::sql_types::Text)]
        pub enum $ty {
            $($(#[$vdoc])* #[serde(rename = $text)] $variant),+
        }

        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $text),+
                }
            }

            pub fn parse(text: &str) -> Result<$ty, $crate::domain::states::UnknownValue> {
                match text {
                    $($text => Ok($ty::$variant),)+
                    _ => Err($crate::domain::states::UnknownValue::new($what, text)),
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $crate::domain::states::UnknownValue;
            fn from_str(text: &str) -> Result<$ty, $crate::domain::states::UnknownValue> {
                <$ty>::parse(text)
            }
        }

        $crate::domain::sql::text_column!($ty);
    };
}

pub(crate) use text_enum;

text_enum!(
    /// Why the model's provider turned a turn away for now: its capacity or
    /// a policy on the resources it hands out, never the work itself. Worth
    /// waiting out, so it is a wait reason, never a failure of the work.
    CapacityDenial, "capacity denial" {
        /// The account's usage allowance is spent until it resets.
        UsageLimit = "usage_limit",
        /// Too many requests for now.
        RateLimited = "rate_limited",
        /// The model is at capacity.
        Overloaded = "overloaded",
        /// A policy on resources refuses capacity for now.
        PolicyCapacity = "policy_capacity",
    }
);

text_enum!(
    /// Whether a repository takes new work.
    RepoStatus, "repository status" {
        Active = "active",
        /// Webhooks for it are refused (an operator's control).
        Disabled = "disabled",
        Blocked = "blocked",
    }
);

text_enum!(
    /// Where an operator's "stop and send now" of a held entry stands; each
    /// phase is written before the next step is taken.
    HandoffPhase, "handoff phase" {
        /// Asked for: the entry pins the run, thread and turn it may have reached.
        Requested = "requested",
        /// That run is being stopped.
        Interrupting = "interrupting",
        /// The ledger's claim for exactly that thread and turn is withdrawn.
        Revoked = "revoked",
        /// Back in the queue, auto-drain on, same operation id: its own turn.
        Dedicated = "dedicated",
    }
);

text_enum!(
    /// How a comment's message reaches the agent.
    SendMode, "send mode" {
        /// Queued behind the session's running turn; starts the next turn.
        Enqueue = "enqueue",
        /// Admitted into the running turn with `turn/steer`: the entry names
        /// the turn it expects to be active (`expected_turn_id`).
        Steer = "steer-running",
        /// Stops the running turn and starts once it settled, before the
        /// queue (`/interrupt`).
        Interrupt = "interrupt-running",
        /// As `Interrupt`, and the stopped turn is dropped from the thread's
        /// history first (`/replace`).
        Replace = "replace-latest",
    }
);

impl SendMode {
    /// The seed's `intent` of an entry in this mode.
    pub fn intent(self) -> &'static str {
        match self {
            SendMode::Enqueue => "enqueue",
            SendMode::Steer | SendMode::Interrupt => "automatic",
            SendMode::Replace => "replace-latest",
        }
    }

    /// The seed's `sendMode`: `replace-latest` interrupts like `/interrupt`.
    pub fn send_mode(self) -> &'static str {
        match self {
            SendMode::Enqueue => "queue",
            SendMode::Steer => "steer-running",
            SendMode::Interrupt | SendMode::Replace => "interrupt-running",
        }
    }
}

text_enum!(
    /// What happened to a comment that has a task (`comment_changes.kind`).
    ChangeKind, "comment change kind" {
        Edited = "edited",
        Deleted = "deleted",
    }
);

text_enum!(
    /// Where an outbox entry is on its way to the agent.
    OutboxStatus, "outbox status" {
        Queued = "queued",
        /// Handed to a turn; the ledger knows whether the agent accepted it.
        Sending = "sending",
    }
);

text_enum!(
    /// What a thread was created to be trusted with (see `domain::trust`):
    /// fixed when the thread is created, stored beside its id.
    ThreadTrust, "thread trust" {
        /// The repository's own policy and the Gitea tools.
        Trusted = "trusted",
        /// Read-only, no Gitea write tool; the bridge posts the answer.
        Untrusted = "untrusted",
    }
);

text_enum!(
    /// What a comment row is about.
    CommentKind, "comment kind" {
        /// A status receipt on the triggering comment's thread.
        Receipt = "receipt",
        /// The agent's answer, posted by the agent through gitea-mcp.
        Reply = "reply",
        /// The bridge's one REST post of the answer when the agent's is missing.
        RestFallback = "rest_fallback",
        /// A turnless command's answer (`/status`, `/help`, …), its text
        /// decided with the command and stored in the row.
        Answer = "answer",
    }
);

text_enum!(
    /// Where a comment row is on its way into Gitea.
    CommentStatus, "comment status" {
        Pending = "pending",
        /// Being posted: a crash here leaves it uncertain, and the worker
        /// looks for it in Gitea before posting again.
        Posting = "posting",
        Posted = "posted",
        /// Found in Gitea by the reply check.
        Verified = "verified",
        /// Not posted on purpose (nothing to say, or said already).
        Skipped = "skipped",
        Failed = "failed",
        /// The agent's gitea-mcp call that posts the answer, as it was seen.
        McpStarted = "mcp_started",
        McpCompleted = "mcp_completed",
        McpFailed = "mcp_failed",
    }
);

text_enum!(
    /// What a commit status says, in Gitea's words (the subset the bridge sets).
    CommitStatusState, "commit status state" {
        /// A turn of the task runs on the commit.
        Pending = "pending",
        Success = "success",
        /// The task ended without the work done.
        Failure = "failure",
        /// The task ended without a verdict: held for an operator, cancelled or stopped.
        Error = "error",
    }
);

text_enum!(
    /// Where a commit status row is on its way into Gitea.
    StatusProgress, "commit status progress" {
        Pending = "pending",
        /// Being posted: a crash here leaves it uncertain, and it is posted
        /// again (Gitea keeps both; they are identical).
        Posting = "posting",
        Posted = "posted",
        /// A newer status of the same commit came first: posting this one
        /// would show a stale state.
        Superseded = "superseded",
        /// Gitea refused it, or it kept failing.
        Failed = "failed",
    }
);

impl StatusProgress {
    /// Rows the statuses worker still has to finish.
    pub fn is_open(self) -> bool {
        matches!(self, StatusProgress::Pending | StatusProgress::Posting)
    }
}

impl CommentStatus {
    /// Rows the receipts worker still has to finish.
    pub const OPEN: [CommentStatus; 2] = [CommentStatus::Pending, CommentStatus::Posting];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_parses_back_from_its_text() {
        for s in CommentStatus::ALL {
            assert_eq!(CommentStatus::parse(s.as_str()), Ok(*s));
        }
        for k in ChangeKind::ALL {
            assert_eq!(ChangeKind::parse(k.as_str()), Ok(*k));
        }
        for k in CommentKind::ALL {
            assert_eq!(CommentKind::parse(k.as_str()), Ok(*k));
        }
        for s in StatusProgress::ALL {
            assert_eq!(StatusProgress::parse(s.as_str()), Ok(*s));
        }
        for s in CommitStatusState::ALL {
            assert_eq!(CommitStatusState::parse(s.as_str()), Ok(*s));
        }
        assert!(OutboxStatus::parse("Queued").is_err());
        assert_eq!(
            serde_json::to_string(&CommentKind::RestFallback).unwrap(),
            "\"rest_fallback\""
        );
    }
}
