//! A remote worker end to end: the server runs `agent_runtime = "remote"`
//! and runs no turn itself; a `codex-bridge worker` process (its own Codex
//! home, workspace root and journal) leases the repository, clones it with
//! its own token, runs the turn on the real `codex app-server` against the
//! fake model, and the reply its agent posts through gitea-mcp lands in the
//! Gitea simulator, where the server verifies it. Revoking the worker ends
//! its lease and stops it. A worker killed mid-turn finds the turn in its
//! journal after its restart, declares it uncertain and takes no new work.
//! `/stop`, `/steer` and `/approve` reach a turn on the worker, and a
//! server restart while the worker runs a turn loses nothing.

use crate::e2e::Loop;
use crate::fakemodel::Step;
use crate::support::*;
use crate::workerproc::{WorkerEnv, WorkerProc};
use serde_json::json;
use std::time::Duration;

/// Registers a worker given `acme/widgets` and starts its process.
fn start_worker(l: &Loop) -> WorkerProc {
    WorkerProc::start(&l.app, "build-1", &["acme/widgets"], WorkerEnv::of(&l.app))
}

fn remote() -> Loop {
    Loop::start_with(|b| b.env("CODEX_BRIDGE_AGENT_RUNTIME", "remote"))
}

fn leases_held(l: &Loop) -> i64 {
    count_where(&mut l.app.db(), "worker_leases", "released_at IS NULL")
}

#[test]
fn e2e_worker_a_turn_on_a_remote_worker_posts_its_verified_reply() {
    let l = remote();
    let worker = start_worker(&l);
    l.script_reply(
        l.issue,
        "Fixed on the worker: the parser test raced on a temp dir.",
    );
    let task = l.comment("bob", l.issue, "@ccbot fix the flaky parser test");
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_task_state(&l.app.db_url, &task, "succeeded", Duration::from_secs(120))
    }));
    if let Err(panic) = waited {
        eprintln!("worker log:\n{}", worker.logs());
        eprintln!("server log:\n{}", l.app.logs());
        std::panic::resume_unwind(panic);
    }
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={task} turn="));
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(replies[0]["body"]
        .as_str()
        .unwrap()
        .contains("Fixed on the worker"));
    let d = l.detail(&task);
    let thread = d["task"]["threadId"].as_str().unwrap();
    assert!(
        thread.starts_with("remote:acme/widgets:"),
        "the thread lives on the worker: {thread}"
    );
    // The worker cloned into its own root; the server cloned nothing.
    let server_ws = l.app.dir().join("ws");
    assert!(
        !server_ws.join("default").exists(),
        "the server cloned the repository itself"
    );
    assert!(leases_held(&l) == 1);
    for secret in [GITEA_TOKEN, worker.token.as_str()] {
        assert!(
            !worker.logs().contains(secret),
            "a token reached the worker's log"
        );
        assert!(
            !l.app.logs().contains(secret),
            "a token reached the server's log"
        );
    }
}

#[test]
fn e2e_worker_a_revoked_worker_loses_its_lease_and_stops() {
    let l = remote();
    let mut worker = start_worker(&l);
    l.app
        .wait_for("the worker's lease", || leases_held(&l) == 1);
    let revoked = l.app.admin_post(
        &format!("/api/gitea-workflow/workers/{}/revoke", worker.id),
        &json!({"requestId": "revoke-build-1", "reason": "machine retired"}),
    );
    assert_eq!(revoked.status, 200, "{:?}", revoked.json);
    assert_eq!(leases_held(&l), 0);
    let mut status = None;
    wait_until("the worker to stop", Duration::from_secs(60), || {
        status = worker.try_wait();
        status.is_some()
    });
    assert!(!status.unwrap().success());
    assert!(
        worker.logs().contains("revoked"),
        "the worker says why it stopped: {}",
        worker.logs()
    );
}

#[test]
fn e2e_worker_killed_mid_turn_it_declares_the_turn_uncertain_and_takes_no_new_work() {
    let l = remote();
    let mut worker = start_worker(&l);
    l.model().push(Step::Hang);
    let _task = l.comment("bob", l.issue, "@ccbot fix the flaky parser test");
    wait_until(
        "the turn to reach the model",
        Duration::from_secs(90),
        || !l.model().requests().is_empty(),
    );
    worker.restart_with("worker-2.log", &[]);
    // Either it holds, or it leases: whichever it does, it says so.
    wait_until(
        "the restarted worker to hold or lease",
        Duration::from_secs(60),
        || {
            let logs = worker.logs();
            logs.contains("no lease is taken") || logs.contains("lease taken")
        },
    );
    let logs = worker.logs();
    assert!(
        logs.contains("has no recorded end"),
        "the worker declares the lost turn uncertain: {logs}"
    );
    assert!(
        !logs.contains("lease taken"),
        "an uncertain worker takes no new lease: {logs}"
    );
    assert_eq!(
        l.model().requests().len(),
        1,
        "the turn was never sent to the model again"
    );

    // Settled by the operator, it works again: it leases the repository.
    worker.restart_with(
        "worker-3.log",
        &["--settle-uncertain", "--confirm-no-active-turn"],
    );
    wait_until(
        "the settled worker to lease",
        Duration::from_secs(60),
        || worker.logs().contains("lease taken"),
    );
    assert!(worker.logs().contains("settled 1 uncertain turn"));
    assert_eq!(l.model().requests().len(), 1, "settling runs nothing");
}

/// `/stop` reaches a turn running on the worker: the server's session
/// interrupts it through the worker's Codex, and the task ends aborted.
#[test]
fn e2e_worker_stop_reaches_a_turn_running_on_the_worker() {
    let l = remote();
    let worker = start_worker(&l);
    l.model().push(Step::Hang);
    let running = l.comment("bob", l.issue, "@ccbot a long job");
    l.wait(&running, "running");
    l.model().wait_for_requests(1, Duration::from_secs(60));
    let stop = l.comment("bob", l.issue, "@ccbot /stop");
    l.wait(&stop, "succeeded");
    l.wait(&running, "aborted");
    assert!(
        worker.logs().contains("lease taken"),
        "the turn ran on the worker: {}",
        worker.logs()
    );
}

/// A command the worker's Codex wants to run waits for approval on the
/// server; `/approve` reaches the worker and the command runs there, in the
/// worker's own worktree.
#[test]
fn e2e_worker_an_approval_is_decided_on_the_server_and_runs_on_the_worker() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_AGENT_RUNTIME", "remote")
            .env("CODEX_BRIDGE_APPROVAL_POLICY", "untrusted")
            .env("CODEX_BRIDGE_SANDBOX", "workspace-write")
    });
    let worker = start_worker(&l);
    l.model()
        .push(Step::Reply(vec![crate::fakemodel::Item::shell(
            "touch approved.txt",
        )]));
    l.script_reply(l.issue, "Touched it.");
    let task = l.comment("bob", l.issue, "@ccbot touch a file");
    l.wait(&task, "awaiting_approval");
    let pending = l.app.admin_get("/api/gitea-workflow/approvals").json["approvals"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let approval = pending[0]["approvalId"].as_str().unwrap().to_owned();
    let granted = l.comment("bob", l.issue, &format!("@ccbot /approve {approval}"));
    l.wait(&granted, "succeeded");
    l.wait(&task, "succeeded");
    let file = worker.dir().join(format!(
        "ws/.worktrees/default/acme/widgets/issue-{}/approved.txt",
        l.issue
    ));
    assert!(file.exists(), "the approved command ran on the worker");
    assert!(
        !l.app.dir().join("ws/.worktrees").exists(),
        "nothing ran in the server's workspaces"
    );
}

/// `/steer` joins the turn running on the worker: `turn/steer` reaches the
/// worker's Codex, the model sees the text inside the same turn, and the
/// steer ends `succeeded` into that turn.
#[test]
fn e2e_worker_a_steer_joins_the_turn_running_on_the_worker() {
    let l = remote();
    let _worker = start_worker(&l);
    l.model()
        .push(Step::shell("echo looked").delayed(Duration::from_secs(4)));
    l.script_reply(l.issue, "Fixed the parser and the changelog.");
    let running = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&running, "running");
    l.model().wait_for_requests(1, Duration::from_secs(60));
    let steer = l.comment("bob", l.issue, "@ccbot /steer also update the changelog");
    l.wait(&steer, "succeeded");
    l.wait(&running, "succeeded");
    let s = l.detail(&steer);
    assert_eq!(s["task"]["steeredInto"], running.as_str(), "{s}");
    assert_eq!(s["ledger"][0]["status"], "sent", "{s}");
    let requests = l.model().requests();
    assert!(
        requests
            .iter()
            .skip(1)
            .any(|r| crate::fakemodel::user_texts(r)
                .iter()
                .any(|t| t.contains("also update the changelog"))),
        "the model saw the steer inside the turn"
    );
}

/// The main loop with the server on PostgreSQL.
#[test]
fn e2e_worker_a_turn_on_a_remote_worker_with_the_server_on_postgres() {
    let l = Loop::start_with(|b| b.postgres().env("CODEX_BRIDGE_AGENT_RUNTIME", "remote"));
    let _worker = start_worker(&l);
    l.script_reply(l.issue, "Fixed on the worker, state in PostgreSQL.");
    let task = l.comment("bob", l.issue, "@ccbot fix the flaky parser test");
    l.wait(&task, "succeeded");
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={task} turn="));
    assert_eq!(replies.len(), 1, "{replies:?}");
}

/// The server restarts while a worker's turn runs: the worker keeps its
/// lease, its turn goes on, and the task ends with the turn's reply
/// verified, never run twice.
#[test]
fn e2e_worker_a_server_restart_while_the_worker_runs_a_turn_loses_nothing() {
    // The worker must find the restarted server where it was: a port the
    // system picked now, kept across the restart.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_AGENT_RUNTIME", "remote")
            .env("CODEX_BRIDGE_LISTEN", &format!("127.0.0.1:{port}"))
    });
    let worker = start_worker(&l);
    let gate = crate::fakemodel::Gate::new();
    l.model().push(Step::shell("echo looked").gated(&gate));
    l.script_reply(l.issue, "Fixed across a server restart.");
    let running = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&running, "running");
    l.model().wait_for_requests(1, Duration::from_secs(60));
    l.app.start_again();
    gate.open();
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_task_state(
            &l.app.db_url,
            &running,
            "succeeded",
            Duration::from_secs(120),
        )
    }));
    if let Err(panic) = waited {
        eprintln!("task: {}", l.detail(&running));
        eprintln!("worker log:\n{}", worker.logs());
        eprintln!("server log:\n{}", l.app.logs());
        std::panic::resume_unwind(panic);
    }
    // Found again through the worker (its history), never started twice.
    let actions = crate::e2e::actions(&l.detail(&running));
    let starts = actions.iter().filter(|a| *a == "turn.start_intent").count();
    assert_eq!(starts, 1, "{actions:?}");
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={running} turn="));
    assert_eq!(replies.len(), 1, "one reply, the turn's: {replies:?}");
}

/// `codex-bridge reconcile <args>` on the worker's machine, with its
/// configuration: its output.
fn reconcile_on_worker(worker: &WorkerProc, args: &[&str]) -> std::process::Output {
    worker.command("reconcile", args).output().unwrap()
}

fn said(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A worker killed mid-turn holds; the task it ran becomes uncertain on
/// the server (an abort nobody can confirm). Its operator reconciles that
/// attempt on the worker's machine: the server's task ends `failed`,
/// audited under the worker's name, the journal settles it, and the same
/// worker process, still running, leases again. Nothing runs twice.
#[test]
fn e2e_worker_an_uncertain_attempt_is_reconciled_on_the_worker() {
    let l = remote();
    let mut worker = start_worker(&l);
    l.model().push(Step::Hang);
    let task = l.comment("bob", l.issue, "@ccbot fix the flaky parser test");
    wait_until(
        "the turn to reach the model",
        Duration::from_secs(90),
        || !l.model().requests().is_empty(),
    );
    // The attempt names the worker that took its turn.
    let owner = format!("worker:{}", worker.id);
    let mut attempt = serde_json::Value::Null;
    wait_until(
        "the attempt to name its worker",
        Duration::from_secs(60),
        || {
            attempt = l.detail(&task)["attempts"][0].clone();
            attempt["owner"] == owner.as_str()
        },
    );
    let attempt_id = attempt["attemptId"].as_str().unwrap().to_owned();

    worker.restart_with("worker-2.log", &[]);
    wait_until(
        "the restarted worker to hold",
        Duration::from_secs(60),
        || worker.logs().contains("no lease is taken"),
    );
    assert!(
        worker.logs().contains(&attempt_id),
        "the held worker names the attempt to reconcile: {}",
        worker.logs()
    );
    // No worker leases the repository now: the abort is never confirmed.
    let aborted = l.app.admin_post(
        &format!("/api/gitea-workflow/tasks/{task}/abort"),
        &json!({"requestId": "abort-lost-worker", "reason": "its worker died"}),
    );
    assert_eq!(aborted.status, 200, "{:?}", aborted.json);
    l.wait(&task, "needs_reconciliation");
    let held = l.app.admin_get("/api/gitea-workflow/workers");
    assert_eq!(
        held.json["workers"][0]["health"], "uncertain",
        "{:?}",
        held.json
    );
    assert_eq!(
        held.json["workers"][0]["uncertainTasks"][0]["attemptId"],
        attempt_id.as_str()
    );

    let o = reconcile_on_worker(&worker, &[&task, &attempt_id, "failed"]);
    assert!(!o.status.success());
    assert!(
        said(&o).contains("--confirm-no-active-turn"),
        "{}",
        said(&o)
    );
    let o = reconcile_on_worker(
        &worker,
        &[&task, "att-unknown", "failed", "--confirm-no-active-turn"],
    );
    assert!(!o.status.success());
    assert!(
        said(&o).contains("holds no turn") && said(&o).contains(&attempt_id),
        "names the attempt it does hold: {}",
        said(&o)
    );
    assert_eq!(l.detail(&task)["task"]["state"], "needs_reconciliation");

    let o = reconcile_on_worker(
        &worker,
        &[
            &task,
            &attempt_id,
            "failed",
            "--confirm-no-active-turn",
            "--reason",
            "no codex process left",
            "--operator",
            "alice",
        ],
    );
    assert!(o.status.success(), "{}", said(&o));
    assert!(said(&o).contains("task.reconciled"), "{}", said(&o));
    assert!(
        said(&o).contains("settled 1 uncertain turn"),
        "{}",
        said(&o)
    );
    let d = l.detail(&task);
    assert_eq!(d["task"]["state"], "failed");
    assert_eq!(d["task"]["errorCode"], "reconciled_failed");
    let audit = d["audit"].as_array().unwrap();
    let reconciled = audit
        .iter()
        .find(|e| e["action"] == "task.reconciled")
        .unwrap();
    assert_eq!(reconciled["actor"], owner.as_str());

    // The same process, never restarted, takes its lease again.
    wait_until(
        "the held worker to lease again",
        Duration::from_secs(60),
        || worker.logs().contains("lease taken"),
    );
    assert!(worker.logs().contains("no uncertain turn is left"));
    // Asking again changes nothing: the server answers as it did the first time.
    let o = reconcile_on_worker(
        &worker,
        &[&task, &attempt_id, "failed", "--confirm-no-active-turn"],
    );
    assert!(o.status.success(), "{}", said(&o));
    assert!(
        said(&o).contains("settled 0 uncertain turn"),
        "{}",
        said(&o)
    );
    assert_eq!(
        l.model().requests().len(),
        1,
        "the turn was never sent to the model again"
    );
    let ok = l.app.admin_get("/api/gitea-workflow/workers");
    assert_eq!(ok.json["workers"][0]["health"], "ok", "{:?}", ok.json);
}
