//! Turnless commands on real parts: the Gitea simulator sends the signed
//! webhook, the real `codex app-server` runs the turn a `/stop` interrupts
//! (its model stream held open by the fake model), and each command's one
//! answer is a bot comment in the same thread, found by its marker.

use crate::e2e::Loop;
use crate::fakemodel::Step;
use crate::support::*;
use serde_json::Value;

/// Waits until the receipts worker has posted every answer and receipt.
fn wait_posted(l: &Loop) {
    let db = l.app.db_url.clone();
    l.app.wait_for("answers posted", || {
        let mut c = connect(&db);
        count_where(&mut c, "comments", "status IN ('pending', 'posting')") == 0
    });
}

fn bodies(found: &[Value]) -> Vec<String> {
    found
        .iter()
        .map(|c| c["body"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn e2e_help_status_and_stop_are_answered_in_the_thread_and_stop_ends_the_real_turn() {
    let l = Loop::start();
    let help = l.comment("bob", l.issue, "@ccbot /help");
    l.wait(&help, "succeeded");
    wait_posted(&l);
    let answers = l.bot_comments(l.issue, &format!("receipt={help}:answer"));
    assert_eq!(answers.len(), 1, "{:?}", bodies(&answers));
    assert!(bodies(&answers)[0].contains("/interrupt"));
    assert!(
        l.bot_comments(l.issue, &format!("receipt={help}:status:"))
            .is_empty(),
        "no \"received\" receipt for a turnless command"
    );
    assert!(l.model().requests().is_empty(), "no turn for /help");

    // A real turn whose model stream stays open: it runs until stopped.
    l.model().push(Step::Hang);
    let running = l.comment("bob", l.issue, "@ccbot take your time");
    l.wait(&running, "running");
    let status = l.comment("bob", l.issue, "@ccbot /status");
    l.wait(&status, "succeeded");
    wait_posted(&l);
    let found = l.bot_comments(l.issue, &format!("<!-- codex-bridge status={status} -->"));
    assert_eq!(found.len(), 1, "{:?}", bodies(&found));
    assert!(
        bodies(&found)[0].contains(&format!("`{running}`: `running`")),
        "{:?}",
        bodies(&found)
    );

    let stop = l.comment("bob", l.issue, "@ccbot /stop");
    l.wait(&stop, "succeeded");
    l.wait(&running, "aborted");
    wait_posted(&l);
    let stopping = l.bot_comments(l.issue, &format!("receipt={stop}:answer"));
    assert_eq!(stopping.len(), 1);
    assert!(bodies(&stopping)[0].contains(&format!("Stopping task `{running}`")));
    // The one turn the model saw is the stopped one: no command became a turn.
    let d = l.detail(&running);
    assert!(d["task"]["turnId"].is_string(), "{d}");
    assert_eq!(l.detail(&stop)["task"]["command"], "stop");
}
