//! A child forked from its parent's conversation (`fork: true`): the real
//! `codex app-server` copies the parent thread's history into the child's
//! new thread (`thread/fork`), which still runs as a child — its own
//! worktree, the child's tools only, nothing of Gitea's.

use crate::e2e_children::{call, wait_workflow, with_children};
use crate::e2e_workflow::workflow_of;
use crate::fakemodel::{tool_names, tool_outputs, user_texts, Gate, Step};
use crate::support::*;
use codex_bridge::domain::workflow::WorkflowState;
use codex_bridge::store::sessions;
use codex_bridge::store::workflows::{children, results};
use serde_json::json;
use std::time::Duration;

#[test]
fn e2e_a_forked_child_starts_from_the_parents_conversation_with_a_childs_tools() {
    let l = with_children(1);
    let n = l.issue;
    // The parent is offered record_result (a fork keeps its tools) but may
    // not use it.
    l.model().push(call(
        "record_result",
        json!({"summary": "PARENT-SELF-RESULT"}),
    ));
    l.model().push(call(
        "assign_child",
        json!({"title": "Check the parser", "instructions": "TASK-FORKED: check the parser", "fork": true}),
    ));
    l.script_reply(n, "A forked child is on it.");
    // The fork has its parent's tools; the bridge answers it as the child
    // it is: ending the workflow, asking the owner and delegating are
    // refused, recording its result is taken.
    l.model().push_for(
        "TASK-FORKED",
        call("complete_workflow", json!({"summary": "CHILD-SELF-DONE"})),
    );
    l.model().push_for(
        "TASK-FORKED",
        call(
            "request_owner_gate",
            json!({"question": "GATE-FROM-CHILD-5512: may I publish?", "kind": "publish"}),
        ),
    );
    l.model().push_for(
        "TASK-FORKED",
        call(
            "assign_child",
            json!({"title": "Grandchild", "instructions": "TASK-GRANDCHILD: more"}),
        ),
    );
    l.model().push_for(
        "TASK-FORKED",
        call("record_result", json!({"summary": "FORK-CHECKED"})),
    );
    l.model()
        .push_for("TASK-FORKED", Step::message("Result recorded."));
    l.model()
        .push(call("ack_result", json!({"resultId": "{{result}}"})));
    l.model().push(call(
        "complete_workflow",
        json!({"summary": "Checked by a forked child."}),
    ));
    l.model()
        .push(Step::message("Done: the parser was checked."));

    let task = l.comment("bob", n, "@ccbot OWNER-CONTEXT-7781: is the parser sound?");
    l.wait(&task, "succeeded");
    let id = workflow_of(&l, &task);
    let w = wait_workflow(&l, &id, WorkflowState::Completed);

    let mut c = connect(&l.app.db_url);
    let kids = children::of(&mut c, &id).unwrap();
    assert_eq!(kids.len(), 1, "{kids:?}");
    let parent_thread = sessions::session(&mut c, &w.session_key)
        .unwrap()
        .unwrap()
        .thread_id
        .expect("the parent has a thread");
    let child_thread = sessions::session(&mut c, &kids[0].session_key)
        .unwrap()
        .unwrap()
        .thread_id
        .expect("the child has a thread");
    assert_eq!(
        kids[0].forked_from_thread.as_deref(),
        Some(parent_thread.as_str()),
        "the child records the thread it was forked from"
    );
    assert_ne!(child_thread, parent_thread, "a fork is a thread of its own");
    // The child's first request already holds the parent's conversation:
    // the owner's words, which its own instructions never repeat.
    let childs: Vec<_> = l
        .model()
        .requests()
        .into_iter()
        .filter(|r| user_texts(r).iter().any(|t| t.contains("TASK-FORKED")))
        .collect();
    assert!(!childs.is_empty(), "the child's thread asked the model");
    for r in &childs {
        let texts = user_texts(r);
        assert!(
            texts.iter().any(|t| t.contains("OWNER-CONTEXT-7781")),
            "the forked child sees its parent's conversation: {texts:?}"
        );
        // Codex gives a fork its source's tools: the parent's bridge tools,
        // never its Gitea server (that came with the parent's request).
        let tools = tool_names(r);
        assert!(
            tools.iter().any(|t| t.ends_with("record_result")),
            "{tools:?}"
        );
        assert!(
            !tools.iter().any(|t| t.starts_with("mcp__gitea")),
            "a fork never gets Gitea's tools: {tools:?}"
        );
    }
    // What a thread is offered is not what it may do.
    let outputs: Vec<String> = l
        .model()
        .requests()
        .iter()
        .flat_map(tool_outputs)
        .map(|(_, v)| v.to_string())
        .collect();
    for refused in [
        "a delegated child does not end a workflow",
        "a delegated child does not ask the owner",
        "a delegated child cannot delegate",
    ] {
        assert!(
            outputs.iter().any(|o| o.contains(refused)),
            "the forked child was refused ({refused}): {outputs:?}"
        );
    }
    assert!(
        l.bot_comments(n, "GATE-FROM-CHILD-5512").is_empty(),
        "a child opens no gate in its parent's thread"
    );
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("record_result is a delegated child's tool")),
        "the parent's record_result was refused: {outputs:?}"
    );
    assert_eq!(
        children::of(&mut c, &kids[0].workflow_id).unwrap().len(),
        0,
        "no grandchild"
    );
    let listed = results::list(&mut c, &id).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].report.summary, "FORK-CHECKED");
    assert_eq!(kids[0].state, WorkflowState::Completed);
}

/// A child forked while its parent's turn is still running (two turns may
/// run at once): the fork copies the parent's conversation as far as it
/// got — the owner's words and the parent's call that asked for it — and
/// the parent's turn goes on undisturbed.
#[test]
fn e2e_a_child_forked_during_its_parents_turn_gets_the_conversation_so_far() {
    let l = with_children(2);
    let n = l.issue;
    let gate = Gate::new();
    l.model().push(call(
        "assign_child",
        json!({"title": "Look", "instructions": "TASK-MIDTURN: look at the parser", "fork": true}),
    ));
    // The parent's turn holds its next step until the child asked the model.
    l.model()
        .push(Step::shell("echo PARENT-GOES-ON").gated(&gate));
    l.script_reply(n, "A forked child looks at the parser.");
    l.model().push_for(
        "TASK-MIDTURN",
        call("record_result", json!({"summary": "MIDTURN-LOOKED"})),
    );
    l.model()
        .push_for("TASK-MIDTURN", Step::message("Result recorded."));
    l.model().set_default(Step::message("Noted."));

    let task = l.comment("bob", n, "@ccbot OWNER-MIDTURN-4410: look at the parser");
    wait_until(
        "the forked child asks the model during its parent's turn",
        Duration::from_secs(90),
        || l.model().asked("TASK-MIDTURN") >= 1,
    );
    gate.open();
    l.wait(&task, "succeeded");
    let id = workflow_of(&l, &task);
    wait_until("the child's result", Duration::from_secs(90), || {
        let mut c = connect(&l.app.db_url);
        results::list(&mut c, &id).unwrap().len() == 1
    });
    let first = l
        .model()
        .requests()
        .into_iter()
        .find(|r| user_texts(r).iter().any(|t| t.contains("TASK-MIDTURN")))
        .expect("the child's first request");
    assert!(
        user_texts(&first)
            .iter()
            .any(|t| t.contains("OWNER-MIDTURN-4410")),
        "{:?}",
        user_texts(&first)
    );
    // The parent's own turn still ran to its end, as scripted.
    assert!(!l
        .bot_comments(n, "A forked child looks at the parser")
        .is_empty());
}
