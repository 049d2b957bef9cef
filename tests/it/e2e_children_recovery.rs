//! Children's rarer paths on real parts: a handoff's parent waits and
//! resumes with the same child; a child that never records a result gets
//! its bounded recovery, then one `incomplete` result; a delivery whose
//! parent ended is terminalised and its acknowledgement refused; and
//! `kill -9` after a result is recorded, after it was delivered but before
//! its acknowledgement, and during a handoff, each with its recovery rule.

use crate::e2e::Loop;
use crate::e2e_children::{call, child_turn, wait_workflow};
use crate::e2e_workflow::{continuation, workflow_of};
use crate::fakemodel::{tool_outputs, Gate, Step};
use crate::support::*;
use codex_bridge::domain::workflow::children::ChildMode;
use codex_bridge::domain::workflow::results::DeliveryState;
use codex_bridge::domain::workflow::WorkflowState;
use codex_bridge::store::workflows::{children, results};
use serde_json::json;
use std::time::Duration;

fn start(recovery: &'static str) -> Loop {
    Loop::start_with(move |b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", "1")
            .env("CODEX_BRIDGE_CHILD_RECOVERY_ATTEMPTS", recovery)
    })
}

/// The parent's turns after a result: acknowledge it, complete, answer.
fn ack_and_complete(l: &Loop, answer: &str) {
    l.model()
        .push(call("ack_result", json!({"resultId": "{{result}}"})));
    l.model()
        .push(call("complete_workflow", json!({"summary": answer})));
    l.model().push(Step::message(answer));
}

fn kids(
    l: &Loop,
    id: &codex_bridge::domain::WorkflowId,
) -> Vec<codex_bridge::store::workflows::Workflow> {
    let mut c = connect(&l.app.db_url);
    children::of(&mut c, id).unwrap()
}

fn listed(l: &Loop, id: &codex_bridge::domain::WorkflowId) -> Vec<results::ResultView> {
    let mut c = connect(&l.app.db_url);
    results::list(&mut c, id).unwrap()
}

/// Every tool output the model was shown that holds `needle`.
fn outputs_with(l: &Loop, needle: &str) -> Vec<String> {
    l.model()
        .requests()
        .iter()
        .flat_map(tool_outputs)
        .map(|(_, v)| v.to_string())
        .filter(|o| o.contains(needle))
        .collect()
}

#[test]
fn e2e_a_handoffs_parent_waits_for_its_child_and_resumes_with_its_result() {
    let l = start("2");
    let gate = Gate::new();
    l.model().push(call(
        "handoff_child",
        json!({"title": "Bisect", "instructions": "TASK-BISECT: find the commit that broke it"}),
    ));
    l.script_reply(l.issue, "Handed the bisect over; waiting for it.");
    l.model()
        .push_for("TASK-BISECT", Step::shell("echo BISECTED").gated(&gate));
    l.model().push_for(
        "TASK-BISECT",
        call(
            "record_result",
            json!({"summary": "BISECT-RESULT: commit abc123 broke it"}),
        ),
    );
    l.model()
        .push_for("TASK-BISECT", Step::message("Recorded."));
    ack_and_complete(&l, "Reverted abc123; the parser works again.");

    let task = l.comment("bob", l.issue, "@ccbot find what broke the parser");
    l.wait(&task, "succeeded");
    let id = workflow_of(&l, &task);
    // While the child works, the parent waits and runs nothing.
    let w = wait_workflow(&l, &id, WorkflowState::WaitingChild);
    assert_eq!(w.continuations, 0);
    gate.open();

    let w = wait_workflow(&l, &id, WorkflowState::Completed);
    assert_eq!(w.continuations, 1, "one continuation carried the result");
    let k = kids(&l, &id);
    assert_eq!(k.len(), 1, "the same child, never a second");
    assert_eq!(k[0].child_mode, Some(ChildMode::Handoff));
    let r = listed(&l, &id);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].delivery.state, DeliveryState::Acknowledged);
    assert!(
        l.model().asked("BISECT-RESULT") >= 1,
        "the result reached the parent"
    );
}

#[test]
fn e2e_a_child_without_a_result_is_asked_again_then_gives_one_incomplete_result() {
    let l = start("1");
    l.model().push(call(
        "assign_child",
        json!({"title": "Docs", "instructions": "TASK-LAZY: write the docs"}),
    ));
    l.script_reply(l.issue, "A child writes the docs.");
    // Its turn and its one recovery turn end without record_result.
    l.model()
        .push_for("TASK-LAZY", Step::message("I believe the docs are fine."));
    l.model()
        .push_for("TASK-LAZY", Step::message("Still nothing to record."));
    ack_and_complete(&l, "The docs child gave up; noted in the summary.");

    let task = l.comment("bob", l.issue, "@ccbot write the docs");
    l.wait(&task, "succeeded");
    let id = workflow_of(&l, &task);
    wait_workflow(&l, &id, WorkflowState::Completed);

    let k = kids(&l, &id);
    assert_eq!(k.len(), 1);
    assert_eq!(k[0].state, WorkflowState::Failed);
    assert_eq!(k[0].end_code.as_deref(), Some("incomplete"));
    assert_eq!(k[0].recovered, 1, "its one recovery turn");
    assert_eq!(
        l.model().asked("without calling record_result"),
        1,
        "asked again once"
    );
    let r = listed(&l, &id);
    assert_eq!(r.len(), 1, "one incomplete result, queued once");
    assert!(r[0].incomplete);
    assert_eq!(r[0].delivery.state, DeliveryState::Acknowledged);
    assert!(
        r[0].report.blockers.iter().any(|b| b.contains("no result")),
        "{r:?}"
    );
    // The parent read it as incomplete: no success was invented.
    assert!(l.model().asked("\"incomplete\": true") >= 1);
}

#[test]
fn e2e_a_delivery_whose_parent_ended_is_terminalised_and_its_acknowledgement_refused() {
    let l = start("2");
    let gate = Gate::new();
    l.model().push(call(
        "assign_child",
        json!({"title": "Impl", "instructions": "TASK-STALE: implement it"}),
    ));
    l.script_reply(l.issue, "Delegated.");
    child_turn(
        &l,
        "TASK-STALE",
        "echo IMPLEMENTED",
        json!({"summary": "STALE-RESULT: implemented"}),
    );
    // The parent's continuation carries the result, then waits while an
    // operator cancels the workflow; its acknowledgement comes after.
    l.model()
        .push(call("ack_result", json!({"resultId": "{{result}}"})).gated(&gate));
    l.model().push(Step::message("Acknowledged."));

    let task = l.comment("bob", l.issue, "@ccbot implement it");
    l.wait(&task, "succeeded");
    let id = workflow_of(&l, &task);
    wait_until("the result delivered", Duration::from_secs(90), || {
        listed(&l, &id)
            .first()
            .is_some_and(|r| r.delivery.state == DeliveryState::Delivered)
    });
    let r = l.app.admin_post(
        &format!("/api/gitea-workflow/workflows/{id}/cancel"),
        &json!({"requestId": "c-1", "reason": "not needed any more", "operator": "ops"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    let r = listed(&l, &id);
    assert_eq!(r[0].delivery.state, DeliveryState::Terminalised);
    assert_eq!(r[0].delivery.workflow_id, id, "never bound elsewhere");
    gate.open();
    wait_until(
        "the refused acknowledgement",
        Duration::from_secs(90),
        || !outputs_with(&l, "ended with the workflow it was bound to").is_empty(),
    );
    assert_eq!(
        listed(&l, &id)[0].delivery.state,
        DeliveryState::Terminalised
    );
}

/// `kill -9` after the child recorded its result, before the parent's
/// turn carried it: after the restart the pending delivery reaches the
/// parent, which acknowledges it once; the child's turn is not run again.
#[test]
fn e2e_killed_after_a_result_was_recorded_it_is_delivered_once_the_server_is_back() {
    let mut l = start("2");
    let gate = Gate::new();
    l.model().push(call(
        "assign_child",
        json!({"title": "Impl", "instructions": "TASK-K1: implement it"}),
    ));
    l.script_reply(l.issue, "Delegated.");
    l.model().push_for(
        "TASK-K1",
        call(
            "record_result",
            json!({"summary": "K1-RESULT: implemented"}),
        ),
    );
    l.model()
        .push_for("TASK-K1", Step::message("Recorded.").gated(&gate));
    ack_and_complete(&l, "Implemented and checked.");

    let task = l.comment("bob", l.issue, "@ccbot implement it");
    l.wait(&task, "succeeded");
    let id = workflow_of(&l, &task);
    wait_until("the result recorded", Duration::from_secs(90), || {
        !listed(&l, &id).is_empty()
    });
    l.app.kill9();
    l.app.start_again();
    gate.open();

    let w = wait_workflow(&l, &id, WorkflowState::Completed);
    assert_eq!(w.summary.as_deref(), Some("Implemented and checked."));
    let r = listed(&l, &id);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].delivery.state, DeliveryState::Acknowledged);
    let k = kids(&l, &id);
    assert_eq!(k.len(), 1);
    // Counted as turns, not as model requests: the request after the
    // record_result call repeats the child's input, and whether it was
    // sent before the kill is a race.
    assert_eq!(
        count_where(
            &mut connect(&l.app.db_url),
            "turns",
            &format!(
                "task_id IN (SELECT task_id FROM tasks WHERE session_key = '{}')",
                k[0].session_key
            )
        ),
        1,
        "the child's turn ran once"
    );
}

/// `kill -9` while the parent's turn carries a result it has not
/// acknowledged: after the restart the result is delivered again, and
/// acknowledged once.
#[test]
fn e2e_killed_after_delivery_before_acknowledgement_the_result_is_delivered_again() {
    let mut l = start("2");
    let gate = Gate::new();
    l.model().push(call(
        "assign_child",
        json!({"title": "Impl", "instructions": "TASK-K2: implement it"}),
    ));
    l.script_reply(l.issue, "Delegated.");
    child_turn(
        &l,
        "TASK-K2",
        "echo DONE",
        json!({"summary": "K2-RESULT: implemented"}),
    );
    l.model().push(Step::message("Reading it.").gated(&gate));
    ack_and_complete(&l, "Incorporated after the restart.");

    let task = l.comment("bob", l.issue, "@ccbot implement it");
    l.wait(&task, "succeeded");
    let id = workflow_of(&l, &task);
    // Killed once the parent's turn was admitted and the model reads the
    // result (a kill before the admission is recorded is an uncertain
    // admission, held for an operator and never replayed).
    let cont = continuation(&l, 1);
    wait_until(
        "the parent's turn reading the result",
        Duration::from_secs(90),
        || {
            l.model().asked("K2-RESULT") == 1
                && l.detail(&cont)["turns"]
                    .as_array()
                    .is_some_and(|t| !t.is_empty())
        },
    );
    assert_eq!(listed(&l, &id)[0].delivery.state, DeliveryState::Delivered);
    l.app.kill9();
    l.app.start_again();
    gate.open();

    wait_workflow(&l, &id, WorkflowState::Completed);
    let r = listed(&l, &id);
    assert_eq!(r[0].delivery.state, DeliveryState::Acknowledged);
    assert!(
        r[0].delivery.deliveries >= 2,
        "delivered again after the restart: {:?}",
        r[0].delivery
    );
    assert!(l.model().asked("K2-RESULT") >= 2);
    assert_eq!(kids(&l, &id).len(), 1);
}

/// `kill -9` while a handoff's child works: the cut turn is the child's
/// exit without a result, so its recovery asks the same child again (never
/// a second child), and its result resumes the waiting parent.
#[test]
fn e2e_killed_during_a_handoff_the_same_child_resumes_and_its_result_ends_the_wait() {
    let mut l = start("2");
    let gate = Gate::new();
    l.model().push(call(
        "handoff_child",
        json!({"title": "Fix", "instructions": "TASK-K3: fix it"}),
    ));
    l.script_reply(l.issue, "Handed over.");
    l.model()
        .push_for("TASK-K3", Step::message("Working on it.").gated(&gate));
    l.model().push_for(
        "TASK-K3",
        call("record_result", json!({"summary": "K3-RESULT: fixed"})),
    );
    l.model().push_for("TASK-K3", Step::message("Recorded."));
    ack_and_complete(&l, "Fixed by the child.");

    let task = l.comment("bob", l.issue, "@ccbot fix it");
    l.wait(&task, "succeeded");
    let id = workflow_of(&l, &task);
    wait_until("the child's turn running", Duration::from_secs(90), || {
        l.model().asked("TASK-K3") == 1
    });
    assert_eq!(
        wait_workflow(&l, &id, WorkflowState::WaitingChild).state,
        WorkflowState::WaitingChild
    );
    l.app.kill9();
    l.app.start_again();
    gate.open();

    wait_workflow(&l, &id, WorkflowState::Completed);
    let k = kids(&l, &id);
    assert_eq!(k.len(), 1, "the same child, never a duplicate");
    assert_eq!(k[0].recovered, 1, "asked again once after the cut turn");
    assert_eq!(
        listed(&l, &id)[0].delivery.state,
        DeliveryState::Acknowledged
    );
}
