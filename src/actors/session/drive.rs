//! One drive of a task: the session takes its oldest unsettled task,
//! gathers the snapshot, ask [`decide::next`], commit the decision by
//! compare-and-swap on the version it names, carry out its effects, and feed
//! what they report back in, until a decision asks for nothing more.
//!
//! The effects live beside this file: `turn.rs` (thread, turn/start, the
//! turn's events, approvals, interrupts), `recover.rs` (the thread's history),
//! `reply.rs` (verification, the reply-retry turn, the REST post), `trust.rs`
//! (the commenter's permission, the thread's terms); `commit.rs` writes a
//! decision.

use super::commit::{CommitCtx, Committed};
use super::decide::{
    self, Admission, Decision, Effect, Event, Fallback, ReplyRetry, RetryAfter, Snapshot,
};
use super::Signals;
use crate::actors::ActorDeps;
use crate::agent::transcript::Prompt;
use crate::agent::TurnEvent;
use crate::domain::policy::RepoPolicy;
use crate::domain::states::{CapacityDenial, CommentStatus, OutboxStatus};
use crate::domain::trust::{ReplyPath, ThreadTrust};
use crate::domain::workflow::children::Authority;
use crate::domain::worktree::{TreeState, WorktreeId};
use crate::domain::{OperationId, ResourceKey};
use crate::lifecycle::TaskState;
use crate::store::leases::{self, Fence};
use crate::store::models::{OutboxEntry, Task};
use crate::store::{attempts, format_time, ledger, queue, sessions, turns, StoreError};
use futures_util::stream::BoxStream;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub(super) enum DriveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The actor lost sight of its turn: stop, restart, recover by history.
    #[error("session fault: {0}")]
    Fault(String),
}

/// A decision that found the task changed since its snapshot is decided
/// again from the store; this many times in a row means something keeps
/// moving the task under us, and the actor restarts instead.
const MAX_STALE_IN_A_ROW: u32 = 3;

/// The turn a drive follows, as its effects learn it.
#[derive(Default)]
pub(super) struct Turn {
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub events: Option<BoxStream<'static, TurnEvent>>,
    pub deadline: Option<tokio::time::Instant>,
    /// Set once an interrupt is requested: the end must be confirmed by then.
    pub grace: Option<tokio::time::Instant>,
    pub last_seq: i64,
    pub final_text: Option<String>,
    /// When the end event arrived (for the settle-latency figure).
    pub ended_at: Option<std::time::Instant>,
    /// Observes the turn's duration while it is read.
    pub timer: Option<crate::metrics::TurnTimer>,
    /// The thread settled idle without `turn/completed`: unless something
    /// happens on it by then, the history is asked whether the turn ended.
    pub idle_deadline: Option<tokio::time::Instant>,
    /// The remote worker that took the turn: the attempt names it once the
    /// turn's admission is written.
    pub runner: Option<crate::store::workers::WorkerId>,
}

/// An approval the agent asked for, until it is decided.
pub(super) struct PendingApproval {
    pub key: String,
    pub kind: String,
    pub detail: serde_json::Value,
    pub approval_id: Option<String>,
}

pub(super) struct TaskDrive {
    pub deps: Arc<ActorDeps>,
    pub signals: Signals,
    pub task: Task,
    pub entry: Option<OutboxEntry>,
    /// The active attempt (empty when none is recorded).
    pub attempt_id: String,
    pub snap: Snapshot,
    /// The session's worktree, when it can be named.
    pub workspace: Option<PathBuf>,
    /// The repository's owner and name as Gitea spells them (its workspace's).
    pub repo_names: Option<(String, String)>,
    /// What the session's thread was created to be trusted with (`None`: no
    /// trust recorded, a thread made with every tool).
    pub thread_trust: Option<ThreadTrust>,
    pub policy: Option<RepoPolicy>,
    /// The session's thread, which a new task's turn resumes.
    pub session_thread: Option<String>,
    /// The Codex home the session's thread lives in, and when the
    /// conversation it carries began (both `None` when not recorded).
    pub thread_home: Option<String>,
    pub conversation_since: Option<String>,
    /// A delegated child's task: the most its thread may do (its parent's
    /// sandbox and approval policy; the least of all when the child's
    /// record cannot be read).
    pub delegated: Option<Authority>,
    /// A delegated child's parent thread, whose conversation its own thread
    /// starts from (when the parent asked for a fork).
    pub fork_from: Option<String>,
    /// The operation the current turn carries: the entry's, or the
    /// reply-retry turn's own once that was intended. None without an entry.
    pub operation_id: Option<OperationId>,
    pub turn: Turn,
    /// The prompt of the turn being started, until its admission stores it.
    pub prompt: Option<Prompt>,
    pub approval: Option<PendingApproval>,
    /// What the verifier or the fallback found (a comment id).
    pub reply_comment: Option<i64>,
    /// Why the agent's own reply is missing, for the records of a fallback.
    pub mcp_reason: String,
    /// Why the reply-retry turn could not start, kept with `mcp_reason`.
    pub retry_failure: Option<String>,
    /// The detail behind the next decision (an error's text), appended to
    /// its reason in the history row.
    pub detail: Option<String>,
    /// What the task spent before this drive.
    pub usage: crate::store::turns::TaskUsage,
    /// The limit the task reached, if one stopped it.
    pub budget: Option<crate::domain::limits::LimitHit>,
    /// The author holds `gate_permission`: their input answers the
    /// workflow's gate as the owner's would.
    pub answers_for_owner: bool,
    /// Why the provider turned the task's turn away, if it did.
    pub denial: Option<CapacityDenial>,
    /// This process's holding of the repository's lease when the drive
    /// began: every write the drive makes under it is refused once another
    /// process took the lease over. `None` when no holding is recorded (a
    /// lease released or expired with nobody after it).
    pub fence: Option<Fence>,
}

/// Drives the session's oldest unsettled task as far as it goes now.
/// Returns whether the task settled, so the repository may start its next
/// one (`false` when the session had nothing to drive).
pub(super) async fn run(
    deps: Arc<ActorDeps>,
    session_key: ResourceKey,
    signals: Signals,
) -> Result<bool, DriveError> {
    let Some(mut drive) = TaskDrive::gather(deps, session_key, signals).await? else {
        return Ok(false);
    };
    let mut event = Event::Picked;
    let mut stale = 0;
    loop {
        let decision = decide::next(&drive.snap, &event);
        if !drive.commit(&decision).await? {
            stale += 1;
            if stale > MAX_STALE_IN_A_ROW {
                return Err(DriveError::Fault(format!(
                    "task {} keeps changing under the session's decisions",
                    drive.task.task_id
                )));
            }
            drive.refresh().await?;
            continue;
        }
        stale = 0;
        match drive.carry_out(&decision, event).await? {
            Some(next) => {
                drive.report_to_circuit(&next);
                event = next;
            }
            None => return Ok(!drive.snap.state.is_session_driven()),
        }
    }
}

impl TaskDrive {
    /// Tells the circuit breaker how the runtime did: a turn it ran, or one
    /// the provider or the app-server failed. A refusal of the task's own
    /// configuration and a capacity wait say nothing of the runtime.
    fn report_to_circuit(&self, event: &Event) {
        use crate::agent::circuit::Change;
        use crate::domain::breaker::Outcome;
        let outcome = match event {
            Event::TurnEnded(decide::TurnEnd::Completed) => Outcome::Success,
            Event::TurnEnded(decide::TurnEnd::Failed) if self.denial.is_none() => Outcome::Failure,
            Event::Started(decide::Start::NotAdmitted { retryable: true })
                if self.denial.is_none() =>
            {
                Outcome::Failure
            }
            _ => return,
        };
        match self.deps.settings.circuit.report(outcome) {
            Change::Opened { for_ms } => {
                crate::metrics::circuit_tripped();
                tracing::warn!(
                    task = %self.task.task_id,
                    detail = self.detail.as_deref().unwrap_or(""),
                    open_secs = for_ms / 1000,
                    "circuit open: the agent runtime failed turn after turn; no task starts until it closes (queued tasks wait and use no attempt)"
                );
            }
            Change::Closed => {
                tracing::info!("circuit closed: a turn ran again");
            }
            Change::None => {}
        }
    }

    /// Reads the session's oldest driven task and what the decisions need.
    async fn gather(
        deps: Arc<ActorDeps>,
        session_key: ResourceKey,
        signals: Signals,
    ) -> Result<Option<TaskDrive>, DriveError> {
        let key = session_key.clone();
        let found = deps
            .store
            .read(move |c| {
                let Some(task) = sessions::driven_tasks_of_session(c, &key)?
                    .into_iter()
                    .next()
                else {
                    return Ok(None);
                };
                let entry = sessions::outbox_entry(c, &task.task_id)?;
                let attempt = attempts::active_attempt(c, &task.task_id)?;
                let repo = queue::repository(c, &task.repo_key)?;
                let session = sessions::session(c, &task.session_key)?;
                // Only a task that used its reply retry has one to look up.
                let (retry_finished, retry_intended) = match &entry {
                    Some(e) if task.reply_attempt > 0 => (
                        turns::reply_retry_finished(c, &task.task_id)?,
                        ledger::find(c, &e.operation_id.reply_retry())?.is_some(),
                    ),
                    _ => (false, false),
                };
                // A continuation owes a reply only once it completed its
                // workflow.
                let owes_reply = task.continuation.is_none()
                    || crate::store::workflows::completed_by(c, &task.task_id)?;
                let usage = turns::task_usage(c, &task.task_id, task.turn_id.as_deref())?;
                let child = crate::store::workflows::children::of_task(c, &task)?;
                let lease = leases::find(c, &task.repo_key)?;
                // Judged by the clock the lease was written by.
                let clock = crate::store::shared_now(c)?;
                Ok(Some((
                    task,
                    entry,
                    attempt,
                    (repo, session, child),
                    (retry_finished, retry_intended, owes_reply),
                    (usage, lease, clock),
                )))
            })
            .await?;
        let Some((
            task,
            entry,
            attempt,
            (repo, session, child),
            (retry_finished, retry_intended, owes_reply),
            (usage, lease, clock),
        )) = found
        else {
            return Ok(None);
        };
        let fence = match lease {
            // Another process holds the repository now: its sessions drive
            // this task (and recover it by history); nothing is written here.
            Some(l) if l.is_held(&clock) && l.owner != deps.settings.owner => {
                tracing::info!(task.id = %task.task_id, holder = %l.owner, fence = l.fence, "the repository's lease is held by another process; leaving this task to it");
                return Ok(None);
            }
            Some(l) if l.released_at.is_none() && l.owner == deps.settings.owner => Some(l.fence()),
            _ => None,
        };
        let state = task.state;
        let delegated = task
            .session_key
            .child()
            .map(|_| delegated_to(child.as_ref()));
        let fork_from = child.as_ref().and_then(|w| w.forked_from_thread.clone());
        let (session_thread, thread_trust, thread_home, conversation_since) = match session {
            Some(s) => (
                s.thread_id,
                s.thread_trust,
                s.thread_home,
                s.conversation_since,
            ),
            None => (None, None, None, None),
        };
        let repo_names = repo.as_ref().map(|r| (r.owner.clone(), r.name.clone()));
        let worktree = WorktreeId::of(&task.session_key);
        let workspace = match repo
            .as_ref()
            .map(|r| deps.workspaces.worktree_for(&r.owner, &r.name, worktree))
        {
            Some(Ok(path)) => Some(path),
            Some(Err(e)) => {
                // The decisions fail the task as `workspace_unavailable`;
                // the operator reads why here.
                tracing::warn!(task.id = %task.task_id, code = e.code(), "the task's workspace cannot be named: {e}");
                None
            }
            None => None,
        };
        let policy = repo
            .as_ref()
            .map(|r| deps.settings.policy_for(&r.owner, &r.name));
        let attempt_is_ours = attempt
            .as_ref()
            .is_some_and(|a| a.driven_here(&deps.settings.owner, fence.as_ref()));
        let snap = Snapshot {
            state,
            state_version: task.state_version,
            attempt: task.attempt,
            max_attempts: deps.settings.max_attempts,
            admission: match &entry {
                None => Admission::NoEntry,
                Some(e) if e.status == OutboxStatus::Sending => Admission::Intended,
                Some(_) => Admission::NotSent,
            },
            attempt_is_ours,
            workspace_named: workspace.is_some(),
            turn_recorded: task.turn_id.is_some(),
            reply_retry: match (task.reply_attempt, retry_finished, retry_intended) {
                (0, _, _) => ReplyRetry::Unused,
                (_, false, true) => ReplyRetry::Intended,
                _ => ReplyRetry::Used,
            },
            // Read by the verification that every reply decision follows.
            fallback: None,
            final_text: false,
            // A limit's stop is stored with the move to cancel_requested: it
            // still ends the task as a budget hit after a restart.
            stopping: (task.state == crate::lifecycle::TaskState::CancelRequested
                && task.error_code.as_deref() == Some("budget_exceeded"))
            .then_some(super::decide::Stop::Budget),
            superseded: superseded(&task),
            // The thread's trust is decided again before a turn starts; a
            // task already past it replies as its thread was trusted. A
            // review's result is always posted by the bridge, and so is the
            // answer of a continuation that completed its workflow.
            reply_path: if task.command == Some(crate::domain::command::Command::Review)
                || task.continuation.is_some()
            {
                ReplyPath::BridgeViaRest
            } else {
                ReplyPath::of(thread_trust.unwrap_or(ThreadTrust::Trusted))
            },
            owes_reply,
            in_workflow: task.workflow_id.is_some(),
            denied: false,
            turns_left: usage.turns < deps.settings.limits.max_turns_per_task,
        };
        let operation_id = match &entry {
            Some(e) if task.reply_attempt > 0 => Some(e.operation_id.reply_retry()),
            Some(e) => Some(e.operation_id.clone()),
            None => None,
        };
        signals.driving(&task);
        Ok(Some(TaskDrive {
            attempt_id: attempt.map(|a| a.attempt_id).unwrap_or_default(),
            turn: Turn {
                thread_id: task.thread_id.clone(),
                turn_id: task.turn_id.clone(),
                ..Turn::default()
            },
            deps,
            signals,
            task,
            entry,
            snap,
            workspace,
            repo_names,
            thread_trust,
            policy,
            session_thread,
            thread_home,
            conversation_since,
            delegated,
            fork_from,
            operation_id,
            prompt: None,
            approval: None,
            reply_comment: None,
            mcp_reason: String::new(),
            retry_failure: None,
            detail: None,
            usage,
            budget: None,
            answers_for_owner: false,
            denial: None,
            fence,
        }))
    }

    /// Notes whether the provider turned the task's turn away for capacity
    /// (from its live end or from history): the next decision reads it.
    pub(super) fn deny(&mut self, denial: Option<CapacityDenial>) {
        self.denial = denial;
        self.snap.denied = denial.is_some();
    }

    /// Reads the task row again after a stale decision: what others changed
    /// is what the next decision is made on.
    async fn refresh(&mut self) -> Result<(), DriveError> {
        let id = self.task.task_id.clone();
        let task = self
            .deps
            .store
            .read(move |c| crate::store::tasks::find(c, &id))
            .await?
            .ok_or_else(|| DriveError::Fault(format!("task {} is gone", self.task.task_id)))?;
        self.snap.state = task.state;
        self.snap.state_version = task.state_version;
        self.snap.attempt = task.attempt;
        self.snap.turn_recorded = task.turn_id.is_some();
        self.snap.superseded = superseded(&task);
        self.task = task;
        Ok(())
    }

    /// Commits the decision: its transition by compare-and-swap on the
    /// version it was made on, with its in-commit writes. `false` when the
    /// task had changed meanwhile (audited; nothing else was written).
    async fn commit(&mut self, d: &Decision) -> Result<bool, DriveError> {
        let writes: Vec<Effect> = d.effects.iter().copied().filter(|e| e.is_write()).collect();
        if d.to.is_none() && writes.is_empty() {
            return Ok(true);
        }
        if writes.contains(&Effect::RequeueEntry) {
            // "Send now" is an operator's control, carried out by the admin
            // side; a drive never decides it.
            return Err(DriveError::Fault(
                "a session drive cannot requeue an entry".into(),
            ));
        }
        let worktree = match writes.iter().any(|w| matches!(w, Effect::RecordTurnEnd(_))) {
            true => self.worktree_state().await,
            false => None,
        };
        let ctx = CommitCtx {
            fence: self.fence.clone(),
            worktree,
            task_id: self.task.task_id.clone(),
            resource_key: self.task.resource_key.clone(),
            session_key: self.task.session_key.clone(),
            queue_id: self
                .entry
                .as_ref()
                .map(|e| e.queue_id.clone())
                .unwrap_or_default(),
            entry_operation: self.entry.as_ref().map(|e| e.operation_id.clone()),
            operation_id: self.operation_id.clone(),
            thread_id: self.turn.thread_id.clone(),
            turn_id: self.turn.turn_id.clone(),
            runner: self.turn.runner.clone(),
            final_text: self.turn.final_text.clone(),
            prompt: self.admission_prompt(d),
            last_seq: self.turn.last_seq,
            approval: self
                .approval
                .as_ref()
                .map(|a| (a.key.clone(), a.kind.clone(), a.detail.clone())),
            approval_notice: self.approval.as_ref().map(|a| {
                let mut detail = a.detail.clone();
                self.deps.settings.redactor.value(&mut detail);
                super::command::answer::approval_asked(
                    &a.kind,
                    &detail,
                    &self.deps.settings.bot_login,
                )
            }),
            reply_comment: self.reply_comment,
            by_fallback: matches!(
                self.snap.fallback,
                Some(Fallback::Posting | Fallback::Posted)
            ),
            mcp_reason: self.mcp_reason.clone(),
            retry_at: retry_at(d, &self.deps),
            workflow: self
                .deps
                .settings
                .workflows
                .then(|| super::workflow::WorkflowEnd {
                    task_id: self.task.task_id.clone(),
                    limits: self.deps.settings.workflow_limits(),
                    backoff: self.deps.settings.continuation_backoff,
                    instance_id: self.deps.settings.instance_id.clone(),
                    bot_login: self.deps.settings.bot_login.clone(),
                    budget: self.budget,
                    denial: self.denial,
                    capacity_wait: self.deps.settings.capacity_wait,
                    child_recovery: self.deps.settings.child_recovery_attempts,
                }),
            budget: self.budget,
            reason: match self.detail.take() {
                Some(detail) => format!("{}: {detail}", d.reason),
                None => d.reason.to_owned(),
            },
        };
        let decision = d.clone();
        let out = match self
            .deps
            .store
            .write(move |c| ctx.write(c, &decision))
            .await
        {
            Err(StoreError::Refused {
                code: "lease_lost",
                message,
            }) => return Err(self.lease_lost(d, message).await),
            other => other?,
        };
        match out {
            Committed::Stale { state, version } => {
                tracing::info!(task.id = %self.task.task_id, decided_on = d.expected_version, found = version, state = %state, "stale decision; deciding again from the store");
                Ok(false)
            }
            Committed::Applied {
                version,
                approval_id,
            } => {
                if let Some(to) = d.to {
                    self.snap.state = to;
                }
                self.snap.state_version = version;
                if let (Some(a), Some(id)) = (self.approval.as_mut(), approval_id) {
                    a.approval_id = Some(id);
                }
                // Settled once committed: what follows (dropping the turn's
                // event stream, say) is not the commit's cost.
                if let (Some(at), Some(TaskState::VerifyingReply)) =
                    (self.turn.ended_at.take(), d.to)
                {
                    super::super::timing::record_turn_settle(at.elapsed());
                }
                self.after_writes(&writes);
                Ok(true)
            }
        }
    }

    /// What the session's worktree holds as its turn ends, recorded with
    /// the end: the next turn must find the same. When it cannot be read,
    /// the older state stays, and the next turn (finding something else)
    /// waits for an operator rather than run on what nobody checked.
    async fn worktree_state(&self) -> Option<TreeState> {
        let (owner, name) = self.repo_names.clone()?;
        let id = WorktreeId::of(&self.task.session_key);
        let workspaces = self.deps.workspaces.clone();
        let read =
            tokio::task::spawn_blocking(move || workspaces.tree_state(&owner, &name, id)).await;
        match read {
            Ok(Ok(state)) => state,
            Ok(Err(e)) => {
                tracing::warn!(task.id = %self.task.task_id, code = e.code(), "could not read the worktree's state at the turn's end: {e}");
                None
            }
            Err(e) => {
                tracing::warn!(task.id = %self.task.task_id, "could not read the worktree's state at the turn's end: {e}");
                None
            }
        }
    }

    /// What the committed writes change in the snapshot.
    fn after_writes(&mut self, writes: &[Effect]) {
        for w in writes {
            match w {
                Effect::ReleaseIntent if self.snap.admission == Admission::Intended => {
                    self.snap.admission = Admission::NotSent
                }
                Effect::RecordAdmission(_) => {
                    self.snap.turn_recorded = true;
                    self.prompt = None;
                    self.usage.turns += 1;
                    self.snap.turns_left =
                        self.usage.turns < self.deps.settings.limits.max_turns_per_task;
                }
                Effect::RecordTurnEnd(_) => {
                    self.turn.events = None;
                    self.turn.timer = None;
                    if self.snap.reply_retry == ReplyRetry::Intended {
                        self.snap.reply_retry = ReplyRetry::Used;
                    }
                }
                Effect::BeginReplyRetry => {
                    if let Some(e) = &self.entry {
                        self.operation_id = Some(e.operation_id.reply_retry());
                    }
                    self.snap.reply_retry = ReplyRetry::Intended;
                }
                Effect::ReleaseReplyRetry => self.snap.reply_retry = ReplyRetry::Used,
                _ => {}
            }
        }
    }

    /// Carries out the decision's effects after its commit; the event the
    /// last observing effect reported, if any.
    async fn carry_out(&mut self, d: &Decision, event: Event) -> Result<Option<Event>, DriveError> {
        let mut next = None;
        for effect in d.effects.iter().copied().filter(|e| !e.is_write()) {
            next = match effect {
                Effect::CheckPermission => Some(self.check_permission().await),
                Effect::StartTurn => Some(self.start_turn().await?),
                Effect::ReadTurn => Some(self.read_turn().await?),
                Effect::AwaitApproval => Some(self.await_approval().await?),
                Effect::AnswerApproval { accept } => {
                    self.answer_approval(accept).await;
                    None
                }
                Effect::Interrupt(stop) => {
                    self.interrupt(stop).await;
                    None
                }
                Effect::ResetAgent => {
                    tracing::error!(task.id = %self.task.task_id, "interrupt not confirmed; resetting the agent runtime");
                    self.deps.runtime.reset().await;
                    None
                }
                Effect::LookUpHistory => Some(self.look_up_history().await?),
                Effect::ConfirmIdle => Some(self.confirm_idle().await?),
                Effect::VerifyReply => Some(self.verify_reply().await?),
                Effect::StartReplyRetry => Some(self.start_reply_retry().await?),
                Effect::PostRestFallback => Some(self.post_rest_fallback().await?),
                Effect::Again => Some(event),
                _ => None,
            };
        }
        Ok(next)
    }
}

/// What a child's thread may do at most: what its parent delegated, as its
/// record says; the least of all when there is no record to say it.
fn delegated_to(child: Option<&crate::store::workflows::Workflow>) -> Authority {
    use crate::domain::policy::{ApprovalPolicy, Sandbox};
    Authority {
        sandbox: child.and_then(|w| w.sandbox).unwrap_or(Sandbox::ReadOnly),
        approval: child
            .and_then(|w| w.approval_policy)
            .unwrap_or(ApprovalPolicy::Untrusted),
        gitea_write: false,
    }
}

/// Whether a newer message stopped the task (its stop's stored code).
fn superseded(task: &Task) -> bool {
    task.state == TaskState::CancelRequested
        && task.error_code.as_deref() == Some(crate::store::interrupt::SUPERSEDED)
}

/// When a task that goes to `retry_wait` runs again.
fn retry_at(d: &Decision, deps: &ActorDeps) -> Option<String> {
    let after = d.effects.iter().find_map(|e| match e {
        Effect::Retry(after) => Some(*after),
        _ => None,
    })?;
    let now = chrono::Utc::now();
    Some(format_time(match after {
        RetryAfter::Now => now,
        RetryAfter::Backoff => {
            now + chrono::Duration::from_std(deps.settings.retry_backoff)
                .unwrap_or_else(|_| chrono::Duration::seconds(30))
        }
    }))
}

/// A stored fallback row's status, as the decisions see it.
pub(super) fn fallback_status(status: CommentStatus) -> Option<Fallback> {
    match status {
        CommentStatus::Posting => Some(Fallback::Posting),
        // A verified fallback was posted: only proof of it is wanted again.
        CommentStatus::Posted | CommentStatus::Verified => Some(Fallback::Posted),
        CommentStatus::Failed => Some(Fallback::Failed),
        _ => None,
    }
}
