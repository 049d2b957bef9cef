//! A continuation that has not reached the agent is fenced by every step
//! that supersedes it, on real parts (the server's binary, the real `codex
//! app-server`, the fake model, the Gitea simulator with its faults): one
//! waiting out its transport retries is superseded by its owner's newer
//! comment, which runs at once rather than behind it, and cancelled by the
//! workflow's cancel; one already leased when its workflow is cancelled is
//! refused in the transaction that would have recorded its turn's intent.

use crate::e2e::Loop;
use crate::e2e_workflow::{complete, continuation, workflow, workflow_of};
use crate::support::*;
use codex_bridge::domain::workflow::WorkflowState;
use serde_json::json;
use std::time::Duration;

const ISSUE_PATH: &str = "/api/v1/repos/acme/widgets/issues/1";

/// A workflow whose first continuation (due 2 s after the comment's turn)
/// cannot tell whether its Issue is open: it waits in `retry_wait` for
/// ten minutes. The comment's task and the continuation's.
fn continuation_waiting_on_retries() -> (Loop, String, String) {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", "2")
            .env("CODEX_BRIDGE_RETRY_BACKOFF_SECS", "600")
    });
    assert_eq!(l.issue, 1, "the faults name Issue 1");
    l.script_reply(l.issue, "Started.");
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "succeeded");
    // Every attempt of the client's read of the Issue fails.
    l.sim().fail_next_exact(3, "GET", ISSUE_PATH);
    let cont = continuation(&l, 1);
    l.wait(&cont, "retry_wait");
    let d = l.detail(&cont);
    assert_eq!(d["task"]["errorCode"], "permission_unknown", "{d}");
    (l, task, cont)
}

/// The owner's newer comment does not wait behind a continuation that
/// waits out its transport retries: it runs at once as the workflow's next
/// input, and the transaction that admits it cancels the continuation for
/// good, so it never runs after it.
#[test]
fn e2e_the_owners_comment_supersedes_a_continuation_waiting_on_its_retries() {
    let (l, task, cont) = continuation_waiting_on_retries();
    l.model().push(complete("Fixed."));
    l.script_reply(l.issue, "Fixed the parser in lex.rs.");
    let newer = l.comment("bob", l.issue, "@ccbot the bug is in lex.rs");
    l.wait(&newer, "succeeded");
    // Terminal: it can never run later, whatever its retry time said.
    let d = l.detail(&cont);
    assert_eq!(d["task"]["state"], "cancelled", "{d}");
    assert_eq!(d["task"]["errorCode"], "superseded", "{d}");
    assert_eq!(d["turns"].as_array().map(Vec::len), Some(0), "it never ran");
    let w = workflow(&l, &workflow_of(&l, &task));
    assert_eq!(w.state, WorkflowState::Completed);
    assert_eq!(w.continuations, 1, "no continuation after the completion");
}

/// An operator's cancel of the workflow cancels its continuation that
/// waits out its transport retries, in the same transaction.
#[test]
fn e2e_cancelling_a_workflow_cancels_its_continuation_waiting_on_its_retries() {
    let (l, task, cont) = continuation_waiting_on_retries();
    let id = workflow_of(&l, &task);
    let r = l.app.admin_post(
        &format!("/api/gitea-workflow/workflows/{id}/cancel"),
        &json!({"requestId": "c-1", "reason": "wrong approach", "operator": "ops"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    // No wait: the cancel's own transaction ended it.
    let d = l.detail(&cont);
    assert_eq!(d["task"]["state"], "cancelled", "{d}");
    assert_eq!(d["task"]["errorCode"], "superseded", "{d}");
    assert_eq!(workflow(&l, &id).state, WorkflowState::Cancelled);
}

/// A continuation leased (past its permission check, reading its context
/// from a slow Gitea) when its workflow is cancelled never starts a turn:
/// the transaction that would record its intent refuses it.
#[test]
fn e2e_a_continuation_leased_when_its_workflow_is_cancelled_starts_no_turn() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", "2")
    });
    l.script_reply(l.issue, "Started.");
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "succeeded");
    let requests = l.model().requests().len();
    // The continuation reads its Issue twice, slowly: whether it is open
    // (its permission check), then for its prompt.
    l.sim()
        .delay_next_exact(2, "GET", ISSUE_PATH, Duration::from_secs(4));
    let cont = continuation(&l, 1);
    // Its thread's terms are decided once its checks passed, before its
    // prompt's context is read.
    wait_until("the continuation's checks", Duration::from_secs(60), || {
        crate::e2e::actions(&l.detail(&cont))
            .iter()
            .any(|a| a == "thread.trust")
    });
    assert_eq!(l.detail(&cont)["task"]["state"], "leased");
    let id = workflow_of(&l, &task);
    let r = l.app.admin_post(
        &format!("/api/gitea-workflow/workflows/{id}/cancel"),
        &json!({"requestId": "c-1", "reason": "wrong approach", "operator": "ops"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    l.wait(&cont, "cancelled");
    let d = l.detail(&cont);
    assert_eq!(d["task"]["errorCode"], "superseded", "{d}");
    assert_eq!(d["turns"].as_array().map(Vec::len), Some(0), "no turn");
    assert_eq!(
        l.model().requests().len(),
        requests,
        "the model was not asked"
    );
    assert_eq!(workflow(&l, &id).state, WorkflowState::Cancelled);
}
