//! The words of a command's answer. Decided once and stored with the
//! comment row, so a repost after a crash says what the decision said.

use super::decide::{Answer, Nothing, TaskFact};
use crate::domain::command::Command;
use std::fmt::Write as _;

/// The grammar, as the bot lists it.
fn grammar(bot: &str) -> String {
    let rows: [(&str, &str); 11] = [
        (
            "`@{bot} <text>`",
            "an instruction: a turn now, or after the queued ones",
        ),
        (
            "`@{bot} /steer <text>`",
            "adds the text to the running turn (no running turn: a turn of its own)",
        ),
        (
            "`@{bot} /interrupt <text>`",
            "stops the running turn, then runs the text as a new turn",
        ),
        (
            "`@{bot} /replace <text>`",
            "as `/interrupt`, and the stopped turn is removed from the conversation",
        ),
        (
            "`@{bot} /stop`",
            "stops the running turn; queued requests stay",
        ),
        (
            "`@{bot} /cancel`",
            "cancels the queued requests; the running turn goes on",
        ),
        ("`@{bot} /status`", "lists the running and queued requests"),
        (
            "`@{bot} /approve <id>`, `/deny <id>`",
            "decides a pending approval",
        ),
        ("`@{bot} /review`", "a code review of this pull request"),
        (
            "`@{bot} /reset`",
            "the next request starts a new conversation",
        ),
        ("`@{bot} /help`", "this list"),
    ];
    let mut out = String::from("| comment | what it does |\n|---|---|\n");
    for (form, what) in rows {
        let _ = writeln!(out, "| {} | {what} |", form.replace("{bot}", bot));
    }
    out
}

fn task_lines(out: &mut String, tasks: &[TaskFact]) {
    for t in tasks {
        let what = match t.command {
            Some(c) => format!(" (`/{c}`)"),
            None => String::new(),
        };
        let _ = writeln!(out, "- `{}`: `{}`{what}", t.task_id, t.state);
    }
}

fn pending_list(pending: &[String]) -> String {
    if pending.is_empty() {
        "No approval of this thread is pending.".into()
    } else {
        let ids: Vec<String> = pending.iter().map(|p| format!("`{p}`")).collect();
        format!("Pending here: {}.", ids.join(", "))
    }
}

/// Stands for the approval's id in [`approval_asked`]'s text until the
/// approval row, written in the same commit, has one.
pub const APPROVAL_ID: &str = "{approval_id}";

/// The comment announcing an approval the agent asked for: what is asked,
/// the id, and how to answer. `detail` is already scrubbed of secrets.
pub fn approval_asked(kind: &str, detail: &serde_json::Value, bot: &str) -> String {
    let mut what = serde_json::to_string_pretty(detail).unwrap_or_default();
    if what.len() > 1500 {
        let cut = (0..=1500)
            .rev()
            .find(|i| what.is_char_boundary(*i))
            .unwrap_or(0);
        what.truncate(cut);
        what.push_str("\n…");
    }
    let what = what.replace("```", "'''");
    format!(
        "⏸️ The agent asks for approval `{APPROVAL_ID}` ({kind}):\n\n```\n{what}\n```\n\nSomeone with write access answers with `@{bot} /approve {APPROVAL_ID}` or `@{bot} /deny {APPROVAL_ID}`. Nobody answering in time counts as a refusal."
    )
}

/// The one receipt of a comment edited after its message was handed over.
pub fn late_edit(task: &crate::domain::TaskId) -> String {
    format!(
        "✏️ This comment was edited after the agent had started on it (task `{task}`), so the edit changes nothing. To add to or change the work, write a new comment."
    )
}

/// The one answer of a steer the running turn took in.
pub fn steered(into: Option<&crate::domain::TaskId>) -> String {
    match into {
        Some(task) => format!(
            "➕ Added to the work under way (task `{task}`): its answer covers this comment too."
        ),
        None => "➕ Added to the work under way: its answer covers this comment too.".to_owned(),
    }
}

/// What a `/replace` tells the thread once the turn it stopped is gone
/// from the conversation.
pub fn reverted(stopped: Option<&crate::domain::TaskId>) -> String {
    let which = stopped
        .map(|t| format!(" (task `{t}`)"))
        .unwrap_or_default();
    format!(
        "↩️ The stopped turn{which} was removed from the conversation before this request started. Files it changed stay as they are: `thread/revert` only drops the turn from what the agent remembers."
    )
}

/// The answer's Markdown, without the marker (the worker adds it).
pub fn text(answer: &Answer, command: Command, bot: &str) -> String {
    match answer {
        Answer::Grammar { unknown } => {
            let head = if *unknown {
                "I do not know that command. These are the ones I do:"
            } else {
                "What I understand in this thread:"
            };
            format!("{head}\n\n{}", grammar(bot))
        }
        Answer::Status { driven, queued } => {
            let mut out = String::new();
            if driven.is_empty() {
                out.push_str("Nothing is running in this thread.\n");
            } else {
                out.push_str("Running:\n");
                task_lines(&mut out, driven);
            }
            if queued.is_empty() {
                out.push_str("\nNothing is queued.\n");
            } else {
                out.push_str("\nQueued, in order:\n");
                task_lines(&mut out, queued);
            }
            out
        }
        Answer::Stopping { task, workflow } => {
            let mut out = match task {
                Some(task) => format!(
                    "🛑 Stopping task `{task}`. Queued requests stay queued. Files the agent already changed stay changed; nothing is rolled back."
                ),
                None => "🛑 No turn is running; the work stops here.".to_owned(),
            };
            if *workflow {
                let _ = write!(
                    out,
                    "\n\nThe workflow of this thread waits for its owner: no further turn runs on its own. Its owner's next comment that mentions @{bot} resumes it."
                );
            }
            out
        }
        Answer::Cancelled { tasks, workflow } => {
            let mut out = format!("Cancelled {} queued request(s):\n", tasks.len());
            for t in tasks {
                let _ = writeln!(out, "- `{t}`");
            }
            if *workflow {
                out.push_str("\nThe workflow of this thread is cancelled: nothing more runs for it.");
            }
            out.push_str("\nA running turn, if any, goes on.");
            out
        }
        Answer::Reset { old_thread } => format!(
            "The next request in this thread starts a new Codex conversation. The previous one (`{old_thread}`) is kept; a turn running now finishes in it."
        ),
        Answer::Decided {
            approval_id,
            accept,
        } => {
            if *accept {
                format!("✅ Approval `{approval_id}` granted.")
            } else {
                format!("⛔ Approval `{approval_id}` refused.")
            }
        }
        Answer::Nothing(n) => nothing(n, command),
    }
}

fn nothing(n: &Nothing, command: Command) -> String {
    let head = format!("`/{command}`: nothing to do.");
    match n {
        Nothing::NoRun => format!("{head} No turn is running in this thread."),
        Nothing::AlreadyStopping(t) => format!("{head} Task `{t}` is already being stopped."),
        Nothing::TurnEnded(t) => {
            format!("{head} The turn of task `{t}` has already ended; its answer is being posted.")
        }
        Nothing::NoQueued => format!("{head} No request is queued in this thread."),
        Nothing::NoThread => format!("{head} This thread has no Codex conversation yet."),
        Nothing::NoApprovalId { pending } => format!(
            "{head} Name the approval: `/{command} <id>`. {}",
            pending_list(pending)
        ),
        Nothing::NoSuchApproval { given, pending } => format!(
            "{head} `{}` is not a pending approval of this thread. {}",
            given.replace('`', "'"),
            pending_list(pending)
        ),
        Nothing::NoText(c) => {
            format!("{head} Write what to send after the word: `@bot /{c} <what to do>`.")
        }
        Nothing::NotAPull => {
            format!("{head} This is an Issue: a review compares a pull request's changes.")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_names_every_command_a_person_types() {
        let g = text(&Answer::Grammar { unknown: false }, Command::Help, "bot");
        for c in Command::ALL {
            if c != Command::Unknown && c != Command::Deny {
                assert!(g.contains(&format!("/{c}")), "{c} missing from\n{g}");
            }
        }
        assert!(g.contains("/deny"));
        assert!(g.contains("`@bot /stop`"));
    }

    #[test]
    fn an_unknown_id_is_quoted_without_breaking_the_markdown() {
        let t = text(
            &Answer::Nothing(Nothing::NoSuchApproval {
                given: "a`b".into(),
                pending: vec!["appr-1".into()],
            }),
            Command::Approve,
            "bot",
        );
        assert!(t.contains("`a'b`"), "{t}");
        assert!(t.contains("`appr-1`"), "{t}");
    }
}
