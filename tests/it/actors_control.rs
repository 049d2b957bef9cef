//! The actor tree in process, continued (the rig is `crate::actors`'s
//! [`Harness`]): what stops, holds or shapes a turn once it is scheduled —
//! abort, idle sessions, many repositories at once, a missing reply, pause
//! and disable, deadlines, each repository's policy, an interrupt that is
//! not confirmed, and approvals.

use crate::actors::*;
use crate::support::{poll_until_async, repo, resource, wait_until_async};
use actix::prelude::*;
use codex_bridge::actors::health::RepoActorStatus;
use codex_bridge::actors::registry::{AbortTask, Notify};
use codex_bridge::agent::scripted::{Script, ScriptedAgent, Step};
use codex_bridge::domain::policy::{ApprovalPolicy, RepoPolicy, Sandbox};
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::ingest::{self, IngestOutcome};
use codex_bridge::store::tasks;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn abort_interrupts_a_hanging_turn() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.on("hang", Script::steps(vec![Step::Progress("x"), Step::Hang]));
        let h = Harness::start(rt, settings());
        let id = h.comment("widgets", 1, 1, "@ccbot hang").await;
        h.wait_state(&id, TaskState::Running).await;
        h.registry.do_send(AbortTask {
            session_key: resource("default:acme/widgets:issue:1"),
            repo_key: repo("default:acme/widgets"),
            task_id: id.clone(),
        });
        h.wait_state(&id, TaskState::Aborted).await;
        assert_eq!(h.runtime.interrupts().len(), 1);
        let next = h.comment("widgets", 1, 2, "@ccbot next").await;
        h.wait_state(&next, TaskState::Succeeded).await;
        System::current().stop();
    });
}

#[test]
fn idle_sessions_stop_and_revive() {
    run(async {
        let mut s = settings();
        s.session_idle = Duration::from_millis(300);
        let h = Harness::start(ScriptedAgent::new(), s);
        let first = h.comment("widgets", 1, 1, "@ccbot one").await;
        h.wait_state(&first, TaskState::Succeeded).await;
        let h = &h;
        wait_until_async(
            "the idle session actor to stop",
            Duration::from_secs(10),
            || async move { h.health().await.session_actors == 0 },
        )
        .await;
        let second = h.comment("widgets", 1, 2, "@ccbot two").await;
        h.wait_state(&second, TaskState::Succeeded).await;
        let calls = h.runtime.calls();
        assert_eq!(
            calls[0].thread_id, calls[1].thread_id,
            "the revived session resumes its thread"
        );
        assert_eq!(h.runtime.threads_started(), 1);
        System::current().stop();
    });
}

#[test]
fn stress_no_repository_runs_two_tasks_at_once_repositories_run_in_parallel_fifo_holds() {
    run(async {
        let rt = ScriptedAgent::new();
        for ms in [5u64, 20, 40, 80] {
            rt.on(
                &format!("sleep{ms}"),
                Script::steps(vec![
                    Step::Sleep(Duration::from_millis(ms)),
                    Step::Complete("ok".into()),
                ]),
            );
        }
        let h = Harness::start(rt, settings());
        let mut ids = Vec::new();
        let mut n = 0;
        for round in 0..6 {
            for repo in 0..8 {
                n += 1;
                let ms = [5u64, 20, 40, 80][(round + repo) % 4];
                let issue = n % 3;
                ids.push(
                    h.comment(
                        &format!("repo{repo}"),
                        issue,
                        n,
                        &format!("@ccbot {n:03} sleep{ms}"),
                    )
                    .await,
                );
            }
        }
        h.wait_all(&ids, TaskState::Succeeded).await;
        let calls = h.runtime.calls();
        assert_eq!(calls.len(), ids.len());
        let ends: HashMap<String, Instant> = h.runtime.ends().into_iter().collect();
        let mut by_repo: HashMap<PathBuf, Vec<(Instant, Instant, String)>> = HashMap::new();
        for c in &calls {
            by_repo.entry(c.cwd.clone()).or_default().push((
                c.at,
                ends[&c.turn_id],
                c.text.clone(),
            ));
        }
        for (repo, mut turns) in by_repo {
            turns.sort_by_key(|t| t.0);
            for pair in turns.windows(2) {
                assert!(pair[0].1 <= pair[1].0, "{repo:?} ran two turns at once");
            }
            let texts: Vec<&String> = turns.iter().map(|t| &t.2).collect();
            let mut sorted = texts.clone();
            sorted.sort();
            assert_eq!(texts, sorted, "{repo:?} did not run FIFO");
        }
        // Different repositories overlapped in time.
        let mut overlaps = 0;
        for a in &calls {
            for b in &calls {
                if a.cwd != b.cwd && a.at < b.at && b.at < ends[&a.turn_id] {
                    overlaps += 1;
                }
            }
        }
        assert!(overlaps > 0, "repositories never ran in parallel");
        System::current().stop();
    });
}

#[test]
fn a_missing_or_unverifiable_reply_is_failed_reply() {
    run(async {
        let h = Harness::start(ScriptedAgent::new(), settings());
        *h.verifier.answer.lock().unwrap() =
            codex_bridge::forge::ReplyCheck::Unknown("gitea answered 500".into());
        let id = h.comment("widgets", 1, 1, "@ccbot reply").await;
        h.wait_state(&id, TaskState::FailedReply).await;
        let t = h.task(&id).await;
        assert_eq!(t.error_code.as_deref(), Some("reply_unverifiable"));
        System::current().stop();
    });
}

/// A harness whose `risky` turn asks for an approval of `kind`, then
/// completes with `reply`.
pub(crate) fn asking_for_approval(
    kind: &'static str,
    reply: &str,
    settings: codex_bridge::actors::ActorSettings,
) -> Harness {
    let rt = ScriptedAgent::new();
    rt.on(
        "risky",
        Script::steps(vec![Step::AskApproval(kind), Step::Complete(reply.into())]),
    );
    Harness::start(rt, settings)
}

/// An approval of a command, waited on for 30 s.
fn asking_for_a_command() -> Harness {
    let mut s = settings();
    s.approval_timeout = Duration::from_secs(30);
    asking_for_approval("command", "did it", s)
}

#[test]
fn pause_and_disable_keep_tasks_queued_until_lifted() {
    use codex_bridge::store::approvals;
    use codex_bridge::store::control::{self, ControlRequest};
    run(async {
        let h = asking_for_a_command();
        let req = |id: &str| ControlRequest {
            request_id: id.into(),
            reason: "test".into(),
            actor: "admin:test".into(),
        };
        let r = req("p1");
        h.store
            .write(move |c| control::set_paused(c, &r, true))
            .await
            .unwrap();
        let paused = h.comment("widgets", 1, 1, "@ccbot while paused").await;
        h.wait_repo_passes("widgets", RepoActorStatus::Paused).await;
        assert_eq!(
            h.state(&paused).await,
            TaskState::Queued,
            "paused: stays queued"
        );
        let r = req("p2");
        h.store
            .write(move |c| control::set_paused(c, &r, false))
            .await
            .unwrap();
        h.wait_state(&paused, TaskState::Succeeded).await;

        let r = req("d1");
        h.store
            .write(move |c| {
                control::set_repository_enabled(c, &r, &repo("default:acme/widgets"), false)
            })
            .await
            .unwrap();
        let refused = h
            .store
            .write(|c| ingest::ingest(c, &request("widgets", 2, 2, "@ccbot while disabled")))
            .await
            .unwrap();
        let IngestOutcome::RepositoryDisabled { .. } = refused else {
            panic!("a disabled repository refuses new work: {refused:?}")
        };
        let r = req("e1");
        h.store
            .write(move |c| {
                control::set_repository_enabled(c, &r, &repo("default:acme/widgets"), true)
            })
            .await
            .unwrap();

        // Disabling stops the repository from starting work; it does not stop
        // work already started (abort does that), nor drop what is queued.
        // The task behind is accepted and the repository disabled in one
        // commit, so no scheduling pass can have started it first.
        let started = h.comment("widgets", 2, 3, "@ccbot risky").await;
        h.wait_state(&started, TaskState::AwaitingApproval).await;
        let r = req("d2");
        let out = h
            .store
            .write(move |c| {
                let out = ingest::ingest(c, &request("widgets", 3, 4, "@ccbot queued"))?;
                control::set_repository_enabled(c, &r, &repo("default:acme/widgets"), false)?;
                Ok(out)
            })
            .await
            .unwrap();
        let IngestOutcome::Accepted {
            task_id: queued, ..
        } = out
        else {
            panic!("accepted while the repository was active: {out:?}")
        };
        h.registry.do_send(Notify {
            repo_key: repo("default:acme/widgets"),
        });
        let pending = h.store.read(approvals::pending).await.unwrap();
        let (approval, r) = (pending[0].approval_id.clone(), req("ok-1"));
        h.store
            .write(move |c| approvals::decide(c, &r, &approval, true))
            .await
            .unwrap();
        h.wait_state(&started, TaskState::Succeeded).await;
        h.wait_repo_passes("widgets", RepoActorStatus::Disabled)
            .await;
        assert_eq!(
            h.state(&queued).await,
            TaskState::Queued,
            "disabled: the task waits"
        );
        assert!(
            h.runtime.calls().iter().all(|c| c.text != "@ccbot queued"),
            "a disabled repository started a turn"
        );

        let r = req("e2");
        h.store
            .write(move |c| {
                control::set_repository_enabled(c, &r, &repo("default:acme/widgets"), true)
            })
            .await
            .unwrap();
        h.registry.do_send(Notify {
            repo_key: repo("default:acme/widgets"),
        });
        h.wait_state(&queued, TaskState::Succeeded).await;
        System::current().stop();
    });
}

#[test]
fn a_turn_past_its_deadline_is_interrupted_and_timed_out() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.on(
            "slowpoke",
            Script::steps(vec![Step::Progress("x"), Step::Hang]),
        );
        let mut s = settings();
        s.turn_timeout = Duration::from_millis(300);
        let h = Harness::start(rt, s);
        let id = h.comment("widgets", 1, 1, "@ccbot slowpoke").await;
        h.wait_state(&id, TaskState::TimedOut).await;
        assert_eq!(h.runtime.interrupts().len(), 1);
        // The repository is free again.
        let next = h.comment("widgets", 1, 2, "@ccbot quick").await;
        h.wait_state(&next, TaskState::Succeeded).await;
        System::current().stop();
    });
}

#[test]
fn each_repository_gets_its_own_approval_policy_sandbox_and_deadline() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.on(
            "slowpoke",
            Script::steps(vec![
                Step::Progress("x"),
                Step::Sleep(Duration::from_millis(900)),
                Step::Complete("late".into()),
            ]),
        );
        let mut s = settings();
        s.turn_timeout = Duration::from_secs(30);
        let strict = RepoPolicy {
            approval_policy: ApprovalPolicy::Untrusted,
            sandbox: Sandbox::WorkspaceWrite,
            turn_timeout: Duration::from_millis(300),
        };
        // Keys are matched case-insensitively, as Gitea matches names.
        s.repositories = Arc::new([("acme/strict".to_owned(), strict)].into_iter().collect());
        let h = Harness::start(rt, s);
        let slow_strict = h.comment("Strict", 1, 1, "@ccbot slowpoke").await;
        let slow_lax = h.comment("lax", 1, 2, "@ccbot slowpoke").await;
        h.wait_state(&slow_strict, TaskState::TimedOut).await;
        h.wait_state(&slow_lax, TaskState::Succeeded).await;
        let mut threads: Vec<(String, ApprovalPolicy, Sandbox)> = h
            .runtime
            .thread_requests()
            .into_iter()
            .map(|(cwd, policy, sandbox)| {
                let repo = cwd.file_name().unwrap().to_string_lossy().into_owned();
                (repo, policy, sandbox)
            })
            .collect();
        threads.sort();
        assert_eq!(
            threads,
            vec![
                (
                    "Strict".into(),
                    ApprovalPolicy::Untrusted,
                    Sandbox::WorkspaceWrite
                ),
                (
                    "lax".into(),
                    ApprovalPolicy::Never,
                    Sandbox::DangerFullAccess
                ),
            ]
        );
        System::current().stop();
    });
}

#[test]
fn an_unconfirmed_interrupt_resets_the_runtime_and_needs_reconciliation() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.on(
            "stubborn",
            Script::steps(vec![Step::Progress("x"), Step::Stubborn]),
        );
        let mut s = settings();
        s.turn_timeout = Duration::from_millis(200);
        s.interrupt_grace = Duration::from_millis(300);
        let h = Harness::start(rt, s);
        let id = h.comment("widgets", 1, 1, "@ccbot stubborn").await;
        h.wait_state(&id, TaskState::NeedsReconciliation).await;
        let t = h.task(&id).await;
        assert_eq!(t.error_code.as_deref(), Some("interrupt_unconfirmed"));
        System::current().stop();
    });
}

#[test]
fn an_approval_waits_for_an_operator_and_a_forgotten_one_is_declined() {
    use codex_bridge::store::approvals;
    use codex_bridge::store::control::ControlRequest;
    run(async {
        let h = asking_for_a_command();
        let id = h.comment("widgets", 1, 1, "@ccbot risky").await;
        h.wait_state(&id, TaskState::AwaitingApproval).await;
        let pending = h.store.read(approvals::pending).await.unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].kind, "command");
        assert!(pending[0].detail.contains("touch approved.txt"));
        // The store says so first; the actor shows it once its drive waits.
        let shown = poll_until_async(Duration::from_secs(10), || async {
            let tree = h.health().await;
            tree.repositories[0].sessions[0].status.as_str() == "awaiting_approval"
        })
        .await;
        assert!(shown, "the session actor never showed awaiting_approval");
        let (approval, req) = (
            pending[0].approval_id.clone(),
            ControlRequest {
                request_id: "ok-1".into(),
                reason: "looks fine".into(),
                actor: "admin:alice".into(),
            },
        );
        h.store
            .write(move |c| approvals::decide(c, &req, &approval, true))
            .await
            .unwrap();
        h.wait_state(&id, TaskState::Succeeded).await;
        assert_eq!(h.runtime.decisions().len(), 1);
        assert!(h.runtime.decisions()[0].1, "accepted");
        let i = id.clone();
        let path: Vec<String> = h
            .store
            .read(move |c| tasks::history(c, &i))
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.to_state.to_string())
            .collect();
        assert_eq!(
            path,
            [
                "queued",
                "leased",
                "running",
                "awaiting_approval",
                "running",
                "verifying_reply",
                "succeeded"
            ]
        );
        System::current().stop();
    });
    run(async {
        let mut s = settings();
        s.approval_timeout = Duration::from_millis(300);
        let h = asking_for_approval("file_change", "went on without it", s);
        let id = h.comment("widgets", 1, 1, "@ccbot risky").await;
        h.wait_state(&id, TaskState::Succeeded).await;
        assert_eq!(h.runtime.decisions().len(), 1);
        assert!(!h.runtime.decisions()[0].1, "declined on timeout");
        let detail = h.detail(&id).await;
        assert_eq!(detail.approvals.len(), 1);
        assert_eq!(detail.approvals[0].decision.as_deref(), Some("decline"));
        assert_eq!(
            detail.approvals[0].decided_by.as_deref(),
            Some("system:timeout")
        );
        System::current().stop();
    });
}
