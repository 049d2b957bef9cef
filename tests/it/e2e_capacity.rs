//! The model's provider turning a turn away for capacity is a wait, never
//! a failure of the work, on real parts (the server's binary, the real
//! `codex app-server`, the fake model's real 429 answers, the Gitea
//! simulator): the task whose turn was refused ends `failed`
//! (`capacity_denied`) with a receipt that says so, its workflow stays open
//! and shows why it waits and until when, a continuation carries the work
//! on after `capacity_wait_secs` (doubled for each refusal in a row), and
//! the comment is never sent again.

use crate::e2e::Loop;
use crate::e2e_workflow::{complete, continuation, workflow, workflow_of};
use crate::fakemodel::{Gate, Step};
use codex_bridge::domain::states::CapacityDenial;
use codex_bridge::domain::workflow::WorkflowState;
use serde_json::json;

fn parse_time(t: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(t)
        .unwrap_or_else(|e| panic!("{t}: {e}"))
        .to_utc()
}

#[test]
fn e2e_a_capacity_refusal_waits_and_the_workflow_continues() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", "1")
            .env("CODEX_BRIDGE_CAPACITY_WAIT_SECS", "2")
    });
    // The comment's turn: the account's usage allowance is spent. The
    // answer waits at a gate, so the test can pause the scheduling first
    // and look at the workflow while it waits.
    let gate = Gate::new();
    l.model().push(
        Step::HttpError {
            status: 429,
            body: json!({"error": {
                "type": "usage_limit_reached",
                "message": "The usage limit has been reached",
                "resets_in_seconds": 60,
            }}),
        }
        .gated(&gate),
    );
    // The first continuation: too many requests for now.
    l.model().push(Step::Failed {
        code: "rate_limit_exceeded".into(),
        message: "Rate limit reached".into(),
    });
    // The second: the work is done.
    l.model().push(complete("Fixed the parser."));
    l.model()
        .push(Step::message("Fixed the parser; the tests pass."));
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "running");
    let control = |action: &str, id: &str| {
        let r = l.app.admin_post(
            &format!("/api/gitea-workflow/control/{action}"),
            &json!({"requestId": id, "reason": "looking", "operator": "ops"}),
        );
        assert_eq!(r.status, 200, "{:?}", r.json);
    };
    control("pause", "p-1");
    gate.open();

    l.wait(&task, "failed");
    assert_eq!(l.detail(&task)["task"]["errorCode"], "capacity_denied");
    l.expect_one_receipt(&task, "failed");
    let receipt = l.receipts(&task, "failed");
    let body = receipt[0]["body"].as_str().unwrap();
    assert!(body.contains("not a failure of the work"), "{body}");
    let id = workflow_of(&l, &task);
    let w = workflow(&l, &id);
    assert_eq!(
        w.state,
        WorkflowState::Open,
        "a refusal never ends the work"
    );
    assert_eq!(w.idle_finals, 0, "a refusal is not a final");
    assert_eq!(w.continuations, 1);
    assert_eq!(w.wait_reason, Some(CapacityDenial::UsageLimit));
    // The page says why it waits and until when: the continuation's due time.
    let page = l
        .app
        .admin_get(&format!("/api/gitea-workflow/workflows/{id}"));
    assert_eq!(page.status, 200);
    assert_eq!(page.json["workflow"]["state"], "open");
    assert_eq!(page.json["workflow"]["waitReason"], "usage_limit");
    let first = continuation(&l, 1);
    assert_eq!(
        page.json["workflow"]["waitUntil"],
        l.detail(&first)["task"]["nextRetryAt"]
    );
    control("resume", "r-1");

    // The first continuation is refused too: the wait doubles.
    l.wait(&first, "failed");
    assert_eq!(l.detail(&first)["task"]["errorCode"], "capacity_denied");
    let second = continuation(&l, 2);
    let first_end = l.detail(&first)["task"]["updatedAt"]
        .as_str()
        .unwrap()
        .to_owned();
    let due = l.detail(&second)["task"]["nextRetryAt"]
        .as_str()
        .unwrap()
        .to_owned();
    let waited = parse_time(&due) - parse_time(&first_end);
    assert!(
        waited >= chrono::Duration::milliseconds(3_900),
        "the second refusal in a row waits 4 s, not {waited}"
    );
    let audit = l.detail(&second)["audit"].clone();
    let waiting = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "workflow.waiting")
        .unwrap_or_else(|| panic!("no workflow.waiting in {audit}"));
    assert_eq!(waiting["metadata"]["waitReason"], "rate_limited");
    assert_eq!(waiting["metadata"]["denials"], 2);

    // The second continuation completes the work and answers the owner.
    l.wait(&second, "succeeded");
    let w = workflow(&l, &id);
    assert_eq!(w.state, WorkflowState::Completed);
    assert_eq!(w.wait_reason, None);
    l.app.wait_for("the completing continuation's answer", || {
        l.bot_comments(l.issue, "Fixed the parser; the tests pass.")
            .len()
            == 1
    });
    // The comment reached the model once, as the newest input of one
    // request: never sent again.
    let asked = l.model().asked("fix the parser");
    assert_eq!(asked, 1);
}
