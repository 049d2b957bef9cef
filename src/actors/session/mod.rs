//! The session actor: one per Issue/PR. It owns the agent thread and drives its
//! leased tasks through the runtime: thread, turn/start intent, turn, events,
//! verification. Each of its lanes (the outbox's drain, the commands, the
//! steers) runs its passes through a [`super::gate::Gate`]: a wake-up that
//! arrives while the lane runs only marks a follow-up that the finishing
//! pass honours, so nothing that lands at the boundary is lost.
//!
//! Every decision about a task is made by the pure [`decide::next`]; a drive
//! (`drive.rs`) gathers what it needs from the store and carries out what it
//! decides. After a restart (a fault in this actor, or a new process) a drive
//! rebuilds from the store: work before the turn/start intent is run (or, if
//! a dead process had it, retried once); work after the intent is never
//! replayed: it is confirmed from the thread's history or marked
//! `needs_reconciliation`.

mod attempt;
mod budget;
mod command;
mod commit;
mod context;
pub mod decide;
mod drive;
mod handoff;
mod interrupt;
mod prompt;
mod recover;
mod reply;
mod review;
mod steer;
mod threads;
mod transcript;
mod trust;
mod turn;
pub mod workflow;

use super::gate::{self, LaneKind};
use super::health::{SessionActorStatus, SessionHealth};
use super::registry::{Notify, Registry, SessionIdle, TaskSettled};
use super::{catch_panic, ActorDeps};
use crate::domain::{RepoKey, ResourceKey, TaskId};
use crate::store::models::Task;
use crate::store::{now, sessions};
use actix::prelude::*;
use drive::DriveError;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A command whose commenter's permission could not be checked is tried
/// again after this long.
const COMMAND_RETRY: Duration = Duration::from_secs(5);

/// Drive the session's next task through its turn (or mark a follow-up if a
/// drive is running).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct Drain;

/// Carry out the session's queued turnless commands (or mark a follow-up if
/// a pass is running).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct RunCommands;

/// A turn of the session began to run: a `/steer` waiting at the head of
/// its queue may join it now.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct WakeSteer;

/// Drive again, woken from inside the session (a lane stopped a run that no
/// drive follows right now).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct Redrive;

/// Interrupt the task's turn (operator abort).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct Abort {
    pub task_id: TaskId,
}

/// An approval of the task was decided through this process: the waiting
/// drive reads the decision now instead of at its next re-check.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct ApprovalDecided {
    pub task_id: TaskId,
}

/// Stop if idle past the limit (sent periodically by the registry).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct StopIfIdle;

/// A lane's gate, and how the health view shows it.
type LaneState = super::gate::Gate;

fn show(lane: &LaneState, to: &mut super::health::LaneHealth) {
    to.busy = lane.busy();
    to.followup = lane.followup();
    to.passes = lane.passes();
}

/// The turn a drive follows, shared so `Abort` can reach it.
#[derive(Debug, Clone, Default)]
struct ActiveTurn {
    task_id: Option<TaskId>,
    thread_id: Option<String>,
    turn_id: Option<String>,
}

/// What the actor and its running drive share: the health entry, which task
/// and turn the drive follows (so `Abort` and `ApprovalDecided` reach it), and
/// the wake-ups for them.
#[derive(Clone)]
pub(super) struct Signals {
    health: Arc<Mutex<SessionHealth>>,
    active: Arc<Mutex<ActiveTurn>>,
    /// Interrupts the running turn (an operator's abort).
    abort: Arc<tokio::sync::Notify>,
    /// An approval of the driven task was decided.
    approval: Arc<tokio::sync::Notify>,
    /// The actor's steer lane, told when a turn begins to run.
    steer: Option<Recipient<WakeSteer>>,
    /// The actor's drain lane, for a stop no running drive follows.
    redrive: Option<Recipient<Redrive>>,
    /// Counts the drives that ended: a lane waiting for a run to settle
    /// wakes on it.
    settled: Arc<tokio::sync::watch::Sender<u64>>,
    /// Wakes the repository's actor: a drive queued work there (a child's
    /// turn, a parent's continuation) that may run now.
    queued: Recipient<Notify>,
}

impl Signals {
    /// Work was queued for `repo`: its actor looks at once rather than at
    /// its next wake-up.
    pub(super) fn queued(&self, repo: &RepoKey) {
        self.queued.do_send(Notify {
            repo_key: repo.clone(),
        });
    }

    /// The drive picked `task` up.
    fn driving(&self, task: &Task) {
        if let Ok(mut a) = self.active.lock() {
            a.task_id = Some(task.task_id.clone());
        }
        if let Ok(mut h) = self.health.lock() {
            h.active_task = Some(task.task_id.clone());
            if task.thread_id.is_some() {
                h.thread_id = task.thread_id.clone();
            }
        }
    }

    /// Whether the running drive follows `task_id`.
    fn drives(&self, task_id: &TaskId) -> bool {
        self.active
            .lock()
            .map(|a| a.task_id.as_ref() == Some(task_id))
            .unwrap_or(false)
    }

    fn thread(&self, thread_id: &str) {
        if let Ok(mut a) = self.active.lock() {
            a.thread_id = Some(thread_id.to_owned());
        }
        if let Ok(mut h) = self.health.lock() {
            h.thread_id = Some(thread_id.to_owned());
        }
    }

    fn turn(&self, thread_id: Option<&str>, turn_id: &str) {
        if let Ok(mut a) = self.active.lock() {
            if let Some(th) = thread_id {
                a.thread_id = Some(th.to_owned());
            }
            a.turn_id = Some(turn_id.to_owned());
        }
        if let Ok(mut h) = self.health.lock() {
            h.active_turn = Some(turn_id.to_owned());
        }
    }

    /// Stops the run of `task_id` (already moved to `cancel_requested`): the
    /// drive that follows it interrupts its turn; with none, the next drive
    /// finds it and settles it.
    fn stop_run(&self, task_id: &TaskId) {
        if self.drives(task_id) {
            self.abort.notify_one();
        } else if let Some(redrive) = &self.redrive {
            redrive.do_send(Redrive);
        }
    }

    /// A turn began to run: wake the steer lane.
    fn turn_running(&self) {
        if let Some(steer) = &self.steer {
            steer.do_send(WakeSteer);
        }
    }

    fn status(&self, status: SessionActorStatus) {
        if let Ok(mut h) = self.health.lock() {
            h.status = status;
        }
    }
}

pub struct SessionActor {
    session_key: ResourceKey,
    repo_key: RepoKey,
    deps: Arc<ActorDeps>,
    registry: Addr<Registry>,
    health: Arc<Mutex<SessionHealth>>,
    backlog: Arc<AtomicI64>,
    lane: LaneState,
    /// The command lane: busy and follow-up as the drain lane's.
    commands: LaneState,
    /// The steer lane: busy and follow-up as the drain lane's.
    steer: LaneState,
    signals: Signals,
    last_activity: Instant,
}

impl SessionActor {
    pub fn new(
        session_key: ResourceKey,
        repo_key: RepoKey,
        deps: Arc<ActorDeps>,
        registry: Addr<Registry>,
        health: Arc<Mutex<SessionHealth>>,
        backlog: Arc<AtomicI64>,
    ) -> Self {
        let queued = registry.clone().recipient();
        SessionActor {
            session_key,
            repo_key,
            deps,
            registry,
            backlog,
            lane: LaneState::default(),
            commands: LaneState::default(),
            steer: LaneState::default(),
            signals: Signals {
                health: health.clone(),
                active: Arc::new(Mutex::new(ActiveTurn::default())),
                abort: Arc::new(tokio::sync::Notify::new()),
                approval: Arc::new(tokio::sync::Notify::new()),
                steer: None,
                redrive: None,
                settled: Arc::new(tokio::sync::watch::channel(0).0),
                queued,
            },
            health,
            last_activity: Instant::now(),
        }
    }

    fn update_health(&self, f: impl FnOnce(&mut SessionHealth)) {
        if let Ok(mut h) = self.health.lock() {
            f(&mut h);
            show(&self.lane, &mut h.normal_lane);
            show(&self.steer, &mut h.steer_lane);
            show(&self.commands, &mut h.command_lane);
            h.last_event_at = Some(now());
        }
    }

    /// The thread id and the outbox depth (unsettled entries) for the health
    /// view, read from the store: at start and after each settled task.
    fn refresh_from_store(&mut self, ctx: &mut Context<Self>) {
        let store = self.deps.store.clone();
        let key = self.session_key.clone();
        ctx.spawn(
            async move {
                store
                    .read(move |c| {
                        Ok((
                            sessions::session(c, &key)?.and_then(|s| s.thread_id),
                            sessions::outbox_depth(c, &key)?,
                        ))
                    })
                    .await
            }
            .into_actor(self)
            .map(|result, act, _| {
                if let Ok((thread_id, depth)) = result {
                    act.update_health(|h| {
                        h.thread_id = thread_id;
                        h.outbox_depth = depth;
                    });
                }
            }),
        );
    }

    /// Runs a command pass, or marks a follow-up when one is running.
    fn run_commands(&mut self, ctx: &mut Context<Self>) {
        self.last_activity = Instant::now();
        if !self.commands.wake() {
            // Shown as a pending follow-up until the running pass ends.
            self.update_health(|_| {});
            return;
        }
        let fut = gate::probed(
            self.deps.settings.pass_end.clone(),
            LaneKind::Commands,
            self.session_key.to_string(),
            command::run(self.deps.clone(), self.session_key.clone()),
        );
        ctx.spawn(catch_panic(fut).into_actor(self).map(|result, act, ctx| {
            act.last_activity = Instant::now();
            // Free before the health view is updated below; a wake-up that
            // came during the pass starts the next one at the end.
            let again = act.commands.ended();
            act.update_health(|_| {});
            match result {
                Ok(Ok(pass)) => {
                    for task_id in &pass.stopped {
                        if act.signals.drives(task_id) {
                            act.signals.abort.notify_one();
                        } else {
                            // The next drive finds `cancel_requested` and settles it.
                            act.drain(ctx);
                        }
                    }
                    for (task_id, session) in &pass.decided {
                        if act.signals.drives(task_id) {
                            act.signals.approval.notify_one();
                        } else if session != &act.session_key {
                            // A delegated child's approval, answered in its
                            // parent's thread: its own actor waits for it,
                            // here or in another process.
                            act.deps.store.signal(crate::store::signals::Signal::Approval {
                                session_key: session.clone(),
                                repo_key: act.repo_key.clone(),
                                task_id: task_id.clone(),
                            });
                            act.registry.do_send(super::registry::ApprovalDecided {
                                session_key: session.clone(),
                                repo_key: act.repo_key.clone(),
                                task_id: task_id.clone(),
                            });
                        }
                    }
                    if !pass.stopped.is_empty() {
                        act.refresh_from_store(ctx);
                    }
                    if pass.retry_later {
                        ctx.run_later(COMMAND_RETRY, |act, ctx| act.run_commands(ctx));
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(session.key = %act.session_key, error = %e, "command pass failed on the store; retrying");
                    act.update_health(|h| h.last_error = Some(e.to_string()));
                    ctx.run_later(Duration::from_secs(1), |act, ctx| act.run_commands(ctx));
                }
                Err(panic) => {
                    tracing::error!(session.key = %act.session_key, panic = %panic, "session actor panic in a command; restarting it");
                    act.update_health(|h| h.last_error = Some(format!("panic: {panic}")));
                    ctx.stop();
                    return;
                }
            }
            if again {
                act.run_commands(ctx);
            }
        }));
    }

    /// Runs a steer pass, or marks a follow-up when one is running.
    fn run_steer(&mut self, ctx: &mut Context<Self>) {
        self.last_activity = Instant::now();
        if !self.steer.wake() {
            self.update_health(|_| {});
            return;
        }
        let (deps, key, signals) = (
            self.deps.clone(),
            self.session_key.clone(),
            self.signals.clone(),
        );
        let fut = async move {
            let steered = steer::run(deps.clone(), key.clone()).await?;
            let interrupted = interrupt::run(deps.clone(), key.clone(), signals.clone()).await?;
            let handed = handoff::run(deps, key, signals).await?;
            Ok::<_, crate::store::StoreError>((steered, interrupted, handed))
        };
        let fut = gate::probed(
            self.deps.settings.pass_end.clone(),
            LaneKind::Steer,
            self.session_key.to_string(),
            fut,
        );
        ctx.spawn(catch_panic(fut).into_actor(self).map(|result, act, ctx| {
            act.last_activity = Instant::now();
            // Free before the health view is updated below; a wake-up that
            // came during the pass starts the next one at the end.
            let again = act.steer.ended();
            act.update_health(|_| {});
            match result {
                Ok(Ok((pass, interrupted, handed))) => {
                    if pass.released || interrupted.wake_repo || handed.wake_repo {
                        // Back in the queue: the repository starts it as a
                        // turn of its own once nothing holds it.
                        act.registry.do_send(TaskSettled {
                            repo_key: act.repo_key.clone(),
                        });
                    }
                    if pass.retry_later || interrupted.retry_later || handed.retry_later {
                        ctx.run_later(COMMAND_RETRY, |act, ctx| act.run_steer(ctx));
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(session.key = %act.session_key, error = %e, "steer pass failed on the store; retrying");
                    act.update_health(|h| h.last_error = Some(e.to_string()));
                    ctx.run_later(Duration::from_secs(1), |act, ctx| act.run_steer(ctx));
                }
                Err(panic) => {
                    tracing::error!(session.key = %act.session_key, panic = %panic, "session actor panic in a steer; restarting it");
                    act.update_health(|h| h.last_error = Some(format!("panic: {panic}")));
                    ctx.stop();
                    return;
                }
            }
            if again {
                act.run_steer(ctx);
            }
        }));
    }

    fn drain(&mut self, ctx: &mut Context<Self>) {
        self.last_activity = Instant::now();
        if !self.lane.wake() {
            self.update_health(|_| {});
            return;
        }
        self.update_health(|h| h.status = SessionActorStatus::Busy);
        let fut = gate::probed(
            self.deps.settings.pass_end.clone(),
            LaneKind::Drain,
            self.session_key.to_string(),
            drive::run(
                self.deps.clone(),
                self.session_key.clone(),
                self.signals.clone(),
            ),
        );
        ctx.spawn(catch_panic(fut).into_actor(self).map(move |result, act, ctx| {
            act.last_activity = Instant::now();
            // Free before the health view is updated below; a wake-up that
            // came during the pass starts the next one at the end.
            let again = act.lane.ended();
            if let Ok(mut a) = act.signals.active.lock() {
                *a = ActiveTurn::default();
            }
            act.signals.settled.send_modify(|n| *n += 1);
            match result {
                Ok(Ok(settled)) => {
                    act.update_health(|h| {
                        h.status = SessionActorStatus::Idle;
                        h.active_task = None;
                        h.active_turn = None;
                    });
                    if settled {
                        act.refresh_from_store(ctx);
                        act.registry.do_send(TaskSettled {
                            repo_key: act.repo_key.clone(),
                        });
                    }
                }
                Ok(Err(DriveError::Store(e))) => {
                    // Not a fault of ours: try again shortly, state is in the store.
                    tracing::warn!(session.key = %act.session_key, error = %e, "session drive failed on the store; retrying");
                    act.update_health(|h| h.last_error = Some(e.to_string()));
                    ctx.run_later(Duration::from_secs(1), |act, ctx| act.drain(ctx));
                }
                Ok(Err(DriveError::Fault(e))) => {
                    tracing::error!(session.key = %act.session_key, error = %e, "session actor error; restarting it");
                    act.update_health(|h| h.last_error = Some(e));
                    ctx.stop();
                    return;
                }
                Err(panic) => {
                    tracing::error!(session.key = %act.session_key, panic = %panic, "session actor panic; restarting it");
                    act.update_health(|h| h.last_error = Some(format!("panic: {panic}")));
                    ctx.stop();
                    return;
                }
            }
            if again {
                act.drain(ctx);
            }
        }));
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.update_health(|h| {
            h.starts += 1;
            h.status = SessionActorStatus::Idle;
        });
        self.signals.steer = Some(ctx.address().recipient());
        self.signals.redrive = Some(ctx.address().recipient());
        // Rebuild from the store: whatever this session was doing is found again.
        self.refresh_from_store(ctx);
        self.drain(ctx);
        self.run_commands(ctx);
        self.run_steer(ctx);
    }
}

impl Supervised for SessionActor {
    fn restarting(&mut self, _: &mut Self::Context) {
        self.lane = LaneState::default();
        self.commands = LaneState::default();
        self.steer = LaneState::default();
        crate::metrics::actor_restart("session");
        self.update_health(|h| {
            h.restarts += 1;
            h.status = SessionActorStatus::Restarting;
        });
    }
}

impl Handler<Drain> for SessionActor {
    type Result = ();

    /// Drives the next task, or marks a follow-up when a drive is running.
    fn handle(&mut self, _: Drain, ctx: &mut Self::Context) {
        self.backlog.fetch_sub(1, Ordering::Relaxed);
        self.drain(ctx);
    }
}

impl Handler<RunCommands> for SessionActor {
    type Result = ();

    /// Both lanes that act outside the repository's queue: the turnless
    /// commands and the steers.
    fn handle(&mut self, _: RunCommands, ctx: &mut Self::Context) {
        self.backlog.fetch_sub(1, Ordering::Relaxed);
        self.run_commands(ctx);
        self.run_steer(ctx);
    }
}

impl Handler<Redrive> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Redrive, ctx: &mut Self::Context) {
        self.drain(ctx);
    }
}

impl Handler<WakeSteer> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: WakeSteer, ctx: &mut Self::Context) {
        self.run_steer(ctx);
    }
}

impl Handler<Abort> for SessionActor {
    type Result = ();

    /// Signals the running drive to interrupt its turn.
    fn handle(&mut self, msg: Abort, ctx: &mut Self::Context) {
        self.backlog.fetch_sub(1, Ordering::Relaxed);
        if self.signals.drives(&msg.task_id) {
            self.signals.abort.notify_one();
        } else {
            // Not running here: the next drive finds `cancel_requested` and settles it.
            self.drain(ctx);
        }
    }
}

impl Handler<StopIfIdle> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: StopIfIdle, _: &mut Self::Context) {
        if !self.lane.busy()
            && !self.commands.busy()
            && !self.steer.busy()
            && self.last_activity.elapsed() >= self.deps.settings.session_idle
        {
            self.registry.do_send(SessionIdle {
                session_key: self.session_key.clone(),
            });
        }
    }
}

impl Handler<ApprovalDecided> for SessionActor {
    type Result = ();

    /// Wakes the drive that waits for this task's approval.
    fn handle(&mut self, msg: ApprovalDecided, _: &mut Self::Context) {
        self.backlog.fetch_sub(1, Ordering::Relaxed);
        if self.signals.drives(&msg.task_id) {
            self.signals.approval.notify_one();
        }
    }
}
