//! Limits on what the agent may spend, through the whole server: the Gitea
//! simulator sends each comment's webhook, and the server refuses or stops
//! what is over a limit with one receipt that names it.

use crate::giteasim::{GiteaSim, Perm};
use crate::support::*;
use crate::testapp::*;
use serde_json::Value;

/// Bob's comment on the Issue; the webhook's answer.
fn comment(sim: &GiteaSim, issue: i64, text: &str) -> (u16, Value) {
    let c = sim.post_comment_as("bob", "acme", "widgets", issue, text);
    sim.wait_idle();
    let d = sim
        .deliveries()
        .into_iter()
        .find(|d| d.json()["comment"]["id"] == c["id"])
        .expect("the comment's delivery");
    let body = serde_json::from_str(&d.response_body).unwrap_or(Value::Null);
    (d.status.unwrap_or(0), body)
}

#[test]
fn a_commenter_past_the_hourly_limit_is_refused_at_intake_but_may_still_stop() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    sim.add_user("bob");
    sim.set_permission("acme", "widgets", "bob", Perm::Write);
    let issue = sim.create_issue("acme", "widgets", "Flaky", "It fails.", "bob");
    let other = sim.create_issue("acme", "widgets", "Docs", "Typos.", "bob");
    let app = TestApp::builder()
        .scripted()
        .env("CODEX_BRIDGE_USER_TRIGGERS_PER_HOUR", "2")
        .start_with_gitea(sim);
    let sim = app.gitea();

    // Two tasks an hour, across the repository's threads.
    assert_eq!(comment(sim, issue, "@ccbot fix the parser").0, 202);
    assert_eq!(comment(sim, other, "@ccbot fix the docs").0, 202);
    let (status, refused) = comment(sim, issue, "@ccbot and the lexer");
    assert_eq!(status, 200, "{refused}");
    assert_eq!(refused["status"], "rejected");
    assert_eq!(refused["code"], "rate_limited");
    let task = refused["taskId"]
        .as_str()
        .expect("the refused task")
        .to_owned();
    wait_task_state(
        &app.db_url,
        &task,
        "rejected",
        std::time::Duration::from_secs(10),
    );

    // A turnless command is never held back by the limit.
    let (status, stop) = comment(sim, issue, "@ccbot /status");
    assert_eq!(status, 202, "{stop}");

    // One receipt, naming the limit and how to lift it.
    app.wait_for("the refusal's receipt", || {
        sim.comments("acme", "widgets", issue).iter().any(|c| {
            c["body"]
                .as_str()
                .unwrap_or("")
                .contains(&format!("receipt={task}:status:rejected"))
        })
    });
    let receipts: Vec<String> = sim
        .comments("acme", "widgets", issue)
        .iter()
        .filter_map(|c| c["body"].as_str().map(str::to_owned))
        .filter(|b| b.contains(&format!("receipt={task}:")))
        .collect();
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert!(
        receipts[0].contains("user_triggers_per_hour") && receipts[0].contains("rate_limited"),
        "{}",
        receipts[0]
    );
}
