//! A worker's operator reconciles one attempt the worker's journal holds as
//! uncertain (sent to Codex, no end recorded), on that worker's machine,
//! with the worker's own token: `codex-bridge reconcile TASK ATTEMPT
//! failed|succeeded --confirm-no-active-turn --server URL --token-file
//! FILE`. The task moves as the operator's own reconcile control moves it
//! (the lifecycle's `needs_reconciliation` edges, one audit row), and only
//! for an attempt this worker may speak for.

use super::{RepoName, Worker};
use crate::domain::{RepoKey, TaskId};
use crate::store::attempts::AttemptOwner;
use crate::store::audit::AuditView;
use crate::store::control::{self, ControlRequest};
use crate::store::models::Attempt;
use crate::store::schema::attempts;
use crate::store::tasks::{self, Verdict};
use crate::store::{DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;

/// Why a worker may not reconcile an attempt, before the task's own state
/// is looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Another worker took the attempt's turn: only it holds its journal.
    AnotherWorker(String),
    /// The task's repository is not one this worker was given.
    RepositoryNotAllowed,
    /// Already settled by a reconciliation (here or from the admin API).
    AlreadyReconciled(String),
}

impl Refusal {
    pub(crate) fn into_error(self, task_id: &TaskId, attempt_id: &str) -> StoreError {
        let (code, message) = match self {
            Refusal::AnotherWorker(owner) => (
                "attempt_of_another_worker",
                format!(
                    "attempt {attempt_id} of task {task_id} is owned by {owner}, not this worker: \
                     reconcile it on that worker, or from the server's admin view"
                ),
            ),
            Refusal::RepositoryNotAllowed => (
                "repository_not_allowed",
                format!(
                    "task {task_id} is on a repository this worker was not given: it cannot have \
                     run attempt {attempt_id}"
                ),
            ),
            Refusal::AlreadyReconciled(outcome) => (
                "already_reconciled",
                format!(
                    "attempt {attempt_id} of task {task_id} was already reconciled ({outcome}); \
                     the server no longer waits for it"
                ),
            ),
        };
        StoreError::Refused { code, message }
    }
}

/// Whether `worker` may settle `attempt` of a task on `repo`: a pure check
/// of who owns the attempt and what it may work on. Whether the task is
/// uncertain, and this its latest attempt, the reconcile itself checks (an
/// attempt that made its task uncertain has ended, with that reason).
pub fn may_reconcile(worker: &Worker, repo: &RepoKey, attempt: &Attempt) -> Result<(), Refusal> {
    if let Some(outcome) = attempt
        .outcome
        .as_deref()
        .filter(|o| o.starts_with("reconciled_"))
    {
        return Err(Refusal::AlreadyReconciled(outcome.to_owned()));
    }
    match attempt.owned_by() {
        Some(AttemptOwner::Worker(w)) if w != worker.worker_id => {
            return Err(Refusal::AnotherWorker(AttemptOwner::Worker(w).stored()))
        }
        // The worker that took the turn, named when its start was answered.
        Some(AttemptOwner::Worker(_)) => return Ok(()),
        // Still the server's: the answer naming the worker never arrived
        // (the worker stopped before it was delivered). The worker's
        // journal holding the turn is the evidence it ran there; a worker
        // of another repository cannot have.
        Some(AttemptOwner::Server(_)) | None => {}
    }
    let allowed = RepoName::parse(&format!("{}/{}", repo.owner(), repo.name()))
        .is_ok_and(|r| worker.repositories.contains(&r));
    if allowed {
        Ok(())
    } else {
        Err(Refusal::RepositoryNotAllowed)
    }
}

/// Settles `attempt_id` of `task_id` with `verdict`, for `worker`: the
/// admin reconcile ([`control::reconcile`]) under the worker's name, once
/// per attempt (a repeat, after a lost answer, gets the first audit event).
pub fn by_worker(
    conn: &mut DbConn,
    worker: &Worker,
    task_id: &TaskId,
    attempt_id: &str,
    verdict: Verdict,
    operator: &str,
    reason: &str,
) -> Result<AuditView, StoreError> {
    let req = ControlRequest {
        request_id: format!("{}:reconcile:{attempt_id}", worker.worker_id),
        reason: format!(
            "{reason} (by {operator} on worker {})",
            worker.name.as_str()
        ),
        actor: AttemptOwner::Worker(worker.worker_id.clone()).stored(),
    };
    let target = format!("{task_id}:{}", verdict.state());
    control::idempotent(conn, &req, "task.reconcile", target, |conn| {
        let task = tasks::find(conn, task_id)?.ok_or_else(|| {
            StoreError::NotFound(format!(
                "task {task_id}: this server has no such task (is --server the server that handed \
                 the turn to this worker?)"
            ))
        })?;
        let attempt: Attempt = with_conn!(conn, |c| attempts::table
            .filter(attempts::attempt_id.eq(attempt_id))
            .filter(attempts::task_id.eq(task_id))
            .select(Attempt::as_select())
            .first(c)
            .optional())?
        .ok_or_else(|| StoreError::NotFound(format!("attempt {attempt_id} of task {task_id}")))?;
        may_reconcile(worker, &task.repo_key, &attempt)
            .map_err(|r| r.into_error(task_id, attempt_id))?;
        control::reconcile(conn, task_id, attempt_id, verdict, &req.actor, &req.reason)
    })
}

#[cfg(test)]
mod tests;
