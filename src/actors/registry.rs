//! The registry: one per process. It starts repo and session actors on demand
//! under actix `Supervisor`s (so an actor that stops after a fault is started
//! again), routes messages to them, counts their starts and restarts, stops idle
//! sessions, and sweeps the store for work (start-up recovery, other instances'
//! expired leases, due retries).

use super::health::{
    RegistryHealth, RepoActorStatus, RepoHealth, SessionActorStatus, SessionHealth,
};
use super::repo::{RepoActor, Wake};
use super::session::{Drain, SessionActor, StopIfIdle};
use super::ActorDeps;
use crate::domain::{RepoKey, ResourceKey, TaskId};
use crate::store::queue;
use crate::store::signals::Signal;
use crate::store::{commands, leases, worktrees};
use actix::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

/// A supervised child and what the registry knows of it.
struct Child<A: Actor, H> {
    addr: Addr<A>,
    health: Arc<Mutex<H>>,
    backlog: Arc<AtomicI64>,
}

/// Wakes the actors another process's `signal` concerns (committed work on
/// the same PostgreSQL), as this process's own commits wake them: what the
/// store's listener does with each signal it hears.
pub fn wake_for(registry: &Addr<Registry>, signal: Signal) {
    match signal {
        Signal::Repo { repo_key } => registry.do_send(Notify { repo_key }),
        Signal::Session {
            session_key,
            repo_key,
        } => registry.do_send(RunCommands {
            session_key,
            repo_key,
        }),
        Signal::Approval {
            session_key,
            repo_key,
            task_id,
        } => registry.do_send(ApprovalDecided {
            session_key,
            repo_key,
            task_id,
        }),
        Signal::Abort {
            session_key,
            repo_key,
            task_id,
        } => registry.do_send(AbortTask {
            session_key,
            repo_key,
            task_id,
        }),
        Signal::Sweep => registry.do_send(Sweep),
        // Remote workers' calls: the worker-call route wakes their waiters.
        Signal::WorkerCall { .. } | Signal::WorkerQueue { .. } | Signal::WorkerLeaseEnded => {}
    }
}

pub struct Registry {
    deps: Arc<ActorDeps>,
    repos: HashMap<RepoKey, Child<RepoActor, RepoHealth>>,
    sessions: HashMap<ResourceKey, (RepoKey, Child<SessionActor, SessionHealth>)>,
}

impl Registry {
    pub fn new(deps: Arc<ActorDeps>) -> Self {
        Registry {
            deps,
            repos: HashMap::new(),
            sessions: HashMap::new(),
        }
    }

    fn repo(
        &mut self,
        repo_key: &RepoKey,
        ctx: &mut Context<Self>,
    ) -> &Child<RepoActor, RepoHealth> {
        let me = ctx.address();
        let deps = self.deps.clone();
        self.repos.entry(repo_key.to_owned()).or_insert_with(|| {
            let health = Arc::new(Mutex::new(RepoHealth {
                repo_key: repo_key.to_string(),
                status: RepoActorStatus::Starting,
                ..Default::default()
            }));
            let backlog = Arc::new(AtomicI64::new(0));
            let (h, b, key) = (health.clone(), backlog.clone(), repo_key.to_owned());
            let addr = Supervisor::start(move |_| RepoActor::new(key, deps, me, h, b));
            Child {
                addr,
                health,
                backlog,
            }
        })
    }

    fn session(
        &mut self,
        session_key: &ResourceKey,
        repo_key: &RepoKey,
        ctx: &mut Context<Self>,
    ) -> &Child<SessionActor, SessionHealth> {
        let me = ctx.address();
        let deps = self.deps.clone();
        &self
            .sessions
            .entry(session_key.to_owned())
            .or_insert_with(|| {
                let health = Arc::new(Mutex::new(SessionHealth {
                    session_key: session_key.to_string(),
                    status: SessionActorStatus::Starting,
                    ..Default::default()
                }));
                let backlog = Arc::new(AtomicI64::new(0));
                let (h, b) = (health.clone(), backlog.clone());
                let (sk, rk) = (session_key.to_owned(), repo_key.to_owned());
                let addr = Supervisor::start(move |_| SessionActor::new(sk, rk, deps, me, h, b));
                (
                    repo_key.to_owned(),
                    Child {
                        addr,
                        health,
                        backlog,
                    },
                )
            })
            .1
    }

    /// Sends `msg` to the session actor (started on demand), counted in its
    /// backlog until it is handled.
    fn send_to_session<M>(
        &mut self,
        session_key: &ResourceKey,
        repo_key: &RepoKey,
        msg: M,
        ctx: &mut Context<Self>,
    ) where
        M: Message<Result = ()> + Send + 'static,
        SessionActor: Handler<M>,
    {
        let child = self.session(session_key, repo_key, ctx);
        child.backlog.fetch_add(1, Ordering::Relaxed);
        child.addr.do_send(msg);
    }

    fn wake_repo(&mut self, repo_key: &RepoKey, ctx: &mut Context<Self>) {
        let child = self.repo(repo_key, ctx);
        child.backlog.fetch_add(1, Ordering::Relaxed);
        child.addr.do_send(Wake);
    }

    fn sweep(&mut self, ctx: &mut Context<Self>) {
        let store = self.deps.store.clone();
        let before = super::repo::retention_cutoff(&self.deps);
        let fut = async move {
            // Start-up recovery begins here: expired leases are released (and audited)
            // before any other step.
            match store.write(leases::release_expired).await {
                // Released for whichever process has work there.
                Ok(expired) => {
                    for lease in expired {
                        store.signal(crate::store::signals::Signal::Repo {
                            repo_key: lease.repo_key,
                        });
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not release expired leases"),
            }
            let commands = store.read(commands::sessions_with_commands).await;
            let work = store.read(queue::repos_with_work).await;
            let retire = match before {
                Some(before) => store
                    .read(move |c| worktrees::retirable(c, None, &before))
                    .await
                    .unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "registry sweep could not read the worktrees to retire");
                        Vec::new()
                    }),
                None => Vec::new(),
            };
            (commands, work, retire)
        };
        ctx.spawn(fut.into_actor(self).map(|(commands, result, retire), act, ctx| {
            // Their repository actor retires them on its next idle pass.
            let repos: std::collections::BTreeSet<RepoKey> =
                retire.into_iter().map(|(repo, _)| repo).collect();
            for repo_key in &repos {
                act.wake_repo(repo_key, ctx);
            }
            match commands {
                Ok(sessions) => {
                    for (session_key, repo_key) in sessions {
                        act.send_to_session(
                            &session_key,
                            &repo_key,
                            super::session::RunCommands,
                            ctx,
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "registry sweep could not read the queued commands")
                }
            }
            act.sweep_work(result, ctx)
        }));
    }

    /// Wakes every repository with work and records the queue depths.
    fn sweep_work(
        &mut self,
        result: Result<Vec<queue::RepoWork>, crate::store::StoreError>,
        ctx: &mut Context<Self>,
    ) {
        let act = self;
        match result {
            Ok(work) => {
                for w in &work {
                    act.wake_repo(&w.repo_key, ctx);
                }
                // Queue depths are counted here, for every repository at once,
                // rather than by each scheduling pass: counting one
                // repository's queued tasks passes over every queued task.
                let depths: HashMap<&str, i64> = work
                    .iter()
                    .map(|w| (w.repo_key.as_str(), w.queue_depth))
                    .collect();
                for (repo_key, child) in &act.repos {
                    if let Ok(mut h) = child.health.lock() {
                        h.queue_depth = depths.get(repo_key.as_str()).copied().unwrap_or(0);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "registry sweep could not read the store"),
        }
    }
}

impl Actor for Registry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::info!(owner = %self.deps.settings.owner, runtime = self.deps.runtime.name(), "actor registry started");
        for blocker in &self.deps.settings.hold {
            tracing::warn!(
                code = blocker.code,
                "no task will start: {}",
                blocker.message
            );
        }
        self.sweep(ctx);
        ctx.run_interval(self.deps.settings.sweep, |act, ctx| act.sweep(ctx));
        // The agent runtime's availability changes: look for work at once
        // (queued tasks start as soon as it can run them), and let the
        // repositories show that it cannot.
        let mut agent = self.deps.settings.agent.clone();
        let me = ctx.address();
        ctx.spawn(
            async move {
                while agent.changed().await {
                    me.do_send(AgentChanged);
                }
            }
            .into_actor(self),
        );
        let idle = self.deps.settings.session_idle;
        ctx.run_interval(idle.min(std::time::Duration::from_secs(60)), |act, _| {
            for (_, child) in act.sessions.values() {
                child.addr.do_send(StopIfIdle);
            }
        });
    }
}

/// The agent runtime's availability changed.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
struct AgentChanged;

impl Handler<AgentChanged> for Registry {
    type Result = ();

    /// Wakes every repository actor there is (so each shows what the
    /// change means for it) and every repository with work, as a sweep does.
    fn handle(&mut self, _: AgentChanged, ctx: &mut Self::Context) {
        let known: Vec<RepoKey> = self.repos.keys().cloned().collect();
        for repo_key in &known {
            self.wake_repo(repo_key, ctx);
        }
        self.sweep(ctx);
    }
}

/// Work may wait in any repository: look at the store now, as the timer
/// does.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct Sweep;

impl Handler<Sweep> for Registry {
    type Result = ();

    fn handle(&mut self, _: Sweep, ctx: &mut Self::Context) {
        self.sweep(ctx);
    }
}

/// A task was committed for this repository (sent by the webhook after its commit).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct Notify {
    pub repo_key: RepoKey,
}

impl Handler<Notify> for Registry {
    type Result = ();

    /// Wakes (or starts) the repository's actor.
    fn handle(&mut self, msg: Notify, ctx: &mut Self::Context) {
        self.wake_repo(&msg.repo_key, ctx);
    }
}

/// A session has a queued turnless command: it carries it out now, outside
/// its repository's queue.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct RunCommands {
    pub session_key: ResourceKey,
    pub repo_key: RepoKey,
}

impl Handler<RunCommands> for Registry {
    type Result = ();

    fn handle(&mut self, msg: RunCommands, ctx: &mut Self::Context) {
        self.send_to_session(
            &msg.session_key,
            &msg.repo_key,
            super::session::RunCommands,
            ctx,
        );
    }
}

/// A repository's task may be run by its session.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct DrainSession {
    pub session_key: ResourceKey,
    pub repo_key: RepoKey,
}

impl Handler<DrainSession> for Registry {
    type Result = ();

    /// Wakes (or revives) the session actor's drain lane.
    fn handle(&mut self, msg: DrainSession, ctx: &mut Self::Context) {
        self.send_to_session(&msg.session_key, &msg.repo_key, Drain, ctx);
    }
}

/// A session actor found itself idle past the limit and asks to be stopped.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct SessionIdle {
    pub session_key: ResourceKey,
}

impl Handler<SessionIdle> for Registry {
    type Result = ();

    /// Drops the registry's address: with no address left, the supervisor
    /// lets the actor go instead of restarting it. The next message revives it.
    fn handle(&mut self, msg: SessionIdle, _: &mut Self::Context) {
        if self.sessions.remove(&msg.session_key).is_some() {
            tracing::debug!(session.key = %msg.session_key, "idle session actor stopped");
        }
    }
}

/// A session finished (or gave up) its task: its repository may start the next.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct TaskSettled {
    pub repo_key: RepoKey,
}

impl Handler<TaskSettled> for Registry {
    type Result = ();

    fn handle(&mut self, msg: TaskSettled, ctx: &mut Self::Context) {
        self.wake_repo(&msg.repo_key, ctx);
    }
}

/// Asks a session to interrupt its task's turn (abort).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct AbortTask {
    pub session_key: ResourceKey,
    pub repo_key: RepoKey,
    pub task_id: TaskId,
}

impl Handler<AbortTask> for Registry {
    type Result = ();

    fn handle(&mut self, msg: AbortTask, ctx: &mut Self::Context) {
        let abort = super::session::Abort {
            task_id: msg.task_id,
        };
        self.send_to_session(&msg.session_key, &msg.repo_key, abort, ctx);
    }
}

/// An approval of a task was decided through this process: wake the session
/// that waits for it.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct ApprovalDecided {
    pub session_key: ResourceKey,
    pub repo_key: RepoKey,
    pub task_id: TaskId,
}

impl Handler<ApprovalDecided> for Registry {
    type Result = ();

    fn handle(&mut self, msg: ApprovalDecided, ctx: &mut Self::Context) {
        let decided = super::session::ApprovalDecided {
            task_id: msg.task_id,
        };
        self.send_to_session(&msg.session_key, &msg.repo_key, decided, ctx);
    }
}

/// The live tree, for the health API.
#[derive(Message, Debug, Clone)]
#[rtype(result = "RegistryHealth")]
pub struct Snapshot;

impl Handler<Snapshot> for Registry {
    type Result = MessageResult<Snapshot>;

    fn handle(&mut self, _: Snapshot, _: &mut Self::Context) -> Self::Result {
        let mut repos: Vec<RepoHealth> = self
            .repos
            .values()
            .map(|c| {
                let mut h = c.health.lock().map(|h| h.clone()).unwrap_or_default();
                h.mailbox_backlog = c.backlog.load(Ordering::Relaxed).max(0);
                h
            })
            .collect();
        for (repo_key, child) in self.sessions.values() {
            let mut h = child.health.lock().map(|h| h.clone()).unwrap_or_default();
            h.mailbox_backlog = child.backlog.load(Ordering::Relaxed).max(0);
            match repos.iter_mut().find(|r| repo_key == &r.repo_key) {
                Some(r) => r.sessions.push(h),
                None => repos.push(RepoHealth {
                    repo_key: repo_key.to_string(),
                    status: RepoActorStatus::Unknown,
                    sessions: vec![h],
                    ..Default::default()
                }),
            }
        }
        repos.sort_by(|a, b| a.repo_key.cmp(&b.repo_key));
        for r in &mut repos {
            r.sessions.sort_by(|a, b| a.session_key.cmp(&b.session_key));
        }
        MessageResult(RegistryHealth {
            owner: self.deps.settings.owner.clone(),
            server_id: self.deps.settings.owner.clone(),
            runtime: self.deps.runtime.name().to_owned(),
            repo_actors: self.repos.len(),
            session_actors: self.sessions.len(),
            repositories: repos,
            held: {
                let mut held = self.deps.settings.hold.clone();
                held.extend(crate::readiness::runtime_blockers(
                    &self.deps.settings.agent.now(),
                ));
                held
            },
        })
    }
}
