//! Retention on the real server's store: deliveries no task was made from
//! expire after `delivery_retention_days`, what dedups Gitea's replays
//! stays (a replay after the pass is still a duplicate), the catch-up's
//! deliveries stay, ended turns' events are compacted after
//! `turn_event_retention_days`, audit events stay and are exported by
//! `codex-bridge audit export`.
//!
//! The passes run in this process on the server's database, at a `now`
//! days ahead: the server's own worker runs on the real clock and finds
//! nothing that old.

use crate::giteasim::GiteaSim;
use crate::support::{connect, count_where, exec, BOT};
use crate::testapp::{Db, TestApp};
use chrono::{Duration as Days, Utc};
use codex_bridge::config::DatabaseUrl;
use codex_bridge::domain::retention::Policy;
use codex_bridge::jobs::retention::{Removed, RetentionWorker};
use codex_bridge::store::{Store, StoreSettings, WriterSettings};
use std::time::Duration;

fn store(url: &str) -> Store {
    Store::open(&StoreSettings {
        url: DatabaseUrl::parse(url).unwrap(),
        read_pool_size: 2,
        sqlite_busy_timeout: Duration::from_secs(5),
        writer: WriterSettings {
            batch_max: 64,
            threads: 1,
            queue_capacity: 256,
            ingest: Default::default(),
        },
    })
    .unwrap()
}

fn pass(url: &str, days_ahead: i64) -> Removed {
    let url = url.to_owned();
    actix::System::new().block_on(async move {
        let worker = RetentionWorker {
            store: store(&url),
            policy: Policy {
                delivery_days: 30,
                turn_event_days: 7,
            },
        };
        worker
            .pass(Utc::now() + Days::days(days_ahead))
            .await
            .unwrap()
    })
}

/// Gitea's answer to a delivery, once it was made.
fn answer(sim: &GiteaSim, id: &str) -> (u16, serde_json::Value) {
    sim.wait_idle();
    let d = sim
        .deliveries()
        .into_iter()
        .find(|d| d.id == id)
        .expect("the delivery");
    (
        d.status.unwrap_or(0),
        serde_json::from_str(&d.response_body).unwrap_or_default(),
    )
}

fn delivery_of(sim: &GiteaSim, comment: &serde_json::Value) -> String {
    sim.wait_idle();
    sim.deliveries()
        .into_iter()
        .find(|d| d.json()["comment"]["id"] == comment["id"])
        .expect("the comment's delivery")
        .id
}

/// The `seq` of every audit event.
fn audit_seqs(url: &str) -> std::collections::BTreeSet<i64> {
    let filter = codex_bridge::store::audit::AuditFilter {
        limit: 100_000,
        ..Default::default()
    };
    codex_bridge::store::audit::list(&mut connect(url), &filter)
        .unwrap()
        .into_iter()
        .map(|e| e.seq)
        .collect()
}

fn retention(db: Db) {
    let (sim, issue) = GiteaSim::widgets_with_bob("Flaky", "It fails.");
    let app = TestApp::builder()
        .db(db)
        .scripted()
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .start_with_gitea(sim);
    let sim = app.gitea();
    let url = app.db_url.clone();
    let count = |table: &str, clause: &str| count_where(&mut connect(&url), table, clause);

    // A mention that runs to its reply, a plain comment, Gitea's replays of
    // both, one bad signature, and a catch-up delivery.
    let mention = sim.post_comment_as("bob", "acme", "widgets", issue, &format!("@{BOT} fix it"));
    let mention_delivery = delivery_of(sim, &mention);
    let (status, body) = answer(sim, &mention_delivery);
    assert_eq!(status, 202, "{body}");
    let task = body["taskId"].as_str().unwrap().to_owned();
    app.wait_for("the mention's task to succeed", || {
        count(
            "tasks",
            &format!("task_id = '{task}' AND state = 'succeeded'"),
        ) == 1
    });
    let turn_events = || {
        count(
            "turn_events",
            &format!("turn_id IN (SELECT turn_id FROM turns WHERE task_id = '{task}')"),
        )
    };
    let events_before = turn_events();
    assert!(events_before > 0, "the turn stored no events");
    let note = sim.post_comment_as("bob", "acme", "widgets", issue, "just a note");
    let note_delivery = delivery_of(sim, &note);
    assert_eq!(answer(sim, &note_delivery).0, 200);
    let replay = sim.redeliver(&note_delivery);
    assert_eq!(answer(sim, &replay).0, 200);
    let replay_of_mention = sim.redeliver(&mention_delivery);
    let (status, body) = answer(sim, &replay_of_mention);
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("duplicate")),
        "{body}"
    );
    let mut headers =
        crate::support::gitea_headers("forged", "issue_comment", "issue_comment", b"{}");
    for (k, v) in headers.iter_mut() {
        if k == "X-Gitea-Signature" {
            *v = "0".repeat(64);
        } else if k == "X-Hub-Signature-256" {
            *v = format!("sha256={}", "0".repeat(64));
        }
    }
    assert_eq!(app.webhook(&headers, b"{}").status, 401);
    app.wait_for("the refusal to be counted", || {
        count("refusal_counts", "1 = 1") > 0
    });
    exec(
        &mut connect(&url),
        &format!(
            "INSERT INTO webhook_deliveries (delivery_key, delivery_id, event_type, status, \
             reason, repo_key, payload_hash, received_at) VALUES ('default:catchup:424242', \
             'catchup:424242', 'issue_comment', 'rejected', 'outbox_full', 'default:acme/widgets', \
             'h', '{}')",
            codex_bridge::store::now()
        ),
    )
    .unwrap();
    // A process that stopped cleanly today.
    exec(
        &mut connect(&url),
        &format!(
            "INSERT INTO server_instances (server_id, instance_id, version, started_at, \
             heartbeat_at, draining, stopped_at) VALUES ('default:gone:1:ab', 'default', 'v', \
             '{now}', '{now}', FALSE, '{now}')",
            now = codex_bridge::store::now()
        ),
    )
    .unwrap();
    let deliveries = count("webhook_deliveries", "1 = 1");
    let audit_before = audit_seqs(&url);

    // Eight days on: only the ended turn's events go.
    let removed = pass(&url, 8);
    assert_eq!(removed.deliveries, 0);
    assert_eq!(removed.instances, 0);
    assert_eq!(
        count("server_instances", "server_id = 'default:gone:1:ab'"),
        1
    );
    assert_eq!(removed.refusal_counts, 0);
    assert_eq!(removed.turn_events, u64::try_from(events_before).unwrap());
    assert_eq!(turn_events(), 0);
    assert_eq!(
        count("turns", &format!("task_id = '{task}' AND event_seq > 0")),
        1,
        "the turn keeps its count of events"
    );
    assert_eq!(count("webhook_deliveries", "1 = 1"), deliveries);

    // Thirty-one days on: the plain comment's delivery, its replay and the
    // mention's replay go; the mention's own delivery (its task's) and the
    // catch-up's stay.
    let removed = pass(&url, 31);
    assert_eq!(removed.turn_events, 0);
    assert!(removed.refusal_counts > 0);
    assert_eq!(count("refusal_counts", "1 = 1"), 0);
    // The stopped process's row goes (the running one's looks a month
    // old to this pass too, and comes back with its next heartbeat).
    assert!(removed.instances >= 1);
    assert_eq!(
        count("server_instances", "server_id = 'default:gone:1:ab'"),
        0
    );
    let gone: Vec<&str> = vec![&note_delivery, &replay, &replay_of_mention];
    for id in &gone {
        assert_eq!(
            count("webhook_deliveries", &format!("delivery_id = '{id}'")),
            0,
            "{id} was kept"
        );
    }
    assert_eq!(removed.deliveries, u64::try_from(deliveries).unwrap() - 2);
    assert_eq!(
        count(
            "webhook_deliveries",
            &format!("delivery_id = '{mention_delivery}' AND task_id = '{task}'")
        ),
        1
    );
    assert_eq!(
        count("webhook_deliveries", "delivery_id = 'catchup:424242'"),
        1
    );

    // Audit events stay, and each pass that removed something left one.
    let audit_after = count("audit_events", "1 = 1");
    assert_eq!(
        count("audit_events", "action = 'retention.pruned'"),
        2,
        "one audit event per pass that removed rows"
    );
    assert!(audit_after >= i64::try_from(audit_before.len()).unwrap() + 2);
    let kept = audit_seqs(&url);
    assert!(
        audit_before.iter().all(|seq| kept.contains(seq)),
        "a retention pass removed audit events"
    );

    // Gitea replays the mention once more: still a duplicate of its task,
    // no second task, no second reply.
    let late = sim.redeliver(&mention_delivery);
    let (status, body) = answer(sim, &late);
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("duplicate")),
        "{body}"
    );
    assert_eq!(
        count("tasks", &format!("comment_id = {}", mention["id"])),
        1
    );
    let replies = sim
        .comments("acme", "widgets", issue)
        .into_iter()
        .filter(|c| c["user"]["login"] == BOT)
        .count();
    assert_eq!(replies, 1, "one reply to the mention");

    // The next pass lets go of that late replay alone; one after it finds
    // nothing and audits nothing.
    let removed = pass(&url, 31);
    assert_eq!((removed.deliveries, removed.turn_events), (1, 0));
    assert_eq!(
        count("webhook_deliveries", &format!("delivery_id = '{late}'")),
        0
    );
    assert_eq!(pass(&url, 31), Removed::default());
    assert_eq!(count("audit_events", "action = 'retention.pruned'"), 3);

    export(&app, count("audit_events", "1 = 1"));
}

/// `codex-bridge audit export`: every event once, in order, continued
/// from the last `seq`; an archive is never replaced.
fn export(app: &TestApp, events: i64) {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_codex-bridge"))
            .env("CODEX_BRIDGE_DATABASE_URL", &app.db_url)
            .args(args)
            .output()
            .unwrap()
    };
    let file = app.dir().join("audit-archive.jsonl");
    let out = run(&["audit", "export", "--out", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(i64::try_from(lines.len()).unwrap(), events);
    let seqs: Vec<i64> = lines.iter().map(|l| l["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in the order written");
    assert!(lines
        .iter()
        .all(|l| l["eventId"].is_string() && l["action"].is_string()));
    let last = seqs.last().unwrap().to_string();
    let hash = codex_bridge::store::sha256_hex(text.as_bytes());
    assert!(
        stderr.contains(&format!("exported {events} audit events; last seq {last}"))
            && stderr.contains(&hash),
        "{stderr}"
    );

    // Continued from the last seq: nothing new yet.
    let out = run(&["audit", "export", "--after-seq", &last]);
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    // An existing archive is never replaced.
    let out = run(&["audit", "export", "--out", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("never replaces"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    // A bad time is named.
    let out = run(&["audit", "export", "--since", "last tuesday"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--since must be an RFC 3339 time"));
}

#[test]
fn retention_on_sqlite_lets_go_of_what_no_replay_needs_and_keeps_the_audit_log() {
    retention(Db::Sqlite);
}

#[test]
fn retention_on_postgres_lets_go_of_what_no_replay_needs_and_keeps_the_audit_log() {
    retention(Db::Postgres);
}
