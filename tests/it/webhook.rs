//! `POST /api/gitea/webhook` against the real server: every response code, and
//! the rows each one writes (or does not write). Each scenario runs on SQLite
//! and on PostgreSQL.

use crate::support::*;
use crate::testapp::*;
use serde_json::Value;

fn accepted_fixture_writes_every_row(db: Db) {
    let s = TestApp::start(db);
    let (body, headers) = fixture("issue_comment.created.issue.mention");
    let r = s.webhook(&headers, &body);
    assert_eq!(r.status, 202, "{:?}", r.json);
    let delivery = "6f1c2a8e-3d4b-4e5f-9a7b-1c2d3e4f5a60";
    let task_id = r.json["taskId"].as_str().unwrap_or_default().to_owned();
    assert!(
        task_id.len() == 37
            && task_id.starts_with("task-")
            && task_id[5..].bytes().all(|b| b.is_ascii_hexdigit()),
        "taskId is task- and 32 hex digits: {:?}",
        r.json
    );
    assert_eq!(r.json["deliveryId"], delivery);
    assert_eq!(r.json["state"], "queued");

    let mut c = s.db();
    assert_eq!(
        count_where(&mut c, "webhook_deliveries", "status = 'accepted'"),
        1
    );
    assert_eq!(
        count_where(&mut c, "repositories", "repo_key = 'default:acme/widgets'"),
        1
    );
    assert_eq!(
        count_where(
            &mut c,
            "sessions",
            "session_key = 'default:acme/widgets:issue:17'"
        ),
        1
    );
    assert_eq!(
        count_where(&mut c, "tasks", &format!("task_id = '{task_id}' AND delivery_key = 'default:{delivery}' AND state = 'queued' AND state_version = 2 AND comment_id = 9051 AND author = 'bob'")),
        1
    );
    // Born `received` and queued in the same transaction: one state change,
    // one history row, and the accept's audit event is that change's event.
    assert_eq!(
        count_where(
            &mut c,
            "task_transitions",
            &format!("task_id = '{task_id}' AND from_state = 'received' AND to_state = 'queued' AND state_version = 2")
        ),
        1
    );
    assert_eq!(
        count_where(
            &mut c,
            "task_transitions",
            &format!("task_id = '{task_id}'")
        ),
        1
    );
    assert_eq!(
        count_where(&mut c, "audit_events", &format!("task_id = '{task_id}' AND action = 'webhook.accept' AND from_state = 'received' AND to_state = 'queued' AND delivery_id = '{delivery}'")),
        1
    );
    assert_eq!(
        count_where(&mut c, "outbox_entries", &format!("task_id = '{task_id}' AND status = 'queued' AND length(fingerprint) = 64 AND operation_id LIKE 'op-%' AND queue_id LIKE 'q-%'")),
        1
    );
    assert_eq!(count_where(&mut c, "audit_events", "1 = 1"), 2);
    for action in ["webhook.accept", "repository.registered"] {
        assert_eq!(
            count_where(&mut c, "audit_events", &format!("action = '{action}'")),
            1,
            "{action}"
        );
    }
}

#[test]
fn accepted_fixture_writes_every_row_sqlite() {
    accepted_fixture_writes_every_row(Db::Sqlite);
}

#[test]
fn accepted_fixture_writes_every_row_postgres() {
    accepted_fixture_writes_every_row(Db::Postgres);
}

fn duplicates_and_replays_return_the_original_task(db: Db) {
    let s = TestApp::start(db);
    let (body, headers) = fixture("issue_comment.created.issue.mention");
    let first = s.webhook(&headers, &body);
    assert_eq!(first.status, 202);
    let task = first.json["taskId"].clone();

    // The same delivery again (a client retry).
    let again = s.webhook(&headers, &body);
    assert_eq!(again.status, 200, "{:?}", again.json);
    assert_eq!(again.json["status"], "duplicate");
    assert_eq!(again.json["taskId"], task);
    assert_eq!(again.json["state"], "queued");

    // Gitea's manual replay: identical bytes and signature, new delivery id.
    let replay_headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            if k.ends_with("-Delivery") {
                (k.clone(), "11111111-2222-4333-8444-555555555555".to_owned())
            } else {
                (k.clone(), v.clone())
            }
        })
        .collect();
    let replay = s.webhook(&replay_headers, &body);
    assert_eq!(replay.status, 200, "{:?}", replay.json);
    assert_eq!(replay.json["status"], "duplicate");
    assert_eq!(replay.json["taskId"], task);

    let mut c = s.db();
    assert_eq!(count(&mut c, "tasks"), 1);
    assert_eq!(count(&mut c, "outbox_entries"), 1);
    assert_eq!(
        count_where(&mut c, "webhook_deliveries", "status = 'duplicate'"),
        1
    );
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'webhook.duplicate'"),
        1
    );
}

#[test]
fn duplicates_and_replays_return_the_original_task_sqlite() {
    duplicates_and_replays_return_the_original_task(Db::Sqlite);
}

#[test]
fn duplicates_and_replays_return_the_original_task_postgres() {
    duplicates_and_replays_return_the_original_task(Db::Postgres);
}

#[test]
fn pull_request_comments_in_every_header_and_content_type_form() {
    let s = TestApp::start(Db::Sqlite);
    let (body, headers) = fixture("issue_comment.created.pr.mention");
    // Only X-Hub-Signature-256, no X-Gitea-Signature.
    let hub_only: Vec<_> = headers
        .iter()
        .filter(|(k, _)| k != "X-Gitea-Signature")
        .cloned()
        .collect();
    let r = s.webhook(&hub_only, &body);
    assert_eq!(r.status, 202, "{:?}", r.json);
    let mut c = s.db();
    assert_eq!(
        count_where(&mut c, "tasks", "resource_key = 'default:acme/widgets:pull:23' AND head_ref = 'feature/retry-clock' AND base_ref = 'main'"),
        1
    );

    // Form content type: `payload=<urlencoded JSON>`, signed over the JSON.
    let json = comment_body(7001, "@ccbot form delivery please", "forms", 5);
    let form: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", std::str::from_utf8(&json).unwrap())
        .finish();
    let mut h = gitea_headers("form-1", "issue_comment", "issue_comment", &json);
    for (k, v) in h.iter_mut() {
        if k == "Content-Type" {
            *v = "application/x-www-form-urlencoded".into();
        }
    }
    let r = s.webhook(&h, form.as_bytes());
    assert_eq!(r.status, 202, "{:?}", r.json);

    // An old Gitea: only X-Gitea-Event, carrying the raw type, and no top-level pull_request.
    let mut v: Value = serde_json::from_slice(&body).unwrap();
    v.as_object_mut().unwrap().remove("pull_request");
    v["comment"]["id"] = 7002.into();
    let old = serde_json::to_string_pretty(&v).unwrap().into_bytes();
    let h: Vec<_> = gitea_headers("old-1", "pull_request_comment", "", &old)
        .into_iter()
        .filter(|(k, _)| k != "X-Gitea-Event-Type")
        .collect();
    let r = s.webhook(&h, &old);
    assert_eq!(r.status, 202, "{:?}", r.json);
    assert_eq!(
        count_where(
            &mut c,
            "tasks",
            "resource_key = 'default:acme/widgets:pull:23'"
        ),
        2
    );
}

#[test]
fn submitted_reviews_of_every_kind_mentioning_the_bot_are_accepted() {
    let s = TestApp::start(Db::Sqlite);
    // (X-Gitea-Event, X-Gitea-Event-Type) as Gitea sends them for a review
    // submitted as a comment, an approval and a request for changes.
    let kinds = [
        ("pull_request_comment", "pull_request_review_comment"),
        ("pull_request_approved", "pull_request_review_approved"),
        ("pull_request_rejected", "pull_request_review_rejected"),
    ];
    let mut tasks = Vec::new();
    for (i, (event, event_type)) in kinds.into_iter().enumerate() {
        let body = serde_json::to_string_pretty(&serde_json::json!({
            "action": "reviewed",
            "number": 23,
            "pull_request": {"id": 4, "number": 23, "head": {"ref": "feature/x", "sha": "abc"}, "base": {"ref": "main", "sha": "def"}, "updated_at": format!("2026-05-12T09:20:4{i}Z")},
            "requested_reviewer": null,
            "repository": {"name": "widgets", "owner": {"login": "acme"}, "clone_url": "https://git.example.com/acme/widgets.git"},
            "sender": {"login": "carol"},
            "commit_id": "",
            "review": {"type": event_type, "content": format!("@ccbot can you check the retry math ({event_type})?")}
        }))
        .unwrap()
        .into_bytes();
        let h = gitea_headers(&format!("review-{i}"), event, event_type, &body);
        let r = s.webhook(&h, &body);
        assert_eq!(r.status, 202, "{event_type}: {:?}", r.json);
        // The same review under a new delivery id is the same review.
        let h2 = gitea_headers(&format!("review-{i}-again"), event, event_type, &body);
        let r2 = s.webhook(&h2, &body);
        assert_eq!(r2.json["status"], "duplicate", "{event_type}");
        assert_eq!(r2.json["taskId"], r.json["taskId"]);
        tasks.push(r.json["taskId"].clone());
    }
    tasks.dedup();
    assert_eq!(tasks.len(), 3, "one task per review");
}

#[test]
fn ignored_events_answer_200_and_create_no_task() {
    let s = TestApp::start(Db::Sqlite);
    for (name, reason) in [
        ("issue_comment.created.issue.by_bot", "bot_comment"),
        ("issue_comment.created.issue.no_mention", "no_mention"),
        ("issues.opened", "unsupported_event"),
    ] {
        let (body, headers) = fixture(name);
        let r = s.webhook(&headers, &body);
        assert_eq!(r.status, 200, "{name}: {:?}", r.json);
        assert_eq!(r.json["status"], "ignored", "{name}");
        assert_eq!(r.json["reason"], reason, "{name}");
    }
    let mut c = s.db();
    assert_eq!(count(&mut c, "tasks"), 0);
    assert_eq!(
        count_where(&mut c, "webhook_deliveries", "status = 'ignored'"),
        3
    );
    assert_eq!(
        count(&mut c, "repositories"),
        0,
        "ignored events register nothing"
    );
}

/// `@bot /word` right after the mention is the task's `command`, on the task
/// record of the admin API and on its outbox entry; any other mentioning
/// comment is an instruction (`null`), also when a `/word` comes later.
fn a_command_right_after_the_mention_is_recorded(db: Db) {
    let s = TestApp::start(db);
    let post = |id: i64, text: &str| {
        let mut v: Value =
            serde_json::from_slice(&fixture("issue_comment.created.issue.mention").0).unwrap();
        v["comment"]["id"] = id.into();
        v["comment"]["body"] = text.into();
        let b = serde_json::to_string_pretty(&v).unwrap().into_bytes();
        let r = s.webhook(
            &gitea_headers(&format!("cmd-{id}"), "issue_comment", "issue_comment", &b),
            &b,
        );
        assert_eq!(r.status, 202, "{:?}", r.json);
        r.json["taskId"].as_str().unwrap().to_owned()
    };
    let cases = [
        (9201, "@ccbot /STATUS", Some("status")),
        (9202, "@ccbot: /approve appr-1", Some("approve")),
        (9203, "@ccbot /deploy now", Some("unknown")),
        (9204, "@ccbot please look at /stop in the router", None),
        (
            9205,
            "`@ccbot /stop` is how you stop it. @ccbot explain",
            None,
        ),
    ];
    let mut c = s.db();
    for (id, text, expected) in cases {
        let task = post(id, text);
        let shown = s.admin_get(&format!("/api/gitea-workflow/tasks/{task}"));
        assert_eq!(shown.status, 200, "{:?}", shown.json);
        assert_eq!(
            shown.json["task"]["command"],
            expected.map_or(Value::Null, Value::from),
            "{text}"
        );
        let clause = match expected {
            Some(cmd) => format!("task_id = '{task}' AND command = '{cmd}'"),
            None => format!("task_id = '{task}' AND command IS NULL"),
        };
        assert_eq!(count_where(&mut c, "outbox_entries", &clause), 1, "{text}");
    }
}

#[test]
fn a_command_right_after_the_mention_is_recorded_sqlite() {
    a_command_right_after_the_mention_is_recorded(Db::Sqlite);
}

#[test]
fn a_command_right_after_the_mention_is_recorded_postgres() {
    a_command_right_after_the_mention_is_recorded(Db::Postgres);
}

#[test]
fn edits_and_deletes_are_recorded_and_linked_never_a_second_task() {
    let s = TestApp::start(Db::Sqlite);
    let (body, headers) = fixture("issue_comment.created.issue.mention");
    let created = s.webhook(&headers, &body);
    assert_eq!(created.status, 202);
    let task = created.json["taskId"].clone();

    let (body, headers) = fixture("issue_comment.edited.issue");
    let edited = s.webhook(&headers, &body);
    assert_eq!(edited.status, 200, "{:?}", edited.json);
    assert_eq!(edited.json["reason"], "comment_edited");
    assert_eq!(edited.json["taskId"], task);

    let (body, headers) = fixture("issue_comment.deleted.issue");
    let deleted = s.webhook(&headers, &body);
    assert_eq!(deleted.status, 200, "{:?}", deleted.json);
    assert_eq!(deleted.json["reason"], "comment_deleted");
    assert_eq!(deleted.json["taskId"], task);

    let mut c = s.db();
    assert_eq!(count(&mut c, "tasks"), 1);
    assert_eq!(
        count_where(
            &mut c,
            "webhook_deliveries",
            "status = 'recorded' AND comment_id = 9051"
        ),
        2
    );
    let task = task.as_str().unwrap();
    assert_eq!(
        count_where(
            &mut c,
            "audit_events",
            &format!("action IN ('comment.edited', 'comment.deleted') AND task_id = '{task}'")
        ),
        2
    );

    // An edit that adds the first mention to a comment without a task starts one.
    let mut v: Value = serde_json::from_slice(&fixture("issue_comment.edited.issue").0).unwrap();
    v["comment"]["id"] = 9100.into();
    v["changes"]["body"]["from"] = "plain text, no mention".into();
    let b = serde_json::to_string_pretty(&v).unwrap().into_bytes();
    let r = s.webhook(
        &gitea_headers("edit-adds-mention", "issue_comment", "issue_comment", &b),
        &b,
    );
    assert_eq!(r.status, 202, "{:?}", r.json);
    assert_eq!(count(&mut c, "tasks"), 2);
}

#[test]
fn bad_signatures_get_401_with_no_reason_and_store_nothing() {
    let s = TestApp::start(Db::Sqlite);
    let (body, headers) = fixture("issue_comment.created.issue.mention");
    let without: Vec<_> = headers
        .iter()
        .filter(|(k, _)| !k.contains("Signature"))
        .cloned()
        .collect();
    let r = s.webhook(&without, &body);
    assert_eq!(r.status, 401);
    assert_eq!(r.json["message"], "unauthorized");

    let mut wrong = headers.clone();
    for (k, v) in wrong.iter_mut() {
        if k.contains("Signature") {
            *v = v.replace('a', "b");
        }
    }
    assert_eq!(s.webhook(&wrong, &body).status, 401);

    // Tampered body under the original signature.
    let mut tampered = body.clone();
    let last = tampered.len() - 2;
    tampered[last] = b' ';
    assert_eq!(s.webhook(&headers, &tampered).status, 401);

    let mut c = s.db();
    assert_eq!(count(&mut c, "webhook_deliveries"), 0);
    assert_eq!(count(&mut c, "tasks"), 0);
    s.wait_for("three signature audit events", || {
        count_where(
            &mut s.db(),
            "audit_events",
            "action = 'webhook.signature_rejected'",
        ) == 3
    });
}

#[test]
fn invalid_payloads_get_400_with_a_code_and_store_no_task() {
    let s = TestApp::start(Db::Sqlite);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("garbage", b"{this is not json".to_vec(), "invalid_payload"),
        (
            "missing-fields",
            b"{\"action\":\"created\"}".to_vec(),
            "invalid_payload",
        ),
        (
            "dotdot",
            comment_body(1, "@ccbot x", "..", 1),
            "invalid_repository_name",
        ),
        (
            "slash",
            comment_body(2, "@ccbot x", "../../etc", 1),
            "invalid_repository_name",
        ),
    ];
    for (delivery, body, code) in &cases {
        let r = s.webhook(
            &gitea_headers(delivery, "issue_comment", "issue_comment", body),
            body,
        );
        assert_eq!(r.status, 400, "{delivery}: {:?}", r.json);
        assert_eq!(r.json["code"], *code, "{delivery}");
    }
    // No delivery id at all.
    let body = comment_body(3, "@ccbot x", "widgets", 1);
    let h: Vec<_> = gitea_headers("x", "issue_comment", "issue_comment", &body)
        .into_iter()
        .filter(|(k, _)| k != "X-Gitea-Delivery")
        .collect();
    let r = s.webhook(&h, &body);
    assert_eq!(r.status, 400);
    assert_eq!(r.json["code"], "missing_delivery_id");
    // An unsupported content type.
    let mut h = gitea_headers("ct", "issue_comment", "issue_comment", &body);
    h[0].1 = "text/plain".into();
    assert_eq!(s.webhook(&h, &body).status, 415);

    let mut c = s.db();
    assert_eq!(count(&mut c, "tasks"), 0);
    assert_eq!(count(&mut c, "repositories"), 0);
    s.wait_for("invalid payload audits", || {
        count_where(
            &mut s.db(),
            "audit_events",
            "action = 'webhook.invalid_payload'",
        ) == 4
    });
}

#[test]
fn oversize_bodies_get_413() {
    let s = TestApp::builder()
        .env("CODEX_BRIDGE_MAX_BODY_BYTES", "4096")
        .start();
    let body = comment_body(1, &format!("@ccbot {}", "x".repeat(5000)), "widgets", 1);
    let r = s.webhook(
        &gitea_headers("big", "issue_comment", "issue_comment", &body),
        &body,
    );
    assert_eq!(r.status, 413, "{:?}", r.json);
    assert_eq!(r.json["code"], "payload_too_large");
    assert_eq!(count(&mut s.db(), "webhook_deliveries"), 0);
    // A body under the limit still works.
    let small = comment_body(2, "@ccbot small", "widgets", 1);
    assert!(small.len() < 8192);
}

fn disabled_repository_gets_409(db: Db) {
    let s = TestApp::start(db);
    assert_eq!(
        s.comment("d-1", 1, "@ccbot first", "widgets", 1).status,
        202
    );
    let mut c = s.db();
    exec(
        &mut c,
        "UPDATE repositories SET status = 'disabled' WHERE repo_key = 'default:acme/widgets'",
    )
    .unwrap();
    let r = s.comment("d-2", 2, "@ccbot second", "widgets", 1);
    assert_eq!(r.status, 409, "{:?}", r.json);
    assert_eq!(r.json["code"], "repository_disabled");
    assert_eq!(count(&mut c, "tasks"), 1);
    assert_eq!(
        count_where(
            &mut c,
            "webhook_deliveries",
            "status = 'rejected' AND reason = 'repository_disabled'"
        ),
        1
    );
    // The same delivery again gets the same answer; after enabling, Gitea's replay goes through.
    assert_eq!(
        s.comment("d-2", 2, "@ccbot second", "widgets", 1).status,
        409
    );
    exec(
        &mut c,
        "UPDATE repositories SET status = 'active' WHERE repo_key = 'default:acme/widgets'",
    )
    .unwrap();
    assert_eq!(
        s.comment("d-2-replay", 2, "@ccbot second", "widgets", 1)
            .status,
        202
    );
}

#[test]
fn disabled_repository_gets_409_sqlite() {
    disabled_repository_gets_409(Db::Sqlite);
}

#[test]
fn disabled_repository_gets_409_postgres() {
    disabled_repository_gets_409(Db::Postgres);
}

fn store_failure_gets_503_and_loses_nothing(db: Db) {
    let s = TestApp::start(db);
    let mut c = s.db();
    let sqlite = c.is_sqlite();
    // Make every task insert fail inside the webhook transaction.
    if sqlite {
        exec(&mut c, "CREATE TRIGGER fail_tasks BEFORE INSERT ON tasks BEGIN SELECT RAISE(ABORT, 'simulated storage failure'); END;").unwrap();
    } else {
        exec(&mut c, "CREATE FUNCTION fail_tasks() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'simulated storage failure'; END; $$ LANGUAGE plpgsql").unwrap();
        exec(&mut c, "CREATE TRIGGER fail_tasks BEFORE INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION fail_tasks()").unwrap();
    }
    let r = s.comment("flaky-1", 1, "@ccbot please", "widgets", 1);
    assert_eq!(r.status, 503, "{:?}", r.json);
    assert_eq!(r.json["code"], "store_unavailable");
    // Nothing half-written: not even the delivery or the repository.
    assert_eq!(count(&mut c, "webhook_deliveries"), 0);
    assert_eq!(count(&mut c, "repositories"), 0);
    // Once the store works again the same delivery is accepted.
    if sqlite {
        exec(&mut c, "DROP TRIGGER fail_tasks").unwrap();
    } else {
        exec(&mut c, "DROP TRIGGER fail_tasks ON tasks").unwrap();
    }
    let r = s.comment("flaky-1", 1, "@ccbot please", "widgets", 1);
    assert_eq!(r.status, 202, "{:?}", r.json);
}

#[test]
fn store_failure_gets_503_and_loses_nothing_sqlite() {
    store_failure_gets_503_and_loses_nothing(Db::Sqlite);
}

#[test]
fn store_failure_gets_503_and_loses_nothing_postgres() {
    store_failure_gets_503_and_loses_nothing(Db::Postgres);
}

#[test]
fn accepted_webhooks_survive_a_restart() {
    let mut s = TestApp::start(Db::Sqlite);
    for i in 0..20 {
        assert_eq!(
            s.comment(
                &format!("keep-{i}"),
                500 + i,
                "@ccbot keep me",
                "widgets",
                1
            )
            .status,
            202
        );
    }
    s.stop();
    s.start_again();
    assert_eq!(count(&mut s.db(), "tasks"), 20);
    assert_eq!(count(&mut s.db(), "outbox_entries"), 20);
    let again = s.comment("keep-3", 503, "@ccbot keep me", "widgets", 1);
    assert_eq!(again.status, 200);
    assert_eq!(again.json["status"], "duplicate");
}

/// `app::run` in this process: a signed webhook is taken and committed, its
/// repeat is a duplicate, `/readyz` answers from the same store, and the
/// shutdown future stops the server gracefully: nothing listens afterwards,
/// and what it accepted is there when it starts again.
#[test]
fn in_process_a_webhook_round_trip_and_the_shutdown_future() {
    let mut s = TestApp::builder().in_process().start();
    let r = s.comment("inproc-1", 801, "@ccbot in process", "widgets", 8);
    assert_eq!(r.status, 202, "{:?}", r.json);
    let task = r.json["taskId"].as_str().unwrap().to_owned();
    assert_eq!(task_state(&mut s.db(), &task).as_deref(), Some("queued"));
    let again = s.comment("inproc-1", 801, "@ccbot in process", "widgets", 8);
    assert_eq!(again.status, 200, "{:?}", again.json);
    assert_eq!(again.json["status"], "duplicate");
    let ready = s.get("/readyz", None);
    assert_eq!(ready.status, 200, "{:?}", ready.json);
    assert_eq!(ready.json["store"]["state"], "ok");
    assert_eq!(ready.json["codex"]["state"], "unavailable", "intake only");

    let base = s.base.clone();
    s.stop();
    assert!(
        ureq::get(&format!("{base}/healthz")).call().is_err(),
        "{base} still answers after the shutdown future completed"
    );
    s.start_again();
    let again = s.comment("inproc-1", 801, "@ccbot in process", "widgets", 8);
    assert_eq!(again.json["status"], "duplicate", "{:?}", again.json);
    assert_eq!(count(&mut s.db(), "tasks"), 1);
}
