//! Delegated children's rows on both backends: one assignment makes at most
//! one child, in its own session, with the parent's authority and the
//! parent's turn that asked; a refusal before launch may launch later as the
//! same assignment; a result is recorded once, delivered at least once to
//! the workflow it is bound to and acknowledged exactly once; a handoff's
//! parent waits and opens again with the result; the parent's end cancels
//! its children and terminalises what was bound to it; a parent waiting for
//! its owner keeps its results through a restart; the reconciliation after
//! a restart redelivers and is idempotent.

use crate::support::*;
use codex_bridge::domain::policy::{ApprovalPolicy, Sandbox};
use codex_bridge::domain::workflow::children::ChildMode;
use codex_bridge::domain::workflow::decide::WorkflowLimits;
use codex_bridge::domain::workflow::results::DeliveryState;
use codex_bridge::domain::workflow::{ResultReport, WorkflowState};
use codex_bridge::domain::ResultId;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::ingest::{self, IngestOutcome};
use codex_bridge::store::models::Task;
use codex_bridge::store::workflows::children::{self, Assignment, Launched};
use codex_bridge::store::workflows::results::{self, Acked, NewResult};
use codex_bridge::store::workflows::{self, Workflow};
use codex_bridge::store::{run_migrations, tasks, worktrees, DbConn, StoreError};

pub(crate) const LIMITS: WorkflowLimits = WorkflowLimits {
    max_idle_finals: 5,
    max_turns: 100,
};

pub(crate) fn comment(c: &mut DbConn, id: i64, text: &str) -> Task {
    let req = crate::actors::request("widgets", 1, id, text);
    let out = c.write_transaction(|c| ingest::ingest(c, &req)).unwrap();
    let IngestOutcome::Accepted { task_id, .. } = out else {
        panic!("not accepted: {out:?}")
    };
    tasks::find(c, &task_id).unwrap().unwrap()
}

pub(crate) fn assign<'a>(
    parent: &'a Workflow,
    by: &'a Task,
    mode: ChildMode,
    what: &'a str,
) -> Assignment<'a> {
    Assignment {
        parent,
        by,
        mode,
        title: what,
        instructions: what,
        sandbox: Sandbox::WorkspaceWrite,
        approval: ApprovalPolicy::OnRequest,
        fork_from: None,
        max_children: 2,
        instance_id: "default",
    }
}

pub(crate) fn report(summary: &str) -> ResultReport {
    ResultReport {
        summary: summary.into(),
        files_changed: vec!["src/parser.rs".into()],
        checks_run: vec!["cargo test".into()],
        risks: Vec::new(),
        blockers: Vec::new(),
    }
}

pub(crate) fn fresh(c: &mut DbConn, w: &Workflow) -> Workflow {
    workflows::find(c, &w.workflow_id).unwrap().unwrap()
}

pub(crate) fn launched(out: Launched) -> children::Child {
    match out {
        Launched::New { child } => child,
        other => panic!("not launched: {other:?}"),
    }
}

/// A migrated store at `url` with a parent workflow, opened by a comment
/// saying `text`, that delegated `what` as `mode`: the connection, the
/// asking task, the parent as it was before the launch, and the child.
pub(crate) fn with_child(
    url: &str,
    text: &str,
    mode: ChildMode,
    what: &str,
) -> (DbConn, Task, Workflow, children::Child) {
    let mut c = connect(url);
    run_migrations(&mut c).unwrap();
    let asker = comment(&mut c, 1, text);
    let parent = c
        .write_transaction(|c| workflows::join(c, &asker, text))
        .unwrap();
    let child = launched(
        c.write_transaction(|c| children::launch(c, &assign(&parent, &asker, mode, what)))
            .unwrap(),
    );
    (c, asker, parent, child)
}

/// The child's first task, queued in its own session.
pub(crate) fn first_task(c: &mut DbConn, child: &children::Child) -> Task {
    use codex_bridge::store::schema::tasks as t;
    use diesel::prelude::*;
    let t: Task = codex_bridge::with_conn!(c, |x| t::table
        .filter(t::session_key.eq(&child.session_key))
        .order(t::id.asc())
        .select(Task::as_select())
        .first(x))
    .expect("the child's first turn is queued");
    assert_eq!(t.state, TaskState::Queued);
    t
}

pub(crate) fn record(
    c: &mut DbConn,
    child: &Workflow,
    by: &Task,
    summary: &str,
) -> Result<ResultId, StoreError> {
    let r = report(summary);
    c.write_transaction(|c| {
        results::record(
            c,
            child,
            &NewResult {
                report: &r,
                incomplete: false,
                cancelled: false,
                branch: Some("codex/issue-1-child-1"),
                by_task: Some(&by.task_id),
            },
            LIMITS,
            "default",
        )
    })
}

fn children_rows(url: &str) {
    let mut c = connect(url);
    run_migrations(&mut c).unwrap();
    let asker = comment(&mut c, 1, "@ccbot fix the parser, with help");
    let parent = c
        .write_transaction(|c| workflows::join(c, &asker, "fix the parser"))
        .unwrap();

    // Assign: a child in its own session, the parent still open.
    let child = launched(
        c.write_transaction(|c| {
            children::launch(c, &assign(&parent, &asker, ChildMode::Assign, "implement"))
        })
        .unwrap(),
    );
    assert_eq!(
        child.session_key,
        asker.session_key.child_session(1),
        "its own session, numbered in its resource"
    );
    let cw = workflows::find(&mut c, &child.workflow_id)
        .unwrap()
        .unwrap();
    assert_eq!(cw.parent_workflow_id.as_ref(), Some(&parent.workflow_id));
    assert_eq!(cw.child_mode, Some(ChildMode::Assign));
    assert_eq!(cw.created_by_task.as_ref(), Some(&asker.task_id));
    assert_eq!(
        (cw.sandbox, cw.approval_policy),
        (
            Some(Sandbox::WorkspaceWrite),
            Some(ApprovalPolicy::OnRequest)
        )
    );
    let task = first_task(&mut c, &child);
    assert_eq!(
        task.resource_key, asker.resource_key,
        "about the same Issue"
    );
    assert_eq!(task.workflow_id.as_ref(), Some(&child.workflow_id));
    assert_eq!(task.continuation, Some(1));
    let parent = fresh(&mut c, &parent);
    assert_eq!(parent.state, WorkflowState::Open);

    // The same assignment again: the same child, never a second.
    let again = c
        .write_transaction(|c| {
            children::launch(c, &assign(&parent, &asker, ChildMode::Assign, "implement"))
        })
        .unwrap();
    assert_eq!(
        again,
        Launched::Existing {
            child: child.clone()
        }
    );
    assert_eq!(children::of(&mut c, &parent.workflow_id).unwrap().len(), 1);

    // Past max_children_per_workflow: not admitted, nothing written but the
    // record; the same assignment launches once there is room.
    let second = launched(
        c.write_transaction(|c| {
            children::launch(c, &assign(&parent, &asker, ChildMode::Assign, "review"))
        })
        .unwrap(),
    );
    let parent = fresh(&mut c, &parent);
    let third = c
        .write_transaction(|c| {
            children::launch(c, &assign(&parent, &asker, ChildMode::Assign, "docs"))
        })
        .unwrap();
    assert_eq!(third, Launched::NotAdmitted { running: 2 });
    assert_eq!(children::of(&mut c, &parent.workflow_id).unwrap().len(), 2);

    // A result: recorded once, the child ended, its delivery pending and
    // bound to the parent; a continuation of the parent comes at once.
    let id = record(&mut c, &cw, &task, "parser fixed").unwrap();
    let cw = workflows::find(&mut c, &child.workflow_id)
        .unwrap()
        .unwrap();
    assert_eq!(cw.state, WorkflowState::Completed);
    let late = record(&mut c, &cw, &task, "again");
    assert!(
        matches!(&late, Err(StoreError::Refused { code, .. }) if *code == results::CHILD_NOT_OPEN),
        "{late:?}"
    );
    assert!(workflows::continuation_pending(&mut c, &parent.workflow_id).unwrap());
    assert_eq!(results::waiting(&mut c, &parent.workflow_id).unwrap(), 1);

    // Room again: the refused assignment launches as itself.
    let parent = fresh(&mut c, &parent);
    launched(
        c.write_transaction(|c| {
            children::launch(c, &assign(&parent, &asker, ChildMode::Assign, "docs"))
        })
        .unwrap(),
    );

    // Acknowledging before delivery is refused; the parent's turn carries
    // it; acknowledged once, a second time changes nothing.
    let parent = fresh(&mut c, &parent);
    let early = c.write_transaction(|c| results::ack(c, &parent, &id, &asker.task_id));
    assert!(
        matches!(&early, Err(StoreError::Refused { code, .. }) if *code == results::ACK_REFUSED),
        "{early:?}"
    );
    let carried = c
        .write_transaction(|c| results::carry(c, &parent, &asker.task_id))
        .unwrap();
    assert_eq!(carried.len(), 1);
    assert_eq!(carried[0].result_id, id);
    assert_eq!(carried[0].report.summary, "parser fixed");
    assert_eq!(carried[0].delivery.state, DeliveryState::Delivered);
    assert!(results::carried_by(&mut c, &asker.task_id).unwrap());

    // A restart: delivered and not acknowledged is pending again; a second
    // reconciliation changes nothing.
    let r = c
        .write_transaction(|c| results::after_restart(c, LIMITS, "default"))
        .unwrap();
    assert_eq!((r.redelivered, r.terminalised), (1, 0));
    let r = c
        .write_transaction(|c| results::after_restart(c, LIMITS, "default"))
        .unwrap();
    assert_eq!((r.redelivered, r.terminalised), (0, 0));
    let carried = c
        .write_transaction(|c| results::carry(c, &parent, &asker.task_id))
        .unwrap();
    assert_eq!(carried[0].delivery.deliveries, 2, "delivered again");

    // Another workflow cannot acknowledge it.
    let other = {
        let req = crate::actors::request("widgets", 2, 10, "@ccbot other issue");
        let out = c.write_transaction(|c| ingest::ingest(c, &req)).unwrap();
        let IngestOutcome::Accepted { task_id, .. } = out else {
            panic!("{out:?}")
        };
        let t = tasks::find(&mut c, &task_id).unwrap().unwrap();
        c.write_transaction(|c| workflows::join(c, &t, "other"))
            .unwrap()
    };
    let foreign = c.write_transaction(|c| results::ack(c, &other, &id, &asker.task_id));
    assert!(
        matches!(&foreign, Err(StoreError::Refused { code, .. }) if *code == results::ACK_REFUSED),
        "{foreign:?}"
    );
    let parent = fresh(&mut c, &parent);
    let acked = c
        .write_transaction(|c| results::ack(c, &parent, &id, &asker.task_id))
        .unwrap();
    assert_eq!(acked, Acked::Now);
    let acked = c
        .write_transaction(|c| results::ack(c, &parent, &id, &asker.task_id))
        .unwrap();
    assert_eq!(acked, Acked::Already);
    let carried = c
        .write_transaction(|c| results::carry(c, &parent, &asker.task_id))
        .unwrap();
    assert!(
        carried.is_empty(),
        "an acknowledged result is not carried again"
    );

    // The parent ends: its live children are cancelled (their queued turns
    // with them) and what was bound to it goes nowhere.
    let sib = children::of(&mut c, &parent.workflow_id).unwrap();
    let live: Vec<_> = sib.iter().filter(|w| !w.state.is_end()).collect();
    assert_eq!(live.len(), 2);
    let second_w = workflows::find(&mut c, &second.workflow_id)
        .unwrap()
        .unwrap();
    let second_task = first_task(&mut c, &second);
    let parent = fresh(&mut c, &parent);
    c.write_transaction(|c| {
        workflows::end(
            c,
            &parent,
            parent.version,
            WorkflowState::Cancelled,
            "cancelled",
            None,
            None,
        )
    })
    .unwrap();
    for w in children::of(&mut c, &parent.workflow_id).unwrap() {
        assert!(w.state.is_end(), "{w:?}");
    }
    let t = tasks::find(&mut c, &second_task.task_id).unwrap().unwrap();
    assert_eq!(t.state, TaskState::Cancelled);
    // A result recorded after is refused: its child has ended.
    let second_w = fresh(&mut c, &second_w);
    let late = record(&mut c, &second_w, &second_task, "too late");
    assert!(
        matches!(&late, Err(StoreError::Refused { code, .. }) if *code == results::CHILD_NOT_OPEN),
        "{late:?}"
    );
}

#[test]
fn children_rows_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    children_rows(&format!("sqlite://{}", dir.path().join("c.db").display()));
}

#[test]
fn children_rows_postgres() {
    let db = PgDb::create();
    children_rows(&db.url);
}

/// A handoff's parent waits for its child and opens again with the result
/// (a continuation due now carries it); a delivery whose parent ended is
/// terminalised, never rebound; the parent is continued again after a
/// restart while a result waits for it.
fn handoff_rows(url: &str) {
    let (mut c, asker, parent, child) =
        with_child(url, "@ccbot hand it over", ChildMode::Handoff, "do it");
    let parent = fresh(&mut c, &parent);
    assert_eq!(parent.state, WorkflowState::WaitingChild);
    assert!(!workflows::continuation_pending(&mut c, &parent.workflow_id).unwrap());
    // Waiting, it delegates nothing more.
    let refused = c
        .write_transaction(|c| {
            children::launch(c, &assign(&parent, &asker, ChildMode::Assign, "more"))
        })
        .unwrap();
    assert_eq!(
        refused,
        Launched::ParentNotOpen {
            state: WorkflowState::WaitingChild
        }
    );
    let task = first_task(&mut c, &child);
    let cw = workflows::find(&mut c, &child.workflow_id)
        .unwrap()
        .unwrap();
    record(&mut c, &cw, &task, "done").unwrap();
    let parent = fresh(&mut c, &parent);
    assert_eq!(parent.state, WorkflowState::Open);
    assert!(workflows::continuation_pending(&mut c, &parent.workflow_id).unwrap());
    // The parent's continuation was due now.
    let cont = workflows::last_input(&mut c, &parent.workflow_id).unwrap();
    assert_eq!(cont.continuation, Some(1));
    assert!(cont.next_retry_at.as_deref() <= Some(codex_bridge::store::now().as_str()));

    // The child's worktree stays while its parent has yet to acknowledge
    // its result (the parent may still read it), and may retire after.
    let retirable = |c: &mut DbConn| -> bool {
        worktrees::retirable(c, None, "2999-01-01T00:00:00Z")
            .unwrap()
            .iter()
            .any(|(_, s)| s == &child.session_key)
    };
    c.write_transaction(|c| worktrees::prepared(c, &child.session_key, &task.repo_key))
        .unwrap();
    assert!(
        !retirable(&mut c),
        "kept while the result is unacknowledged"
    );

    // The parent ends before it reads the result: terminalised.
    c.write_transaction(|c| {
        workflows::end(
            c,
            &parent,
            parent.version,
            WorkflowState::Cancelled,
            "cancelled",
            None,
            None,
        )
    })
    .unwrap();
    let listed = results::list(&mut c, &parent.workflow_id).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].delivery.state, DeliveryState::Terminalised);
    assert_eq!(listed[0].delivery.workflow_id, parent.workflow_id);
    let r = c
        .write_transaction(|c| results::after_restart(c, LIMITS, "default"))
        .unwrap();
    assert!(r.waiting.is_empty());
    assert!(retirable(&mut c), "nothing waits on the child any more");
}

#[test]
fn handoff_rows_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    handoff_rows(&format!("sqlite://{}", dir.path().join("h.db").display()));
}

#[test]
fn handoff_rows_postgres() {
    let db = PgDb::create();
    handoff_rows(&db.url);
}

/// A child's result that arrives while its parent waits for its owner waits
/// with it, through a restart too: the reconciliation leaves it pending and
/// moves nothing, and the turn that follows the owner's answer carries it.
fn gated_rows(url: &str) {
    use codex_bridge::domain::workflow::GateKind;
    let (mut c, asker, parent, child) = with_child(
        url,
        "@ccbot fix the parser, then ask me",
        ChildMode::Assign,
        "implement",
    );
    let parent = fresh(&mut c, &parent);
    c.write_transaction(|c| {
        workflows::gate(
            c,
            &parent,
            parent.version,
            GateKind::Publish,
            "May I publish?",
            &asker.task_id,
        )
    })
    .unwrap();
    let task = first_task(&mut c, &child);
    let cw = workflows::find(&mut c, &child.workflow_id)
        .unwrap()
        .unwrap();
    let id = record(&mut c, &cw, &task, "implemented while gated").unwrap();
    let parent = fresh(&mut c, &parent);
    assert_eq!(parent.state, WorkflowState::WaitingOwner);
    assert!(
        !workflows::continuation_pending(&mut c, &parent.workflow_id).unwrap(),
        "nothing runs past the owner"
    );

    for _ in 0..2 {
        let r = c
            .write_transaction(|c| results::after_restart(c, LIMITS, "default"))
            .unwrap();
        assert_eq!(r.terminalised, 0, "a gate is not an end: {r:?}");
        let listed = results::list(&mut c, &parent.workflow_id).unwrap();
        assert_eq!(listed[0].delivery.state, DeliveryState::Pending);
        let parent = fresh(&mut c, &parent);
        assert_eq!(parent.state, WorkflowState::WaitingOwner);
        assert!(!workflows::continuation_pending(&mut c, &parent.workflow_id).unwrap());
    }

    // The owner answers; the turn that follows carries the result, which
    // the parent then acknowledges.
    let answer = comment(&mut c, 2, "@ccbot yes, publish");
    c.write_transaction(|c| {
        workflows::resume(c, &parent, parent.version, Some(&answer.task_id), "bob")
    })
    .unwrap();
    let parent = fresh(&mut c, &parent);
    let carried = c
        .write_transaction(|c| results::carry(c, &parent, &answer.task_id))
        .unwrap();
    assert_eq!(carried.len(), 1);
    assert_eq!(carried[0].report.summary, "implemented while gated");
    let acked = c
        .write_transaction(|c| results::ack(c, &parent, &id, &answer.task_id))
        .unwrap();
    assert_eq!(acked, Acked::Now);
}

#[test]
fn gated_rows_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    gated_rows(&format!("sqlite://{}", dir.path().join("g.db").display()));
}

#[test]
fn gated_rows_postgres() {
    let db = PgDb::create();
    gated_rows(&db.url);
}

/// An operator's cancel of one turn of an open child is refused (the child
/// would be left with nothing to run and its handoff parent waiting for
/// good); cancelling the child whole cancels that turn and gives the parent
/// its incomplete result, which ends the wait.
fn operator_rows(url: &str) {
    use codex_bridge::store::control::{self, ControlRequest};
    let (mut c, _, parent, child) = with_child(
        url,
        "@ccbot hand the parser over",
        ChildMode::Handoff,
        "parse",
    );
    let task = first_task(&mut c, &child);
    let req = |id: &str| ControlRequest {
        request_id: id.into(),
        reason: "stuck".into(),
        actor: "admin:ops".into(),
    };
    let refused = c.write_transaction(|c| control::cancel_task(c, &req("r1"), &task.task_id));
    match refused {
        Err(StoreError::Refused { code, message }) => {
            assert_eq!(code, "child_open");
            assert!(message.contains(&format!("workflows/{}/cancel", child.workflow_id)));
        }
        other => panic!("an open child's turn was cancelled alone: {other:?}"),
    }
    // Nor may the CLI's (or the API's) reconciliation end it.
    let reconciled = c.write_transaction(|c| {
        control::reconcile(
            c,
            &task.task_id,
            "attempt-1",
            codex_bridge::store::tasks::Verdict::Failed,
            "admin:ops",
            "stuck",
        )
    });
    assert!(
        matches!(&reconciled, Err(StoreError::Refused { code, .. }) if *code == "child_open"),
        "{reconciled:?}"
    );
    assert_eq!(
        tasks::find(&mut c, &task.task_id).unwrap().unwrap().state,
        TaskState::Queued
    );

    c.write_transaction(|c| {
        workflows::admin::cancel(c, &req("r2"), &child.workflow_id, LIMITS, "default")
    })
    .unwrap();
    assert_eq!(
        tasks::find(&mut c, &task.task_id).unwrap().unwrap().state,
        TaskState::Cancelled,
        "the child's turn not yet started ends with it"
    );
    let listed = results::list(&mut c, &parent.workflow_id).unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].incomplete);
    let parent = fresh(&mut c, &parent);
    assert_eq!(
        parent.state,
        WorkflowState::Open,
        "the handoff's wait ended"
    );
    assert!(workflows::continuation_pending(&mut c, &parent.workflow_id).unwrap());
}

#[test]
fn operator_rows_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    operator_rows(&format!("sqlite://{}", dir.path().join("o.db").display()));
}

#[test]
fn operator_rows_postgres() {
    let db = PgDb::create();
    operator_rows(&db.url);
}
