//! The workflow's rows on both backends: one live workflow per session that
//! every task of the session joins; a continuation created with its
//! delivery, its task and its outbox entry under an operation derived from
//! the workflow and its number; at most one continuation alive; every write
//! a compare-and-swap on the version decided on; and an end that cancels a
//! waiting continuation and closes the gate in the same transaction.

use crate::support::*;
use codex_bridge::domain::workflow::{GateKind, WorkflowState};
use codex_bridge::domain::OperationId;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::ingest::{self, IngestOutcome};
use codex_bridge::store::models::Task;
use codex_bridge::store::workflows::{self, ContinueWith};
use codex_bridge::store::{run_migrations, sessions, steer, tasks, DbConn, StoreError};

fn comment(c: &mut DbConn, id: i64, text: &str) -> Task {
    let req = crate::actors::request("widgets", 1, id, text);
    let out = c.write_transaction(|c| ingest::ingest(c, &req)).unwrap();
    let IngestOutcome::Accepted { task_id, .. } = out else {
        panic!("not accepted: {out:?}")
    };
    tasks::find(c, &task_id).unwrap().unwrap()
}

fn continuation<'a>(after: &'a Task, version: i64, seq: i64) -> ContinueWith<'a> {
    ContinueWith {
        version,
        seq,
        idle_finals: 1,
        due_at: "2026-01-01T00:00:05Z".into(),
        after,
        instance_id: "default",
        text: "Continue: the tests still fail.",
        why: "the workflow continues after an ordinary final",
    }
}

fn workflow_rows(url: &str) {
    let mut c = connect(url);
    run_migrations(&mut c).unwrap();
    let first = comment(&mut c, 1, "@ccbot fix the parser");
    let second = comment(&mut c, 2, "@ccbot and the docs");

    // One live workflow per session, owned by the first task's author.
    let w = c
        .write_transaction(|c| workflows::join(c, &first, "fix the parser"))
        .unwrap();
    assert_eq!(w.state, WorkflowState::Open);
    assert_eq!(w.owner, "bob");
    let same = c
        .write_transaction(|c| workflows::join(c, &second, "and the docs"))
        .unwrap();
    assert_eq!(same.workflow_id, w.workflow_id);
    let first = tasks::find(&mut c, &first.task_id).unwrap().unwrap();
    assert_eq!(first.workflow_id.as_ref(), Some(&w.workflow_id));

    // A continuation: its task, its entry, its derived operation.
    let cont = c
        .write_transaction(|c| workflows::continue_with(c, &w, &continuation(&first, w.version, 1)))
        .unwrap();
    let t = tasks::find(&mut c, &cont).unwrap().unwrap();
    assert_eq!(t.state, TaskState::Queued);
    assert_eq!(t.continuation, Some(1));
    assert_eq!(t.author, "bob");
    assert_eq!(
        t.delivery_key,
        format!("default:continuation:{}:1", w.workflow_id)
    );
    let e = sessions::outbox_entry(&mut c, &cont).unwrap().unwrap();
    assert_eq!(
        e.operation_id,
        OperationId::of_continuation(&w.workflow_id, 1)
    );
    assert!(workflows::continuation_pending(&mut c, &w.workflow_id).unwrap());
    let w = workflows::find(&mut c, &w.workflow_id).unwrap().unwrap();
    assert_eq!((w.continuations, w.idle_finals), (1, 1));

    // A decision made on an older version writes nothing.
    let stale = c.write_transaction(|c| workflows::count_final(c, &w, w.version - 1, 5));
    assert!(
        matches!(stale, Err(StoreError::Refused { code, .. }) if code == steer::STALE),
        "{stale:?}"
    );
    // A second continuation while one is alive breaks the unique index.
    let twice = c.write_transaction(|c| {
        workflows::continue_with(c, &w, &continuation(&first, w.version, 2))
    });
    assert!(twice.is_err(), "a second live continuation was written");
    let w = workflows::find(&mut c, &w.workflow_id).unwrap().unwrap();
    assert_eq!(w.continuations, 1, "the failed write left nothing behind");

    // A gate supersedes the waiting continuation; the owner resumes it.
    let gate = c
        .write_transaction(|c| {
            workflows::gate(
                c,
                &w,
                w.version,
                GateKind::Publish,
                "Publish 1.0?",
                &first.task_id,
            )
        })
        .unwrap();
    assert_eq!(
        tasks::find(&mut c, &cont).unwrap().unwrap().state,
        TaskState::Cancelled
    );
    let open = workflows::open_gate(&mut c, &w.workflow_id)
        .unwrap()
        .unwrap();
    assert_eq!(open.gate_id, gate);
    let w = workflows::find(&mut c, &w.workflow_id).unwrap().unwrap();
    assert_eq!(w.state, WorkflowState::WaitingOwner);
    c.write_transaction(|c| workflows::resume(c, &w, w.version, Some(&second.task_id), "bob"))
        .unwrap();
    assert!(workflows::open_gate(&mut c, &w.workflow_id)
        .unwrap()
        .is_none());
    let w = workflows::find(&mut c, &w.workflow_id).unwrap().unwrap();
    assert_eq!((w.state, w.idle_finals), (WorkflowState::Open, 0));

    // The end cancels a waiting continuation in the same transaction, even
    // one waiting out a retry after a failure before admission, and its
    // entry no longer holds the session; a new workflow may then start.
    let again = c
        .write_transaction(|c| workflows::continue_with(c, &w, &continuation(&first, w.version, 2)))
        .unwrap();
    for to in [TaskState::Leased, TaskState::RetryWait] {
        let t = tasks::find(&mut c, &again).unwrap().unwrap();
        let moved = c
            .write_transaction(|c| {
                tasks::transition(
                    c,
                    &tasks::TransitionRequest {
                        task_id: &t.task_id,
                        expected_version: Some(t.state_version),
                        to,
                        actor: "test",
                        reason: None,
                        error_code: None,
                    },
                )
            })
            .unwrap();
        assert!(matches!(moved, tasks::TransitionOutcome::Applied { .. }));
    }
    let open_entries = |c: &mut DbConn| {
        sessions::session(c, &w.session_key)
            .unwrap()
            .unwrap()
            .open_entries
    };
    let entries = open_entries(&mut c);
    let w = workflows::find(&mut c, &w.workflow_id).unwrap().unwrap();
    workflows::admit_continuation(&w).expect("an open workflow admits its continuation");
    c.write_transaction(|c| {
        workflows::end(
            c,
            &w,
            w.version,
            WorkflowState::Completed,
            "completed",
            Some("done"),
            None,
        )
    })
    .unwrap();
    let t = tasks::find(&mut c, &again).unwrap().unwrap();
    assert_eq!(t.state, TaskState::Cancelled);
    assert_eq!(t.error_code.as_deref(), Some("superseded"));
    assert_eq!(open_entries(&mut c), entries - 1);
    // One being started when the workflow ended is refused where its
    // turn's intent would be recorded.
    let ended = workflows::find(&mut c, &w.workflow_id).unwrap().unwrap();
    assert!(matches!(
        workflows::admit_continuation(&ended),
        Err(StoreError::Refused { code, .. }) if code == workflows::NOT_OPEN
    ));
    assert!(workflows::live(&mut c, &w.session_key).unwrap().is_none());
    let third = comment(&mut c, 3, "@ccbot one more thing");
    let next = c
        .write_transaction(|c| workflows::join(c, &third, "one more thing"))
        .unwrap();
    assert_ne!(next.workflow_id, w.workflow_id);
}

#[test]
fn workflow_rows_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    workflow_rows(&format!("sqlite://{}", dir.path().join("w.db").display()));
}

#[test]
fn workflow_rows_postgres() {
    let db = PgDb::create();
    workflow_rows(&db.url);
}

/// A continuation is not started before its backoff ends.
fn a_continuation_waits_out_its_backoff(url: &str) {
    use codex_bridge::store::queue;
    let mut c = connect(url);
    run_migrations(&mut c).unwrap();
    let first = comment(&mut c, 1, "@ccbot fix the parser");
    let w = c
        .write_transaction(|c| workflows::join(c, &first, "fix the parser"))
        .unwrap();
    exec(
        &mut c,
        &format!(
            "UPDATE tasks SET state = 'succeeded' WHERE task_id = '{}'",
            first.task_id
        ),
    )
    .unwrap();
    let later = codex_bridge::store::format_time(chrono::Utc::now() + chrono::Duration::hours(1));
    let mut next = continuation(&first, w.version, 1);
    next.due_at = later;
    let cont = c
        .write_transaction(|c| workflows::continue_with(c, &w, &next))
        .unwrap();
    assert_eq!(
        queue::next_runnable(&mut c, &first.repo_key, &Default::default()).unwrap(),
        None
    );
    exec(
        &mut c,
        &format!("UPDATE tasks SET next_retry_at = '2000-01-01T00:00:00.000000Z' WHERE task_id = '{cont}'"),
    )
    .unwrap();
    let due = queue::next_runnable(&mut c, &first.repo_key, &Default::default()).unwrap();
    assert_eq!(due.map(|t| t.task_id), Some(cont));
}

#[test]
fn a_continuation_waits_out_its_backoff_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    a_continuation_waits_out_its_backoff(&format!(
        "sqlite://{}",
        dir.path().join("b.db").display()
    ));
}

#[test]
fn a_continuation_waits_out_its_backoff_postgres() {
    let db = PgDb::create();
    a_continuation_waits_out_its_backoff(&db.url);
}
