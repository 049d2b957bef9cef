//! Worker leases over the worker API against a running server, on SQLite
//! and PostgreSQL: a worker leases only the repositories it was given, one
//! worker at a time; it renews and releases its lease; the calls API is
//! fenced by the lease; a revoked worker is refused with `worker_revoked`
//! and its lease ends with it, so its poll fails closed.

use crate::support::*;
use crate::testapp::*;
use serde_json::{json, Value};

const WORKERS: &str = "/api/gitea-workflow/workers";
const API: &str = "/api/worker/v1";

fn post(s: &TestApp, path: &str, token: &str, body: &Value) -> Reply {
    let headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("Authorization".to_owned(), format!("Bearer {token}")),
    ];
    s.post_raw(path, &headers, body.to_string().as_bytes())
}

fn register(s: &TestApp, request_id: &str, repositories: Value) -> (String, String) {
    let created = s.admin_post(
        WORKERS,
        &json!({
            "name": request_id,
            "repositories": repositories,
            "requestId": request_id,
            "reason": "a build machine",
        }),
    );
    assert_eq!(created.status, 201, "{:?}", created.json);
    (
        created.json["workerId"].as_str().unwrap().to_owned(),
        created.json["token"].as_str().unwrap().to_owned(),
    )
}

fn lease(s: &TestApp, token: &str, repository: &str) -> Reply {
    post(
        s,
        &format!("{API}/leases"),
        token,
        &json!({"protocol": 1, "repository": repository}),
    )
}

fn leases_are_scoped_fenced_and_end_with_revocation(db: Db) {
    let s = TestApp::start(db);
    let (a_id, a) = register(&s, "a", json!(["acme/widgets"]));
    let (_, b) = register(&s, "b", json!(["acme/widgets"]));

    let other = lease(&s, &a, "acme/other");
    assert_eq!(other.status, 403, "{:?}", other.json);
    assert_eq!(other.json["code"], "repository_not_allowed");
    let old = post(
        &s,
        &format!("{API}/leases"),
        &a,
        &json!({"protocol": 99, "repository": "acme/widgets"}),
    );
    assert_eq!(old.status, 400);
    assert_eq!(old.json["code"], "protocol_unsupported");

    let granted = lease(&s, &a, "ACME/Widgets");
    assert_eq!(granted.status, 200, "{:?}", granted.json);
    assert_eq!(granted.json["repository"], "acme/widgets");
    assert_eq!(granted.json["fence"], 1);
    let lease_id = granted.json["leaseId"].as_str().unwrap().to_owned();
    // The admin list shows who holds what.
    let listed = s.admin_get(WORKERS);
    let a_row = listed.json["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["workerId"] == a_id.as_str())
        .unwrap()
        .clone();
    assert_eq!(a_row["leases"][0]["repository"], "acme/widgets");
    assert_eq!(a_row["leases"][0]["leaseId"], lease_id.as_str());
    let busy = lease(&s, &b, "acme/widgets");
    assert_eq!(busy.status, 409);
    assert_eq!(busy.json["code"], "lease_held");

    let renewed = post(
        &s,
        &format!("{API}/leases/{lease_id}/renew"),
        &a,
        &json!({}),
    );
    assert_eq!(renewed.status, 200, "{:?}", renewed.json);
    assert_eq!(renewed.json["leaseId"], lease_id.as_str());
    // Nothing waits: an empty batch at once.
    let calls = format!("{API}/leases/{lease_id}/calls?waitMs=0");
    let polled = s.get(&calls, Some(&a));
    assert_eq!(polled.status, 200, "{:?}", polled.json);
    assert_eq!(polled.json, json!({"calls": []}));
    // Another worker's token cannot use the lease.
    let stolen = s.get(&calls, Some(&b));
    assert_eq!(stolen.status, 409);
    assert_eq!(stolen.json["code"], "lease_lost");
    // An answer to a call the lease never took.
    let stray = post(
        &s,
        &format!("{API}/leases/{lease_id}/answers"),
        &a,
        &json!({"callId": "call-x", "outcome": {"result": "ok", "value": {"type": "done"}}}),
    );
    assert_eq!(stray.status, 404, "{:?}", stray.json);

    // Revoked mid-lease: told so, and its lease ended with it.
    let revoked = s.admin_post(
        &format!("{WORKERS}/{a_id}/revoke"),
        &json!({"requestId": "rv", "reason": "stolen laptop"}),
    );
    assert_eq!(revoked.status, 200, "{:?}", revoked.json);
    let refused = s.get(&calls, Some(&a));
    assert_eq!(refused.status, 403);
    assert_eq!(refused.json["code"], "worker_revoked");
    let mut c = s.db();
    assert_eq!(
        count_where(&mut c, "worker_leases", "released_at IS NULL"),
        0,
        "revoking the worker released its lease"
    );
    // The other worker takes over at once, with a fence past the last.
    let taken = lease(&s, &b, "acme/widgets");
    assert_eq!(taken.status, 200, "{:?}", taken.json);
    assert_eq!(taken.json["fence"], 2);
    let after = s.admin_get(WORKERS);
    let a_after = after.json["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["workerId"] == a_id.as_str())
        .unwrap()
        .clone();
    assert_eq!(
        a_after["leases"],
        json!([]),
        "a revoked worker holds nothing"
    );
    let b_lease = taken.json["leaseId"].as_str().unwrap().to_owned();
    let released = post(
        &s,
        &format!("{API}/leases/{b_lease}/release"),
        &b,
        &json!({}),
    );
    assert_eq!(released.status, 204);
    let gone = s.get(&format!("{API}/leases/{b_lease}/calls"), Some(&b));
    assert_eq!(gone.json["code"], "lease_lost");
    assert!(
        !s.logs().contains(&a) && !s.logs().contains(&b),
        "a token reached the logs"
    );
}

#[test]
fn leases_are_scoped_fenced_and_end_with_revocation_sqlite() {
    leases_are_scoped_fenced_and_end_with_revocation(Db::Sqlite);
}

#[test]
fn leases_are_scoped_fenced_and_end_with_revocation_postgres() {
    leases_are_scoped_fenced_and_end_with_revocation(Db::Postgres);
}
