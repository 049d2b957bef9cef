//! The commands a comment can give the bot: `@bot /word …`, the word right
//! after the mention. A comment without one is an instruction (a task whose
//! `command` is null). The word is what the task records, what the admin API
//! shows and what the grammar comment lists, so each command has one name.

use serde::{Serialize, Serializer};
use std::fmt;

/// What a comment asks of the session, besides an instruction for the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, diesel::AsExpression, diesel::FromSqlRow)]
#[diesel(sql_type = diesel::sql_types::Text)]
pub enum Command {
    /// Joins the running turn (`turn/steer`); no running turn: its own turn.
    Steer,
    /// Stops the running turn, then runs this text as a new turn.
    Interrupt,
    /// As `Interrupt`, and the stopped turn is reverted out of the thread.
    Replace,
    /// Stops the running turn; queued work stays.
    Stop,
    /// Cancels the session's queued tasks; the running one is untouched.
    Cancel,
    /// Answers with the session's running and queued tasks.
    Status,
    /// Grants a pending approval of this session.
    Approve,
    /// Refuses a pending approval of this session.
    Deny,
    /// Runs Codex's own review of the Pull Request.
    Review,
    /// The session's next task starts a new Codex thread.
    Reset,
    /// Answers with the grammar.
    Help,
    /// A `/word` that is none of the above: answered with the grammar, as
    /// `Help` is, and recorded apart so an operator sees what people try.
    Unknown,
}

impl Command {
    /// Every command, in the order the grammar comment lists them.
    pub const ALL: [Command; 12] = [
        Command::Steer,
        Command::Interrupt,
        Command::Replace,
        Command::Stop,
        Command::Cancel,
        Command::Status,
        Command::Approve,
        Command::Deny,
        Command::Review,
        Command::Reset,
        Command::Help,
        Command::Unknown,
    ];

    /// The stored and shown name; for all but `Unknown` also the word typed.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Steer => "steer",
            Command::Interrupt => "interrupt",
            Command::Replace => "replace",
            Command::Stop => "stop",
            Command::Cancel => "cancel",
            Command::Status => "status",
            Command::Approve => "approve",
            Command::Deny => "deny",
            Command::Review => "review",
            Command::Reset => "reset",
            Command::Help => "help",
            Command::Unknown => "unknown",
        }
    }

    /// The command a typed word names, ignoring case. Any other word is
    /// `Unknown` (the word `unknown` included: nobody types it to mean that).
    pub fn from_word(word: &str) -> Command {
        Self::ALL
            .into_iter()
            .filter(|c| *c != Command::Unknown)
            .find(|c| c.as_str().eq_ignore_ascii_case(word))
            .unwrap_or(Command::Unknown)
    }

    /// A stored name back to its command; anything else is not one.
    pub fn parse(name: &str) -> Result<Command, String> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == name)
            .ok_or_else(|| format!("`{name}` is not a command name"))
    }

    /// Whether the command needs no Codex turn of its own: its task ends
    /// once the bridge has done what it says.
    pub fn is_turnless(self) -> bool {
        !matches!(
            self,
            Command::Steer | Command::Interrupt | Command::Replace | Command::Review
        )
    }

    /// Whether the command's text after the word is an instruction for the
    /// agent (and so must not be empty to mean anything).
    pub fn carries_text(self) -> bool {
        matches!(self, Command::Steer | Command::Interrupt | Command::Replace)
    }

    /// Whether the session's command lane answers it, with no turn: a
    /// turnless command, and a turn command with nothing to act on (a
    /// `/steer`, `/interrupt` or `/replace` without text; a `/review` of an
    /// Issue, which has no changes to review).
    pub fn answered_by_lane(self, argument: Option<&str>, on_pull: bool) -> bool {
        self.is_turnless()
            || (self.carries_text() && argument.is_none_or(|a| a.trim().is_empty()))
            || (self == Command::Review && !on_pull)
    }
}

/// A comment's command, as written: `@bot /word argument`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    pub command: Command,
    /// The word as typed, lower-cased (for `Unknown`, what to name back).
    pub word: String,
    /// What follows the word, trimmed: the approval id of `/approve` and
    /// `/deny`, the instruction of `/steer`, `/interrupt` and `/replace`.
    pub argument: String,
}

impl CommandLine {
    /// The first whitespace-separated token of the argument (an approval id).
    pub fn first_argument(&self) -> Option<&str> {
        self.argument.split_whitespace().next()
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Command {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

crate::domain::sql::text_column!(Command);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_words_ignore_case() {
        for c in Command::ALL {
            assert_eq!(Command::parse(c.as_str()), Ok(c));
            if c != Command::Unknown {
                assert_eq!(Command::from_word(&c.as_str().to_uppercase()), c);
            }
        }
        assert_eq!(Command::from_word("unknown"), Command::Unknown);
        assert_eq!(Command::from_word("deploy"), Command::Unknown);
        assert!(Command::parse("Steer").is_err());
    }

    #[test]
    fn a_turn_command_with_nothing_to_act_on_is_the_lanes_to_answer() {
        for c in [Command::Steer, Command::Interrupt, Command::Replace] {
            assert!(c.answered_by_lane(None, true));
            assert!(c.answered_by_lane(Some("  "), true));
            assert!(!c.answered_by_lane(Some("fix it"), false));
        }
        assert!(Command::Review.answered_by_lane(None, false));
        assert!(!Command::Review.answered_by_lane(None, true));
        assert!(Command::Status.answered_by_lane(None, true));
    }

    #[test]
    fn only_the_turn_commands_need_a_turn() {
        let turns: Vec<_> = Command::ALL
            .into_iter()
            .filter(|c| !c.is_turnless())
            .collect();
        assert_eq!(
            turns,
            [
                Command::Steer,
                Command::Interrupt,
                Command::Replace,
                Command::Review
            ]
        );
    }
}
