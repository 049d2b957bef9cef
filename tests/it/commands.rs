//! Turnless commands, end to end in process on a real SQLite store with the
//! scripted runtime: each is carried out by its session at once, beside the
//! running turn and outside the repository's queue, ends its own task
//! `succeeded` with one answer, and moves only what it names.

use super::actors::{run, settings, Harness};
use crate::support::{poll_until_async, resource};
use codex_bridge::actors::registry::RunCommands;
use codex_bridge::agent::scripted::{Script, ScriptedAgent, Step};
use codex_bridge::domain::states::CommentKind;
use codex_bridge::domain::{Intent, TaskId};
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::{approvals, commands, comments, ingest, sessions};
use std::time::Duration;

fn hanging() -> ScriptedAgent {
    let rt = ScriptedAgent::new();
    rt.on("hang", Script::steps(vec![Step::Progress("x"), Step::Hang]));
    rt.on(
        "risky",
        Script::steps(vec![
            Step::AskApproval("command"),
            Step::Complete("done".into()),
        ]),
    );
    rt
}

/// The answer a command posted (its row, as the receipts worker takes it).
async fn answer(h: &Harness, task: &TaskId) -> String {
    let key = commands::answer_key(task);
    let row = h
        .store
        .read(move |c| comments::find(c, &key))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no answer row for {task}"));
    assert_eq!(row.kind, CommentKind::Answer);
    row.body.expect("an answer keeps its text")
}

/// Comment rows of a task (receipts, answers).
async fn rows(h: &Harness, task: &TaskId) -> Vec<String> {
    let id = task.clone();
    h.store
        .read(move |c| comments::of_task(c, &id))
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.comment_key)
        .collect()
}

#[test]
fn stop_ends_the_running_turn_and_the_queue_stays() {
    run(async {
        let h = Harness::start(hanging(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let queued = h.comment("widgets", 1, 2, "@ccbot then this").await;
        let stop = h.comment("widgets", 1, 3, "@ccbot /STOP please").await;
        h.wait_state(&stop, TaskState::Succeeded).await;
        h.wait_state(&running, TaskState::Aborted).await;
        // The queued instruction was left alone, and runs once the turn ended.
        h.wait_state(&queued, TaskState::Succeeded).await;
        let q = h.detail(&queued).await;
        assert!(
            !q.transitions
                .iter()
                .any(|t| t.to_state == TaskState::Cancelled),
            "a stop never cancels the queue"
        );
        assert_eq!(h.runtime.interrupts().len(), 1);
        let text = answer(&h, &stop).await;
        assert!(
            text.contains(&format!("Stopping task `{running}`")),
            "{text}"
        );
        // One comment for the command: its answer, no "received" receipt.
        assert_eq!(rows(&h, &stop).await, [commands::answer_key(&stop)]);
        // The stop was not a turn: the runtime saw two turns, not three.
        assert_eq!(h.runtime.calls().len(), 2, "{:?}", h.runtime.calls());
    });
}

#[test]
fn cancel_ends_the_queued_tasks_and_the_running_turn_goes_on() {
    run(async {
        let h = Harness::start(hanging(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let b = h.comment("widgets", 1, 2, "@ccbot second").await;
        let c = h.comment("widgets", 1, 3, "@ccbot third").await;
        // Another session's queue is not this session's.
        let other = h.comment("widgets", 2, 4, "@ccbot elsewhere").await;
        let cancel = h.comment("widgets", 1, 5, "@ccbot /cancel").await;
        h.wait_state(&cancel, TaskState::Succeeded).await;
        h.wait_all(&[b.clone(), c.clone()], TaskState::Cancelled)
            .await;
        assert_eq!(h.state(&running).await, TaskState::Running);
        assert!(h.runtime.interrupts().is_empty(), "nothing was interrupted");
        let text = answer(&h, &cancel).await;
        assert!(
            text.contains(&format!("`{b}`")) && text.contains(&format!("`{c}`")),
            "{text}"
        );
        assert!(!text.contains(other.as_str()), "{text}");
        assert_ne!(h.state(&other).await, TaskState::Cancelled);
        let code = h.detail(&b).await.task.error_code;
        assert_eq!(code.as_deref(), Some("cancelled_by_command"));
        // With nothing left to cancel, a second /cancel says so and moves nothing.
        let again = h.comment("widgets", 1, 6, "@ccbot /cancel").await;
        h.wait_state(&again, TaskState::Succeeded).await;
        assert!(answer(&h, &again).await.contains("nothing to do"));
        assert_eq!(h.state(&running).await, TaskState::Running);
    });
}

#[test]
fn approve_and_deny_decide_only_a_pending_approval_of_their_own_session() {
    run(async {
        let h = Harness::start(hanging(), settings());
        let task = h.comment("widgets", 1, 1, "@ccbot risky").await;
        h.wait_state(&task, TaskState::AwaitingApproval).await;
        let pending = h.store.read(approvals::pending).await.unwrap();
        let id = pending[0].approval_id.clone();
        // The thread is told: one comment naming the id and how to answer.
        let key = comments::approval_key(&task, &id);
        let notice = h
            .store
            .read(move |c| comments::find(c, &key))
            .await
            .unwrap()
            .expect("the approval is announced in the thread");
        let body = notice.body.unwrap();
        assert!(body.contains(&format!("`@ccbot /approve {id}`")), "{body}");
        assert!(body.contains(&format!("`@ccbot /deny {id}`")), "{body}");
        assert!(!body.contains("{approval_id}"), "{body}");
        // Another Issue cannot decide it, and a wrong id decides nothing.
        let elsewhere = h
            .comment("widgets", 2, 2, &format!("@ccbot /approve {id}"))
            .await;
        let wrong = h.comment("widgets", 1, 3, "@ccbot /deny appr-nope").await;
        h.wait_all(&[elsewhere.clone(), wrong.clone()], TaskState::Succeeded)
            .await;
        assert!(answer(&h, &elsewhere)
            .await
            .contains("not a pending approval"));
        let text = answer(&h, &wrong).await;
        assert!(
            text.contains(&format!("`{id}`")),
            "names what is pending: {text}"
        );
        assert_eq!(h.state(&task).await, TaskState::AwaitingApproval);
        assert!(h.runtime.decisions().is_empty());
        // Someone without the right to trigger work is refused.
        h.verifier.denied.lock().unwrap().push("mallory".into());
        let refused = h
            .comment_as("mallory", "widgets", 1, 4, &format!("@ccbot /approve {id}"))
            .await;
        h.wait_state(&refused, TaskState::Rejected).await;
        assert_eq!(
            rows(&h, &refused).await,
            [comments::receipt_key(&refused, TaskState::Rejected)],
            "one refusal receipt, no answer"
        );
        assert_eq!(h.state(&task).await, TaskState::AwaitingApproval);
        // The right one, by bob, on this Issue.
        let approve = h
            .comment("widgets", 1, 5, &format!("@ccbot /approve {id}"))
            .await;
        h.wait_state(&approve, TaskState::Succeeded).await;
        h.wait_state(&task, TaskState::Succeeded).await;
        assert_eq!(h.runtime.decisions().len(), 1);
        assert!(h.runtime.decisions()[0].1, "accepted");
        assert!(answer(&h, &approve).await.contains("granted"));
    });
}

#[test]
fn status_help_and_an_unknown_word_answer_without_a_turn() {
    run(async {
        let h = Harness::start(hanging(), settings());
        let help = h.comment("widgets", 1, 1, "@ccbot /help").await;
        let unknown = h.comment("widgets", 1, 2, "@ccbot /deploy now").await;
        let stop = h.comment("widgets", 1, 3, "@ccbot /stop").await;
        h.wait_all(
            &[help.clone(), unknown.clone(), stop.clone()],
            TaskState::Succeeded,
        )
        .await;
        assert!(answer(&h, &help).await.contains("/interrupt"));
        assert!(answer(&h, &unknown)
            .await
            .starts_with("I do not know that command"));
        assert!(answer(&h, &stop).await.contains("No turn is running"));
        assert!(
            h.runtime.calls().is_empty(),
            "no turn for a turnless command"
        );
        assert_eq!(h.runtime.threads_started(), 0);
        let running = h.comment("widgets", 1, 4, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let queued = h.comment("widgets", 1, 5, "@ccbot later").await;
        let status = h.comment("widgets", 1, 6, "@ccbot /status").await;
        h.wait_state(&status, TaskState::Succeeded).await;
        let text = answer(&h, &status).await;
        assert!(text.contains(&format!("`{running}`: `running`")), "{text}");
        assert!(text.contains(&format!("`{queued}`: `queued`")), "{text}");
        assert!(!text.contains(status.as_str()), "{text}");
        let d = h.detail(&status).await;
        assert_eq!(d.task.command.map(|c| c.as_str()), Some("status"));
        let states: Vec<_> = d.transitions.iter().map(|t| t.to_state).collect();
        assert_eq!(states, [TaskState::Queued, TaskState::Succeeded]);
    });
}

#[test]
fn reset_makes_the_next_task_start_a_new_thread() {
    run(async {
        let h = Harness::start(ScriptedAgent::new(), settings());
        let first = h.comment("widgets", 1, 1, "@ccbot one").await;
        h.wait_state(&first, TaskState::Succeeded).await;
        let key = resource("default:acme/widgets:issue:1");
        let k = key.clone();
        let old = h
            .store
            .read(move |c| sessions::session(c, &k))
            .await
            .unwrap()
            .unwrap()
            .thread_id
            .unwrap();
        let reset = h.comment("widgets", 1, 2, "@ccbot /reset").await;
        h.wait_state(&reset, TaskState::Succeeded).await;
        assert!(answer(&h, &reset).await.contains(&old));
        let second = h.comment("widgets", 1, 3, "@ccbot two").await;
        h.wait_state(&second, TaskState::Succeeded).await;
        let new = h.detail(&second).await.task.thread_id.unwrap();
        assert_ne!(new, old, "a new thread after /reset");
        assert_eq!(h.runtime.threads_started(), 2);
        // Without a thread, a reset says there is nothing to reset.
        let empty = h.comment("widgets", 9, 4, "@ccbot /reset").await;
        h.wait_state(&empty, TaskState::Succeeded).await;
        assert!(answer(&h, &empty)
            .await
            .contains("no Codex conversation yet"));
    });
}

#[test]
fn a_command_nobody_was_told_of_is_found_by_the_sweep() {
    run(async {
        let h = Harness::start(hanging(), settings());
        // Committed as by a process that died before it told its session.
        let req = super::actors::request("widgets", 1, 1, "@ccbot /status");
        let out = h
            .store
            .write(move |c| ingest::ingest(c, &req))
            .await
            .unwrap();
        let ingest::IngestOutcome::Accepted { task_id, .. } = out else {
            panic!("{out:?}")
        };
        h.wait_state(&task_id, TaskState::Succeeded).await;
        assert!(answer(&h, &task_id).await.contains("Nothing is running"));
        // The repository's queue never leased it.
        let d = h.detail(&task_id).await;
        assert!(d
            .transitions
            .iter()
            .all(|t| t.to_state != TaskState::Leased));
    });
}

#[test]
fn a_command_whose_permission_is_unknown_waits_and_holds_nothing_up() {
    run(async {
        let h = Harness::start(hanging(), settings());
        h.verifier.unknown.lock().unwrap().push("carol".into());
        let command = h
            .comment_as("carol", "widgets", 1, 1, "@ccbot /cancel")
            .await;
        let work = h.comment("widgets", 1, 2, "@ccbot work").await;
        // Fail closed: nothing is decided on a guess...
        h.wait_state(&work, TaskState::Succeeded).await;
        // ...and the instruction behind it was never held up by it.
        assert_eq!(h.state(&command).await, TaskState::Queued);
        assert!(rows(&h, &command).await.is_empty());
        // Once the permission can be checked, the command is carried out.
        h.verifier.unknown.lock().unwrap().clear();
        let done = poll_until_async(Duration::from_secs(15), || async {
            h.state(&command).await == TaskState::Succeeded
        })
        .await;
        assert!(done, "the command is tried again");
        assert!(answer(&h, &command).await.contains("nothing to do"));
    });
}

/// Gitea's `edited` (`Some(text)`) or `deleted` (`None`) event for comment
/// `comment_id` on Issue `number`, ingested and handed to its session as the
/// webhook does.
async fn change(h: &Harness, number: i64, comment_id: i64, edited: Option<&str>, n: u32) {
    let mut req = super::actors::request("widgets", number, comment_id, edited.unwrap_or(""));
    req.delivery_key = format!("default:d-change-{comment_id}-{n}");
    req.delivery_id = format!("d-change-{comment_id}-{n}");
    req.content_key = Some(format!("default:comment:{comment_id}:change:{n}"));
    let trigger_key = format!("default:comment:{comment_id}");
    req.intent = match edited {
        Some(text) => {
            req.action = Some("edited".into());
            Intent::Edit {
                trigger_key,
                text: text.into(),
                command: codex_bridge::webhook::command::parse(text, "ccbot"),
                written_at: format!("2026-01-01T00:0{n}:00Z"),
                attachments: Vec::new(),
                mention_added: false,
            }
        }
        None => {
            req.action = Some("deleted".into());
            Intent::Delete { trigger_key }
        }
    };
    let (session_key, repo_key) = req.session_to_wake().expect("a change wakes its session");
    h.store
        .write(move |c| ingest::ingest(c, &req))
        .await
        .unwrap();
    h.registry.do_send(RunCommands {
        session_key,
        repo_key,
    });
}

async fn entry(h: &Harness, task: &TaskId) -> codex_bridge::store::models::OutboxEntry {
    let id = task.clone();
    h.store
        .read(move |c| sessions::outbox_entry(c, &id))
        .await
        .unwrap()
        .unwrap()
}

async fn changes_decided(h: &Harness) {
    let done = poll_until_async(Duration::from_secs(15), || async {
        let key = resource("default:acme/widgets:issue:1");
        h.store
            .read(move |c| commands::next_change(c, &key))
            .await
            .unwrap()
            .is_none()
    })
    .await;
    assert!(done, "the session decides every change");
}

#[test]
fn an_edit_before_admission_rewrites_the_message_and_a_deletion_cancels_it() {
    run(async {
        let h = Harness::start(hanging(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let edited = h.comment("widgets", 1, 2, "@ccbot fix the OLD thing").await;
        let deleted = h
            .comment("widgets", 1, 3, "@ccbot do the DELETED thing")
            .await;
        let before = entry(&h, &edited).await;
        change(&h, 1, 2, Some("@ccbot fix the NEW thing"), 1).await;
        change(&h, 1, 3, None, 1).await;
        changes_decided(&h).await;
        h.wait_state(&deleted, TaskState::Cancelled).await;
        let code = h.detail(&deleted).await.task.error_code;
        assert_eq!(code.as_deref(), Some("comment_deleted"));
        let after = entry(&h, &edited).await;
        assert_eq!(after.queue_id, before.queue_id, "same place in the queue");
        assert_ne!(after.operation_id, before.operation_id, "a new operation");
        assert_ne!(after.fingerprint, before.fingerprint);
        assert!(after.user_text.contains("NEW"));
        assert_eq!(h.state(&running).await, TaskState::Running, "never touched");
        // Let the queue move: the model only ever sees the new text.
        let stop = h.comment("widgets", 1, 4, "@ccbot /stop").await;
        h.wait_state(&stop, TaskState::Succeeded).await;
        h.wait_state(&edited, TaskState::Succeeded).await;
        let calls = h.runtime.calls();
        assert!(calls.iter().any(|c| c.text.contains("NEW")), "{calls:?}");
        assert!(
            !calls
                .iter()
                .any(|c| c.text.contains("OLD") || c.text.contains("DELETED")),
            "{calls:?}"
        );
        let sent = calls.iter().find(|c| c.text.contains("NEW")).unwrap();
        assert_eq!(sent.operation_id, after.operation_id.as_str());
    });
}

#[test]
fn an_edit_after_admission_changes_nothing_and_is_answered_once() {
    run(async {
        let h = Harness::start(hanging(), settings());
        let running = h
            .comment("widgets", 1, 1, "@ccbot hang on the OLD thing")
            .await;
        h.wait_state(&running, TaskState::Running).await;
        let before = entry(&h, &running).await;
        change(&h, 1, 1, Some("@ccbot hang on the NEW thing"), 1).await;
        change(&h, 1, 1, Some("@ccbot hang on the NEWER thing"), 2).await;
        change(&h, 1, 1, None, 3).await;
        changes_decided(&h).await;
        assert_eq!(h.state(&running).await, TaskState::Running);
        assert!(
            h.runtime.interrupts().is_empty(),
            "the running turn is never touched"
        );
        assert_eq!(
            entry(&h, &running).await,
            before,
            "the message stays as sent"
        );
        assert_eq!(
            rows(&h, &running).await,
            [
                comments::receipt_key(&running, TaskState::Received),
                commands::late_edit_key(&running)
            ],
            "one receipt for the late edits"
        );
    });
}

/// An edit Gitea stamps with the same second as the version before it
/// derives the same operation id but asks something else: the first claim
/// stands (entry, operation and fingerprint unchanged), the thread is told
/// once, and the turn runs the text as first written.
#[test]
fn an_edit_in_the_same_second_never_overwrites_the_first_claim() {
    run(async {
        let h = Harness::start(hanging(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let first = h
            .comment("widgets", 1, 2, "@ccbot fix the FIRST thing")
            .await;
        let before = entry(&h, &first).await;
        // n = 0: written at the comment's own creation second.
        change(&h, 1, 2, Some("@ccbot fix the SECOND thing"), 0).await;
        changes_decided(&h).await;
        let after = entry(&h, &first).await;
        assert_eq!(after.operation_id, before.operation_id);
        assert_eq!(after.fingerprint, before.fingerprint);
        assert!(after.user_text.contains("FIRST"), "{}", after.user_text);
        let actions = h.actions(&first).await;
        assert!(
            actions.contains(&"outbox.fingerprint_conflict".to_owned()),
            "{actions:?}"
        );
        let key = format!("{first}:edit_conflict");
        let note = h
            .store
            .read(move |c| comments::find(c, &key))
            .await
            .unwrap();
        assert!(note.is_some(), "the thread is told once");
        let stop = h.comment("widgets", 1, 4, "@ccbot /stop").await;
        h.wait_state(&stop, TaskState::Succeeded).await;
        h.wait_state(&first, TaskState::Succeeded).await;
        let calls = h.runtime.calls();
        assert!(calls.iter().any(|c| c.text.contains("FIRST")), "{calls:?}");
        assert!(
            !calls.iter().any(|c| c.text.contains("SECOND")),
            "{calls:?}"
        );
    });
}

/// A turn command with nothing to act on (`/steer`, `/interrupt` and
/// `/replace` without text; `/review` on an Issue) gets one answer saying
/// so, and nothing else: no turn, no steer, the running turn untouched.
#[test]
fn a_turn_command_with_nothing_to_act_on_is_answered_once_and_runs_nothing() {
    run(async {
        let h = Harness::start(hanging(), settings());
        let running = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&running, TaskState::Running).await;
        let mut void = Vec::new();
        for (n, text) in [
            "@ccbot /steer",
            "@ccbot /interrupt   ",
            "@ccbot /replace",
            "@ccbot /review",
        ]
        .into_iter()
        .enumerate()
        {
            void.push(h.comment("widgets", 1, 2 + n as i64, text).await);
        }
        h.wait_all(&void, TaskState::Succeeded).await;
        for (task, says) in void.iter().zip([
            "`/steer`: nothing to do. Write what to send",
            "`/interrupt`: nothing to do. Write what to send",
            "`/replace`: nothing to do. Write what to send",
            "`/review`: nothing to do. This is an Issue",
        ]) {
            let text = answer(&h, task).await;
            assert!(text.starts_with(says), "{text}");
            let kept = rows(&h, task).await;
            assert_eq!(kept.len(), 1, "one answer and no receipt: {kept:?}");
        }
        assert_eq!(h.state(&running).await, TaskState::Running, "never touched");
        assert_eq!(h.runtime.calls().len(), 1, "{:?}", h.runtime.calls());
        assert!(h.runtime.steers().is_empty());
    });
}
