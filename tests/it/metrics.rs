//! `GET /metrics` on the real server: the Prometheus text format (read back
//! with `prometheus-parse`, plus the checks it leaves out), counters and
//! histograms that move with the traffic, gauges read from the store, the admin
//! token on the main listener and the open `metrics_listen` address.

use crate::support::*;
use crate::testapp::*;
use prometheus_parse::{LineInfo, Scrape, Value as Series};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Samples by `name{label="value",...}` (labels sorted); a histogram's buckets
/// as `name_bucket{...,le="..."}`.
pub type Samples = BTreeMap<String, f64>;

fn key(name: &str, labels: &prometheus_parse::Labels, le: Option<f64>) -> String {
    let mut pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    if let Some(le) = le {
        let le = if le.is_infinite() {
            "+Inf".to_owned()
        } else {
            le.to_string()
        };
        pairs.push(format!("le=\"{le}\""));
    }
    pairs.sort();
    if pairs.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{}}}", pairs.join(","))
    }
}

/// Reads the exposition with `prometheus-parse` and checks what that lenient
/// parser lets through but a dashboard would miss: a line it did not
/// understand (it skips those), a repeated series, a sample without HELP and
/// TYPE, a counter not named `_total`, histogram buckets that do not grow or
/// do not end in `+Inf` = `_count`. Panics naming the problem.
pub fn parse_exposition(text: &str) -> Samples {
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    let mut sample_lines = 0;
    for line in text.lines() {
        match LineInfo::parse(line) {
            LineInfo::Sample { .. } => sample_lines += 1,
            LineInfo::Ignored if !line.starts_with('#') => {
                panic!("not understood: {line:?}\n{text}")
            }
            _ => {}
        }
    }
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let histograms: BTreeSet<&str> = scrape
        .samples
        .iter()
        .filter(|s| matches!(s.value, Series::Histogram(_)))
        .map(|s| s.metric.as_str())
        .collect();
    let mut samples = Samples::new();
    let mut insert = |key: String, value: f64| {
        assert!(
            samples.insert(key.clone(), value).is_none(),
            "repeated series {key}\n{text}"
        );
    };
    for s in &scrape.samples {
        let family = match &s.value {
            Series::Counter(v) => {
                assert!(
                    s.metric.ends_with("_total"),
                    "a counter's name should end in _total: {}",
                    s.metric
                );
                insert(key(&s.metric, &s.labels, None), *v);
                s.metric.as_str()
            }
            Series::Gauge(v) => {
                insert(key(&s.metric, &s.labels, None), *v);
                s.metric.as_str()
            }
            Series::Histogram(buckets) => {
                assert!(
                    buckets
                        .windows(2)
                        .all(|w| w[0].less_than < w[1].less_than && w[0].count <= w[1].count),
                    "{}: buckets must grow in le and count\n{text}",
                    s.metric
                );
                let last = buckets.last().unwrap();
                assert!(
                    last.less_than.is_infinite(),
                    "{}: the last bucket is +Inf",
                    s.metric
                );
                let count = scrape
                    .samples
                    .iter()
                    .find(|c| c.metric == format!("{}_count", s.metric));
                assert_eq!(
                    count.map(|c| &c.value),
                    Some(&Series::Untyped(last.count)),
                    "{}: +Inf bucket equals _count",
                    s.metric
                );
                for b in buckets {
                    insert(
                        key(
                            &format!("{}_bucket", s.metric),
                            &s.labels,
                            Some(b.less_than),
                        ),
                        b.count,
                    );
                }
                s.metric.as_str()
            }
            // The parser types a histogram's `_sum` and `_count` as nothing.
            Series::Untyped(v) => {
                let family = ["_sum", "_count"]
                    .iter()
                    .find_map(|suffix| {
                        s.metric
                            .strip_suffix(suffix)
                            .filter(|f| histograms.contains(f))
                    })
                    .unwrap_or_else(|| panic!("a sample without TYPE: {}\n{text}", s.metric));
                insert(key(&s.metric, &s.labels, None), *v);
                family
            }
            Series::Summary(_) => panic!("no summaries here: {}", s.metric),
        };
        assert!(
            scrape.docs.contains_key(family),
            "a sample without HELP: {}\n{text}",
            s.metric
        );
    }
    // The parser skips a sample whose value it cannot read.
    assert_eq!(
        samples.len(),
        sample_lines,
        "every sample line was read\n{text}"
    );
    samples
}

pub fn scrape(url: &str, token: Option<&str>) -> Samples {
    let mut req = ureq::get(url);
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    let resp = req.call().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.header("Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    parse_exposition(&resp.into_string().unwrap())
}

pub fn get(samples: &Samples, key: &str) -> f64 {
    *samples
        .get(key)
        .unwrap_or_else(|| panic!("no sample {key} in {samples:#?}"))
}

#[test]
fn the_exposition_checks_refuse_what_a_dashboard_would_miss() {
    let ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 2\n\
              # HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n";
    let samples = parse_exposition(ok);
    assert_eq!(get(&samples, "a_total{x=\"1\"}"), 2.0);
    assert_eq!(get(&samples, "h_bucket{le=\"1\"}"), 1.0);
    assert_eq!(get(&samples, "h_count"), 2.0);
    for bad in [
        "a_total 1\n",                                  // no HELP/TYPE
        "# TYPE a gauge\na 1\n",                       // no HELP
        "# HELP a A.\n# TYPE a counter\na 2\n",         // counter without _total
        "# HELP a A.\n# TYPE a gauge\na one\n",         // value
        "# HELP a A.\n# TYPE a gauge\na 1\na 2\n",      // repeated series
        "# HELP a A.\n# TYPE a gauge\na{x=\"1\"}\n",   // no value
        "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
    ] {
        let r = std::panic::catch_unwind(|| parse_exposition(bad));
        assert!(r.is_err(), "accepted: {bad}");
    }
}

#[test]
fn metrics_need_the_admin_token_on_the_main_listener() {
    let s = TestApp::start(Db::Sqlite);
    assert_eq!(s.get("/metrics", None).status, 401);
    assert_eq!(
        s.get("/metrics", Some("not-the-admin-token-000")).status,
        401
    );
    let samples = scrape(&s.url("/metrics"), Some(ADMIN_TOKEN));
    assert_eq!(get(&samples, "codex_bridge_store_up"), 1.0);
    // No separate listener unless configured.
    assert!(!s.logs().contains("metrics on http://"));
}

#[test]
fn webhooks_move_the_counters_the_histogram_and_the_queue_gauge() {
    webhooks_move_the_metrics(Db::Sqlite);
}

/// Several writer threads: each counts its own commits.
#[test]
fn webhooks_move_the_counters_the_histogram_and_the_queue_gauge_postgres() {
    webhooks_move_the_metrics(Db::Postgres);
}

fn webhooks_move_the_metrics(db: Db) {
    let s = TestApp::builder()
        .db(db)
        .env("CODEX_BRIDGE_MAX_BODY_BYTES", "16384")
        .start();
    let before = scrape(&s.url("/metrics"), Some(ADMIN_TOKEN));
    let webhooks = |m: &Samples, outcome: &str| {
        get(
            m,
            &format!("codex_bridge_webhooks_total{{outcome=\"{outcome}\"}}"),
        )
    };
    let transitions = |m: &Samples, state: &str| {
        get(
            m,
            &format!("codex_bridge_task_transitions_total{{state=\"{state}\"}}"),
        )
    };
    for outcome in [
        "accepted",
        "duplicate",
        "bad_signature",
        "too_large",
        "bad_request",
    ] {
        assert_eq!(webhooks(&before, outcome), 0.0, "{outcome}");
    }
    assert_eq!(get(&before, "codex_bridge_queue_depth"), 0.0);

    let (body, headers) = fixture("issue_comment.created.issue.mention");
    assert_eq!(s.webhook(&headers, &body).status, 202);
    assert_eq!(s.webhook(&headers, &body).status, 200);
    let mut unsigned = headers.clone();
    unsigned.retain(|(k, _)| !k.contains("Signature"));
    assert_eq!(s.webhook(&unsigned, &body).status, 401);
    let big = vec![b' '; 20_000];
    assert_eq!(
        s.webhook(
            &gitea_headers("big-1", "issue_comment", "issue_comment", &big),
            &big
        )
        .status,
        413
    );
    let broken = b"{not json".to_vec();
    assert_eq!(
        s.webhook(
            &gitea_headers("broken-1", "issue_comment", "issue_comment", &broken),
            &broken
        )
        .status,
        400
    );

    let after = scrape(&s.url("/metrics"), Some(ADMIN_TOKEN));
    for outcome in [
        "accepted",
        "duplicate",
        "bad_signature",
        "too_large",
        "bad_request",
    ] {
        assert_eq!(
            webhooks(&after, outcome) - webhooks(&before, outcome),
            1.0,
            "{outcome}"
        );
    }
    let accept = "codex_bridge_webhook_accept_duration_seconds";
    assert_eq!(
        get(&after, &format!("{accept}_count")) - get(&before, &format!("{accept}_count")),
        5.0
    );
    assert!(get(&after, &format!("{accept}_sum")) > 0.0);
    // The writer's commits are measured: each carried at least one write,
    // took time and CPU, and on SQLite appended to the WAL and synced it.
    let moved = |name: &str| get(&after, name) - get(&before, name);
    assert!(moved("codex_bridge_store_commit_operations_count") >= 1.0);
    assert!(moved("codex_bridge_store_commit_operations_sum") >= 1.0);
    assert!(moved("codex_bridge_store_transaction_seconds_sum") > 0.0);
    assert!(moved("codex_bridge_store_writer_cpu_microseconds_total") > 0.0);
    if matches!(db, Db::Sqlite) {
        assert!(moved("codex_bridge_store_wal_sync_seconds_count") >= 1.0);
        assert!(moved("codex_bridge_store_wal_bytes_total") >= 4096.0);
    }
    // The accepted delivery's task was queued, committed (born `received`, it
    // has no transition into that state).
    assert_eq!(
        transitions(&after, "received") - transitions(&before, "received"),
        0.0
    );
    assert_eq!(
        transitions(&after, "queued") - transitions(&before, "queued"),
        1.0
    );
    assert_eq!(get(&after, "codex_bridge_queue_depth"), 1.0);
    assert_eq!(get(&after, "codex_bridge_tasks{state=\"queued\"}"), 1.0);
    assert_eq!(get(&after, "codex_bridge_running_turns"), 0.0);
    // Intake only: no actors, so no actor gauge; the restart counter exists.
    assert!(!after.keys().any(|k| k.starts_with("codex_bridge_actors{")));
    assert_eq!(
        get(
            &after,
            "codex_bridge_actor_restarts_total{kind=\"session\"}"
        ),
        0.0
    );
}

#[test]
fn metrics_listen_serves_metrics_without_a_token_on_its_own_address() {
    let s = TestApp::builder()
        .env("CODEX_BRIDGE_METRICS_LISTEN", "127.0.0.1:0")
        .start();
    s.wait_for("the metrics listener", || {
        s.logs().contains("codex-bridge metrics on http://")
    });
    let logs = s.logs();
    let base = logs
        .lines()
        .find_map(|l| l.strip_prefix("codex-bridge metrics on "))
        .unwrap()
        .to_owned();
    assert_ne!(base, s.base, "a separate address");
    let samples = scrape(&format!("{base}/metrics"), None);
    assert_eq!(
        get(&samples, "codex_bridge_build_info{version=\"0.1.0\"}"),
        1.0
    );
    assert_eq!(
        ureq::get(&format!("{base}/readyz"))
            .call()
            .unwrap()
            .status(),
        200
    );
    // Only metrics and health there: not the admin API, not the webhook.
    let admin = ureq::get(&format!("{base}/api/gitea-workflow/overview"))
        .set("Authorization", &format!("Bearer {ADMIN_TOKEN}"))
        .call();
    assert!(
        matches!(admin, Err(ureq::Error::Status(404, _))),
        "{admin:?}"
    );
    // The main listener still wants the token.
    assert_eq!(s.get("/metrics", None).status, 401);
}

#[test]
fn a_turn_moves_the_turn_histogram_the_verifications_and_the_actor_gauge() {
    let s = TestApp::builder()
        .git_sim()
        .scripted()
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .start();
    s.git().create_repo("acme", "widgets");
    let before = scrape(&s.url("/metrics"), Some(ADMIN_TOKEN));
    let task = s.task_comment("turn-1", 7001, "@ccbot [sleep:300] please", "widgets", 3);
    wait_task_state(&s.db_url, &task, "succeeded", Duration::from_secs(30));

    let after = scrape(&s.url("/metrics"), Some(ADMIN_TOKEN));
    let turn = "codex_bridge_turn_duration_seconds";
    assert_eq!(
        get(&after, &format!("{turn}_count")) - get(&before, &format!("{turn}_count")),
        1.0
    );
    assert!(get(&after, &format!("{turn}_sum")) >= 0.1);
    let settle = "codex_bridge_turn_settle_seconds";
    assert_eq!(
        get(&after, &format!("{settle}_count")) - get(&before, &format!("{settle}_count")),
        1.0
    );
    assert_eq!(
        get(
            &after,
            "codex_bridge_reply_verifications_total{outcome=\"confirmed\"}"
        ),
        1.0
    );
    for state in ["leased", "running", "verifying_reply", "succeeded"] {
        assert_eq!(
            get(
                &after,
                &format!("codex_bridge_task_transitions_total{{state=\"{state}\"}}")
            ),
            1.0,
            "{state}"
        );
    }
    assert_eq!(get(&after, "codex_bridge_turns_in_progress"), 0.0);
    assert_eq!(get(&after, "codex_bridge_tasks{state=\"succeeded\"}"), 1.0);
    assert_eq!(get(&after, "codex_bridge_actors{kind=\"repo\"}"), 1.0);
    assert!(get(&after, "codex_bridge_actors{kind=\"session\"}") <= 1.0);
}
