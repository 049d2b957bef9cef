//! The actor tree in process, on a real SQLite store, with the scripted
//! runtime: scheduling, FIFO and mutual exclusion per repository, faults and
//! supervision, uncertain admission, workspaces, health (what stops, holds or
//! shapes a scheduled turn is in `crate::actors_control`).
//!
//! [`Harness`] is the one rig besides `crate::testapp`, for what the server
//! cannot be asked through its configuration: the scripted agent and the
//! workspaces are the test's own values (a script per test, a panic or a
//! hang in a turn, a workspace that fails, waits on a gate or cannot be
//! named), the actor settings go below the configuration's whole seconds
//! (leases, sweeps, deadlines in milliseconds), and the registry is an
//! address the test sends messages to.

use crate::support::{poll_until_async, repo};
use actix::prelude::*;
use codex_bridge::actors::health::{RegistryHealth, RepoActorStatus};
use codex_bridge::actors::registry::{Notify, Registry, RunCommands, Snapshot};
use codex_bridge::actors::{ActorDeps, ActorSettings, Workspaces};
use codex_bridge::agent::scripted::{Script, ScriptedAgent, StartBehaviour, Step};
use codex_bridge::config::DatabaseUrl;
use codex_bridge::domain::{IngestRequest, Intent, RepoRef, ResourceKind, Subject, TaskId};
use codex_bridge::forge::scripted::ScriptedForge;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::ingest::{self, IngestOutcome};
use codex_bridge::store::tasks::{self, Verdict};
use codex_bridge::store::{Store, StoreSettings, WriterSettings};
use codex_bridge::workspace::{Checkout, RepoSpec, WorkspaceError};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Makes the error a failing repository's `prepare` returns (a
/// `WorkspaceError` may hold an `io::Error` and is not `Clone`).
pub type Failure = fn() -> WorkspaceError;

/// Workspaces under a temp root; a test can make a repository fail.
#[derive(Clone, Default)]
pub struct TestWorkspaces {
    root: PathBuf,
    /// Repositories whose `prepare` fails, with the error it fails with.
    pub failures: Arc<Mutex<HashMap<String, Failure>>>,
    /// Repositories whose `prepare` waits until the test sends on the gate.
    pub gates: Arc<Mutex<HashMap<String, std::sync::mpsc::Receiver<()>>>>,
    pub prepared: Arc<Mutex<Vec<String>>>,
    /// Repositories whose folder `path_for` refuses to name after `prepare`
    /// succeeded (a workspace that cannot be named when the turn starts).
    pub unnamed: Arc<Mutex<std::collections::HashSet<String>>>,
}

impl Workspaces for TestWorkspaces {
    fn prepare(&self, repo: &RepoSpec, _: &Checkout) -> Result<PathBuf, WorkspaceError> {
        let gate = self.gates.lock().unwrap().remove(&repo.name);
        if let Some(gate) = gate {
            let _ = gate.recv();
        }
        if let Some(failure) = self.failures.lock().unwrap().get(&repo.name) {
            return Err(failure());
        }
        self.prepared.lock().unwrap().push(repo.name.clone());
        let path = self.root.join("default").join(&repo.owner).join(&repo.name);
        std::fs::create_dir_all(&path).unwrap();
        Ok(path)
    }

    fn path_for(&self, owner: &str, name: &str) -> Result<PathBuf, WorkspaceError> {
        if self.unnamed.lock().unwrap().contains(name) {
            return Err(WorkspaceError::InvalidName {
                field: "repository",
                value: name.to_owned(),
                reason: "the test refuses to name it",
            });
        }
        Ok(self.root.join("default").join(owner).join(name))
    }
}

pub struct Harness {
    pub store: Store,
    pub runtime: ScriptedAgent,
    pub verifier: ScriptedForge,
    pub workspaces: TestWorkspaces,
    pub registry: Addr<Registry>,
    _dir: tempfile::TempDir,
}

pub fn settings() -> ActorSettings {
    let mut s = ActorSettings::new("default");
    // The login the harness's comments mention.
    s.bot_login = "ccbot".into();
    s.lease_ttl = Duration::from_secs(3);
    s.heartbeat = Duration::from_millis(300);
    s.sweep = Duration::from_millis(200);
    s.session_idle = Duration::from_secs(600);
    s.retry_backoff = Duration::from_millis(100);
    s.history_wait = Duration::from_secs(3);
    s
}

impl Harness {
    /// Must be called inside an actix System.
    pub fn start(runtime: ScriptedAgent, settings: ActorSettings) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreSettings {
            url: DatabaseUrl::Sqlite(dir.path().join("actors.db")),
            read_pool_size: 4,
            sqlite_busy_timeout: Duration::from_secs(5),
            writer: WriterSettings {
                batch_max: 64,
                threads: 1,
                queue_capacity: 4096,
                ingest: Default::default(),
            },
        })
        .unwrap();
        let workspaces = TestWorkspaces {
            root: dir.path().join("ws"),
            ..Default::default()
        };
        let verifier = ScriptedForge::default();
        let deps = Arc::new(ActorDeps {
            store: store.clone(),
            runtime: Arc::new(runtime.clone()),
            verifier: Arc::new(verifier.clone()),
            workspaces: Arc::new(workspaces.clone()),
            settings,
        });
        let registry = Registry::new(deps).start();
        Harness {
            store,
            runtime,
            verifier,
            workspaces,
            registry,
            _dir: dir,
        }
    }

    /// Commits a comment as the webhook would, then notifies the registry.
    pub async fn comment(&self, repo: &str, number: i64, comment_id: i64, text: &str) -> TaskId {
        self.comment_as("bob", repo, number, comment_id, text).await
    }

    /// As [`Harness::comment`], by `author`; a turnless command goes to its
    /// session at once, as the webhook sends it.
    pub async fn comment_as(
        &self,
        author: &str,
        repo: &str,
        number: i64,
        comment_id: i64,
        text: &str,
    ) -> TaskId {
        let mut req = request(repo, number, comment_id, text);
        if let Some(s) = req.subject.as_mut() {
            s.author = author.to_owned();
        }
        let session = req.session_to_wake();
        let out = self
            .store
            .write(move |c| ingest::ingest(c, &req))
            .await
            .unwrap();
        let IngestOutcome::Accepted { task_id, .. } = out else {
            panic!("not accepted: {out:?}")
        };
        if let Some((session_key, repo_key)) = session {
            self.registry.do_send(RunCommands {
                session_key,
                repo_key,
            });
        }
        self.registry.do_send(Notify {
            repo_key: format!("default:acme/{repo}").parse().unwrap(),
        });
        task_id
    }

    /// The task as the store holds it (panics if it is gone).
    pub async fn task(&self, task_id: &TaskId) -> codex_bridge::store::models::Task {
        let id = task_id.clone();
        self.store
            .read(move |c| tasks::find(c, &id))
            .await
            .unwrap()
            .unwrap()
    }

    pub async fn state(&self, task_id: &TaskId) -> TaskState {
        self.task(task_id).await.state
    }

    pub async fn wait_state(&self, task_id: &TaskId, want: TaskState) {
        let reached = poll_until_async(Duration::from_secs(15), || async move {
            self.state(task_id).await == want
        })
        .await;
        if !reached {
            let now = self.state(task_id).await;
            panic!("task {task_id} is {now}, expected {want}");
        }
    }

    /// The task's audit actions, oldest first.
    pub async fn actions(&self, task_id: &TaskId) -> Vec<String> {
        self.detail(task_id)
            .await
            .audit
            .into_iter()
            .map(|a| a.action)
            .collect()
    }

    /// The task's detail as the admin API shows it (panics if it is gone).
    pub async fn detail(&self, task_id: &TaskId) -> tasks::TaskDetail {
        let id = task_id.clone();
        self.store
            .read(move |c| tasks::detail(c, &id))
            .await
            .unwrap()
            .unwrap()
    }

    pub async fn wait_all(&self, ids: &[TaskId], want: TaskState) {
        for id in ids {
            self.wait_state(id, want).await;
        }
    }

    pub async fn health(&self) -> RegistryHealth {
        self.registry.send(Snapshot).await.unwrap()
    }

    /// `repo`'s actor's scheduling passes and status (0 passes before it exists).
    async fn passes(&self, repo: &str) -> (u64, RepoActorStatus) {
        let key = format!("default:acme/{repo}");
        self.health()
            .await
            .repositories
            .into_iter()
            .find(|r| r.repo_key == key)
            .map_or((0, RepoActorStatus::Unknown), |r| (r.passes, r.status))
    }

    /// Waits until `repo`'s actor has finished two scheduling passes after
    /// this call, the last ending `status`. Call it after the change the
    /// scheduler must see: the second pass began after the first ended, so
    /// after the change, and whatever it would have started has started.
    pub async fn wait_repo_passes(&self, repo: &str, status: RepoActorStatus) {
        let (start, _) = self.passes(repo).await;
        let settled = poll_until_async(Duration::from_secs(15), || async move {
            let (passes, now) = self.passes(repo).await;
            passes >= start + 2 && now == status
        })
        .await;
        if !settled {
            let (passes, now) = self.passes(repo).await;
            panic!(
                "{repo}: {} passes since, last `{now}`; expected two ending `{status}`",
                passes - start
            );
        }
    }
}

/// The states a task's history went through, in order.
pub fn states_passed(detail: &tasks::TaskDetail) -> Vec<&'static str> {
    detail
        .transitions
        .iter()
        .map(|t| t.to_state.as_str())
        .collect()
}

pub fn request(repo: &str, number: i64, comment_id: i64, text: &str) -> IngestRequest {
    IngestRequest {
        delivery_key: format!("default:d-{repo}-{comment_id}"),
        delivery_id: format!("d-{repo}-{comment_id}"),
        event_type: "issue_comment".into(),
        action: Some("created".into()),
        payload_hash: codex_bridge::domain::PayloadHash::of(b"00"),
        content_key: Some(format!("default:comment:{comment_id}:created:t")),
        sender: Some("bob".into()),
        subject: Some(Subject {
            repo: RepoRef::new("default", "acme", repo).unwrap(),
            kind: ResourceKind::Issue,
            number,
            comment_id: Some(comment_id),
            author: "bob".into(),
            head_ref: None,
            base_ref: None,
        }),
        intent: Intent::Trigger {
            trigger_key: format!("default:comment:{comment_id}"),
            text: text.into(),
            command: codex_bridge::webhook::command::parse(text, "ccbot"),
            written_at: "2026-01-01T00:00:00Z".into(),
            attachments: Vec::new(),
        },
    }
}

/// Runs an in-process test on its own actix system.
pub fn run<F: std::future::Future<Output = ()>>(f: F) {
    actix::System::new().block_on(f);
}

#[test]
fn tasks_run_in_fifo_order_one_thread_per_session_and_succeed() {
    run(async {
        let h = Harness::start(ScriptedAgent::new(), settings());
        let mut ids = Vec::new();
        for (i, (repo, number)) in [
            ("widgets", 1),
            ("widgets", 1),
            ("widgets", 2),
            ("gadgets", 5),
        ]
        .iter()
        .enumerate()
        {
            ids.push(
                h.comment(repo, *number, 100 + i as i64, &format!("@ccbot task {i}"))
                    .await,
            );
        }
        h.wait_all(&ids, TaskState::Succeeded).await;
        let calls = h.runtime.calls();
        assert_eq!(calls.len(), 4, "each task ran exactly once");
        // One thread per Issue/PR: issue 1's two tasks share one.
        assert_eq!(h.runtime.threads_started(), 3);
        let widgets: Vec<&str> = calls
            .iter()
            .filter(|c| c.cwd.ends_with("acme/widgets"))
            .map(|c| c.text.as_str())
            .collect();
        assert_eq!(
            widgets,
            vec!["@ccbot task 0", "@ccbot task 1", "@ccbot task 2"],
            "FIFO per repository"
        );
        let first = calls.iter().find(|c| c.text == "@ccbot task 0").unwrap();
        let second = calls.iter().find(|c| c.text == "@ccbot task 1").unwrap();
        assert_eq!(first.thread_id, second.thread_id);
        // Every session's outbox is drained, and the health view says so.
        let h = &h;
        let depths = || async move {
            h.health()
                .await
                .repositories
                .iter()
                .flat_map(|r| r.sessions.iter().map(|s| s.outbox_depth))
                .collect::<Vec<i64>>()
        };
        let drained = poll_until_async(Duration::from_secs(5), || async move {
            let depths = depths().await;
            !depths.is_empty() && depths.iter().all(|d| *d == 0)
        })
        .await;
        assert!(drained, "outbox depths stay {:?}", depths().await);
        // The turn carried the outbox entry's operation id, and the task its history.
        let id = ids[0].clone();
        let detail = h
            .store
            .read(move |c| tasks::detail(c, &id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(detail.outbox.unwrap().operation_id, first.operation_id);
        let path: Vec<String> = detail
            .transitions
            .iter()
            .map(|t| t.to_state.to_string())
            .collect();
        assert_eq!(
            path,
            [
                "queued",
                "leased",
                "running",
                "verifying_reply",
                "succeeded"
            ]
        );
        assert_eq!(detail.turns.len(), 1);
        assert_eq!(detail.turns[0].final_text.as_deref(), Some("done"));
        assert_eq!(detail.attempts.len(), 1);
        // The ledger proves delivery: sending → accepted → sent, with the turn.
        assert_eq!(detail.ledger.len(), 1);
        assert_eq!(detail.ledger[0].status, "sent");
        assert_eq!(
            detail.ledger[0].turn_id.as_deref(),
            Some(first.turn_id.as_str())
        );
        assert!(detail.ledger[0].accepted_at.is_some() && detail.ledger[0].sent_at.is_some());
        // Events are stored once each, in sequence.
        let turn = first.turn_id.clone();
        let stored = h
            .store
            .read(move |c| codex_bridge::store::ledger::event_count(c, &turn))
            .await
            .unwrap();
        assert!(stored >= 2, "{stored} events stored");
        let turn = first.turn_id.clone();
        let again = h
            .store
            .write(move |c| codex_bridge::store::ledger::record_event(c, &turn, 0, "userMessage"))
            .await
            .unwrap();
        assert!(!again, "a repeated event is not applied twice");

        let health = h.health().await;
        assert_eq!(health.repo_actors, 2);
        assert!(health.repositories.iter().all(|r| r.restarts == 0));
        let widgets = health
            .repositories
            .iter()
            .find(|r| r.repo_key == "default:acme/widgets")
            .unwrap();
        assert_eq!(widgets.sessions.len(), 2);
        assert!(widgets.sessions.iter().all(|s| s.thread_id.is_some()));
        System::current().stop();
    });
}

#[test]
fn a_panic_and_an_error_in_a_session_actor_restart_it_and_the_task_ends_by_history() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.on(
            "panic",
            Script::steps(vec![
                Step::Progress("x"),
                Step::PanicConsumer,
                Step::Sleep(Duration::from_millis(100)),
                Step::Complete("after panic".into()),
            ]),
        );
        rt.on(
            "drop",
            Script::steps(vec![
                Step::DropStream,
                Step::Sleep(Duration::from_millis(100)),
                Step::Complete("after drop".into()),
            ]),
        );
        // The process-wide counter /metrics shows (other tests may add to it).
        let session_restarts = || -> u64 {
            let text = codex_bridge::metrics::render(&Default::default()).unwrap();
            let samples = crate::metrics::parse_exposition(&text);
            crate::metrics::get(
                &samples,
                "codex_bridge_actor_restarts_total{kind=\"session\"}",
            ) as u64
        };
        let restarts_before = session_restarts();
        let h = Harness::start(rt, settings());
        let panicking = h.comment("widgets", 1, 1, "@ccbot panic please").await;
        let dropping = h.comment("gadgets", 2, 2, "@ccbot drop please").await;
        let bystander = h.comment("tools", 3, 3, "@ccbot ordinary").await;
        h.wait_all(
            &[panicking.clone(), dropping.clone(), bystander.clone()],
            TaskState::Succeeded,
        )
        .await;
        // Not replayed: one turn each.
        assert_eq!(h.runtime.calls().len(), 3);
        let health = h.health().await;
        let restarts = |repo: &str| -> u64 {
            health
                .repositories
                .iter()
                .find(|r| r.repo_key == format!("default:acme/{repo}"))
                .unwrap()
                .sessions[0]
                .restarts
        };
        assert_eq!(
            restarts("widgets"),
            1,
            "the panic restarted the session actor"
        );
        assert_eq!(
            restarts("gadgets"),
            1,
            "the error restarted the session actor"
        );
        assert_eq!(
            restarts("tools"),
            0,
            "other repositories were not disturbed"
        );
        assert!(
            session_restarts() >= restarts_before + 2,
            "the metrics count both restarts"
        );
        let id = panicking.clone();
        let detail = h
            .store
            .read(move |c| tasks::detail(c, &id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(detail.turns[0].final_text.as_deref(), Some("after panic"));
        assert!(detail
            .audit
            .iter()
            .any(|e| e.action == "turn.history_checked"));
        System::current().stop();
    });
}

#[test]
fn uncertain_admission_blocks_its_session_until_reconciled() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.on(
            "uncertain",
            Script {
                start: StartBehaviour::Uncertain,
                steps: vec![],
            },
        );
        let h = Harness::start(rt, settings());
        let uncertain = h.comment("widgets", 1, 1, "@ccbot uncertain").await;
        h.wait_state(&uncertain, TaskState::NeedsReconciliation)
            .await;
        let behind = h.comment("widgets", 1, 2, "@ccbot after it").await;
        let elsewhere = h.comment("gadgets", 1, 3, "@ccbot elsewhere").await;
        // Another session of the repository has its own worktree and
        // thread: it goes on.
        let beside = h.comment("widgets", 2, 4, "@ccbot beside it").await;
        h.wait_state(&elsewhere, TaskState::Succeeded).await;
        h.wait_state(&beside, TaskState::Succeeded).await;
        h.wait_repo_passes("widgets", RepoActorStatus::Uncertain)
            .await;
        assert_eq!(
            h.state(&behind).await,
            TaskState::Queued,
            "an uncertain task blocks its session"
        );
        assert_eq!(
            h.runtime
                .calls()
                .iter()
                .filter(|c| c.text.contains("uncertain"))
                .count(),
            0
        );

        let id = uncertain.clone();
        h.store
            .write(move |c| {
                let attempt = codex_bridge::store::attempts::active_attempt(c, &id)?;
                let attempt = match attempt {
                    Some(a) => a.attempt_id,
                    None => tasks::detail(c, &id)?
                        .unwrap()
                        .attempts
                        .last()
                        .unwrap()
                        .attempt_id
                        .clone(),
                };
                tasks::reconcile(c, &id, &attempt, Verdict::Failed, "admin:test", "checked")
            })
            .await
            .unwrap();
        h.registry.do_send(Notify {
            repo_key: repo("default:acme/widgets"),
        });
        h.wait_state(&behind, TaskState::Succeeded).await;
        System::current().stop();
    });
}

/// A failure before admission is retried once; a second one holds the
/// entry for an operator (auto-drain off, its reason), and the repository
/// goes on. Nothing reached the agent, so an operator's send-now starts it
/// as a turn of its own.
#[test]
fn runtime_unavailable_retries_once_then_holds_the_entry_for_an_operator() {
    run(async {
        let rt = ScriptedAgent::new();
        rt.on(
            "down",
            Script {
                start: StartBehaviour::Unavailable,
                steps: vec![],
            },
        );
        let h = Harness::start(rt, settings());
        let id = h.comment("widgets", 1, 1, "@ccbot down").await;
        let held = poll_until_async(Duration::from_secs(15), || async {
            let d = h.detail(&id).await;
            d.task.state == TaskState::Queued && d.outbox.is_some_and(|e| !e.auto_drain)
        })
        .await;
        assert!(held, "the entry was never held");
        let detail = h.detail(&id).await;
        let path = states_passed(&detail);
        assert_eq!(path, ["queued", "leased", "retry_wait", "leased", "queued"]);
        assert_eq!(detail.attempts.len(), 2);
        let entry = detail.outbox.unwrap();
        assert_eq!(entry.status.as_str(), "queued", "nothing was sent");
        assert_eq!(entry.hold_reason.as_deref(), Some("runtime_unavailable"));
        assert_eq!(
            detail.task.error_code.as_deref(),
            Some("runtime_unavailable")
        );
        // The repository goes on: the next request runs.
        let next = h.comment("widgets", 1, 2, "@ccbot after").await;
        h.wait_state(&next, TaskState::Succeeded).await;
        assert_eq!(h.state(&id).await, TaskState::Queued, "held, not retried");
        // The runtime is back; the operator sends it now.
        h.runtime
            .on("down", Script::steps(vec![Step::Complete("done".into())]));
        let q = entry.queue_id.clone();
        h.store
            .write(move |c| {
                let req = codex_bridge::store::control::ControlRequest {
                    request_id: "send-held".into(),
                    reason: "the runtime is back".into(),
                    actor: "admin:ops".into(),
                };
                codex_bridge::store::handoff::request(c, &req, &q).map(|_| ())
            })
            .await
            .unwrap();
        h.registry.do_send(RunCommands {
            session_key: detail.task.session_key.clone(),
            repo_key: detail.task.repo_key.clone(),
        });
        h.wait_state(&id, TaskState::Succeeded).await;
        let calls = h.runtime.calls();
        assert_eq!(
            calls
                .iter()
                .filter(|c| c.operation_id == entry.operation_id.as_str())
                .count(),
            1,
            "{calls:?}"
        );
        System::current().stop();
    });
}

#[test]
fn workspace_failures_map_to_blocked_retry_and_failed() {
    run(async {
        let h = Harness::start(ScriptedAgent::new(), settings());
        h.workspaces
            .failures
            .lock()
            .unwrap()
            .insert("dirty".into(), || WorkspaceError::Dirty {
                path: "/ws/default/acme/dirty".into(),
                detail: "1 uncommitted or untracked path(s): ` M src/lib.rs`".into(),
            });
        h.workspaces
            .failures
            .lock()
            .unwrap()
            .insert("locked".into(), || WorkspaceError::Auth {
                op: "fetch",
                repo: "acme/locked".into(),
                stderr: "HTTP 401".into(),
            });
        h.workspaces
            .failures
            .lock()
            .unwrap()
            .insert("gone".into(), || WorkspaceError::NotFound {
                op: "clone",
                repo: "acme/gone".into(),
                detail: "repository not found".into(),
            });
        let dirty = h.comment("dirty", 1, 1, "@ccbot x").await;
        let dirty_next = h.comment("dirty", 1, 2, "@ccbot y").await;
        let locked = h.comment("locked", 1, 3, "@ccbot z").await;
        let gone = h.comment("gone", 1, 4, "@ccbot w").await;
        h.wait_state(&dirty, TaskState::BlockedWorkspace).await;
        h.wait_state(&locked, TaskState::Failed).await;
        h.wait_state(&gone, TaskState::Failed).await;
        h.wait_repo_passes("dirty", RepoActorStatus::Blocked).await;
        assert_eq!(
            h.state(&dirty_next).await,
            TaskState::Queued,
            "a blocked workspace holds its session"
        );
        let detail = h.detail(&locked).await;
        let path = states_passed(&detail);
        assert_eq!(path, ["queued", "leased", "retry_wait", "leased", "failed"]);
        assert_eq!(detail.task.error_code.as_deref(), Some("git_auth_failed"));
        // Retrying cannot find what is not there: failed at once, with the
        // workspace's own code.
        let detail = h.detail(&gone).await;
        let path = states_passed(&detail);
        assert_eq!(path, ["queued", "leased", "failed"]);
        assert_eq!(detail.task.error_code.as_deref(), Some("git_not_found"));
        assert!(h.runtime.calls().is_empty());
        System::current().stop();
    });
}
