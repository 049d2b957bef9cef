//! A server that runs turns but cannot check who may trigger them or verify
//! the replies (no Gitea client) takes every webhook, starts nothing, and says
//! why in `/readyz`, the actor tree and the admin overview. (A Codex that
//! cannot run does the same: `codex_availability.rs`.)

use crate::support::*;
use crate::testapp::*;
use serde_json::{json, Value};

#[test]
fn without_gitea_a_codex_server_accepts_mentions_and_keeps_them_queued() {
    let s = TestApp::builder()
        .codex()
        .without_gitea()
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .start();

    let r = s.comment("fc-1", 9101, "@ccbot please fix the parser", "widgets", 4);
    assert_eq!(r.status, 202, "{:?}", r.json);
    let task = r.json["taskId"].as_str().unwrap().to_owned();

    // The repository actor is started by this task's commit, so every pass it
    // finishes comes after the commit and would have leased the task: wait for
    // two, and for a sweep that counted the task as waiting (`queueDepth`
    // counts `queued` and `retry_wait`: the history below tells them apart).
    let repo = |s: &TestApp| -> Value {
        let tree = s.admin_get("/api/gitea-workflow/actors");
        assert_eq!(tree.status, 200);
        tree.json["repositories"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["repoKey"] == "default:acme/widgets")
            .cloned()
            .unwrap_or(Value::Null)
    };
    s.wait_for("two scheduling passes over the queued task", || {
        let r = repo(&s);
        r["passes"].as_u64().unwrap_or(0) >= 2 && r["queueDepth"] == 1
    });
    let mut db = s.db();
    let history: Vec<String> = codex_bridge::store::tasks::history(&mut db, &task.parse().unwrap())
        .unwrap()
        .into_iter()
        .map(|t| t.to_state.to_string())
        .collect();
    assert_eq!(history, ["queued"], "the task never left the queue");
    assert_eq!(
        count_where(&mut db, "attempts", &format!("task_id = '{task}'")),
        0
    );
    assert_eq!(count(&mut db, "leases"), 0);
    let r = repo(&s);
    assert_eq!(r["status"], "held", "{r}");
    assert_eq!(r["leaseHolder"], Value::Null, "{r}");

    let tree = s.admin_get("/api/gitea-workflow/actors");
    assert_eq!(
        tree.json["registry"]["held"][0]["code"],
        "gitea_not_configured"
    );

    // The binary is there: once its app-server has started, Gitea alone
    // makes the server degraded.
    s.wait_for("the codex app-server started", || {
        s.get("/readyz", None).json["codex"] == json!({"state": "ok"})
    });
    let ready = s.get("/readyz", None);
    assert_eq!(ready.status, 200, "intake goes on: {:?}", ready.json);
    assert_eq!(ready.json["status"], "degraded");
    assert_eq!(ready.json["store"], json!({"state": "ok"}));
    assert_eq!(ready.json["gitea"]["state"], "not_configured");
    let reason = ready.json["gitea"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("gitea_url") && reason.contains("gitea_token"),
        "{reason}"
    );
    let action = ready.json["gitea"]["action"].as_str().unwrap();
    assert!(action.contains("gitea_token"), "{action}");
    assert_eq!(ready.json["codexAccount"], json!({"state": "not_required"}));

    let overview = s.admin_get("/api/gitea-workflow/overview");
    assert_eq!(overview.status, 200);
    let blockers = overview.json["blockers"].as_array().unwrap();
    assert_eq!(blockers.len(), 1, "{blockers:?}");
    assert_eq!(blockers[0]["code"], "gitea_not_configured");
    assert_eq!(blockers[0]["message"], reason);
    assert_eq!(blockers[0]["action"], action);
    assert_eq!(overview.json["queueDepth"], 1);
}

/// `app::run` in this process with everything configured: `/readyz` says
/// ready, and a webhook's task runs through the actors, the workspace clone
/// and the scripted runtime to `succeeded`.
#[test]
fn in_process_a_configured_server_is_ready_and_runs_a_task() {
    let s = TestApp::builder()
        .in_process()
        .git_sim()
        .scripted()
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .start();
    s.git().create_repo("acme", "widgets");
    let ready = s.get("/readyz", None);
    assert_eq!(ready.status, 200, "{:?}", ready.json);
    assert_eq!(ready.json["status"], "ready", "{:?}", ready.json);
    let task = s.task_comment("inproc-run-1", 9201, "@ccbot run in process", "widgets", 5);
    wait_task_state(
        &s.db_url,
        &task,
        "succeeded",
        std::time::Duration::from_secs(30),
    );
    let tree = s.admin_get("/api/gitea-workflow/actors");
    assert_eq!(
        tree.json["registry"]["runtime"], "scripted",
        "{:?}",
        tree.json
    );
}
