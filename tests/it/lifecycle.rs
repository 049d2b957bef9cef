//! The task lifecycle under concurrent writers, as a property: random event
//! sequences from several threads, each with its own connection, against real
//! SQLite and PostgreSQL databases. Only table transitions happen, terminal
//! states never change, and the history replays to the current state.

use crate::support::*;
use codex_bridge::domain::TaskId;
use codex_bridge::lifecycle::{self, Refusal, TaskState};
use codex_bridge::store::ingest;
use codex_bridge::store::tasks::{self, TransitionOutcome, TransitionRequest};
use codex_bridge::store::{run_migrations, DbConn, StoreError};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Event {
    /// Ask for the k-th successor of whatever state the writer reads.
    Legal { task: usize, k: usize },
    /// Ask for any state at all (mostly illegal).
    Any { task: usize, state: usize },
    /// Like `Any`, but without an expected version (the CAS happens in the UPDATE only).
    Blind { task: usize, state: usize },
}

const TASKS: usize = 5;

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => (0..TASKS, 0usize..8).prop_map(|(task, k)| Event::Legal { task, k }),
        1 => (0..TASKS, 0usize..21).prop_map(|(task, state)| Event::Any { task, state }),
        1 => (0..TASKS, 0usize..21).prop_map(|(task, state)| Event::Blind { task, state }),
    ]
}

fn seed(conn: &mut DbConn) -> Vec<TaskId> {
    (0..TASKS)
        .map(|i| {
            // A few tasks a session, so that its outbox counter moves.
            let req = crate::actors::request("widgets", (i % 3) as i64, i as i64, "@ccbot go");
            match conn.write_transaction(|c| ingest::ingest(c, &req)).unwrap() {
                ingest::IngestOutcome::Accepted { task_id, .. } => task_id,
                other => panic!("seed not accepted: {other:?}"),
            }
        })
        .collect()
}

fn current(conn: &mut DbConn, task_id: &TaskId) -> (TaskState, i64) {
    let t = tasks::find(conn, task_id).unwrap().unwrap();
    (t.state, t.state_version)
}

#[derive(Default, Debug)]
struct Tally {
    applied: usize,
    refused: usize,
    stale: usize,
}

fn writer(url: String, ids: Vec<TaskId>, events: Vec<Event>) -> Tally {
    let mut conn = connect(&url);
    let mut tally = Tally::default();
    for ev in events {
        let (task, to, expect) = match ev {
            Event::Legal { task, k } => {
                let (state, version) = current(&mut conn, &ids[task]);
                let next = state.successors();
                if next.is_empty() {
                    (task, TaskState::Queued, Some(version))
                } else {
                    (task, next[k % next.len()], Some(version))
                }
            }
            Event::Any { task, state } => {
                let (_, version) = current(&mut conn, &ids[task]);
                (task, TaskState::ALL[state], Some(version))
            }
            Event::Blind { task, state } => (task, TaskState::ALL[state], None),
        };
        let req = TransitionRequest {
            task_id: &ids[task],
            to,
            expected_version: expect,
            actor: "proptest",
            reason: Some("random event"),
            error_code: None,
        };
        let outcome = loop {
            match conn.write_transaction(|c| tasks::transition(c, &req)) {
                Err(StoreError::Contended(_)) => continue,
                other => break other.unwrap(),
            }
        };
        match outcome {
            TransitionOutcome::Applied { from, to, .. } => {
                assert!(
                    lifecycle::check(from, to).is_ok(),
                    "applied an illegal {from} -> {to}"
                );
                tally.applied += 1;
            }
            TransitionOutcome::Refused { .. } => tally.refused += 1,
            TransitionOutcome::Stale { .. } => tally.stale += 1,
        }
    }
    tally
}

fn check_invariants(conn: &mut DbConn, ids: &[TaskId], tallies: &[Tally]) {
    let mut history_rows = 0;
    for id in ids {
        let history = tasks::history(conn, id).unwrap();
        assert!(!history.is_empty());
        // Born `received` at version 1: the history holds every change after.
        let mut state = TaskState::Received;
        for (i, row) in history.iter().enumerate() {
            assert_eq!(row.state_version, i as i64 + 2, "versions are contiguous");
            let from: TaskState = row.from_state.unwrap();
            let to: TaskState = row.to_state;
            assert_eq!(from, state, "each row starts where the previous ended");
            assert!(
                lifecycle::check(from, to).is_ok(),
                "history holds {from} -> {to}"
            );
            state = to;
        }
        let (now, version) = current(conn, id);
        assert_eq!(now, state, "history replays to the current state");
        assert_eq!(version, history.len() as i64 + 1);
        history_rows += history.len();

        if now.is_terminal() {
            // Terminal means terminal: the store refuses, and so does the database itself.
            for to in TaskState::ALL {
                let out = conn
                    .write_transaction(|c| {
                        tasks::transition(
                            c,
                            &TransitionRequest {
                                task_id: id,
                                to,
                                expected_version: None,
                                actor: "proptest",
                                reason: None,
                                error_code: None,
                            },
                        )
                    })
                    .unwrap();
                assert!(
                    matches!(
                        out,
                        TransitionOutcome::Refused {
                            refusal: Refusal::Terminal,
                            ..
                        }
                    ),
                    "{out:?}"
                );
            }
            let direct = exec(
                conn,
                &format!("UPDATE tasks SET state = 'queued' WHERE task_id = '{id}'"),
            );
            assert!(
                direct.is_err(),
                "a direct UPDATE of a terminal task must fail"
            );
            assert_eq!(current(conn, id).0, now);
        }
    }
    let applied: usize = tallies.iter().map(|t| t.applied).sum();
    let refused: usize = tallies.iter().map(|t| t.refused).sum();
    // One row per task for its accept (received -> queued) plus one per
    // applied transition.
    assert_eq!(history_rows, ids.len() + applied);
    // One audit event per transition (the accept's is `webhook.accept`) and per
    // refusal (plus the ones the terminal checks above just wrote).
    let transitions = count_where(conn, "audit_events", "action = 'task.transition'");
    assert_eq!(transitions as usize, applied);
    let accepts = count_where(
        conn,
        "audit_events",
        "action = 'webhook.accept' AND from_state = 'received' AND to_state = 'queued'",
    );
    assert_eq!(accepts as usize, ids.len());
    let refusals = count_where(conn, "audit_events", "action = 'task.transition_refused'") as usize;
    assert!(refusals >= refused);
    // Each session counts exactly the outbox entries whose task has not ended.
    let terminal = TaskState::TERMINAL
        .map(|s| format!("'{}'", s.as_str()))
        .join(",");
    let miscounted = count_where(
        conn,
        "sessions",
        &format!(
            "open_entries <> (SELECT count(*) FROM outbox_entries o JOIN tasks t ON t.task_id = o.task_id \
             WHERE o.session_key = sessions.session_key AND t.state NOT IN ({terminal}))"
        ),
    );
    assert_eq!(
        miscounted, 0,
        "a session's open_entries differs from its unfinished outbox entries"
    );
}

fn run_case(url: &str, plans: Vec<Vec<Event>>) {
    let mut conn = connect(url);
    run_migrations(&mut conn).unwrap();
    let ids = seed(&mut conn);
    let handles: Vec<_> = plans
        .into_iter()
        .map(|events| {
            let (url, ids) = (url.to_owned(), ids.clone());
            std::thread::spawn(move || writer(url, ids, events))
        })
        .collect();
    let tallies: Vec<Tally> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    check_invariants(&mut conn, &ids, &tallies);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn lifecycle_holds_under_concurrent_writers_sqlite(plans in prop::collection::vec(prop::collection::vec(event(), 10..40), 4)) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("p.db").display());
        run_case(&url, plans);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn lifecycle_holds_under_concurrent_writers_postgres(plans in prop::collection::vec(prop::collection::vec(event(), 10..40), 4)) {
        let db = PgDb::create();
        run_case(&db.url, plans);
    }
}

#[test]
fn illegal_transitions_are_refused_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("p.db").display());
    let mut conn = connect(&url);
    run_migrations(&mut conn).unwrap();
    let ids = seed(&mut conn);
    let out = conn
        .write_transaction(|c| {
            tasks::transition(
                c,
                &TransitionRequest {
                    task_id: &ids[0],
                    to: TaskState::VerifyingReply,
                    expected_version: Some(2),
                    actor: "test",
                    reason: Some("skip ahead"),
                    error_code: None,
                },
            )
        })
        .unwrap();
    assert_eq!(
        out,
        TransitionOutcome::Refused {
            from: TaskState::Queued,
            to: TaskState::VerifyingReply,
            refusal: Refusal::NotInTable
        }
    );
    assert_eq!(current(&mut conn, &ids[0]), (TaskState::Queued, 2));
    assert_eq!(
        count_where(
            &mut conn,
            "audit_events",
            "action = 'task.transition_refused' AND error_code = 'illegal_transition'"
        ),
        1
    );
    // A stale version changes nothing.
    let out = conn
        .write_transaction(|c| {
            tasks::transition(
                c,
                &TransitionRequest {
                    task_id: &ids[0],
                    to: TaskState::Leased,
                    expected_version: Some(1),
                    actor: "test",
                    reason: None,
                    error_code: None,
                },
            )
        })
        .unwrap();
    assert_eq!(
        out,
        TransitionOutcome::Stale {
            state: TaskState::Queued,
            version: 2
        }
    );
    // History is append-only in the database too.
    assert!(exec(&mut conn, "UPDATE task_transitions SET actor = 'x'").is_err());
    assert!(exec(&mut conn, "DELETE FROM audit_events").is_err());
}
