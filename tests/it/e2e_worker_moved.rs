//! A session's conversation outlives the worker whose Codex home holds its
//! thread. The server runs `agent_runtime = "remote"`; two workers are given
//! the same repository, each with a Codex home of its own (the real `codex
//! app-server`, the fake model). Worker A answers a comment and is revoked;
//! worker B takes the repository's lease, and a follow-up on the same Issue
//! runs there on a new thread given the stored exchange, recorded as the
//! session's next generation, rather than on A's thread, which B cannot
//! open. The model's request for the follow-up carries the earlier question
//! and answer; each comment gets one reply.

use crate::codexhome::CodexHome;
use crate::e2e::Loop;
use crate::e2e_moved_thread::{
    rebuilt_on_the_earlier_exchange, session_thread, ANSWERED, ASKED, FOLLOW_UP,
};
use crate::support::*;
use crate::workerproc::{lease_holder, WorkerEnv, WorkerProc};
use serde_json::json;
use std::time::Duration;

#[test]
fn e2e_worker_a_follow_up_after_the_threads_worker_was_revoked_goes_on_with_the_conversation_on_another(
) {
    let l = Loop::start_with(|b| b.env("CODEX_BRIDGE_AGENT_RUNTIME", "remote"));
    let a = WorkerProc::start(&l.app, "build-a", &["acme/widgets"], WorkerEnv::of(&l.app));
    wait_until("worker A's lease", Duration::from_secs(60), || {
        lease_holder(&l.app).as_deref() == Some(a.id.as_str())
    });
    // B's own Codex home, configured as the app's (the fake model).
    let b_home = CodexHome::new(l.model());
    std::fs::copy(l.app.codex_home().join("config.toml"), b_home.config_path()).unwrap();
    let b = WorkerProc::start(
        &l.app,
        "build-b",
        &["acme/widgets"],
        WorkerEnv {
            codex_home: b_home.path(),
            ..WorkerEnv::of(&l.app)
        },
    );
    let logs = || {
        eprintln!("worker A:\n{}", a.logs());
        eprintln!("worker B:\n{}", b.logs());
        eprintln!("server:\n{}", l.app.logs());
    };
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check(&l, &a, &b);
    }));
    if let Err(panic) = checked {
        logs();
        std::panic::resume_unwind(panic);
    }
    // Dropped in reverse order: worker B stops before its Codex home goes.
}

fn check(l: &Loop, a: &WorkerProc, b: &WorkerProc) {
    l.script_reply(l.issue, ANSWERED);
    let first = l.comment("bob", l.issue, ASKED);
    wait_task_state(&l.app.db_url, &first, "succeeded", Duration::from_secs(120));
    assert_eq!(attempt_owner(l, &first), format!("worker:{}", a.id));
    let mut c = connect(&l.app.db_url);
    let session = format!("default:acme/widgets:issue:{}", l.issue);
    let (old_thread, old_home, generation) = session_thread(&mut c, &session);
    assert_eq!(
        old_home.as_deref(),
        Some(home_id(&a.env.codex_home).as_str()),
        "the thread's home is worker A's"
    );

    // A is revoked; B, given the same repository, takes its lease.
    let revoked = l.app.admin_post(
        &format!("/api/gitea-workflow/workers/{}/revoke", a.id),
        &json!({"requestId": "revoke-build-a", "reason": "machine retired"}),
    );
    assert_eq!(revoked.status, 200, "{:?}", revoked.json);
    wait_until("worker B's lease", Duration::from_secs(60), || {
        lease_holder(&l.app).as_deref() == Some(b.id.as_str())
    });

    let asked_before = l.model().requests().len();
    l.script_reply(l.issue, "Each run now gets its own temp dir.");
    let follow_up = l.comment("bob", l.issue, FOLLOW_UP);
    wait_task_state(
        &l.app.db_url,
        &follow_up,
        "succeeded",
        Duration::from_secs(120),
    );
    assert_eq!(attempt_owner(l, &follow_up), format!("worker:{}", b.id));

    // A new thread in B's home, the session's next generation, once.
    let (new_thread, new_home, new_generation) = session_thread(&mut c, &session);
    assert_ne!(new_thread, old_thread);
    assert_eq!(
        new_home.as_deref(),
        Some(home_id(&b.env.codex_home).as_str())
    );
    assert_eq!(new_generation, generation + 1);
    rebuilt_on_the_earlier_exchange(l, &mut c, &follow_up, asked_before);
    // One reply per comment, each by its own task.
    for task in [&first, &follow_up] {
        let replies = l.bot_comments(l.issue, &format!("codex-bridge task={task} turn="));
        assert_eq!(replies.len(), 1, "{task}: {replies:?}");
    }
    assert_eq!(l.bot_comments(l.issue, "codex-bridge task=").len(), 2);
}

/// The id the bridge keeps in a Codex home (`codex-bridge-home-id`).
fn home_id(codex_home: &std::path::Path) -> String {
    std::fs::read_to_string(codex_home.join("codex-bridge-home-id"))
        .unwrap()
        .trim()
        .to_owned()
}

/// Who ran the task's last attempt.
fn attempt_owner(l: &Loop, task: &str) -> String {
    let d = l.detail(task);
    d["attempts"]
        .as_array()
        .and_then(|a| a.last())
        .and_then(|a| a["owner"].as_str())
        .unwrap_or_default()
        .to_owned()
}
