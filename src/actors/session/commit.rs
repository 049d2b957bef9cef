//! A drive's commit: the decision's transition by compare-and-swap on the
//! version it was made on, and the writes it implies, in one transaction.
//! Owned values only, so the writer may run it more than once.

use super::decide::{Code, Decision, Effect, TurnEnd};
use super::drive::DriveError;
use crate::agent::transcript::{ItemPhase, TranscriptItem};
use crate::domain::states::{CommentKind, CommentStatus};
use crate::domain::{OperationId, ResourceKey, TaskId};
use crate::lifecycle::TaskState;
use crate::lifecycle::TaskState as S;
use crate::store::audit::{self, Audit};
use crate::store::leases::{self, Fence};
use crate::store::tasks::TransitionOutcome;
use crate::store::{attempts, comments, ledger, transcripts, turns, StoreError};

/// What a commit needs, owned, so the writer may run it more than once.
pub(super) struct CommitCtx {
    /// The lease holding the drive writes under, checked first (see
    /// `leases::check`).
    pub(super) fence: Option<Fence>,
    pub(super) task_id: TaskId,
    pub(super) resource_key: ResourceKey,
    /// The session whose worktree the turn ran in (a child's own).
    pub(super) session_key: ResourceKey,
    pub(super) queue_id: String,
    pub(super) entry_operation: Option<OperationId>,
    pub(super) operation_id: Option<OperationId>,
    pub(super) thread_id: Option<String>,
    pub(super) turn_id: Option<String>,
    /// The remote worker that took the turn being admitted.
    pub(super) runner: Option<crate::store::workers::WorkerId>,
    pub(super) final_text: Option<String>,
    /// The prompt item an admission writes first in the turn's transcript.
    pub(super) prompt: Option<TranscriptItem>,
    pub(super) last_seq: i64,
    pub(super) approval: Option<(String, String, serde_json::Value)>,
    /// What the thread is told of an approval asked, but for its id (known
    /// only once the approval row is written): scrubbed of secrets.
    pub(super) approval_notice: Option<String>,
    pub(super) reply_comment: Option<i64>,
    pub(super) by_fallback: bool,
    /// Why the agent's own reply is missing: kept on a fallback's row.
    pub(super) mcp_reason: String,
    pub(super) retry_at: Option<String>,
    /// What the task's workflow needs when the task ends (`None`: workflows
    /// are off).
    pub(super) workflow: Option<super::workflow::WorkflowEnd>,
    /// The limit the task reached, named by its receipt.
    pub(super) budget: Option<crate::domain::limits::LimitHit>,
    pub(super) reason: String,
    /// What the session's worktree held as the turn ended (recorded with
    /// the turn's end).
    pub(super) worktree: Option<crate::domain::worktree::TreeState>,
}

pub(super) enum Committed {
    Applied {
        version: i64,
        approval_id: Option<String>,
    },
    Stale {
        state: TaskState,
        version: i64,
    },
}

impl CommitCtx {
    pub(super) fn write(
        &self,
        c: &mut crate::store::DbConn,
        d: &Decision,
    ) -> Result<Committed, StoreError> {
        if let Some(fence) = &self.fence {
            leases::check(c, fence)?;
        }
        let version = match d.to {
            Some(to) => {
                let out = attempts::decide_move(
                    c,
                    &self.task_id,
                    d.expected_version,
                    to,
                    &self.reason,
                    d.code.map(Code::as_str),
                    self.retry_at.as_deref(),
                )?;
                match out {
                    TransitionOutcome::Applied { version, .. } => version,
                    TransitionOutcome::Stale { state, version } => {
                        return self.stale(c, d, state, version)
                    }
                    TransitionOutcome::Refused { from, to, refusal } => {
                        // Audited by the store; a decision the table refuses
                        // is a defect, never something to write around.
                        return Err(StoreError::Refused {
                            code: refusal.code(),
                            message: format!(
                                "the session decided {from} -> {to} for task {}, which the lifecycle refuses",
                                self.task_id
                            ),
                        });
                    }
                }
            }
            None => match attempts::task_version(c, &self.task_id)? {
                Some((_, version)) if version == d.expected_version => version,
                Some((state, version)) => return self.stale(c, d, state, version),
                None => return Err(StoreError::NotFound(format!("task {}", self.task_id))),
            },
        };
        // A task stopped by a limit: its receipt names the limit.
        if let (Some(S::Failed), Some(Code::BudgetExceeded)) = (d.to, d.code) {
            let detail = self.budget.map(|b| b.describe()).unwrap_or_else(|| {
                "The limit reached was recorded before a restart; the task's history names it."
                    .to_owned()
            });
            comments::enqueue_receipt_detail(
                c,
                &self.task_id,
                &self.resource_key,
                S::Failed,
                &detail,
            )?;
        }
        // A task that ended moves its workflow on, in this transaction: a
        // continuation, a count, a gate or the workflow's end.
        if let (Some(w), Some(to)) = (&self.workflow, d.to) {
            if to.is_terminal() {
                super::workflow::after_end(c, w, to, d.code.map(Code::as_str))?;
            }
        }
        let mut approval_id = None;
        for effect in &d.effects {
            match effect {
                Effect::EndAttempt => {
                    let outcome = d
                        .code
                        .map(Code::as_str)
                        .or(d.to.map(TaskState::as_str))
                        .unwrap_or("ended");
                    attempts::end_attempt(c, &self.task_id, outcome)?;
                }
                Effect::ReleaseIntent => turns::release_intent(c, &self.task_id)?,
                Effect::HoldEntry => {
                    let why = d.code.map(Code::as_str).unwrap_or("held");
                    crate::store::steer::hold_before_admission(c, &self.task_id, why)?
                }
                Effect::RecordAdmission(kind) => {
                    let (thread, turn) = self.turn_ids()?;
                    turns::record_turn_admitted(
                        c,
                        &self.task_id,
                        thread,
                        turn,
                        kind.as_str(),
                        self.operation()?,
                    )?;
                    if let Some(p) = &self.prompt {
                        transcripts::record_item(c, turn, 0, ItemPhase::Completed, p)?;
                    }
                    if let Some(worker) = &self.runner {
                        attempts::taken_by_worker(c, &self.task_id, worker)?;
                    }
                }
                Effect::MarkSent => {
                    ledger::sent(c, self.operation()?, self.turn_id.as_deref())?;
                }
                Effect::RecordTurnEnd(end) => {
                    let (_, turn) = self.turn_ids()?;
                    let status = match end {
                        TurnEnd::Completed => "completed",
                        TurnEnd::Failed => "failed",
                        TurnEnd::Interrupted => "interrupted",
                    };
                    turns::record_turn_finished(
                        c,
                        turn,
                        status,
                        self.final_text.as_deref(),
                        self.last_seq,
                    )?;
                    if let Some(state) = &self.worktree {
                        crate::store::worktrees::record(c, &self.session_key, state)?;
                    }
                }
                Effect::RecordApproval => {
                    let (key, kind, detail) = self.approval.as_ref().ok_or_else(|| {
                        StoreError::Query("an approval was decided without its request".into())
                    })?;
                    let a = crate::store::approvals::create(c, &self.task_id, kind, detail, key)?;
                    if let Some(notice) = &self.approval_notice {
                        // Announced in the thread, so the people there can
                        // answer it with `/approve` or `/deny`.
                        crate::store::comments::enqueue_note(
                            c,
                            &crate::store::comments::approval_key(&self.task_id, &a.approval_id),
                            &self.task_id,
                            &self.resource_key,
                            &notice.replace(super::command::answer::APPROVAL_ID, &a.approval_id),
                        )?;
                    }
                    approval_id = Some(a.approval_id);
                }
                Effect::RecordReplyConfirmed => self.record_confirmed(c)?,
                Effect::BeginReplyRetry => {
                    if let (Some(thread), Some(op)) = (&self.thread_id, &self.entry_operation) {
                        turns::begin_reply_retry(
                            c,
                            &self.task_id,
                            &op.reply_retry(),
                            &self.queue_id,
                            thread,
                        )?;
                    }
                }
                Effect::ReleaseReplyRetry => {
                    if let Some(op) = &self.entry_operation {
                        turns::release_reply_retry(c, &op.reply_retry())?;
                    }
                }
                _ => {}
            }
        }
        Ok(Committed::Applied {
            version,
            approval_id,
        })
    }

    fn operation(&self) -> Result<&OperationId, StoreError> {
        self.operation_id.as_ref().ok_or_else(|| {
            StoreError::Query(format!(
                "task {}: a turn was recorded without the operation it carries",
                self.task_id
            ))
        })
    }

    fn turn_ids(&self) -> Result<(&str, &str), StoreError> {
        match (&self.thread_id, &self.turn_id) {
            (Some(th), Some(tu)) => Ok((th, tu)),
            _ => Err(StoreError::Query(format!(
                "task {}: a turn was recorded without its thread and turn ids",
                self.task_id
            ))),
        }
    }

    /// The decision was made on a version that is no longer the task's:
    /// audit it, write nothing else.
    fn stale(
        &self,
        c: &mut crate::store::DbConn,
        d: &Decision,
        state: TaskState,
        version: i64,
    ) -> Result<Committed, StoreError> {
        audit::record(
            c,
            &Audit::new("task.decision_stale", "system")
                .task(&self.task_id)
                .states(Some(state), d.to)
                .meta(serde_json::json!({
                    "decidedOnVersion": d.expected_version,
                    "stateVersion": version,
                    "reason": d.reason,
                })),
        )?;
        Ok(Committed::Stale { state, version })
    }

    fn record_confirmed(&self, c: &mut crate::store::DbConn) -> Result<(), StoreError> {
        let kind = if self.by_fallback {
            CommentKind::RestFallback
        } else {
            CommentKind::Reply
        };
        comments::record_reply(
            c,
            &self.task_id,
            kind,
            &self.resource_key,
            self.turn_id.as_deref(),
            CommentStatus::Verified,
            self.reply_comment,
            self.by_fallback.then_some(self.mcp_reason.as_str()),
        )?;
        audit::record(
            c,
            &Audit::new("reply.confirmed", "system")
                .task(&self.task_id)
                .comment(self.reply_comment)
                .meta(serde_json::json!({ "turnId": self.turn_id, "by": kind })),
        )?;
        Ok(())
    }
}

impl super::drive::TaskDrive {
    /// The repository's lease moved to another process while this drive
    /// ran: its decision was refused whole. Audited (outside the refused
    /// transaction) so that operators see the late write and whose token it
    /// carried; the new holder's sessions drive the task from here.
    pub(super) async fn lease_lost(&self, d: &Decision, message: String) -> DriveError {
        let fence = self.fence.clone();
        let (task_id, to) = (self.task.task_id.clone(), d.to);
        let (decided_on, owner) = (d.expected_version, self.deps.settings.owner.clone());
        let recorded = self
            .deps
            .store
            .write(move |c| {
                audit::record(
                    c,
                    &Audit::new("lease.write_refused", "system")
                        .task(&task_id)
                        .meta(serde_json::json!({
                            "owner": owner,
                            "repoKey": fence.as_ref().map(|f| &f.repo_key),
                            "leaseId": fence.as_ref().map(|f| &f.lease_id),
                            "fence": fence.as_ref().map(|f| f.token),
                            "decidedOnVersion": decided_on,
                            "to": to,
                        })),
                )
                .map(drop)
            })
            .await;
        if let Err(e) = recorded {
            tracing::warn!(task.id = %self.task.task_id, error = %e, "could not audit a write refused for a lost lease");
        }
        tracing::warn!(task.id = %self.task.task_id, "{message}");
        DriveError::Store(StoreError::Refused {
            code: "lease_lost",
            message,
        })
    }
}
