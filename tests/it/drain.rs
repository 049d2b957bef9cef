//! Graceful drain on SIGTERM, on the real binary with the real
//! `codex app-server`, the fake model and the Gitea simulator: webhooks are
//! still taken, no new turn starts, the turn under way finishes and its
//! reply is verified, the server exits 0; what was queued runs after the
//! next start. Past `drain_timeout_secs` the turn still running is
//! interrupted like any abort.

use crate::e2e::Loop;
use crate::fakemodel::{Gate, Step};
use crate::support::*;
use std::time::Duration;

#[test]
fn on_sigterm_the_turn_under_way_finishes_new_work_waits_and_the_server_exits_0() {
    let mut l = Loop::start_with(|b| b.env("CODEX_BRIDGE_DRAIN_TIMEOUT_SECS", "120"));
    let n = l.issue;
    let gate = Gate::new();
    l.model()
        .push(Step::shell("echo DRAIN-WORKING").gated(&gate));
    l.script_reply(n, "First one done.");
    let first = l.comment("bob", n, "@ccbot DRAIN-FIRST: look at the parser");
    wait_until(
        "the first turn is under way",
        Duration::from_secs(90),
        || l.model().asked("DRAIN-FIRST") >= 1,
    );

    l.app.terminate();
    wait_until("the drain began", Duration::from_secs(30), || {
        l.app.logs().contains("draining")
    });
    // Webhooks are still taken, durably, while the turn finishes.
    l.script_reply(n, "Second one done.");
    let second = l.comment("bob", n, "@ccbot DRAIN-SECOND: and the docs");
    assert_eq!(
        task_state(&mut l.app.db(), &second).as_deref(),
        Some("queued")
    );
    gate.open();
    l.wait(&first, "succeeded");
    let status = l
        .app
        .wait_exit(Duration::from_secs(60))
        .expect("the server exits once its turn is done");
    assert!(status.success(), "{status:?}");
    // No new turn started while draining.
    assert_eq!(l.model().asked("DRAIN-SECOND"), 0);
    assert_eq!(
        task_state(&mut l.app.db(), &second).as_deref(),
        Some("queued")
    );
    assert_eq!(l.bot_comments(n, "First one done").len(), 1);

    // The next start runs what waited.
    l.app.start_again();
    l.wait(&second, "succeeded");
    assert_eq!(l.bot_comments(n, "Second one done").len(), 1);
}

#[test]
fn past_the_drain_timeout_the_turn_still_running_is_interrupted_and_the_server_exits_0() {
    let mut l = Loop::start_with(|b| b.env("CODEX_BRIDGE_DRAIN_TIMEOUT_SECS", "1"));
    let n = l.issue;
    let gate = Gate::new();
    l.model().push(Step::shell("echo NEVER-DONE").gated(&gate));
    let task = l.comment("bob", n, "@ccbot DRAIN-LONG: a long one");
    wait_until("the turn is under way", Duration::from_secs(90), || {
        l.model().asked("DRAIN-LONG") >= 1
    });
    l.app.terminate();
    let status = l
        .app
        .wait_exit(Duration::from_secs(90))
        .expect("the server exits after interrupting the turn");
    assert!(status.success(), "{status:?}");
    let mut c = l.app.db();
    assert_eq!(task_state(&mut c, &task).as_deref(), Some("aborted"));
    assert_eq!(
        count_where(
            &mut c,
            "audit_events",
            &format!("action = 'task.abort' AND actor = 'system:drain' AND task_id = '{task}'")
        ),
        1
    );
    gate.open();
}
