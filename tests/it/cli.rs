//! The command line, run as the real binary: help, migrate, tasks, reconcile.

use crate::support::*;
use crate::testapp::*;
use codex_bridge::domain::TaskId;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::tasks::{self, TransitionOutcome, TransitionRequest};
use std::process::{Command, Output};

fn cli(db_url: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_codex-bridge"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CODEX_BRIDGE_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("CODEX_BRIDGE_DATABASE_URL", db_url)
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn every_command_has_help() {
    for args in [
        vec!["--help"],
        vec!["serve", "--help"],
        vec!["migrate", "--help"],
        vec!["tasks", "--help"],
        vec!["tasks", "list", "--help"],
        vec!["tasks", "show", "--help"],
        vec!["reconcile", "--help"],
    ] {
        let o = cli("sqlite://unused.db", &args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("Usage"),
            "{args:?}"
        );
    }
    let o = cli("sqlite://unused.db", &["reconcile", "--help"]);
    assert!(text(&o).contains("--confirm-no-active-turn"));
}

#[test]
fn bad_configuration_stops_with_the_key_named() {
    let o = Command::new(env!("CARGO_BIN_EXE_codex-bridge"))
        .env("CODEX_BRIDGE_LISTEN", "not-an-address")
        .env(
            "CODEX_BRIDGE_WEBHOOK_SECRET",
            "a-secret-that-is-long-enough",
        )
        .arg("serve")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("`listen`"), "{t}");
    assert!(!t.contains("a-secret-that-is-long-enough"), "{t}");
}

#[test]
fn migrate_then_list_and_show() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("db/cli.db").display());
    let o = cli(&url, &["tasks", "list"]);
    assert!(!o.status.success(), "an unmigrated database is refused");
    assert!(text(&o).contains("codex-bridge migrate"), "{}", text(&o));

    let o = cli(&url, &["migrate"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("applied migration"));
    let o = cli(&url, &["migrate"]);
    assert!(text(&o).contains("up to date"));

    let mut s = TestApp::builder().db_url(&url).start();
    let r = s.comment("cli-1", 77, "@ccbot list me", "widgets", 3);
    let task_id = r.json["taskId"].as_str().unwrap().to_owned();
    s.stop();

    let o = cli(&url, &["tasks", "list"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&task_id));
    let o = cli(&url, &["tasks", "list", "--state", "running", "--json"]);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap(),
        serde_json::json!([])
    );
    let o = cli(&url, &["tasks", "list", "--state", "nonsense"]);
    assert!(!o.status.success());
    // Pages are bounded and said to be: --limit 0 is refused, a short page
    // names its next cursor, --all prints every one.
    let mut s = TestApp::builder().db_url(&url).start();
    for i in 0..2 {
        s.comment(
            &format!("cli-p{i}"),
            78 + i,
            "@ccbot page me",
            "widgets",
            4 + i,
        );
    }
    s.stop();
    for bad in ["0", "501"] {
        let o = cli(&url, &["tasks", "list", "--limit", bad]);
        assert!(!o.status.success(), "--limit {bad}: {}", text(&o));
        assert!(text(&o).contains("--limit"), "{}", text(&o));
    }
    let page = |args: &[&str]| -> (Vec<String>, String) {
        let o = cli(&url, args);
        assert!(o.status.success(), "{}", text(&o));
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
        let ids = rows
            .iter()
            .map(|r| r["taskId"].as_str().unwrap().to_owned())
            .collect();
        (ids, String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (first, said) = page(&["tasks", "list", "--limit", "2", "--json"]);
    assert_eq!(first.len(), 2);
    let cursor = said
        .split("--cursor ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no next cursor said: {said:?}"))
        .to_owned();
    let (rest, said) = page(&[
        "tasks", "list", "--limit", "2", "--cursor", &cursor, "--json",
    ]);
    assert_eq!(rest, vec![task_id.clone()], "the oldest is the last page");
    assert!(
        !said.contains("--cursor"),
        "no page after the last: {said:?}"
    );
    let (all, _) = page(&["tasks", "list", "--limit", "1", "--all", "--json"]);
    assert_eq!(all.len(), 3);
    assert_eq!(all[..2], first[..]);

    let o = cli(&url, &["tasks", "show", &task_id]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["task"]["taskId"], task_id.as_str());
    assert_eq!(v["transitions"].as_array().unwrap().len(), 1);
    assert!(!cli(&url, &["tasks", "show", "task-missing"])
        .status
        .success());
}

fn make_uncertain(url: &str, task_id: &str) -> String {
    let task_id = &task_id.parse::<TaskId>().unwrap();
    let mut c = connect(url);
    c.write_transaction(|c| {
        let step = |c: &mut codex_bridge::store::DbConn, to| {
            let out = tasks::transition(
                c,
                &TransitionRequest {
                    task_id,
                    to,
                    expected_version: None,
                    actor: "test",
                    reason: Some("set up"),
                    error_code: None,
                },
            )?;
            assert!(matches!(out, TransitionOutcome::Applied { .. }), "{out:?}");
            Ok::<_, codex_bridge::store::StoreError>(())
        };
        step(c, TaskState::Leased)?;
        let attempt = codex_bridge::store::attempts::start_attempt(
            c,
            task_id,
            Some("lease-1"),
            Some("test"),
        )?;
        step(c, TaskState::Running)?;
        step(c, TaskState::NeedsReconciliation)?;
        Ok::<_, codex_bridge::store::StoreError>(attempt.attempt_id)
    })
    .unwrap()
}

#[test]
fn reconcile_needs_the_flag_the_right_attempt_and_an_uncertain_task() {
    let mut s = TestApp::start(Db::Sqlite);
    let url = s.db_url.clone();
    let uncertain = s.comment("rec-1", 1, "@ccbot one", "widgets", 1).json["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let queued = s.comment("rec-2", 2, "@ccbot two", "widgets", 2).json["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    s.stop();
    let attempt = make_uncertain(&url, &uncertain);

    let o = cli(&url, &["reconcile", &uncertain, &attempt, "failed"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--confirm-no-active-turn"),
        "{}",
        text(&o)
    );

    let o = cli(
        &url,
        &[
            "reconcile",
            &uncertain,
            "att-wrong",
            "failed",
            "--confirm-no-active-turn",
        ],
    );
    assert!(!o.status.success());
    assert!(
        text(&o).contains(&attempt),
        "names the real attempt: {}",
        text(&o)
    );

    let o = cli(
        &url,
        &[
            "reconcile",
            &queued,
            &attempt,
            "failed",
            "--confirm-no-active-turn",
        ],
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("needs_reconciliation"), "{}", text(&o));

    let o = cli(
        &url,
        &[
            "reconcile",
            &uncertain,
            &attempt,
            "failed",
            "--confirm-no-active-turn",
            "--reason",
            "checked the timeline",
            "--operator",
            "alice",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let event: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(event["action"], "task.reconciled");
    assert_eq!(event["actor"], "admin:alice");
    assert_eq!(event["metadata"]["attemptId"], attempt.as_str());

    let mut c = connect(&url);
    let t = tasks::find(&mut c, &uncertain.parse().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(t.state.as_str(), "failed");
    assert_eq!(t.error_code.as_deref(), Some("reconciled_failed"));
    assert_eq!(
        count_where(&mut c, "attempts", "outcome = 'reconciled_failed'"),
        1
    );
    // Nothing was re-run: no new attempt, no new turn.
    assert_eq!(count(&mut c, "attempts"), 1);
    assert_eq!(count(&mut c, "turns"), 0);

    // Once decided, it cannot be decided again.
    let o = cli(
        &url,
        &[
            "reconcile",
            &uncertain,
            &attempt,
            "succeeded",
            "--confirm-no-active-turn",
        ],
    );
    assert!(!o.status.success());
}
