//! The session actor: one per Issue/PR. It owns the agent thread and drives its
//! leased tasks through the runtime: thread, turn/start intent, turn, events,
//! verification. The outbox's two drain lanes (normal, steer) are mailbox
//! messages with their own busy flag: a wake-up that arrives while a lane runs
//! only sets a follow-up flag that the finishing pass honours, so nothing that
//! lands at the boundary is lost.
//!
//! Every decision about a task is made by the pure [`decide::next`]; a pass
//! (`drive.rs`) gathers what it needs from the store and carries out what it
//! decides. After a restart (a fault in this actor, or a new process) a pass
//! rebuilds from the store: work before the turn/start intent is run (or, if
//! a dead process had it, retried once); work after the intent is never
//! replayed: it is confirmed from the thread's history or marked
//! `needs_reconciliation`.

pub mod decide;
mod drive;
mod prompt;
mod recover;
mod reply;
mod turn;

use super::health::SessionHealth;
use super::registry::{Registry, SessionIdle, TaskSettled};
use super::{catch_panic, ActorDeps};
use crate::domain::{RepoKey, ResourceKey};
use crate::store::models::Task;
use crate::store::{now, scheduling};
use actix::prelude::*;
use drive::DriveError;
use futures_util::FutureExt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The two drain lanes of a session's outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Starts turns for queued work, one at a time.
    Normal,
    /// Steers the active turn (used by the `/steer` send mode).
    Steer,
}

/// Run a lane's pass (or mark a follow-up if it is running).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct Drain {
    pub lane: Lane,
}

/// Interrupt the task's turn (operator abort).
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct Abort {
    pub task_id: String,
}

/// An approval of the task was decided through this process: the waiting
/// pass reads the decision now instead of at its next re-check.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct ApprovalDecided {
    pub task_id: String,
}

/// Stop if idle past the limit (sent periodically by the registry).
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct StopIfIdle;

#[derive(Debug, Default)]
struct LaneState {
    busy: bool,
    followup: bool,
    passes: u64,
}

/// The turn a pass is driving, shared so `Abort` can reach it.
#[derive(Debug, Clone, Default)]
struct ActiveTurn {
    task_id: Option<String>,
    thread_id: Option<String>,
    turn_id: Option<String>,
}

/// What the actor and its running pass share: the health entry, which task
/// and turn the pass drives (so `Abort` and `ApprovalDecided` reach it), and
/// the wake-ups for them.
#[derive(Clone)]
pub(super) struct Signals {
    health: Arc<Mutex<SessionHealth>>,
    active: Arc<Mutex<ActiveTurn>>,
    /// Interrupts the running turn (an operator's abort).
    abort: Arc<tokio::sync::Notify>,
    /// An approval of the driven task was decided.
    approval: Arc<tokio::sync::Notify>,
}

impl Signals {
    /// The pass picked `task` up.
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

    /// Whether the running pass drives `task_id`.
    fn drives(&self, task_id: &str) -> bool {
        self.active
            .lock()
            .map(|a| a.task_id.as_deref() == Some(task_id))
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

    fn status(&self, status: &str) {
        if let Ok(mut h) = self.health.lock() {
            h.status = status.to_owned();
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
    normal: LaneState,
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
        SessionActor {
            session_key,
            repo_key,
            deps,
            registry,
            backlog,
            normal: LaneState::default(),
            steer: LaneState::default(),
            signals: Signals {
                health: health.clone(),
                active: Arc::new(Mutex::new(ActiveTurn::default())),
                abort: Arc::new(tokio::sync::Notify::new()),
                approval: Arc::new(tokio::sync::Notify::new()),
            },
            health,
            last_activity: Instant::now(),
        }
    }

    fn update_health(&self, f: impl FnOnce(&mut SessionHealth)) {
        if let Ok(mut h) = self.health.lock() {
            f(&mut h);
            h.normal_lane.busy = self.normal.busy;
            h.normal_lane.followup = self.normal.followup;
            h.normal_lane.passes = self.normal.passes;
            h.steer_lane.busy = self.steer.busy;
            h.steer_lane.followup = self.steer.followup;
            h.steer_lane.passes = self.steer.passes;
            h.last_event_at = Some(now());
        }
    }

    fn lane(&mut self, lane: Lane) -> &mut LaneState {
        match lane {
            Lane::Normal => &mut self.normal,
            Lane::Steer => &mut self.steer,
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
                            scheduling::session(c, &key)?.and_then(|s| s.thread_id),
                            scheduling::outbox_depth(c, &key)?,
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

    fn drain(&mut self, lane: Lane, ctx: &mut Context<Self>) {
        self.last_activity = Instant::now();
        let state = self.lane(lane);
        if state.busy {
            state.followup = true;
            return;
        }
        state.busy = true;
        state.passes += 1;
        self.update_health(|h| h.status = "busy".into());
        let fut = match lane {
            Lane::Normal => drive::run(
                self.deps.clone(),
                self.session_key.clone(),
                self.signals.clone(),
            )
            .boxed_local(),
            // No send mode steers yet; the lane exists so the mode has its own flag.
            Lane::Steer => async { Ok(false) }.boxed_local(),
        };
        ctx.spawn(catch_panic(fut).into_actor(self).map(move |result, act, ctx| {
            act.last_activity = Instant::now();
            act.lane(lane).busy = false;
            if let Ok(mut a) = act.signals.active.lock() {
                *a = ActiveTurn::default();
            }
            match result {
                Ok(Ok(settled)) => {
                    act.update_health(|h| {
                        h.status = "idle".into();
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
                    tracing::warn!(session.key = %act.session_key, error = %e, "session pass failed on the store; retrying");
                    act.update_health(|h| h.last_error = Some(e.to_string()));
                    ctx.run_later(Duration::from_secs(1), move |act, ctx| act.drain(lane, ctx));
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
            let state = act.lane(lane);
            if state.followup {
                state.followup = false;
                act.drain(lane, ctx);
            }
        }));
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.update_health(|h| {
            h.starts += 1;
            h.status = "idle".into();
        });
        // Rebuild from the store: whatever this session was doing is found again.
        self.refresh_from_store(ctx);
        self.drain(Lane::Normal, ctx);
    }
}

impl Supervised for SessionActor {
    fn restarting(&mut self, _: &mut Self::Context) {
        self.normal = LaneState::default();
        self.steer = LaneState::default();
        crate::metrics::actor_restart("session");
        self.update_health(|h| {
            h.restarts += 1;
            h.status = "restarting".into();
        });
    }
}

impl Handler<Drain> for SessionActor {
    type Result = ();

    /// Runs the lane's pass, or marks a follow-up when one is running.
    fn handle(&mut self, msg: Drain, ctx: &mut Self::Context) {
        self.backlog.fetch_sub(1, Ordering::Relaxed);
        self.drain(msg.lane, ctx);
    }
}

impl Handler<Abort> for SessionActor {
    type Result = ();

    /// Signals the running pass to interrupt its turn.
    fn handle(&mut self, msg: Abort, ctx: &mut Self::Context) {
        self.backlog.fetch_sub(1, Ordering::Relaxed);
        if self.signals.drives(&msg.task_id) {
            self.signals.abort.notify_one();
        } else {
            // Not running here: the next pass finds `cancel_requested` and settles it.
            self.drain(Lane::Normal, ctx);
        }
    }
}

impl Handler<StopIfIdle> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: StopIfIdle, _: &mut Self::Context) {
        let idle = !self.normal.busy && !self.steer.busy;
        if idle && self.last_activity.elapsed() >= self.deps.settings.session_idle {
            self.registry.do_send(SessionIdle {
                session_key: self.session_key.clone(),
            });
        }
    }
}

impl Handler<ApprovalDecided> for SessionActor {
    type Result = ();

    /// Wakes the pass that waits for this task's approval.
    fn handle(&mut self, msg: ApprovalDecided, _: &mut Self::Context) {
        self.backlog.fetch_sub(1, Ordering::Relaxed);
        if self.signals.drives(&msg.task_id) {
            self.signals.approval.notify_one();
        }
    }
}
