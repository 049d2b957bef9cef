//! The deployment (deploy/): the nginx site in front of the real server
//! (webhooks over TLS with their signature intact, the body limit enforced by
//! nginx, forwarded client addresses believed only from the proxy, /metrics not
//! public), and the files agreeing with each other.

use crate::nginx::{Nginx, RawReply};
use crate::support::*;
use crate::testapp::*;
use std::path::Path;

/// The test server's body limit; nginx gets the same.
const LIMIT: usize = 64 * 1024;

fn server(trusted: &str) -> TestApp {
    TestApp::builder()
        .env("CODEX_BRIDGE_MAX_BODY_BYTES", &LIMIT.to_string())
        .env("CODEX_BRIDGE_TRUSTED_PROXIES", trusted)
        .start()
}

fn upstream(s: &TestApp) -> String {
    s.base.trim_start_matches("http://").to_owned()
}

/// The request-log lines of `path` (the root span names path and client).
pub(crate) fn request_lines(logs: &str, path: &str) -> Vec<String> {
    logs.lines()
        .filter(|l| l.contains(&format!("path={path} ")) && l.contains("request finished"))
        .map(str::to_owned)
        .collect()
}

/// A signed comment webhook of exactly `size` bytes (JSON padded with spaces).
pub(crate) fn signed_webhook(
    delivery: &str,
    comment_id: i64,
    size: usize,
) -> (Vec<(String, String)>, Vec<u8>) {
    let mut body = comment_body(
        comment_id,
        "@ccbot über-check \"quoted\" ✓ — line\r\nbreak",
        "widgets",
        comment_id,
    );
    assert!(
        body.len() <= size,
        "the comment alone is {} bytes",
        body.len()
    );
    body.resize(size, b' ');
    (
        gitea_headers(delivery, "issue_comment", "issue_comment", &body),
        body,
    )
}

#[test]
fn a_signed_webhook_through_nginx_over_tls_arrives_intact_with_the_forwarded_client() {
    let s = server(Nginx::PROXY_ADDR);
    let nginx = Nginx::start(&upstream(&s), LIMIT);
    // Exactly the limit: nginx lets it through, and the server takes it.
    let (headers, body) = signed_webhook("tls-delivery-1", 9101, LIMIT);
    let r = nginx.https_request("POST", "/api/gitea/webhook", &headers, &body);
    assert_eq!(r.status, 202, "{} / {}", r.text(), nginx.error_log());
    assert_eq!(r.json()["deliveryId"], "tls-delivery-1");
    // The bytes the server stored are the bytes that were sent.
    let hash = codex_bridge::webhook::payload_hash(&body);
    assert_eq!(
        count_where(
            &mut s.db(),
            "webhook_deliveries",
            &format!("payload_hash = '{hash}'")
        ),
        1
    );
    s.wait_for("the webhook in the server's log", || {
        !request_lines(&s.logs(), "/api/gitea/webhook").is_empty()
    });
    let lines = request_lines(&s.logs(), "/api/gitea/webhook");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&format!(
            "client_ip=127.0.0.1 peer_ip={} tls=true",
            Nginx::PROXY_ADDR
        )),
        "the client is the X-Forwarded-For address, over TLS: {}",
        lines[0]
    );
    assert!(lines[0].contains("status=202"), "{}", lines[0]);

    // The plain-HTTP copy of the same site says so too.
    let (headers, body) = signed_webhook("plain-delivery-1", 9102, 8192);
    let r = nginx.http_request("POST", "/api/gitea/webhook", &headers, &body);
    assert_eq!(r.status, 202, "{}", r.text());
    s.wait_for("the second webhook in the server's log", || {
        request_lines(&s.logs(), "/api/gitea/webhook").len() == 2
    });
    let logs = s.logs();
    let lines = request_lines(&logs, "/api/gitea/webhook");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("tls=false") && l.contains("status=202")),
        "{lines:?}"
    );
}

#[test]
fn an_oversize_webhook_is_refused_by_nginx_and_never_reaches_the_server() {
    let s = server(Nginx::PROXY_ADDR);
    let nginx = Nginx::start(&upstream(&s), LIMIT);
    let (headers, body) = signed_webhook("too-big-1", 9201, LIMIT + 1);
    for r in [
        nginx.http_request("POST", "/api/gitea/webhook", &headers, &body),
        nginx.https_request("POST", "/api/gitea/webhook", &headers, &body),
    ] {
        assert_eq!(r.status, 413, "{}", r.text());
        assert!(
            r.header("server").is_some_and(|v| v.starts_with("nginx")),
            "the 413 comes from nginx: {:?}",
            r.headers
        );
    }
    assert!(
        nginx
            .access_log()
            .contains("\"POST /api/gitea/webhook HTTP/1.1\" 413"),
        "{}",
        nginx.access_log()
    );
    // A request that passes shows the server logs requests at all.
    assert_eq!(
        ureq::get(&nginx.url("/healthz")).call().unwrap().status(),
        200
    );
    s.wait_for("the health check in the server's log", || {
        !request_lines(&s.logs(), "/healthz").is_empty()
    });
    let logs = s.logs();
    assert!(
        request_lines(&logs, "/api/gitea/webhook").is_empty(),
        "the server saw the oversize request:\n{logs}"
    );
    assert_eq!(count(&mut s.db(), "webhook_deliveries"), 0);
}

#[test]
fn forwarded_headers_count_only_from_a_trusted_proxy() {
    // Through nginx: the client's own (forged) X-Forwarded-For entry is left
    // of the address nginx appends, and is never believed.
    let s = server(Nginx::PROXY_ADDR);
    let nginx = Nginx::start(&upstream(&s), LIMIT);
    let forged = vec![
        ("X-Forwarded-For".to_owned(), "203.0.113.7".to_owned()),
        ("X-Forwarded-Proto".to_owned(), "https".to_owned()),
    ];
    let r = nginx.http_request("GET", "/readyz", &forged, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    // Straight to the server, not from a trusted proxy: the headers are ignored.
    let direct = ureq::get(&s.url("/healthz"))
        .set("X-Forwarded-For", "203.0.113.9")
        .set("X-Forwarded-Proto", "https")
        .call()
        .unwrap();
    assert_eq!(direct.status(), 200);
    s.wait_for("both requests in the log", || {
        !request_lines(&s.logs(), "/readyz").is_empty()
            && !request_lines(&s.logs(), "/healthz").is_empty()
    });
    let logs = s.logs();
    let via_nginx = &request_lines(&logs, "/readyz")[0];
    assert!(
        via_nginx.contains(&format!(
            "client_ip=127.0.0.1 peer_ip={} tls=false",
            Nginx::PROXY_ADDR
        )),
        "{via_nginx}"
    );
    let direct = &request_lines(&logs, "/healthz")[0];
    assert!(
        direct.contains("client_ip=127.0.0.1 peer_ip=127.0.0.1 tls=false"),
        "{direct}"
    );
    assert!(
        !logs.contains("203.0.113."),
        "a forged address was logged:\n{logs}"
    );

    // A chain of trusted proxies (here the test client plays a load balancer
    // in front of nginx): the address it forwards is the client.
    let s = server(&format!("{}, 127.0.0.1", Nginx::PROXY_ADDR));
    let nginx = Nginx::start(&upstream(&s), LIMIT);
    let balanced = vec![("X-Forwarded-For".to_owned(), "198.51.100.23".to_owned())];
    let r = nginx.https_request("GET", "/readyz", &balanced, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    s.wait_for("the request in the log", || {
        !request_lines(&s.logs(), "/readyz").is_empty()
    });
    let line = &request_lines(&s.logs(), "/readyz")[0];
    assert!(
        line.contains(&format!(
            "client_ip=198.51.100.23 peer_ip={} tls=true",
            Nginx::PROXY_ADDR
        )),
        "{line}"
    );
}

#[test]
fn metrics_are_not_reachable_through_nginx() {
    let s = server(Nginx::PROXY_ADDR);
    let nginx = Nginx::start(&upstream(&s), LIMIT);
    let token = vec![("Authorization".to_owned(), format!("Bearer {ADMIN_TOKEN}"))];
    for path in ["/metrics", "/metrics?x=1", "//metrics", "/%6Detrics"] {
        for r in [
            nginx.http_request("GET", path, &token, b""),
            nginx.https_request("GET", path, &token, b""),
        ] {
            assert_eq!(r.status, 404, "{path}: {}", r.text());
        }
    }
    // The admin API does go through (the same token), and /metrics exists on
    // the server itself.
    let r = nginx.https_request("GET", "/api/gitea-workflow/overview", &token, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.admin_get("/metrics").status, 200);
    s.wait_for("the direct /metrics request in the log", || {
        !request_lines(&s.logs(), "/metrics").is_empty()
    });
    let lines = request_lines(&s.logs(), "/metrics");
    assert_eq!(
        lines.len(),
        1,
        "only the direct request reached the server: {lines:?}"
    );
    assert!(lines[0].contains("peer_ip=127.0.0.1 "), "{}", lines[0]);
    let logs = s.logs();
    let proxied: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains(&format!("peer_ip={} ", Nginx::PROXY_ADDR)))
        .filter(|l| l.contains("request finished"))
        .collect();
    assert!(!proxied.is_empty(), "the overview came through nginx");
    assert!(
        proxied.iter().all(|l| !l.contains("etrics")),
        "a metrics path was proxied: {proxied:#?}"
    );
}

/// The numbers that must agree across deploy/: the body limit, the upstream
/// address, the proxy trust, and the paths the unit may write.
#[test]
fn the_deploy_files_agree_with_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let example = codex_bridge::config::Config::from_sources(
        Some(&root.join("codex-bridge.example.toml")),
        &Default::default(),
    )
    .unwrap();
    let site = crate::nginx::site_template();
    let directive = |name: &str| -> Vec<String> {
        site.lines()
            .map(|l| l.split('#').next().unwrap().trim())
            .filter(|l| l.ends_with(';'))
            .filter_map(|l| l.strip_prefix(&format!("{name} ")))
            .map(|v| v.trim_end_matches(';').trim().to_owned())
            .collect()
    };
    let body = directive("client_max_body_size");
    assert_eq!(body.len(), 1, "{body:?}");
    let bytes = match body[0].strip_suffix(['m', 'M']) {
        Some(mb) => mb.parse::<usize>().unwrap() * 1024 * 1024,
        None => match body[0].strip_suffix(['k', 'K']) {
            Some(kb) => kb.parse::<usize>().unwrap() * 1024,
            None => body[0].parse().unwrap(),
        },
    };
    assert_eq!(
        bytes, example.max_body_bytes,
        "client_max_body_size must equal max_body_bytes"
    );
    assert_eq!(
        directive("server"),
        vec![example.listen.clone()],
        "the upstream is the server's listen address"
    );
    assert!(example
        .trusted_proxies
        .contains("127.0.0.1".parse().unwrap()));
    assert!(site.contains("location = /metrics {\n        return 404;"));
    let events = site
        .split("location /api/gitea-workflow/events {")
        .nth(1)
        .and_then(|s| s.split('}').next())
        .expect("a location for the event stream");
    assert!(events.contains("proxy_buffering off;"), "{events}");
    assert!(events.contains("proxy_read_timeout 1h;"), "{events}");
    for header in [
        "X-Forwarded-For $proxy_add_x_forwarded_for",
        "X-Forwarded-Proto $scheme",
    ] {
        assert!(
            site.contains(&format!("proxy_set_header {header};")),
            "{header}"
        );
    }

    let unit = std::fs::read_to_string(root.join("codex-bridge.service")).unwrap();
    for line in [
        "Restart=on-failure",
        "User=codex-bridge",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/codex-bridge",
        "NoNewPrivileges=true",
        "PrivateTmp=true",
        "ProtectHome=true",
        "ExecStart=/usr/local/bin/codex-bridge serve --config /etc/codex-bridge/codex-bridge.toml",
        "KillMode=mixed",
    ] {
        assert!(unit.lines().any(|l| l.trim() == line), "unit lacks {line}");
    }
    // systemd waits longer than a drain takes: the drain, then up to 30 s
    // for the interrupted turns.
    let stop_secs: u64 = unit
        .lines()
        .find_map(|l| l.trim().strip_prefix("TimeoutStopSec="))
        .expect("the unit sets TimeoutStopSec")
        .parse()
        .unwrap();
    assert!(
        stop_secs > example.drain_timeout.as_secs() + 30,
        "TimeoutStopSec={stop_secs} does not outlast drain_timeout_secs"
    );
    // Everything the example config writes is inside the unit's writable path.
    let writable = Path::new("/var/lib/codex-bridge");
    let db = match &example.database_url {
        codex_bridge::config::DatabaseUrl::Sqlite(p) => p.clone(),
        other => panic!("the example uses SQLite: {other:?}"),
    };
    for path in [
        &db,
        &example.state_dir,
        &example.workspace_root,
        &example.codex_home,
    ] {
        assert!(
            path.starts_with(writable),
            "{} is not writable",
            path.display()
        );
    }
}

#[test]
fn raw_replies_parse_chunked_bodies() {
    let r = RawReply::parse(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    );
    assert_eq!((r.status, r.text().as_str()), (200, "abcde"));
}

/// The admin event stream through nginx: the snapshot comes at once, and a
/// later event (a webhook's task) arrives while the stream stays open — nginx
/// does not buffer it, although the stream is compressed and the server's
/// `X-Accel-Buffering` ignored (see `crate::nginx`): the site's own setting.
#[test]
fn the_event_stream_arrives_through_nginx_unbuffered() {
    let s = server(Nginx::PROXY_ADDR);
    let nginx = Nginx::start(&upstream(&s), LIMIT);
    let stream = crate::nginx::EventStream::open(&nginx, ADMIN_TOKEN);
    stream.next("overview", std::time::Duration::from_secs(5));
    // A webhook straight to the server: its task shows up in the stream.
    let body = comment_body(77, "@ccbot through the proxy", "widgets", 7);
    let sent = std::time::Instant::now();
    let r = s.webhook(
        &gitea_headers("sse-1", "issue_comment", "issue_comment", &body),
        &body,
    );
    assert_eq!(r.status, 202, "{:?}", r.json);
    let (at, _) = stream.next("task", std::time::Duration::from_secs(10));
    // The hub wakes on the commit (or its 2 s tick): far below nginx's
    // buffering, which would hold small events until the stream ends.
    assert!(at.duration_since(sent) < std::time::Duration::from_secs(5));
}
