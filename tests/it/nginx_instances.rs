//! The nginx site for several instances (`deploy/codex-bridge-instances.nginx.conf`)
//! in a real nginx, in front of two processes of the real server on one
//! PostgreSQL: webhooks spread over both and are accepted, the admin view
//! lists both from either, the live event stream stays unbuffered, a drained
//! and stopped instance costs no webhook, and a webhook an instance received
//! is never sent to another one. Also: both shipped sites pass `nginx -t`,
//! and the instances site keeps the single-instance site's settings.

use crate::deploy::{request_lines, signed_webhook};
use crate::nginx::*;
use crate::support::*;
use crate::testapp::*;
use serde_json::json;
use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The test servers' body limit; nginx gets the same.
const LIMIT: usize = 64 * 1024;
const SITE: &str = "codex-bridge-instances.nginx.conf";
const WEBHOOK: &str = "/api/gitea/webhook";

fn upstream(s: &TestApp) -> String {
    s.base.trim_start_matches("http://").to_owned()
}

/// The lines of an nginx file without comments, trimmed, non-empty.
fn code_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The deploy site as shipped, with only its certificate and log paths
/// pointed into `dir`: what `nginx -t` checks, listen ports, server names
/// and upstream addresses included.
fn site_as_shipped(template: &str, cert: &Path, key: &Path, dir: &Path) -> String {
    let mut out = String::new();
    for line in template.lines() {
        let t = line.trim_start();
        let indent = &line[..line.len() - t.len()];
        let replaced = if t.starts_with("ssl_certificate_key ") {
            format!("ssl_certificate_key {};", key.display())
        } else if t.starts_with("ssl_certificate ") {
            format!("ssl_certificate {};", cert.display())
        } else if t.starts_with("access_log ") {
            format!("access_log {};", dir.join("site.access.log").display())
        } else if t.starts_with("error_log ") {
            format!("error_log {};", dir.join("site.error.log").display())
        } else {
            t.to_owned()
        };
        out.push_str(indent);
        out.push_str(&replaced);
        out.push('\n');
    }
    out
}

/// `nginx -t` on `template` as shipped ([`site_as_shipped`]) inside a minimal
/// main configuration: `Err` with nginx's words when it does not pass.
fn check_site(template: &str) -> Result<(), String> {
    let nginx = find_binary("nginx", "apt-get install nginx");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = test_certificate(dir.path());
    let site = site_as_shipped(template, &cert, &key, dir.path());
    std::fs::write(dir.path().join("site.conf"), site).unwrap();
    let conf = write_main_conf(dir.path(), false);
    let out = Command::new(nginx)
        .arg("-t")
        .arg("-p")
        .arg(format!("{}/", dir.path().display()))
        .arg("-e")
        .arg(dir.path().join("error.log"))
        .arg("-c")
        .arg(&conf)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(said)
    }
}

#[test]
fn both_shipped_sites_pass_nginx_t() {
    for name in ["codex-bridge.nginx.conf", SITE] {
        if let Err(said) = check_site(&deploy_file(name)) {
            panic!("deploy/{name} does not pass nginx -t:\n{said}");
        }
    }
    // The check does fail on a broken site.
    let broken = deploy_file(SITE).replace("proxy_buffering off;", "proxy_buffering of;");
    let said = check_site(&broken).expect_err("a broken site passed nginx -t");
    assert!(said.contains("proxy_buffering"), "{said}");
}

/// What the file must say that a live test cannot show quickly: passive
/// health on every server, no affinity, retries only on connection failures
/// (never `non_idempotent`), and every setting of the single-instance site.
#[test]
fn the_instances_site_keeps_the_single_site_and_retries_only_unsent_requests() {
    let site = deploy_file(SITE);
    let code = code_lines(&site);
    let servers: Vec<&String> = code
        .iter()
        .filter(|l| l.starts_with("server ") && !l.ends_with('{'))
        .collect();
    assert!(servers.len() >= 2, "{servers:?}");
    for s in &servers {
        assert!(
            s.contains(" max_fails=") && s.contains(" fail_timeout="),
            "{s}"
        );
    }
    for affinity in ["ip_hash", "hash ", "sticky"] {
        assert!(!code.iter().any(|l| l.starts_with(affinity)), "{affinity}");
    }
    let retries: Vec<&String> = code
        .iter()
        .filter(|l| l.starts_with("proxy_next_upstream"))
        .collect();
    assert_eq!(retries, ["proxy_next_upstream error timeout;"]);
    assert!(!code.iter().any(|l| l.contains("non_idempotent")));
    let events = site
        .split("location /api/gitea-workflow/events {")
        .nth(1)
        .and_then(|s| s.split('}').next())
        .expect("a location for the event stream");
    assert!(events.contains("proxy_buffering off;"), "{events}");
    assert!(events.contains("proxy_read_timeout 1h;"), "{events}");
    // Everything the single-instance site says, this one says too (its one
    // upstream address aside): body limit, headers, timeouts, locations.
    for line in code_lines(&site_template()) {
        if line.starts_with("server ") && !line.ends_with('{') {
            continue;
        }
        assert!(code.contains(&line), "the instances site lacks `{line}`");
    }
}

/// A signed comment webhook through nginx's plain-HTTP site; its answer.
fn webhook(nginx: &Nginx, delivery: &str, comment_id: i64) -> RawReply {
    let (headers, body) = signed_webhook(delivery, comment_id, 8192);
    nginx.http_request("POST", WEBHOOK, &headers, &body)
}

#[test]
fn two_instances_behind_the_site_share_webhooks_the_admin_view_and_the_event_stream() {
    let a = TestApp::builder()
        .postgres()
        .env("CODEX_BRIDGE_MAX_BODY_BYTES", &LIMIT.to_string())
        .env("CODEX_BRIDGE_TRUSTED_PROXIES", Nginx::PROXY_ADDR)
        .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
        .start();
    let mut b = a.another_instance();
    let nginx = Nginx::start_site(&deploy_file(SITE), &[&upstream(&a), &upstream(&b)], LIMIT);

    // Webhooks go to both instances, and each is accepted once.
    for n in 0..6 {
        let r = webhook(&nginx, &format!("spread-{n}"), 9300 + n);
        assert_eq!(r.status, 202, "{} / {}", r.text(), nginx.error_log());
    }
    let served = |s: &TestApp| request_lines(&s.logs(), WEBHOOK);
    wait_until(
        "both logs to show the webhooks",
        Duration::from_secs(10),
        || served(&a).len() + served(&b).len() == 6,
    );
    let (on_a, on_b) = (served(&a), served(&b));
    assert!(
        !on_a.is_empty() && !on_b.is_empty(),
        "one instance got every webhook: {} on A, {} on B",
        on_a.len(),
        on_b.len()
    );
    for line in on_a.iter().chain(&on_b) {
        assert!(
            line.contains(&format!("peer_ip={} ", Nginx::PROXY_ADDR))
                && line.contains("status=202"),
            "{line}"
        );
    }
    assert_eq!(count(&mut a.db(), "webhook_deliveries"), 6);

    // Either instance answers the admin view, and it lists both.
    for _ in 0..2 {
        let listed = instances(&nginx);
        for s in [&a, &b] {
            let row = row_of(&listed, s.pid()).unwrap_or_else(|| panic!("{listed:?}"));
            assert_eq!(
                (&row["alive"], &row["draining"]),
                (&json!(true), &json!(false))
            );
        }
    }

    // The live stream, from whichever instance nginx picked, shows the tasks
    // of both, each within moments: nothing is held in nginx's buffers (the
    // stream's own instance wakes on its commit, the other's work shows on
    // its next look, at most 2 s later).
    let stream = EventStream::open(&nginx, ADMIN_TOKEN);
    stream.next("overview", Duration::from_secs(5));
    let mut sent = Vec::new();
    for n in 0..2 {
        let when = Instant::now();
        let r = webhook(&nginx, &format!("live-{n}"), 9400 + n);
        assert_eq!(r.status, 202, "{}", r.text());
        sent.push((when, r.json()["taskId"].as_str().unwrap().to_owned()));
    }
    let mut seen = Vec::new();
    while seen.len() < sent.len() {
        let (at, event) = stream.next("task", Duration::from_secs(10));
        let task = event["taskId"].as_str().unwrap().to_owned();
        if seen.contains(&task) {
            continue;
        }
        if let Some((when, _)) = sent.iter().find(|(_, t)| *t == task) {
            assert!(
                at.duration_since(*when) < Duration::from_secs(5),
                "task {task} reached the stream {:?} after its webhook",
                at.duration_since(*when)
            );
            seen.push(task);
        }
    }
    drop(stream);

    // A rolling restart's step: B is drained through the site, holds no
    // lease, and stops; the site then sends every webhook to A.
    let b_row = row_of(&instances(&nginx), b.pid()).unwrap();
    let b_id = b_row["serverId"].as_str().unwrap().to_owned();
    let r = nginx.http_request(
        "POST",
        &format!("/api/gitea-workflow/instances/{b_id}/drain"),
        &[
            bearer(),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ],
        json!({"requestId": "drain-b", "reason": "rolling restart"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    wait_until(
        "B to show draining with no lease",
        Duration::from_secs(10),
        || {
            row_of(&instances(&nginx), b.pid())
                .is_some_and(|r| r["draining"] == true && r["leases"] == 0)
        },
    );
    let b_pid = b.pid();
    b.stop();
    let before = served(&a).len();
    for n in 0..4 {
        let r = webhook(&nginx, &format!("after-stop-{n}"), 9500 + n);
        assert_eq!(r.status, 202, "{} / {}", r.text(), nginx.error_log());
    }
    wait_until("A to log the webhooks", Duration::from_secs(10), || {
        served(&a).len() == before + 4
    });
    assert_eq!(count(&mut a.db(), "webhook_deliveries"), 12);
    let gone = row_of(&instances(&nginx), b_pid).expect("B is still listed");
    assert!(gone["stoppedAt"].is_string(), "{gone}");
}

/// A stand-in instance that reads each request whole and closes the
/// connection without an answer, as a process that died after it stored a
/// webhook would. It keeps the request lines it read.
struct Swallower {
    addr: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Swallower {
    fn start() -> Swallower {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { break };
                let mut got = Vec::new();
                let mut buf = [0u8; 8192];
                // Until the head and Content-Length bytes of body are in.
                loop {
                    let whole = got.windows(4).position(|w| w == b"\r\n\r\n").map(|end| {
                        let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        got.len() >= end + 4 + length
                    });
                    if whole == Some(true) {
                        break;
                    }
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&got);
                if let Some(line) = text.lines().next().filter(|l| !l.is_empty()) {
                    record.lock().unwrap().push(line.to_owned());
                }
            }
        });
        Swallower { addr, seen }
    }

    fn saw(&self, method: &str) -> usize {
        let prefix = format!("{method} ");
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with(&prefix))
            .count()
    }
}

#[test]
fn a_webhook_an_instance_received_is_never_sent_to_another() {
    let swallower = Swallower::start();
    let s = TestApp::builder()
        .env("CODEX_BRIDGE_MAX_BODY_BYTES", &LIMIT.to_string())
        .env("CODEX_BRIDGE_TRUSTED_PROXIES", Nginx::PROXY_ADDR)
        .start();
    let nginx = Nginx::start_site(
        &deploy_file(SITE),
        &[swallower.addr.as_str(), &upstream(&s)],
        LIMIT,
    );
    // Round robin sends one of the first requests to the swallower. Its
    // webhook fails (502) and goes nowhere else; the others are accepted.
    let mut answered = Vec::new();
    for n in 0..4 {
        if swallower.saw("POST") > 0 {
            break;
        }
        let delivery = format!("once-{n}");
        let r = webhook(&nginx, &delivery, 9600 + n);
        answered.push((delivery, r.status));
    }
    let failed: Vec<&String> = answered
        .iter()
        .filter(|(_, status)| *status == 502)
        .map(|(d, _)| d)
        .collect();
    assert_eq!(
        (failed.len(), swallower.saw("POST")),
        (1, 1),
        "one webhook read by the swallower, and answered 502, not sent on: {answered:?} / {}",
        nginx.error_log()
    );
    assert!(
        answered
            .iter()
            .all(|(_, status)| [202, 502].contains(status)),
        "{answered:?}"
    );
    let accepted = answered.len() - 1;
    wait_until(
        "the server to log the webhooks",
        Duration::from_secs(10),
        || request_lines(&s.logs(), WEBHOOK).len() == accepted,
    );
    let mut c = s.db();
    assert_eq!(count(&mut c, "webhook_deliveries"), accepted as i64);
    assert_eq!(
        count_where(
            &mut c,
            "webhook_deliveries",
            &format!("delivery_id = '{}'", failed[0])
        ),
        0,
        "the webhook the swallower took reached the server too"
    );

    // A GET, which may safely run twice, does go on to the next instance.
    for _ in 0..4 {
        if swallower.saw("GET") > 0 {
            break;
        }
        let r = nginx.http_request("GET", "/healthz", &[], b"");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(swallower.saw("GET"), 1, "{}", nginx.error_log());
}
