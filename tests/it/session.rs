//! The session actor's decisions, end to end in process on a real SQLite
//! store with the scripted runtime: a workspace that cannot be named starts
//! nothing, a decision that lost its compare-and-swap is audited and decided
//! again from the store, and an approval decided through this process wakes
//! the waiting session at once.

use super::actors::{run, settings, Harness};
use super::actors_control::asking_for_approval;
use crate::support::{repo, resource};
use actix::prelude::*;
use codex_bridge::actors::registry::ApprovalDecided;
use codex_bridge::agent::scripted::{Script, ScriptedAgent, StartBehaviour, Step};
use codex_bridge::domain::TaskId;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::control::{self, ControlRequest};
use codex_bridge::store::{approvals, audit, comments, tasks};
use std::time::Duration;

fn operator(request_id: &str) -> ControlRequest {
    ControlRequest {
        request_id: request_id.into(),
        reason: "test".into(),
        actor: "admin:alice".into(),
    }
}

async fn audit_events(h: &Harness, task_id: &TaskId) -> Vec<audit::AuditView> {
    let id = task_id.clone();
    h.store
        .read(move |c| {
            audit::list(
                c,
                &audit::AuditFilter {
                    task_id: Some(id),
                    limit: 1000,
                    ..Default::default()
                },
            )
        })
        .await
        .unwrap()
}

async fn audit_actions(h: &Harness, task_id: &TaskId) -> Vec<String> {
    audit_events(h, task_id)
        .await
        .into_iter()
        .map(|e| e.action)
        .collect()
}

/// A runtime whose turn/start for "uncertain" answers that it may or may not
/// have been admitted.
fn uncertain_runtime() -> ScriptedAgent {
    let rt = ScriptedAgent::new();
    rt.on(
        "uncertain",
        Script {
            start: StartBehaviour::Uncertain,
            steps: vec![],
        },
    );
    rt
}

#[test]
fn a_task_whose_workspace_cannot_be_named_fails_and_starts_no_turn() {
    run(async {
        let h = Harness::start(ScriptedAgent::new(), settings());
        h.workspaces
            .unnamed
            .lock()
            .unwrap()
            .insert("ghost".to_owned());
        let id = h.comment("ghost", 1, 1, "@ccbot do it").await;
        h.wait_state(&id, TaskState::Failed).await;
        let task = h.task(&id).await;
        assert_eq!(task.error_code.as_deref(), Some("workspace_unavailable"));
        assert!(h.runtime.calls().is_empty(), "no turn may start");
        assert_eq!(h.runtime.threads_started(), 0, "no thread either");
        assert_eq!(
            h.workspaces.prepared.lock().unwrap().as_slice(),
            ["ghost"],
            "the repository actor prepared it; only naming it failed"
        );
        let key = comments::receipt_key(&id, "failed".parse().unwrap());
        let receipt = h
            .store
            .read(move |c| comments::find(c, &key))
            .await
            .unwrap();
        assert!(receipt.is_some(), "the failure gets its receipt");
        System::current().stop();
    });
}

#[test]
fn a_decision_that_lost_its_compare_and_swap_is_audited_and_decided_again() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.on(
            "risky",
            Script::steps(vec![Step::AskApproval("command"), Step::Hang]),
        );
        let h = Harness::start(rt, settings());
        let id = h.comment("widgets", 1, 1, "@ccbot risky").await;
        h.wait_state(&id, TaskState::AwaitingApproval).await;
        // Another process (the CLI, another instance) aborts the task and
        // decides the approval; this process's session hears of neither.
        let i = id.clone();
        h.store
            .write(move |c| control::abort_task(c, &operator("abort-1"), &i))
            .await
            .unwrap();
        let pending = h.store.read(approvals::pending).await.unwrap();
        let a = pending[0].approval_id.clone();
        h.store
            .write(move |c| approvals::decide(c, &operator("ok-1"), &a, true))
            .await
            .unwrap();
        // The session decided `running` on the version it had seen; the
        // store says `cancel_requested`: it decides again, and interrupts.
        h.wait_state(&id, TaskState::Aborted).await;
        let actions = audit_actions(&h, &id).await;
        assert!(
            actions.contains(&"task.decision_stale".to_owned()),
            "{actions:?}"
        );
        assert!(
            !actions.contains(&"task.transition_refused".to_owned()),
            "a stale decision is decided again, never forced: {actions:?}"
        );
        assert_eq!(h.runtime.interrupts().len(), 1);
        assert_eq!(
            h.runtime.decisions(),
            [(h.runtime.decisions()[0].0.clone(), true)]
        );
        System::current().stop();
    });
}

#[test]
fn an_approval_decided_through_this_process_wakes_the_waiting_session() {
    run(async {
        let mut s = settings();
        // Decisions written by other processes are found by this re-read;
        // an hour means only the wake-up can end the wait within the test.
        s.sweep = Duration::from_secs(3600);
        s.approval_timeout = Duration::from_secs(3600);
        let h = asking_for_approval("command", "did it", s);
        let id = h.comment("widgets", 1, 1, "@ccbot risky").await;
        h.wait_state(&id, TaskState::AwaitingApproval).await;
        let pending = h.store.read(approvals::pending).await.unwrap();
        let a = pending[0].approval_id.clone();
        h.store
            .write(move |c| approvals::decide(c, &operator("ok-1"), &a, true))
            .await
            .unwrap();
        h.registry.do_send(ApprovalDecided {
            session_key: resource("default:acme/widgets:issue:1"),
            repo_key: repo("default:acme/widgets"),
            task_id: id.clone(),
        });
        h.wait_state(&id, TaskState::Succeeded).await;
        assert_eq!(h.runtime.decisions().len(), 1);
        assert!(h.runtime.decisions()[0].1, "accepted");
        // The transcript: the prompt as sent, then the approval and its decision.
        let t = id.clone();
        let page = h
            .store
            .read(move |c| {
                use codex_bridge::store::transcripts::{task_transcript, TranscriptCursor};
                task_transcript(c, &t, None, TranscriptCursor::START, 10)
            })
            .await
            .unwrap();
        let items: Vec<_> = page.turns[0]
            .items
            .iter()
            .map(|i| serde_json::to_value(i).unwrap())
            .collect();
        assert_eq!(items.len(), 2, "{items:?}");
        assert_eq!(items[0]["kind"], "prompt");
        let untrusted: Vec<&serde_json::Value> = items[0]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["untrusted"] == true)
            .collect();
        assert_eq!(
            untrusted,
            [&serde_json::json!({"text": "@ccbot risky", "untrusted": true})]
        );
        assert_eq!(items[1]["kind"], "approval");
        assert_eq!(items[1]["request"], "command");
        assert_eq!(
            (&items[1]["status"], &items[1]["decision"]),
            (&serde_json::json!("accepted"), &serde_json::json!("accept"))
        );
        System::current().stop();
    });
}

#[test]
fn a_workspace_failure_never_overwrites_an_abort_that_landed_while_it_prepared() {
    use codex_bridge::workspace::WorkspaceError;
    run(async {
        let h = Harness::start(ScriptedAgent::new(), settings());
        let (open, gate) = std::sync::mpsc::channel();
        h.workspaces
            .gates
            .lock()
            .unwrap()
            .insert("broken".into(), gate);
        h.workspaces
            .failures
            .lock()
            .unwrap()
            .insert("broken".into(), || WorkspaceError::Git {
                op: "checkout",
                path: "/ws/default/acme/broken".into(),
                stderr: "no such ref".into(),
            });
        let id = h.comment("broken", 1, 1, "@ccbot x").await;
        h.wait_state(&id, TaskState::Leased).await;
        let i = id.clone();
        h.store
            .write(move |c| control::abort_task(c, &operator("abort-1"), &i))
            .await
            .unwrap();
        open.send(()).unwrap();
        // The failure was decided on the claim's version: stale, so the
        // operator's abort stands and the session settles it.
        h.wait_state(&id, TaskState::Cancelled).await;
        let actions = audit_actions(&h, &id).await;
        assert!(
            actions.contains(&"workspace.failed".to_owned()),
            "{actions:?}"
        );
        assert!(
            actions.contains(&"task.decision_stale".to_owned()),
            "{actions:?}"
        );
        System::current().stop();
    });
}

#[test]
fn audit_records_and_reasons_carry_stable_codes_not_debug_text() {
    run(async {
        let h = Harness::start(uncertain_runtime(), settings());
        let id = h.comment("widgets", 1, 1, "@ccbot uncertain").await;
        h.wait_state(&id, TaskState::NeedsReconciliation).await;
        let events = audit_events(&h, &id).await;
        let i = id.clone();
        let history = h.store.read(move |c| tasks::history(c, &i)).await.unwrap();
        let checked = events
            .iter()
            .find(|e| e.action == "turn.history_checked")
            .expect("the lookup is audited");
        assert_eq!(checked.metadata["found"], "missing", "{}", checked.metadata);
        let last = history.last().unwrap();
        assert_eq!(last.to_state.as_str(), "needs_reconciliation");
        assert_eq!(last.error_code.as_deref(), Some("uncertain_admission"));
        // Rust's debug text names variants and braces (`Missing`, `Ok(`, `{`).
        for text in events
            .iter()
            .map(|e| e.metadata.to_string())
            .chain(history.iter().filter_map(|t| t.reason.clone()))
        {
            for debug in ["Ok(", "Err(", "Missing", "Uncertain(", "Some("] {
                assert!(!text.contains(debug), "debug text stored: {text}");
            }
        }
        System::current().stop();
    });
}

#[test]
fn a_history_lookup_that_cannot_be_audited_decides_nothing() {
    use diesel::connection::SimpleConnection;
    run(async {
        let h = Harness::start(uncertain_runtime(), settings());
        // The store refuses exactly the lookup's audit record.
        let refuse = |sql: &'static str| {
            h.store.write(move |c| {
                codex_bridge::with_conn!(c, |conn| conn.batch_execute(sql))?;
                Ok(())
            })
        };
        refuse(
            "CREATE TRIGGER refuse_history_audit BEFORE INSERT ON audit_events \
             WHEN NEW.action = 'turn.history_checked' \
             BEGIN SELECT RAISE(ABORT, 'audit refused by the test'); END;",
        )
        .await
        .unwrap();
        let id = h.comment("widgets", 1, 1, "@ccbot uncertain").await;
        // The passes after the failure come from the registry's sweep and
        // from the session's retry a second after a store failure: timers on
        // tokio's clock, which the test pauses and moves on by 100 ms a poll
        // instead of waiting for them in real time.
        tokio::time::pause();
        // Wait until the session failed on the store, then passed over the
        // task twice more.
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let mut failed_at = None;
        loop {
            let tree = h.health().await;
            let session = tree
                .repositories
                .iter()
                .flat_map(|r| r.sessions.iter())
                .next()
                .cloned();
            if let Some(s) = session {
                let refused = s
                    .last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("audit refused"));
                match failed_at {
                    None if refused => failed_at = Some(s.normal_lane.passes),
                    Some(p) if s.normal_lane.passes >= p + 2 => break,
                    _ => {}
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the session never failed on the refused audit and tried again"
            );
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        assert_eq!(
            h.state(&id).await,
            TaskState::Leased,
            "an unaudited lookup must not be decided on"
        );
        refuse("DROP TRIGGER refuse_history_audit;").await.unwrap();
        h.wait_state(&id, TaskState::NeedsReconciliation).await;
        System::current().stop();
    });
}
