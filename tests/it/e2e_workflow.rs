//! Work that outlives a turn, on real parts: the real `codex app-server` is
//! offered the bridge's tools on the session's new thread; the comment's
//! turn ends with an ordinary final (its answer posted), so the workflow
//! stays open and a continuation turn follows on the same thread after the
//! backoff; that turn calls `complete_workflow`, and nothing more runs.

use crate::e2e::Loop;
use crate::fakemodel::{tool_names, user_texts, Item, Step};
use crate::support::*;
use codex_bridge::domain::workflow::WorkflowState;
use codex_bridge::store::{tasks, workflows};
use serde_json::json;
use std::time::Duration;

pub(crate) fn with_workflows() -> Loop {
    Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", "1")
    })
}

/// The workflow's continuation number `seq`, once it exists; its task id.
pub(crate) fn continuation(l: &Loop, seq: i64) -> String {
    let mut found = None;
    wait_until(
        &format!("continuation {seq}"),
        Duration::from_secs(60),
        || {
            use codex_bridge::store::schema::tasks as t;
            use diesel::prelude::*;
            let mut c = connect(&l.app.db_url);
            found = codex_bridge::with_conn!(&mut c, |x| t::table
                .filter(t::continuation.eq(seq))
                .select(t::task_id)
                .first::<String>(x)
                .optional())
            .unwrap();
            found.is_some()
        },
    );
    found.unwrap()
}

/// The agent's call of `complete_workflow`.
pub(crate) fn complete(summary: &str) -> Step {
    Step::Reply(vec![Item::FunctionCall {
        namespace: Some("codex_bridge".into()),
        name: "complete_workflow".into(),
        arguments: json!({ "summary": summary }),
    }])
}

/// The workflow `task` joined.
pub(crate) fn workflow_of(l: &Loop, task: &str) -> codex_bridge::domain::WorkflowId {
    let mut c = connect(&l.app.db_url);
    tasks::find(&mut c, &task.parse().unwrap())
        .unwrap()
        .unwrap()
        .workflow_id
        .expect("the task joined a workflow")
}

/// The workflow `id` as the store has it now.
pub(crate) fn workflow(l: &Loop, id: &codex_bridge::domain::WorkflowId) -> workflows::Workflow {
    let mut c = connect(&l.app.db_url);
    workflows::find(&mut c, id).unwrap().unwrap()
}

#[test]
fn e2e_an_open_workflow_continues_on_its_thread_until_the_agent_completes_it() {
    let l = with_workflows();
    // The comment's turn: its answer, then an ordinary final.
    l.script_reply(l.issue, "Fixed the parser; the docs are next.");
    // The continuation's turn: the agent says the mission is done.
    l.model().push(Step::Reply(vec![Item::FunctionCall {
        namespace: Some("codex_bridge".into()),
        name: "complete_workflow".into(),
        arguments: json!({"summary": "Parser and docs fixed."}),
    }]));
    l.model().push(Step::message("All done."));
    let task = l.comment("bob", l.issue, "@ccbot fix the parser and the docs");
    l.wait(&task, "succeeded");

    let cont = continuation(&l, 1);
    l.wait(&cont, "succeeded");
    let mut c = connect(&l.app.db_url);
    let t = tasks::find(&mut c, &task.parse().unwrap())
        .unwrap()
        .unwrap();
    let ct = tasks::find(&mut c, &cont.parse().unwrap())
        .unwrap()
        .unwrap();
    let w = workflows::find(&mut c, t.workflow_id.as_ref().expect("joined"))
        .unwrap()
        .unwrap();
    assert_eq!(ct.workflow_id.as_ref(), Some(&w.workflow_id));
    assert_eq!(w.state, WorkflowState::Completed);
    assert_eq!(w.summary.as_deref(), Some("Parser and docs fixed."));
    assert_eq!(w.continuations, 1);
    // The continuation ran in the comment's thread, told to go on.
    assert_eq!(ct.thread_id, t.thread_id);
    let requests = l.model().requests();
    let asked_on = requests
        .iter()
        .position(|r| user_texts(r).iter().any(|t| t.contains("is still open")))
        .expect("a request of the continuation");
    assert!(
        user_texts(&requests[asked_on])
            .iter()
            .any(|t| t.contains("fix the parser and the docs")),
        "the continuation's turn carries the thread's history"
    );
    // The thread was offered the bridge's tools.
    assert!(
        tool_names(&requests[0])
            .iter()
            .any(|n| n.ends_with("complete_workflow")),
        "{:?}",
        tool_names(&requests[0])
    );
    // Nothing more: the workflow has ended and no continuation is alive.
    assert!(!workflows::continuation_pending(&mut c, &w.workflow_id).unwrap());
    assert!(workflows::live(&mut c, &w.session_key).unwrap().is_none());
    // The continuation that completed it answers the owner (the bridge
    // posts its last message, with the task's marker), once.
    let answer = l.bot_comments(l.issue, "All done.");
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert!(
        answer[0]["body"].as_str().unwrap().contains(&cont),
        "{answer:?}"
    );
}

/// Finals without progress stop the workflow at `workflow_max_idle_finals`:
/// the bot says so in the thread with the gate's marker, nothing more runs,
/// someone else's comment is refused (`owner_gate_required`, one receipt),
/// and the owner's next comment resumes it (and that turn completes it).
#[test]
fn e2e_finals_without_progress_stop_the_workflow_until_its_owner_answers() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", "1")
            .env("CODEX_BRIDGE_WORKFLOW_MAX_IDLE_FINALS", "2")
    });
    l.script_reply(l.issue, "Started on the parser.");
    l.model().push(Step::message("Still looking."));
    l.model().push(Step::message("Still looking."));
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "succeeded");
    let second = continuation(&l, 2);
    l.wait(&second, "succeeded");

    let mut c = connect(&l.app.db_url);
    let t = tasks::find(&mut c, &task.parse().unwrap())
        .unwrap()
        .unwrap();
    let id = t.workflow_id.clone().expect("joined");
    let w = workflows::find(&mut c, &id).unwrap().unwrap();
    assert_eq!(w.state, WorkflowState::WaitingOwner);
    assert_eq!((w.idle_finals, w.continuations), (1, 2));
    assert!(!workflows::continuation_pending(&mut c, &id).unwrap());
    let gate = workflows::open_gate(&mut c, &id).unwrap().expect("a gate");
    l.app.wait_for("the gate's comment", || {
        !l.bot_comments(l.issue, &format!("gate={}", gate.gate_id))
            .is_empty()
    });
    let said = l.bot_comments(l.issue, &format!("gate={}", gate.gate_id));
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0]["body"].as_str().unwrap().contains("@bob"),
        "{said:?}"
    );

    // Someone else who may trigger work is refused while it waits.
    l.sim().add_user("carol");
    l.sim()
        .set_permission("acme", "widgets", "carol", crate::giteasim::Perm::Write);
    let other = l.comment("carol", l.issue, "@ccbot do it my way");
    l.wait(&other, "rejected");
    assert_eq!(l.detail(&other)["task"]["errorCode"], "owner_gate_required");
    l.expect_one_receipt(&other, "rejected");
    let w = workflows::find(&mut c, &id).unwrap().unwrap();
    assert_eq!(w.state, WorkflowState::WaitingOwner);

    // The owner answers: the workflow is open again, and this turn ends it.
    l.model().push(Step::Reply(vec![Item::FunctionCall {
        namespace: Some("codex_bridge".into()),
        name: "complete_workflow".into(),
        arguments: json!({"summary": "Parser fixed."}),
    }]));
    l.script_reply(l.issue, "Fixed it.");
    let resume = l.comment("bob", l.issue, "@ccbot go on, the fix is in parse.rs");
    l.wait(&resume, "succeeded");
    let w = workflows::find(&mut c, &id).unwrap().unwrap();
    assert_eq!(w.state, WorkflowState::Completed);
    assert!(workflows::open_gate(&mut c, &id).unwrap().is_none());
    assert_eq!(w.continuations, 2, "no continuation after the gate");
}
