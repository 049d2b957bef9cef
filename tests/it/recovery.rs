//! Restart recovery: the real server process is killed with
//! SIGKILL at each critical point and started again on the same database,
//! workspace root and runtime history. Work before the turn/start intent is
//! retried once (`retry_wait(interrupted_by_restart)`); after the intent it is
//! never replayed: confirmed from the history, or `needs_reconciliation`, which
//! blocks the repository until an operator decides.

use crate::support::*;
use crate::testapp::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

/// The server with the scripted runtime, short leases and a git server
/// holding `acme/widgets`. What survives a restart ([`TestApp::kill9`], then
/// [`TestApp::start_again`]): the database, the state dir (runtime history),
/// the workspaces and the git server.
fn app() -> TestApp {
    let app = scripted_on_git()
        .env("CODEX_BRIDGE_LEASE_TTL_SECS", "2")
        .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .env("CODEX_BRIDGE_RETRY_BACKOFF_SECS", "0")
        .start();
    app.git().create_repo("acme", "widgets");
    app
}

fn scripted_on_git() -> TestAppBuilder {
    TestApp::builder().git_sim().scripted()
}

/// Posts a signed comment on Issue `number` of `acme/widgets`; its task.
fn comment(s: &TestApp, delivery: &str, comment_id: i64, text: &str, number: i64) -> String {
    s.task_comment(delivery, comment_id, text, "widgets", number)
}

fn history(s: &TestApp, task_id: &str) -> Vec<String> {
    codex_bridge::store::tasks::history(&mut s.db(), &task_id.parse().unwrap())
        .unwrap()
        .into_iter()
        .map(|t| t.to_state.to_string())
        .collect()
}

fn turns(s: &TestApp, task_id: &str) -> i64 {
    count_where(&mut s.db(), "turns", &format!("task_id = '{task_id}'"))
}

fn wait(s: &TestApp, task_id: &str, state: &str) {
    wait_task_state(&s.db_url, task_id, state, Duration::from_secs(30));
}

const LONG: Duration = Duration::from_secs(30);
const REPO: &str = "default:acme/widgets";

#[test]
fn killed_after_accept_the_task_runs_after_restart() {
    let mut s = app();
    let pause = s.admin_post(
        "/api/gitea-workflow/control/pause",
        &json!({"requestId": "p", "reason": "hold"}),
    );
    assert_eq!(pause.status, 200);
    let task = comment(&s, "acc-1", 1, "@ccbot after accept", 1);
    s.kill9();

    s.start_again();
    assert_eq!(
        task_state(&mut connect(&s.db_url), &task).as_deref(),
        Some("queued")
    );
    s.admin_post(
        "/api/gitea-workflow/control/resume",
        &json!({"requestId": "r", "reason": "go"}),
    );
    wait_task_state(&s.db_url, &task, "succeeded", LONG);
    assert_eq!(turns(&s, &task), 1);
}

#[test]
fn killed_after_lease_the_task_is_retried_once_as_interrupted_by_restart() {
    let mut s = app();
    s.git().set_delay(Duration::from_secs(4));
    let task = comment(&s, "lease-1", 1, "@ccbot after lease", 1);
    wait(&s, &task, "leased");
    s.kill9();
    s.git().set_delay(Duration::ZERO);

    s.start_again();
    wait(&s, &task, "succeeded");
    let history = history(&s, &task);
    assert_eq!(
        history,
        [
            "queued",
            "leased",
            "retry_wait",
            "leased",
            "running",
            "verifying_reply",
            "succeeded"
        ]
    );
    let mut c = connect(&s.db_url);
    assert_eq!(
        count_where(
            &mut c,
            "task_transitions",
            &format!("task_id = '{task}' AND error_code = 'interrupted_by_restart'")
        ),
        1
    );
    assert_eq!(
        count_where(&mut c, "attempts", &format!("task_id = '{task}'")),
        2
    );
    assert_eq!(turns(&s, &task), 1);
}

#[test]
fn killed_after_the_turn_start_intent_the_task_is_never_replayed_and_blocks_its_session() {
    let mut s = app();
    let task = comment(
        &s,
        "intent-1",
        1,
        "@ccbot after intent [start:slow:8000]",
        1,
    );
    let mut c = connect(&s.db_url);
    wait_until("the turn/start intent recorded", LONG, || {
        count_where(
            &mut c,
            "outbox_entries",
            &format!("task_id = '{task}' AND status = 'sending'"),
        ) > 0
    });
    s.kill9();

    s.start_again();
    wait(&s, &task, "needs_reconciliation");
    assert_eq!(turns(&s, &task), 0, "nothing was replayed");
    // Recovery is idempotent: another restart changes nothing (checked again
    // below, after later work ran through the repository).
    let before = history(&s, &task);
    s.kill9();
    s.start_again();
    s.wait_for("the restarted scheduler to find the uncertain task", || {
        s.repo_actor(REPO)
            .is_some_and(|r| r["status"] == "uncertain")
    });
    assert_eq!(history(&s, &task), before);
    // The uncertain task blocks new work on its session: another session of
    // the repository (its own worktree and thread) goes on.
    let elsewhere = comment(&s, "intent-3", 3, "@ccbot another issue", 2);
    wait(&s, &elsewhere, "succeeded");
    let behind = comment(&s, "intent-2", 2, "@ccbot queued behind", 1);
    s.wait_repo_passes(REPO, "uncertain");
    assert_eq!(task_state(&mut c, &behind).as_deref(), Some("queued"));

    // The operator decides; then the next task runs.
    s.reconcile_failed(&task);
    wait(&s, &behind, "succeeded");
    let mut decided = before;
    decided.push("failed".into());
    assert_eq!(history(&s, &task), decided, "only the operator moved it");
}

#[test]
fn killed_after_the_reply_before_verification_it_is_verified_not_rerun() {
    let mut s = app();
    let task = comment(
        &s,
        "verify-1",
        1,
        "@ccbot reply then verify [verify:slow:8000]",
        1,
    );
    wait(&s, &task, "verifying_reply");
    s.kill9();

    s.start_again();
    wait(&s, &task, "succeeded");
    assert_eq!(turns(&s, &task), 1, "the model did not run again");
    let history = history(&s, &task);
    assert_eq!(history.iter().filter(|s| *s == "running").count(), 1);
}

#[test]
fn a_workspace_is_really_cloned_and_the_token_stays_out_of_it() {
    let s = app();
    let task = comment(&s, "ws-1", 1, "@ccbot clone me", 1);
    wait(&s, &task, "succeeded");
    let ws = s.dir().join("ws/default/acme/widgets");
    assert!(ws.join(".git").is_dir(), "no clone at {ws:?}");
    let config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    assert!(!config.contains(GITEA_TOKEN));
    assert!(s.git().requests().iter().all(|r| r.authorization.as_deref()
        == Some(&format!("token {GITEA_TOKEN}"))
        || r.status == 401));
    assert!(!s.logs().contains(GITEA_TOKEN));
}

#[test]
fn two_servers_on_one_postgres_never_run_a_repository_twice_and_take_over_from_a_dead_one() {
    // Two instances: one database and git server, state and workspaces each.
    // Leases outlive four missed heartbeats, so that only the kill ends one:
    // a loaded machine can hold a heartbeat back for seconds, and a lease
    // taken from a live instance spends an attempt of the task it covered.
    let mut a = scripted_on_git()
        .postgres()
        .env("CODEX_BRIDGE_LEASE_TTL_SECS", "5")
        .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .env("CODEX_BRIDGE_RETRY_BACKOFF_SECS", "0")
        .start();
    let b = a.another_instance();
    let repos = ["alpha", "beta", "gamma", "delta"];
    for r in repos {
        a.git().create_repo("acme", r);
    }
    let mut ids = Vec::new();
    for i in 0..16i64 {
        let repo = repos[(i as usize) % repos.len()];
        let server = if i % 2 == 0 { &a } else { &b };
        ids.push(server.task_comment(
            &format!("two-{i}"),
            100 + i,
            &format!("@ccbot job {i} [sleep:300]"),
            repo,
            i % 2,
        ));
    }
    // Kill A while it holds a repository's lease (its owner id is in its log).
    let a_owner = a
        .logs()
        .split("owner=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(|o| o.trim_matches('"').to_owned())
        .expect("A logs its lease owner id");
    let mut c = connect(&a.db_url);
    wait_until("A holding a lease", Duration::from_secs(30), || {
        count_where(
            &mut c,
            "leases",
            &format!("owner = '{a_owner}' AND released_at IS NULL"),
        ) > 0
    });
    a.kill9();

    // B takes over: nothing stays in flight; a task A was running becomes
    // uncertain (B cannot see A's turn) and holds its repository until an
    // operator reconciles it; then B runs what queued behind it.
    let in_flight = "state IN ('leased', 'running', 'verifying_reply', 'retry_wait')";
    let stuck = "state = 'queued' AND repo_key NOT IN (SELECT repo_key FROM tasks WHERE state = 'needs_reconciliation')";
    let settled = poll_until(Duration::from_secs(60), || {
        count_where(&mut c, "tasks", in_flight) + count_where(&mut c, "tasks", stuck) == 0
    });
    assert!(
        settled,
        "tasks never settled after the takeover:\n{}",
        b.logs()
    );
    let uncertain: Vec<String> = ids
        .iter()
        .filter(|id| task_state(&mut c, id).as_deref() == Some("needs_reconciliation"))
        .cloned()
        .collect();
    for id in &uncertain {
        let attempt = last_attempt_id(&mut c, id);
        let r = b.admin_post(
            &format!("/api/gitea-workflow/tasks/{id}/reconcile"),
            &json!({"requestId": format!("rc-{id}"), "reason": "A died mid-turn", "attemptId": attempt, "verdict": "failed", "confirmNoActiveTurn": true}),
        );
        assert_eq!(r.status, 200, "{:?}", r.json);
    }
    let ran = poll_until(Duration::from_secs(60), || {
        count_where(&mut c, "tasks", "state NOT IN ('succeeded', 'failed')") == 0
    });
    assert!(
        ran,
        "queued work never ran after reconciliation:\n{}",
        b.logs()
    );
    assert_eq!(
        count_where(&mut c, "tasks", "state = 'failed'") as usize,
        uncertain.len()
    );
    let owners = |clause: &str| count_where(&mut connect(&a.db_url), "attempts", clause);
    assert!(owners("owner IS NOT NULL") >= 16);
    // Both processes ran work.
    #[derive(diesel::QueryableByName)]
    struct Owner {
        #[diesel(sql_type = diesel::sql_types::Text)]
        owner: String,
    }
    use diesel::RunQueryDsl;
    let distinct: Vec<Owner> = codex_bridge::with_conn!(&mut c, |conn| diesel::sql_query(
        "SELECT DISTINCT owner FROM attempts"
    )
    .load::<Owner>(conn))
    .unwrap();
    assert!(
        distinct.len() >= 2,
        "only one instance ever ran work: {:?}",
        distinct.iter().map(|o| &o.owner).collect::<Vec<_>>()
    );
    // No repository ever ran two turns at once, across both processes.
    #[derive(diesel::QueryableByName)]
    struct Span {
        #[diesel(sql_type = diesel::sql_types::Text)]
        repo_key: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        started_at: String,
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
        completed_at: Option<String>,
    }
    let spans: Vec<Span> = codex_bridge::with_conn!(&mut c, |conn| diesel::sql_query(
        "SELECT t.repo_key, u.started_at, u.completed_at FROM turns u JOIN tasks t ON t.task_id = u.task_id ORDER BY t.repo_key, u.started_at"
    )
    .load::<Span>(conn))
    .unwrap();
    for pair in spans.windows(2) {
        if pair[0].repo_key == pair[1].repo_key {
            if let Some(end) = &pair[0].completed_at {
                assert!(
                    end <= &pair[1].started_at,
                    "{} ran two turns at once",
                    pair[0].repo_key
                );
            }
        }
    }
    // The dead instance's leases expired and moved.
    assert!(
        count_where(
            &mut c,
            "audit_events",
            "action IN ('lease.taken_over', 'lease.expired_released')"
        ) >= 1
    );
    assert_eq!(
        count_where(&mut c, "tasks", "state = 'succeeded'") as usize,
        16 - uncertain.len()
    );
}

#[test]
fn a_pull_request_task_works_on_the_head_branch_and_the_tree_shows_it() {
    let s = app();
    s.git().commit(
        "acme",
        "widgets",
        "feature/retry-clock",
        "src/clock.rs",
        "pub struct Clock;\n",
        "add clock",
    );
    let head = s
        .git()
        .create_pull("acme", "widgets", 23, "feature/retry-clock");
    let (body, _) = fixture("issue_comment.created.pr.mention");
    let mut v: Value = serde_json::from_slice(&body).unwrap();
    v["repository"]["clone_url"] = s.git().clone_url("acme", "widgets").into();
    let body = serde_json::to_string_pretty(&v).unwrap().into_bytes();
    let r = s.webhook(
        &gitea_headers("pr-1", "issue_comment", "pull_request_comment", &body),
        &body,
    );
    assert_eq!(r.status, 202, "{:?}", r.json);
    let task = r.json["taskId"].as_str().unwrap().to_owned();
    wait(&s, &task, "succeeded");
    // The session's own worktree, on its own branch at the PR's head.
    let ws = s.dir().join("ws/.worktrees/default/acme/widgets/pull-23");
    let branch = Command::new("git")
        .args([
            "-C",
            ws.to_str().unwrap(),
            "rev-parse",
            "--abbrev-ref",
            "HEAD",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&branch.stdout).trim(),
        "codex/pull-23"
    );
    let commit = Command::new("git")
        .args(["-C", ws.to_str().unwrap(), "rev-parse", "HEAD"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&commit.stdout).trim(), head);

    let tree = s.admin_get("/api/gitea-workflow/actors");
    assert_eq!(tree.status, 200);
    assert_eq!(tree.json["registry"]["runtime"], "scripted");
    let repo = tree.json["repositories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["repoKey"] == "default:acme/widgets")
        .expect("the repository is in the tree")
        .clone();
    let session = &repo["sessions"][0];
    assert_eq!(session["sessionKey"], "default:acme/widgets:pull:23");
    assert!(
        session["threadId"]
            .as_str()
            .is_some_and(|t| t.starts_with("thread-")),
        "{session}"
    );
    assert_eq!(session["restarts"], 0);
    for key in [
        "status",
        "leaseHolder",
        "leaseExpiresAt",
        "queueDepth",
        "runningTask",
        "restarts",
        "lastEventAt",
    ] {
        assert!(repo.get(key).is_some(), "repository field {key}");
    }
    for key in [
        "activeTurn",
        "normalLane",
        "outboxDepth",
        "mailboxBacklog",
        "lastEventAt",
    ] {
        assert!(session.get(key).is_some(), "session field {key}");
    }
}
