//! A turn whose `turn/completed` never reaches the bridge, on real parts:
//! the real `codex app-server` behind the fault relay, which drops that one
//! notification. The thread settles idle; the bridge keeps that as a
//! candidate final, confirms it from the thread's history, and the task goes
//! on as if the end had arrived (its reply verified), instead of waiting for
//! the turn's deadline; killed while the candidate waits to be confirmed,
//! the restarted bridge reads the end from the history and the same
//! workflow goes on.

use crate::e2e::actions;
use crate::e2e_races::with_relay;
use crate::relay::Relay;
use crate::support::*;
use serde_json::json;
use std::time::Duration;

#[test]
fn e2e_a_turn_whose_completion_is_lost_ends_when_its_idle_thread_is_confirmed() {
    let relay = Relay::new();
    relay.set_rules(json!([
        {"method": "turn/completed", "action": "drop", "from": "server"}
    ]));
    let l = with_relay(&relay);
    l.script_reply(l.issue, "Fixed the flaky test.");
    let task = l.comment("bob", l.issue, "@ccbot fix the flaky test");
    relay.wait_logged("drop turn/completed", Duration::from_secs(90));
    l.wait(&task, "succeeded");
    let d = l.detail(&task);
    let acts = actions(&d);
    assert!(acts.contains(&"turn.idle_checked".to_owned()), "{acts:?}");
    assert_eq!(d["turns"][0]["status"], "completed", "{d}");
    // The candidate was cleared once the history confirmed it.
    let mut c = connect(&l.app.db_url);
    assert_eq!(
        count_where(
            &mut c,
            "turns",
            &format!("task_id = '{task}' AND idle_at IS NOT NULL")
        ),
        0
    );
    assert_eq!(
        l.bot_comments(l.issue, &format!("codex-bridge task={task}"))
            .len(),
        1
    );
}

/// The candidate is durable: killed after the thread settled idle (its
/// `turn/completed` lost) and before the candidate was confirmed, the
/// restarted bridge finds the turn's end in the history and the same open
/// workflow goes on (its continuation completes it); nothing is replayed.
#[test]
fn e2e_killed_with_an_idle_candidate_the_same_workflow_goes_on_after_the_restart() {
    let relay = Relay::new();
    relay.set_rules(json!([
        {"method": "turn/completed", "action": "drop", "from": "server"}
    ]));
    let bin = relay.bin().to_string_lossy().into_owned();
    let mut l = crate::e2e::Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_CODEX_BIN", &bin)
            .env("CODEX_BRIDGE_WORKFLOWS", "true")
            .env("CODEX_BRIDGE_CONTINUATION_BACKOFF_SECS", "1")
    });
    l.script_reply(l.issue, "Fixed the flaky test.");
    l.model()
        .push(crate::e2e_workflow::complete("Flaky test fixed."));
    l.model()
        .push(crate::fakemodel::Step::message("The flaky test is fixed."));
    let task = l.comment("bob", l.issue, "@ccbot fix the flaky test");
    let db = l.app.db_url.clone();
    let candidate = || {
        count_where(
            &mut connect(&db),
            "turns",
            &format!("task_id = '{task}' AND idle_at IS NOT NULL"),
        ) == 1
    };
    wait_until("the idle candidate", Duration::from_secs(90), candidate);
    l.app.kill9();
    assert!(candidate(), "the candidate outlived the process");
    relay.set_rules(json!([]));
    l.app.start_again();

    l.wait(&task, "succeeded");
    let id = crate::e2e_workflow::workflow_of(&l, &task);
    let cont = crate::e2e_workflow::continuation(&l, 1);
    l.wait(&cont, "succeeded");
    let w = crate::e2e_workflow::workflow(&l, &id);
    assert_eq!(
        w.state,
        codex_bridge::domain::workflow::WorkflowState::Completed
    );
    assert_eq!(w.continuations, 1);
    assert_eq!(
        crate::e2e_workflow::workflow_of(&l, &cont),
        id,
        "the same workflow"
    );
    let d = l.detail(&task);
    assert_eq!(d["turns"].as_array().map(Vec::len), Some(1), "{d}");
    assert_eq!(
        l.bot_comments(l.issue, &format!("codex-bridge task={task}"))
            .len(),
        1,
        "one reply"
    );
}
