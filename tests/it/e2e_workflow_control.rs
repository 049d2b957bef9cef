//! Who stops, resumes and ends a workflow, on real parts (the real `codex
//! app-server`, the Gitea simulator): the agent asks its owner through
//! `request_owner_gate` and an operator answers for the owner; `/stop`
//! leaves the workflow waiting and the owner's `/cancel` ends it; a closed
//! Issue ends it before the next continuation runs.

use crate::e2e::Loop;
use crate::e2e_workflow::{complete, continuation, with_workflows, workflow, workflow_of};
use crate::fakemodel::{user_texts, Gate, Item, Step};
use crate::support::*;
use codex_bridge::domain::workflow::{GateKind, WorkflowState};
use codex_bridge::store::workflows;
use serde_json::json;

#[test]
fn e2e_the_agent_asks_its_owner_and_an_operator_answers_for_them() {
    let l = with_workflows();
    l.script_reply(l.issue, "The release is built.");
    // The continuation asks for authority the mission did not grant.
    l.model().push(Step::Reply(vec![Item::FunctionCall {
        namespace: Some("codex_bridge".into()),
        name: "request_owner_gate".into(),
        arguments: json!({
            "question": "Publish version 1.2 to the public registry?",
            "kind": "publish",
        }),
    }]));
    l.model().push(Step::message("Waiting for the owner."));
    let task = l.comment("bob", l.issue, "@ccbot prepare the 1.2 release");
    l.wait(&task, "succeeded");
    let first = continuation(&l, 1);
    l.wait(&first, "succeeded");

    let id = workflow_of(&l, &task);
    let w = workflow(&l, &id);
    assert_eq!(w.state, WorkflowState::WaitingOwner);
    let mut c = connect(&l.app.db_url);
    let gate = workflows::open_gate(&mut c, &id).unwrap().expect("a gate");
    assert_eq!(gate.kind, GateKind::Publish);
    assert!(!workflows::continuation_pending(&mut c, &id).unwrap());
    l.app.wait_for("the gate's comment", || {
        !l.bot_comments(l.issue, &format!("gate={}", gate.gate_id))
            .is_empty()
    });
    let said = l.bot_comments(l.issue, &format!("gate={}", gate.gate_id));
    assert_eq!(said.len(), 1, "{said:?}");
    let body = said[0]["body"].as_str().unwrap();
    assert!(
        body.contains("Publish version 1.2") && body.contains("@bob"),
        "{body}"
    );
    // The continuation that opened the gate posts nothing else.
    assert!(l.bot_comments(l.issue, "Waiting for the owner.").is_empty());

    // An operator answers for the owner; the same request again is the
    // same answer, never a second continuation.
    l.model().push(complete("Published 1.2."));
    l.model()
        .push(Step::message("Published 1.2 to the registry."));
    let path = format!(
        "/api/gitea-workflow/workflows/{id}/gates/{}/resume",
        gate.gate_id
    );
    let body = json!({"requestId": "r-1", "reason": "Yes, publish it.", "operator": "ops"});
    let first_answer = l.app.admin_post(&path, &body);
    assert_eq!(first_answer.status, 200, "{:?}", first_answer.json);
    let again = l.app.admin_post(&path, &body);
    assert_eq!(again.json["eventId"], first_answer.json["eventId"]);
    let second = continuation(&l, 2);
    l.wait(&second, "succeeded");
    let w = workflow(&l, &id);
    assert_eq!(w.state, WorkflowState::Completed);
    assert_eq!(w.continuations, 2);
    let asked = l
        .model()
        .requests()
        .iter()
        .any(|r| user_texts(r).iter().any(|t| t.contains("Yes, publish it.")));
    assert!(asked, "the operator's answer reached the agent");
    // The continuation that completed the workflow answers the owner.
    l.app.wait_for("the completing continuation's answer", || {
        l.bot_comments(l.issue, "Published 1.2 to the registry.")
            .len()
            == 1
    });

    // The gate was answered: a new request is refused, and the page shows
    // the gate, who answered it, and each logical input.
    let late = l.app.admin_post(
        &path,
        &json!({"requestId": "r-2", "reason": "again", "operator": "ops"}),
    );
    assert_eq!(late.status, 409, "{:?}", late.json);
    let page = l
        .app
        .admin_get(&format!("/api/gitea-workflow/workflows/{id}"));
    assert_eq!(page.status, 200);
    assert_eq!(page.json["workflow"]["state"], "completed");
    assert_eq!(page.json["gates"][0]["status"], "resumed");
    assert_eq!(page.json["gates"][0]["resumedBy"], "admin:ops");
    let turns = page.json["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 3, "{turns:?}");
    let list = l.app.admin_get(&format!(
        "/api/gitea-workflow/workflows?sessionKey={}",
        w.session_key
    ));
    assert_eq!(list.status, 200);
    assert_eq!(list.json["workflows"][0]["workflowId"], id.as_str());
}

#[test]
fn e2e_stop_leaves_the_workflow_waiting_and_the_owners_cancel_ends_it() {
    let l = with_workflows();
    // The comment's turn waits at the gate until the test has stopped it.
    let gate = Gate::new();
    l.model().push(Step::message("Working.").gated(&gate));
    let task = l.comment("bob", l.issue, "@ccbot refactor the parser");
    l.wait(&task, "running");
    let stop = l.comment("bob", l.issue, "@ccbot /stop");
    l.wait(&stop, "succeeded");
    l.wait(&task, "aborted");
    gate.open();

    let id = workflow_of(&l, &task);
    let w = workflow(&l, &id);
    assert_eq!(
        w.state,
        WorkflowState::WaitingOwner,
        "stopped, not continued"
    );
    let mut c = connect(&l.app.db_url);
    assert_eq!(
        workflows::open_gate(&mut c, &id).unwrap().map(|g| g.kind),
        Some(GateKind::Stopped)
    );
    assert_eq!(w.continuations, 0);
    assert!(!workflows::continuation_pending(&mut c, &id).unwrap());
    l.app
        .wait_for("the /stop answer, which says the workflow waits", || {
            !l.bot_comments(l.issue, "waits for its owner").is_empty()
        });
    let answer = l.bot_comments(l.issue, "waits for its owner");
    assert_eq!(answer.len(), 1, "{answer:?}");

    // The owner's /cancel ends it; nothing more runs for it.
    let cancel = l.comment("bob", l.issue, "@ccbot /cancel");
    l.wait(&cancel, "succeeded");
    let w = workflow(&l, &id);
    assert_eq!(w.state, WorkflowState::Cancelled);
    assert_eq!(w.end_code.as_deref(), Some("cancelled"));
    assert!(workflows::live(&mut c, &w.session_key).unwrap().is_none());
    assert!(workflows::open_gate(&mut c, &id).unwrap().is_none());
    l.app.wait_for("the /cancel answer", || {
        l.bot_comments(l.issue, "workflow of this thread is cancelled")
            .len()
            == 1
    });
}

#[test]
fn e2e_a_closed_issue_ends_its_workflow_before_the_next_continuation() {
    let l = with_workflows();
    // The Issue is closed while the comment's turn runs: its answer still
    // lands, and the continuation after it never starts a turn.
    let gate = Gate::new();
    l.model().push(
        Step::Reply(vec![Item::mcp(
            "gitea",
            "add_comment",
            json!({
                "owner": "acme", "repo": "widgets", "issue_number": l.issue,
                "body": "Done for now.\n\n{{marker}}",
            }),
        )])
        .gated(&gate),
    );
    l.model().push(Step::message("Done for now.\n\n{{marker}}"));
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "running");
    l.sim().close_issue("acme", "widgets", l.issue);
    gate.open();
    l.wait(&task, "succeeded");
    let requests = l.model().requests().len();

    let cont = continuation(&l, 1);
    l.wait(&cont, "cancelled");
    assert_eq!(l.detail(&cont)["task"]["errorCode"], "resource_closed");
    let id = workflow_of(&l, &task);
    let w = workflow(&l, &id);
    assert_eq!(w.state, WorkflowState::Cancelled);
    assert_eq!(w.end_code.as_deref(), Some("resource_closed"));
    assert_eq!(
        l.model().requests().len(),
        requests,
        "no turn ran for the closed Issue"
    );
    let mut c = connect(&l.app.db_url);
    assert!(!workflows::continuation_pending(&mut c, &id).unwrap());
}

/// Besides the owner, a holder of `gate_permission` (an admin by default)
/// answers a gate; a writer does not.
#[test]
fn e2e_a_holder_of_gate_permission_answers_the_gate_for_its_owner() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", "1")
            .env("CODEX_BRIDGE_WORKFLOW_MAX_IDLE_FINALS", "1")
    });
    l.script_reply(l.issue, "Started.");
    l.model().push(Step::message("Still looking."));
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "succeeded");
    let first = continuation(&l, 1);
    l.wait(&first, "succeeded");
    let id = workflow_of(&l, &task);
    assert_eq!(workflow(&l, &id).state, WorkflowState::WaitingOwner);

    for (user, perm) in [
        ("carol", crate::giteasim::Perm::Write),
        ("dave", crate::giteasim::Perm::Admin),
    ] {
        l.sim().add_user(user);
        l.sim().set_permission("acme", "widgets", user, perm);
    }
    let writer = l.comment("carol", l.issue, "@ccbot go on");
    l.wait(&writer, "rejected");
    assert_eq!(
        l.detail(&writer)["task"]["errorCode"],
        "owner_gate_required"
    );

    l.model().push(complete("Fixed."));
    l.script_reply(l.issue, "Fixed the parser.");
    let admin = l.comment("dave", l.issue, "@ccbot go on, the bug is in lex.rs");
    l.wait(&admin, "succeeded");
    let w = workflow(&l, &id);
    assert_eq!(w.state, WorkflowState::Completed);
    let mut c = connect(&l.app.db_url);
    let gates = codex_bridge::store::workflows::admin::detail(&mut c, &id)
        .unwrap()
        .unwrap()
        .gates;
    assert_eq!(gates[0].resumed_by.as_deref(), Some("dave"));
}

/// The owner's newer comment supersedes a continuation still in its
/// backoff, for good: that continuation never runs, and the workflow goes
/// on from the comment.
#[test]
fn e2e_a_pending_continuation_superseded_by_the_owners_comment_never_runs() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", "600")
    });
    l.script_reply(l.issue, "Started.");
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "succeeded");
    let pending = continuation(&l, 1);
    assert_eq!(l.detail(&pending)["task"]["state"], "queued");

    l.model().push(complete("Fixed."));
    l.script_reply(l.issue, "Fixed the parser in lex.rs.");
    let newer = l.comment("bob", l.issue, "@ccbot the bug is in lex.rs");
    l.wait(&newer, "succeeded");
    l.wait(&pending, "cancelled");
    let d = l.detail(&pending);
    assert_eq!(d["task"]["errorCode"], "superseded", "{d}");
    assert_eq!(d["turns"].as_array().map(Vec::len), Some(0), "it never ran");
    let w = workflow(&l, &workflow_of(&l, &task));
    assert_eq!(w.state, WorkflowState::Completed);
    assert_eq!(w.continuations, 1, "no continuation after the completion");
}
