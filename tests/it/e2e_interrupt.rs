//! `/interrupt` and `/replace` on real parts: the Gitea simulator sends the
//! webhooks, the real `codex app-server` runs the turn that is stopped (its
//! model stream held open by the fake model) and the message's own turn.
//! What Codex kept is read back from its own history by a second app-server
//! on the same `CODEX_HOME`: an interrupted turn stays in the thread, a
//! replaced one is gone from `thread/turns/list`, and the model's next
//! request shows the same.

use crate::codexhome::codex_bin;
use crate::e2e::Loop;
use crate::fakemodel::{user_texts, Step};
use codex_bridge::agent::{Agent, TurnLookup};
use codex_bridge::codex::{developer_instructions, notice_channel, CodexAgent, CodexSettings};
use serde_json::Value;
use std::time::Duration;

/// What the thread's history says of one operation, as Codex keeps it on
/// disk (read by an app-server of its own, so the bridge's is not touched).
pub fn history(l: &Loop, thread: &str, operation: &str) -> TurnLookup {
    let reader = CodexAgent::new(
        CodexSettings {
            codex_bin: codex_bin(),
            codex_home: l.app.codex_home(),
            developer_instructions: developer_instructions("ccbot"),
            thread_config: serde_json::Map::new(),
            env: Vec::new(),
            request_timeout: Duration::from_secs(30),
            nice: 0,
            workflow_tools: false,
        },
        notice_channel().0,
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let found = rt
        .block_on(reader.lookup_turn(thread, operation))
        .expect("the thread's history is readable");
    rt.block_on(reader.kill_process());
    found
}

/// The first model request that carries `text`, as the user texts it sent.
pub fn request_with(l: &Loop, text: &str) -> Vec<String> {
    l.model()
        .requests()
        .iter()
        .map(user_texts)
        .find(|texts| texts.iter().any(|t| t.contains(text)))
        .unwrap_or_else(|| panic!("no model request carries {text:?}"))
}

/// `/interrupt just fix the flaky test` (task `now`) stopped the long run
/// (`running`) and ran next: the stopped task superseded, the new one an
/// `interrupt-running` entry naming it, and the stopped turn kept in the
/// conversation (the new turn's model request still carries its
/// instruction). Returns both tasks' details.
pub fn interrupted_and_next_ran(l: &Loop, running: &str, now: &str) -> (Value, Value) {
    l.wait(running, "aborted");
    l.wait(now, "succeeded");
    let r = l.detail(running);
    assert_eq!(r["task"]["errorCode"], "superseded", "{r}");
    let n = l.detail(now);
    assert_eq!(n["outbox"]["mode"], "interrupt-running", "{n}");
    assert_eq!(n["outbox"]["supersedes"], running, "{n}");
    let texts = request_with(l, "just fix the flaky test");
    assert!(
        texts.iter().any(|t| t.contains("rewrite the whole parser")),
        "{texts:?}"
    );
    (r, n)
}

pub fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Starts a turn that runs until stopped; returns its task.
pub fn long_run(l: &Loop) -> String {
    l.model().push(Step::Hang);
    let running = l.comment("bob", l.issue, "@ccbot rewrite the whole parser");
    l.wait(&running, "running");
    l.model().wait_for_requests(1, Duration::from_secs(60));
    running
}

#[test]
fn e2e_an_interrupt_stops_the_real_turn_and_runs_next_with_the_history_kept() {
    let l = Loop::start();
    let running = long_run(&l);
    l.script_reply(l.issue, "Fixed only the flaky test.");
    let now = l.comment("bob", l.issue, "@ccbot /interrupt just fix the flaky test");
    let (r, n) = interrupted_and_next_ran(&l, &running, &now);
    let thread = text(&n["task"]["threadId"]);
    let stopped = history(&l, &thread, &text(&r["outbox"]["operationId"]));
    assert_eq!(
        stopped,
        TurnLookup::Interrupted {
            turn_id: text(&r["task"]["turnId"])
        }
    );
    l.expect_one_receipt(&running, "aborted");
}

#[test]
fn e2e_a_replace_drops_the_stopped_turn_from_the_real_thread() {
    let l = Loop::start();
    let running = long_run(&l);
    l.script_reply(l.issue, "Started over, smaller.");
    let replace = l.comment("bob", l.issue, "@ccbot /replace start over, smaller");
    l.wait(&running, "aborted");
    l.wait(&replace, "succeeded");

    let r = l.detail(&running);
    let n = l.detail(&replace);
    assert_eq!(r["task"]["errorCode"], "superseded", "{r}");
    assert_eq!(n["outbox"]["revertTurnId"], r["task"]["turnId"], "{n}");
    assert_eq!(n["outbox"]["intent"], "replace-latest", "{n}");
    assert_eq!(n["outbox"]["sendMode"], "interrupt-running", "{n}");
    assert!(n["outbox"]["expectedActiveRunId"].is_null(), "{n}");
    assert!(n["outbox"]["revertedAt"].is_string(), "{n}");
    // Gone from what the model sees…
    let texts = request_with(&l, "start over, smaller");
    assert!(
        !texts.iter().any(|t| t.contains("rewrite the whole parser")),
        "{texts:?}"
    );
    // …and from Codex's own history, while the new turn is there.
    let thread = text(&n["task"]["threadId"]);
    assert_eq!(
        history(&l, &thread, &text(&r["outbox"]["operationId"])),
        TurnLookup::Missing
    );
    assert!(matches!(
        history(&l, &thread, &text(&n["outbox"]["operationId"])),
        TurnLookup::Completed { .. }
    ));
    // One comment says the files stay as they are.
    l.wait_receipts(&replace);
    let db = l.app.db_url.clone();
    l.app.wait_for("the revert's answer posted", || {
        let mut c = crate::support::connect(&db);
        crate::support::count_where(
            &mut c,
            "comments",
            "kind = 'answer' AND status IN ('pending', 'posting')",
        ) == 0
    });
    let said = l.bot_comments(l.issue, &format!("receipt={replace}:reverted"));
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(text(&said[0]["body"]).contains("Files it changed stay"));
}
