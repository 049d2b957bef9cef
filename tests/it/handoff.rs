//! "Stop and send now" of a held entry, in process on a real SQLite store
//! with the scripted runtime: the operator's request pins what the message
//! may have reached; the session stops that run, reads the pinned thread's
//! history, withdraws the ledger's claim only when the message is proven
//! missing, and queues it to run as a turn of its own, once. A message the
//! agent has is never sent again.

use super::actors::{request, run, settings, Harness};
use super::steer::entry_becomes;
use codex_bridge::actors::registry::RunCommands;
use codex_bridge::agent::scripted::{Script, ScriptedAgent, Step};
use codex_bridge::agent::{Agent, SteerRequest};
use codex_bridge::domain::states::{HandoffPhase, SendMode};
use codex_bridge::domain::TaskId;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::control::ControlRequest;
use codex_bridge::store::models::{OutboxEntry, Task};
use codex_bridge::store::{handoff, ingest, ledger, steer, tasks, StoreError};

fn runtime() -> ScriptedAgent {
    let rt = ScriptedAgent::new();
    rt.on("hang", Script::steps(vec![Step::Progress("x"), Step::Hang]));
    rt
}

fn operator(id: &str) -> ControlRequest {
    ControlRequest {
        request_id: id.into(),
        reason: "the steer was lost; send it now".into(),
        actor: "admin:ops".into(),
    }
}

async fn entry(h: &Harness, task: &TaskId) -> OutboxEntry {
    h.detail(task)
        .await
        .outbox
        .expect("the task's outbox entry")
}

fn wake(h: &Harness, run: &Task) {
    h.registry.do_send(RunCommands {
        session_key: run.session_key.clone(),
        repo_key: run.repo_key.clone(),
    });
}

/// A running turn, and a `/steer` admitted into it by a process that died
/// before sending (the ledger `sending`, nothing in the thread): the session
/// finds it missing from the history and holds it.
async fn held_steer(h: &Harness) -> (Task, TaskId) {
    let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
    h.wait_state(&running, TaskState::Running).await;
    let run_task = h.detail(&running).await.task;
    let req = request("widgets", 1, 2, "@ccbot /steer also fix the docs");
    let (thread, turn) = (
        run_task.thread_id.clone().unwrap(),
        run_task.turn_id.clone().unwrap(),
    );
    // Accepted and admitted in one transaction, as that process did: the
    // running session's own steer pass must not take the entry in between.
    let steer = h
        .store
        .write(move |c| {
            let out = ingest::ingest(c, &req)?;
            let ingest::IngestOutcome::Accepted { task_id, .. } = out else {
                return Err(StoreError::Query(format!("not accepted: {out:?}")));
            };
            let detail = tasks::detail(c, &task_id)?
                .ok_or_else(|| StoreError::NotFound(task_id.to_string()))?;
            let e = detail
                .outbox
                .ok_or_else(|| StoreError::NotFound("the steer's outbox entry".into()))?;
            steer::admit(c, &e, detail.task.state_version, &thread, &turn)?;
            Ok(task_id)
        })
        .await
        .unwrap();
    wake(h, &run_task);
    assert!(
        entry_becomes(h, &steer, |e| !e.auto_drain).await,
        "the steer was never held"
    );
    (run_task, steer)
}

async fn send_now(h: &Harness, steer: &TaskId, id: &str) -> Result<(), StoreError> {
    let q = entry(h, steer).await.queue_id;
    let req = operator(id);
    h.store
        .write(move |c| handoff::request(c, &req, &q).map(|_| ()))
        .await
}

/// The turns the runtime started that carry `op` as their client id.
fn turns_carrying(h: &Harness, op: &str) -> usize {
    h.runtime
        .calls()
        .iter()
        .filter(|c| c.operation_id == op)
        .count()
}

#[test]
fn a_held_steer_sent_now_stops_the_run_and_runs_once_as_its_own_turn() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let (run_task, steer) = held_steer(&h).await;
        let op = entry(&h, &steer).await.operation_id.to_string();
        assert_eq!(turns_carrying(&h, &op), 0);

        send_now(&h, &steer, "send-1").await.unwrap();
        let pinned = entry(&h, &steer).await;
        assert_eq!(pinned.handoff_phase, Some(HandoffPhase::Requested));
        assert_eq!(pinned.handoff_run_task_id.as_ref(), Some(&run_task.task_id));
        assert_eq!(pinned.handoff_turn_id, run_task.turn_id);
        assert_eq!(pinned.handoff_thread_id, run_task.thread_id);
        wake(&h, &run_task);

        h.wait_state(&run_task.task_id, TaskState::Aborted).await;
        h.wait_state(&steer, TaskState::Succeeded).await;
        let r = h.detail(&run_task.task_id).await.task;
        assert_eq!(r.error_code.as_deref(), Some("superseded"));
        assert_eq!(turns_carrying(&h, &op), 1, "{:?}", h.runtime.calls());
        assert!(h.runtime.steers().is_empty(), "never steered again");
        let done = entry(&h, &steer).await;
        assert_eq!(done.handoff_phase, Some(HandoffPhase::Dedicated));
        assert_eq!(done.mode, SendMode::Interrupt);
        assert!(done.auto_drain);
        let claim = {
            let op = done.operation_id.clone();
            h.store.read(move |c| ledger::find(c, &op)).await.unwrap()
        };
        assert_eq!(claim.map(|l| l.status), Some("sent".to_owned()));
        let actions = h.actions(&steer).await;
        for a in [
            "outbox.send_now",
            "outbox.handoff.interrupting",
            "outbox.handoff.revoked",
            "outbox.handoff.dedicated",
        ] {
            assert!(actions.contains(&a.to_owned()), "{a}: {actions:?}");
        }
    });
}

#[test]
fn a_held_steer_the_history_shows_is_kept_held_and_never_sent_again() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let (run_task, steer) = held_steer(&h).await;
        let e = entry(&h, &steer).await;
        // The message turns up in the run's turn after all (a slow pipe):
        // Codex has it.
        h.runtime
            .steer_turn(SteerRequest {
                thread_id: run_task.thread_id.clone().unwrap(),
                expected_turn_id: run_task.turn_id.clone().unwrap(),
                operation_id: e.operation_id.clone(),
                text: "also fix the docs".into(),
            })
            .await
            .unwrap();
        send_now(&h, &steer, "send-2").await.unwrap();
        wake(&h, &run_task);
        assert!(
            entry_becomes(&h, &steer, |e| e.handoff_phase.is_none()).await,
            "the handoff never ended"
        );
        h.wait_state(&run_task.task_id, TaskState::Aborted).await;
        let kept = entry(&h, &steer).await;
        assert_eq!(kept.hold_reason.as_deref(), Some("already_sent"));
        assert!(!kept.auto_drain);
        assert_eq!(h.state(&steer).await, TaskState::Queued);
        assert_eq!(turns_carrying(&h, e.operation_id.as_str()), 0);
        let claim = {
            let op = e.operation_id.clone();
            h.store.read(move |c| ledger::find(c, &op)).await.unwrap()
        };
        assert_eq!(claim.map(|l| l.status), Some("sent".to_owned()));
        // The ledger now says so: a second send-now is refused outright.
        let again = send_now(&h, &steer, "send-3").await;
        assert!(
            matches!(again, Err(StoreError::Refused { code, .. }) if code == "already_sent"),
            "{again:?}"
        );
    });
}

#[test]
fn send_now_takes_held_entries_only_and_once() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let (_, held) = held_steer(&h).await;
        let waiting = h.comment("widgets", 1, 3, "@ccbot next").await;
        let refused = send_now(&h, &waiting, "not-held").await;
        assert!(
            matches!(refused, Err(StoreError::Refused { code, .. }) if code == "not_held"),
            "{refused:?}"
        );
        // In one transaction, so no pass of the session comes between: the
        // same request id repeats the stored answer, another request while
        // one is under way is refused.
        let q = entry(&h, &held).await.queue_id;
        let answers = h
            .store
            .write(move |c| {
                let first = handoff::request(c, &operator("once"), &q)?;
                let repeat = handoff::request(c, &operator("once"), &q)?;
                let other = handoff::request(c, &operator("another"), &q);
                Ok((first, repeat, other))
            })
            .await;
        let (first, repeat, other) = match answers {
            Ok(a) => a,
            Err(e) => panic!("{e:?}"),
        };
        assert_eq!(first.event_id, repeat.event_id);
        assert!(
            matches!(other, Err(StoreError::Refused { code, .. }) if code == "handoff_in_progress"),
            "{other:?}"
        );
    });
}
