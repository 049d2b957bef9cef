//! Remote workers' registry and authentication against a running server, on
//! SQLite and PostgreSQL: an operator registers a worker and sees its token
//! once; the token is kept nowhere (not in a row, the audit log, a list or
//! the logs); the worker authenticates its heartbeat with it; revoking the
//! worker refuses the token (403 `worker_revoked`); a repeated `requestId` mints no second worker;
//! bad input is a 400 with a code, a missing credential a 401.

use crate::support::*;
use crate::testapp::*;
use codex_bridge::store::{sha256_hex, DbConn};
use diesel::prelude::*;
use serde_json::{json, Value};

const WORKERS: &str = "/api/gitea-workflow/workers";
const HEARTBEAT: &str = "/api/worker/v1/heartbeat";

/// A POST with `authorization` as the whole Authorization header (none:
/// no header).
fn post(s: &TestApp, path: &str, authorization: Option<&str>, body: &Value) -> Reply {
    let mut headers = vec![("Content-Type".to_owned(), "application/json".to_owned())];
    if let Some(a) = authorization {
        headers.push(("Authorization".to_owned(), a.to_owned()));
    }
    s.post_raw(path, &headers, body.to_string().as_bytes())
}

fn heartbeat(s: &TestApp, token: &str) -> Reply {
    post(
        s,
        HEARTBEAT,
        Some(&format!("Bearer {token}")),
        &json!({"version": "0.1.0 (test)"}),
    )
}

fn create_body(request_id: &str, name: &str, repositories: Value) -> Value {
    json!({
        "name": name,
        "repositories": repositories,
        "requestId": request_id,
        "reason": "the build machine in the basement",
        "operator": "alice",
    })
}

/// The names of a table's text columns, as the database describes them.
fn text_columns(c: &mut DbConn, table: &str) -> Vec<String> {
    #[derive(QueryableByName)]
    struct Column {
        #[diesel(sql_type = diesel::sql_types::Text)]
        name: String,
    }
    let q = match c {
        DbConn::Sqlite(_) => {
            format!("SELECT name FROM pragma_table_info('{table}') WHERE upper(type) = 'TEXT'")
        }
        DbConn::Pg(_) => format!(
            "SELECT column_name::text AS name FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = '{table}' \
             AND data_type = 'text'"
        ),
    };
    let columns: Vec<Column> =
        codex_bridge::with_conn!(c, |c| diesel::sql_query(&q).load(c)).unwrap();
    assert!(!columns.is_empty(), "{table} has text columns");
    columns.into_iter().map(|c| c.name).collect()
}

/// How many values of `table`'s text columns contain `needle` (hex: safe in
/// a LIKE pattern).
fn occurrences(c: &mut DbConn, table: &str, needle: &str) -> i64 {
    text_columns(c, table)
        .iter()
        .map(|col| count_where(c, table, &format!("{col} LIKE '%{needle}%'")))
        .sum()
}

fn workers_are_registered_authenticated_and_revoked(db: Db) {
    let s = TestApp::start(db);
    let created = s.admin_post(
        WORKERS,
        &create_body("w-1", "build-1", json!(["ACME/Widgets", "acme/gadgets"])),
    );
    assert_eq!(created.status, 201, "{:?}", created.json);
    let token = created.json["token"].as_str().unwrap().to_owned();
    let id = created.json["workerId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("wrk-"), "{id}");
    assert!(token.starts_with("cbw_") && token.len() == 68, "{token}");
    let worker = &created.json["worker"];
    assert_eq!(worker["workerId"], id.as_str());
    assert_eq!(worker["name"], "build-1");
    assert_eq!(
        worker["repositories"],
        json!(["acme/gadgets", "acme/widgets"])
    );
    assert!(worker["createdAt"].is_string());
    for unset in ["revokedAt", "lastSeenAt", "version"] {
        assert!(worker[unset].is_null(), "{unset}: {worker}");
    }
    assert_eq!(created.json["event"]["action"], "worker.created");
    assert_eq!(created.json["event"]["actor"], "admin:alice");
    assert_eq!(created.json["event"]["metadata"]["workerId"], id.as_str());

    // The token is shown once: not in the list, the rows, the audit log.
    let hash = sha256_hex(token.as_bytes());
    let list = s.admin_get(WORKERS);
    assert_eq!(list.status, 200);
    let listed = list.json["workers"].as_array().unwrap();
    assert_eq!(listed.len(), 1);
    // The list adds how the worker stands: never heard from, nothing
    // uncertain waiting on it, no lease.
    let mut with_status = worker.clone();
    with_status["leases"] = json!([]);
    with_status["health"] = json!("never_seen");
    with_status["uncertainTasks"] = json!([]);
    assert_eq!(listed[0], with_status);
    let text = list.json.to_string();
    assert!(!text.contains(&token) && !text.contains(&hash), "{text}");
    let mut c = s.db();
    for table in ["workers", "audit_events", "control_requests"] {
        assert_eq!(
            occurrences(&mut c, table, &token),
            0,
            "the token in {table}"
        );
    }
    // Its hash is the worker's key, and nothing else's.
    assert_eq!(occurrences(&mut c, "workers", &hash), 1);
    assert_eq!(occurrences(&mut c, "audit_events", &hash), 0);
    assert_eq!(occurrences(&mut c, "control_requests", &hash), 0);

    // The worker's heartbeat: recorded, and it learns who it is.
    let beat = heartbeat(&s, &token);
    assert_eq!(beat.status, 200, "{:?}", beat.json);
    assert_eq!(
        beat.json,
        json!({"workerId": id, "repositories": ["acme/gadgets", "acme/widgets"]})
    );
    let seen = &s.admin_get(WORKERS).json["workers"][0];
    assert!(seen["lastSeenAt"].is_string(), "{seen}");
    assert_eq!(seen["version"], "0.1.0 (test)");
    assert_eq!(seen["uncertainTurns"], Value::Null, "not said: {seen}");
    assert_eq!(seen["health"], "ok");

    // The worker's own count of uncertain turns, kept beside what the
    // server knows (no uncertain task waits on it here): it holds the
    // worker, and the list says so.
    let said = |n: u32| {
        post(
            &s,
            HEARTBEAT,
            Some(&format!("Bearer {token}")),
            &json!({"version": "0.1.0 (test)", "uncertainTurns": n}),
        )
    };
    assert_eq!(said(2).status, 200);
    let seen = &s.admin_get(WORKERS).json["workers"][0];
    assert_eq!(seen["uncertainTurns"], 2, "{seen}");
    assert_eq!(seen["uncertainTasks"], json!([]), "{seen}");
    assert_eq!(seen["health"], "uncertain", "{seen}");
    assert_eq!(said(0).status, 200);
    let seen = &s.admin_get(WORKERS).json["workers"][0];
    assert_eq!(seen["uncertainTurns"], 0, "{seen}");
    assert_eq!(seen["health"], "ok", "{seen}");
    let bad_version = post(
        &s,
        HEARTBEAT,
        Some(&format!("Bearer {token}")),
        &json!({"version": "1\n2"}),
    );
    assert_eq!(bad_version.status, 400);
    assert_eq!(bad_version.json["code"], "invalid_version");

    // Wrong, malformed, missing tokens and the admin token: 401, no detail.
    let wrong = format!("cbw_{}", "0".repeat(64));
    for authorization in [
        Some(format!("Bearer {wrong}")),
        Some(format!("Bearer {}", token.to_uppercase())),
        Some(format!("Bearer {}", &token[..60])),
        Some(format!("Basic {token}")),
        Some(format!("Bearer {ADMIN_TOKEN}")),
        Some(token.clone()),
        None,
    ] {
        let r = post(
            &s,
            HEARTBEAT,
            authorization.as_deref(),
            &json!({"version": "x"}),
        );
        assert_eq!(r.status, 401, "{authorization:?}");
        assert_eq!(
            r.json,
            json!({"code": "unauthorized", "message": "unauthorized"})
        );
    }

    // Without a credential the body is not even read: 401, not 400.
    let r = s.post_raw(
        HEARTBEAT,
        &[("Content-Type".into(), "application/json".into())],
        b"{not json",
    );
    assert_eq!(r.status, 401);

    // Revoked: the token is refused from then on; the list shows when.
    let revoke = format!("{WORKERS}/{id}/revoke");
    let body = json!({"requestId": "w-2", "reason": "the machine was sold"});
    let revoked = s.admin_post(&revoke, &body);
    assert_eq!(revoked.status, 200, "{:?}", revoked.json);
    assert_eq!(revoked.json["action"], "worker.revoked");
    assert_eq!(revoked.json["metadata"]["workerId"], id.as_str());
    assert_eq!(revoked.json["metadata"]["wasRevoked"], false);
    assert_eq!(
        s.admin_post(&revoke, &body).json["eventId"],
        revoked.json["eventId"],
        "a repeated requestId answers the first event"
    );
    // A revoked worker is told so, to stop rather than retry.
    let refused = heartbeat(&s, &token);
    assert_eq!(refused.status, 403, "{:?}", refused.json);
    assert_eq!(refused.json["code"], "worker_revoked");
    let after = &s.admin_get(WORKERS).json["workers"][0];
    assert_eq!(after["revokedAt"], revoked.json["metadata"]["revokedAt"]);
    assert!(after["revokedAt"].is_string(), "{after}");
    let unknown = format!("{WORKERS}/wrk-{}/revoke", "0".repeat(32));
    for path in [
        unknown.as_str(),
        "/api/gitea-workflow/workers/..%2Fx/revoke",
    ] {
        let r = s.admin_post(path, &json!({"requestId": "w-3", "reason": "x"}));
        assert_eq!(r.status, 404, "{path}: {:?}", r.json);
    }
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'worker.revoked'"),
        1
    );
    assert!(!s.logs().contains(&token), "the token reached the logs");
}

#[test]
fn workers_are_registered_authenticated_and_revoked_sqlite() {
    workers_are_registered_authenticated_and_revoked(Db::Sqlite);
}

#[test]
fn workers_are_registered_authenticated_and_revoked_postgres() {
    workers_are_registered_authenticated_and_revoked(Db::Postgres);
}

fn a_request_is_one_worker_and_bad_input_none(db: Db) {
    let s = TestApp::start(db);
    let body = create_body("same", "build-2", json!(["acme/widgets"]));
    let first = s.admin_post(WORKERS, &body);
    assert_eq!(first.status, 201, "{:?}", first.json);
    let id = first.json["workerId"].as_str().unwrap();
    // The token cannot be shown again: a retry mints nothing and says which
    // worker the first request made.
    let again = s.admin_post(WORKERS, &body);
    assert_eq!(again.status, 409, "{:?}", again.json);
    assert_eq!(again.json["code"], "request_replayed");
    assert!(again.json["message"].as_str().unwrap().contains(id));
    assert!(again.json.get("token").is_none());
    let other = s.admin_post(
        WORKERS,
        &create_body("same", "build-3", json!(["acme/widgets"])),
    );
    assert_eq!(other.status, 409);
    assert_eq!(other.json["code"], "request_id_conflict");
    let mut c = s.db();
    assert_eq!(count(&mut c, "workers"), 1);
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'worker.created'"),
        1
    );

    for (i, (name, repositories, code)) in [
        ("b", json!(["../x"]), "invalid_repositories"),
        ("b", json!(["acme/.."]), "invalid_repositories"),
        ("b", json!(["a/b/c"]), "invalid_repositories"),
        ("b", json!(["acme/"]), "invalid_repositories"),
        ("b", json!(["/widgets"]), "invalid_repositories"),
        ("b", json!([""]), "invalid_repositories"),
        ("b", json!([]), "invalid_repositories"),
        ("b", json!(null), "invalid_repositories"),
        ("", json!(["acme/widgets"]), "invalid_worker_name"),
        ("a\u{7}b", json!(["acme/widgets"]), "invalid_worker_name"),
    ]
    .into_iter()
    .enumerate()
    {
        let r = s.admin_post(
            WORKERS,
            &create_body(&format!("bad-{i}"), name, repositories.clone()),
        );
        assert_eq!(r.status, 400, "{repositories} {name:?}: {:?}", r.json);
        assert_eq!(r.json["code"], code, "{repositories} {name:?}");
    }
    let r = s.admin_post(
        WORKERS,
        &json!({"name": "b", "repositories": ["acme/widgets"], "reason": "x"}),
    );
    assert_eq!(r.json["code"], "invalid_request_id");
    assert_eq!(count(&mut c, "workers"), 1, "bad requests register nothing");

    // No admin credential, no worker business.
    for (path, token) in [
        (WORKERS.to_owned(), None),
        (WORKERS.to_owned(), Some("Bearer wrong-token-wrong-token")),
        (format!("{WORKERS}/{id}/revoke"), None),
    ] {
        let r = post(
            &s,
            &path,
            token,
            &create_body("unauth", "x", json!(["a/b"])),
        );
        assert_eq!(r.status, 401, "{path}");
    }
    assert_eq!(s.get(WORKERS, None).status, 401);
    // A worker's token is no admin credential either.
    let token = first.json["token"].as_str().unwrap();
    assert_eq!(s.get(WORKERS, Some(token)).status, 401);
    assert_eq!(count(&mut c, "workers"), 1);
    assert_eq!(count_where(&mut c, "workers", "revoked_at IS NOT NULL"), 0);
}

#[test]
fn a_request_is_one_worker_and_bad_input_none_sqlite() {
    a_request_is_one_worker_and_bad_input_none(Db::Sqlite);
}

#[test]
fn a_request_is_one_worker_and_bad_input_none_postgres() {
    a_request_is_one_worker_and_bad_input_none(Db::Postgres);
}

/// A store that cannot say whether a token is valid refuses the worker
/// (503: retry, not "revoked"), and says so in the log without the token.
fn an_unreadable_registry_refuses_workers(db: Db) {
    let s = TestApp::start(db);
    let created = s.admin_post(WORKERS, &create_body("w-1", "b", json!(["acme/widgets"])));
    assert_eq!(created.status, 201, "{:?}", created.json);
    let token = created.json["token"].as_str().unwrap().to_owned();
    assert_eq!(heartbeat(&s, &token).status, 200);
    exec(&mut s.db(), "ALTER TABLE workers RENAME TO workers_away").unwrap();
    let r = heartbeat(&s, &token);
    assert_eq!(r.status, 503, "{:?}", r.json);
    assert_eq!(r.json["code"], "store_unavailable");
    // The server's output is read by a thread of its own: wait for it.
    s.wait_for("the warning in the log", || {
        s.logs().contains("cannot read the registered workers")
    });
    assert!(!s.logs().contains(&token), "the token reached the logs");
    exec(&mut s.db(), "ALTER TABLE workers_away RENAME TO workers").unwrap();
}

#[test]
fn an_unreadable_registry_refuses_workers_sqlite() {
    an_unreadable_registry_refuses_workers(Db::Sqlite);
}

#[test]
fn an_unreadable_registry_refuses_workers_postgres() {
    an_unreadable_registry_refuses_workers(Db::Postgres);
}
