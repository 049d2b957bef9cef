//! A turn whose `turn/completed` never reaches the bridge, on real parts:
//! the real `codex app-server` behind the fault relay, which drops that one
//! notification. The thread settles idle; the bridge keeps that as a
//! candidate final, confirms it from the thread's history, and the task goes
//! on as if the end had arrived (its reply verified), instead of waiting for
//! the turn's deadline.

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
