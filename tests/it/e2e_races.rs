//! The send modes at their races, on real parts: the real `codex
//! app-server` behind the fault relay (`relay.rs`), which puts Codex into
//! the moment a race would — a steer that reaches it only after its turn
//! ended, a steer or an interrupt lost on the way — and answers with Codex's
//! own answers. The fake model's gates hold a turn at a known point.

use crate::e2e::{actions, Loop};
use crate::e2e_interrupt::{history, text};
use crate::fakemodel::{user_texts, Gate, Step};
use crate::relay::Relay;
use crate::support::*;
use codex_bridge::agent::TurnLookup;
use serde_json::{json, Value};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(90);

pub(crate) fn with_relay(relay: &Relay) -> Loop {
    let bin = relay.bin().to_string_lossy().into_owned();
    Loop::start_with(|b| b.env("CODEX_BRIDGE_CODEX_BIN", &bin))
}

/// Indexes of the model requests that carry `needle`.
fn requests_carrying(l: &Loop, needle: &str) -> Vec<usize> {
    l.model()
        .requests()
        .iter()
        .enumerate()
        .filter(|(_, r)| user_texts(r).iter().any(|t| t.contains(needle)))
        .map(|(i, _)| i)
        .collect()
}

fn outbox_where(l: &Loop, task: &str, clause: &str) -> bool {
    count_where(
        &mut connect(&l.app.db_url),
        "outbox_entries",
        &format!("task_id = '{task}' AND {clause}"),
    ) > 0
}

/// A turn that waits at the model until the test says so (`gate`), then
/// answers in the thread; returns its task.
fn gated_run(l: &Loop, gate: &Gate) -> String {
    l.model().push(Step::shell("echo looked").gated(gate));
    l.script_reply(l.issue, "Fixed the parser.");
    let running = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&running, "running");
    l.model().wait_for_requests(1, LONG);
    running
}

/// A run hanging at the model until stopped; returns its task.
fn hanging_run(l: &Loop) -> String {
    l.model().push(Step::Hang);
    let running = l.comment("bob", l.issue, "@ccbot rewrite the whole parser");
    l.wait(&running, "running");
    l.model().wait_for_requests(1, LONG);
    running
}

/// The steer was admitted into the running turn (its entry `sending` with
/// the ledger's claim), but Codex gets it only after that turn ended: Codex
/// refuses it, the bridge takes it back to the queue, and it runs once as a
/// turn of its own under the same operation id.
#[test]
fn e2e_a_steer_whose_turn_ended_before_codex_took_it_runs_once_as_its_own_turn() {
    let relay = Relay::new();
    relay.set_rules(json!([
        {"method": "turn/steer", "action": "hold", "until": "turn/completed"}
    ]));
    let l = with_relay(&relay);
    let gate = Gate::new();
    let running = gated_run(&l, &gate);
    l.script_reply(l.issue, "Updated the changelog.");
    let steer = l.comment("bob", l.issue, "@ccbot /steer also update the changelog");
    relay.wait_logged("hold turn/steer", LONG);
    assert!(outbox_where(&l, &steer, "status = 'sending'"));
    gate.open();
    l.wait(&running, "succeeded");
    l.wait(&steer, "succeeded");
    relay.wait_logged("release turn/steer after turn/completed", LONG);

    let r = l.detail(&running);
    let s = l.detail(&steer);
    let run_turn = text(&r["task"]["turnId"]);
    let own_turn = text(&s["task"]["turnId"]);
    assert!(s["task"]["steeredInto"].is_null(), "{s}");
    assert!(
        actions(&s).contains(&"steer.not_admitted".to_owned()),
        "{:?}",
        actions(&s)
    );
    assert_eq!(s["outbox"]["mode"], "enqueue", "{s}");
    assert_eq!(s["turns"].as_array().map(Vec::len), Some(1), "{s}");
    // One claim of the operation, the one of its own turn.
    let ledger = s["ledger"].as_array().expect("the ledger rows");
    assert_eq!(ledger.len(), 1, "{s}");
    assert_eq!(ledger[0]["status"], "sent", "{s}");
    assert_eq!(text(&ledger[0]["turnId"]), own_turn);
    assert_ne!(own_turn, run_turn);
    // Codex's own history: the operation is the user message of a turn of
    // its own, not of the run's.
    let thread = text(&s["task"]["threadId"]);
    let op = text(&s["outbox"]["operationId"]);
    assert!(
        matches!(history(&l, &thread, &op), TurnLookup::Completed { turn_id, .. } if turn_id == own_turn)
    );
    // The model saw the text only after the run's three requests, in a turn
    // that began after the run's.
    let carrying = requests_carrying(&l, "also update the changelog");
    assert!(!carrying.is_empty(), "the model never saw the steer");
    assert!(carrying.iter().all(|&i| i >= 3), "{carrying:?}");
}

/// Held, then sent now: the steer's `turn/steer` is lost on the way, so
/// after the send path's limit nothing shows Codex took it and it is held
/// (`steer_unconfirmed`). The operator's "stop and send now" interrupts the
/// real run, withdraws the claim and runs the message once as its own turn.
#[test]
fn e2e_a_lost_steer_is_held_and_sent_now_stops_the_real_run_and_runs_once() {
    let relay = Relay::new();
    relay.set_rules(json!([{"method": "turn/steer", "action": "drop"}]));
    let l = with_relay(&relay);
    let running = hanging_run(&l);
    l.script_reply(l.issue, "Fixed the docs.");
    let steer = l.comment("bob", l.issue, "@ccbot /steer also fix the docs");
    relay.wait_logged("drop turn/steer", LONG);
    wait_until("the steer held", LONG, || {
        outbox_where(&l, &steer, "auto_drain = false AND status = 'queued'")
    });
    let held = l.detail(&steer);
    assert_eq!(held["outbox"]["holdReason"], "steer_unconfirmed", "{held}");
    assert!(requests_carrying(&l, "also fix the docs").is_empty());
    assert_eq!(l.detail(&running)["task"]["state"], "running");

    relay.set_rules(json!([]));
    let q = text(&held["outbox"]["queueId"]);
    let ok = l.app.admin_post(
        &format!("/api/gitea-workflow/outbox/{q}/send-now"),
        &json!({"requestId": "send-1", "reason": "the steer was lost"}),
    );
    assert_eq!(ok.status, 200, "{:?}", ok.json);
    l.wait(&running, "aborted");
    l.wait(&steer, "succeeded");

    let r = l.detail(&running);
    let s = l.detail(&steer);
    assert_eq!(r["task"]["errorCode"], "superseded", "{r}");
    assert_eq!(s["outbox"]["handoffPhase"], "dedicated", "{s}");
    assert_eq!(s["turns"].as_array().map(Vec::len), Some(1), "{s}");
    let a = actions(&s);
    for phase in [
        "outbox.send_now",
        "outbox.handoff.interrupting",
        "outbox.handoff.revoked",
        "outbox.handoff.dedicated",
    ] {
        assert!(a.contains(&phase.to_owned()), "{phase}: {a:?}");
    }
    let thread = text(&s["task"]["threadId"]);
    assert_eq!(
        history(&l, &thread, &text(&r["outbox"]["operationId"])),
        TurnLookup::Interrupted {
            turn_id: text(&r["task"]["turnId"])
        }
    );
    let own_turn = text(&s["task"]["turnId"]);
    assert!(matches!(
        history(&l, &thread, &text(&s["outbox"]["operationId"])),
        TurnLookup::Completed { turn_id, .. } if turn_id == own_turn
    ));
    // Sent once: the requests that carry it are those of its own turn.
    let carrying = requests_carrying(&l, "also fix the docs");
    assert!(!carrying.is_empty() && carrying[0] >= 1, "{carrying:?}");
}

/// The same, with the process killed while the handoff waited for the run
/// to settle (its interrupt lost): after the restart the run is found
/// interrupted in Codex's history, and the handoff goes on from its phase:
/// the message runs once.
#[test]
fn e2e_a_send_now_killed_while_interrupting_goes_on_after_the_restart() {
    let relay = Relay::new();
    relay.set_rules(json!([{"method": "turn/steer", "action": "drop"}]));
    let mut l = with_relay(&relay);
    let running = hanging_run(&l);
    l.script_reply(l.issue, "Fixed the docs.");
    let steer = l.comment("bob", l.issue, "@ccbot /steer also fix the docs");
    wait_until("the steer held", LONG, || {
        outbox_where(&l, &steer, "auto_drain = false AND status = 'queued'")
    });
    relay.set_rules(json!([{"method": "turn/interrupt", "action": "drop"}]));
    let q = text(&l.detail(&steer)["outbox"]["queueId"]);
    let ok = l.app.admin_post(
        &format!("/api/gitea-workflow/outbox/{q}/send-now"),
        &json!({"requestId": "send-1", "reason": "the steer was lost"}),
    );
    assert_eq!(ok.status, 200, "{:?}", ok.json);
    relay.wait_logged("drop turn/interrupt", LONG);
    assert!(outbox_where(&l, &steer, "handoff_phase = 'interrupting'"));
    l.app.kill9();
    relay.set_rules(json!([]));
    l.app.start_again();

    // The run died with its app-server; the restarted one's history shows
    // its turn interrupted, so it ends as the stop asked, and the handoff
    // goes on from the phase it had written.
    l.wait(&running, "aborted");
    l.wait(&steer, "succeeded");
    let r = l.detail(&running);
    assert_eq!(r["task"]["errorCode"], "superseded", "{r}");
    let s = l.detail(&steer);
    assert_eq!(s["outbox"]["handoffPhase"], "dedicated", "{s}");
    assert_eq!(s["turns"].as_array().map(Vec::len), Some(1), "{s}");
    let ledger: Vec<&Value> = s["ledger"].as_array().unwrap().iter().collect();
    assert_eq!(ledger.len(), 1, "{s}");
    assert_eq!(ledger[0]["status"], "sent", "{s}");
    let thread = text(&s["task"]["threadId"]);
    assert!(matches!(
        history(&l, &thread, &text(&s["outbox"]["operationId"])),
        TurnLookup::Completed { .. }
    ));
}

/// An `/interrupt` whose stop never reaches Codex: the run does not settle
/// within the 10 s limit, so the message goes back to the queue's order
/// (`not_settled`) and starts nothing; the run follows the 15 s interrupt
/// rule (the runtime is reset, the task waits for an operator), and once
/// an operator settled it the message runs as an ordinary turn.
#[test]
fn e2e_an_interrupt_whose_run_does_not_settle_goes_back_to_the_queue() {
    let relay = Relay::new();
    relay.set_rules(json!([{"method": "turn/interrupt", "action": "drop"}]));
    let l = with_relay(&relay);
    let running = hanging_run(&l);
    l.script_reply(l.issue, "Fixed only the flaky test.");
    let now = l.comment("bob", l.issue, "@ccbot /interrupt just fix the flaky test");
    relay.wait_logged("drop turn/interrupt", LONG);
    wait_until("the message back in the queue's order", LONG, || {
        actions(&l.detail(&now)).contains(&"message.back_in_queue".to_owned())
    });
    let n = l.detail(&now);
    let back = n["audit"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action"] == "message.back_in_queue")
        .unwrap();
    assert_eq!(back["errorCode"], "not_settled", "{back}");
    assert_eq!(n["task"]["state"], "queued", "{n}");
    assert_eq!(n["outbox"]["mode"], "enqueue", "{n}");
    l.wait(&running, "needs_reconciliation");
    // Still nothing of it reached the model while the run held the
    // repository.
    assert!(requests_carrying(&l, "just fix the flaky test").is_empty());
    assert_eq!(l.detail(&now)["task"]["state"], "queued");

    relay.set_rules(json!([]));
    l.app.reconcile_failed(&running);
    l.wait(&now, "succeeded");
    let n = l.detail(&now);
    assert_eq!(n["turns"].as_array().map(Vec::len), Some(1), "{n}");
    // Its one turn's requests (the comment tool call, then the answer) are
    // the first to carry it.
    let carrying = requests_carrying(&l, "just fix the flaky test");
    assert_eq!(carrying.len(), 2, "{carrying:?}");
}
