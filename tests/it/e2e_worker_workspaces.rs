//! What a session leaves on a remote worker's disk, end to end (the server
//! runs `agent_runtime = "remote"`, a `codex-bridge worker` process runs
//! the turns on the real `codex app-server` against the fake model): an
//! untrusted pull request's thread gets the base branch's `AGENTS.md`, read
//! from the worker's clone, and never the fork's; the worktree's state is
//! recorded when a turn ends, so a worktree changed behind the bridge's
//! back holds its next turn; a worktree past its retention is removed from
//! the worker's disk with its uncommitted work kept under a ref there.

use crate::e2e::Loop;
use crate::fakemodel::Step;
use crate::fork::fork_pull;
use crate::support::*;
use crate::workerproc::{WorkerEnv, WorkerProc};
use crate::workspace::git;
use std::path::PathBuf;
use std::time::Duration;

/// A remote-runtime server, one comment per turn, with `extra` settings.
fn remote(extra: &[(&str, &str)]) -> Loop {
    Loop::start_with(|b| {
        let mut b = b
            .env("CODEX_BRIDGE_AGENT_RUNTIME", "remote")
            .env("CODEX_BRIDGE_WORKFLOWS", "false");
        for (k, v) in extra {
            b = b.env(k, v);
        }
        b
    })
}

fn start_worker(l: &Loop) -> WorkerProc {
    WorkerProc::start(&l.app, "build-1", &["acme/widgets"], WorkerEnv::of(&l.app))
}

/// The session's worktree on the worker's disk.
fn worktree(worker: &WorkerProc, number: i64) -> PathBuf {
    worker
        .dir()
        .join(format!("ws/.worktrees/default/acme/widgets/issue-{number}"))
}

/// Waits for `task` to reach `state`, showing both logs if it does not.
fn wait_logged(l: &Loop, worker: &WorkerProc, task: &str, state: &str) {
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_task_state(&l.app.db_url, task, state, Duration::from_secs(120))
    }));
    if let Err(panic) = waited {
        eprintln!("task: {}", l.detail(task));
        eprintln!("worker log:\n{}", worker.logs());
        eprintln!("server log:\n{}", l.app.logs());
        std::panic::resume_unwind(panic);
    }
}

/// A turn on the Issue that runs `cmd` in its worktree, then answers.
fn turn(l: &Loop, cmd: &str, ask: &str) -> String {
    l.model().push(Step::shell(cmd));
    l.script_reply(l.issue, &format!("Ran `{cmd}`."));
    l.comment("bob", l.issue, &format!("@ccbot {ask}"))
}

#[test]
fn e2e_worker_an_untrusted_pull_request_gets_the_base_branchs_agents_md_from_the_worker() {
    let l = remote(&[]);
    let worker = start_worker(&l);
    let pr = fork_pull(&l);
    l.model()
        .push(Step::message("The change looks harmless; see AGENTS.md."));
    let task = l.comment("bob", pr, "@ccbot review this");
    wait_logged(&l, &worker, &task, "succeeded");

    let d = l.detail(&task);
    let thread = d["task"]["threadId"].as_str().unwrap();
    assert!(thread.starts_with("remote:"), "ran on the worker: {thread}");
    let requests = l.model().requests();
    assert_eq!(requests.len(), 1, "one model request");
    let text = requests[0].to_string();
    assert!(
        text.contains("BASE-RULE-7f3a"),
        "the base branch's AGENTS.md is missing"
    );
    assert!(
        !text.contains("FORK-RULE-c91d"),
        "the fork's AGENTS.md reached the model"
    );
    let trust = d["audit"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "thread.trust")
        .cloned()
        .unwrap();
    assert_eq!(trust["metadata"]["policy"]["trust"], "untrusted");
    assert_eq!(trust["metadata"]["baseInstructions"], true);
}

#[test]
fn e2e_worker_the_worktree_state_is_recorded_and_checked_on_the_worker() {
    let l = remote(&[]);
    let worker = start_worker(&l);
    let t = turn(&l, "printf one > a.txt", "start the parser fix");
    wait_logged(&l, &worker, &t, "succeeded");
    let wt = worktree(&worker, l.issue);
    assert!(wt.join("a.txt").exists(), "the turn ran on the worker");

    // What the worker's worktree holds, recorded with the turn's end.
    let head = git(&wt, &["rev-parse", "HEAD"]);
    let mut c = connect(&l.app.db_url);
    assert_eq!(
        count_where(
            &mut c,
            "worktrees",
            &format!("head = '{head}' AND tree IS NOT NULL AND recorded_at IS NOT NULL"),
        ),
        1,
        "the worktree's state is recorded"
    );

    // Changed behind the bridge's back: the next turn waits for an operator.
    std::fs::write(wt.join("a.txt"), "edited by hand\n").unwrap();
    let asked = l.model().requests().len();
    let blocked = l.comment("bob", l.issue, "@ccbot go on");
    wait_logged(&l, &worker, &blocked, "blocked_workspace");
    assert_eq!(l.detail(&blocked)["task"]["errorCode"], "workspace_dirty");
    assert_eq!(
        std::fs::read_to_string(wt.join("a.txt")).unwrap(),
        "edited by hand\n",
        "nothing in the worktree was reset"
    );
    assert_eq!(l.model().requests().len(), asked, "the held turn never ran");
}

#[test]
fn e2e_worker_a_worktree_past_its_retention_is_removed_from_the_worker() {
    let l = remote(&[("CODEX_BRIDGE_WORKTREE_RETENTION_HOURS", "1")]);
    let worker = start_worker(&l);
    let t = turn(&l, "printf one > a.txt", "start");
    wait_logged(&l, &worker, &t, "succeeded");
    let wt = worktree(&worker, l.issue);
    assert!(wt.join("a.txt").exists(), "the turn ran on the worker");

    // Two hours later, as the store sees it.
    let mut c = connect(&l.app.db_url);
    exec(
        &mut c,
        "UPDATE worktrees SET prepared_at = '2000-01-01T00:00:00.000000Z', \
         recorded_at = '2000-01-01T00:00:00.000000Z'",
    )
    .unwrap();
    let gone = poll_until(Duration::from_secs(60), || {
        !wt.exists() && count_where(&mut c, "worktrees", "removed_at IS NOT NULL") == 1
    });
    if !gone {
        eprintln!("worker log:\n{}", worker.logs());
        eprintln!("server log:\n{}", l.app.logs());
        panic!(
            "the worktree was not retired from the worker (folder there: {})",
            wt.exists()
        );
    }
    assert_eq!(
        count_where(
            &mut c,
            "audit_events",
            "action = 'worktree.retired' AND metadata LIKE '%\"removed\":true%'"
        ),
        1
    );
    // The uncommitted work is kept in the worker's clone.
    let clone = worker.dir().join("ws/default/acme/widgets");
    let kept = format!("refs/codex-bridge/retired/issue-{}", l.issue);
    assert_eq!(git(&clone, &["show", &format!("{kept}:a.txt")]), "one");
    assert!(
        !l.app.dir().join("ws/.worktrees").exists(),
        "nothing was made in the server's workspaces"
    );
}
