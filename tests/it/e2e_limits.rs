//! Limits on what the agent may spend, on real parts (the real `codex
//! app-server`, the fake model, the Gitea simulator): a task past its wall
//! time or its tokens is interrupted and ends `failed` (`budget_exceeded`)
//! with one receipt naming the limit, and its workflow waits for its owner
//! instead of continuing; a workflow past its turns waits too; a task at
//! its turns gets no reply-retry turn.

use crate::e2e::Loop;
use crate::e2e_workflow::{continuation, workflow, workflow_of};
use crate::fakemodel::{Gate, Step};
use crate::support::*;
use codex_bridge::domain::workflow::{GateKind, WorkflowState};
use codex_bridge::store::workflows;

fn with_limit(key: &'static str, value: &'static str) -> Loop {
    Loop::start_with(move |b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", "1")
            .env(key, value)
    })
}

/// The task ended `failed` (`budget_exceeded`) with one receipt naming
/// `limit`, and its workflow waits behind a budget gate, with no
/// continuation.
fn stopped_by(l: &Loop, task: &str, limit: &str) {
    l.wait(task, "failed");
    assert_eq!(l.detail(task)["task"]["errorCode"], "budget_exceeded");
    l.expect_one_receipt(task, "failed");
    let receipt = &l.receipts(task, "failed")[0];
    assert!(
        receipt["body"].as_str().unwrap().contains(limit),
        "{receipt}"
    );
    let mut c = connect(&l.app.db_url);
    let id = workflow_of(l, task);
    let w = workflow(l, &id);
    assert_eq!(w.state, WorkflowState::WaitingOwner);
    assert_eq!(w.continuations, 0, "no continuation after a budget hit");
    let gate = workflows::open_gate(&mut c, &id).unwrap().expect("a gate");
    assert_eq!(gate.kind, GateKind::Budget);
}

#[test]
fn e2e_a_task_past_its_wall_time_is_stopped_and_its_workflow_waits() {
    let l = with_limit("CODEX_BRIDGE_MAX_TASK_SECS", "2");
    // The turn would go on until the test opens the gate, long after.
    let gate = Gate::new();
    l.model().push(Step::message("Done.").gated(&gate));
    let task = l.comment("bob", l.issue, "@ccbot refactor everything");
    stopped_by(&l, &task, "max_task_secs");
    gate.open();
}

#[test]
fn e2e_a_task_past_its_tokens_is_stopped_and_its_workflow_waits() {
    // Each model request reports 15 tokens: the second passes 20.
    let l = with_limit("CODEX_BRIDGE_MAX_TOKENS_PER_TASK", "20");
    let gate = Gate::new();
    l.model().push(Step::shell("true"));
    l.model().push(Step::shell("true"));
    l.model().push(Step::message("Done.").gated(&gate));
    let task = l.comment("bob", l.issue, "@ccbot refactor everything");
    stopped_by(&l, &task, "max_tokens_per_task");
    gate.open();
}

#[test]
fn e2e_a_workflow_past_its_turns_waits_for_its_owner() {
    let l = with_limit("CODEX_BRIDGE_MAX_TURNS_PER_WORKFLOW", "2");
    l.script_reply(l.issue, "Started.");
    l.model().push(Step::message("Still going."));
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "succeeded");
    let first = continuation(&l, 1);
    l.wait(&first, "succeeded");
    let mut c = connect(&l.app.db_url);
    let id = workflow_of(&l, &task);
    let w = workflow(&l, &id);
    assert_eq!(w.state, WorkflowState::WaitingOwner);
    assert_eq!(w.continuations, 1, "no continuation past the limit");
    let gate = workflows::open_gate(&mut c, &id).unwrap().expect("a gate");
    assert_eq!(gate.kind, GateKind::Budget);
    // Operators see the usage against the limit, on the workflow's page and
    // in the overview.
    let page = l
        .app
        .admin_get(&format!("/api/gitea-workflow/workflows/{id}"));
    assert_eq!(page.json["usage"]["turns"], 2, "{:?}", page.json);
    assert_eq!(page.json["usage"]["maxTurnsPerWorkflow"], 2);
    let overview = l.app.admin_get("/api/gitea-workflow/overview");
    let limit = &overview.json["limits"]["max_turns_per_workflow"];
    assert_eq!(limit["limit"], 2, "{limit}");
    assert_eq!(limit["highest"]["who"], id.as_str(), "{limit}");
    assert_eq!(limit["highest"]["used"], 2, "{limit}");
    l.app.wait_for("the gate's comment, naming the limit", || {
        l.bot_comments(l.issue, &format!("gate={}", gate.gate_id))
            .iter()
            .any(|c| {
                c["body"]
                    .as_str()
                    .unwrap_or("")
                    .contains("max_turns_per_workflow")
            })
    });
}

/// `max_turns_per_task` counts the reply-retry turn: a task whose one turn
/// it may take left no reply gets no second turn; the answer its turn left
/// is posted through the REST fallback instead.
#[test]
fn e2e_a_task_at_its_turns_gets_no_reply_retry_turn() {
    let l = with_limit("CODEX_BRIDGE_MAX_TURNS_PER_TASK", "1");
    // The agent answers but never posts its reply.
    l.script_silent("The parser is fixed.");
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "succeeded_with_rest_fallback");
    let d = l.detail(&task);
    assert_eq!(d["turns"].as_array().map(Vec::len), Some(1), "{d}");
    assert_eq!(d["task"]["replyAttempt"], 0, "no reply-retry turn");
    assert_eq!(l.model().requests().len(), 1, "the model was asked once");
    assert_eq!(d["turns"][0]["idleAt"], serde_json::Value::Null, "{d}");
    assert_eq!(
        l.bot_comments(l.issue, "The parser is fixed.").len(),
        1,
        "the turn's answer, posted by the bridge"
    );
}
