//! Hostile and broken clients against the real server binary, without
//! nginx in front: floods of refused webhooks, stalled bodies, too many
//! connections, a delivery id reused for another payload, bytes that are
//! not UTF-8, and the errors each of them gets.

use crate::support::*;
use crate::testapp::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The server's `host:port`.
fn addr(s: &TestApp) -> String {
    s.url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

/// The server's metrics, as a scraper reads them.
fn metrics_text(s: &TestApp) -> String {
    ureq::get(&s.url("/metrics"))
        .set("Authorization", &format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .unwrap()
        .into_string()
        .unwrap()
}

/// Reads from `conn` until it closes or `within` passes: what it read, and
/// whether the server closed the connection.
fn read_until_closed(conn: &mut TcpStream, within: Duration) -> (String, bool) {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (String::from_utf8_lossy(&got).into_owned(), false);
        }
        conn.set_read_timeout(Some(left)).unwrap();
        match conn.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (String::from_utf8_lossy(&got).into_owned(), false)
            }
            // A reset after the answer is a close as well.
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), true),
        }
    }
}

#[test]
fn a_flood_of_refused_webhooks_is_counted_whole_and_audited_as_a_bounded_sample() {
    let s = TestApp::start(Db::Sqlite);
    let body = comment_body(1, "@ccbot x", "widgets", 1);
    let unsigned: Vec<(String, String)> =
        gitea_headers("flood", "issue_comment", "issue_comment", &body)
            .into_iter()
            .filter(|(k, _)| !k.contains("Signature"))
            .collect();
    for _ in 0..200 {
        assert_eq!(s.webhook(&unsigned, &body).status, 401);
    }
    for i in 0..30 {
        let bad = b"{not json".to_vec();
        let h = gitea_headers(&format!("bad-{i}"), "issue_comment", "issue_comment", &bad);
        assert_eq!(s.webhook(&h, &bad).status, 400);
    }
    // Every refusal is counted in its minute's row.
    let counted = |action: &str| {
        let mut c = s.db();
        use codex_bridge::store::refusals;
        refusals::since(&mut c, "")
            .unwrap()
            .iter()
            .filter(|r| r.action == action)
            .map(|r| r.count)
            .sum::<i64>()
    };
    s.wait_for("every refusal counted", || {
        counted("webhook.signature_rejected") == 200 && counted("webhook.invalid_payload") == 30
    });
    // Only a sample of each kind reached the append-only audit log, and no
    // delivery id the caller chose.
    let mut c = s.db();
    assert_eq!(
        count_where(
            &mut c,
            "audit_events",
            "action = 'webhook.signature_rejected'"
        ),
        10
    );
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'webhook.invalid_payload'"),
        10
    );
    assert_eq!(
        count_where(
            &mut c,
            "audit_events",
            "action LIKE 'webhook.%' AND delivery_id IS NOT NULL"
        ),
        0
    );
    // The metric counts them all too.
    let metrics = metrics_text(&s);
    assert!(
        metrics.contains("codex_bridge_webhooks_total{outcome=\"bad_signature\"} 200"),
        "{metrics}"
    );
}

#[test]
fn a_stalled_body_is_answered_408_and_its_connection_closed() {
    let s = TestApp::builder()
        .env("CODEX_BRIDGE_REQUEST_TIMEOUT_SECS", "1")
        .start();
    let host = addr(&s);
    for (path, extra) in [
        (
            "/api/gitea/webhook",
            "X-Gitea-Event: issue_comment\r\n".to_owned(),
        ),
        (
            "/api/gitea-workflow/control/pause",
            format!("Authorization: Bearer {ADMIN_TOKEN}\r\n"),
        ),
    ] {
        // Within each route's size limit: only its slowness is wrong.
        let length = if path.contains("webhook") {
            1_048_576
        } else {
            60_000
        };
        let mut conn = TcpStream::connect(&host).unwrap();
        write!(
            conn,
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}Content-Length: {length}\r\n\r\n{{\"a\":"
        )
        .unwrap();
        let (answer, closed) = read_until_closed(&mut conn, Duration::from_secs(20));
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer:?}");
        assert!(answer.contains("request_timeout"), "{path}: {answer:?}");
        assert!(closed, "{path}: the stalled connection stays open");
    }
    // A head that never ends is cut off as well.
    let mut conn = TcpStream::connect(&host).unwrap();
    write!(conn, "POST /api/gitea/webhook HTTP/1.1\r\nHost: {host}\r\n").unwrap();
    let (_, closed) = read_until_closed(&mut conn, Duration::from_secs(20));
    assert!(closed, "a stalled head keeps its connection");
    // The server still answers.
    assert_eq!(s.get("/healthz", None).status, 200);
}

#[test]
fn connections_past_max_connections_wait_until_one_closes() {
    let s = TestApp::builder()
        .env("CODEX_BRIDGE_MAX_CONNECTIONS", "2")
        .start();
    let host = addr(&s);
    let ask = |conn: &mut TcpStream| {
        write!(conn, "GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    };
    let answered = |conn: &mut TcpStream, within: Duration| {
        conn.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 512];
        matches!(conn.read(&mut buf), Ok(n) if n > 0 && buf.starts_with(b"HTTP/1.1 200"))
    };
    // Two kept-alive connections hold both places.
    let mut held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(&host).unwrap()).collect();
    for conn in held.iter_mut() {
        ask(conn);
        assert!(answered(conn, Duration::from_secs(10)));
    }
    // A third is not served while they are open (well within the 5 s
    // keep-alive that would close them)...
    let mut third = TcpStream::connect(&host).unwrap();
    ask(&mut third);
    assert!(
        !answered(&mut third, Duration::from_millis(800)),
        "a third connection was served"
    );
    // ...and is once one of them closes.
    drop(held.remove(0));
    assert!(
        answered(&mut third, Duration::from_secs(10)),
        "the waiting connection was never served"
    );
}

#[test]
fn a_delivery_id_reused_for_another_payload_is_409_and_recorded() {
    let s = TestApp::start(Db::Sqlite);
    let first = comment_body(1, "@ccbot fix it", "widgets", 1);
    let r = s.webhook(
        &gitea_headers("same-id", "issue_comment", "issue_comment", &first),
        &first,
    );
    assert_eq!(r.status, 202, "{:?}", r.json);
    let task = r.json["taskId"].clone();
    let other = comment_body(2, "@ccbot something else", "widgets", 1);
    let r = s.webhook(
        &gitea_headers("same-id", "issue_comment", "issue_comment", &other),
        &other,
    );
    assert_eq!(r.status, 409, "{:?}", r.json);
    assert_eq!(r.json["code"], "delivery_conflict");
    assert!(r.json["message"]
        .as_str()
        .unwrap()
        .contains(task.as_str().unwrap()));
    // The first stands: its retry is still its duplicate.
    let again = s.webhook(
        &gitea_headers("same-id", "issue_comment", "issue_comment", &first),
        &first,
    );
    assert_eq!(again.status, 200);
    assert_eq!(again.json["taskId"], task);
    let mut c = s.db();
    assert_eq!(count(&mut c, "tasks"), 1);
    assert_eq!(count(&mut c, "webhook_deliveries"), 1);
    assert_eq!(
        count_where(
            &mut c,
            "audit_events",
            "action = 'webhook.delivery_conflict'"
        ),
        1
    );
    let metrics = metrics_text(&s);
    assert!(
        metrics.contains("codex_bridge_webhooks_total{outcome=\"delivery_conflict\"} 1"),
        "{metrics}"
    );
}

#[test]
fn bytes_that_are_not_utf8_or_a_delivery_id_outside_ascii_are_refused_plainly() {
    let s = TestApp::start(Db::Sqlite);
    // Invalid UTF-8 in a field nobody reads: not JSON, refused like any.
    let mut v: Value = serde_json::from_slice(&comment_body(1, "@ccbot x", "widgets", 1)).unwrap();
    v["unread"] = json!("MARK");
    let text = serde_json::to_vec(&v).unwrap();
    let at = text.windows(4).position(|w| w == b"MARK").unwrap();
    let body = [&text[..at], b"\xff\xfe", &text[at + 4..]].concat();
    let r = s.webhook(
        &gitea_headers("not-utf8", "issue_comment", "issue_comment", &body),
        &body,
    );
    assert_eq!(r.status, 400, "{:?}", r.json);
    assert_eq!(r.json["code"], "invalid_payload");
    assert!(
        r.json["message"].as_str().unwrap().contains("UTF-8"),
        "{:?}",
        r.json
    );

    // A delivery id with a byte outside ASCII is invalid, not missing.
    let body = comment_body(2, "@ccbot x", "widgets", 1);
    let host = addr(&s);
    let mut head = format!("POST /api/gitea/webhook HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (k, v) in gitea_headers("PLACEHOLDER", "issue_comment", "issue_comment", &body) {
        if k != "Content-Type" {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    let raw = [
        head.replace("PLACEHOLDER", "d\u{e9}livery").as_bytes(),
        b"\r\n",
        &body,
    ]
    .concat();
    let raw = {
        // The header as Latin-1 bytes, as a careless client sends it.
        let at = raw
            .windows(2)
            .position(|w| w == "\u{e9}".as_bytes())
            .unwrap();
        [&raw[..at], b"\xe9", &raw[at + 2..]].concat()
    };
    let mut conn = TcpStream::connect(&host).unwrap();
    conn.write_all(&raw).unwrap();
    let (answer, _) = read_until_closed(&mut conn, Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("invalid_delivery_id"), "{answer}");
    assert_eq!(count(&mut s.db(), "tasks"), 0);
}

#[test]
fn admin_errors_say_what_happened() {
    let s = TestApp::start(Db::Sqlite);
    // Signing in from no page at all: about the origin, not a cookie.
    let r = s.post_raw(
        "/admin/login",
        &[(
            "Content-Type".to_owned(),
            "application/x-www-form-urlencoded".to_owned(),
        )],
        format!("token={ADMIN_TOKEN}").as_bytes(),
    );
    assert_eq!(r.status, 403, "{:?}", r.json);
    let message = r.json["message"].as_str().unwrap();
    assert!(message.contains("sign-in"), "{message}");
    assert!(!message.contains("cookie"), "{message}");
    // A megabyte of JSON is too large, not malformed.
    let big = json!({"requestId": "r-1", "reason": "x".repeat(1024 * 1024)});
    let r = s.admin_post("/api/gitea-workflow/control/pause", &big);
    assert_eq!(r.status, 413, "{:?}", r.json);
    assert_eq!(r.json["code"], "payload_too_large");
    // A small malformed one is still malformed.
    let r = s.post_raw(
        "/api/gitea-workflow/control/pause",
        &[
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("Authorization".to_owned(), format!("Bearer {ADMIN_TOKEN}")),
        ],
        b"{nope",
    );
    assert_eq!(r.status, 400, "{:?}", r.json);
    assert_eq!(r.json["code"], "invalid_json");
}
