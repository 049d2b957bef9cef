//! What an edit or a deletion of a task's comment means, as a pure
//! function of the task as the session finds it. "Not admitted" is a task
//! still `queued`: no drive has it, so nothing of its message can have
//! reached the agent. An edit then rewrites the message (the model only ever
//! sees the new text) and a deletion cancels the task. Once a drive has it,
//! nothing changes: the running turn is never touched, and an edit is
//! answered once saying so.

use crate::domain::command::Command;
use crate::domain::states::ChangeKind;
use crate::lifecycle::TaskState;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeSnapshot {
    pub kind: ChangeKind,
    pub state: TaskState,
    pub state_version: i64,
    pub command: Option<Command>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeDecision {
    /// The task ends `cancelled`, by compare-and-swap on this version.
    Cancel { version: i64 },
    /// The message is rewritten while the task stays `queued` at this version.
    Rewrite { version: i64 },
    /// Too late; `tell`: one receipt says the edit changed nothing.
    TooLate { tell: bool },
    /// The task ended without its message ever being sent: nothing to say.
    Nothing,
}

/// Ends after which no message was ever sent.
fn never_sent(state: TaskState) -> bool {
    matches!(
        state,
        TaskState::Cancelled | TaskState::Rejected | TaskState::Ignored | TaskState::Duplicate
    )
}

pub fn decide(s: &ChangeSnapshot) -> (ChangeDecision, &'static str) {
    match (s.state, s.kind) {
        (TaskState::Queued, ChangeKind::Deleted) => (
            ChangeDecision::Cancel {
                version: s.state_version,
            },
            "the comment was deleted before its message was sent",
        ),
        (TaskState::Queued, ChangeKind::Edited) => (
            ChangeDecision::Rewrite {
                version: s.state_version,
            },
            "the comment was edited before its message was sent",
        ),
        (state, _) if never_sent(state) => (
            ChangeDecision::Nothing,
            "the task ended before its message was sent",
        ),
        // A turnless command was carried out: editing it changes nothing,
        // and a deletion of the comment is not worth a comment either.
        (_, ChangeKind::Edited) if !s.command.is_some_and(Command::is_turnless) => (
            ChangeDecision::TooLate { tell: true },
            "the comment was edited after its message was handed to the agent",
        ),
        _ => (
            ChangeDecision::TooLate { tell: false },
            "the comment changed after its task was under way",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Only a queued task is ever changed, and only as its kind says;
        /// every decision on a queued task names the version it saw.
        #[test]
        fn only_a_task_not_yet_admitted_changes(
            state in prop::sample::select(TaskState::ALL.to_vec()),
            version in 1i64..50,
            deleted in any::<bool>(),
            command in prop::option::of(prop::sample::select(Command::ALL.to_vec())),
        ) {
            let kind = if deleted { ChangeKind::Deleted } else { ChangeKind::Edited };
            let snap = ChangeSnapshot { kind, state, state_version: version, command };
            let (d, _) = decide(&snap);
            match d {
                ChangeDecision::Cancel { version: v } => {
                    prop_assert_eq!(state, TaskState::Queued);
                    prop_assert_eq!(kind, ChangeKind::Deleted);
                    prop_assert_eq!(v, version);
                }
                ChangeDecision::Rewrite { version: v } => {
                    prop_assert_eq!(state, TaskState::Queued);
                    prop_assert_eq!(kind, ChangeKind::Edited);
                    prop_assert_eq!(v, version);
                }
                ChangeDecision::TooLate { tell } => {
                    prop_assert_ne!(state, TaskState::Queued);
                    prop_assert!(!tell || kind == ChangeKind::Edited);
                }
                ChangeDecision::Nothing => prop_assert!(never_sent(state)),
            }
        }
    }
}
