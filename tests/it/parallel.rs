//! Turns of one repository in different sessions' worktrees run at once, up
//! to `max_parallel_turns_per_repo`; a session never runs two of its own at
//! once, and the default keeps one turn per repository.

use crate::actors::{run, settings, Harness};
use codex_bridge::agent::scripted::{Script, ScriptedAgent, Step};
use codex_bridge::lifecycle::TaskState;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Each turn: `(its comment's text, started, ended)`.
fn turns(h: &Harness) -> Vec<(String, Instant, Instant)> {
    let ends: HashMap<String, Instant> = h.runtime.ends().into_iter().collect();
    h.runtime
        .calls()
        .into_iter()
        .map(|c| (c.text.clone(), c.at, ends[&c.turn_id]))
        .collect()
}

/// The most turns that ran at one moment.
fn most_at_once(turns: &[(String, Instant, Instant)]) -> usize {
    turns
        .iter()
        .map(|(_, at, _)| {
            turns
                .iter()
                .filter(|(_, start, end)| start <= at && at < end)
                .count()
        })
        .max()
        .unwrap_or(0)
}

fn slow_agent() -> ScriptedAgent {
    let rt = ScriptedAgent::new();
    rt.on(
        "slow",
        Script::steps(vec![
            Step::Sleep(Duration::from_millis(400)),
            Step::Complete("ok".into()),
        ]),
    );
    rt
}

/// Five comments on one repository: two on issue 1 first (the second must
/// wait for the first, though a place is free), then issues 2, 3 and 4.
async fn five_comments(h: &Harness) -> Vec<codex_bridge::domain::TaskId> {
    let mut ids = Vec::new();
    for (n, (issue, text)) in [
        (1, "@ccbot slow a1"),
        (1, "@ccbot slow a2"),
        (2, "@ccbot slow b"),
        (3, "@ccbot slow c"),
        (4, "@ccbot slow d"),
    ]
    .into_iter()
    .enumerate()
    {
        ids.push(h.comment("widgets", issue, n as i64 + 1, text).await);
    }
    ids
}

#[test]
fn turns_of_different_sessions_run_at_once_up_to_the_repositorys_places() {
    run(async {
        let mut s = settings();
        s.max_parallel_turns = 2;
        let h = Harness::start(slow_agent(), s);
        let ids = five_comments(&h).await;
        h.wait_all(&ids, TaskState::Succeeded).await;
        let turns = turns(&h);
        assert_eq!(turns.len(), 5);
        assert_eq!(most_at_once(&turns), 2, "{turns:?}");
        // Issue 1's two turns, one after the other, in arrival order.
        let a1 = turns.iter().find(|t| t.0.contains("a1")).unwrap();
        let a2 = turns.iter().find(|t| t.0.contains("a2")).unwrap();
        assert!(a1.2 <= a2.1, "a session ran two turns at once");
        // Issue 1's second message waits without taking a place: issue 2's
        // turn ran beside issue 1's first.
        let b = turns.iter().find(|t| t.0.contains("slow b")).unwrap();
        assert!(b.1 < a1.2, "issue 2 waited for issue 1: {turns:?}");
        actix::System::current().stop();
    });
}

#[test]
fn by_default_a_repository_runs_one_turn_at_a_time() {
    run(async {
        let h = Harness::start(slow_agent(), settings());
        let ids = five_comments(&h).await;
        h.wait_all(&ids, TaskState::Succeeded).await;
        let turns = turns(&h);
        assert_eq!(turns.len(), 5);
        assert_eq!(most_at_once(&turns), 1, "{turns:?}");
        actix::System::current().stop();
    });
}
