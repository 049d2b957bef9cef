//! The admin page's HTTP side, without a browser: the session cookie
//! (cross-site, behind TLS, across the instances of one token), the live
//! event stream, and clearing a blocked task's workspace.

use crate::support::*;
use crate::testapp::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Signs in over plain HTTP; returns the cookie value.
fn cookie_sign_in(s: &TestApp) -> String {
    let agent = ureq::AgentBuilder::new().redirects(0).build();
    let r = agent
        .post(&s.url("/admin/login"))
        .set("Origin", &s.base)
        .send_form(&[("token", ADMIN_TOKEN)])
        .unwrap();
    assert_eq!(r.status(), 303);
    let set = r.header("set-cookie").unwrap().to_owned();
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    assert!(!set.contains("Secure"), "plain HTTP: no Secure flag: {set}");
    set.split(';')
        .next()
        .unwrap()
        .strip_prefix("cb_admin=")
        .unwrap()
        .to_owned()
}

fn status_of(r: Result<ureq::Response, ureq::Error>) -> u16 {
    match r {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(code, _)) => code,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_session_cookie_is_refused_cross_site_and_secure_behind_tls() {
    // This machine's loopback plays the TLS-terminating proxy.
    let s = TestApp::builder()
        .env("CODEX_BRIDGE_TRUSTED_PROXIES", "127.0.0.1")
        .start();
    let cookie = cookie_sign_in(&s);
    let pause = |origin: Option<&str>, cookie: &str| {
        let mut req = ureq::post(&s.url("/api/gitea-workflow/control/pause"))
            .set("Cookie", &format!("cb_admin={cookie}"));
        if let Some(o) = origin {
            req = req.set("Origin", o);
        }
        status_of(
            req.send_json(json!({"requestId": uuid::Uuid::new_v4().to_string(), "reason": "r"})),
        )
    };
    assert_eq!(pause(Some("http://evil.example"), &cookie), 403);
    assert_eq!(pause(None, &cookie), 403, "no Origin, no Sec-Fetch-Site");
    assert_eq!(pause(Some(&s.base), "v1.forged.9999999999.00"), 401);
    assert_eq!(
        s.admin_get("/api/gitea-workflow/overview").json["paused"],
        false
    );
    assert_eq!(pause(Some(&s.base), &cookie), 200);
    // Reads with the cookie, and the Bearer token still works for scripts.
    let get = ureq::get(&s.url("/api/gitea-workflow/overview"))
        .set("Cookie", &format!("cb_admin={cookie}"))
        .call()
        .unwrap();
    assert_eq!(get.status(), 200);
    assert_eq!(
        s.admin_post(
            "/api/gitea-workflow/control/resume",
            &json!({"requestId": "bearer-1", "reason": "script"})
        )
        .status,
        200
    );
    // A wrong cookie or token: 401, page or API.
    assert_eq!(
        status_of(
            ureq::get(&s.url("/api/gitea-workflow/events"))
                .set("Cookie", "cb_admin=nonsense")
                .call()
        ),
        401
    );
    // Behind a TLS-terminating proxy on this machine the cookie is Secure.
    let r = ureq::AgentBuilder::new()
        .redirects(0)
        .build()
        .post(&s.url("/admin/login"))
        .set("Origin", "https://bridge.example")
        .set("X-Forwarded-Host", "bridge.example")
        .set("X-Forwarded-Proto", "https")
        .send_form(&[("token", ADMIN_TOKEN)])
        .unwrap();
    assert!(r.header("set-cookie").unwrap().contains("Secure"));
    // The same headers from an address that is not a trusted proxy are not
    // believed: no Secure flag (and the forged host fails the Origin check).
    let plain = TestApp::start(Db::Sqlite);
    let r = ureq::AgentBuilder::new()
        .redirects(0)
        .build()
        .post(&plain.url("/admin/login"))
        .set("Origin", &plain.base)
        .set("X-Forwarded-Proto", "https")
        .send_form(&[("token", ADMIN_TOKEN)]);
    let r = r.unwrap();
    assert!(!r.header("set-cookie").unwrap().contains("Secure"));
    // Signing out revokes the session.
    crate::instances::sign_out(&s, &cookie);
    assert_eq!(pause(Some(&s.base), &cookie), 401);
}

#[test]
fn the_session_cookie_holds_on_every_instance_of_the_token_and_nowhere_else() {
    let s = TestApp::start(Db::Sqlite);
    let cookie = cookie_sign_in(&s);
    let overview = |server: &TestApp, cookie: &str| {
        status_of(
            ureq::get(&server.url("/api/gitea-workflow/overview"))
                .set("Cookie", &format!("cb_admin={cookie}"))
                .call(),
        )
    };
    assert_eq!(overview(&s, &cookie), 200);
    // Another instance (or this one restarted) with the same admin token.
    let same_token = TestApp::start(Db::Sqlite);
    assert_eq!(overview(&same_token, &cookie), 200);
    // A changed admin token signs everybody out.
    let new_token = TestApp::builder()
        .env(
            "CODEX_BRIDGE_ADMIN_TOKEN",
            "a-rotated-admin-token-0123456789",
        )
        .start();
    assert_eq!(overview(&new_token, &cookie), 401);
    // Tampered: a longer expiry, or any changed character of the signature.
    let (signature, claim) = cookie.split_at(cookie.len() - claim_len(&cookie));
    let (id, expires) = claim.split_once('.').unwrap();
    let later: i64 = expires.parse::<i64>().unwrap() + 3600;
    assert_eq!(overview(&s, &format!("{signature}{id}.{later}")), 401);
    let mut forged = signature.to_owned().into_bytes();
    forged[0] = if forged[0] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    assert_eq!(overview(&s, &format!("{forged}{claim}")), 401);
    assert_eq!(overview(&s, &cookie), 200, "the real one still works");
}

/// The length of the signed claim (`<32 hex id>.<unix seconds>`) at the end of
/// a session cookie's value.
fn claim_len(value: &str) -> usize {
    let dot = value.rfind('.').unwrap();
    value.len() - dot + 32
}

/// The admin event stream's lines, read on a thread of their own.
fn open_events(s: &TestApp) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let r = ureq::get(&s.url("/api/gitea-workflow/events"))
        .set("Authorization", &format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .unwrap();
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("x-accel-buffering"), Some("no"));
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = r.into_reader();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(reader)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// How long an event is waited for.
const WAIT: Duration = Duration::from_secs(20);

/// The data of the next event called `name` (others are skipped).
fn next_event_of(rx: &std::sync::mpsc::Receiver<String>, name: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    let mut current = String::new();
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if let Some(n) = line.strip_prefix("event: ") {
            current = n.to_owned();
        } else if let Some(d) = line.strip_prefix("data: ") {
            if current == name {
                return serde_json::from_str(d).unwrap();
            }
        }
    }
    panic!("no {name} event");
}

fn event_stream(db: Db) {
    let s = TestApp::start(db);
    assert_eq!(
        status_of(ureq::get(&s.url("/api/gitea-workflow/events")).call()),
        401
    );
    let rx = open_events(&s);
    let next_event = |name: &str| next_event_of(&rx, name);
    assert_eq!(next_event("overview")["paused"], false);
    assert_eq!(next_event("actors")["registry"]["runtime"], "none");
    assert!(next_event("attention")["tasks"].is_array());
    // A webhook: the task event, then the overview with it queued.
    let r = s.comment("e-1", 1, "@ccbot hello", "widgets", 1);
    let task = r.json["taskId"].as_str().unwrap();
    let t = next_event("task");
    assert_eq!(t["taskId"], task);
    assert_eq!(next_event("overview")["queueDepth"], 1);
    // A control action: its audit event.
    s.admin_post(
        "/api/gitea-workflow/control/pause",
        &json!({"requestId": "sse-1", "reason": "watching"}),
    );
    let mut seen = false;
    for _ in 0..10 {
        if next_event("audit")["action"] == "control.pause" {
            seen = true;
            break;
        }
    }
    assert!(seen, "the pause was streamed");
}

#[test]
fn the_event_stream_needs_auth_and_starts_with_a_snapshot_sqlite() {
    event_stream(Db::Sqlite);
}

#[test]
fn the_event_stream_needs_auth_and_starts_with_a_snapshot_postgres() {
    event_stream(Db::Postgres);
}

/// On PostgreSQL, ids become visible in commit order: a transition whose id
/// was drawn first but committed after a higher one is still streamed.
#[test]
fn a_transition_committed_out_of_id_order_is_still_streamed_postgres() {
    use diesel::connection::SimpleConnection;
    use diesel::Connection;
    let s = TestApp::start(Db::Postgres);
    let rx = open_events(&s);
    let task = s.comment("o-1", 1, "@ccbot hello", "widgets", 1).json["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Its one history row (received -> queued).
    let t = next_event_of(&rx, "task");
    assert_eq!(
        (t["taskId"].as_str(), t["stateVersion"].as_i64()),
        (Some(task.as_str()), Some(2))
    );
    // History rows written straight into the table (the hub reads rows,
    // whoever wrote them): `early` draws its id first and commits last.
    let row = |version: i64| {
        format!(
            "INSERT INTO task_transitions (task_id, from_state, to_state, state_version, actor, at) \
             VALUES ('{task}', 'queued', 'queued', {version}, 'test', '2026-11-30T00:00:00.000000Z')"
        )
    };
    let mut early = diesel::PgConnection::establish(&s.db_url).unwrap();
    let mut late = diesel::PgConnection::establish(&s.db_url).unwrap();
    early
        .batch_execute(&format!("BEGIN; {};", row(100)))
        .unwrap();
    late.batch_execute(&format!("BEGIN; {}; COMMIT;", row(101)))
        .unwrap();
    let later = next_event_of(&rx, "task");
    assert_eq!(later["stateVersion"], 101, "{later}");
    early.batch_execute("COMMIT;").unwrap();
    let earlier = next_event_of(&rx, "task");
    assert_eq!(earlier["stateVersion"], 100, "{earlier}");
    assert!(
        earlier["id"].as_i64() < later["id"].as_i64(),
        "the row streamed last has the lower id: {earlier} {later}"
    );
}

#[test]
fn clear_workspace_requeues_a_blocked_task_once_and_refuses_others() {
    let s = TestApp::start(Db::Sqlite);
    let task = s.comment("w-1", 1, "@ccbot hi", "widgets", 1).json["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/api/gitea-workflow/tasks/{task}/clear-workspace");
    let body = json!({"requestId": "clear-1", "reason": "cleaned by hand"});
    let refused = s.admin_post(&path, &body);
    assert_eq!(refused.status, 409);
    assert_eq!(refused.json["code"], "not_blocked");
    // As the repo actor leaves it after finding a dirty workspace.
    exec(
        &mut s.db(),
        &format!(
            "UPDATE tasks SET state = 'blocked_workspace', state_version = state_version + 1 WHERE task_id = '{task}'"
        ),
    )
    .unwrap();
    let first = s.admin_post(&path, &body);
    assert_eq!(first.status, 200, "{:?}", first.json);
    assert_eq!(first.json["action"], "task.clear_workspace");
    assert_eq!(first.json["fromState"], "blocked_workspace");
    assert_eq!(first.json["toState"], "queued");
    assert_eq!(first.json["metadata"]["reason"], "cleaned by hand");
    let again = s.admin_post(&path, &body);
    assert_eq!(again.json["eventId"], first.json["eventId"], "idempotent");
    assert_eq!(
        s.admin_get(&format!("/api/gitea-workflow/tasks/{task}"))
            .json["task"]["state"],
        "queued"
    );
    assert_eq!(
        s.post_raw(
            &path,
            &[("Content-Type".into(), "application/json".into())],
            b"{}"
        )
        .status,
        401
    );
}
