//! `POST /api/worker/v1/finals` against a running server, on SQLite and
//! PostgreSQL: a worker's durable final of the attempt an uncertain task
//! waits on moves it `needs_reconciliation → verifying_reply`, once (a
//! repeat answers the same event); a final of an older attempt, of a task
//! that is not uncertain, or from a worker that cannot have run the attempt
//! changes nothing and is refused with a stable code.

use crate::testapp::*;
use codex_bridge::domain::TaskId;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::tasks::{self, TransitionOutcome, TransitionRequest};
use serde_json::{json, Value};

fn register(s: &TestApp, name: &str) -> (String, String) {
    crate::workerproc::register(s, name, &["acme/widgets"])
}

fn offer(s: &TestApp, token: &str, task: &str, attempt: &str) -> Reply {
    let headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("Authorization".to_owned(), format!("Bearer {token}")),
    ];
    let body: Value = json!({
        "taskId": task,
        "attemptId": attempt,
        "turnId": "turn-1",
        "finalText": "done",
    });
    s.post_raw(
        "/api/worker/v1/finals",
        &headers,
        body.to_string().as_bytes(),
    )
}

/// Moves `task` through `states`, opening an attempt owned by `owner` each
/// time it is leased; the attempts, oldest first.
fn drive(s: &TestApp, task: &str, owner: &str, states: &[TaskState]) -> Vec<String> {
    let task_id = &task.parse::<TaskId>().unwrap();
    let mut c = s.db();
    c.write_transaction(|c| {
        let mut opened = vec![];
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
                opened.push(
                    codex_bridge::store::attempts::start_attempt(
                        c,
                        task_id,
                        Some("lease-1"),
                        Some(owner),
                    )?
                    .attempt_id,
                );
            }
        }
        Ok::<_, codex_bridge::store::StoreError>(opened)
    })
    .unwrap()
}

fn task(s: &TestApp, delivery: &str, n: i64) -> String {
    s.comment(delivery, n, "@ccbot fix it", "widgets", n).json["taskId"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn code(r: &Reply) -> (u16, Option<&str>) {
    (r.status, r.json["code"].as_str())
}

fn a_worker_final_is_taken_once_for_the_attempt_an_uncertain_task_waits_on(db: Db) {
    let mut s = TestApp::start(db);
    let (mine, token) = register(&s, "build-1");
    let (_, other_token) = register(&s, "build-2");
    let uncertain = task(&s, "lf-1", 1);
    let settled = task(&s, "lf-2", 2);
    let running = task(&s, "lf-3", 3);
    s.stop();
    let owner = format!("worker:{mine}");
    use TaskState::*;
    let attempts = drive(
        &s,
        &uncertain,
        &owner,
        &[Leased, RetryWait, Leased, Running, NeedsReconciliation],
    );
    let settled_attempts = drive(&s, &settled, &owner, &[Leased, Running, Failed]);
    let running_attempts = drive(&s, &running, &owner, &[Leased, Running]);
    s.start_again();

    let r = offer(&s, &token, "not-a-task", &attempts[1]);
    assert_eq!(code(&r), (400, Some("invalid_task")), "{:?}", r.json);
    let r = offer(&s, &token, TaskId::mint().as_str(), &attempts[1]);
    assert_eq!(r.status, 404, "{:?}", r.json);
    let r = offer(&s, &token, &uncertain, "att-unknown");
    assert_eq!(r.status, 404, "{:?}", r.json);
    let r = offer(&s, &other_token, &uncertain, &attempts[1]);
    assert_eq!(
        code(&r),
        (409, Some("attempt_of_another_worker")),
        "{:?}",
        r.json
    );
    // The older attempt's end says nothing of the one the task waits on.
    let r = offer(&s, &token, &uncertain, &attempts[0]);
    assert_eq!(code(&r), (409, Some("attempt_mismatch")), "{:?}", r.json);
    // Ended: it never waits for a final again.
    let r = offer(&s, &token, &settled, &settled_attempts[0]);
    assert_eq!(code(&r), (409, Some("task_ended")), "{:?}", r.json);
    // Not uncertain yet: the worker offers it again later.
    let r = offer(&s, &token, &running, &running_attempts[0]);
    assert_eq!(code(&r), (409, Some("not_uncertain")), "{:?}", r.json);
    let detail = |t: &str| s.admin_get(&format!("/api/gitea-workflow/tasks/{t}")).json;
    assert_eq!(detail(&uncertain)["task"]["state"], "needs_reconciliation");
    assert_eq!(detail(&settled)["task"]["state"], "failed");

    let r = offer(&s, &token, &uncertain, &attempts[1]);
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["action"], "task.late_final_taken");
    assert_eq!(r.json["actor"], owner.as_str());
    assert_eq!(r.json["toState"], "verifying_reply");
    let again = offer(&s, &token, &uncertain, &attempts[1]);
    assert_eq!(again.status, 200, "{:?}", again.json);
    assert_eq!(again.json["eventId"], r.json["eventId"], "taken once");
    let d = detail(&uncertain);
    let taken = d["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["from"] == "needs_reconciliation" && t["to"] == "verifying_reply")
        .count();
    assert_eq!(taken, 1, "{}", d["transitions"]);
}

#[test]
fn a_worker_final_is_taken_once_for_the_attempt_an_uncertain_task_waits_on_sqlite() {
    a_worker_final_is_taken_once_for_the_attempt_an_uncertain_task_waits_on(Db::Sqlite);
}

#[test]
fn a_worker_final_is_taken_once_for_the_attempt_an_uncertain_task_waits_on_postgres() {
    a_worker_final_is_taken_once_for_the_attempt_an_uncertain_task_waits_on(Db::Postgres);
}
