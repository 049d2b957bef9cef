//! The steer lane, end to end in process on a real SQLite store with the
//! scripted runtime: a `/steer` at the head of its session's queue joins the
//! running turn (never a turn of its own), one that finds no run becomes an
//! ordinary turn, and one whose delivery cannot be proven is held, never
//! sent twice.

use super::actors::{request, run, settings, Harness};
use crate::support::poll_until_async;
use codex_bridge::actors::registry::RunCommands;
use codex_bridge::agent::scripted::{Script, ScriptedAgent, StartBehaviour, Step};
use codex_bridge::domain::states::{OutboxStatus, SendMode};
use codex_bridge::domain::TaskId;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::models::OutboxEntry;
use codex_bridge::store::{commands, comments, ingest, steer};
use std::time::Duration;

fn runtime() -> ScriptedAgent {
    let rt = ScriptedAgent::new();
    rt.on("hang", Script::steps(vec![Step::Progress("x"), Step::Hang]));
    // A turn that ends by itself after a while.
    rt.on(
        "brief",
        Script::steps(vec![
            Step::Progress("x"),
            Step::Sleep(Duration::from_secs(2)),
            Step::Complete("brief done".into()),
        ]),
    );
    // A steer whose answer arrives after the turn it names has ended.
    rt.on(
        "latecomer",
        Script {
            start: StartBehaviour::Slow(Duration::from_secs(3)),
            steps: vec![Step::Complete("late done".into())],
        },
    );
    // A steer the turn takes in, whose answer is lost on the way back.
    rt.on(
        "unsure",
        Script {
            start: StartBehaviour::Uncertain,
            steps: vec![Step::Complete("unsure done".into())],
        },
    );
    rt
}

async fn entry(h: &Harness, task: &TaskId) -> OutboxEntry {
    h.detail(task)
        .await
        .outbox
        .expect("the task's outbox entry")
}

/// A `/steer` comment accepted by the webhook and admitted into `run`'s
/// turn by a process that died before it sent anything: written as that
/// process left it, with no wake-up. Its task and the version admitted on.
async fn admitted_unsent(
    h: &Harness,
    run: &codex_bridge::store::models::Task,
    comment_id: i64,
    text: &str,
) -> (TaskId, i64) {
    let req = request("widgets", 1, comment_id, text);
    let out = h
        .store
        .write(move |c| ingest::ingest(c, &req))
        .await
        .unwrap();
    let ingest::IngestOutcome::Accepted { task_id, .. } = out else {
        panic!("not accepted: {out:?}")
    };
    let e = entry(h, &task_id).await;
    let version = h.detail(&task_id).await.task.state_version;
    let thread = run.thread_id.clone().expect("the run's thread");
    let turn = run.turn_id.clone().expect("the run's turn");
    h.store
        .write(move |c| steer::admit(c, &e, version, &thread, &turn))
        .await
        .unwrap();
    (task_id, version)
}

/// Waits until the task's outbox entry satisfies `pred`; whether it did.
pub async fn entry_becomes(h: &Harness, task: &TaskId, pred: fn(&OutboxEntry) -> bool) -> bool {
    poll_until_async(Duration::from_secs(10), || {
        let id = task.clone();
        let store = h.store.clone();
        async move {
            store
                .read(move |c| codex_bridge::store::sessions::outbox_entry(c, &id))
                .await
                .unwrap()
                .is_some_and(|e| pred(&e))
        }
    })
    .await
}

#[test]
fn a_steer_joins_the_running_turn_and_its_task_names_that_task() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let steer = h
            .comment("widgets", 1, 2, "@ccbot /steer also fix the docs")
            .await;
        h.wait_state(&steer, TaskState::Succeeded).await;

        let turn = h.detail(&running).await.task.turn_id.expect("a turn");
        let d = h.detail(&steer).await;
        assert_eq!(d.task.steered_into.as_ref(), Some(&running));
        let e = d.outbox.clone().expect("an entry");
        assert_eq!(e.mode, SendMode::Steer);
        assert_eq!(e.expected_turn_id.as_deref(), Some(turn.as_str()));
        assert_eq!(e.accepted_turn_id.as_deref(), Some(turn.as_str()));
        // The ledger's acceptance names the turn that took it in.
        assert_eq!(d.ledger.len(), 1, "{:?}", d.ledger);
        assert_eq!(d.ledger[0].operation_id, e.operation_id);
        assert_eq!(d.ledger[0].turn_id.as_deref(), Some(turn.as_str()));
        assert_ne!(d.ledger[0].status, "sending");
        // The runtime got one steer, into that turn, with the comment in it;
        // it started no turn for it.
        let steers = h.runtime.steers();
        assert_eq!(steers.len(), 1, "{steers:?}");
        assert_eq!(steers[0].0, turn);
        assert_eq!(steers[0].1, e.operation_id.as_str());
        assert!(steers[0].2.contains("also fix the docs"), "{steers:?}");
        assert_eq!(h.runtime.calls().len(), 1, "{:?}", h.runtime.calls());
        assert!(d.turns.is_empty(), "a steer has no turn of its own");
        // One answer tells the thread where it went; the run goes on.
        let key = commands::answer_key(&steer);
        let row = h
            .store
            .read(move |c| comments::find(c, &key))
            .await
            .unwrap()
            .expect("an answer row");
        assert!(
            row.body.unwrap_or_default().contains(running.as_str()),
            "the answer names the task it joined"
        );
        assert_eq!(h.state(&running).await, TaskState::Running);
        let actions = h.actions(&steer).await;
        assert!(
            actions.contains(&"steer.admitted".to_owned())
                && actions.contains(&"steer.accepted".to_owned()),
            "{actions:?}"
        );
    });
}

#[test]
fn a_steer_with_no_run_is_an_ordinary_turn() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let steer = h
            .comment("widgets", 1, 1, "@ccbot /steer look at the parser")
            .await;
        h.wait_state(&steer, TaskState::Succeeded).await;
        assert!(h.runtime.steers().is_empty());
        let calls = h.runtime.calls();
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert!(calls[0].text.contains("look at the parser"));
        let d = h.detail(&steer).await;
        assert_eq!(d.task.steered_into, None);
        assert_eq!(d.turns.len(), 1);
        assert_eq!(d.outbox.expect("an entry").mode, SendMode::Enqueue);
    });
}

#[test]
fn a_steer_behind_a_waiting_message_waits_and_then_runs_as_its_own_turn() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let second = h.comment("widgets", 1, 2, "@ccbot second").await;
        let steer = h.comment("widgets", 1, 3, "@ccbot /steer third").await;
        // Stopping the run lets the queue go on: the waiting message first,
        // then the steer, each as a turn of its own.
        let stop = h.comment("widgets", 1, 4, "@ccbot /stop").await;
        h.wait_state(&stop, TaskState::Succeeded).await;
        h.wait_all(&[second.clone(), steer.clone()], TaskState::Succeeded)
            .await;
        assert!(h.runtime.steers().is_empty(), "{:?}", h.runtime.steers());
        let texts: Vec<String> = h.runtime.calls().into_iter().map(|c| c.text).collect();
        assert_eq!(texts.len(), 3, "{texts:?}");
        assert!(
            texts[1].contains("second") && texts[2].contains("third"),
            "{texts:?}"
        );
    });
}

#[test]
fn a_steer_whose_run_ended_before_it_was_admitted_goes_back_to_the_queue() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot brief").await;
        h.wait_state(&running, TaskState::Running).await;
        let steer = h.comment("widgets", 1, 2, "@ccbot /steer latecomer").await;
        // The steer lane admitted it into the running turn…
        let admitted = entry_becomes(&h, &steer, |e| e.status == OutboxStatus::Sending).await;
        assert!(
            admitted,
            "the steer was never admitted into the running turn"
        );
        // …but the turn ended before the answer: it joined nothing, went back
        // to the queue, and ran as a turn of its own after the run.
        h.wait_state(&running, TaskState::Succeeded).await;
        h.wait_state(&steer, TaskState::Succeeded).await;
        assert!(h.runtime.steers().is_empty(), "{:?}", h.runtime.steers());
        let actions = h.actions(&steer).await;
        assert!(
            actions.contains(&"steer.not_admitted".to_owned()),
            "{actions:?}"
        );
        let d = h.detail(&steer).await;
        assert_eq!(d.task.steered_into, None);
        assert_eq!(d.turns.len(), 1, "its own turn");
        // The same operation, sent once: the released claim left no trace
        // that would refuse the turn's own `sending`.
        assert_eq!(d.ledger.len(), 1, "{:?}", d.ledger);
        assert_eq!(d.ledger[0].turn_id, d.task.turn_id);
        assert_eq!(d.outbox.expect("an entry").mode, SendMode::Enqueue);
    });
}

#[test]
fn an_uncertain_steer_is_proven_from_the_thread_history() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let steer = h.comment("widgets", 1, 2, "@ccbot /steer unsure").await;
        h.wait_state(&steer, TaskState::Succeeded).await;
        let d = h.detail(&steer).await;
        assert_eq!(d.task.steered_into.as_ref(), Some(&running));
        assert_eq!(h.runtime.steers().len(), 1, "sent once");
        assert_eq!(h.runtime.calls().len(), 1, "no turn of its own");
    });
}

#[test]
fn a_commenter_who_may_not_trigger_work_cannot_steer() {
    run(async {
        let h = Harness::start(runtime(), settings());
        h.verifier.denied.lock().unwrap().push("mallory".into());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let steer = h
            .comment_as("mallory", "widgets", 1, 2, "@ccbot /steer rm -rf")
            .await;
        h.wait_state(&steer, TaskState::Rejected).await;
        assert!(h.runtime.steers().is_empty());
        assert_eq!(h.runtime.calls().len(), 1);
        assert_eq!(
            h.detail(&steer).await.task.error_code.as_deref(),
            Some("permission_denied")
        );
    });
}

/// A send that began before a crash (the entry `sending`, the ledger's row
/// written, no answer recorded) is looked up in the thread, never sent
/// again; the history does not show it, so it is held, and the queue does
/// not start it either.
#[test]
fn a_steer_found_sending_after_a_crash_is_held_and_never_sent_again() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let run_task = h.detail(&running).await.task;
        let (steer, _) = admitted_unsent(&h, &run_task, 2, "@ccbot /steer crashed").await;
        h.registry.do_send(RunCommands {
            session_key: run_task.session_key.clone(),
            repo_key: run_task.repo_key.clone(),
        });
        let held = entry_becomes(&h, &steer, |e| !e.auto_drain).await;
        assert!(held, "the steer was never held");
        let held = entry(&h, &steer).await;
        assert_eq!(held.hold_reason.as_deref(), Some("steer_unconfirmed"));
        assert_eq!(held.status, OutboxStatus::Queued);
        assert!(h.runtime.steers().is_empty(), "never sent again");
        // With the run stopped, the queue passes the held steer by: the next
        // message runs, the steer stays queued for an operator.
        let stop = h.comment("widgets", 1, 3, "@ccbot /stop").await;
        h.wait_state(&running, TaskState::Aborted).await;
        let next = h.comment("widgets", 1, 4, "@ccbot after").await;
        h.wait_state(&next, TaskState::Succeeded).await;
        h.wait_state(&stop, TaskState::Succeeded).await;
        assert_eq!(h.state(&steer).await, TaskState::Queued);
        assert!(h.runtime.steers().is_empty());
        assert_eq!(h.runtime.calls().len(), 2, "{:?}", h.runtime.calls());
        let actions = h.actions(&steer).await;
        assert!(actions.contains(&"steer.held".to_owned()), "{actions:?}");
    });
}

/// A late answer to a steer changes nothing once a newer decision moved its
/// entry: the acceptance, the release and the hold each check that the entry
/// is still as its send left it.
#[test]
fn a_late_steer_answer_never_overwrites_a_newer_decision() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let run_task = h.detail(&running).await.task;
        let (late, version) = admitted_unsent(&h, &run_task, 2, "@ccbot /steer late").await;
        let turn = run_task.turn_id.clone().expect("the run's turn");
        // The entry as the send left it, then a newer decision: held.
        let as_sent = entry(&h, &late).await;
        let sent = as_sent.clone();
        h.store
            .write(move |c| steer::hold(c, &sent, version, "steer_unconfirmed"))
            .await
            .unwrap();
        // The answer arrives now, late: refused, nothing written.
        let stale = as_sent.clone();
        let tu = turn.clone();
        let refused = h
            .store
            .write(move |c| steer::accept(c, &stale, version, &tu, |_| "joined".into()))
            .await;
        assert!(
            matches!(refused, Err(codex_bridge::store::StoreError::Refused { code, .. }) if code == steer::STALE),
            "{refused:?}"
        );
        let stale = as_sent.clone();
        let released = h
            .store
            .write(move |c| steer::release(c, &stale, version, "late"))
            .await;
        assert!(released.is_err(), "{released:?}");
        let d = h.detail(&late).await;
        assert_eq!(d.task.state, TaskState::Queued);
        assert_eq!(d.task.steered_into, None);
        let e = d.outbox.expect("an entry");
        assert!(!e.auto_drain, "still held");
        assert_eq!(e.accepted_turn_id, None);
        assert_eq!(d.ledger.len(), 1, "the ledger keeps its sending row");
        assert_eq!(d.ledger[0].status, "sending");
    });
}

/// The run a steer was aimed at is part of what it asks: the same entry
/// aimed at another run is refused (`steer_redirect`), never redirected.
#[test]
fn a_steer_aimed_at_one_run_is_never_redirected_to_another() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let run_task = h.detail(&running).await.task;
        let (steer, version) = admitted_unsent(&h, &run_task, 2, "@ccbot /steer aimed").await;
        // As if its send were undone by hand: queued again, still aimed.
        let aimed = entry(&h, &steer).await;
        let q = aimed.queue_id.clone();
        h.store
            .write(move |c| {
                use codex_bridge::store::schema::outbox_entries as o;
                use diesel::prelude::*;
                codex_bridge::with_conn!(c, |c| diesel::update(
                    o::table.filter(o::queue_id.eq(&q))
                )
                .set(o::status.eq("queued"))
                .execute(c))?;
                Ok(())
            })
            .await
            .unwrap();
        let e = entry(&h, &steer).await;
        let thread = run_task.thread_id.clone().unwrap();
        let other = h
            .store
            .write(move |c| steer::admit(c, &e, version, &thread, "turn-elsewhere"))
            .await;
        assert!(
            matches!(other, Err(codex_bridge::store::StoreError::Refused { code, .. }) if code == "steer_redirect"),
            "{other:?}"
        );
        assert_eq!(
            entry(&h, &steer).await.expected_turn_id,
            aimed.expected_turn_id
        );
    });
}
