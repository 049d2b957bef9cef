//! The session actor: one per Issue/PR. It owns the agent thread and drives its
//! leased tasks through the runtime: thread, turn/start intent, turn, events,
//! verification. The outbox's two drain lanes (normal, steer) are mailbox
//! messages with their own busy flag: a wake-up that arrives while a lane runs
//! only sets a follow-up flag that the finishing pass honours, so nothing that
//! lands at the boundary is lost.
//!
//! After a restart (a fault in this actor, or a new process), it rebuilds from
//! the store: work before the turn/start intent is run (or, if a dead process
//! had it, retried once); work after the intent is never replayed: it is
//! confirmed from the thread's history or marked `needs_reconciliation`.

use super::health::SessionHealth;
use super::registry::{Registry, SessionIdle, TaskSettled};
use super::{catch_panic, Deps};
use crate::gitea::reply::{comment_call, has_reply_marker, parse_resource_key, reply_marker};
use crate::lifecycle::TaskState;
use crate::runtime::{
    ReplyCheck, ReplyQuery, RuntimeError, ThreadRequest, TurnEvent, TurnLookup, TurnRequest,
};
use crate::store::audit::{self, Audit};
use crate::store::models::{OutboxEntry, Task};
use crate::store::tasks::TransitionOutcome;
use crate::store::{format_time, now, scheduling, StoreError};
use actix::prelude::*;
use futures_util::StreamExt;
use std::path::PathBuf;
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

#[derive(Debug, thiserror::Error)]
enum PassError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The actor lost sight of its turn: stop, restart, recover by history.
    #[error("session fault: {0}")]
    Fault(String),
}

pub struct SessionActor {
    session_key: String,
    repo_key: String,
    deps: Arc<Deps>,
    registry: Addr<Registry>,
    health: Arc<Mutex<SessionHealth>>,
    backlog: Arc<AtomicI64>,
    normal: LaneState,
    steer: LaneState,
    active: Arc<Mutex<ActiveTurn>>,
    abort: Arc<tokio::sync::Notify>,
    last_activity: Instant,
}

impl SessionActor {
    pub fn new(
        session_key: String,
        repo_key: String,
        deps: Arc<Deps>,
        registry: Addr<Registry>,
        health: Arc<Mutex<SessionHealth>>,
        backlog: Arc<AtomicI64>,
    ) -> Self {
        SessionActor {
            session_key,
            repo_key,
            deps,
            registry,
            health,
            backlog,
            normal: LaneState::default(),
            steer: LaneState::default(),
            active: Arc::new(Mutex::new(ActiveTurn::default())),
            abort: Arc::new(tokio::sync::Notify::new()),
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
            Lane::Normal => normal_pass(
                self.deps.clone(),
                self.session_key.clone(),
                self.health.clone(),
                self.active.clone(),
                self.abort.clone(),
            )
            .boxed_local(),
            // No send mode steers yet; the lane exists so the mode has its own flag.
            Lane::Steer => async { Ok(false) }.boxed_local(),
        };
        ctx.spawn(catch_panic(fut).into_actor(self).map(move |result, act, ctx| {
            act.last_activity = Instant::now();
            act.lane(lane).busy = false;
            if let Ok(mut a) = act.active.lock() {
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
                Ok(Err(PassError::Store(e))) => {
                    // Not a fault of ours: try again shortly, state is in the store.
                    tracing::warn!(session.key = %act.session_key, error = %e, "session pass failed on the store; retrying");
                    act.update_health(|h| h.last_error = Some(e.to_string()));
                    ctx.run_later(Duration::from_secs(1), move |act, ctx| act.drain(lane, ctx));
                }
                Ok(Err(PassError::Fault(e))) => {
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
        let driving = self
            .active
            .lock()
            .map(|a| a.task_id.as_deref() == Some(msg.task_id.as_str()))
            .unwrap_or(false);
        if driving {
            self.abort.notify_one();
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

trait BoxedLocal<'a, T> {
    fn boxed_local(self) -> futures_util::future::LocalBoxFuture<'a, T>;
}

impl<'a, T, F: std::future::Future<Output = T> + 'a> BoxedLocal<'a, T> for F {
    fn boxed_local(self) -> futures_util::future::LocalBoxFuture<'a, T> {
        Box::pin(self)
    }
}

/// Moves a task; `Applied` or not, the caller goes on from the store's truth.
async fn move_to(
    deps: &Deps,
    task_id: &str,
    to: TaskState,
    reason: &str,
    error_code: Option<&str>,
) -> Result<TransitionOutcome, StoreError> {
    let (id, reason, code) = (
        task_id.to_owned(),
        reason.to_owned(),
        error_code.map(str::to_owned),
    );
    deps.store
        .write(move |c| scheduling::move_task(c, &id, to, "system", &reason, code.as_deref(), None))
        .await
}

async fn settle(
    deps: &Deps,
    task_id: &str,
    to: TaskState,
    reason: &str,
    error_code: Option<&str>,
) -> Result<(), StoreError> {
    let (id, reason, code) = (
        task_id.to_owned(),
        reason.to_owned(),
        error_code.map(str::to_owned),
    );
    deps.store
        .write(move |c| {
            scheduling::end_attempt(c, &id, code.as_deref().unwrap_or(to.as_str()))?;
            scheduling::move_task(c, &id, to, "system", &reason, code.as_deref(), None)
        })
        .await?;
    Ok(())
}

/// One pass of the normal lane: drive the session's oldest unsettled task.
/// Returns whether a task settled (so the repository may start the next).
async fn normal_pass(
    deps: Arc<Deps>,
    session_key: String,
    health: Arc<Mutex<SessionHealth>>,
    active: Arc<Mutex<ActiveTurn>>,
    abort: Arc<tokio::sync::Notify>,
) -> Result<bool, PassError> {
    let key = session_key.clone();
    let found = deps
        .store
        .read(move |c| {
            let Some(task) = scheduling::driven_tasks_of_session(c, &key)?
                .into_iter()
                .next()
            else {
                return Ok(None);
            };
            let entry = scheduling::outbox_entry(c, &task.task_id)?;
            let attempt = scheduling::active_attempt(c, &task.task_id)?;
            let session = scheduling::session(c, &key)?;
            let repo = scheduling::repository(c, &task.repo_key)?;
            Ok(Some((task, entry, attempt, session, repo)))
        })
        .await?;
    let Some((task, entry, attempt, session, repo)) = found else {
        return Ok(false);
    };
    let Some(entry) = entry else {
        settle(
            &deps,
            &task.task_id,
            TaskState::Failed,
            "the task has no outbox entry",
            Some("outbox_missing"),
        )
        .await?;
        return Ok(true);
    };
    if let Ok(mut h) = health.lock() {
        h.active_task = Some(task.task_id.clone());
        h.thread_id = session
            .as_ref()
            .and_then(|s| s.thread_id.clone())
            .or(h.thread_id.take());
    }
    if let Ok(mut a) = active.lock() {
        a.task_id = Some(task.task_id.clone());
    }
    let state: TaskState = task
        .state
        .parse()
        .map_err(|e: crate::lifecycle::UnknownState| {
            PassError::Store(StoreError::Query(e.to_string()))
        })?;
    let ours =
        attempt.as_ref().and_then(|a| a.owner.as_deref()) == Some(deps.settings.owner.as_str());
    let intent = entry.status == "sending";
    let operation_id = if task.reply_attempt > 0 {
        reply_retry_operation(&entry.operation_id)
    } else {
        entry.operation_id.clone()
    };
    let ctx = TurnCtx {
        operation_id,
        deps: deps.clone(),
        attempt_id: attempt
            .as_ref()
            .map(|a| a.attempt_id.clone())
            .unwrap_or_default(),
        task,
        entry,
        health,
        active,
        abort,
    };

    match state {
        TaskState::Leased if !intent && !ours => {
            // A process that died before sending anything had it: safe to run
            // again, once (DESIGN §5, §10).
            let attempts = ctx.task.attempt;
            let to = if attempts < deps.settings.max_attempts {
                TaskState::RetryWait
            } else {
                TaskState::Failed
            };
            let retry_at = format_time(chrono::Utc::now());
            let id = ctx.task.task_id.clone();
            deps.store
                .write(move |c| {
                    scheduling::end_attempt(c, &id, "interrupted_by_restart")?;
                    scheduling::move_task(
                        c,
                        &id,
                        to,
                        "system",
                        "interrupted by a restart before turn/start",
                        Some("interrupted_by_restart"),
                        Some(&retry_at),
                    )
                })
                .await?;
            Ok(true)
        }
        TaskState::Leased if !intent => {
            let (owner, name) = repo.map(|r| (r.owner, r.name)).unwrap_or_default();
            let cwd = deps
                .workspaces
                .path_for(&owner, &name)
                .unwrap_or_else(|_| PathBuf::from("."));
            // The commenter's permission, checked again now that the task starts.
            match deps
                .verifier
                .may_trigger(ctx.task.resource_key.clone(), ctx.task.author.clone())
                .await
            {
                crate::runtime::TriggerCheck::Allowed => {}
                crate::runtime::TriggerCheck::Denied(why) => {
                    settle(
                        &deps,
                        &ctx.task.task_id,
                        TaskState::Rejected,
                        &why,
                        Some("permission_denied"),
                    )
                    .await?;
                    return Ok(true);
                }
                crate::runtime::TriggerCheck::Unknown(e) => {
                    return pre_admission_failure(
                        &ctx,
                        &format!("the commenter's permission could not be checked: {e}"),
                        true,
                    )
                    .await;
                }
            }
            let policy = deps.settings.policy_for(&owner, &name);
            let prompt = turn_prompt(&ctx.task, &ctx.entry, &deps.settings.bot_login);
            run_turn(&ctx, session.and_then(|s| s.thread_id), cwd, policy, prompt).await
        }
        TaskState::CancelRequested if ctx.task.turn_id.is_none() => {
            settle(
                &deps,
                &ctx.task.task_id,
                TaskState::Cancelled,
                "cancelled before a turn started",
                None,
            )
            .await?;
            Ok(true)
        }
        TaskState::VerifyingReply if ctx.task.reply_attempt > 0 => {
            // The reply-retry turn was intended: if it has not ended, how it
            // went is in the thread's history, never guessed.
            let (id, op) = (ctx.task.task_id.clone(), ctx.operation_id.clone());
            let (finished, intent) = deps
                .store
                .read(move |c| {
                    Ok((
                        scheduling::reply_retry_finished(c, &id)?,
                        crate::store::ledger::find(c, &op)?.is_some(),
                    ))
                })
                .await?;
            if !finished && intent {
                return recover(&ctx).await;
            }
            let turn_id = ctx.task.turn_id.clone().unwrap_or_default();
            verify(&ctx, turn_id, None).await
        }
        TaskState::VerifyingReply => {
            // Verify again from what is stored: the final text is durable, so
            // nothing runs the model a second time.
            let turn_id = ctx.task.turn_id.clone().unwrap_or_default();
            let t = turn_id.clone();
            let final_text = deps
                .store
                .read(move |c| scheduling::turn(c, &t))
                .await?
                .and_then(|t| t.final_text);
            verify(&ctx, turn_id, final_text).await
        }
        _ => recover(&ctx).await,
    }
}

#[derive(Clone)]
struct TurnCtx {
    deps: Arc<Deps>,
    task: Task,
    /// The active attempt (empty when none is recorded).
    attempt_id: String,
    entry: OutboxEntry,
    /// The operation the current turn carries: the outbox entry's, or the
    /// reply-retry turn's own once that was sent ([`reply_retry_operation`]).
    operation_id: String,
    health: Arc<Mutex<SessionHealth>>,
    active: Arc<Mutex<ActiveTurn>>,
    abort: Arc<tokio::sync::Notify>,
}

/// The operation id of a task's one reply-retry turn.
pub fn reply_retry_operation(operation_id: &str) -> String {
    format!("{operation_id}-reply-retry")
}

/// Before admission: thread, intent, turn/start, then the turn's events.
async fn run_turn(
    ctx: &TurnCtx,
    thread_id: Option<String>,
    cwd: PathBuf,
    policy: crate::config::RepoPolicy,
    prompt: String,
) -> Result<bool, PassError> {
    let deps = &ctx.deps;
    let task_id = ctx.task.task_id.clone();
    let thread = deps
        .runtime
        .ensure_thread(ThreadRequest {
            session_key: ctx.task.session_key.clone(),
            thread_id: thread_id.clone(),
            cwd: cwd.clone(),
            approval_policy: policy.approval_policy.clone(),
            sandbox: policy.sandbox.clone(),
        })
        .await;
    let thread = match thread {
        Ok(t) => t,
        Err(e) => {
            let retryable = !matches!(e, RuntimeError::Refused(_));
            return pre_admission_failure(ctx, &e.to_string(), retryable).await;
        }
    };
    // The thread id (stored once; an ordinary retry never replaces it) and
    // the turn/start intent, in one commit before the request leaves.
    let (task, entry, th) = (ctx.task.clone(), ctx.entry.clone(), thread.clone());
    let attempt_id = ctx.attempt_id.clone();
    let thread = deps
        .store
        .write(move |c| {
            let stored = scheduling::set_thread_once(c, &task.session_key, &th)?;
            scheduling::record_turn_intent(c, &task, &entry, &stored, &attempt_id)?;
            Ok(stored)
        })
        .await?;
    if let Ok(mut h) = ctx.health.lock() {
        h.thread_id = Some(thread.clone());
    }
    if let Ok(mut a) = ctx.active.lock() {
        a.thread_id = Some(thread.clone());
    }

    let started = deps
        .runtime
        .start_turn(TurnRequest {
            thread_id: thread.clone(),
            operation_id: ctx.entry.operation_id.clone(),
            text: prompt,
            cwd,
        })
        .await;
    match started {
        Ok(turn) => {
            let (id, th, tu) = (task_id.clone(), thread.clone(), turn.turn_id.clone());
            let op = ctx.entry.operation_id.clone();
            deps.store
                .write(move |c| scheduling::record_turn_started(c, &id, &th, &tu, "normal", &op))
                .await?;
            let deadline = tokio::time::Instant::now() + policy.turn_timeout;
            consume(ctx, thread, turn.turn_id, turn.events, deadline).await
        }
        Err(e @ (RuntimeError::Unavailable(_) | RuntimeError::Refused(_))) => {
            let id = task_id.clone();
            deps.store
                .write(move |c| scheduling::release_intent(c, &id))
                .await?;
            pre_admission_failure(
                ctx,
                &e.to_string(),
                matches!(e, RuntimeError::Unavailable(_)),
            )
            .await
        }
        Err(RuntimeError::Uncertain(e)) => {
            tracing::warn!(task.id = %task_id, error = %e, "turn/start answer uncertain; looking in the thread's history");
            recover_with(ctx, thread).await
        }
    }
}

/// Nothing reached the agent: retry later, or fail once attempts are used up.
async fn pre_admission_failure(
    ctx: &TurnCtx,
    error: &str,
    retryable: bool,
) -> Result<bool, PassError> {
    let deps = &ctx.deps;
    let retry = retryable && ctx.task.attempt < deps.settings.max_attempts;
    let code = if retryable {
        "runtime_unavailable"
    } else {
        "runtime_refused"
    };
    let backoff = chrono::Duration::from_std(deps.settings.retry_backoff)
        .unwrap_or_else(|_| chrono::Duration::seconds(30));
    let retry_at = format_time(chrono::Utc::now() + backoff);
    let (id, err) = (ctx.task.task_id.clone(), error.to_owned());
    deps.store
        .write(move |c| {
            audit::record(
                c,
                &Audit::new("runtime.unavailable", "system")
                    .task(&id)
                    .error(code)
                    .meta(serde_json::json!({ "detail": err })),
            )?;
            scheduling::end_attempt(c, &id, code)?;
            if retry {
                scheduling::move_task(
                    c,
                    &id,
                    TaskState::RetryWait,
                    "system",
                    "agent runtime unavailable before admission",
                    Some(code),
                    Some(&retry_at),
                )
            } else {
                scheduling::move_task(
                    c,
                    &id,
                    TaskState::Failed,
                    "system",
                    "agent runtime unavailable; attempts used up",
                    Some(code),
                    None,
                )
            }
        })
        .await?;
    Ok(true)
}

/// Reads the turn's events to its end.
async fn consume(
    ctx: &TurnCtx,
    thread: String,
    turn_id: String,
    mut events: futures_util::stream::BoxStream<'static, TurnEvent>,
    turn_deadline: tokio::time::Instant,
) -> Result<bool, PassError> {
    let deps = &ctx.deps;
    // Observed when this returns: the task settled (or the pass ended in a fault).
    let _turn_timer = crate::metrics::TurnTimer::start();
    if let Ok(mut a) = ctx.active.lock() {
        a.thread_id = Some(thread.clone());
        a.turn_id = Some(turn_id.clone());
    }
    if let Ok(mut h) = ctx.health.lock() {
        h.active_turn = Some(turn_id.clone());
    }
    let mut last_seq = 0;
    // Why we are stopping the turn, and until when we wait for it to confirm.
    let mut stopping: Option<(Stop, tokio::time::Instant)> = None;
    loop {
        let next = match stopping {
            None => {
                let stop = tokio::select! {
                    ev = events.next() => Err(ev),
                    _ = ctx.abort.notified() => Ok(Stop::Abort),
                    _ = tokio::time::sleep_until(turn_deadline) => Ok(Stop::Deadline),
                };
                match stop {
                    Err(ev) => ev,
                    Ok(stop) => {
                        request_interrupt(ctx, stop, &thread, &turn_id).await?;
                        stopping = Some((
                            stop,
                            tokio::time::Instant::now() + deps.settings.interrupt_grace,
                        ));
                        continue;
                    }
                }
            }
            Some((stop, grace)) => match tokio::time::timeout_at(grace, events.next()).await {
                Ok(ev) => ev,
                Err(_) => {
                    // No confirmation in time: end the runtime's process and
                    // never guess what the turn did.
                    tracing::error!(task.id = %ctx.task.task_id, ?stop, "interrupt not confirmed; resetting the agent runtime");
                    deps.runtime.reset().await;
                    settle(
                        deps,
                        &ctx.task.task_id,
                        TaskState::NeedsReconciliation,
                        "interrupt not confirmed in time; the agent runtime was reset",
                        Some("interrupt_unconfirmed"),
                    )
                    .await?;
                    return Ok(true);
                }
            },
        };
        match next {
            Some(TurnEvent::ApprovalRequested {
                seq,
                key,
                kind,
                detail,
            }) => {
                last_seq = seq.max(last_seq);
                if await_approval(ctx, &key, &kind, &detail).await? == Approval::Aborted {
                    request_interrupt(ctx, Stop::Abort, &thread, &turn_id).await?;
                    stopping = Some((
                        Stop::Abort,
                        tokio::time::Instant::now() + deps.settings.interrupt_grace,
                    ));
                }
            }
            Some(TurnEvent::ToolCall {
                seq,
                phase,
                server,
                tool,
                arguments,
                status,
                error,
            }) => {
                last_seq = seq.max(last_seq);
                observe_tool_call(
                    ctx, &turn_id, seq, &phase, &server, &tool, &arguments, &status, error,
                )
                .await?;
            }
            Some(TurnEvent::Progress { seq, kind }) => {
                last_seq = seq;
                let tu = turn_id.clone();
                deps.store
                    .write(move |c| crate::store::ledger::record_event(c, &tu, seq, &kind))
                    .await?;
            }
            Some(TurnEvent::Delivered { seq, client_id }) => {
                last_seq = seq.max(last_seq);
                let (tu, op) = (turn_id.clone(), ctx.operation_id.clone());
                let ours = client_id.as_deref() == Some(op.as_str());
                deps.store
                    .write(move |c| {
                        crate::store::ledger::record_event(c, &tu, seq, "userMessage")?;
                        if ours {
                            crate::store::ledger::sent(c, &op, Some(&tu))?;
                        }
                        Ok(())
                    })
                    .await?;
            }
            Some(TurnEvent::Completed { seq, final_text }) => {
                let arrived = std::time::Instant::now();
                // The final text and the move to verification, in one commit.
                let (tu, text, id) = (
                    turn_id.clone(),
                    final_text.clone(),
                    ctx.task.task_id.clone(),
                );
                deps.store
                    .write(move |c| {
                        scheduling::record_turn_finished(
                            c,
                            &tu,
                            "completed",
                            text.as_deref(),
                            seq,
                        )?;
                        scheduling::move_task(
                            c,
                            &id,
                            TaskState::VerifyingReply,
                            "system",
                            "turn completed",
                            None,
                            None,
                        )
                    })
                    .await?;
                super::timing::record_turn_settle(arrived.elapsed());
                return verify(ctx, turn_id, final_text).await;
            }
            Some(TurnEvent::Failed { seq, error }) => {
                let tu = turn_id.clone();
                deps.store
                    .write(move |c| scheduling::record_turn_finished(c, &tu, "failed", None, seq))
                    .await?;
                tracing::warn!(task.id = %ctx.task.task_id, error = %error, "turn failed");
                settle(
                    deps,
                    &ctx.task.task_id,
                    TaskState::Failed,
                    "the turn failed",
                    Some("turn_failed"),
                )
                .await?;
                return Ok(true);
            }
            Some(TurnEvent::Interrupted { .. }) => {
                let tu = turn_id.clone();
                deps.store
                    .write(move |c| {
                        scheduling::record_turn_finished(c, &tu, "interrupted", None, last_seq)
                    })
                    .await?;
                let to = match stopping {
                    Some((Stop::Abort, _)) => TaskState::Aborted,
                    Some((Stop::Deadline, _)) => TaskState::TimedOut,
                    None => TaskState::Failed,
                };
                settle(
                    deps,
                    &ctx.task.task_id,
                    to,
                    "the turn was interrupted",
                    Some("turn_interrupted"),
                )
                .await?;
                return Ok(true);
            }
            None => {
                return Err(PassError::Fault(format!(
                    "the event stream of turn {turn_id} ended without an end event"
                )))
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Approval {
    Decided,
    Aborted,
}

/// `awaiting_approval`: records what the agent asks, waits for an operator's
/// decision (or declines when `approval_timeout` passes), answers the runtime
/// and goes back to `running`. An abort meanwhile ends the wait.
async fn await_approval(
    ctx: &TurnCtx,
    key: &str,
    kind: &str,
    detail: &serde_json::Value,
) -> Result<Approval, PassError> {
    use crate::store::approvals;
    let deps = &ctx.deps;
    let (id, k, kd, d) = (
        ctx.task.task_id.clone(),
        key.to_owned(),
        kind.to_owned(),
        detail.clone(),
    );
    let approval = deps
        .store
        .write(move |c| {
            let a = approvals::create(c, &id, &kd, &d, &k)?;
            scheduling::move_task(
                c,
                &id,
                TaskState::AwaitingApproval,
                "system",
                "the agent asked for approval",
                None,
                None,
            )?;
            Ok(a)
        })
        .await?;
    if let Ok(mut h) = ctx.health.lock() {
        h.status = "awaiting_approval".into();
    }
    tracing::info!(task.id = %ctx.task.task_id, approval.id = %approval.approval_id, kind, "waiting for an approval");
    let deadline = tokio::time::Instant::now() + deps.settings.approval_timeout;
    let accept = loop {
        tokio::select! {
            _ = ctx.abort.notified() => return Ok(Approval::Aborted),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let a_id = approval.approval_id.clone();
        let current = deps.store.read(move |c| approvals::find(c, &a_id)).await?;
        if let Some(decision) = current.and_then(|a| a.decision) {
            break decision == "accept";
        }
        if tokio::time::Instant::now() >= deadline {
            let a_id = approval.approval_id.clone();
            let expired = deps
                .store
                .write(move |c| approvals::expire(c, &a_id))
                .await?;
            if expired.is_some() {
                break false;
            }
            // Decided in the meantime: read it on the next pass.
        }
    };
    if let Err(e) = deps.runtime.decide_approval(key, accept).await {
        tracing::warn!(task.id = %ctx.task.task_id, error = %e, "could not hand the approval decision to the runtime");
    }
    if let Ok(mut h) = ctx.health.lock() {
        h.status = "busy".into();
    }
    move_to(
        deps,
        &ctx.task.task_id,
        TaskState::Running,
        "approval decided",
        None,
    )
    .await?;
    Ok(Approval::Decided)
}

/// Why a running turn is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// An operator's abort (the task goes through `cancel_requested`).
    Abort,
    /// The turn deadline (`timed_out` once the interrupt is confirmed).
    Deadline,
}

/// Sends `turn/interrupt`; an abort first moves the task to
/// `cancel_requested` unless the admin API already did.
async fn request_interrupt(
    ctx: &TurnCtx,
    stop: Stop,
    thread: &str,
    turn: &str,
) -> Result<(), PassError> {
    if stop == Stop::Abort {
        let id = ctx.task.task_id.clone();
        let state = ctx
            .deps
            .store
            .read(move |c| Ok(crate::store::tasks::find(c, &id)?.map(|t| t.state)))
            .await?;
        if state.as_deref() != Some(TaskState::CancelRequested.as_str()) {
            move_to(
                &ctx.deps,
                &ctx.task.task_id,
                TaskState::CancelRequested,
                "abort requested",
                None,
            )
            .await?;
        }
    }
    if let Err(e) = ctx.deps.runtime.interrupt(thread, turn).await {
        tracing::warn!(task.id = %ctx.task.task_id, error = %e, "turn/interrupt failed; waiting for the grace period");
    }
    Ok(())
}

/// After the intent: find the operation in the thread's history. Never replay.
async fn recover(ctx: &TurnCtx) -> Result<bool, PassError> {
    let Some(thread) = ctx.task.thread_id.clone() else {
        settle(
            &ctx.deps,
            &ctx.task.task_id,
            TaskState::NeedsReconciliation,
            "no thread recorded for a started task",
            Some("history_unreadable"),
        )
        .await?;
        return Ok(true);
    };
    recover_with(ctx, thread).await
}

async fn recover_with(ctx: &TurnCtx, thread: String) -> Result<bool, PassError> {
    let deps = &ctx.deps;
    let task_id = ctx.task.task_id.clone();
    let deadline = Instant::now() + deps.settings.history_wait;
    let lookup = loop {
        match deps.runtime.lookup_turn(&thread, &ctx.operation_id).await {
            Ok(TurnLookup::Running { turn_id }) if Instant::now() < deadline => {
                if let Ok(mut h) = ctx.health.lock() {
                    h.active_turn = Some(turn_id);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => break other,
        }
    };
    let _ = audit_recovery(ctx, &lookup).await;
    let state = ctx.task.state.as_str();
    match lookup {
        Ok(TurnLookup::Completed {
            turn_id,
            final_text,
        }) => {
            ensure_running(ctx, &thread, &turn_id).await?;
            let (tu, text) = (turn_id.clone(), final_text.clone());
            deps.store
                .write(move |c| {
                    scheduling::record_turn_finished(c, &tu, "completed", text.as_deref(), 0)
                })
                .await?;
            if state != TaskState::VerifyingReply.as_str() {
                move_to(
                    deps,
                    &task_id,
                    TaskState::VerifyingReply,
                    "turn completed (confirmed from history)",
                    None,
                )
                .await?;
            }
            verify(ctx, turn_id, final_text).await
        }
        Ok(TurnLookup::Failed { turn_id, .. }) => {
            ensure_running(ctx, &thread, &turn_id).await?;
            settle(
                deps,
                &task_id,
                TaskState::Failed,
                "the turn failed (confirmed from history)",
                Some("turn_failed"),
            )
            .await?;
            Ok(true)
        }
        Ok(TurnLookup::Interrupted { turn_id }) if state == TaskState::CancelRequested.as_str() => {
            let _ = turn_id;
            settle(
                deps,
                &task_id,
                TaskState::Aborted,
                "interrupt confirmed from history",
                Some("turn_interrupted"),
            )
            .await?;
            Ok(true)
        }
        other => {
            let why = match other {
                Ok(TurnLookup::Missing) => {
                    "the operation is not in the thread's history".to_owned()
                }
                Ok(TurnLookup::Running { .. }) => "the turn did not end while we waited".to_owned(),
                Ok(TurnLookup::Interrupted { .. }) => {
                    "the turn was interrupted without a request".to_owned()
                }
                Err(e) => format!("the history could not be read: {e}"),
                Ok(_) => "unexpected history".to_owned(),
            };
            tracing::warn!(task.id = %task_id, why = %why, "task needs reconciliation");
            settle(
                deps,
                &task_id,
                TaskState::NeedsReconciliation,
                &why,
                Some("uncertain_admission"),
            )
            .await?;
            Ok(true)
        }
    }
}

async fn audit_recovery(
    ctx: &TurnCtx,
    lookup: &Result<TurnLookup, RuntimeError>,
) -> Result<(), StoreError> {
    let (id, found) = (ctx.task.task_id.clone(), format!("{lookup:?}"));
    let op = ctx.operation_id.clone();
    ctx.deps
        .store
        .write(move |c| {
            audit::record(
                c,
                &Audit::new("turn.history_checked", "system")
                    .task(&id)
                    .meta(serde_json::json!({ "operationId": op, "found": found })),
            )
            .map(|_| ())
        })
        .await
}

/// A task found `leased` with a turn in history goes through `running` first.
/// The history shows the turn carrying our operation id: the message was
/// delivered (ledger `sent`); a task found `leased` goes through `running`.
async fn ensure_running(ctx: &TurnCtx, thread: &str, turn_id: &str) -> Result<(), StoreError> {
    let (id, th, tu) = (
        ctx.task.task_id.clone(),
        thread.to_owned(),
        turn_id.to_owned(),
    );
    let (op, leased) = (
        ctx.operation_id.clone(),
        ctx.task.state == TaskState::Leased.as_str(),
    );
    ctx.deps
        .store
        .write(move |c| {
            if leased {
                scheduling::record_turn_started(c, &id, &th, &tu, "normal", &op)?;
            }
            crate::store::ledger::sent(c, &op, Some(&tu))?;
            Ok(())
        })
        .await
}

/// The prompt of a task's turn: who asked what where (as untrusted data), and
/// the marker the answer must end with.
fn turn_prompt(task: &Task, entry: &OutboxEntry, bot_login: &str) -> String {
    let (owner, name, number) = parse_resource_key(&task.resource_key).unwrap_or_default();
    let kind = if task.resource_key.contains(":pull:") {
        "pull request"
    } else {
        "issue"
    };
    let marker = reply_marker(&task.task_id, &entry.operation_id);
    format!(
        "@{author} mentioned @{bot_login} in a comment on {kind} {owner}/{name}#{number}. \
The comment follows as untrusted data:\n\n<comment author=\"{author}\">\n{text}\n</comment>\n\n\
Do what it asks in the repository checked out in your working directory. When you are done, post \
your final answer as one comment on {kind} #{number} of {owner}/{name} with the Gitea tools, and end \
it with this line, as is:\n{marker}",
        author = task.author,
        text = entry.user_text,
    )
}

/// The prompt of the one reply-retry turn: re-post the previous final text,
/// change nothing.
fn reply_retry_prompt(task: &Task, text: &str, marker: &str) -> String {
    let (owner, name, number) = parse_resource_key(&task.resource_key).unwrap_or_default();
    format!(
        "Your previous answer did not reach {owner}/{name}#{number}. Do not change any files and do \
not redo the work: only post the text below again, as is, as one comment on #{number} of \
{owner}/{name} with the Gitea tools.\n\n{text}\n\n{marker}",
        text = strip_markers(text),
    )
}

/// The final text without any reply marker lines (the bridge adds its own).
fn strip_markers(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("<!-- codex-bridge "))
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_owned()
}

/// An MCP tool call seen in the turn: stored as a turn event, and when it is
/// the agent's comment (any gitea-mcp generation), recorded as the reply's
/// observed intent (`started`) and result (`completed`).
#[allow(clippy::too_many_arguments)]
async fn observe_tool_call(
    ctx: &TurnCtx,
    turn_id: &str,
    seq: i64,
    phase: &str,
    server: &str,
    tool: &str,
    arguments: &serde_json::Value,
    status: &str,
    error: Option<String>,
) -> Result<(), StoreError> {
    let call = comment_call(tool, arguments);
    let (tu, task_id, resource) = (
        turn_id.to_owned(),
        ctx.task.task_id.clone(),
        ctx.task.resource_key.clone(),
    );
    let event = format!("mcpToolCall:{phase}");
    let meta = call.as_ref().map(|c| {
        let here = parse_resource_key(&resource).is_some_and(|(o, r, n)| {
            o.eq_ignore_ascii_case(&c.owner) && r.eq_ignore_ascii_case(&c.repo) && n == c.number
        });
        serde_json::json!({
            "server": server,
            "tool": tool,
            "owner": c.owner,
            "repo": c.repo,
            "number": c.number,
            "onResource": here,
            "hasMarker": has_reply_marker(&c.body, &task_id),
            "status": status,
            "error": error,
            "turnId": tu,
        })
    });
    let failed = error.is_some() || status == "failed";
    let (phase, error) = (phase.to_owned(), error.clone());
    ctx.deps
        .store
        .write(move |c| {
            crate::store::ledger::record_event(c, &tu, seq, &event)?;
            let Some(meta) = &meta else {
                return Ok(());
            };
            let reply_status = match (phase.as_str(), failed) {
                ("started", _) => "mcp_started",
                (_, true) => "mcp_failed",
                _ => "mcp_completed",
            };
            crate::store::comments::record_reply(
                c,
                &task_id,
                "reply",
                &resource,
                Some(&tu),
                reply_status,
                None,
                error.as_deref(),
            )?;
            audit::record(
                c,
                &Audit::new(
                    if phase == "started" {
                        "reply.mcp_call.started"
                    } else {
                        "reply.mcp_call.completed"
                    },
                    "agent",
                )
                .task(&task_id)
                .meta(meta.clone()),
            )
            .map(|_| ())
        })
        .await
}

/// `verifying_reply` → the verifier's verdict (DESIGN §8): confirmed →
/// `succeeded`; explicitly missing → one reply-retry turn, then one REST post
/// of the stored final text; unknown → `failed_reply`, never a write.
async fn verify(
    ctx: &TurnCtx,
    turn_id: String,
    final_text: Option<String>,
) -> Result<bool, PassError> {
    let deps = &ctx.deps;
    let task_id = ctx.task.task_id.clone();
    let id = task_id.clone();
    let (task, original, fallback, reply) = deps
        .store
        .read(move |c| {
            Ok((
                crate::store::tasks::find(c, &id)?,
                scheduling::original_final_text(c, &id)?,
                crate::store::comments::find(c, &format!("{id}:rest_fallback"))?,
                crate::store::comments::find(c, &format!("{id}:reply"))?,
            ))
        })
        .await?;
    let reply_attempt = task.as_ref().map(|t| t.reply_attempt).unwrap_or(0);
    // What a reply publishes is the task's own turn's final text.
    let text = original.or(final_text);
    let check = deps
        .verifier
        .verify(ReplyQuery {
            task_id: task_id.clone(),
            turn_id: turn_id.clone(),
            resource_key: ctx.task.resource_key.clone(),
            final_text: text.clone(),
        })
        .await;
    crate::metrics::reply_verification(match &check {
        ReplyCheck::Confirmed { .. } => "confirmed",
        ReplyCheck::Missing => "missing",
        ReplyCheck::Unknown(_) => "unknown",
    });
    let fallback_status = fallback.as_ref().map(|f| f.status.clone());
    let mcp_reason = reply
        .as_ref()
        .and_then(|r| r.last_error.clone())
        .unwrap_or_else(|| match reply.as_ref() {
            Some(r) => format!("the agent's comment call ended {}", r.status),
            None => "the agent made no comment call".to_owned(),
        });
    let outcome = match &check {
        ReplyCheck::Confirmed { .. } => "confirmed".to_owned(),
        ReplyCheck::Missing => "missing".to_owned(),
        ReplyCheck::Unknown(e) => format!("unknown: {e}"),
    };
    let (id, tu, out, ra) = (task_id.clone(), turn_id.clone(), outcome, reply_attempt);
    deps.store
        .write(move |c| {
            audit::record(
                c,
                &Audit::new("reply.verification", "system")
                    .task(&id)
                    .meta(serde_json::json!({ "turnId": tu, "outcome": out, "replyAttempt": ra })),
            )
            .map(|_| ())
        })
        .await?;
    match check {
        ReplyCheck::Confirmed { comment_id } => {
            let by_fallback = matches!(fallback_status.as_deref(), Some("posting" | "posted"));
            let (id, resource, tu) = (
                task_id.clone(),
                ctx.task.resource_key.clone(),
                turn_id.clone(),
            );
            deps.store
                .write(move |c| {
                    let kind = if by_fallback {
                        "rest_fallback"
                    } else {
                        "reply"
                    };
                    crate::store::comments::record_reply(
                        c,
                        &id,
                        kind,
                        &resource,
                        Some(&tu),
                        "verified",
                        comment_id,
                        None,
                    )?;
                    audit::record(
                        c,
                        &Audit::new("reply.confirmed", "system")
                            .task(&id)
                            .comment(comment_id)
                            .meta(serde_json::json!({ "turnId": tu, "by": kind })),
                    )
                    .map(|_| ())
                })
                .await?;
            if by_fallback {
                settle(
                    deps,
                    &task_id,
                    TaskState::SucceededWithRestFallback,
                    &format!(
                        "reply posted by the REST fallback; the MCP reply failed: {mcp_reason}"
                    ),
                    Some("mcp_reply_missing"),
                )
                .await?;
            } else {
                settle(
                    deps,
                    &task_id,
                    TaskState::Succeeded,
                    "reply confirmed",
                    None,
                )
                .await?;
            }
        }
        ReplyCheck::Unknown(e) => {
            tracing::warn!(task.id = %task_id, error = %e, "reply could not be verified");
            settle(
                deps,
                &task_id,
                TaskState::FailedReply,
                &format!("reply could not be verified: {e}"),
                Some("reply_unverifiable"),
            )
            .await?;
        }
        ReplyCheck::Missing => match fallback_status.as_deref() {
            Some("posted") => {
                settle(
                    deps,
                    &task_id,
                    TaskState::FailedReply,
                    "the REST fallback was accepted by Gitea but cannot be found",
                    Some("rest_fallback_not_found"),
                )
                .await?;
            }
            Some("failed") => {
                settle(
                    deps,
                    &task_id,
                    TaskState::FailedReply,
                    "the REST fallback failed",
                    Some("rest_fallback_failed"),
                )
                .await?;
            }
            _ => {
                let Some(text) = text else {
                    settle(
                        deps,
                        &task_id,
                        TaskState::FailedReply,
                        "the reply is missing and the turn left no final text to post",
                        Some("no_final_text"),
                    )
                    .await?;
                    return Ok(true);
                };
                // `posting`: a crash after the intent; the read just proved
                // it missing, so posting it now is safe.
                if fallback_status.is_some() || reply_attempt > 0 {
                    return rest_fallback(ctx, text, mcp_reason).await;
                }
                return reply_retry(ctx, text, mcp_reason).await;
            }
        },
    }
    Ok(true)
}

/// The one reply-retry turn: same thread, a new operation, a prompt that only
/// asks to post the previous final text again.
async fn reply_retry(ctx: &TurnCtx, text: String, mcp_reason: String) -> Result<bool, PassError> {
    let deps = &ctx.deps;
    let task_id = ctx.task.task_id.clone();
    let id = task_id.clone();
    let thread = deps
        .store
        .read(move |c| crate::store::tasks::find(c, &id))
        .await?
        .and_then(|t| t.thread_id);
    let Some(thread) = thread else {
        return rest_fallback(ctx, text, mcp_reason).await;
    };
    let op = reply_retry_operation(&ctx.entry.operation_id);
    let (id, o, q, th) = (
        task_id.clone(),
        op.clone(),
        ctx.entry.queue_id.clone(),
        thread.clone(),
    );
    deps.store
        .write(move |c| scheduling::begin_reply_retry(c, &id, &o, &q, &th))
        .await?;
    let (owner, name, _) = parse_resource_key(&ctx.task.resource_key).unwrap_or_default();
    let cwd = deps
        .workspaces
        .path_for(&owner, &name)
        .unwrap_or_else(|_| PathBuf::from("."));
    let policy = deps.settings.policy_for(&owner, &name);
    let marker = reply_marker(&task_id, &ctx.entry.operation_id);
    let retry_ctx = TurnCtx {
        deps: ctx.deps.clone(),
        task: ctx.task.clone(),
        attempt_id: ctx.attempt_id.clone(),
        entry: ctx.entry.clone(),
        operation_id: op.clone(),
        health: ctx.health.clone(),
        active: ctx.active.clone(),
        abort: ctx.abort.clone(),
    };
    let started = deps
        .runtime
        .start_turn(TurnRequest {
            thread_id: thread.clone(),
            operation_id: op.clone(),
            text: reply_retry_prompt(&ctx.task, &text, &marker),
            cwd,
        })
        .await;
    match started {
        Ok(turn) => {
            let (id, th, tu, o) = (
                task_id.clone(),
                thread.clone(),
                turn.turn_id.clone(),
                op.clone(),
            );
            deps.store
                .write(move |c| {
                    scheduling::record_turn_started(c, &id, &th, &tu, "reply_retry", &o)
                })
                .await?;
            let deadline = tokio::time::Instant::now() + policy.turn_timeout;
            // Boxed: the retry turn's end comes back through `verify`.
            Box::pin(consume(
                &retry_ctx,
                thread,
                turn.turn_id,
                turn.events,
                deadline,
            ))
            .await
        }
        Err(RuntimeError::Uncertain(e)) => {
            tracing::warn!(task.id = %task_id, error = %e, "reply-retry turn/start uncertain; looking in history");
            Box::pin(recover_with(&retry_ctx, thread)).await
        }
        Err(e) => {
            // Not admitted: the reply is still missing; the REST fallback is next.
            let o = op.clone();
            deps.store
                .write(move |c| scheduling::release_reply_retry(c, &o))
                .await?;
            rest_fallback(
                ctx,
                text,
                format!("{mcp_reason}; the reply-retry turn could not start: {e}"),
            )
            .await
        }
    }
}

/// The one REST post of the stored final text, with the same marker, then
/// proof that it landed.
async fn rest_fallback(ctx: &TurnCtx, text: String, mcp_reason: String) -> Result<bool, PassError> {
    let deps = &ctx.deps;
    let task_id = ctx.task.task_id.clone();
    let body = format!(
        "{}\n\n{}",
        strip_markers(&text),
        reply_marker(&task_id, &ctx.entry.operation_id)
    );
    let resource = ctx.task.resource_key.clone();
    let write = |status: &'static str,
                 action: &'static str,
                 comment: Option<i64>,
                 error: Option<String>| {
        let (id, res, reason) = (task_id.clone(), resource.clone(), mcp_reason.clone());
        let store = deps.store.clone();
        async move {
            store
                .write(move |c| {
                    let detail = error.clone().unwrap_or_else(|| reason.clone());
                    crate::store::comments::record_reply(
                        c,
                        &id,
                        "rest_fallback",
                        &res,
                        None,
                        status,
                        comment,
                        Some(&detail),
                    )?;
                    audit::record(
                        c,
                        &Audit::new(action, "system")
                            .task(&id)
                            .comment(comment)
                            .meta(serde_json::json!({ "mcpFailure": reason, "error": error })),
                    )
                    .map(|_| ())
                })
                .await
        }
    };
    write("posting", "reply.rest_fallback.intent", None, None).await?;
    match deps.verifier.post_reply(resource.clone(), body).await {
        Ok(comment_id) => {
            write(
                "posted",
                "reply.rest_fallback.posted",
                Some(comment_id),
                None,
            )
            .await?;
            let check = deps
                .verifier
                .verify(ReplyQuery {
                    task_id: task_id.clone(),
                    turn_id: ctx.task.turn_id.clone().unwrap_or_default(),
                    resource_key: resource.clone(),
                    final_text: Some(text),
                })
                .await;
            match check {
                ReplyCheck::Confirmed { comment_id } => {
                    write("verified", "reply.confirmed", comment_id, None).await?;
                    settle(
                        deps,
                        &task_id,
                        TaskState::SucceededWithRestFallback,
                        &format!(
                            "reply posted by the REST fallback; the MCP reply failed: {mcp_reason}"
                        ),
                        Some("mcp_reply_missing"),
                    )
                    .await?;
                }
                other => {
                    settle(
                        deps,
                        &task_id,
                        TaskState::FailedReply,
                        &format!(
                            "Gitea accepted the REST fallback but it cannot be found ({other:?})"
                        ),
                        Some("rest_fallback_not_found"),
                    )
                    .await?;
                }
            }
        }
        Err(e) => {
            write(
                "failed",
                "reply.rest_fallback.failed",
                None,
                Some(e.clone()),
            )
            .await?;
            settle(
                deps,
                &task_id,
                TaskState::FailedReply,
                &format!("the REST fallback failed: {e}"),
                Some("rest_fallback_failed"),
            )
            .await?;
        }
    }
    Ok(true)
}
