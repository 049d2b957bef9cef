//! The repo actor: one per repository. It holds the repository's lease, keeps
//! its FIFO (the store's order), claims the next task by compare-and-swap,
//! prepares the workspace, and hands the task to its session actor. It never
//! lets two tasks of its repository hold the workspace at once: while a task is
//! leased, running, uncertain or blocked, nothing else starts.

use super::health::{RepoActorStatus, RepoHealth};
use super::registry::{DrainSession, Registry};
use super::{catch_panic, ActorDeps};
use crate::domain::states::RepoStatus;
use crate::domain::{RepoKey, ResourceKey, TaskId};
use crate::lifecycle::TaskState;
use crate::store::audit::{self, Audit};
use crate::store::leases::{self, Lease};
use crate::store::models::Task;
use crate::store::tasks::TransitionOutcome;
use crate::store::{attempts, control, format_time, now, queue, statuses, worktrees, StoreError};
use crate::workspace::{Checkout, Disposition, RepoSpec, SessionTree, WorkspaceError, WorktreeId};
use actix::prelude::*;
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
}

/// Look at the store and run what can run.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub struct Wake;

/// What one scheduling pass decided: the lease it leaves held, the task it
/// hands to a session, and the status the health view shows.
struct SchedulingOutcome {
    lease: Option<Lease>,
    /// Session to hand a leased task to.
    dispatch: Option<(ResourceKey, RepoKey)>,
    status: RepoActorStatus,
    running_task: Option<TaskId>,
    /// Something changed: look again right away.
    again: bool,
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
                    if let Some((session_key, repo_key)) = outcome.dispatch {
                        act.registry.do_send(DrainSession {
                            session_key,
                            repo_key,
                        });
                    }
                    if outcome.again {
                        act.gate.again();
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

/// What one scheduling pass decides on, read together: the store's rows,
/// the configuration's hold and whether the agent runtime can run a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Snapshot {
    /// The configuration keeps this process from starting any task.
    held: bool,
    /// The agent runtime can run a turn now.
    agent_ready: bool,
    paused: bool,
    /// The repository's status; `None` while the store has no row for it.
    repo: Option<RepoStatus>,
    /// The state of the task that holds the repository, if one does.
    holding: Option<TaskState>,
    /// A queued task is due.
    next: bool,
    /// The repository took `repo_turns_per_day` turns today (UTC).
    day_spent: bool,
    /// A session's worktree outlived `worktree_retention_hours`.
    retire: bool,
}

/// What a scheduling pass does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Start nothing, and give back the lease this process holds.
    Release(RepoActorStatus),
    /// Start nothing, and keep whatever lease this process holds.
    Keep(RepoActorStatus),
    /// Hold the lease for the task that holds the repository, and hand that
    /// task to its session (which drives it, or recovers it by history).
    Resume,
    /// Lease the repository, claim the next task and prepare its workspace.
    Claim,
    /// Lease the repository and remove the worktrees past their retention
    /// (the lease guards the shared `.git`), then give the lease back.
    Retire,
}

/// The scheduling decision, from what the pass saw alone.
fn decide(s: &Snapshot) -> Plan {
    if s.held {
        // Nothing may start here, not even a task an earlier run left leased
        // or running: its session would start or verify a turn this process
        // cannot vouch for. Every task stays where it is, for a process that can.
        return Plan::Release(RepoActorStatus::Held);
    }
    let Some(repo) = s.repo else {
        return Plan::Keep(RepoActorStatus::Idle);
    };
    match s.holding {
        // An operator decides; nothing else runs here until then.
        Some(TaskState::BlockedWorkspace) => return Plan::Release(RepoActorStatus::Blocked),
        Some(state) if state.awaits_operator() => return Plan::Release(RepoActorStatus::Uncertain),
        // Its session cannot reach the agent to drive or recover it now.
        // A lease held for it stays held (its session may be mid-turn on a
        // process that is coming back); none is taken for it.
        Some(_) if !s.agent_ready => return Plan::Keep(RepoActorStatus::AgentUnavailable),
        Some(_) => return Plan::Resume,
        None => {}
    }
    if s.paused {
        Plan::Release(RepoActorStatus::Paused)
    } else if repo != RepoStatus::Active {
        Plan::Release(RepoActorStatus::Disabled)
    } else if !s.next && s.retire {
        Plan::Retire
    } else if !s.next {
        Plan::Release(RepoActorStatus::Idle)
    } else if s.day_spent {
        // Its tasks wait `queued` (the actor's status says why); the sweep
        // looks again, and the next UTC day lets them start.
        Plan::Release(RepoActorStatus::DayLimit)
    } else if !s.agent_ready {
        // A task leased now would only use up an attempt on an agent that
        // cannot run it: it waits `queued`, and the registry wakes us when
        // the agent can.
        Plan::Release(RepoActorStatus::AgentUnavailable)
    } else {
        Plan::Claim
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
    let (paused, repo, holding, next, today, retirable) = store
        .read(move |c| {
            let holding = queue::holding_task(c, &key)?;
            let next = queue::next_runnable(c, &key)?;
            // Only an idle repository retires worktrees: the question is
            // asked only then.
            let retirable = match (&holding, &next, &retire_before) {
                (None, None, Some(before)) => worktrees::retirable(c, Some(&key), before)?,
                _ => Vec::new(),
            };
            Ok((
                control::get(c)?.global_paused,
                queue::repository(c, &key)?,
                holding,
                next,
                match per_day {
                    0 => 0,
                    _ => crate::store::turns::repo_turns_today(c, &key)?,
                },
                retirable,
            ))
        })
        .await?;
    let snapshot = Snapshot {
        held: !deps.settings.hold.is_empty(),
        agent_ready: deps.settings.agent.now().can_run(),
        paused,
        repo: repo.as_ref().map(|r| r.status),
        holding: holding.as_ref().map(|t| t.state),
        next: next.is_some(),
        day_spent: per_day > 0 && today >= per_day,
        retire: !retirable.is_empty(),
    };
    let mut outcome = SchedulingOutcome {
        lease: held.clone(),
        dispatch: None,
        status: RepoActorStatus::Idle,
        running_task: holding.as_ref().map(|t| t.task_id.clone()),
        again: false,
    };
    let plan = decide(&snapshot);
    let (repo, next) = match (plan, repo, holding, next) {
        (Plan::Release(status), ..) => {
            outcome.status = status;
            outcome.lease = release(&deps, held).await;
            return Ok(outcome);
        }
        (Plan::Keep(status), ..) => {
            outcome.status = status;
            return Ok(outcome);
        }
        (Plan::Resume, _, Some(task), _) => {
            // The session drives it (and recovers it by history if it lost
            // sight of it). We must hold the lease to let it.
            outcome.status = RepoActorStatus::Busy;
            let Some(lease) = acquire(&deps, &repo_key, &owner, ttl).await? else {
                outcome.status = RepoActorStatus::BusyElsewhere;
                outcome.lease = None;
                return Ok(outcome);
            };
            outcome.lease = Some(lease);
            outcome.dispatch = Some((task.session_key.clone(), repo_key));
            return Ok(outcome);
        }
        (Plan::Retire, Some(repo), ..) => {
            let Some(lease) = acquire(&deps, &repo_key, &owner, ttl).await? else {
                outcome.status = RepoActorStatus::BusyElsewhere;
                outcome.lease = None;
                return Ok(outcome);
            };
            retire(&deps, &repo, retirable).await?;
            outcome.lease = release(&deps, Some(lease)).await;
            return Ok(outcome);
        }
        (Plan::Claim, Some(repo), None, Some(next)) => (repo, next),
        // `decide` resumes only with a holding task, and claims or retires
        // only with a repository (and claims only with a next task and no
        // holding one).
        (Plan::Resume | Plan::Claim | Plan::Retire, ..) => return Ok(outcome),
    };
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
        return Ok(outcome);
    };
    outcome.lease = Some(lease);
    let Some(attempt) = claimed else {
        outcome.again = true;
        return Ok(outcome);
    };
    outcome.status = RepoActorStatus::Busy;
    outcome.running_task = Some(next.task_id.clone());
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
    let id = WorktreeId::of(&next.resource_key);
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
            let head = prepared.head.filter(|_| next.resource_key.is_pull());
            record_prepared(&deps, &next, head).await;
            outcome.dispatch = Some((next.session_key.clone(), repo_key));
        }
        Err(err) => {
            workspace_failed(&deps, &next, attempt.number, &err).await?;
            outcome.again = true;
        }
    }
    Ok(outcome)
}

/// Records that the task's session worktree is in use (its retention
/// counts from here) and, for a pull request, the commit it was checked out
/// at, which its commit statuses go on. Neither holds a task up: if the
/// store refuses, the task runs without them (and without statuses).
async fn record_prepared(deps: &Arc<ActorDeps>, task: &Task, head: Option<String>) {
    let (t, session, repo) = (
        task.task_id.clone(),
        task.session_key.clone(),
        task.repo_key.clone(),
    );
    let recorded = deps
        .store
        .write(move |c| {
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

/// Worktrees unused since this time may be retired; `None`: they are kept.
pub(super) fn retention_cutoff(deps: &ActorDeps) -> Option<String> {
    let keep = chrono::Duration::from_std(deps.settings.worktree_retention?).ok()?;
    Some(format_time(chrono::Utc::now() - keep))
}

/// Removes the worktrees of sessions whose work ended longer ago than the
/// retention (under the repository's lease), each audited with where its
/// uncommitted work was kept. One that cannot be removed stays on disk and
/// recorded; the next idle pass tries again.
async fn retire(
    deps: &Arc<ActorDeps>,
    repo: &crate::store::models::Repository,
    sessions: Vec<(RepoKey, ResourceKey)>,
) -> Result<(), StoreError> {
    for (_, session) in sessions {
        let id = crate::workspace::WorktreeId::of(&session);
        let (workspaces, owner, name) = (
            deps.workspaces.clone(),
            repo.owner.clone(),
            repo.name.clone(),
        );
        let done = tokio::task::spawn_blocking(move || workspaces.retire(&owner, &name, id)).await;
        let retired = match done {
            Ok(Ok(retired)) => retired,
            Ok(Err(e)) => {
                tracing::warn!(session.key = %session, code = e.code(), "could not retire the session's worktree; it stays: {e}");
                continue;
            }
            Err(e) => {
                tracing::warn!(session.key = %session, "could not retire the session's worktree; it stays: {e}");
                continue;
            }
        };
        tracing::info!(session.key = %session, kept = ?retired.kept, "session worktree retired");
        deps.store
            .write(move |c| {
                worktrees::removed(c, &session)?;
                audit::record(
                    c,
                    &Audit::new("worktree.retired", "system").meta(serde_json::json!({
                            "session": session.as_str(),
                            "removed": retired.removed,
                            "uncommittedWorkKeptAt": retired.kept,
                    })),
                )
                .map(drop)
            })
            .await?;
    }
    Ok(())
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
        Ok(_) => None,
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

#[cfg(test)]
mod tests {
    use super::{decide, Plan, Snapshot};
    use crate::actors::health::RepoActorStatus;
    use crate::domain::states::RepoStatus;
    use crate::lifecycle::TaskState;
    use crate::store::queue::HOLDING_STATES;
    use proptest::prelude::*;

    /// A repository with a due task, nothing holding it, all running.
    fn due() -> Snapshot {
        Snapshot {
            held: false,
            agent_ready: true,
            paused: false,
            repo: Some(RepoStatus::Active),
            holding: None,
            next: true,
            day_spent: false,
            retire: false,
        }
    }

    #[test]
    fn a_repository_past_its_turns_for_the_day_starts_nothing_and_says_why() {
        let spent = Snapshot {
            day_spent: true,
            ..due()
        };
        assert_eq!(decide(&spent), Plan::Release(RepoActorStatus::DayLimit));
        // A task already holding the repository is driven on: the limit
        // gates new turns, never one under way.
        let holding = Snapshot {
            holding: Some(TaskState::Running),
            ..spent
        };
        assert_eq!(decide(&holding), Plan::Resume);
    }

    #[test]
    fn a_due_task_is_claimed_only_while_the_agent_can_run_it() {
        assert_eq!(decide(&due()), Plan::Claim);
        let waiting = Snapshot {
            agent_ready: false,
            ..due()
        };
        assert_eq!(
            decide(&waiting),
            Plan::Release(RepoActorStatus::AgentUnavailable)
        );
    }

    #[test]
    fn a_holding_task_keeps_its_lease_but_is_not_resumed_while_the_agent_cannot_run() {
        let running = Snapshot {
            holding: Some(TaskState::Running),
            next: false,
            ..due()
        };
        assert_eq!(decide(&running), Plan::Resume);
        assert_eq!(
            decide(&Snapshot {
                agent_ready: false,
                ..running
            }),
            Plan::Keep(RepoActorStatus::AgentUnavailable)
        );
        // An operator's decision comes first, the agent or not.
        for agent_ready in [true, false] {
            let blocked = Snapshot {
                holding: Some(TaskState::BlockedWorkspace),
                agent_ready,
                ..due()
            };
            assert_eq!(decide(&blocked), Plan::Release(RepoActorStatus::Blocked));
            let uncertain = Snapshot {
                holding: Some(TaskState::NeedsReconciliation),
                ..blocked
            };
            assert_eq!(
                decide(&uncertain),
                Plan::Release(RepoActorStatus::Uncertain)
            );
        }
    }

    #[test]
    fn the_operators_and_the_configurations_word_comes_before_the_agents() {
        let no_agent = Snapshot {
            agent_ready: false,
            ..due()
        };
        assert_eq!(
            decide(&Snapshot {
                held: true,
                ..no_agent
            }),
            Plan::Release(RepoActorStatus::Held)
        );
        assert_eq!(
            decide(&Snapshot {
                paused: true,
                ..no_agent
            }),
            Plan::Release(RepoActorStatus::Paused)
        );
        assert_eq!(
            decide(&Snapshot {
                repo: Some(RepoStatus::Disabled),
                ..no_agent
            }),
            Plan::Release(RepoActorStatus::Disabled)
        );
        assert_eq!(
            decide(&Snapshot {
                next: false,
                ..no_agent
            }),
            Plan::Release(RepoActorStatus::Idle)
        );
    }

    fn snapshots() -> impl Strategy<Value = Snapshot> {
        let repo = prop_oneof![
            Just(None),
            Just(Some(RepoStatus::Active)),
            Just(Some(RepoStatus::Disabled)),
            Just(Some(RepoStatus::Blocked)),
        ];
        let holding = prop_oneof![
            Just(None),
            proptest::sample::select(TaskState::ALL.to_vec())
                .prop_filter("holds", |s| s.holds_repository())
                .prop_map(Some),
        ];
        (any::<[bool; 6]>(), repo, holding).prop_map(
            |([held, agent_ready, paused, next, day_spent, retire], repo, holding)| Snapshot {
                held,
                agent_ready,
                paused,
                repo,
                holding,
                next,
                day_spent,
                retire,
            },
        )
    }

    proptest! {
        /// Nothing reaches a session unless the agent can run it and nothing
        /// else forbids it; a new task only with nothing holding the repository.
        #[test]
        fn no_task_starts_unless_everything_allows_it(s in snapshots()) {
            match decide(&s) {
                Plan::Claim => {
                    prop_assert!(s.agent_ready && !s.held && !s.paused && s.next && !s.day_spent);
                    prop_assert_eq!(s.repo, Some(RepoStatus::Active));
                    prop_assert_eq!(s.holding, None);
                }
                Plan::Resume => {
                    prop_assert!(s.agent_ready && !s.held);
                    prop_assert!(s.holding.is_some_and(|h| !h.awaits_operator()));
                }
                Plan::Retire => {
                    // Worktrees go only while nothing holds the repository
                    // and nothing waits to start in it.
                    prop_assert!(s.retire && !s.held && !s.paused && !s.next);
                    prop_assert_eq!(s.holding, None);
                    prop_assert_eq!(s.repo, Some(RepoStatus::Active));
                }
                Plan::Keep(_) | Plan::Release(_) => {}
            }
        }
    }

    /// The store finds the task that holds a repository by its own list of
    /// states; the scheduler acts on what the lifecycle says holds one.
    #[test]
    fn the_stores_holding_states_are_the_lifecycles() {
        for state in TaskState::ALL {
            assert_eq!(
                state.holds_repository(),
                HOLDING_STATES.contains(&state),
                "{state}"
            );
        }
    }
}
