//! `POST /api/worker/v1/reconcile` against a running server, on SQLite and
//! PostgreSQL: a worker settles an uncertain attempt it owns (the task ends
//! `failed`, audited under the worker's name, once: a repeat answers the
//! same event), and is refused clearly otherwise: without the confirmation,
//! with a bad verdict, for an unknown task or attempt, another worker's
//! attempt, or a task that is not uncertain. An attempt whose start a
//! worker took is that worker's even when its answer never arrived.

use crate::testapp::*;
use codex_bridge::domain::TaskId;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::tasks::{self, TransitionOutcome, TransitionRequest};
use serde_json::{json, Value};

fn register(s: &TestApp, name: &str) -> (String, String) {
    crate::workerproc::register(s, name, &["acme/widgets"])
}

fn reconcile(s: &TestApp, token: &str, body: Value) -> Reply {
    let headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("Authorization".to_owned(), format!("Bearer {token}")),
    ];
    s.post_raw(
        "/api/worker/v1/reconcile",
        &headers,
        body.to_string().as_bytes(),
    )
}

/// Moves `task` through `states`, opening its attempt owned by `owner` as
/// it is leased (as a session whose turn went to that worker would); the
/// attempt.
fn drive(s: &TestApp, task: &str, owner: &str, states: &[TaskState]) -> String {
    let task_id = &task.parse::<TaskId>().unwrap();
    let mut c = s.db();
    c.write_transaction(|c| {
        let mut attempt = None;
        for to in states {
            let out = tasks::transition(
                c,
                &TransitionRequest {
                    task_id,
                    to: *to,
                    expected_version: None,
                    actor: "test",
                    reason: Some("set up"),
                    error_code: None,
                },
            )?;
            assert!(matches!(out, TransitionOutcome::Applied { .. }), "{out:?}");
            if *to == TaskState::Leased {
                attempt = Some(codex_bridge::store::attempts::start_attempt(
                    c,
                    task_id,
                    Some("lease-1"),
                    Some(owner),
                )?);
            }
        }
        Ok::<_, codex_bridge::store::StoreError>(attempt.unwrap().attempt_id)
    })
    .unwrap()
}

fn body(task: &str, attempt: &str) -> Value {
    json!({
        "taskId": task,
        "attemptId": attempt,
        "verdict": "failed",
        "confirmNoActiveTurn": true,
        "operator": "alice",
        "reason": "no codex process left",
    })
}

fn a_worker_reconciles_only_its_own_uncertain_attempt(db: Db) {
    let mut s = TestApp::start(db);
    let (mine, token) = register(&s, "build-1");
    let (_, other_token) = register(&s, "build-2");
    let uncertain = s.comment("wr-1", 1, "@ccbot one", "widgets", 1).json["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let settled = s.comment("wr-2", 2, "@ccbot two", "widgets", 2).json["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Nothing but the test moves the tasks.
    s.stop();
    let owner = format!("worker:{mine}");
    use TaskState::*;
    let attempt = drive(
        &s,
        &uncertain,
        &owner,
        &[Leased, Running, NeedsReconciliation],
    );
    let other_attempt = drive(&s, &settled, &owner, &[Leased, Failed]);
    s.start_again();

    let mut unconfirmed = body(&uncertain, &attempt);
    unconfirmed["confirmNoActiveTurn"] = json!(false);
    let r = reconcile(&s, &token, unconfirmed);
    assert_eq!(
        (r.status, r.json["code"].as_str()),
        (400, Some("confirmation_required"))
    );
    let mut verdict = body(&uncertain, &attempt);
    verdict["verdict"] = json!("maybe");
    let r = reconcile(&s, &token, verdict);
    assert_eq!(
        (r.status, r.json["code"].as_str()),
        (400, Some("invalid_verdict"))
    );
    let r = reconcile(&s, &token, body(TaskId::mint().as_str(), &attempt));
    assert_eq!(r.status, 404, "{:?}", r.json);
    let r = reconcile(&s, &token, body(&uncertain, "att-unknown"));
    assert_eq!(r.status, 404, "{:?}", r.json);
    let r = reconcile(&s, &other_token, body(&uncertain, &attempt));
    assert_eq!(
        (r.status, r.json["code"].as_str()),
        (409, Some("attempt_of_another_worker")),
        "{:?}",
        r.json
    );
    let r = reconcile(&s, &token, body(&settled, &other_attempt));
    assert_eq!(
        (r.status, r.json["code"].as_str()),
        (409, Some("not_uncertain")),
        "{:?}",
        r.json
    );
    let state = |t: &str| {
        s.admin_get(&format!("/api/gitea-workflow/tasks/{t}")).json["task"]["state"].clone()
    };
    assert_eq!(state(&uncertain), "needs_reconciliation");
    assert_eq!(state(&settled), "failed");

    let r = reconcile(&s, &token, body(&uncertain, &attempt));
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["action"], "task.reconciled");
    assert_eq!(r.json["actor"], owner.as_str());
    assert_eq!(r.json["toState"], "failed");
    assert_eq!(state(&uncertain), "failed");
    let again = reconcile(&s, &token, body(&uncertain, &attempt));
    assert_eq!(again.status, 200, "{:?}", again.json);
    assert_eq!(again.json["eventId"], r.json["eventId"], "settled once");
}

#[test]
fn a_worker_reconciles_only_its_own_uncertain_attempt_sqlite() {
    a_worker_reconciles_only_its_own_uncertain_attempt(Db::Sqlite);
}

#[test]
fn a_worker_reconciles_only_its_own_uncertain_attempt_postgres() {
    a_worker_reconciles_only_its_own_uncertain_attempt(Db::Postgres);
}

/// A start taken by one worker's poll whose answer never reached the
/// server (the worker was cut off, or died): the attempt names that worker
/// from the moment it took the call, so another worker given the same
/// repository may not reconcile it; the one that took it may.
fn a_start_taken_but_never_answered_is_the_taking_workers_to_reconcile(db: Db) {
    use codex_bridge::store::{instances, worker_calls};
    let mut s = TestApp::start(db);
    let (taker, token) = register(&s, "build-1");
    let (_, other_token) = register(&s, "build-2");
    let task = s.comment("wr-3", 3, "@ccbot three", "widgets", 3).json["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    s.stop();
    // A server process that queued the turn's start and then went quiet.
    let server = "default:elsewhere:1:aa";
    use TaskState::*;
    let attempt = drive(&s, &task, server, &[Leased, Running, NeedsReconciliation]);
    let call = worker_calls::CallId::mint();
    let start = crate::worker_calls::start(&task, &attempt);
    {
        let mut c = s.db();
        instances::register(&mut c, server, "default", "test").unwrap();
        c.write_transaction(|c| {
            worker_calls::insert(
                c,
                &call,
                "acme/widgets",
                server,
                &start,
                true,
                std::time::Duration::from_secs(600),
            )
        })
        .unwrap();
    }
    s.start_again();

    let headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("Authorization".to_owned(), format!("Bearer {token}")),
    ];
    let lease = s.post_raw(
        "/api/worker/v1/leases",
        &headers,
        json!({"protocol": 1, "repository": "acme/widgets"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(lease.status, 200, "{:?}", lease.json);
    let lease_id = lease.json["leaseId"].as_str().unwrap();
    let polled = s.get(
        &format!("/api/worker/v1/leases/{lease_id}/calls?waitMs=0"),
        Some(&token),
    );
    assert_eq!(polled.status, 200, "{:?}", polled.json);
    assert_eq!(
        polled.json["calls"][0]["callId"],
        call.as_str(),
        "{:?}",
        polled.json
    );
    // No answer ever comes.
    let r = reconcile(&s, &other_token, body(&task, &attempt));
    assert_eq!(
        (r.status, r.json["code"].as_str()),
        (409, Some("attempt_of_another_worker")),
        "{:?}",
        r.json
    );
    let r = reconcile(&s, &token, body(&task, &attempt));
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["actor"], format!("worker:{taker}").as_str());
    assert_eq!(r.json["toState"], "failed");
}

#[test]
fn a_start_taken_but_never_answered_is_the_taking_workers_to_reconcile_sqlite() {
    a_start_taken_but_never_answered_is_the_taking_workers_to_reconcile(Db::Sqlite);
}

#[test]
fn a_start_taken_but_never_answered_is_the_taking_workers_to_reconcile_postgres() {
    a_start_taken_but_never_answered_is_the_taking_workers_to_reconcile(Db::Postgres);
}
