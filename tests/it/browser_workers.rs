//! The web view's workers in a real browser (see `browser.rs` for the rig):
//! each registered worker with its health, repositories, the lease it holds,
//! its last heartbeat and version; revoking one through the action dialog
//! (its reason goes into the audit log). The workers speak the worker API
//! from the test: no worker process is needed to be seen.

use crate::browser::{browser_test, click, confirm_action, el, sign_in, text_until};
use crate::support::*;
use crate::testapp::*;
use serde_json::{json, Value};

/// Registers a worker given `repository`; its id and token.
fn register(s: &TestApp, name: &str, repository: &str) -> (String, String) {
    let r = s.admin_post(
        "/api/gitea-workflow/workers",
        &json!({
            "name": name,
            "repositories": [repository],
            "requestId": format!("register-{name}"),
            "reason": "a build machine",
        }),
    );
    assert_eq!(r.status, 201, "{:?}", r.json);
    (
        r.json["workerId"].as_str().unwrap().to_owned(),
        r.json["token"].as_str().unwrap().to_owned(),
    )
}

/// A worker API request with `token`.
fn as_worker(s: &TestApp, token: &str, path: &str, body: &Value) -> Reply {
    let headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("Authorization".to_owned(), format!("Bearer {token}")),
    ];
    s.post_raw(
        &format!("/api/worker/v1{path}"),
        &headers,
        body.to_string().as_bytes(),
    )
}

#[test]
fn browser_workers_show_their_health_and_lease_and_one_is_revoked() {
    let s = &TestApp::start(Db::Sqlite);
    let (alive, alive_token) = register(s, "build-alive", "acme/widgets");
    let (silent, _) = register(s, "build-silent", "acme/other");
    let beat = as_worker(
        s,
        &alive_token,
        "/heartbeat",
        &json!({"version": "9.9.9-test", "uncertainTurns": 0}),
    );
    assert_eq!(beat.status, 200, "{:?}", beat.json);
    let lease = as_worker(
        s,
        &alive_token,
        "/leases",
        &json!({"protocol": 1, "repository": "acme/widgets"}),
    );
    assert_eq!(lease.status, 200, "{:?}", lease.json);
    let row = |id: &str, cell: &str| format!("tr.worker[data-worker='{id}'] .{cell}");

    let (alive_id, silent_id) = (alive.clone(), silent.clone());
    browser_test("workers", |c| async move {
        let (alive, silent) = (alive_id, silent_id);
        sign_in(&c, s, ADMIN_TOKEN).await;
        click(&c, "nav a[data-view='workers']").await;
        text_until(&c, &row(&alive, "worker-health"), |t| t == "ok").await;
        text_until(&c, &row(&alive, "worker-version"), |t| t == "9.9.9-test").await;
        text_until(&c, &row(&alive, "worker-repositories"), |t| {
            t == "acme/widgets"
        })
        .await;
        let leases = text_until(&c, &row(&alive, "worker-leases"), |t| {
            t.contains("acme/widgets")
        })
        .await;
        assert!(leases.contains("fence 1"), "{leases}");
        text_until(&c, &row(&alive, "worker-heartbeat"), |t| t.contains("ago")).await;
        text_until(&c, &row(&alive, "worker-uncertain"), |t| t == "none").await;
        text_until(&c, &row(&alive, "worker-journal"), |t| {
            t == "0 uncertain turns"
        })
        .await;
        text_until(&c, &row(&silent, "worker-journal"), |t| t == "not reported").await;
        text_until(&c, &row(&silent, "worker-health"), |t| t == "never seen").await;
        text_until(&c, &row(&silent, "worker-leases"), |t| t == "none").await;
        let name = el(
            &c,
            &format!("tr.worker[data-worker='{silent}'] .worker-name"),
        )
        .await;
        assert_eq!(name.text().await.unwrap(), "build-silent");
        crate::browser::save_screenshot(&c, "workers").await;

        click(
            &c,
            &format!("tr.worker[data-worker='{silent}'] button.revoke-worker"),
        )
        .await;
        assert_eq!(
            confirm_action(&c, "machine retired").await,
            "worker.revoked"
        );
        text_until(&c, &row(&silent, "worker-health"), |t| t == "revoked").await;
        // The other one is untouched.
        text_until(&c, &row(&alive, "worker-health"), |t| t == "ok").await;
    });
    let listed = s.admin_get("/api/gitea-workflow/workers");
    let revoked: Vec<&Value> = listed.json["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["health"] == "revoked")
        .collect();
    assert_eq!(revoked.len(), 1, "{:?}", listed.json);
    assert_eq!(revoked[0]["workerId"], silent.as_str());
    let audit = s.admin_get("/api/gitea-workflow/audit");
    assert!(
        audit.json.to_string().contains("machine retired"),
        "{:?}",
        audit.json
    );
}
