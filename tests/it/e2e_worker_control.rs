//! The controls that stop a turn, on a turn a remote worker runs: the
//! server's session decides (its drain lanes, the admission boundary, the
//! history lookup) and the worker's Codex carries it out. `/interrupt` stops
//! the running turn and runs the new message on the same thread, the stopped
//! turn kept in its history; `/replace` also drops the stopped turn from the
//! thread; the repository's deadline interrupts a turn whose model stalls.

use crate::e2e::Loop;
use crate::e2e_interrupt::{interrupted_and_next_ran, long_run, request_with};
use crate::fakemodel::Step;
use crate::workerproc::{WorkerEnv, WorkerProc};

fn remote() -> Loop {
    Loop::start_with(|b| b.env("CODEX_BRIDGE_AGENT_RUNTIME", "remote"))
}

fn start_worker(l: &Loop) -> WorkerProc {
    WorkerProc::start(&l.app, "build-1", &["acme/widgets"], WorkerEnv::of(&l.app))
}

/// Runs `check`; on a failure prints both logs first.
fn with_logs(l: &Loop, worker: &WorkerProc, check: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) {
        eprintln!("worker log:\n{}", worker.logs());
        eprintln!("server log:\n{}", l.app.logs());
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn e2e_worker_an_interrupt_stops_the_turn_on_the_worker_and_runs_next_on_its_thread() {
    let l = remote();
    let worker = start_worker(&l);
    with_logs(&l, &worker, || {
        let running = long_run(&l);
        l.script_reply(l.issue, "Fixed only the flaky test, on the worker.");
        let now = l.comment("bob", l.issue, "@ccbot /interrupt just fix the flaky test");
        // The stopped turn stays in the worker's thread.
        let (r, n) = interrupted_and_next_ran(&l, &running, &now);
        assert_eq!(
            n["task"]["threadId"], r["task"]["threadId"],
            "the next message runs on the stopped turn's thread"
        );
        let replies = l.bot_comments(l.issue, &format!("codex-bridge task={now} turn="));
        assert_eq!(replies.len(), 1, "{replies:?}");
        l.expect_one_receipt(&running, "aborted");
    });
}

#[test]
fn e2e_worker_a_replace_drops_the_stopped_turn_from_the_workers_thread() {
    let l = remote();
    let worker = start_worker(&l);
    with_logs(&l, &worker, || {
        let running = long_run(&l);
        l.script_reply(l.issue, "Started over, smaller, on the worker.");
        let replace = l.comment("bob", l.issue, "@ccbot /replace start over, smaller");
        l.wait(&running, "aborted");
        l.wait(&replace, "succeeded");
        let r = l.detail(&running);
        let n = l.detail(&replace);
        assert_eq!(r["task"]["errorCode"], "superseded", "{r}");
        assert_eq!(n["outbox"]["revertTurnId"], r["task"]["turnId"], "{n}");
        assert!(n["outbox"]["revertedAt"].is_string(), "{n}");
        // The worker's Codex reverted its thread: the model no longer sees
        // the stopped turn's instruction.
        let texts = request_with(&l, "start over, smaller");
        assert!(
            !texts.iter().any(|t| t.contains("rewrite the whole parser")),
            "{texts:?}"
        );
    });
}

#[test]
fn e2e_worker_the_repository_deadline_interrupts_a_stalled_turn_on_the_worker() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_AGENT_RUNTIME", "remote").env(
            "CODEX_BRIDGE_REPOSITORIES",
            r#"{"acme/widgets": {"turn_timeout_secs": 3}}"#,
        )
    });
    let worker = start_worker(&l);
    with_logs(&l, &worker, || {
        l.model().push(Step::hang());
        let task = l.comment("bob", l.issue, "@ccbot think hard");
        l.wait(&task, "timed_out");
        let d = l.detail(&task);
        assert_eq!(d["task"]["errorCode"], "turn_interrupted", "{d}");
        assert!(
            d["task"]["threadId"]
                .as_str()
                .is_some_and(|t| t.starts_with("remote:")),
            "the turn ran on the worker: {d}"
        );
        l.expect_one_receipt(&task, "timed_out");
        assert_eq!(l.model().requests().len(), 1, "never run again");
    });
}
