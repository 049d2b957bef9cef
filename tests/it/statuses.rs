//! Commit statuses on pull request tasks, through the whole server: the
//! Gitea simulator sends the PR comment's webhook, the scripted runtime runs
//! the turn in a clone of the PR's head, and the statuses worker sets the
//! context `codex-bridge` on that commit. Turns that must still run while
//! the test looks at the `pending` status wait for an approval (or sleep),
//! so the order of the statuses is what the bridge decided, not a race.

use crate::giteasim::{GiteaSim, Perm};
use crate::support::*;
use crate::testapp::*;
use serde_json::{json, Value};
use std::time::Duration;

const PUBLIC_URL: &str = "https://bridge.example.com/";

/// A server with the scripted runtime and `public_url` set, the simulator's
/// `acme/widgets` with branch `fix-parser`, a PR from it and an Issue.
struct Pr {
    app: TestApp,
    pr: i64,
    issue: i64,
    head: String,
}

impl Pr {
    fn start() -> Pr {
        let sim = GiteaSim::start();
        sim.create_repo("acme", "widgets");
        sim.set_permission("acme", "widgets", BOT, Perm::Admin);
        sim.add_user("bob");
        sim.set_permission("acme", "widgets", "bob", Perm::Write);
        let head = sim.commit(
            "acme",
            "widgets",
            "fix-parser",
            "parser.rs",
            "fn parse() {}\n",
            "wip",
        );
        let pr = sim.create_pull(
            "acme",
            "widgets",
            "Fix parser",
            "",
            "bob",
            "fix-parser",
            "main",
        );
        let issue = sim.create_issue("acme", "widgets", "Flaky", "It fails.", "bob");
        let app = TestApp::builder()
            .scripted()
            .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
            .env("CODEX_BRIDGE_PUBLIC_URL", PUBLIC_URL)
            .start_with_gitea(sim);
        Pr {
            app,
            pr,
            issue,
            head,
        }
    }

    fn sim(&self) -> &GiteaSim {
        self.app.gitea()
    }

    /// Bob comments on `number`; the task the comment made.
    fn comment(&self, number: i64, text: &str) -> String {
        let comment = self
            .sim()
            .post_comment_as("bob", "acme", "widgets", number, text);
        self.app.task_of_comment(&comment)
    }

    fn wait(&self, task: &str, state: &str) {
        wait_task_state(&self.app.db_url, task, state, Duration::from_secs(60));
    }

    /// The `codex-bridge` statuses on the PR's head, oldest first.
    fn statuses(&self) -> Vec<Value> {
        self.sim()
            .statuses("acme", "widgets", &self.head)
            .into_iter()
            .filter(|s| s["context"] == "codex-bridge")
            .collect()
    }

    fn states(&self) -> Vec<String> {
        self.statuses()
            .iter()
            .map(|s| s["status"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Waits until Gitea shows `state` as the head's latest status.
    fn wait_latest(&self, state: &str, timeout: Duration) {
        let seen = poll_until(timeout, || {
            self.states().last().map(String::as_str) == Some(state)
        });
        assert!(
            seen,
            "the head's latest status never became {state}: {:?}",
            self.states()
        );
    }

    /// Waits until the statuses worker has nothing left to post.
    fn wait_worker_idle(&self, timeout: Duration) {
        let db = self.app.db_url.clone();
        let idle = poll_until(timeout, || {
            count_where(
                &mut connect(&db),
                "commit_statuses",
                "progress IN ('pending', 'posting')",
            ) == 0
        });
        assert!(idle, "statuses still waiting to be posted");
    }

    /// The progress of each of the task's status rows, in queue order.
    fn rows(&self, task: &str) -> Vec<(String, String)> {
        let id = codex_bridge::domain::TaskId::parse(task).unwrap();
        let mut c = self.app.db();
        codex_bridge::store::statuses::of_task(&mut c, &id)
            .unwrap()
            .into_iter()
            .map(|r| (r.state.to_string(), r.progress.to_string()))
            .collect()
    }

    fn audit_actions(&self, task: &str) -> Vec<String> {
        let d = self
            .app
            .admin_get(&format!("/api/gitea-workflow/tasks/{task}"));
        assert_eq!(d.status, 200, "{:?}", d.json);
        d.json["audit"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["action"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Accepts the task's pending approval through the admin API.
    fn approve(&self) {
        let mut approval = None;
        self.app.wait_for("the approval request", || {
            let list = self.app.admin_get("/api/gitea-workflow/approvals");
            approval = list.json["approvals"][0]["approvalId"]
                .as_str()
                .map(str::to_owned);
            approval.is_some()
        });
        let r = self.app.admin_post(
            &format!("/api/gitea-workflow/approvals/{}/decide", approval.unwrap()),
            &json!({"decision": "accept", "requestId": "approve-1", "reason": "test"}),
        );
        assert_eq!(r.status, 200, "{:?}", r.json);
    }

    /// The simulator's answers to the statuses POSTs, in order.
    fn post_answers(&self) -> Vec<u16> {
        self.sim()
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.starts_with(STATUSES_PATH))
            .map(|r| r.status)
            .collect()
    }
}

const STATUSES_PATH: &str = "/api/v1/repos/acme/widgets/statuses/";

#[test]
fn a_pull_request_task_sets_pending_then_success_on_the_head_it_ran_on() {
    let p = Pr::start();
    // The turn waits for an approval: the test sees it running.
    let task = p.comment(p.pr, "@ccbot review this [approval]");
    p.wait_latest("pending", Duration::from_secs(60));
    p.approve();
    p.wait(&task, "succeeded");
    p.wait_latest("success", Duration::from_secs(30));
    p.wait_worker_idle(Duration::from_secs(30));

    // pending once (the turn after the approval is the same pending), then
    // success, each naming the task and linking to its admin page.
    let statuses = p.statuses();
    assert_eq!(p.states(), ["pending", "success"], "{statuses:?}");
    for s in &statuses {
        let description = s["description"].as_str().unwrap();
        assert!(description.contains(&task), "{description}");
        assert_eq!(
            s["target_url"],
            format!("https://bridge.example.com/admin#task/{task}")
        );
        assert_eq!(s["creator"]["login"], BOT, "{s}");
    }
    assert!(statuses[0]["description"]
        .as_str()
        .unwrap()
        .contains("working on it"));
    assert_eq!(
        p.rows(&task),
        [
            ("pending".to_owned(), "posted".to_owned()),
            ("success".to_owned(), "posted".to_owned())
        ]
    );
    // Each POST between its intent and its result in the task's audit.
    let actions = p.audit_actions(&task);
    let status_events: Vec<&str> = actions
        .iter()
        .map(String::as_str)
        .filter(|a| a.starts_with("commit_status."))
        .collect();
    assert_eq!(
        status_events,
        [
            "commit_status.intent",
            "commit_status.posted",
            "commit_status.intent",
            "commit_status.posted"
        ]
    );
    let text = ureq::get(&p.app.url("/metrics"))
        .set("Authorization", &format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    for line in [
        "codex_bridge_commit_statuses_total{outcome=\"posted\",state=\"pending\"} 1",
        "codex_bridge_commit_statuses_total{outcome=\"posted\",state=\"success\"} 1",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

#[test]
fn a_failed_pull_request_task_ends_its_status_as_failure() {
    let p = Pr::start();
    // The turn sleeps before it fails: the test sees it running.
    let task = p.comment(p.pr, "@ccbot fix it [sleep:5000] [fail]");
    p.wait_latest("pending", Duration::from_secs(60));
    p.wait(&task, "failed");
    p.wait_latest("failure", Duration::from_secs(30));
    p.wait_worker_idle(Duration::from_secs(30));
    assert_eq!(p.states(), ["pending", "failure"]);
    let failure = &p.statuses()[1];
    let description = failure["description"].as_str().unwrap();
    assert!(
        description.contains("failed") && description.contains(&task),
        "{description}"
    );
}

#[test]
fn a_pull_request_task_an_operator_stops_ends_its_status_as_error() {
    let p = Pr::start();
    let task = p.comment(p.pr, "@ccbot fix it [hang]");
    p.wait_latest("pending", Duration::from_secs(60));
    let r = p.app.admin_post(
        &format!("/api/gitea-workflow/tasks/{task}/abort"),
        &json!({"requestId": "abort-1", "reason": "test"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    p.wait(&task, "aborted");
    // Stopped is no verdict on the work: `error`, not `failure`.
    p.wait_latest("error", Duration::from_secs(30));
    assert_eq!(p.states(), ["pending", "error"]);
    let description = p.statuses()[1]["description"].as_str().unwrap().to_owned();
    assert!(description.starts_with("Stopped"), "{description}");
}

#[test]
fn a_status_post_that_fails_is_retried_and_the_task_still_succeeds() {
    let p = Pr::start();
    // Gitea answers the first statuses POST 500, as when it is down.
    p.sim().fail_next_matching(1, Some("POST"), STATUSES_PATH);
    let task = p.comment(p.pr, "@ccbot fix it [approval]");
    // The pending status failed once and waits for its retry (2 s later)
    // while the turn waits for its approval; then the task ends.
    p.app.wait_for("the pending status's failed attempt", || {
        p.audit_actions(&task)
            .iter()
            .any(|a| a == "commit_status.retry")
    });
    p.approve();
    p.wait(&task, "succeeded");
    p.wait_latest("success", Duration::from_secs(60));
    p.wait_worker_idle(Duration::from_secs(30));

    let answers = p.post_answers();
    assert_eq!(answers.first(), Some(&500), "{answers:?}");
    assert!(answers[1..].iter().all(|s| *s == 201), "{answers:?}");
    // The pending still waiting for its retry when the task ended is never
    // posted after the end: dropped (or, on a machine slower than its
    // backoff, posted before it).
    let states = p.states();
    assert!(
        states == ["success"] || states == ["pending", "success"],
        "{states:?}"
    );
    if states == ["success"] {
        assert!(p
            .audit_actions(&task)
            .iter()
            .any(|a| a == "commit_status.superseded"));
    }
    // The task never noticed.
    let d = p
        .app
        .admin_get(&format!("/api/gitea-workflow/tasks/{task}"));
    assert_eq!(d.json["task"]["state"], "succeeded");
    assert_eq!(d.json["task"]["errorCode"], Value::Null);
}

#[test]
fn an_issue_task_sets_no_status() {
    let p = Pr::start();
    let task = p.comment(p.issue, "@ccbot fix it [sleep:200]");
    p.wait(&task, "succeeded");
    // The receipt comes after the task's transitions are committed; once it
    // is written, a status would have been queued too.
    p.app.wait_for("the received receipt", || {
        count_where(
            &mut p.app.db(),
            "comments",
            &format!("task_id = '{task}' AND kind = 'receipt' AND status = 'posted'"),
        ) == 1
    });
    assert_eq!(count(&mut p.app.db(), "commit_statuses"), 0);
    assert_eq!(count(&mut p.app.db(), "task_heads"), 0);
    assert!(p.post_answers().is_empty(), "{:?}", p.post_answers());
}

#[test]
fn a_restart_between_a_status_intent_and_its_result_posts_it_once_more_at_most() {
    let mut p = Pr::start();
    let task = p.comment(p.pr, "@ccbot review this [approval]");
    p.wait_latest("pending", Duration::from_secs(60));
    // The success POST reaches Gitea and hangs there: the server dies
    // between its intent and its result.
    p.sim()
        .delay_next_matching(1, Some("POST"), STATUSES_PATH, Duration::from_secs(3));
    p.approve();
    p.wait(&task, "succeeded");
    let db = p.app.db_url.clone();
    let posting = poll_until(Duration::from_secs(30), || {
        count_where(
            &mut connect(&db),
            "commit_statuses",
            "state = 'success' AND progress = 'posting'",
        ) == 1
    });
    assert!(posting, "{:?}", p.rows(&task));
    p.app.kill9();
    p.app.start_again();

    // Its claim runs out, and the one uncertain status is posted again.
    p.wait_worker_idle(Duration::from_secs(90));
    assert_eq!(
        p.rows(&task),
        [
            ("pending".to_owned(), "posted".to_owned()),
            ("success".to_owned(), "posted".to_owned())
        ]
    );
    let states = p.states();
    let successes = states.iter().filter(|s| *s == "success").count();
    assert!(
        (1..=2).contains(&successes),
        "one success, plus at most the one that was in flight: {states:?}"
    );
    assert_eq!(states.last().map(String::as_str), Some("success"));
    assert_eq!(states.iter().filter(|s| *s == "pending").count(), 1);
    let success: Vec<Value> = p
        .statuses()
        .into_iter()
        .filter(|s| s["status"] == "success")
        .collect();
    assert!(
        success
            .windows(2)
            .all(|w| w[0]["description"] == w[1]["description"]
                && w[0]["target_url"] == w[1]["target_url"]),
        "the posted again status is identical: {success:?}"
    );
    let intents = p
        .audit_actions(&task)
        .iter()
        .filter(|a| *a == "commit_status.intent")
        .count();
    assert_eq!(intents, 3, "pending, success, success again");
}
