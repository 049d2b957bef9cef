//! The idle candidate through the session actor (the scripted runtime): a
//! thread that settles idle while its turn goes on leaves a durable
//! candidate final; activity before it settles voids it, with no history
//! lookup; a candidate that settles is checked against the history, which
//! says the turn still runs, and the turn then ends as it really does.

use crate::actors::{run, settings, Harness};
use crate::support::poll_until_async;
use codex_bridge::agent::scripted::{Script, ScriptedAgent, Step};
use codex_bridge::lifecycle::TaskState;
use std::time::Duration;

/// Whether the task's turn holds an idle candidate now.
async fn candidate(h: &Harness, task: &codex_bridge::domain::TaskId) -> bool {
    h.detail(task)
        .await
        .turns
        .iter()
        .any(|t| t.idle_at.is_some())
}

#[test]
fn activity_after_an_idle_status_voids_the_candidate_without_a_lookup() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.on(
            "@ccbot",
            Script::steps(vec![
                Step::Idle,
                Step::Sleep(Duration::from_secs(2)),
                Step::Progress("agentMessage"),
                Step::Complete("done".into()),
            ]),
        );
        let mut s = settings();
        // Far longer than the pause before the activity.
        s.idle_settle = Duration::from_secs(60);
        let h = Harness::start(rt, s);
        let task = h.comment("widgets", 1, 1, "@ccbot do the work").await;
        let seen = poll_until_async(Duration::from_secs(20), || candidate(&h, &task)).await;
        assert!(seen, "the idle status left no durable candidate");
        h.wait_state(&task, TaskState::Succeeded).await;
        assert!(!candidate(&h, &task).await, "the activity voided it");
        let actions = h.actions(&task).await;
        assert!(
            !actions.iter().any(|a| a == "turn.idle_checked"),
            "{actions:?}"
        );
        actix::System::current().stop();
    });
}

#[test]
fn a_settled_candidate_whose_turn_still_runs_is_not_an_end() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.on(
            "@ccbot",
            Script::steps(vec![
                Step::Idle,
                Step::Sleep(Duration::from_secs(2)),
                Step::Complete("the real end".into()),
            ]),
        );
        let mut s = settings();
        s.idle_settle = Duration::from_millis(200);
        let h = Harness::start(rt, s);
        let task = h.comment("widgets", 1, 1, "@ccbot do the work").await;
        h.wait_state(&task, TaskState::Succeeded).await;
        let actions = h.actions(&task).await;
        assert!(
            actions.iter().any(|a| a == "turn.idle_checked"),
            "{actions:?}"
        );
        let d = h.detail(&task).await;
        assert_eq!(d.turns.len(), 1);
        assert_eq!(d.turns[0].status, "completed");
        assert!(d.turns[0].idle_at.is_none());
        actix::System::current().stop();
    });
}
