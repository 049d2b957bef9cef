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

/// A `/steer` while the real turn works: the bridge sends `turn/steer` into
/// that turn, Codex hands the text to the model in the turn's next request
/// and echoes the steer's operation id inside the same turn, and the turn's
/// one answer covers both comments.
#[test]
fn e2e_a_steer_joins_the_running_turn_and_reaches_the_model_inside_it() {
    let l = Loop::start();
    // The turn's first model request answers with a command after a pause,
    // so Codex asks the model again within the same turn: the steer rides
    // along in that request.
    l.model()
        .push(Step::shell("echo looked").delayed(std::time::Duration::from_secs(4)));
    l.script_reply(l.issue, "Fixed the parser and the changelog.");
    let running = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&running, "running");
    l.model()
        .wait_for_requests(1, std::time::Duration::from_secs(60));
    let steer = l.comment("bob", l.issue, "@ccbot /steer also update the changelog");
    l.wait(&steer, "succeeded");
    l.wait(&running, "succeeded");

    let r = l.detail(&running);
    let s = l.detail(&steer);
    let turn = r["task"]["turnId"]
        .as_str()
        .expect("the run's turn")
        .to_owned();
    assert_eq!(s["task"]["steeredInto"], running, "{s}");
    assert_eq!(s["outbox"]["acceptedTurnId"], turn.as_str(), "{s}");
    // The entry in the seed's terms: an automatic send into the observed run.
    assert_eq!(s["outbox"]["intent"], "automatic", "{s}");
    assert_eq!(s["outbox"]["sendMode"], "steer-running", "{s}");
    assert_eq!(s["outbox"]["expectedActiveRunId"], turn.as_str(), "{s}");
    assert!(s["outbox"]["handoffPhase"].is_null(), "{s}");
    assert!(s["turns"].as_array().is_some_and(|t| t.is_empty()), "{s}");
    // Codex recorded the steer's user message, with its operation id, inside
    // the run's turn (the drive saw the echo live).
    let ledger = &s["ledger"][0];
    assert_eq!(ledger["status"], "sent", "{s}");
    assert_eq!(ledger["turnId"], turn.as_str(), "{s}");
    // The model saw the steer in a later request of the same turn: the first
    // request did not carry it, a later one did, and no other turn began.
    let requests = l.model().requests();
    let carries = |i: usize| {
        crate::fakemodel::user_texts(&requests[i])
            .iter()
            .any(|t| t.contains("also update the changelog"))
    };
    assert!(!carries(0));
    assert!((1..requests.len()).any(carries), "{requests:?}");
    assert_eq!(r["turns"].as_array().map(Vec::len), Some(1), "{r}");
    wait_posted(&l);
    let joined = l.bot_comments(l.issue, &format!("receipt={steer}:answer"));
    assert_eq!(joined.len(), 1, "{:?}", bodies(&joined));
    assert!(bodies(&joined)[0].contains(&running));
}
