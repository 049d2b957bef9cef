//! Wake-ups between server processes on one PostgreSQL: a signal one store
//! sends reaches the other processes' listeners and not its own, and an
//! approval decided through one process reaches the turn waiting for it in
//! another. (A repository a drained process gives back is taken at once by
//! another: `instances.rs`.)

use crate::support::*;
use crate::testapp::*;
use codex_bridge::config::DatabaseUrl;
use codex_bridge::store::signals::Signal;
use codex_bridge::store::Store;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn store(url: &str) -> Store {
    crate::support::open_store(DatabaseUrl::Postgres(url.to_owned()))
}

#[test]
fn a_signal_reaches_the_other_processes_and_not_its_sender_postgres() {
    let db = PgDb::create();
    let (a, b) = (store(&db.url), store(&db.url));
    let heard = |s: &Store| {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        s.listen(move |signal| sink.lock().unwrap().push(signal))
            .unwrap();
        got
    };
    let (by_a, by_b) = (heard(&a), heard(&b));
    let repo = Signal::Repo {
        repo_key: codex_bridge::domain::RepoKey::parse("default:acme/widgets").unwrap(),
    };
    // The listeners connect on threads of their own: send until B hears.
    wait_until("B to hear A's signal", Duration::from_secs(20), || {
        a.signal(repo.clone());
        !by_b.lock().unwrap().is_empty()
    });
    assert!(by_b.lock().unwrap().iter().all(|s| *s == repo));
    b.signal(Signal::Session {
        session_key: resource("default:acme/widgets:issue:7"),
        repo_key: codex_bridge::domain::RepoKey::parse("default:acme/widgets").unwrap(),
    });
    wait_until("A to hear B's signal", Duration::from_secs(20), || {
        by_a.lock()
            .unwrap()
            .iter()
            .any(|s| matches!(s, Signal::Session { .. }))
    });
    // Neither heard itself.
    assert!(by_a
        .lock()
        .unwrap()
        .iter()
        .all(|s| matches!(s, Signal::Session { .. })));
    assert!(by_b.lock().unwrap().iter().all(|s| *s == repo));
}

#[test]
fn a_listener_ends_with_its_store_postgres() {
    let db = PgDb::create();
    let mut c = connect(&db.url);
    let listening = |c: &mut codex_bridge::store::DbConn| {
        count_where(
            c,
            "pg_stat_activity",
            "datname = current_database() AND query LIKE 'LISTEN%'",
        )
    };
    let s = store(&db.url);
    s.listen(|_| {}).unwrap();
    wait_until("the listener to connect", Duration::from_secs(20), || {
        listening(&mut c) == 1
    });
    // A dropped store leaves no thread behind holding a connection (and
    // reconnecting to a database the process no longer uses).
    drop(s);
    wait_until(
        "the listener's connection to close",
        Duration::from_secs(10),
        || listening(&mut c) == 0,
    );
}

#[test]
fn an_approval_decided_through_another_process_reaches_the_waiting_turn_postgres() {
    const LONG: Duration = Duration::from_secs(60);
    let a = slow_sweeping_app();
    let task = a.task_comment(
        "signal-approve",
        801,
        "@ccbot risky [approval]",
        "widgets",
        3,
    );
    wait_task_state(&a.db_url, &task, "awaiting_approval", LONG);
    let b = a.another_instance();
    let pending = b.admin_get("/api/gitea-workflow/approvals");
    let id = pending.json["approvals"][0]["approvalId"]
        .as_str()
        .expect("B lists A's pending approval")
        .to_owned();
    let r = b.admin_post(
        &format!("/api/gitea-workflow/approvals/{id}/decide"),
        &json!({"decision": "accept", "requestId": "approve-via-b", "reason": "looks fine"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    // A's session, waiting on that approval, goes on at once.
    wait_task_state(&a.db_url, &task, "succeeded", Duration::from_secs(15));
}

/// A pause an operator lifts through one process starts the queued work at
/// once in the process that can run it: the second process here takes
/// webhooks and admin requests but runs no turns, and the first one sweeps
/// only once a minute.
#[test]
fn a_pause_lifted_through_another_process_starts_the_queued_work_at_once_postgres() {
    const SOON: Duration = Duration::from_secs(15);
    let a = slow_sweeping_app();
    let b = a.another_instance_with(|b| b.env("CODEX_BRIDGE_AGENT_RUNTIME", "none"));
    let control = |app: &TestApp, path: &str, id: &str| {
        let r = app.admin_post(
            &format!("/api/gitea-workflow/control/{path}"),
            &json!({"requestId": id, "reason": "maintenance"}),
        );
        assert_eq!(r.status, 200, "{path}: {:?}", r.json);
    };
    control(&a, "pause", "pause-1");
    let paused = a.task_comment("lift-1", 811, "@ccbot first", "widgets", 3);
    a.wait_repo_passes("default:acme/widgets", "paused");
    control(&b, "resume", "resume-1");
    wait_task_state(&a.db_url, &paused, "succeeded", SOON);
}

/// A process on PostgreSQL (scripted runtime, acme/widgets) whose registry
/// sweeps once a minute: what it does sooner, a signal made it do.
fn slow_sweeping_app() -> TestApp {
    let a = TestApp::builder()
        .git_sim()
        .scripted()
        .postgres()
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "60000")
        .start();
    a.git().create_repo("acme", "widgets");
    a
}
