//! Children's results on both backends, past what `children_store` shows:
//! delivery in the order results were recorded, each bound to the parent's
//! turn that asked; the status and times operators read; a child's worktree
//! free to retire once its result is acknowledged; a late result after an
//! incomplete one refused; a refusal before launch on record; and a second
//! workflow on the same Issue numbering its children on and never carrying
//! what was bound to the first.

use crate::children_store::{
    assign, comment, first_task, fresh, launched, record, with_child, LIMITS,
};
use crate::support::*;
use codex_bridge::domain::workflow::children::ChildMode;
use codex_bridge::domain::workflow::results::{DeliveryState, ResultStatus};
use codex_bridge::domain::workflow::WorkflowState;
use codex_bridge::store::control::ControlRequest;
use codex_bridge::store::workflows::children::{self, Launched};
use codex_bridge::store::workflows::{self, results};
use codex_bridge::store::{worktrees, DbConn, StoreError};

fn refused_with(r: Result<impl std::fmt::Debug, StoreError>, want: &str) {
    match r {
        Err(StoreError::Refused { code, .. }) if code == want => {}
        other => panic!("expected the refusal {want}, got {other:?}"),
    }
}

fn results_rows(url: &str) {
    let (mut c, asker, parent, first) = with_child(
        url,
        "@ccbot fix the parser, with help",
        ChildMode::Assign,
        "implement",
    );
    let parent = fresh(&mut c, &parent);
    let second = launched(
        c.write_transaction(|c| {
            children::launch(c, &assign(&parent, &asker, ChildMode::Assign, "review"))
        })
        .unwrap(),
    );

    // Past max_children_per_workflow: nothing launched, and the refusal is
    // on record.
    let parent = fresh(&mut c, &parent);
    let third = c
        .write_transaction(|c| {
            children::launch(c, &assign(&parent, &asker, ChildMode::Assign, "docs"))
        })
        .unwrap();
    assert_eq!(third, Launched::NotAdmitted { running: 2 });
    assert_eq!(
        count_where(
            &mut c,
            "audit_events",
            "action = 'workflow.child_not_admitted'"
        ),
        1
    );

    // The second child records first: delivery follows the order results
    // were recorded in, not the children's numbers.
    let (t1, t2) = (first_task(&mut c, &first), first_task(&mut c, &second));
    let w2 = workflows::find(&mut c, &second.workflow_id)
        .unwrap()
        .unwrap();
    let r2 = record(&mut c, &w2, &t2, "reviewed").unwrap();
    let w1 = workflows::find(&mut c, &first.workflow_id)
        .unwrap()
        .unwrap();
    let r1 = record(&mut c, &w1, &t1, "implemented").unwrap();
    let listed = results::list(&mut c, &parent.workflow_id).unwrap();
    assert!(listed.iter().all(|r| r.status == ResultStatus::Recorded
        && r.delivered_at.is_none()
        && r.workflow_id == parent.workflow_id
        // Bound to the parent's turn that asked for the child.
        && r.delivery.created_by_task.as_ref() == Some(&asker.task_id)));

    let parent = fresh(&mut c, &parent);
    let carried = c
        .write_transaction(|c| results::carry(c, &parent, &asker.task_id))
        .unwrap();
    let order: Vec<_> = carried.iter().map(|r| r.result_id.clone()).collect();
    assert_eq!(
        order,
        [r2.clone(), r1.clone()],
        "first recorded, first delivered"
    );
    assert!(carried
        .iter()
        .all(|r| r.status == ResultStatus::Delivered && r.delivered_at.is_some()));
    let delivered_at = carried[0].delivered_at.clone();

    // After a restart it is pending again, still shown as delivered, and
    // its first delivery time stays.
    c.write_transaction(|c| results::after_restart(c, LIMITS, "default"))
        .unwrap();
    let listed = results::list(&mut c, &parent.workflow_id).unwrap();
    assert_eq!(listed[0].delivery.state, DeliveryState::Pending);
    assert_eq!(listed[0].status, ResultStatus::Delivered);
    assert_eq!(listed[0].delivered_at, delivered_at);
    let carried = c
        .write_transaction(|c| results::carry(c, &parent, &asker.task_id))
        .unwrap();
    assert_eq!(
        carried[0].delivered_at, delivered_at,
        "the first delivery's time"
    );

    // Acknowledged: its time is recorded, and the child's worktree may
    // retire (nothing waits on it any more); the other child's may not.
    let retirable = |c: &mut DbConn, child: &children::Child| -> bool {
        worktrees::retirable(c, None, "2999-01-01T00:00:00Z")
            .unwrap()
            .iter()
            .any(|(_, s)| s == &child.session_key)
    };
    for (child, t) in [(&first, &t1), (&second, &t2)] {
        c.write_transaction(|c| worktrees::prepared(c, &child.session_key, &t.repo_key))
            .unwrap();
    }
    assert!(!retirable(&mut c, &second));
    c.write_transaction(|c| results::ack(c, &parent, &r2, &asker.task_id))
        .unwrap();
    let listed = results::list(&mut c, &parent.workflow_id).unwrap();
    let acked = listed.iter().find(|r| r.result_id == r2).unwrap();
    assert_eq!(acked.status, ResultStatus::Acknowledged);
    assert!(acked.acknowledged_at.as_deref() >= acked.delivered_at.as_deref());
    assert!(
        retirable(&mut c, &second),
        "acknowledged: its worktree may go"
    );
    assert!(
        !retirable(&mut c, &first),
        "unacknowledged: its worktree stays"
    );

    // The workflow ends with r1 unacknowledged; the owner's next comment
    // opens a second workflow on the same Issue. It never carries or
    // acknowledges what was bound to the first, and numbers its children
    // on from the first's.
    let parent = fresh(&mut c, &parent);
    c.write_transaction(|c| {
        workflows::end(
            c,
            &parent,
            parent.version,
            WorkflowState::Completed,
            "completed",
            None,
            None,
        )
    })
    .unwrap();
    let next = comment(&mut c, 2, "@ccbot now the docs");
    let again = c
        .write_transaction(|c| workflows::join(c, &next, "now the docs"))
        .unwrap();
    assert_ne!(again.workflow_id, parent.workflow_id);
    let carried = c
        .write_transaction(|c| results::carry(c, &again, &next.task_id))
        .unwrap();
    assert!(carried.is_empty(), "{carried:?}");
    refused_with(
        c.write_transaction(|c| results::ack(c, &again, &r1, &next.task_id)),
        results::ACK_REFUSED,
    );
    let listed = results::list(&mut c, &parent.workflow_id).unwrap();
    let stale = listed.iter().find(|r| r.result_id == r1).unwrap();
    assert_eq!(stale.status, ResultStatus::Terminalised);
    let docs = launched(
        c.write_transaction(|c| {
            children::launch(c, &assign(&again, &next, ChildMode::Assign, "docs"))
        })
        .unwrap(),
    );
    assert_eq!(docs.session_key, next.session_key.child_session(3));
}

/// An operator cancels a child: its one result is the incomplete one the
/// bridge writes, and a result the child still sends after is refused.
fn late_rows(url: &str) {
    let (mut c, _, parent, child) = with_child(url, "@ccbot fix it", ChildMode::Assign, "fix");
    let task = first_task(&mut c, &child);
    let req = ControlRequest {
        request_id: "cancel-1".into(),
        reason: "wrong approach".into(),
        actor: "admin:ops".into(),
    };
    c.write_transaction(|c| {
        workflows::admin::cancel(c, &req, &child.workflow_id, LIMITS, "default")
    })
    .unwrap();
    let cw = workflows::find(&mut c, &child.workflow_id)
        .unwrap()
        .unwrap();
    assert!(cw.state.is_end(), "{cw:?}");
    refused_with(
        record(&mut c, &cw, &task, "done after all"),
        results::CHILD_NOT_OPEN,
    );
    let listed = results::list(&mut c, &parent.workflow_id).unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].incomplete);
    assert_eq!(listed[0].status, ResultStatus::Incomplete);
    assert!(listed[0].report.summary.contains("wrong approach"));
}

#[test]
fn results_rows_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    results_rows(&format!("sqlite://{}", dir.path().join("r.db").display()));
}

#[test]
fn results_rows_postgres() {
    let db = PgDb::create();
    results_rows(&db.url);
}

#[test]
fn late_rows_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    late_rows(&format!("sqlite://{}", dir.path().join("l.db").display()));
}

#[test]
fn late_rows_postgres() {
    let db = PgDb::create();
    late_rows(&db.url);
}
