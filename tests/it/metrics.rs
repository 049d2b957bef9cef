//! `GET /metrics` on the real server: the Prometheus text format (checked by a
//! small parser), counters and histograms that move with the traffic, gauges
//! read from the store, the admin token on the main listener and the open
//! `metrics_listen` address.

use crate::gitsim::GitSim;
use crate::support::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Samples by `name{label="value",...}` (labels sorted).
type Samples = BTreeMap<String, f64>;

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

type Labels = Vec<(String, String)>;

/// Parses `{a="x",b="y"}` at the start of `s`; returns the labels and the rest.
fn parse_labels(s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    let mut rest = s.strip_prefix('{').ok_or("no {")?;
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !valid_name(name) || name.starts_with("__") {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value".into()),
            }
        };
        labels.push((name.to_owned(), value));
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err("expected , or } after a label".into());
        }
    }
}

/// Checks the whole exposition and returns its samples. Panics naming the line
/// on anything Prometheus would refuse, and on samples without HELP and TYPE.
fn parse_exposition(text: &str) -> Samples {
    let mut help = BTreeSet::new();
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Samples::new();
    let mut histograms: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    for line in text.lines() {
        let fail = |why: &str| -> ! { panic!("{why}: {line:?}\n{text}") };
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            if !valid_name(name) || !help.insert(name.to_owned()) {
                fail("bad or repeated HELP");
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap_or(""));
            if !valid_name(name)
                || !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind)
                || parts.next().is_some()
                || types.insert(name.to_owned(), kind.to_owned()).is_some()
            {
                fail("bad or repeated TYPE");
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or_else(|| fail("no value"));
        let name = &line[..name_end];
        if !valid_name(name) {
            fail("bad metric name");
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..]).unwrap_or_else(|e| fail(&e))
        } else {
            (Vec::new(), &line[name_end..])
        };
        let mut fields = rest.trim_start_matches(' ').split(' ');
        let value = fields
            .next()
            .and_then(parse_value)
            .unwrap_or_else(|| fail("bad value"));
        if let Some(ts) = fields.next() {
            ts.parse::<i64>().unwrap_or_else(|_| fail("bad timestamp"));
        }
        if !rest.starts_with(' ') || fields.next().is_some() {
            fail("bad sample layout");
        }
        // The family: a histogram's samples carry suffixes.
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|base| types.get(*base).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(name);
        if !help.contains(family) || !types.contains_key(family) {
            fail("sample before its HELP and TYPE");
        }
        if types[family] == "counter" && !name.ends_with("_total") {
            fail("a counter's name should end in _total");
        }
        if name.ends_with("_bucket") && family != name {
            let le = labels
                .iter()
                .find(|(k, _)| k == "le")
                .and_then(|(_, v)| parse_value(v))
                .unwrap_or_else(|| fail("bucket without le"));
            histograms
                .entry(family.to_owned())
                .or_default()
                .push((le, value));
        }
        let mut labels = labels;
        labels.sort();
        let key = if labels.is_empty() {
            name.to_owned()
        } else {
            let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            format!("{name}{{{}}}", inner.join(","))
        };
        if samples.insert(key.clone(), value).is_some() {
            fail("repeated series");
        }
    }
    for (family, buckets) in &histograms {
        assert!(
            buckets
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
            "{family}: buckets must grow in le and count"
        );
        let last = buckets.last().unwrap();
        assert!(last.0.is_infinite(), "{family}: the last bucket is +Inf");
        assert_eq!(
            Some(&last.1),
            samples.get(&format!("{family}_count")),
            "{family}: +Inf bucket equals _count"
        );
        assert!(
            samples.contains_key(&format!("{family}_sum")),
            "{family}_sum"
        );
    }
    samples
}

fn scrape(url: &str, token: Option<&str>) -> Samples {
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

fn get(samples: &Samples, key: &str) -> f64 {
    *samples
        .get(key)
        .unwrap_or_else(|| panic!("no sample {key} in {samples:#?}"))
}

#[test]
fn the_parser_refuses_what_prometheus_would() {
    let ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\\\"\"} 2\n";
    assert_eq!(get(&parse_exposition(ok), "a_total{x=\"1\"\"}"), 2.0);
    for bad in [
        "a_total 1\n",                                              // no HELP/TYPE
        "# HELP a A.\n# TYPE a gauge\na{x=1} 2\n",                  // unquoted
        "# HELP a A.\n# TYPE a gauge\na 2 3 4\n",                   // extra field
        "# HELP a A.\n# TYPE a counter\na 2\n",                     // counter without _total
        "# HELP a A.\n# TYPE a gauge\na one\n",                     // value
        "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
    ] {
        let r = std::panic::catch_unwind(|| parse_exposition(bad));
        assert!(r.is_err(), "accepted: {bad}");
    }
}

#[test]
fn metrics_need_the_admin_token_on_the_main_listener() {
    let s = TestServer::start(Db::Sqlite);
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
    let s = ServerBuilder::new(db)
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
    let s = ServerBuilder::new(Db::Sqlite)
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
    let sim = GitSim::start(Some(GITEA_TOKEN));
    sim.create_repo("acme", "widgets");
    let s = ServerBuilder::new(Db::Sqlite)
        .env("CODEX_BRIDGE_AGENT_RUNTIME", "scripted")
        .env("CODEX_BRIDGE_GITEA_URL", &sim.base_url())
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .start();
    let before = scrape(&s.url("/metrics"), Some(ADMIN_TOKEN));
    let mut v: Value = serde_json::from_slice(&comment_body(
        7001,
        "@ccbot [sleep:300] please",
        "widgets",
        3,
    ))
    .unwrap();
    v["repository"]["clone_url"] = sim.clone_url("acme", "widgets").into();
    v["repository"]["default_branch"] = "main".into();
    let body = serde_json::to_string_pretty(&v).unwrap().into_bytes();
    let r = s.webhook(
        &gitea_headers("turn-1", "issue_comment", "issue_comment", &body),
        &body,
    );
    assert_eq!(r.status, 202, "{:?}", r.json);
    let task = r.json["taskId"].as_str().unwrap().to_owned();
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
