//! Delegated children on real parts: the real `codex app-server` runs the
//! parent's and each child's thread (the fake model answers each thread from
//! its own script); children work in their own worktrees on their own
//! branches, record their results, and the parent reads, acknowledges and
//! goes on until it completes the workflow itself.

use crate::e2e::Loop;
use crate::e2e_workflow::workflow_of;
use crate::fakemodel::{tool_names, user_texts, Gate, Item, Step};
use crate::support::*;
use crate::workspace::git;
use codex_bridge::domain::workflow::children::ChildMode;
use codex_bridge::domain::workflow::results::DeliveryState;
use codex_bridge::domain::workflow::WorkflowState;
use codex_bridge::store::workflows::{self, children, results};
use serde_json::{json, Value};
use std::time::Duration;

pub(crate) fn with_children(parallel: usize) -> Loop {
    Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", "1")
            .env(
                "CODEX_BRIDGE_MAX_PARALLEL_TURNS_PER_REPO",
                &parallel.to_string(),
            )
    })
}

/// The agent's call of one of the bridge's tools.
pub(crate) fn call(name: &str, arguments: Value) -> Step {
    Step::Reply(vec![Item::FunctionCall {
        namespace: Some("codex_bridge".into()),
        name: name.into(),
        arguments,
    }])
}

/// A child's turn (its thread named by `needle` in its assignment): run
/// `cmd` in its worktree, then record `result`.
pub(crate) fn child_turn(l: &Loop, needle: &str, cmd: &str, result: Value) {
    l.model().push_for(needle, Step::shell(cmd));
    l.model().push_for(needle, call("record_result", result));
    l.model()
        .push_for(needle, Step::message("Result recorded."));
}

/// Waits until the workflow is in `state`; the workflow then.
pub(crate) fn wait_workflow(
    l: &Loop,
    id: &codex_bridge::domain::WorkflowId,
    state: WorkflowState,
) -> workflows::Workflow {
    let mut found = None;
    let reached = poll_until(Duration::from_secs(120), || {
        let mut c = connect(&l.app.db_url);
        let w = workflows::find(&mut c, id).unwrap().unwrap();
        let done = w.state == state;
        found = Some(w);
        done
    });
    if !reached {
        let logs = l.app.logs();
        let tail: Vec<&str> = logs.lines().rev().take(80).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        let tasks: Vec<String> = {
            use codex_bridge::store::schema::tasks as t;
            use diesel::prelude::*;
            let mut c = connect(&l.app.db_url);
            codex_bridge::with_conn!(&mut c, |x| t::table
                .order(t::id.asc())
                .select((
                    t::task_id,
                    t::session_key,
                    t::state,
                    t::error_code,
                    t::continuation
                ))
                .load::<(String, String, String, Option<String>, Option<i64>)>(x))
            .unwrap()
            .into_iter()
            .map(|r| format!("{r:?}"))
            .collect()
        };
        panic!(
            "workflow {id} is not {state} after 120 s: {:?}\ntasks:\n{}\nlast log lines:\n{}",
            found,
            tasks.join("\n"),
            tail.join("\n")
        );
    }
    found.unwrap()
}

/// The requests of the thread whose user input holds `needle`.
fn requests_with(l: &Loop, needle: &str) -> Vec<Value> {
    l.model()
        .requests()
        .into_iter()
        .filter(|r| user_texts(r).iter().any(|t| t.contains(needle)))
        .collect()
}

pub(crate) const COMMIT: &str =
    "git -c user.email=child@example.test -c user.name=child commit -qm";

/// The seed's concrete example: the top-level agent assigns an
/// implementation child and goes on; the child commits in its own worktree
/// and records its result; the parent reads the diff and acknowledges it,
/// then assigns a reviewer, who finds a blocking regression; the parent
/// continues the same open workflow, fixes it, re-runs the checks, and only
/// then completes the workflow — no turn's final closed it.
#[test]
fn e2e_the_parent_delegates_reads_acknowledges_and_completes_the_workflow_itself() {
    let l = with_children(1);
    let n = l.issue;
    let impl_branch = format!("codex/issue-{n}-child-1");

    // The comment's turn: assign the implementation, answer, end.
    l.model().push(call(
        "assign_child",
        json!({"title": "Implement the fix", "instructions": "TASK-IMPL: fix the parser and commit it"}),
    ));
    l.script_reply(
        n,
        "An implementation child is on it; I am inspecting the parser meanwhile.",
    );
    child_turn(
        &l,
        "TASK-IMPL",
        &format!("printf 'fixed\\n' > parser.txt && git add parser.txt && {COMMIT} 'parser: fix'"),
        json!({"summary": "IMPL-DONE: parser fixed", "filesChanged": ["parser.txt"], "checksRun": ["cargo test parser"]}),
    );
    // Continuation 1 carries the implementation's result: read its diff,
    // acknowledge it, assign the reviewer.
    l.model().push(Step::shell(&format!(
        "echo DIFF-READ; git diff --stat HEAD...{impl_branch}"
    )));
    l.model()
        .push(call("ack_result", json!({"resultId": "{{result}}"})));
    l.model().push(call(
        "assign_child",
        json!({"title": "Review the fix", "instructions": "TASK-REVIEW: review the parser fix"}),
    ));
    l.model().push(Step::message("A reviewer is on it."));
    child_turn(
        &l,
        "TASK-REVIEW",
        "echo REVIEWED",
        json!({
            "summary": "REVIEW: blocking regression found",
            "checksRun": ["cargo test parser::empty"],
            "blockers": ["BLOCKER-EMPTY: an empty input panics in parse()"],
        }),
    );
    // Continuation 2 carries the review: list what the children gave,
    // acknowledge, fix, re-run the checks, and only then complete.
    l.model().push(call("list_results", json!({})));
    l.model()
        .push(call("ack_result", json!({"resultId": "{{result}}"})));
    l.model().push(Step::shell(
        "printf 'empty ok\\n' >> parser.txt && echo CHECKS-RERUN-PASS",
    ));
    l.model().push(call(
        "complete_workflow",
        json!({"summary": "Parser fixed, reviewed, regression fixed, checks pass."}),
    ));
    l.model().push(Step::message(
        "All done: the parser is fixed and the checks pass.",
    ));

    let task = l.comment(
        "bob",
        n,
        "@ccbot fix the flaky parser, and have it reviewed",
    );
    l.wait(&task, "succeeded");
    let id = workflow_of(&l, &task);
    let w = wait_workflow(&l, &id, WorkflowState::Completed);
    assert_eq!(
        w.summary.as_deref(),
        Some("Parser fixed, reviewed, regression fixed, checks pass.")
    );
    assert_eq!(
        w.continuations, 2,
        "two continuations, each after a child's result"
    );

    let mut c = connect(&l.app.db_url);
    let kids = children::of(&mut c, &id).unwrap();
    assert_eq!(kids.len(), 2, "{kids:?}");
    for (i, k) in kids.iter().enumerate() {
        assert_eq!(k.state, WorkflowState::Completed, "{k:?}");
        assert_eq!(k.child_mode, Some(ChildMode::Assign));
        assert_eq!(k.session_key, w.session_key.child_session(i as i64 + 1));
    }
    // Both results acknowledged by the parent, in order.
    let listed = results::list(&mut c, &id).unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed
        .iter()
        .all(|r| r.delivery.state == DeliveryState::Acknowledged && !r.incomplete));
    assert_eq!(listed[0].report.summary, "IMPL-DONE: parser fixed");
    assert_eq!(
        listed[1].report.blockers,
        vec!["BLOCKER-EMPTY: an empty input panics in parse()".to_owned()]
    );

    // list_results showed the first result acknowledged and the review
    // delivered, no child still working.
    let listed_out: Value = l
        .model()
        .requests()
        .iter()
        .flat_map(crate::fakemodel::tool_outputs)
        .find_map(|(_, v)| {
            let text = match v {
                Value::String(s) => s,
                Value::Array(items) => items.iter().filter_map(|i| i["text"].as_str()).collect(),
                other => other.to_string(),
            };
            serde_json::from_str::<Value>(&text)
                .ok()
                .filter(|j| j.get("childrenWorking").is_some())
        })
        .expect("list_results answered the parent");
    assert_eq!(listed_out["childrenWorking"], 0, "{listed_out}");
    let statuses: Vec<&str> = listed_out["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["acknowledged", "delivered"], "{listed_out}");

    // The operators' API names the tree as documented: each child with its
    // parent, kind, thread and worktree; each result with its parent, child,
    // status and times.
    let page = l
        .app
        .admin_get(&format!("/api/gitea-workflow/workflows/{id}"));
    assert_eq!(page.status, 200, "{:?}", page.json);
    for child in page.json["children"].as_array().unwrap() {
        assert_eq!(child["parentWorkflowId"], id.to_string());
        assert_eq!(child["kind"], "assign");
        assert!(
            child["threadId"].as_str().is_some_and(|t| !t.is_empty()),
            "{child}"
        );
        assert!(
            child["worktree"].as_str().unwrap().contains("-child-"),
            "{child}"
        );
    }
    for (r, kid) in page.json["results"].as_array().unwrap().iter().zip(&kids) {
        assert_eq!(r["workflowId"], id.to_string(), "{r}");
        assert_eq!(r["childWorkflowId"], kid.workflow_id.to_string(), "{r}");
        assert_eq!(r["status"], "acknowledged", "{r}");
        let (delivered, acked) = (
            r["deliveredAt"].as_str().expect("deliveredAt"),
            r["acknowledgedAt"].as_str().expect("acknowledgedAt"),
        );
        assert!(delivered <= acked, "{r}");
        for field in [
            "resultId",
            "summary",
            "filesChanged",
            "checksRun",
            "risks",
            "blockers",
        ] {
            assert!(r.get(field).is_some(), "{field} in {r}");
        }
    }

    // The implementation committed on its own branch, in its own worktree.
    let wt = l.app.dir().join(format!(
        "ws/.worktrees/default/acme/widgets/issue-{n}-child-1"
    ));
    assert!(git(&wt, &["log", "--oneline", "-1"]).contains("parser: fix"));
    assert_eq!(
        git(&wt, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        impl_branch
    );
    // The parent's worktree never got the child's commit by itself.
    let parent_wt = l
        .app
        .dir()
        .join(format!("ws/.worktrees/default/acme/widgets/issue-{n}"));
    assert!(!git(&parent_wt, &["log", "--oneline"]).contains("parser: fix"));

    // The parent read the diff and the review: both reached its turns.
    let diff = l
        .model()
        .requests()
        .iter()
        .flat_map(crate::fakemodel::tool_outputs)
        .map(|(_, v)| v.to_string())
        .find(|o| o.contains("DIFF-READ"))
        .expect("the parent read the child's diff");
    assert!(diff.contains("parser.txt"), "{diff}");
    assert!(
        l.model().asked("BLOCKER-EMPTY") >= 1,
        "the review's blocker reached the parent's next turn"
    );

    // A child's thread is offered record_result and nothing of Gitea's; the
    // parent's thread delegates.
    for r in requests_with(&l, "TASK-IMPL") {
        // Not forked: it starts from its instructions, not the owner's words.
        assert!(
            !user_texts(&r)
                .iter()
                .any(|t| t.contains("fix the flaky parser")),
            "{:?}",
            user_texts(&r)
        );
        let tools = tool_names(&r);
        assert!(
            tools.iter().any(|t| t.ends_with("record_result")),
            "{tools:?}"
        );
        assert!(
            !tools.iter().any(|t| t.ends_with("assign_child")
                || t.ends_with("complete_workflow")
                || t.starts_with("mcp__gitea")),
            "{tools:?}"
        );
    }
    let first = &l.model().requests()[0];
    assert!(tool_names(first)
        .iter()
        .any(|t| t.ends_with("assign_child")));
    // Offered record_result too, so that a fork of it can record a result;
    // the bridge refuses it on a top-level thread.
    assert!(tool_names(first)
        .iter()
        .any(|t| t.ends_with("record_result")));
    assert!(
        tool_names(first)
            .iter()
            .any(|t| t.starts_with("mcp__gitea")),
        "the parent's thread has Gitea's tools: {:?}",
        tool_names(first)
    );

    // Nothing of the children's reached the Issue; the owner got the
    // comment turn's answer and the completing continuation's, once each.
    assert!(l.bot_comments(n, "IMPL-DONE").is_empty());
    assert!(l.bot_comments(n, "Result recorded").is_empty());
    wait_until(
        "the completing continuation's answer",
        Duration::from_secs(60),
        || !l.bot_comments(n, "All done").is_empty(),
    );
    let last = workflows::last_input(&mut c, &id).unwrap();
    l.wait(last.task_id.as_str(), "succeeded");
    assert_eq!(l.bot_comments(n, "All done").len(), 1);
    assert!(l.bot_comments(n, "Result recorded").is_empty());
}

/// Children of one repository run side by side up to
/// `max_parallel_turns_per_repo`: with two places, both children's turns are
/// running at once (each holds its request until both arrived), each in its
/// own worktree.
#[test]
fn e2e_two_children_run_at_once_each_in_its_own_worktree() {
    let l = with_children(2);
    let n = l.issue;
    let gate = Gate::new();
    l.model().push(call(
        "assign_child",
        json!({"title": "Parser", "instructions": "TASK-PAR-A: fix the parser"}),
    ));
    l.model().push(call(
        "assign_child",
        json!({"title": "Docs", "instructions": "TASK-PAR-B: write the docs"}),
    ));
    l.script_reply(n, "Two children are on it.");
    for (needle, file) in [("TASK-PAR-A", "a.txt"), ("TASK-PAR-B", "b.txt")] {
        l.model().push_for(
            needle,
            Step::shell(&format!("printf {needle} > {file}; ls")).gated(&gate),
        );
        l.model().push_for(
            needle,
            call(
                "record_result",
                json!({"summary": format!("{needle} done")}),
            ),
        );
        l.model().push_for(needle, Step::message("Recorded."));
    }
    // The parent's continuation carries both results (or one, then the
    // other): acknowledge what it reads, then complete.
    l.model()
        .set_default(Step::message("Waiting for the rest."));

    let task = l.comment("bob", n, "@ccbot fix the parser and write the docs");
    l.wait(&task, "succeeded");
    // Both children's first requests arrive while neither was answered.
    wait_until(
        "both children running at once",
        Duration::from_secs(90),
        || l.model().asked("TASK-PAR-A") == 1 && l.model().asked("TASK-PAR-B") == 1,
    );
    gate.open();
    let id = workflow_of(&l, &task);
    wait_until("both results recorded", Duration::from_secs(90), || {
        let mut c = connect(&l.app.db_url);
        results::list(&mut c, &id).unwrap().len() == 2
    });
    let root = l.app.dir().join("ws/.worktrees/default/acme/widgets");
    let a = root.join(format!("issue-{n}-child-1"));
    let b = root.join(format!("issue-{n}-child-2"));
    assert!(a.join("a.txt").exists() && !a.join("b.txt").exists());
    assert!(b.join("b.txt").exists() && !b.join("a.txt").exists());
}

/// A child's approval goes to the child's own actor: it is announced in
/// the Issue's thread, the owner's `/approve` there decides it, the child's
/// command runs in the child's worktree, and the admin view lists the
/// approval under the child's task.
#[test]
fn e2e_a_childs_approval_is_answered_in_the_thread_and_reaches_the_child() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_APPROVAL_POLICY", "untrusted")
            .env("CODEX_BRIDGE_SANDBOX", "workspace-write")
    });
    let n = l.issue;
    l.model().push(call(
        "assign_child",
        json!({"title": "Touch", "instructions": "TASK-APPR: touch a file"}),
    ));
    l.script_reply(n, "A child touches the file.");
    l.model().push_for(
        "TASK-APPR",
        Step::Reply(vec![Item::shell("touch approved.txt")]),
    );
    l.model().push_for(
        "TASK-APPR",
        call("record_result", json!({"summary": "APPR-DONE: touched"})),
    );
    l.model().push_for("TASK-APPR", Step::message("Recorded."));
    l.model()
        .push(call("ack_result", json!({"resultId": "{{result}}"})));
    l.model()
        .push(call("complete_workflow", json!({"summary": "Touched."})));
    l.model().push(Step::message("Touched."));

    let task = l.comment("bob", n, "@ccbot touch a file, through a child");
    l.wait(&task, "succeeded");
    let mut pending = Vec::new();
    wait_until("the child's approval", Duration::from_secs(90), || {
        pending = l.app.admin_get("/api/gitea-workflow/approvals").json["approvals"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        !pending.is_empty()
    });
    let approval = pending[0]["approvalId"].as_str().unwrap().to_owned();
    let child_task = pending[0]["taskId"].as_str().unwrap().to_owned();
    assert_ne!(child_task, task);
    let d = l.detail(&child_task);
    assert!(
        d["task"]["sessionKey"]
            .as_str()
            .is_some_and(|k| k.ends_with(":child:1")),
        "{d}"
    );
    wait_until("the approval announced", Duration::from_secs(60), || {
        !l.bot_comments(n, &format!("receipt={child_task}:approval:{approval}"))
            .is_empty()
    });

    let granted = l.comment("bob", n, &format!("@ccbot /approve {approval}"));
    l.wait(&granted, "succeeded");
    let id = workflow_of(&l, &task);
    wait_workflow(&l, &id, WorkflowState::Completed);
    let d = l.detail(&child_task);
    assert_eq!(d["approvals"][0]["decision"], "accept", "{d}");
    let root = l.app.dir().join("ws/.worktrees/default/acme/widgets");
    assert!(root
        .join(format!("issue-{n}-child-1/approved.txt"))
        .exists());
    assert!(!root.join(format!("issue-{n}/approved.txt")).exists());
}
