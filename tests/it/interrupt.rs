//! `/interrupt` and `/replace`, end to end in process on a real SQLite store
//! with the scripted runtime: the run is stopped (it ends `aborted`,
//! `superseded`), the message starts as a turn of its own before the queue
//! once the run settled, `/replace` drops the stopped turn from the thread
//! first, and a run that does not settle in time leaves the message in the
//! queue's order.

use super::actors::{run, settings, Harness};
use codex_bridge::agent::scripted::{Script, ScriptedAgent, Step};
use codex_bridge::domain::states::SendMode;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::{comments, interrupt};
use std::time::Duration;

fn runtime() -> ScriptedAgent {
    let rt = ScriptedAgent::new();
    rt.on("hang", Script::steps(vec![Step::Progress("x"), Step::Hang]));
    // Ignores interrupts: an app-server that never confirms one.
    rt.on(
        "stubborn",
        Script::steps(vec![Step::Progress("x"), Step::Stubborn]),
    );
    rt
}

#[test]
fn an_interrupt_stops_the_run_and_starts_before_the_queue() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let waiting = h.comment("widgets", 1, 2, "@ccbot the next thing").await;
        let now = h
            .comment("widgets", 1, 3, "@ccbot /interrupt do this instead")
            .await;
        h.wait_state(&now, TaskState::Succeeded).await;
        h.wait_state(&waiting, TaskState::Succeeded).await;

        let r = h.detail(&running).await;
        assert_eq!(r.task.state, TaskState::Aborted);
        assert_eq!(r.task.error_code.as_deref(), Some("superseded"));
        assert_eq!(
            h.runtime.interrupts(),
            vec![r.task.turn_id.clone().unwrap()]
        );
        // The interrupting message ran right after the stopped run, before
        // the message that was waiting already.
        let texts: Vec<String> = h.runtime.calls().into_iter().map(|c| c.text).collect();
        assert_eq!(texts.len(), 3, "{texts:?}");
        assert!(texts[1].contains("do this instead"), "{texts:?}");
        assert!(texts[2].contains("the next thing"), "{texts:?}");
        let e = h.detail(&now).await.outbox.expect("an entry");
        assert_eq!(e.mode, SendMode::Interrupt);
        assert_eq!(e.supersedes.as_ref(), Some(&running));
        assert!(
            h.runtime.reverts().is_empty(),
            "an interrupt reverts nothing"
        );
        assert!(h
            .actions(&now)
            .await
            .contains(&"message.supersedes".to_owned()));
        // The stopped run's one receipt says why it stopped.
        let keys: Vec<String> = r.comments.iter().map(|c| c.comment_key.clone()).collect();
        assert!(
            keys.iter().any(|k| k.ends_with(":status:aborted")),
            "{keys:?}"
        );
    });
}

#[test]
fn a_replace_drops_the_stopped_turn_from_the_thread_before_its_own() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let replace = h
            .comment("widgets", 1, 2, "@ccbot /replace start over, smaller")
            .await;
        h.wait_state(&replace, TaskState::Succeeded).await;
        let r = h.detail(&running).await.task;
        assert_eq!(r.error_code.as_deref(), Some("superseded"));
        let (thread, turn) = (r.thread_id.unwrap(), r.turn_id.unwrap());
        assert_eq!(h.runtime.reverts(), vec![(thread.clone(), turn.clone())]);
        let d = h.detail(&replace).await;
        let e = d.outbox.clone().expect("an entry");
        assert_eq!(e.mode, SendMode::Replace);
        assert_eq!(e.revert_turn_id.as_deref(), Some(turn.as_str()));
        assert!(e.reverted_at.is_some());
        // Reverted before its own turn was intended, on the same thread.
        let acts = h.actions(&replace).await;
        let reverted = acts.iter().position(|a| a == "thread.reverted");
        let intended = acts.iter().position(|a| a == "turn.start_intent");
        assert!(
            matches!((reverted, intended), (Some(a), Some(b)) if a < b),
            "{acts:?}"
        );
        assert_eq!(d.task.thread_id.as_deref(), Some(thread.as_str()));
        // One answer says the files stay as they are.
        let key = interrupt::reverted_key(&replace);
        let row = h
            .store
            .read(move |c| comments::find(c, &key))
            .await
            .unwrap()
            .expect("the revert's answer");
        assert!(row
            .body
            .unwrap_or_default()
            .contains("Files it changed stay"));
    });
}

#[test]
fn an_interrupt_with_no_run_is_an_ordinary_turn() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let now = h
            .comment("widgets", 1, 1, "@ccbot /interrupt nothing runs")
            .await;
        h.wait_state(&now, TaskState::Succeeded).await;
        assert!(h.runtime.interrupts().is_empty());
        let e = h.detail(&now).await.outbox.expect("an entry");
        assert_eq!(e.mode, SendMode::Enqueue);
        assert_eq!(e.supersedes, None);
    });
}

/// The stopped run never confirms its interrupt: after the settle limit the
/// message goes back to the queue's order (and stops nothing again), while
/// the run follows the interrupt rule to `needs_reconciliation`.
#[test]
fn a_run_that_does_not_settle_leaves_the_message_in_the_queue() {
    run(async {
        let mut s = settings();
        s.interrupt_settle = Duration::from_millis(300);
        s.interrupt_grace = Duration::from_secs(2);
        let h = Harness::start(runtime(), s);
        let running = h.comment("widgets", 1, 1, "@ccbot stubborn").await;
        h.wait_state(&running, TaskState::Running).await;
        let now = h
            .comment("widgets", 1, 2, "@ccbot /interrupt do this instead")
            .await;
        h.wait_state(&running, TaskState::NeedsReconciliation).await;
        let acts = h.actions(&now).await;
        assert!(
            acts.contains(&"message.back_in_queue".to_owned()),
            "{acts:?}"
        );
        let d = h.detail(&now).await;
        assert_eq!(d.task.state, TaskState::Queued);
        let e = d.outbox.expect("an entry");
        assert_eq!(e.mode, SendMode::Enqueue, "back in the queue's order");
        assert_eq!(e.supersedes.as_ref(), Some(&running));
        let demoted = d
            .audit
            .iter()
            .find(|a| a.action == "message.back_in_queue")
            .expect("the demotion");
        assert_eq!(demoted.error_code.as_deref(), Some("not_settled"));
        assert_eq!(
            h.detail(&running).await.task.error_code.as_deref(),
            Some("interrupt_unconfirmed")
        );
        // One interrupt was asked for; the held run keeps the repository.
        assert_eq!(h.runtime.interrupts().len(), 1);
        assert_eq!(h.runtime.calls().len(), 1);
    });
}
