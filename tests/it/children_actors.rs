//! Delegated children in process, on a real SQLite store with the scripted
//! runtime: the child's thread runs with what its durable record says it was
//! delegated, never with more — even when the repository's own policy (what
//! the child would get on its own) is broader; and a continuation that
//! brought a child's result for the first time is progress, so the parent's
//! count of finals without progress starts over, while one that only carried
//! an unacknowledged result again is not (a parent that ignores a result
//! reaches its owner's gate instead of turning it over for ever).

use super::actors::{run, settings, Harness};
use codex_bridge::agent::scripted::{Script, ScriptedAgent, Step};
use codex_bridge::domain::policy::{ApprovalPolicy, Sandbox};
use codex_bridge::domain::workflow::{WorkflowState, CONTINUATION_TEXT};
use codex_bridge::domain::{TaskId, WorkflowId};
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::approvals;
use codex_bridge::store::control::ControlRequest;
use codex_bridge::store::schema::workflows as w;
use codex_bridge::store::tasks;
use codex_bridge::store::workflows::{self, children};
use codex_bridge::with_conn;
use diesel::prelude::*;
use serde_json::json;
use std::time::Duration;

#[test]
fn a_childs_thread_runs_with_its_delegation_not_the_repositorys_broader_policy() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.offer_workflow_tools();
        // The parent delegates, then waits on an approval: its turn holds the
        // repository's one place, so the child's first turn waits behind it.
        rt.on(
            "@ccbot",
            Script::steps(vec![
                Step::CallTool(
                    "assign_child",
                    json!({"title": "Look", "instructions": "CHILD-LOOK: look at the parser"}),
                ),
                Step::AskApproval("command"),
                Step::Complete("a child looks".into()),
            ]),
        );
        rt.on(
            "CHILD-LOOK",
            Script::steps(vec![
                Step::CallTool("record_result", json!({"summary": "looked"})),
                Step::Complete("recorded".into()),
            ]),
        );
        rt.on(
            CONTINUATION_TEXT,
            Script::steps(vec![
                Step::CallTool("complete_workflow", json!({"summary": "looked at"})),
                Step::Complete("done".into()),
            ]),
        );
        let mut s = settings();
        s.workflows = true;
        s.continuation_backoff = Duration::from_millis(50);
        let h = Harness::start(rt, s);
        let parent_task = h
            .comment("widgets", 1, 1, "@ccbot look at the parser")
            .await;
        h.wait_state(&parent_task, TaskState::AwaitingApproval)
            .await;

        // What the parent delegated is less than the repository gives: a
        // parent whose own thread ran read-only and asked before anything.
        let id = parent_task.clone();
        let child = h
            .store
            .write(move |c| {
                let t = tasks::find(c, &id)?.expect("the parent's task");
                let kids = children::of(c, t.workflow_id.as_ref().expect("joined"))?;
                assert_eq!(kids.len(), 1, "{kids:?}");
                let kid = kids[0].clone();
                with_conn!(c, |x| diesel::update(
                    w::table.filter(w::workflow_id.eq(&kid.workflow_id))
                )
                .set((
                    w::sandbox.eq(Some(Sandbox::ReadOnly)),
                    w::approval_policy.eq(Some(ApprovalPolicy::Untrusted)),
                ))
                .execute(x))?;
                Ok(kid)
            })
            .await
            .unwrap();

        approve_the_pending_one(&h).await;
        h.wait_state(&parent_task, TaskState::Succeeded).await;
        wait_workflow(&h, &child.workflow_id, WorkflowState::Completed).await;

        // Two threads, the parent's first (the harness's workspaces give
        // both one folder, so the order tells them apart).
        let threads = h.runtime.thread_requests();
        assert_eq!(threads.len(), 2, "{threads:?}");
        let ((_, parent_approval, parent_sandbox), (_, child_approval, child_sandbox)) =
            (&threads[0], &threads[1]);
        assert_eq!(
            (*child_approval, *child_sandbox),
            (ApprovalPolicy::Untrusted, Sandbox::ReadOnly),
            "the child runs with its delegation: {threads:?}"
        );
        // The control: the repository's own policy, which the parent's
        // thread got, is broader on both counts.
        assert_ne!(*parent_sandbox, Sandbox::ReadOnly, "{threads:?}");
        assert_ne!(*parent_approval, ApprovalPolicy::Untrusted, "{threads:?}");
    });
}

/// The child's first task (its session's), once launched.
async fn child_task(h: &Harness, parent_task: &TaskId) -> (WorkflowId, TaskId) {
    let id = parent_task.clone();
    h.store
        .read(move |c| {
            let t = tasks::find(c, &id)?.expect("the parent's task");
            let kid = children::of(c, t.workflow_id.as_ref().expect("joined"))?
                .pop()
                .expect("a child");
            use codex_bridge::store::schema::tasks as t;
            let first: TaskId = with_conn!(c, |x| t::table
                .filter(t::session_key.eq(&kid.session_key))
                .order(t::id.asc())
                .select(t::task_id)
                .first(x))?;
            Ok((kid.workflow_id, first))
        })
        .await
        .unwrap()
}

#[test]
fn a_result_brought_for_the_first_time_starts_the_idle_count_over_and_brought_again_does_not() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.offer_workflow_tools();
        rt.on(
            "@ccbot",
            Script::steps(vec![
                Step::CallTool(
                    "assign_child",
                    json!({"title": "Fix", "instructions": "CHILD-FIX: fix the parser"}),
                ),
                Step::Complete("a child fixes it".into()),
            ]),
        );
        // The child waits on an approval until the parent's count is set.
        rt.on(
            "CHILD-FIX",
            Script::steps(vec![
                Step::AskApproval("command"),
                Step::CallTool("record_result", json!({"summary": "fixed"})),
                Step::Complete("recorded".into()),
            ]),
        );
        // Every continuation reads what it carries and ends, acknowledging
        // nothing: the first one that carries the result is progress, the
        // ones that carry it again are not.
        rt.on(
            CONTINUATION_TEXT,
            Script::steps(vec![Step::Complete("read it".into())]),
        );
        let mut s = settings();
        s.workflows = true;
        s.continuation_backoff = Duration::from_millis(50);
        s.workflow_max_idle_finals = 5;
        let h = Harness::start(rt, s);
        let parent_task = h.comment("widgets", 1, 1, "@ccbot fix the parser").await;
        h.wait_state(&parent_task, TaskState::Succeeded).await;
        let (_, child_first) = child_task(&h, &parent_task).await;
        h.wait_state(&child_first, TaskState::AwaitingApproval)
            .await;

        // Three finals without progress behind the parent (as if its earlier
        // continuations had found nothing to do).
        let id = parent_task.clone();
        let parent = h
            .store
            .write(move |c| {
                let t = tasks::find(c, &id)?.expect("the parent's task");
                let wid = t.workflow_id.expect("joined");
                with_conn!(c, |x| diesel::update(
                    w::table.filter(w::workflow_id.eq(&wid))
                )
                .set(w::idle_finals.eq(3))
                .execute(x))?;
                Ok(wid)
            })
            .await
            .unwrap();

        approve_the_pending_one(&h).await;
        let w = wait_workflow(&h, &parent, WorkflowState::WaitingOwner).await;
        // The count was 3 of 5 when the result arrived. The continuation
        // that brought it started the count over; the five after it, which
        // only carried it again, counted up to the owner's gate.
        assert_eq!(w.continuations, 6, "{w:?}");
        let id = parent.clone();
        let gate = h
            .store
            .read(move |c| workflows::open_gate(c, &id))
            .await
            .unwrap()
            .expect("an open gate");
        assert_eq!(
            gate.kind,
            codex_bridge::domain::workflow::GateKind::IdleFinals
        );
    });
}

/// Approves the one approval waiting (as an operator would).
async fn approve_the_pending_one(h: &Harness) {
    let pending = h.store.read(approvals::pending).await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let approval = pending[0].approval_id.clone();
    let req = ControlRequest {
        request_id: format!("approve-{approval}"),
        reason: "test".into(),
        actor: "admin:test".into(),
    };
    h.store
        .write(move |c| approvals::decide(c, &req, &approval, true))
        .await
        .unwrap();
}

/// Waits until the workflow is in `state`; the workflow then.
async fn wait_workflow(h: &Harness, id: &WorkflowId, state: WorkflowState) -> workflows::Workflow {
    // The last read: the workflow in `state` once reached, or what it was.
    let last = std::cell::RefCell::new(None::<workflows::Workflow>);
    let reached = crate::support::poll_until_async(Duration::from_secs(30), || async {
        let id = id.clone();
        let found = h
            .store
            .read(move |c| workflows::find(c, &id))
            .await
            .unwrap();
        let done = found.as_ref().is_some_and(|w| w.state == state);
        *last.borrow_mut() = found;
        done
    })
    .await;
    let last = last.into_inner();
    if let (true, Some(w)) = (reached, &last) {
        return w.clone();
    }
    let turns: Vec<String> = h
        .runtime
        .calls()
        .iter()
        .map(|c| c.text.chars().take(80).collect())
        .collect();
    panic!("workflow {id} is not {state} after 30 s: {last:?}\nturns: {turns:#?}")
}
