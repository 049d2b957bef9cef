//! Limits on what the agent may spend, through the whole server: the Gitea
//! simulator sends each comment's webhook, and the server refuses or stops
//! what is over a limit with one receipt that names it.

use crate::giteasim::GiteaSim;
use crate::support::*;
use crate::testapp::*;
use serde_json::Value;

/// Bob's comment on the Issue; the webhook's answer.
pub(crate) fn comment(sim: &GiteaSim, issue: i64, text: &str) -> (u16, Value) {
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

/// `acme/widgets` with Bob, a writer, and two of his Issues.
fn two_issues() -> (GiteaSim, i64, i64) {
    let (sim, issue) = GiteaSim::widgets_with_bob("Flaky", "It fails.");
    let other = sim.create_issue("acme", "widgets", "Docs", "Typos.", "bob");
    (sim, issue, other)
}

#[test]
fn a_commenter_past_the_hourly_limit_is_refused_at_intake_but_may_still_stop() {
    let (sim, issue, other) = two_issues();
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

#[test]
fn a_repository_past_its_turns_for_the_day_keeps_its_tasks_queued_and_says_why() {
    let (sim, issue, other) = two_issues();
    let app = TestApp::builder()
        .scripted()
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .env("CODEX_BRIDGE_REPO_TURNS_PER_DAY", "1")
        .start_with_gitea(sim);
    let sim = app.gitea();

    let (status, first) = comment(sim, issue, "@ccbot fix the parser");
    assert_eq!(status, 202, "{first}");
    let first = first["taskId"].as_str().unwrap().to_owned();
    app.wait_for("the first task's turn, and its end", || {
        let mut c = connect(&app.db_url);
        count_where(&mut c, "turns", &format!("task_id = '{first}'")) == 1
            && count_where(
                &mut c,
                "tasks",
                &format!("task_id = '{first}' AND state IN ('succeeded', 'succeeded_with_rest_fallback', 'failed', 'failed_reply')"),
            ) == 1
    });
    let (status, second) = comment(sim, other, "@ccbot fix the docs");
    assert_eq!(status, 202, "{second}");
    let second = second["taskId"].as_str().unwrap().to_owned();

    // The repository's actor says why nothing starts; the task waits queued.
    app.wait_for("the actor to stop at the day's limit", || {
        app.repo_actor("default:acme/widgets")
            .is_some_and(|r| r["status"] == "day_limit")
    });
    let mut c = connect(&app.db_url);
    assert_eq!(
        count_where(
            &mut c,
            "tasks",
            &format!("task_id = '{second}' AND state = 'queued'")
        ),
        1
    );
    assert_eq!(
        count_where(&mut c, "turns", &format!("task_id = '{second}'")),
        0
    );
    let overview = app.admin_get("/api/gitea-workflow/overview");
    let limit = &overview.json["limits"]["repo_turns_per_day"];
    assert_eq!(limit["limit"], 1, "{limit}");
    assert_eq!(limit["highest"]["who"], "default:acme/widgets", "{limit}");
    assert_eq!(limit["highest"]["used"], 1, "{limit}");
}
