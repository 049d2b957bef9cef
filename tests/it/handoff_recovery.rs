//! "Stop and send now" across a SIGKILL: the real server process holds a
//! steer whose delivery nothing proves (killed while the steer was being
//! sent), then dies again right after each phase of the handoff was
//! committed (`requested`, `interrupting`, `revoked`: each phase is one
//! commit, written here with the store's own function on the database the
//! dead process left), and is started again. Every time, the message runs
//! exactly once, as a turn of its own under its own operation id.

use crate::support::*;
use crate::testapp::*;
use codex_bridge::domain::states::HandoffPhase;
use codex_bridge::store::control::ControlRequest;
use codex_bridge::store::{handoff, sessions, tasks};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

fn app() -> TestApp {
    let app = TestApp::builder()
        .git_sim()
        .scripted()
        .env("CODEX_BRIDGE_LEASE_TTL_SECS", "2")
        .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .env("CODEX_BRIDGE_RETRY_BACKOFF_SECS", "0")
        .start();
    app.git().create_repo("acme", "widgets");
    app
}

fn entry_where(s: &TestApp, task: &str, clause: &str) -> bool {
    count_where(
        &mut s.db(),
        "outbox_entries",
        &format!("task_id = '{task}' AND {clause}"),
    ) > 0
}

/// A run, and a `/steer` into it that the process died sending: after the
/// restart the session finds it nowhere in the thread and holds it. Returns
/// (run task, steer task).
fn held_steer(s: &mut TestApp) -> (String, String) {
    let run = s.task_comment("run", 1, "@ccbot a long job [hang]", "widgets", 1);
    wait_task_state(&s.db_url, &run, "running", LONG);
    let steer = s.task_comment(
        "steer",
        2,
        "@ccbot /steer also fix the docs [start:slow:8000]",
        "widgets",
        1,
    );
    wait_until("the steer admitted", LONG, || {
        entry_where(s, &steer, "status = 'sending'")
    });
    s.kill9();
    s.start_again();
    wait_until("the steer held", LONG, || {
        entry_where(s, &steer, "auto_drain = false AND status = 'queued'")
    });
    // The run died with the process: the history cannot say what it did,
    // so it waits for an operator (and holds the repository). The operator
    // settles it first.
    wait_task_state(&s.db_url, &run, "needs_reconciliation", LONG);
    s.reconcile_failed(&run);
    wait_task_state(&s.db_url, &run, "failed", LONG);
    (run, steer)
}

/// The store's own phase writes, as the dead process committed them, up to
/// and including `last`.
fn commit_phases_up_to(s: &TestApp, steer: &str, last: HandoffPhase) {
    let mut c = s.db();
    let task = steer.parse().unwrap();
    let queue_id = sessions::outbox_entry(&mut c, &task)
        .unwrap()
        .unwrap()
        .queue_id;
    let req = ControlRequest {
        request_id: "send-now-1".into(),
        reason: "the steer was lost".into(),
        actor: "admin:ops".into(),
    };
    c.write_transaction(|c| handoff::request(c, &req, &queue_id))
        .unwrap();
    for phase in [HandoffPhase::Interrupting, HandoffPhase::Revoked] {
        if last < phase {
            break;
        }
        let e = sessions::outbox_entry(&mut c, &task).unwrap().unwrap();
        c.write_transaction(|c| match phase {
            HandoffPhase::Interrupting => handoff::interrupting(c, &e, None),
            _ => handoff::revoke(c, &e),
        })
        .unwrap();
    }
    let e = sessions::outbox_entry(&mut c, &task).unwrap().unwrap();
    assert_eq!(e.handoff_phase, Some(last));
}

fn killed_after(last: HandoffPhase) {
    let mut s = app();
    let (run, steer) = held_steer(&mut s);
    s.kill9();
    commit_phases_up_to(&s, &steer, last);
    s.start_again();

    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_task_state(&s.db_url, &steer, "succeeded", LONG)
    }));
    if ran.is_err() {
        // What the two tasks and the server say, for the failure report.
        let mut c = s.db();
        for t in [&run, &steer] {
            let d = tasks::detail(&mut c, &t.parse().unwrap()).unwrap().unwrap();
            eprintln!(
                "task {t}: {}",
                serde_json::to_string_pretty(&d.task).unwrap()
            );
            eprintln!(
                "entry: {}",
                serde_json::to_string_pretty(&d.outbox).unwrap()
            );
            let actions: Vec<_> = d.audit.iter().map(|a| &a.action).collect();
            eprintln!("audit: {actions:?}");
        }
        eprintln!(
            "server log, newest first:\n{}",
            s.logs()
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        );
        panic!("the handed-off steer did not run after the restart");
    }
    let mut c = s.db();
    let detail = tasks::detail(&mut c, &steer.parse().unwrap())
        .unwrap()
        .unwrap();
    let e = detail.outbox.expect("the steer's entry");
    assert_eq!(e.handoff_phase, Some(HandoffPhase::Dedicated));
    assert_eq!(
        count_where(&mut c, "turns", &format!("task_id = '{steer}'")),
        1,
        "exactly one turn of its own"
    );
    assert_eq!(
        count_where(
            &mut c,
            "operation_ledger",
            &format!("operation_id = '{}' AND status = 'sent'", e.operation_id)
        ),
        1
    );
    assert_eq!(task_state(&mut c, &run).as_deref(), Some("failed"));
    let actions: Vec<String> = detail.audit.iter().map(|a| a.action.clone()).collect();
    assert!(
        actions.contains(&"outbox.handoff.dedicated".to_owned()),
        "{actions:?}"
    );
}

#[test]
fn killed_after_the_send_now_request_the_message_runs_once_after_restart() {
    killed_after(HandoffPhase::Requested);
}

#[test]
fn killed_while_interrupting_the_message_runs_once_after_restart() {
    killed_after(HandoffPhase::Interrupting);
}

#[test]
fn killed_after_the_claim_was_revoked_the_message_runs_once_after_restart() {
    killed_after(HandoffPhase::Revoked);
}

/// The operator's route: 200 with the audit event, 409 `not_held` for an
/// entry that is not held, 404 for a queue id that is not one.
#[test]
fn the_send_now_route_answers_for_held_entries_only() {
    let mut s = app();
    let (_, steer) = held_steer(&mut s);
    let mut c = s.db();
    let q = sessions::outbox_entry(&mut c, &steer.parse().unwrap())
        .unwrap()
        .unwrap()
        .queue_id;
    let body = serde_json::json!({"requestId": "r-1", "reason": "lost steer"});
    let ok = s.admin_post(&format!("/api/gitea-workflow/outbox/{q}/send-now"), &body);
    assert_eq!(ok.status, 200, "{:?}", ok.json);
    assert_eq!(ok.json["action"], "outbox.send_now", "{:?}", ok.json);
    wait_task_state(&s.db_url, &steer, "succeeded", LONG);
    let again = s.admin_post(
        &format!("/api/gitea-workflow/outbox/{q}/send-now"),
        &serde_json::json!({"requestId": "r-2", "reason": "again"}),
    );
    assert_eq!(again.status, 409, "{:?}", again.json);
    assert_eq!(again.json["code"], "not_held", "{:?}", again.json);
    let missing = s.admin_post(
        "/api/gitea-workflow/outbox/q-00000000000000000000000000000000/send-now",
        &serde_json::json!({"requestId": "r-3", "reason": "none such"}),
    );
    assert_eq!(missing.status, 404, "{:?}", missing.json);
}

/// A task that waits for reconciliation because nothing shows whether its
/// turn/start reached Codex is sent now once its thread's history proves it
/// missing: queued again under its own operation id, it runs once.
#[test]
fn a_task_needing_reconciliation_is_sent_now_once_its_history_proves_it_missing() {
    let mut s = app();
    let task = s.task_comment(
        "uncertain",
        1,
        "@ccbot after intent [start:slow:8000]",
        "widgets",
        1,
    );
    wait_until("the turn/start intent recorded", LONG, || {
        entry_where(&s, &task, "status = 'sending'")
    });
    s.kill9();
    s.start_again();
    wait_task_state(&s.db_url, &task, "needs_reconciliation", LONG);
    let mut c = s.db();
    let e = sessions::outbox_entry(&mut c, &task.parse().unwrap())
        .unwrap()
        .unwrap();
    let sent = s.admin_post(
        &format!("/api/gitea-workflow/outbox/{}/send-now", e.queue_id),
        &serde_json::json!({"requestId": "r-rec", "reason": "never reached Codex"}),
    );
    assert_eq!(sent.status, 200, "{:?}", sent.json);
    wait_task_state(&s.db_url, &task, "succeeded", LONG);
    let d = tasks::detail(&mut c, &task.parse().unwrap())
        .unwrap()
        .unwrap();
    let states: Vec<String> = d
        .transitions
        .iter()
        .map(|t| t.to_state.to_string())
        .collect();
    assert!(
        states
            .windows(2)
            .any(|w| w == ["needs_reconciliation", "queued"]),
        "{states:?}"
    );
    assert_eq!(
        d.outbox.as_ref().and_then(|o| o.handoff_phase),
        Some(HandoffPhase::Dedicated)
    );
    assert_eq!(
        count_where(&mut c, "turns", &format!("task_id = '{task}'")),
        1,
        "one turn, after the handoff"
    );
}
