//! The repo actor: one per repository. It holds the repository's lease, keeps
//! its FIFO (the store's order), claims the next task by compare-and-swap,
//! prepares the session's worktree, and hands the task to its session actor.
//! Each session works in a worktree of its own, so turns of different
//! sessions may run at once, up to `max_parallel_turns_per_repo`; the lease
//! guards the shared `.git` (fetch, worktree add and remove). A session whose
//! task is leased, running, uncertain or blocked starts nothing else; other
//! sessions go on.

mod plan;
mod retire;

use super::health::{RepoActorStatus, RepoHealth};
use super::registry::{DrainSession, Registry};
use super::{catch_panic, ActorDeps};
use crate::domain::{RepoKey, ResourceKey, TaskId};
use crate::lifecycle::TaskState;
use crate::store::audit::{self, Audit};
use crate::store::leases::{self, Fence, Lease};
use crate::store::models::Task;
use crate::store::tasks::TransitionOutcome;
use crate::store::{
    attempts, control, format_time, instances, now, queue, sessions, statuses, storm, worktrees,
    StoreError,
};
use crate::workspace::{Checkout, Disposition, RepoSpec, SessionTree, WorkspaceError, WorktreeId};
use actix::prelude::*;
use plan::{affinity, decide, Affinity, Plan, Snapshot, AFFINITY_GRACE};
pub(super) use retire::retention_cutoff;
use retire::retire;
use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

pub struct RepoActor {
    repo_key: RepoKey,
    deps: Arc<ActorDeps>,
    registry: Addr<Registry>,
    health: Arc<Mutex<RepoHealth>>,
    backlog: Arc<AtomicI64>,
    /// The lease we believe we hold (the store decides; renewal checks it).
    lease: Option<Lease>,
    /// One scheduling pass at a time; a wake-up during one runs another.
    gate: super::gate::Gate,
    /// Wakes the actor when its next waiting task is due.
    due_timer: Option<SpawnHandle>,
}

/// Look at the store and run what can run.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct Wake;

/// What one scheduling pass decided: the lease it leaves held, the task it
/// hands to a session, and the status the health view shows.
struct SchedulingOutcome {
    lease: Option<Lease>,
    /// Sessions to hand their leased or running task to.
    dispatch: Vec<(ResourceKey, RepoKey)>,
    status: RepoActorStatus,
    running_task: Option<TaskId>,
    /// Something changed: look again right away.
    again: bool,
    /// When the next waiting task (a continuation's backoff, a retry) is
    /// due, if nothing runs now.
    wake_at: Option<String>,
}

impl RepoActor {
    pub fn new(
        repo_key: RepoKey,
        deps: Arc<ActorDeps>,
        registry: Addr<Registry>,
        health: Arc<Mutex<RepoHealth>>,
        backlog: Arc<AtomicI64>,
    ) -> Self {
        RepoActor {
            repo_key,
            deps,
            registry,
            health,
            backlog,
            lease: None,
            gate: super::gate::Gate::default(),
            due_timer: None,
        }
    }

    fn update_health(&self, f: impl FnOnce(&mut RepoHealth)) {
        if let Ok(mut h) = self.health.lock() {
            f(&mut h);
            h.last_event_at = Some(now());
        }
    }

    fn wake(&mut self, ctx: &mut Context<Self>) {
        if !self.gate.wake() {
            return;
        }
        let fut = schedule_pass(self.deps.clone(), self.repo_key.clone(), self.lease.clone());
        ctx.spawn(catch_panic(fut).into_actor(self).map(|result, act, ctx| {
            match result {
                Ok(Ok(outcome)) => {
                    act.lease = outcome.lease.clone();
                    act.update_health(|h| {
                        h.passes += 1;
                        h.status = outcome.status;
                        h.lease_holder = outcome.lease.as_ref().map(|l| l.owner.clone());
                        h.lease_id = outcome.lease.as_ref().map(|l| l.lease_id.clone());
                        h.lease_expires_at = outcome.lease.as_ref().map(|l| l.expires_at.clone());
                        h.running_task = outcome.running_task.clone();
                    });
                    for (session_key, repo_key) in outcome.dispatch {
                        act.registry.do_send(DrainSession {
                            session_key,
                            repo_key,
                        });
                    }
                    if outcome.again {
                        act.gate.again();
                    }
                    if let Some(at) = outcome.wake_at {
                        act.wake_at(&at, ctx);
                    }
                }
                Ok(Err(e)) => {
                    // The store is down or busy: keep what we have and try on the next wake.
                    tracing::warn!(repo.key = %act.repo_key, error = %e, "scheduling pass failed; will retry");
                    act.update_health(|h| h.last_error = Some(e.to_string()));
                }
                Err(panic) => {
                    tracing::error!(repo.key = %act.repo_key, panic = %panic, "repo actor fault; restarting it");
                    act.update_health(|h| h.last_error = Some(format!("panic: {panic}")));
                    ctx.stop();
                    return;
                }
            }
            if act.gate.ended() {
                act.wake(ctx);
            }
        }));
    }

    /// Looks again when a waiting task becomes due (one timer: the
    /// earliest); the sweep remains the fallback.
    fn wake_at(&mut self, at: &str, ctx: &mut Context<Self>) {
        let Ok(due) = chrono::DateTime::parse_from_rfc3339(at) else {
            return;
        };
        let wait = (due.with_timezone(&chrono::Utc) - chrono::Utc::now())
            .to_std()
            .unwrap_or_default()
            // Past an hour the sweep looks long before; a timer that far
            // off would only be replaced.
            .min(std::time::Duration::from_secs(3600));
        if let Some(old) = self.due_timer.take() {
            ctx.cancel_future(old);
        }
        self.due_timer = Some(ctx.run_later(wait, |act, ctx| {
            act.due_timer = None;
            act.wake(ctx);
        }));
    }

    fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        let Some(lease) = self.lease.clone() else {
            return;
        };
        let store = self.deps.store.clone();
        let ttl = self.deps.settings.lease_ttl;
        let fut = async move {
            store
                .write(move |c| leases::renew(c, &lease.repo_key, &lease.lease_id, ttl))
                .await
        };
        ctx.spawn(fut.into_actor(self).map(|result, act, ctx| match result {
            Ok(Some(lease)) => {
                act.update_health(|h| h.lease_expires_at = Some(lease.expires_at.clone()));
                act.lease = Some(lease);
            }
            Ok(None) => {
                tracing::warn!(repo.key = %act.repo_key, "lost the repository lease (expired and taken)");
                act.lease = None;
                act.wake(ctx);
            }
            Err(e) => tracing::warn!(repo.key = %act.repo_key, error = %e, "lease renewal failed"),
        }));
    }
}

impl Actor for RepoActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.update_health(|h| {
            h.starts += 1;
            h.status = RepoActorStatus::Idle;
        });
        let heartbeat = self.deps.settings.heartbeat;
        ctx.run_interval(heartbeat, |act, ctx| act.heartbeat(ctx));
        self.wake(ctx);
    }
}

impl Supervised for RepoActor {
    fn restarting(&mut self, _: &mut Self::Context) {
        // Rebuilt from the store on the next pass; the lease stays ours if it is.
        self.gate.reset();
        crate::metrics::actor_restart("repo");
        self.update_health(|h| {
            h.restarts += 1;
            h.status = RepoActorStatus::Restarting;
        });
    }
}

impl Handler<Wake> for RepoActor {
    type Result = ();

    /// Runs a scheduling pass (or marks a follow-up if one is running).
    fn handle(&mut self, _: Wake, ctx: &mut Self::Context) {
        self.backlog.fetch_sub(1, Ordering::Relaxed);
        self.wake(ctx);
    }
}

/// One look at the store: decide, claim, prepare, dispatch.
async fn schedule_pass(
    deps: Arc<ActorDeps>,
    repo_key: RepoKey,
    held: Option<Lease>,
) -> Result<SchedulingOutcome, StoreError> {
    let store = deps.store.clone();
    let owner = deps.settings.owner.clone();
    let ttl = deps.settings.lease_ttl;
    let key = repo_key.clone();
    let per_day = deps.settings.limits.repo_turns_per_day;
    let retire_before = retention_cutoff(&deps);
    let storm_limit = deps.settings.session_turns_per_minute;
    let (who, lease_ttl) = (owner.clone(), ttl);
    let here = deps.runtime.home();
    let (paused, repo, (holding, next, due), today, retirable, (storming, yield_until)) = store
        .read(move |c| {
            let holding = queue::holding_tasks(c, &key)?;
            // A session the storm guard paused starts nothing until resumed.
            let busy: HashSet<ResourceKey> = holding
                .iter()
                .map(|t| t.session_key.clone())
                .chain(storm::paused(c, &key)?)
                .collect();
            let next = queue::next_runnable(c, &key, &busy)?;
            // Only its comments count: continuations are the bridge's own.
            let storming = match &next {
                Some(t) if storm_limit > 0 && t.continuation.is_none() => {
                    let minute_ago = crate::store::format_time(
                        chrono::Utc::now() - chrono::Duration::minutes(1),
                    );
                    let started = storm::comment_turns_since(c, &t.session_key, &minute_ago)?;
                    (started >= storm_limit).then_some(started)
                }
                _ => None,
            };
            let due = match next {
                None => queue::next_due(c, &key)?,
                Some(_) => None,
            };
            // Only an idle repository retires worktrees: the question is
            // asked only then.
            let idle = next.is_none() && !holding.iter().any(|t| t.state.is_session_driven());
            let retirable = match (idle, &retire_before) {
                (true, Some(before)) => worktrees::retirable(c, Some(&key), before)?,
                _ => Vec::new(),
            };
            // A new task waits a moment for the serving process where its
            // session goes on best: the one whose Codex home holds its
            // thread, else the one that held the repository last (until
            // when, by the shared clock).
            let yield_until = match &next {
                Some(t) => {
                    let clock = crate::store::shared_clock(c)?;
                    let until = chrono::DateTime::parse_from_rfc3339(&t.created_at)
                        .ok()
                        .map(|at| {
                            at.with_timezone(&chrono::Utc)
                                + chrono::Duration::milliseconds(AFFINITY_GRACE.as_millis() as i64)
                        })
                        .filter(|until| *until > clock);
                    let elsewhere = match until {
                        None => false,
                        Some(_) => {
                            let session_home = sessions::session(c, &t.session_key)?
                                .and_then(|s| s.thread_id.and(s.thread_home));
                            match affinity(session_home.as_deref(), here.as_deref()) {
                                Affinity::Here => false,
                                Affinity::Home(home) => {
                                    let since = crate::store::format_time(
                                        clock
                                            - chrono::Duration::from_std(lease_ttl)
                                                .unwrap_or_else(|_| chrono::Duration::seconds(60)),
                                    );
                                    instances::home_served_elsewhere(c, &home, &who, &since)?
                                }
                                Affinity::PreviousHolder => {
                                    leases::previous_holder_serves(c, &key, &who, clock, lease_ttl)?
                                }
                            }
                        }
                    };
                    until.filter(|_| elsewhere).map(crate::store::format_time)
                }
                None => None,
            };
            Ok((
                control::get(c)?.global_paused,
                queue::repository(c, &key)?,
                (holding, next, due),
                match per_day {
                    0 => 0,
                    _ => crate::store::turns::repo_turns_today(c, &key)?,
                },
                retirable,
                (storming, yield_until),
            ))
        })
        .await?;
    let running: Vec<&Task> = holding
        .iter()
        .filter(|t| t.state.is_session_driven())
        .collect();
    let snapshot = Snapshot {
        held: !deps.settings.hold.is_empty(),
        // Stopping, or asked by an operator to drain: no new claim, and
        // the lease goes back once the turns under way settled.
        draining: deps.settings.draining.is_on() || deps.settings.drain_requested.is_on(),
        circuit_open: deps.settings.circuit.is_open(),
        agent_ready: deps.settings.agent.now().can_run(),
        paused,
        repo: repo.as_ref().map(|r| r.status),
        running: running.len(),
        places: deps.settings.max_parallel_turns,
        awaiting: holding
            .iter()
            .find(|t| t.state.awaits_operator())
            .map(|t| t.state),
        next: next.is_some(),
        next_storming: storming.is_some(),
        day_spent: per_day > 0 && today >= per_day,
        retire: !retirable.is_empty(),
        yield_to_previous: yield_until.is_some(),
    };
    let mut outcome = SchedulingOutcome {
        lease: held.clone(),
        dispatch: Vec::new(),
        status: RepoActorStatus::Idle,
        running_task: running.first().map(|t| t.task_id.clone()),
        again: false,
        // Yielding to the previous holder: look again when its grace ends.
        wake_at: due.or(yield_until),
    };
    let plan = decide(&snapshot);
    let (repo, next) = match (plan, repo, next) {
        (Plan::Release(status), ..) => {
            outcome.status = status;
            outcome.lease = release(&deps, held).await;
            return Ok(outcome);
        }
        (Plan::Keep(status), ..) => {
            outcome.status = status;
            return Ok(outcome);
        }
        (Plan::PauseNext, _, Some(next)) => {
            pause_storming(&deps, &next, storming.unwrap_or(storm_limit)).await?;
            outcome.again = true;
            return Ok(outcome);
        }
        (Plan::PauseNext, _, None) => return Ok(outcome),
        (Plan::Retire, Some(repo), _) => {
            let Some(lease) = acquire(&deps, &repo_key, &owner, ttl).await? else {
                outcome.status = RepoActorStatus::BusyElsewhere;
                outcome.lease = None;
                return Ok(outcome);
            };
            retire(&deps, &repo, retirable).await?;
            outcome.lease = release(&deps, Some(lease)).await;
            return Ok(outcome);
        }
        (Plan::Run { claim }, repo, next) => {
            // The sessions drive their tasks (and recover them by history
            // if they lost sight of them). We must hold the lease to let them.
            outcome.status = RepoActorStatus::Busy;
            let Some(lease) = acquire(&deps, &repo_key, &owner, ttl).await? else {
                outcome.status = RepoActorStatus::BusyElsewhere;
                outcome.lease = None;
                outcome.wake_at = when_free(&deps, &repo_key).await.or(outcome.wake_at);
                return Ok(outcome);
            };
            outcome.lease = Some(lease);
            outcome.dispatch = running
                .iter()
                .map(|t| (t.session_key.clone(), repo_key.clone()))
                .collect();
            match (claim, repo, next) {
                (true, Some(repo), Some(next)) => (repo, next),
                _ => return Ok(outcome),
            }
        }
        // `decide` retires only with a repository.
        (Plan::Retire, None, _) => return Ok(outcome),
    };
    // More places free after this claim: look again for the next task.
    let more = snapshot.running + 1 < snapshot.places;
    // Lease and claim in one transaction: one commit on the way to the turn.
    let (task, key, who) = (next.clone(), repo_key.clone(), owner.clone());
    let (lease, claimed, recorded) = store
        .write(move |c| {
            let Some(lease) = leases::acquire(c, &key, &who, ttl)? else {
                return Ok((None, None, None));
            };
            let attempt = attempts::claim(c, &task, &lease.lease_id, &who)?;
            let recorded = worktrees::recorded(c, &task.session_key)?;
            Ok((Some(lease), attempt, recorded))
        })
        .await?;
    let Some(lease) = lease else {
        outcome.status = RepoActorStatus::BusyElsewhere;
        outcome.lease = None;
        outcome.wake_at = when_free(&deps, &repo_key).await.or(outcome.wake_at);
        return Ok(outcome);
    };
    let fence = lease.fence();
    outcome.lease = Some(lease);
    let Some(attempt) = claimed else {
        outcome.again = true;
        return Ok(outcome);
    };
    outcome.status = RepoActorStatus::Busy;
    outcome
        .running_task
        .get_or_insert_with(|| next.task_id.clone());
    tracing::info!(repo.key = %repo_key, task.id = %next.task_id, attempt = attempt.number, "task leased");

    let spec = RepoSpec {
        owner: repo.owner.clone(),
        name: repo.name.clone(),
        clone_url: repo.clone_url.clone(),
    };
    let checkout = match (next.resource_key.is_pull(), &next.head_ref) {
        (true, Some(head)) => Checkout::PullRequest {
            number: next.resource_key.number(),
            head_ref: head.clone(),
        },
        _ => Checkout::DefaultBranch {
            name: repo.default_branch.clone(),
        },
    };
    let workspaces = deps.workspaces.clone();
    let id = WorktreeId::of(&next.session_key);
    let prepared = tokio::task::spawn_blocking(move || {
        let session = SessionTree {
            id,
            recorded: recorded.as_ref(),
        };
        workspaces.ready(&spec, &checkout, session)
    })
    .await
    .unwrap_or_else(|e| {
        Err(WorkspaceError::Unfinished {
            repo: format!("{}/{}", repo.owner, repo.name),
            detail: e.to_string(),
        })
    });
    match prepared {
        Ok(prepared) => {
            tracing::debug!(task.id = %next.task_id, path = %prepared.path.display(), "workspace ready");
            // A pull request's commit statuses go on its head; a child's
            // worktree holds its own branch, whose commits Gitea never saw.
            let head = prepared
                .head
                .filter(|_| next.resource_key.is_pull() && next.session_key.child().is_none());
            record_prepared(&deps, &next, head, fence).await;
            outcome.dispatch.push((next.session_key.clone(), repo_key));
            outcome.again = more;
        }
        Err(err) => {
            workspace_failed(&deps, &next, attempt.number, &err, fence).await?;
            outcome.again = true;
        }
    }
    Ok(outcome)
}

/// The storm guard: `next`'s session started `started` turns from comments
/// in the last minute, so it is paused (once, with one notice in its
/// thread) instead of starting another; its tasks stay `queued`.
async fn pause_storming(deps: &ActorDeps, next: &Task, started: i64) -> Result<(), StoreError> {
    let limit = deps.settings.session_turns_per_minute;
    let kind = if next.resource_key.is_pull() {
        "pull request"
    } else {
        "Issue"
    };
    let notice = format!(
        "I paused work on this {kind}: its comments started {started} turns in the last minute, \
         more than this server allows (session_turns_per_minute = {limit}). A bot, or two \
         bridges, may be answering each other. Nothing is lost: the requests waiting here stay \
         queued until an operator resumes this {kind}."
    );
    let (session, task) = (next.session_key.clone(), next.task_id.clone());
    let paused = deps
        .store
        .write(move |c| storm::pause(c, &session, &task, started, limit, &notice))
        .await?;
    if paused {
        tracing::warn!(session = %next.session_key, started, limit, "storm guard: session paused");
    }
    Ok(())
}

/// Records that the task's session worktree is in use (its retention
/// counts from here) and, for a pull request, the commit it was checked out
/// at, which its commit statuses go on. Neither holds a task up: if the
/// store refuses, the task runs without them (and without statuses).
async fn record_prepared(deps: &Arc<ActorDeps>, task: &Task, head: Option<String>, fence: Fence) {
    let (t, session, repo) = (
        task.task_id.clone(),
        task.session_key.clone(),
        task.repo_key.clone(),
    );
    let recorded = deps
        .store
        .write(move |c| {
            leases::check(c, &fence)?;
            worktrees::prepared(c, &session, &repo)?;
            match &head {
                Some(head) => statuses::record_head(c, &t, head),
                None => Ok(()),
            }
        })
        .await;
    if let Err(e) = recorded {
        tracing::warn!(task.id = %task.task_id, error = %e, "could not record the prepared worktree; this task sets no commit status");
    }
}

/// When to look again at a repository another process holds: a moment
/// after its lease runs out, if it is not renewed (a holder that died frees
/// it then, not at the next sweep). `None` when that time has passed by
/// this process's clock already (a clock behind the database's): the sweep
/// looks again, and a timer never spins.
async fn when_free(deps: &Arc<ActorDeps>, repo_key: &RepoKey) -> Option<String> {
    let key = repo_key.clone();
    let lease = deps
        .store
        .read(move |c| leases::find(c, &key))
        .await
        .ok()??;
    let expires = chrono::DateTime::parse_from_rfc3339(&lease.expires_at).ok()?;
    let at = expires.with_timezone(&chrono::Utc) + chrono::Duration::milliseconds(100);
    (at > chrono::Utc::now()).then(|| crate::store::format_time(at))
}

async fn acquire(
    deps: &Arc<ActorDeps>,
    repo_key: &RepoKey,
    owner: &str,
    ttl: std::time::Duration,
) -> Result<Option<Lease>, StoreError> {
    let (key, who) = (repo_key.to_owned(), owner.to_owned());
    deps.store
        .write(move |c| leases::acquire(c, &key, &who, ttl))
        .await
}

/// Gives the lease back if we hold one; what we hold afterwards (normally nothing).
async fn release(deps: &Arc<ActorDeps>, held: Option<Lease>) -> Option<Lease> {
    let lease = held?;
    let l = lease.clone();
    match deps
        .store
        .write(move |c| leases::release(c, &l.repo_key, &l.lease_id))
        .await
    {
        Ok(released) => {
            // Another process may be waiting for this repository.
            if released {
                deps.store.signal(crate::store::signals::Signal::Repo {
                    repo_key: lease.repo_key,
                });
            }
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "lease release failed; it will expire");
            Some(lease)
        }
    }
}

/// Moves the task as the workspace's failure says: the one place a
/// workspace error becomes a state.
async fn workspace_failed(
    deps: &Arc<ActorDeps>,
    task: &Task,
    attempt: i64,
    err: &WorkspaceError,
    fence: Fence,
) -> Result<(), StoreError> {
    let (to, retry_at) = match err.disposition() {
        Disposition::NeedsOperator => (TaskState::BlockedWorkspace, None),
        Disposition::CannotName | Disposition::Permanent => (TaskState::Failed, None),
        Disposition::Transient if attempt < deps.settings.max_attempts => {
            let backoff = chrono::Duration::from_std(deps.settings.retry_backoff)
                .unwrap_or_else(|_| chrono::Duration::seconds(30));
            (
                TaskState::RetryWait,
                Some(format_time(chrono::Utc::now() + backoff)),
            )
        }
        Disposition::Transient => (TaskState::Failed, None),
    };
    tracing::warn!(task.id = %task.task_id, code = err.code(), to = to.as_str(), "workspace preparation failed: {err}");
    let (task_id, code, detail) = (task.task_id.clone(), err.code(), err.to_string());
    // Decided on the version our claim wrote: an operator's abort or cancel
    // that landed since is not overwritten; the next pass hands it to its
    // session.
    let decided_on = task.state_version + 1;
    deps.store
        .write(move |c| {
            leases::check(c, &fence)?;
            audit::record(
                c,
                &Audit::new("workspace.failed", "system")
                    .task(&task_id)
                    .error(code)
                    .meta(serde_json::json!({ "detail": detail, "attempt": attempt })),
            )?;
            let out = attempts::decide_move(
                c,
                &task_id,
                decided_on,
                to,
                "workspace preparation failed",
                Some(code),
                retry_at.as_deref(),
            )?;
            match out {
                TransitionOutcome::Applied { .. } => attempts::end_attempt(c, &task_id, code),
                TransitionOutcome::Stale { state, version } => audit::record(
                    c,
                    &Audit::new("task.decision_stale", "system")
                        .task(&task_id)
                        .states(Some(state), Some(to))
                        .meta(serde_json::json!({
                            "decidedOnVersion": decided_on,
                            "stateVersion": version,
                            "reason": "workspace preparation failed",
                        })),
                )
                .map(drop),
                TransitionOutcome::Refused { .. } => Ok(()),
            }
        })
        .await?;
    Ok(())
}
