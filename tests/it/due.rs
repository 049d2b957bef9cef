//! Waiting tasks start when they become due, not at the next sweep: a
//! continuation after its backoff, a task in `retry_wait` after its wait.
//! The sweep here runs once an hour, so only the repo actor's own timer can
//! start them.

use crate::actors::{run, settings, Harness};
use crate::support::poll_until_async;
use codex_bridge::agent::scripted::{Script, ScriptedAgent, StartBehaviour, Step};
use codex_bridge::domain::workflow::CONTINUATION_TEXT;
use codex_bridge::lifecycle::TaskState;
use std::time::{Duration, Instant};

#[test]
fn a_continuation_starts_when_its_backoff_ends_without_a_sweep() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.offer_workflow_tools();
        rt.on(
            "@ccbot",
            Script::steps(vec![Step::Complete("part one".into())]),
        );
        rt.on(
            CONTINUATION_TEXT,
            Script::steps(vec![Step::Complete("part two".into())]),
        );
        let mut s = settings();
        s.sweep = Duration::from_secs(3600);
        s.workflows = true;
        s.continuation_backoff = Duration::from_secs(1);
        let h = Harness::start(rt, s);
        let first = h.comment("widgets", 1, 1, "@ccbot do the work").await;
        h.wait_state(&first, TaskState::Succeeded).await;
        let started = poll_until_async(Duration::from_secs(20), || async {
            h.runtime.calls().len() >= 2
        })
        .await;
        assert!(started, "the continuation did not start after its backoff");
        let calls = h.runtime.calls();
        assert!(
            calls[1].text.contains(CONTINUATION_TEXT),
            "{:?}",
            calls[1].text
        );
        // Not before its backoff.
        let ends: std::collections::HashMap<String, Instant> =
            h.runtime.ends().into_iter().collect();
        let gap = calls[1].at.duration_since(ends[&calls[0].turn_id]);
        assert!(gap >= Duration::from_millis(900), "started after {gap:?}");
        actix::System::current().stop();
    });
}

#[test]
fn a_retry_starts_when_its_wait_ends_without_a_sweep() {
    run(async {
        let rt = ScriptedAgent::new();
        // The first start finds the agent unavailable: nothing reached it,
        // so the task waits `retry_backoff` in `retry_wait`.
        rt.on(
            "@ccbot",
            Script {
                start: StartBehaviour::Unavailable,
                steps: vec![],
            },
        );
        let mut s = settings();
        s.sweep = Duration::from_secs(3600);
        s.retry_backoff = Duration::from_secs(1);
        let h = Harness::start(rt.clone(), s);
        let task = h.comment("widgets", 1, 1, "@ccbot try it").await;
        h.wait_state(&task, TaskState::RetryWait).await;
        rt.on("@ccbot", Script::steps(vec![Step::Complete("done".into())]));
        h.wait_state(&task, TaskState::Succeeded).await;
        actix::System::current().stop();
    });
}
