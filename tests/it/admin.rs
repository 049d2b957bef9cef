//! The admin API: auth on every route, the overview, task listing with filters
//! and pagination, the task page, the audit log, and idempotent pause/resume.

use crate::support::*;
use crate::testapp::*;
use codex_bridge::domain::TaskId;
use serde_json::{json, Value};

const ROUTES: &[&str] = &[
    "/api/gitea-workflow/overview",
    "/api/gitea-workflow/stats",
    "/api/gitea-workflow/tasks",
    "/api/gitea-workflow/tasks/task-x",
    "/api/gitea-workflow/audit",
    "/api/gitea-workflow/actors",
    "/api/gitea-workflow/approvals",
    "/api/gitea-workflow/repos/default:acme%2Fwidgets/hook",
    "/api/gitea-workflow/events",
    "/api/gitea-workflow/workers",
];

#[test]
fn every_admin_route_needs_the_bearer_token_and_health_does_not() {
    let s = TestApp::start(Db::Sqlite);
    for route in ROUTES {
        assert_eq!(s.get(route, None).status, 401, "{route}");
        assert_eq!(
            s.get(route, Some("wrong-token-wrong-token")).status,
            401,
            "{route}"
        );
    }
    for route in [
        "/api/gitea-workflow/control/pause",
        "/api/gitea-workflow/control/resume",
        "/api/gitea-workflow/tasks/task-x/clear-workspace",
        "/api/gitea-workflow/workers",
        "/api/gitea-workflow/workers/wrk-x/revoke",
    ] {
        let r = ureq::post(&s.url(route)).send_json(json!({"requestId": "r", "reason": "x"}));
        assert_eq!(
            r.err().and_then(|e| e.into_response()).map(|r| r.status()),
            Some(401),
            "{route}"
        );
    }
    assert_eq!(s.get("/healthz", None).status, 200);
    let ready = s.get("/readyz", None);
    assert_eq!(ready.status, 200);
    assert_eq!(ready.json["store"]["state"], "ok");
    assert_eq!(ready.json["gitea"]["state"], "ok");
    // This server only stores and queues (agent_runtime none): it takes
    // webhooks, and says that no turn runs here.
    assert_eq!(ready.json["codex"]["state"], "unavailable");
    assert_eq!(ready.json["status"], "degraded");
}

fn seed(s: &TestApp) -> Vec<String> {
    let mut ids = Vec::new();
    for (i, (repo, number)) in [
        ("widgets", 1),
        ("widgets", 1),
        ("widgets", 2),
        ("gadgets", 7),
        ("gadgets", 7),
    ]
    .into_iter()
    .enumerate()
    {
        let r = s.comment(
            &format!("seed-{i}"),
            1000 + i as i64,
            "@ccbot hello",
            repo,
            number,
        );
        assert_eq!(r.status, 202);
        ids.push(r.json["taskId"].as_str().unwrap().to_owned());
    }
    ids
}

fn admin_api_lists_filters_and_pages(db: Db) {
    let s = TestApp::start(db);
    let ids = seed(&s);

    let all = s.admin_get("/api/gitea-workflow/tasks");
    assert_eq!(all.status, 200);
    let tasks = all.json["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 5);
    assert_eq!(all.json["nextCursor"], Value::Null);
    // Newest first, with the contract's fields.
    assert_eq!(tasks[0]["taskId"], ids[4].as_str());
    for field in [
        "taskId",
        "deliveryKey",
        "repoKey",
        "resourceKey",
        "sessionKey",
        "commentId",
        "author",
        "state",
        "stateVersion",
        "attempt",
        "replyAttempt",
        "threadId",
        "turnId",
        "errorCode",
        "createdAt",
        "updatedAt",
    ] {
        assert!(tasks[0].get(field).is_some(), "missing {field}");
    }

    let gadgets = s.admin_get("/api/gitea-workflow/tasks?repoKey=default:acme/gadgets");
    assert_eq!(gadgets.json["tasks"].as_array().unwrap().len(), 2);
    let issue = s.admin_get("/api/gitea-workflow/tasks?resourceKey=default:acme/widgets:issue:1");
    assert_eq!(issue.json["tasks"].as_array().unwrap().len(), 2);
    let queued = s.admin_get("/api/gitea-workflow/tasks?state=queued");
    assert_eq!(queued.json["tasks"].as_array().unwrap().len(), 5);
    let none = s.admin_get("/api/gitea-workflow/tasks?state=running");
    assert_eq!(none.json["tasks"].as_array().unwrap().len(), 0);
    assert_eq!(
        s.admin_get("/api/gitea-workflow/tasks?state=bogus").status,
        400
    );
    assert_eq!(s.admin_get("/api/gitea-workflow/tasks?limit=0").status, 400);
    assert_eq!(
        s.admin_get("/api/gitea-workflow/tasks?cursor=abc").status,
        400
    );

    // Pages of two cover everything once.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let path = match &cursor {
            Some(c) => format!("/api/gitea-workflow/tasks?limit=2&cursor={c}"),
            None => "/api/gitea-workflow/tasks?limit=2".to_owned(),
        };
        let page = s.admin_get(&path);
        for t in page.json["tasks"].as_array().unwrap() {
            seen.push(t["taskId"].as_str().unwrap().to_owned());
        }
        match page.json["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(seen, expected);

    let detail = s.admin_get(&format!("/api/gitea-workflow/tasks/{}", ids[0]));
    assert_eq!(detail.status, 200);
    let transitions = detail.json["transitions"].as_array().unwrap();
    assert_eq!(transitions.len(), 1);
    assert_eq!(transitions[0]["from"], "received");
    assert_eq!(transitions[0]["to"], "queued");
    assert_eq!(transitions[0]["stateVersion"], 2);
    for key in ["at", "actor", "reason"] {
        assert!(transitions[0].get(key).is_some(), "{key}");
    }
    assert_eq!(detail.json["outbox"]["status"], "queued");
    assert_eq!(detail.json["outbox"]["taskId"], ids[0].as_str());
    for key in ["turns", "comments", "approvals", "audit"] {
        assert!(detail.json[key].is_array(), "{key}");
    }
    let actions: Vec<&str> = detail.json["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(actions.contains(&"webhook.accept"), "{actions:?}");
    // A text that is no task id names no task: the unknown task's 404.
    for id in ["task-nope", "task-0190a2b4c5d6e7f8a9b0c1d2e3f4a5b6"] {
        let missing = s.admin_get(&format!("/api/gitea-workflow/tasks/{id}"));
        assert_eq!(missing.status, 404, "{id}");
        assert_eq!(missing.json["code"], "not_found", "{id}");
    }

    let audit = s.admin_get(&format!("/api/gitea-workflow/audit?taskId={}", ids[1]));
    assert_eq!(audit.status, 200);
    let events = audit.json["events"].as_array().unwrap();
    // The accept's one event (it is the received -> queued transition's).
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["action"], "webhook.accept");
    assert!(events.iter().all(|e| e["taskId"] == ids[1].as_str()));
    let future = s.admin_get("/api/gitea-workflow/audit?since=2999-01-01T00:00:00Z");
    assert_eq!(future.json["events"].as_array().unwrap().len(), 0);
    assert_eq!(
        s.admin_get("/api/gitea-workflow/audit?since=yesterday")
            .status,
        400
    );

    let overview = s.admin_get("/api/gitea-workflow/overview");
    assert_eq!(overview.status, 200);
    assert_eq!(overview.json["queueDepth"], 5);
    assert_eq!(overview.json["paused"], false);
    assert_eq!(overview.json["repositories"], 2);
    assert_eq!(overview.json["tasksByState"]["queued"], 5);
    assert_eq!(overview.json["webhooksLastHour"]["accepted"], 5);
}

#[test]
fn admin_api_lists_filters_and_pages_sqlite() {
    admin_api_lists_filters_and_pages(Db::Sqlite);
}

#[test]
fn admin_api_lists_filters_and_pages_postgres() {
    admin_api_lists_filters_and_pages(Db::Postgres);
}

fn pause_and_resume_are_idempotent(db: Db) {
    let s = TestApp::start(db);
    let pause = json!({"requestId": "req-1", "reason": "deploying gitea", "operator": "alice"});
    let first = s.admin_post("/api/gitea-workflow/control/pause", &pause);
    assert_eq!(first.status, 200, "{:?}", first.json);
    assert_eq!(first.json["action"], "control.pause");
    assert_eq!(first.json["actor"], "admin:alice");
    assert_eq!(first.json["metadata"]["reason"], "deploying gitea");
    let again = s.admin_post("/api/gitea-workflow/control/pause", &pause);
    assert_eq!(again.status, 200);
    assert_eq!(
        again.json["eventId"], first.json["eventId"],
        "a repeated requestId returns the first result"
    );

    let overview = s.admin_get("/api/gitea-workflow/overview");
    assert_eq!(overview.json["paused"], true);
    assert_eq!(overview.json["pauseReason"], "deploying gitea");

    // While paused, webhooks are still accepted and stay queued.
    let r = s.comment("paused-1", 42, "@ccbot still accepted", "widgets", 1);
    assert_eq!(r.status, 202);
    assert_eq!(r.json["state"], "queued");

    // The same requestId for another action is a conflict.
    let conflict = s.admin_post("/api/gitea-workflow/control/resume", &pause);
    assert_eq!(conflict.status, 409);
    assert_eq!(conflict.json["code"], "request_id_conflict");

    let resume = s.admin_post(
        "/api/gitea-workflow/control/resume",
        &json!({"requestId": "req-2", "reason": "gitea is back"}),
    );
    assert_eq!(resume.status, 200);
    assert_eq!(resume.json["action"], "control.resume");
    assert_eq!(resume.json["actor"], "admin:admin");
    assert_eq!(
        s.admin_get("/api/gitea-workflow/overview").json["paused"],
        false
    );

    let mut c = s.db();
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'control.pause'"),
        1
    );
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'control.resume'"),
        1
    );

    // Bad control bodies: clear 400s, nothing written.
    for (body, code) in [
        (json!({"reason": "no id"}), "invalid_request_id"),
        (json!({"requestId": "req-3"}), "invalid_reason"),
        (
            json!({"requestId": "req-4", "reason": "x", "operator": "a b;c"}),
            "invalid_operator",
        ),
    ] {
        let r = s.admin_post("/api/gitea-workflow/control/pause", &body);
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.json["code"], code);
    }
    let r = s.post_raw(
        "/api/gitea-workflow/control/pause",
        &[
            ("Authorization".into(), format!("Bearer {ADMIN_TOKEN}")),
            ("Content-Type".into(), "application/json".into()),
        ],
        b"{not json",
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json["code"], "invalid_json");
    assert_eq!(
        count_where(&mut c, "audit_events", "action LIKE 'control.%'"),
        2
    );
}

#[test]
fn pause_and_resume_are_idempotent_sqlite() {
    pause_and_resume_are_idempotent(Db::Sqlite);
}

#[test]
fn pause_and_resume_are_idempotent_postgres() {
    pause_and_resume_are_idempotent(Db::Postgres);
}

#[test]
fn repository_and_task_controls_are_idempotent_and_refuse_illegal_moves() {
    let s = TestApp::start(Db::Sqlite);
    let a = s.comment("c-1", 1, "@ccbot one", "widgets", 1).json["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let b = s.comment("c-2", 2, "@ccbot two", "widgets", 2).json["taskId"]
        .as_str()
        .unwrap()
        .to_owned();

    // The tree answers even when no runtime runs (intake only).
    let tree = s.admin_get("/api/gitea-workflow/actors");
    assert_eq!(tree.status, 200);
    assert_eq!(tree.json["registry"]["runtime"], "none");

    // Cancel a queued task, twice with the same requestId: one transition, same answer.
    let body = json!({"requestId": "cancel-a", "reason": "not needed"});
    let first = s.admin_post(&format!("/api/gitea-workflow/tasks/{a}/cancel"), &body);
    assert_eq!(first.status, 200, "{:?}", first.json);
    assert_eq!(first.json["toState"], "cancelled");
    let again = s.admin_post(&format!("/api/gitea-workflow/tasks/{a}/cancel"), &body);
    assert_eq!(again.json["eventId"], first.json["eventId"]);
    let task = s.admin_get(&format!("/api/gitea-workflow/tasks/{a}"));
    assert_eq!(task.json["task"]["state"], "cancelled");
    assert_eq!(task.json["transitions"].as_array().unwrap().len(), 2);
    // A new request to cancel a cancelled task is refused, not replayed.
    let late = s.admin_post(
        &format!("/api/gitea-workflow/tasks/{a}/cancel"),
        &json!({"requestId": "cancel-a2", "reason": "x"}),
    );
    assert_eq!(late.status, 409);
    assert_eq!(late.json["code"], "not_cancellable");
    // Abort is for running work.
    let abort = s.admin_post(
        &format!("/api/gitea-workflow/tasks/{b}/abort"),
        &json!({"requestId": "abort-b", "reason": "x"}),
    );
    assert_eq!(abort.status, 409);
    assert_eq!(abort.json["code"], "not_abortable");
    assert_eq!(
        s.admin_post(
            "/api/gitea-workflow/tasks/task-nope/cancel",
            &json!({"requestId": "n", "reason": "x"})
        )
        .status,
        404
    );

    // Disable the repository: new comments get 409; enable: accepted again.
    let disable = s.admin_post(
        "/api/gitea-workflow/repos/default:acme%2Fwidgets/disable",
        &json!({"requestId": "dis-1", "reason": "runaway bot"}),
    );
    assert_eq!(disable.status, 200, "{:?}", disable.json);
    assert_eq!(disable.json["action"], "repository.disable");
    assert_eq!(
        s.comment("c-3", 3, "@ccbot three", "widgets", 1).status,
        409
    );
    let enable = s.admin_post(
        "/api/gitea-workflow/repos/default:acme/widgets/enable",
        &json!({"requestId": "en-1", "reason": "fixed"}),
    );
    assert_eq!(enable.status, 200, "{:?}", enable.json);
    assert_eq!(s.comment("c-4", 4, "@ccbot four", "widgets", 1).status, 202);
    assert_eq!(
        s.admin_post(
            "/api/gitea-workflow/repos/default:acme%2Fnope/disable",
            &json!({"requestId": "dis-2", "reason": "x"})
        )
        .status,
        404
    );
    // A key that names no repository at all is refused as such.
    let bad = s.admin_post(
        "/api/gitea-workflow/repos/default:acme%2F..%2Fetc/disable",
        &json!({"requestId": "dis-3", "reason": "x"}),
    );
    assert_eq!(bad.status, 400, "{:?}", bad.json);
    assert_eq!(bad.json["code"], "invalid_repo_key", "{:?}", bad.json);
    // Gitea's names ignore case: another spelling is the same repository.
    let shouted = s.admin_post(
        "/api/gitea-workflow/repos/default:ACME%2FWidgets/disable",
        &json!({"requestId": "dis-4", "reason": "same repository"}),
    );
    assert_eq!(shouted.status, 200, "{:?}", shouted.json);
    assert_eq!(s.comment("c-5", 5, "@ccbot five", "widgets", 1).status, 409);
}

#[test]
fn reconcile_through_the_admin_api_needs_confirmation_and_the_right_attempt() {
    use codex_bridge::lifecycle::TaskState;
    use codex_bridge::store::tasks::{self, TransitionRequest};
    let s = TestApp::start(Db::Sqlite);
    let id = s.comment("r-1", 1, "@ccbot one", "widgets", 1).json["taskId"]
        .as_str()
        .unwrap()
        .parse::<TaskId>()
        .unwrap();
    let mut c = s.db();
    let attempt = c
        .write_transaction(|c| {
            for to in [
                TaskState::Leased,
                TaskState::Running,
                TaskState::NeedsReconciliation,
            ] {
                tasks::transition(
                    c,
                    &TransitionRequest {
                        task_id: &id,
                        to,
                        expected_version: None,
                        actor: "test",
                        reason: None,
                        error_code: None,
                    },
                )?;
                if to == TaskState::Leased {
                    codex_bridge::store::attempts::start_attempt(c, &id, None, Some("test"))?;
                }
            }
            Ok::<_, codex_bridge::store::StoreError>(
                tasks::detail(c, &id)?.unwrap().attempts[0]
                    .attempt_id
                    .clone(),
            )
        })
        .unwrap();
    let path = format!("/api/gitea-workflow/tasks/{id}/reconcile");
    let unconfirmed = s.admin_post(
        &path,
        &json!({"requestId": "rc-0", "reason": "x", "attemptId": attempt, "verdict": "failed"}),
    );
    assert_eq!(unconfirmed.status, 400);
    assert_eq!(unconfirmed.json["code"], "confirmation_required");
    let wrong = s.admin_post(
        &path,
        &json!({"requestId": "rc-1", "reason": "x", "attemptId": "att-wrong", "verdict": "failed", "confirmNoActiveTurn": true}),
    );
    assert_eq!(wrong.status, 409);
    assert_eq!(wrong.json["code"], "attempt_mismatch");
    let ok = s.admin_post(
        &path,
        &json!({"requestId": "rc-2", "reason": "checked the timeline", "attemptId": attempt, "verdict": "succeeded", "confirmNoActiveTurn": true}),
    );
    assert_eq!(ok.status, 200, "{:?}", ok.json);
    assert_eq!(ok.json["action"], "task.reconciled");
    assert_eq!(
        s.admin_get(&format!("/api/gitea-workflow/tasks/{id}")).json["task"]["state"],
        "succeeded"
    );
}

#[test]
fn approvals_are_listed_and_decided_once_through_the_api_and_the_cli() {
    let s = TestApp::start(Db::Sqlite);
    let id = s.comment("a-1", 1, "@ccbot one", "widgets", 1).json["taskId"]
        .as_str()
        .unwrap()
        .parse::<TaskId>()
        .unwrap();
    let mut c = s.db();
    let approval = c
        .write_transaction(|c| {
            codex_bridge::store::approvals::create(
                c,
                &id,
                "command",
                &json!({"command": "rm -rf build"}),
                "k-1",
            )
        })
        .unwrap();
    let second = c
        .write_transaction(|c| {
            codex_bridge::store::approvals::create(c, &id, "file_change", &json!({}), "k-2")
        })
        .unwrap();
    let list = s.admin_get("/api/gitea-workflow/approvals");
    assert_eq!(list.status, 200);
    assert_eq!(list.json["approvals"].as_array().unwrap().len(), 2);
    assert!(
        list.json["approvals"][0].get("requestKey").is_none(),
        "runtime handles are not shown"
    );

    let path = format!(
        "/api/gitea-workflow/approvals/{}/decide",
        approval.approval_id
    );
    let bad = s.admin_post(
        &path,
        &json!({"requestId": "d-0", "reason": "x", "decision": "maybe"}),
    );
    assert_eq!(bad.status, 400);
    let body = json!({"requestId": "d-1", "reason": "safe in CI", "decision": "accept", "operator": "alice"});
    let first = s.admin_post(&path, &body);
    assert_eq!(first.status, 200, "{:?}", first.json);
    assert_eq!(first.json["action"], "approval.decided");
    assert_eq!(first.json["metadata"]["decision"], "accept");
    assert_eq!(
        s.admin_post(&path, &body).json["eventId"],
        first.json["eventId"]
    );
    let again = s.admin_post(
        &path,
        &json!({"requestId": "d-2", "reason": "x", "decision": "decline"}),
    );
    assert_eq!(again.status, 409);
    assert_eq!(again.json["code"], "already_decided");
    assert_eq!(
        s.admin_get("/api/gitea-workflow/approvals").json["approvals"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // The CLI decides the other one.
    s.cli_ok(&[
        "approvals",
        "decide",
        &second.approval_id,
        "decline",
        "--reason",
        "not now",
    ]);
    assert_eq!(
        s.admin_get("/api/gitea-workflow/approvals").json["approvals"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    let task = s.admin_get(&format!("/api/gitea-workflow/tasks/{id}"));
    let decisions: Vec<&str> = task.json["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["decision"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, ["accept", "decline"]);
}

/// A held outbox entry (a steer whose delivery nothing proves) is dropped
/// through the API once, by its queue id: its task ends `cancelled`. An entry
/// that is not held, or an unknown one, is refused with a clear code.
#[test]
fn a_held_entry_is_dropped_once_through_the_api() {
    use codex_bridge::store::{sessions, steer};
    let s = TestApp::start(Db::Sqlite);
    let held = s
        .comment("h-1", 1, "@ccbot /steer also this", "widgets", 1)
        .json["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let waiting = s.comment("h-2", 2, "@ccbot plain", "widgets", 2).json["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // As the steer lane leaves it when the answer was lost and the running
    // turn's history does not show it (no runtime runs on this server).
    let mut c = connect(&s.db_url);
    let id = TaskId::parse(&held).unwrap();
    let entry = sessions::outbox_entry(&mut c, &id).unwrap().unwrap();
    let version = codex_bridge::store::tasks::find(&mut c, &id)
        .unwrap()
        .unwrap()
        .state_version;
    steer::admit(&mut c, &entry, version, "thread-1", "turn-1").unwrap();
    let sending = sessions::outbox_entry(&mut c, &id).unwrap().unwrap();
    steer::hold(&mut c, &sending, version, "steer_unconfirmed").unwrap();

    let page = s.admin_get(&format!("/api/gitea-workflow/tasks/{held}"));
    assert_eq!(page.json["outbox"]["autoDrain"], false, "{:?}", page.json);
    assert_eq!(page.json["outbox"]["holdReason"], "steer_unconfirmed");
    let queue_id = page.json["outbox"]["queueId"].as_str().unwrap().to_owned();

    let body = json!({"requestId": "drop-1", "reason": "the steer is not needed"});
    let first = s.admin_post(
        &format!("/api/gitea-workflow/outbox/{queue_id}/drop"),
        &body,
    );
    assert_eq!(first.status, 200, "{:?}", first.json);
    assert_eq!(first.json["toState"], "cancelled");
    let again = s.admin_post(
        &format!("/api/gitea-workflow/outbox/{queue_id}/drop"),
        &body,
    );
    assert_eq!(again.json["eventId"], first.json["eventId"], "one drop");
    let page = s.admin_get(&format!("/api/gitea-workflow/tasks/{held}"));
    assert_eq!(page.json["task"]["state"], "cancelled");

    // An entry drained automatically is not held.
    let other = s.admin_get(&format!("/api/gitea-workflow/tasks/{waiting}"));
    let other_q = other.json["outbox"]["queueId"].as_str().unwrap().to_owned();
    let refused = s.admin_post(
        &format!("/api/gitea-workflow/outbox/{other_q}/drop"),
        &json!({"requestId": "drop-2", "reason": "x"}),
    );
    assert_eq!(refused.status, 409, "{:?}", refused.json);
    assert_eq!(refused.json["code"], "not_held");
    let unknown = s.admin_post(
        "/api/gitea-workflow/outbox/q-00000000000000000000000000000000/drop",
        &json!({"requestId": "drop-3", "reason": "x"}),
    );
    assert_eq!(unknown.status, 404, "{:?}", unknown.json);
    let bad = s.admin_post(
        "/api/gitea-workflow/outbox/..%2F..%2Fetc/drop",
        &json!({"requestId": "drop-4", "reason": "x"}),
    );
    assert_eq!(bad.status, 404, "{:?}", bad.json);
}
