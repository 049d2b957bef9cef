//! The overview's charts: the store's series over known rows on both backends
//! (counts per minute, the queue's depth with overlapping tasks, turn
//! duration percentiles, tokens per repository per day), and the admin API
//! `GET /stats` (its shape, the bounds of `hours`, the admin auth).

use crate::support::*;
use crate::testapp::*;
use codex_bridge::store::run_migrations;
use codex_bridge::store::stats::{self, Hours};
use codex_bridge::store::DbConn;
use serde_json::{json, Value};

/// Rows of the store written as they are, at the times a test names.
pub struct Rows<'a>(pub &'a mut DbConn);

impl Rows<'_> {
    fn sql(&mut self, sql: &str) {
        exec(self.0, sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// A repository `default:<owner>/<name>` and its Issue 1.
    pub fn repo(&mut self, owner: &str, name: &str) -> String {
        let key = format!("default:{owner}/{name}");
        let q = |s: &str| s.replace('\'', "''");
        self.sql(&format!(
            "INSERT INTO repositories (repo_key, instance_id, owner, name, registered_at, updated_at) \
             VALUES ('{k}', 'default', '{o}', '{n}', '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z')",
            k = q(&key),
            o = q(owner),
            n = q(name)
        ));
        self.sql(&format!(
            "INSERT INTO sessions (session_key, repo_key, kind, number, created_at, updated_at) \
             VALUES ('{k}:issue:1', '{k}', 'issue', 1, '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z')",
            k = q(&key)
        ));
        key
    }

    /// A delivery received at `at` with `status`.
    pub fn delivery(&mut self, key: &str, status: &str, at: &str) {
        self.sql(&format!(
            "INSERT INTO webhook_deliveries (delivery_key, delivery_id, event_type, status, payload_hash, received_at) \
             VALUES ('{key}', '{key}', 'issue_comment', '{status}', 'h', '{at}')"
        ));
    }

    /// A task of `repo` in `state` now, whose history is `moves` (from, to,
    /// at), the first being its creation (from NULL).
    pub fn task(&mut self, task: &str, repo: &str, state: &str, moves: &[(&str, &str)]) {
        let q = |s: &str| s.replace('\'', "''");
        self.delivery(&format!("d-{task}"), "accepted", moves[0].1);
        self.sql(&format!(
            "INSERT INTO tasks (task_id, delivery_key, repo_key, session_key, resource_key, trigger_key, author, \
             state, state_version, created_at, updated_at) VALUES ('{task}', 'd-{task}', '{r}', '{r}:issue:1', \
             '{r}:issue:1', 'trigger-{task}', 'alice', '{state}', {v}, '{c}', '{c}')",
            r = q(repo),
            v = moves.len(),
            c = moves[0].1
        ));
        let mut from = "NULL".to_owned();
        for (i, (to, at)) in moves.iter().enumerate() {
            self.sql(&format!(
                "INSERT INTO task_transitions (task_id, from_state, to_state, state_version, actor, at) \
                 VALUES ('{task}', {from}, '{to}', {v}, 'test', '{at}')",
                v = i + 1
            ));
            from = format!("'{to}'");
        }
    }

    /// A turn of `task` from `started` to `completed` (still running without).
    pub fn turn(&mut self, turn: &str, task: &str, started: &str, completed: Option<&str>) {
        let (status, end) = match completed {
            Some(at) => ("completed", format!("'{at}'")),
            None => ("started", "NULL".to_owned()),
        };
        self.sql(&format!(
            "INSERT INTO turns (turn_id, task_id, thread_id, kind, status, event_seq, started_at, completed_at) \
             VALUES ('{turn}', '{task}', 'thr', 'normal', '{status}', 0, '{started}', {end})"
        ));
    }

    /// The turn's tokens: the thread's totals went from `start` to `start +
    /// used` (input, cached input, output; total = input + output), last
    /// reported at `at`.
    pub fn tokens(&mut self, turn: &str, used: (i64, i64, i64), at: &str) {
        let (i, c, o) = used;
        self.sql(&format!(
            "INSERT INTO turn_token_usage (turn_id, thread_id, start_input_tokens, start_cached_input_tokens, \
             start_output_tokens, start_reasoning_tokens, start_total_tokens, end_input_tokens, \
             end_cached_input_tokens, end_output_tokens, end_reasoning_tokens, end_total_tokens, updated_at) \
             VALUES ('{turn}', 'thr', 1000, 100, 10, 0, 1010, {ei}, {ec}, {eo}, 0, {et}, '{at}')",
            ei = 1000 + i,
            ec = 100 + c,
            eo = 10 + o,
            et = 1010 + i + o
        ));
    }
}

fn t(s: &str) -> String {
    format!("2026-06-01T{s}.000000Z")
}

/// Known rows, then the series of the 24 hours up to 12:00:30.
fn series_from_known_rows(c: &mut DbConn) {
    run_migrations(c).unwrap();
    let mut rows = Rows(c);
    let widgets = rows.repo("acme", "widgets");
    let tools = rows.repo("acme", "tools");
    // Deliveries: two accepted and a duplicate in 11:00, one in 11:30, one in
    // the last minute; one a day earlier is outside.
    rows.delivery("h1", "accepted", &t("11:00:10"));
    rows.delivery("h2", "duplicate", &t("11:00:20"));
    rows.delivery("h3", "accepted", &t("11:00:50"));
    rows.delivery("h4", "accepted", &t("11:30:00"));
    rows.delivery("h5", "ignored", "2026-05-31T11:00:00.000000Z");
    rows.delivery("h6", "recorded", &t("12:00:29"));
    // Overlapping stays in the queue: t4 from before the window to 10:30,
    // t1 10:00-10:05, t2 10:02-10:20, t3 from 10:03 on, t5 from 12:00:10 on.
    rows.task(
        "t1",
        &widgets,
        "succeeded",
        &[
            ("queued", &t("10:00:00")),
            ("leased", &t("10:05:00")),
            ("running", &t("10:05:01")),
            ("succeeded", &t("10:10:00")),
        ],
    );
    rows.task(
        "t2",
        &tools,
        "failed",
        &[
            ("queued", &t("10:02:00")),
            ("leased", &t("10:20:00")),
            ("running", &t("10:20:01")),
            ("failed", &t("11:00:30")),
        ],
    );
    rows.task("t3", &widgets, "queued", &[("queued", &t("10:03:00"))]);
    rows.task(
        "t4",
        &widgets,
        "cancelled",
        &[
            ("queued", "2026-05-30T09:00:00.000000Z"),
            ("cancelled", &t("10:30:00")),
        ],
    );
    rows.task("t5", &tools, "queued", &[("queued", &t("12:00:10"))]);
    // Turns: three end in the 10:00 hour (4 min, 10 s, 1 min), one runs,
    // one ended two days ago.
    rows.turn("a", "t1", &t("10:05:01"), Some(&t("10:09:01")));
    rows.turn("b", "t2", &t("10:20:00"), Some(&t("10:20:10")));
    rows.turn("c", "t2", &t("10:21:00"), Some(&t("10:22:00")));
    rows.turn("d", "t1", &t("11:59:00"), None);
    rows.turn(
        "e",
        "t2",
        "2026-05-30T08:00:00.000000Z",
        Some("2026-05-30T08:01:00.000000Z"),
    );
    rows.tokens("a", (120, 20, 30), &t("10:09:00"));
    rows.tokens("b", (5, 0, 5), "2026-05-31T23:59:59.000000Z");
    rows.tokens("c", (40, 10, 2), &t("10:22:00"));
    rows.tokens("e", (7, 7, 7), "2026-05-10T00:00:00.000000Z");

    let now = chrono::DateTime::parse_from_rfc3339("2026-06-01T12:00:30Z")
        .unwrap()
        .to_utc();
    let s = serde_json::to_value(stats::stats(c, now, Hours::DAY).unwrap()).unwrap();
    assert_eq!(s["from"], "2026-05-31T12:01:00Z");
    assert_eq!(s["to"], "2026-06-01T12:01:00Z");
    assert_eq!(s["bucketSecs"], 60);
    assert_eq!(
        s["webhooks"],
        json!([
            // The tasks' own deliveries (t1, t2, t3 and t5: t4's is before the window).
            {"t": "2026-06-01T10:00:00Z", "accepted": 1, "other": 0},
            {"t": "2026-06-01T10:02:00Z", "accepted": 1, "other": 0},
            {"t": "2026-06-01T10:03:00Z", "accepted": 1, "other": 0},
            {"t": "2026-06-01T11:00:00Z", "accepted": 2, "other": 1},
            {"t": "2026-06-01T11:30:00Z", "accepted": 1, "other": 0},
            {"t": "2026-06-01T12:00:00Z", "accepted": 1, "other": 1},
        ])
    );
    assert_eq!(
        s["tasksFinished"],
        json!([
            {"t": "2026-06-01T10:10:00Z", "succeeded": 1, "failed": 0, "other": 0},
            {"t": "2026-06-01T10:30:00Z", "succeeded": 0, "failed": 0, "other": 1},
            {"t": "2026-06-01T11:00:00Z", "succeeded": 0, "failed": 1, "other": 0},
        ])
    );
    let depth: Vec<(String, i64)> = s["queueDepth"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["t"].as_str().unwrap().to_owned(),
                p["depth"].as_i64().unwrap(),
            )
        })
        .collect();
    let expect = |v: &[(&str, i64)]| -> Vec<(String, i64)> {
        v.iter().map(|(t, d)| (t.to_string(), *d)).collect()
    };
    assert_eq!(
        depth,
        expect(&[
            ("2026-05-31T12:01:00Z", 1),
            ("2026-06-01T10:00:00Z", 2),
            ("2026-06-01T10:02:00Z", 3),
            ("2026-06-01T10:03:00Z", 4),
            ("2026-06-01T10:05:00Z", 3),
            ("2026-06-01T10:20:00Z", 2),
            ("2026-06-01T10:30:00Z", 1),
            ("2026-06-01T12:00:00Z", 2),
        ])
    );
    assert_eq!(
        s["turnDuration"],
        json!([{"t": "2026-06-01T10:00:00Z", "p50Ms": 60000, "p90Ms": 240000, "p99Ms": 240000, "count": 3}])
    );
    assert_eq!(
        s["tokensByRepoDay"],
        json!([
            {"day": "2026-05-31", "repo": "default:acme/tools", "input": 5, "cachedInput": 0, "output": 5, "reasoning": 0, "total": 10},
            {"day": "2026-06-01", "repo": "default:acme/tools", "input": 40, "cachedInput": 10, "output": 2, "reasoning": 0, "total": 42},
            {"day": "2026-06-01", "repo": "default:acme/widgets", "input": 120, "cachedInput": 20, "output": 30, "reasoning": 0, "total": 150},
        ])
    );

    // A week: 10-minute buckets, the same totals.
    let week = stats::stats(c, now, Hours::new(168).unwrap()).unwrap();
    assert_eq!(week.bucket_secs, 600);
    let accepted: i64 = week.webhooks.iter().map(|w| w.accepted + w.other).sum();
    assert_eq!(
        accepted, 11,
        "every delivery of the week: {:?}",
        week.webhooks
    );
    assert_eq!(week.queue_depth.first().map(|p| p.depth), Some(0));
}

#[test]
fn chart_series_from_known_rows_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = connect(&format!("sqlite://{}", dir.path().join("t.db").display()));
    series_from_known_rows(&mut c);
}

#[test]
fn chart_series_from_known_rows_postgres() {
    let db = PgDb::create();
    series_from_known_rows(&mut connect(&db.url));
}

#[test]
fn stats_api_needs_admin_bounds_hours_and_counts_a_webhook() {
    let s = TestApp::start(Db::Sqlite);
    assert_eq!(s.get("/api/gitea-workflow/stats", None).status, 401);
    assert_eq!(
        s.get("/api/gitea-workflow/stats", Some("not-the-token"))
            .status,
        401
    );
    for bad in ["0", "169", "abc", "-3", "1.5"] {
        let r = s.admin_get(&format!("/api/gitea-workflow/stats?hours={bad}"));
        assert_eq!(r.status, 400, "{bad}: {:?}", r.json);
        assert_eq!(r.json["code"], "invalid_hours");
        assert!(
            r.json["message"].as_str().unwrap().contains("1 to 168"),
            "{:?}",
            r.json
        );
    }
    let empty = s.admin_get("/api/gitea-workflow/stats");
    assert_eq!(empty.status, 200, "{:?}", empty.json);
    for key in [
        "from",
        "to",
        "bucketSecs",
        "webhooks",
        "tasksFinished",
        "queueDepth",
        "turnDuration",
        "tokensByRepoDay",
    ] {
        assert!(empty.json.get(key).is_some(), "{key} in {:?}", empty.json);
    }
    assert_eq!(empty.json["webhooks"], json!([]));
    let r = s.comment("st-1", 1, "@ccbot hello", "widgets", 1);
    assert_eq!(r.status, 202, "{:?}", r.json);
    let after = s.admin_get("/api/gitea-workflow/stats?hours=48").json;
    assert_eq!(after["bucketSecs"], 120);
    let hooks: &Vec<Value> = after["webhooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["accepted"], 1);
    let depth = after["queueDepth"].as_array().unwrap();
    assert_eq!(depth.last().unwrap()["depth"], 1, "{depth:?}");
}

/// Each of the charts' queries (as the store writes them) reads a time range
/// through an index, never the whole table: the history grows without end.
#[test]
fn chart_queries_use_the_time_indexes_sqlite() {
    use crate::migrations::{migrated_sqlite, query_plan};
    let dir = tempfile::tempdir().unwrap();
    let mut c = migrated_sqlite(&dir);
    let (from, to) = (
        "'2026-06-01T00:00:00.000000Z'",
        "'2026-06-02T00:00:00.000000Z'",
    );
    for (index, table, query) in [
        (
            "webhook_deliveries_received",
            "webhook_deliveries",
            format!(
                "SELECT substr(received_at, 1, 16), status, COUNT(*) FROM webhook_deliveries \
                 WHERE received_at >= {from} AND received_at < {to} \
                 GROUP BY substr(received_at, 1, 16), status"
            ),
        ),
        (
            "task_transitions_at",
            "task_transitions",
            format!(
                "SELECT substr(at, 1, 16), from_state, to_state, COUNT(*) FROM task_transitions \
                 WHERE at >= {from} AND (to_state IN ('succeeded', 'failed', 'cancelled') \
                 OR to_state = 'queued' OR from_state = 'queued') \
                 GROUP BY substr(at, 1, 16), from_state, to_state"
            ),
        ),
        (
            "turns_completed",
            "turns",
            format!(
                "SELECT started_at, completed_at FROM turns \
                 WHERE completed_at >= {from} AND completed_at < {to}"
            ),
        ),
        (
            "turn_token_usage_updated",
            "turn_token_usage",
            format!(
                "SELECT u.updated_at, tasks.repo_key, u.start_total_tokens, u.end_total_tokens \
                 FROM turn_token_usage u INNER JOIN turns ON turns.turn_id = u.turn_id \
                 INNER JOIN tasks ON tasks.task_id = turns.task_id \
                 WHERE u.updated_at >= {from} AND u.updated_at < {to}"
            ),
        ),
    ] {
        let plan = query_plan(&mut c, &query);
        assert!(
            plan.iter().any(|d| d.contains(&format!("INDEX {index}"))),
            "{table}: {plan:?}"
        );
        assert!(
            !plan
                .iter()
                .any(|d| d.starts_with("SCAN") && !d.contains("INDEX")),
            "{table}: {plan:?}"
        );
    }
}
