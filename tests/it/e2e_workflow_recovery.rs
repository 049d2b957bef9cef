//! A workflow survives `kill -9`, on real parts (the server's binary, the
//! real `codex app-server`, the fake model, the Gitea simulator): killed
//! during a turn, the work goes on in a new continuation and the comment is
//! never replayed; killed during a continuation's backoff, that one
//! continuation runs once; killed after a gate was posted, the workflow
//! still waits for its owner, and the gate is not posted again; killed
//! with the owner's answer accepted but not run, the answer resumes the
//! workflow once after the restart.

use crate::e2e::Loop;
use crate::e2e_workflow::{complete, continuation, workflow, workflow_of};
use crate::fakemodel::{Gate, Item, Step};
use crate::support::*;
use codex_bridge::domain::workflow::WorkflowState;
use codex_bridge::store::workflows;
use serde_json::json;

fn start(backoff: &'static str, max_idle_finals: &'static str) -> Loop {
    Loop::start_with(move |b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", backoff)
            .env("CODEX_BRIDGE_WORKFLOW_MAX_IDLE_FINALS", max_idle_finals)
    })
}

#[test]
fn e2e_killed_during_a_turn_the_workflow_continues_without_replaying_the_comment() {
    let mut l = start("1", "65");
    let gate = Gate::new();
    l.model().push(Step::message("Half done.").gated(&gate));
    let task = l.comment("bob", l.issue, "@ccbot migrate the parser");
    l.wait(&task, "running");
    l.model()
        .wait_for_requests(1, std::time::Duration::from_secs(90));
    l.app.kill9();
    l.model().push(complete("Parser migrated."));
    l.model().push(Step::message("The parser is migrated."));
    l.app.start_again();
    gate.open();

    // The cut turn ends the task; the work goes on in a continuation.
    l.wait(&task, "failed");
    assert_eq!(
        l.detail(&task)["task"]["errorCode"],
        "interrupted_by_restart"
    );
    let cont = continuation(&l, 1);
    l.wait(&cont, "succeeded");
    let w = workflow(&l, &workflow_of(&l, &task));
    assert_eq!(w.state, WorkflowState::Completed);
    // The comment reached the model once: never replayed.
    let asked = l.model().asked("migrate the parser");
    assert_eq!(asked, 1, "the comment was sent once");
    assert_eq!(l.detail(&task)["turns"].as_array().map(Vec::len), Some(1));
}

#[test]
fn e2e_killed_during_a_continuations_backoff_that_continuation_runs_once() {
    let mut l = start("4", "65");
    l.script_reply(l.issue, "Started.");
    l.model().push(complete("Done."));
    l.model().push(Step::message("All done."));
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "succeeded");
    let cont = continuation(&l, 1);
    assert_eq!(
        l.detail(&cont)["task"]["state"],
        "queued",
        "still in its backoff"
    );
    l.app.kill9();
    l.app.start_again();

    l.wait(&cont, "succeeded");
    let w = workflow(&l, &workflow_of(&l, &task));
    assert_eq!(w.state, WorkflowState::Completed);
    assert_eq!(w.continuations, 1, "one continuation, not a second one");
    assert_eq!(l.detail(&cont)["turns"].as_array().map(Vec::len), Some(1));
}

#[test]
fn e2e_killed_after_a_gate_was_posted_the_workflow_still_waits_for_its_owner() {
    let mut l = start("1", "1");
    l.script_reply(l.issue, "Started.");
    l.model().push(Step::message("Still looking."));
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "succeeded");
    let cont = continuation(&l, 1);
    l.wait(&cont, "succeeded");
    let id = workflow_of(&l, &task);
    let gate = {
        let mut c = connect(&l.app.db_url);
        workflows::open_gate(&mut c, &id).unwrap().expect("a gate")
    };
    let marker = format!("gate={}", gate.gate_id);
    l.app.wait_for("the gate's comment", || {
        !l.bot_comments(l.issue, &marker).is_empty()
    });
    l.app.kill9();
    l.app.start_again();

    // Nothing runs on its own after the restart, and the gate is not
    // posted again: the owner's comment resumes it, once.
    l.model().push(complete("Fixed."));
    l.script_reply(l.issue, "Fixed the parser.");
    let resume = l.comment("bob", l.issue, "@ccbot the bug is in lex.rs");
    l.wait(&resume, "succeeded");
    let w = workflow(&l, &id);
    assert_eq!(w.state, WorkflowState::Completed);
    assert_eq!(w.continuations, 1, "no continuation while it waited");
    assert_eq!(l.bot_comments(l.issue, &marker).len(), 1);
    let mut c = connect(&l.app.db_url);
    let gates = codex_bridge::store::workflows::admin::detail(&mut c, &id)
        .unwrap()
        .unwrap()
        .gates;
    assert_eq!(gates.len(), 1);
    assert_eq!(gates[0].status, "resumed");
    assert_eq!(
        gates[0].resumed_by_task.as_ref().map(|t| t.to_string()),
        Some(resume)
    );
}

/// The owner's answer, accepted while the workflow waits behind a gate
/// that cancelled the pending continuation, survives `kill -9` before it
/// ran: after the restart it is the workflow's next input and resumes it
/// once; the cancelled continuation stays cancelled.
#[test]
fn e2e_killed_before_the_owners_answer_ran_it_resumes_the_gated_workflow_once() {
    let mut l = start("600", "65");
    l.script_reply(l.issue, "Started.");
    let task = l.comment("bob", l.issue, "@ccbot prepare the 1.2 release");
    l.wait(&task, "succeeded");
    let pending = continuation(&l, 1);
    assert_eq!(l.detail(&pending)["task"]["state"], "queued");

    // A writer's comment is an ordinary input; its turn asks the owner for
    // authority, and the gate cancels the pending continuation.
    l.sim().add_user("carol");
    l.sim()
        .set_permission("acme", "widgets", "carol", crate::giteasim::Perm::Write);
    l.model().push(Step::Reply(vec![Item::FunctionCall {
        namespace: Some("codex_bridge".into()),
        name: "request_owner_gate".into(),
        arguments: json!({"question": "Publish 1.2 to the registry?", "kind": "publish"}),
    }]));
    l.script_reply(l.issue, "I asked the owner.");
    let other = l.comment("carol", l.issue, "@ccbot publish it now");
    l.wait(&other, "succeeded");
    let id = workflow_of(&l, &task);
    assert_eq!(workflow(&l, &id).state, WorkflowState::WaitingOwner);
    let d = l.detail(&pending);
    assert_eq!(d["task"]["state"], "cancelled", "{d}");
    assert_eq!(d["task"]["errorCode"], "superseded", "{d}");

    // The owner answers while nothing may start; the process dies with the
    // answer accepted and queued.
    let control = |l: &Loop, action: &str, request: &str| {
        let r = l.app.admin_post(
            &format!("/api/gitea-workflow/control/{action}"),
            &json!({"requestId": request, "reason": "maintenance", "operator": "ops"}),
        );
        assert_eq!(r.status, 200, "{:?}", r.json);
    };
    control(&l, "pause", "p-1");
    let answer = l.comment("bob", l.issue, "@ccbot yes, publish 1.2");
    assert_eq!(l.detail(&answer)["task"]["state"], "queued");
    l.app.kill9();
    l.app.start_again();
    assert_eq!(l.detail(&answer)["task"]["state"], "queued");
    assert_eq!(workflow(&l, &id).state, WorkflowState::WaitingOwner);

    l.model().push(complete("Published 1.2."));
    l.script_reply(l.issue, "Published 1.2 to the registry.");
    control(&l, "resume", "r-1");
    l.wait(&answer, "succeeded");
    let w = workflow(&l, &id);
    assert_eq!(w.state, WorkflowState::Completed);
    assert_eq!(
        w.continuations, 1,
        "no continuation besides the cancelled one"
    );
    let mut c = connect(&l.app.db_url);
    let gates = workflows::admin::detail(&mut c, &id)
        .unwrap()
        .unwrap()
        .gates;
    assert_eq!(gates.len(), 1);
    assert_eq!(
        gates[0].resumed_by_task.as_ref().map(|t| t.to_string()),
        Some(answer.clone())
    );
    let resumed = count_where(
        &mut c,
        "audit_events",
        &format!("action = 'workflow.resumed' AND task_id = '{answer}'"),
    );
    assert_eq!(resumed, 1, "resumed once");
    let d = l.detail(&pending);
    assert_eq!(d["task"]["state"], "cancelled");
    assert_eq!(d["turns"].as_array().map(Vec::len), Some(0), "it never ran");
    let asked = l.model().asked("yes, publish 1.2");
    assert!(asked >= 1, "the answer reached the agent");
    assert_eq!(
        l.detail(&answer)["turns"].as_array().map(Vec::len),
        Some(1),
        "one turn for the answer"
    );
}
