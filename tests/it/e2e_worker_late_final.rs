//! A turn's final that reaches the server late, while the worker's lease
//! still holds: the worker is killed with the final in its journal's
//! outbox, or the network between worker and server is cut while Codex
//! runs and healed. Either way the server takes that turn's final when it
//! arrives, verifies the reply the turn posted, and never runs the model
//! again. A cut that outlasts the lease ends the server's stream; the
//! session then finds the turn's end in the thread's history through the
//! worker once it is back; one that outlasts the lookup too leaves the task
//! in `needs_reconciliation`, and the worker, back, offers the turn's
//! durable final, which the server takes for that same attempt; offered
//! before the task waits for it, the final is refused and offered again
//! on the worker's heartbeat until taken. The worker reaches the server
//! through a proxy the test controls.

use crate::cutproxy::CutProxy;
use crate::e2e::Loop;
use crate::e2e_worker_instances::start_worker;
use crate::fakemodel::{Gate, Step};
use crate::support::*;
use diesel::{Connection, RunQueryDsl};
use std::path::Path;
use std::time::Duration;

/// How the wire writes the event that ends a turn.
const FINAL: &str = "\"event\":\"completed\"";

fn remote() -> Loop {
    Loop::start_with(|b| b.env("CODEX_BRIDGE_AGENT_RUNTIME", "remote"))
}

/// A server whose workers' leases and calls run out sooner: for the cuts
/// that outlast the lease (and the history lookup), so the test waits
/// seconds, not minutes.
fn remote_short() -> Loop {
    Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_AGENT_RUNTIME", "remote")
            .env("CODEX_BRIDGE_WORKER_LEASE_TTL_SECS", "6")
            .env("CODEX_BRIDGE_WORKER_CALL_TIMEOUT_SECS", "30")
    })
}

/// The request line of a worker asking for a repository's lease (not its
/// renewal, its polls, answers or events).
const LEASE_REQUEST: &str = "POST /api/worker/v1/leases HTTP/1.";

/// How many rows of the worker's journal match (0 while it is busy).
fn journal_count(journal: &Path, sql: &str) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let Ok(mut c) = diesel::SqliteConnection::establish(journal.to_str().unwrap()) else {
        return 0;
    };
    diesel::sql_query(sql)
        .get_result::<N>(&mut c)
        .map(|r| r.n)
        .unwrap_or(0)
}

/// Waits for the task to succeed; on failure, says what the worker and
/// the server said.
fn wait_succeeded(l: &Loop, task: &str, logs: impl Fn() -> String) {
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_task_state(&l.app.db_url, task, "succeeded", Duration::from_secs(120))
    }));
    if let Err(panic) = waited {
        eprintln!("task: {}", l.detail(task));
        eprintln!("worker log:\n{}", logs());
        eprintln!("server log:\n{}", l.app.logs());
        std::panic::resume_unwind(panic);
    }
}

/// One turn started, one reply: nothing ran twice.
fn ran_once(l: &Loop, task: &str, model_requests: usize) {
    let actions = crate::e2e::actions(&l.detail(task));
    let starts = actions.iter().filter(|a| *a == "turn.start_intent").count();
    assert_eq!(starts, 1, "{actions:?}");
    assert_eq!(l.model().requests().len(), model_requests);
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={task} turn="));
    assert_eq!(replies.len(), 1, "{replies:?}");
}

#[test]
fn e2e_worker_late_final_a_worker_killed_with_its_final_unsent_sends_it_after_its_restart() {
    let l = remote();
    let proxy = CutProxy::start(&l.app.base);
    // The request that carries the turn's end never reaches the server.
    proxy.hold(FINAL);
    let mut worker = start_worker(&l, &l.app, "build-1", &proxy.base);
    l.script_reply(l.issue, "Fixed; the final came late.");
    let task = l.comment("bob", l.issue, "@ccbot fix the flaky parser test");
    let journal = worker.journal();
    wait_until(
        "the turn's final to wait in the worker's outbox",
        Duration::from_secs(120),
        || {
            journal_count(&journal, "SELECT COUNT(*) AS n FROM turns WHERE state = 'completed'")
                == 1
                && journal_count(
                    &journal,
                    &format!(
                        "SELECT COUNT(*) AS n FROM outbox WHERE sent_at IS NULL AND body LIKE '%{FINAL}%'"
                    ),
                ) == 1
        },
    );
    assert_eq!(
        task_state(&mut l.app.db(), &task).as_deref(),
        Some("running"),
        "the server has not heard the end"
    );
    worker.restart_with("worker-2.log", &[]);
    proxy.heal();
    wait_succeeded(&l, &task, || worker.logs());
    // The comment tool call and the final: one turn's two requests.
    ran_once(&l, &task, 2);
    assert!(
        !worker.logs().contains("has no recorded end"),
        "the journal held the turn's end: {}",
        worker.logs()
    );
}

#[test]
fn e2e_worker_late_final_a_cut_while_codex_runs_is_healed_and_the_turn_ends_once() {
    let l = remote();
    let proxy = CutProxy::start(&l.app.base);
    let worker = start_worker(&l, &l.app, "build-1", &proxy.base);
    let gate = Gate::new();
    l.model().push(Step::shell("echo looked").gated(&gate));
    l.script_reply(l.issue, "Fixed across a cut.");
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "running");
    l.model().wait_for_requests(1, Duration::from_secs(60));
    proxy.cut();
    gate.open();
    // Codex finishes the turn on the worker, its reply posted, while the
    // server hears nothing from the worker.
    wait_until(
        "the reply to be posted during the cut",
        Duration::from_secs(60),
        || {
            l.model().requests().len() == 3
                && !l
                    .bot_comments(l.issue, &format!("codex-bridge task={task} turn="))
                    .is_empty()
        },
    );
    assert_eq!(
        task_state(&mut l.app.db(), &task).as_deref(),
        Some("running")
    );
    proxy.heal();
    wait_succeeded(&l, &task, || worker.logs());
    // The shell step, the comment tool call and the final.
    ran_once(&l, &task, 3);
}

/// Whether the worker's lease on the repository has run out by the
/// store's clock (nobody renewed it).
fn lease_expired(l: &Loop) -> bool {
    count_where(
        &mut l.app.db(),
        "worker_leases",
        &format!(
            "repository = 'acme/widgets' AND expires_at < '{}'",
            codex_bridge::store::now()
        ),
    ) == 1
}

/// A turn on the worker behind `proxy`, cut off while Codex runs its
/// command: Codex goes on and posts `reply` during the cut, and the lease
/// runs out, so that the server stops following the turn (the call that
/// started it leaves the store with its stream). Returns the task.
fn a_turn_cut_past_its_lease(l: &Loop, proxy: &CutProxy, reply: &str) -> String {
    let gate = Gate::new();
    l.model().push(Step::shell("echo looked").gated(&gate));
    l.script_reply(l.issue, reply);
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "running");
    l.model().wait_for_requests(1, Duration::from_secs(60));
    proxy.cut();
    gate.open();
    wait_until(
        "the reply to be posted during the cut",
        Duration::from_secs(60),
        || {
            l.model().requests().len() == 3
                && !l
                    .bot_comments(l.issue, &format!("codex-bridge task={task} turn="))
                    .is_empty()
        },
    );
    wait_until(
        "the server to give the turn's stream up with the lease",
        Duration::from_secs(60),
        || lease_expired(l) && count_where(&mut l.app.db(), "worker_calls", "stream") == 0,
    );
    task
}

/// A cut that outlasts the worker's lease: the server stops following the
/// turn when the lease ends, and the session looks the turn up through the
/// worker once it is back; the turn's end comes from its history, and the
/// model is never asked again.
#[test]
fn e2e_worker_late_final_a_cut_past_the_lease_is_healed_and_the_turn_is_found_not_run_again() {
    let l = remote_short();
    let proxy = CutProxy::start(&l.app.base);
    let worker = start_worker(&l, &l.app, "build-1", &proxy.base);
    let task = a_turn_cut_past_its_lease(&l, &proxy, "Fixed across a long cut.");
    proxy.heal();
    wait_succeeded(&l, &task, || worker.logs());
    // The server lost the turn's stream with the lease: its end came from
    // the thread's history on the worker.
    let d = l.detail(&task);
    let found = d["transitions"].as_array().unwrap().iter().any(|t| {
        t["to"] == "verifying_reply" && t["reason"] == "turn completed (confirmed from history)"
    });
    assert!(found, "{}", d["transitions"]);
    ran_once(&l, &task, 3);
}

/// A cut so long that the server gives the turn up altogether: the lease
/// runs out, the history lookup finds no worker, and the task waits in
/// `needs_reconciliation`. Healed, the worker finds its events refused
/// (the lease they ran under ended) and offers the turn's durable final
/// from its journal; the server takes it for the same attempt, verifies
/// the reply the turn posted, and never asks the model again.
#[test]
fn e2e_worker_late_final_a_task_held_for_reconciliation_takes_the_same_attempts_final() {
    let l = remote_short();
    let proxy = CutProxy::start(&l.app.base);
    let worker = start_worker(&l, &l.app, "build-1", &proxy.base);
    let gate = Gate::new();
    l.model().push(Step::shell("echo looked").gated(&gate));
    l.script_reply(l.issue, "Fixed across a cut that outlived the lease.");
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "running");
    l.model().wait_for_requests(1, Duration::from_secs(60));
    proxy.cut();
    gate.open();
    wait_until(
        "the reply to be posted during the cut",
        Duration::from_secs(60),
        || {
            l.model().requests().len() == 3
                && !l
                    .bot_comments(l.issue, &format!("codex-bridge task={task} turn="))
                    .is_empty()
        },
    );
    // No worker answers the server's history lookup: the task is held.
    let held = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_task_state(
            &l.app.db_url,
            &task,
            "needs_reconciliation",
            Duration::from_secs(120),
        )
    }));
    if let Err(panic) = held {
        eprintln!("task: {}", l.detail(&task));
        eprintln!("server log:\n{}", l.app.logs());
        std::panic::resume_unwind(panic);
    }
    proxy.heal();
    wait_succeeded(&l, &task, || worker.logs());
    took_the_late_final(&l, &task);
    // The shell step, the comment tool call and the final: one turn.
    ran_once(&l, &task, 3);
    assert!(
        worker
            .logs()
            .contains("the server took the turn's late final"),
        "{}",
        worker.logs()
    );
}

/// The task took its late final on the way out of `needs_reconciliation`.
fn took_the_late_final(l: &Loop, task: &str) {
    let d = l.detail(task);
    let taken = d["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["from"] == "needs_reconciliation" && t["to"] == "verifying_reply");
    assert!(taken, "{}", d["transitions"]);
}

/// Whether the task went through `needs_reconciliation`.
fn was_held(l: &Loop, task: &str) -> bool {
    l.detail(task)["transitions"]
        .as_array()
        .is_some_and(|ts| ts.iter().any(|t| t["to"] == "needs_reconciliation"))
}

/// The worker comes back while the server still looks the turn up (its
/// lease ended with the cut), but cannot lease the repository again (the
/// proxy holds its lease requests): its events are refused and the turn's
/// final with them, `not_uncertain`, since the task does not wait for it
/// yet. The lookup finds no worker and the task goes to
/// `needs_reconciliation`; the worker offers the same final again on its
/// heartbeat, and that offer is taken: one reply, the model asked for one
/// turn only.
#[test]
fn e2e_worker_late_final_a_final_refused_before_the_task_waits_is_offered_again_and_taken() {
    let l = remote_short();
    let proxy = CutProxy::start(&l.app.base);
    let worker = start_worker(&l, &l.app, "build-1", &proxy.base);
    let task = a_turn_cut_past_its_lease(&l, &proxy, "Fixed; the final was offered again.");
    proxy.hold(LEASE_REQUEST);
    proxy.reconnect();
    wait_until(
        "the worker's first offer to be refused: the task does not wait yet",
        Duration::from_secs(60),
        || worker.logs().contains("(not_uncertain)"),
    );
    wait_until(
        "the lookup to find no worker and hold the task",
        Duration::from_secs(120),
        || was_held(&l, &task),
    );
    proxy.heal();
    wait_succeeded(&l, &task, || worker.logs());
    took_the_late_final(&l, &task);
    ran_once(&l, &task, 3);
    // Offered at least twice, and journalled as taken.
    let journal = worker.journal();
    assert_eq!(
        journal_count(
            &journal,
            "SELECT COUNT(*) AS n FROM late_finals WHERE standing = 'taken' AND offers >= 2"
        ),
        1,
        "{}",
        worker.logs()
    );
}
