//! The scripts the scripted runtime plays: the steps of a turn, how its
//! `start_turn` answers, and how a script is read from `[directives]` in an
//! instruction (for a whole server run with `agent_runtime = scripted`,
//! which no test can hand a script book).

use std::time::Duration;

/// One step of a turn.
#[derive(Debug, Clone)]
pub enum Step {
    /// Emit a progress event.
    Progress(&'static str),
    /// The thread settles idle though the turn goes on (a status the
    /// provider sent early): a candidate final that later activity voids.
    Idle,
    Sleep(Duration),
    /// Finish with this final text.
    Complete(String),
    Fail(String),
    /// Never finish (until interrupted).
    Hang,
    /// Never finish, and ignore interrupts (an app-server that does not confirm).
    Stubborn,
    /// Ask for an approval of this kind and wait for the decision.
    AskApproval(&'static str),
    /// Call one of the bridge's tools with these arguments and wait for the
    /// answer.
    CallTool(&'static str, serde_json::Value),
    /// The consumer of the events panics when it reads this point (a fault
    /// inside the session actor); the turn itself goes on.
    PanicConsumer,
    /// The event stream ends here without an end event (an error in the
    /// actor's connection to the turn); the turn itself goes on.
    DropStream,
}

/// How `start_turn` itself answers before any step runs.
#[derive(Debug, Clone)]
pub enum StartBehaviour {
    Accept,
    Unavailable,
    Uncertain,
    /// Take this long to answer.
    Slow(Duration),
}

#[derive(Debug, Clone)]
pub struct Script {
    pub start: StartBehaviour,
    pub steps: Vec<Step>,
}

impl Script {
    pub fn complete(text: &str) -> Script {
        Script {
            start: StartBehaviour::Accept,
            steps: vec![
                Step::Progress("agentMessage"),
                Step::Complete(text.to_owned()),
            ],
        }
    }

    pub fn steps(steps: Vec<Step>) -> Script {
        Script {
            start: StartBehaviour::Accept,
            steps,
        }
    }
}

/// The commenter's instruction inside a turn prompt (the `<comment …>`
/// section the session actor wraps it in), or the whole prompt.
pub fn instruction(prompt: &str) -> &str {
    let Some(start) = prompt.find("<comment author=") else {
        return prompt;
    };
    let rest = &prompt[start..];
    let Some(open_end) = rest.find(">\n") else {
        return prompt;
    };
    let body = &rest[open_end + 2..];
    match body.rfind("\n</comment>") {
        Some(end) => &body[..end],
        None => prompt,
    }
}

/// Reads `[name:arg:arg]` directives from an instruction.
pub(crate) fn directive_args<'a>(text: &'a str, name: &str) -> Option<Vec<&'a str>> {
    let open = format!("[{name}");
    let start = text.find(&open)?;
    let rest = &text[start + 1..];
    let end = rest.find(']')?;
    let inner = &rest[..end];
    let mut parts = inner.split(':');
    (parts.next() == Some(name)).then(|| parts.collect())
}

fn millis(arg: Option<&&str>) -> Duration {
    Duration::from_millis(arg.and_then(|a| a.parse().ok()).unwrap_or(1000))
}

/// The script an instruction's directives describe: `[start:slow:MS]`,
/// `[start:unavailable]`, `[start:uncertain]`, `[sleep:MS]`, `[fail]`, `[hang]`,
/// `[stubborn]` (hangs and ignores interrupts);
/// the final text repeats any `[verify:…]` directive for the scripted verifier.
pub fn script_from_directives(text: &str) -> Script {
    let start = match directive_args(text, "start").as_deref() {
        Some(["slow", ms, ..]) => StartBehaviour::Slow(millis(Some(ms))),
        Some(["unavailable", ..]) => StartBehaviour::Unavailable,
        Some(["uncertain", ..]) => StartBehaviour::Uncertain,
        _ => StartBehaviour::Accept,
    };
    let mut steps = vec![Step::Progress("agentMessage")];
    if let Some(args) = directive_args(text, "sleep") {
        steps.push(Step::Sleep(millis(args.first())));
    }
    if let Some(args) = directive_args(text, "approval") {
        steps.push(Step::AskApproval(match args.first() {
            Some(&"file_change") => "file_change",
            _ => "command",
        }));
    }
    if directive_args(text, "stubborn").is_some() {
        steps.push(Step::Stubborn);
    } else if directive_args(text, "hang").is_some() {
        steps.push(Step::Hang);
    } else if directive_args(text, "fail").is_some() {
        steps.push(Step::Fail("scripted failure".into()));
    } else {
        let verify = directive_args(text, "verify")
            .map(|a| format!(" [verify:{}]", a.join(":")))
            .unwrap_or_default();
        steps.push(Step::Complete(format!("done{verify}")));
    }
    Script { start, steps }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_choose_the_script() {
        let s = script_from_directives("@bot do it [start:slow:250] [sleep:40] [verify:slow:500]");
        assert!(matches!(s.start, StartBehaviour::Slow(d) if d == Duration::from_millis(250)));
        assert!(matches!(s.steps[1], Step::Sleep(d) if d == Duration::from_millis(40)));
        assert!(matches!(&s.steps[2], Step::Complete(t) if t == "done [verify:slow:500]"));
        assert!(matches!(
            script_from_directives("[hang]").steps[1],
            Step::Hang
        ));
        assert!(matches!(
            script_from_directives("[start:uncertain]").start,
            StartBehaviour::Uncertain
        ));
        assert!(matches!(
            script_from_directives("plain").steps[1],
            Step::Complete(_)
        ));
        let asks = script_from_directives("@bot please [approval]");
        assert!(matches!(asks.steps[1], Step::AskApproval("command")));
        assert!(matches!(asks.steps[2], Step::Complete(_)));
        assert!(matches!(
            script_from_directives("[approval:file_change]").steps[1],
            Step::AskApproval("file_change")
        ));
    }
}
