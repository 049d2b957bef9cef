//! A task's attempts and the decisions that move it: claiming it for a lease
//! opens an attempt, the actor that runs it moves it by compare-and-swap on
//! the version it decided on, and ends the attempt with an outcome. Every
//! state change still goes through `tasks::transition`.

use super::leases::Fence;
use super::models::{Attempt, Task};
use super::schema::{attempts, tasks};
use super::tasks::{transition, TransitionOutcome, TransitionRequest};
use super::workers::WorkerId;
use super::{now, DbConn, StoreError};
use crate::domain::TaskId;
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;

/// How an attempt's `owner` text names a worker: `worker:<workerId>`.
const WORKER_OWNER: &str = "worker:";

/// Who runs an attempt. A server process opens it when its repository actor
/// claims the task; once a remote worker takes the attempt's turn it names
/// that worker, while the server process holding the repository's lease
/// still drives it (the turn's calls and events go through that server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOwner {
    /// A server process, by its `serverId`.
    Server(String),
    Worker(WorkerId),
}

impl AttemptOwner {
    /// The owner a stored text names: `worker:<workerId>`, or else a
    /// `serverId` (never of that shape: it has more parts than one id).
    pub fn parse(text: &str) -> AttemptOwner {
        match text.strip_prefix(WORKER_OWNER).and_then(WorkerId::parse) {
            Some(w) => AttemptOwner::Worker(w),
            None => AttemptOwner::Server(text.to_owned()),
        }
    }

    /// As the `owner` column keeps it.
    pub fn stored(&self) -> String {
        match self {
            AttemptOwner::Server(id) => id.clone(),
            AttemptOwner::Worker(w) => format!("{WORKER_OWNER}{w}"),
        }
    }
}

impl Attempt {
    /// Who runs it (`None`: recorded without an owner).
    pub fn owned_by(&self) -> Option<AttemptOwner> {
        self.owner.as_deref().map(AttemptOwner::parse)
    }

    /// Whether the server process `server_id`, holding `lease` on the
    /// task's repository, drives this attempt: it opened the attempt, or the
    /// attempt's turn went to a worker under that same lease. An attempt of
    /// a process that died (or lost the lease) is not driven here.
    pub fn driven_here(&self, server_id: &str, lease: Option<&Fence>) -> bool {
        match self.owned_by() {
            Some(AttemptOwner::Server(id)) => id == server_id,
            Some(AttemptOwner::Worker(_)) => {
                lease.is_some_and(|f| self.lease_id.as_deref() == Some(f.lease_id.as_str()))
            }
            None => false,
        }
    }
}

/// The worker `worker` took the turn of the task's active attempt: the
/// attempt names it as its owner from now on.
pub fn taken_by_worker(
    conn: &mut DbConn,
    task_id: &TaskId,
    worker: &WorkerId,
) -> Result<(), StoreError> {
    let attempt = active_attempt(conn, task_id)?;
    name_worker(conn, task_id, attempt, worker)
}

/// The worker `worker` was handed the call that starts the turn of
/// `attempt_id`: from then on the turn may run there, whether or not its
/// answer ever reaches the server, so the attempt names that worker (and
/// only it, or an operator, may reconcile it).
pub fn delivered_to_worker(
    conn: &mut DbConn,
    task_id: &TaskId,
    attempt_id: &str,
    worker: &WorkerId,
) -> Result<(), StoreError> {
    let attempt: Option<Attempt> = with_conn!(conn, |c| attempts::table
        .filter(attempts::attempt_id.eq(attempt_id))
        .filter(attempts::task_id.eq(task_id))
        .select(Attempt::as_select())
        .first(c)
        .optional())?;
    name_worker(conn, task_id, attempt, worker)
}

/// Names `worker` as `attempt`'s owner, audited once (a repeat changes
/// nothing).
fn name_worker(
    conn: &mut DbConn,
    task_id: &TaskId,
    attempt: Option<Attempt>,
    worker: &WorkerId,
) -> Result<(), StoreError> {
    let owner = AttemptOwner::Worker(worker.clone()).stored();
    let Some(attempt) = attempt.filter(|a| a.owner.as_deref() != Some(owner.as_str())) else {
        return Ok(());
    };
    with_conn!(conn, |c| diesel::update(
        attempts::table.filter(attempts::attempt_id.eq(&attempt.attempt_id))
    )
    .set(attempts::owner.eq(&owner))
    .execute(c))?;
    super::audit::record(
        conn,
        &super::audit::Audit::new("attempt.taken", &owner)
            .task(task_id)
            .meta(serde_json::json!({
                "attemptId": attempt.attempt_id,
                "workerId": worker,
                "previousOwner": attempt.owner,
            })),
    )?;
    Ok(())
}

/// Records a new execution attempt of a task (the identity reconciliation names).
pub fn start_attempt(
    conn: &mut DbConn,
    task_id: &TaskId,
    lease_id: Option<&str>,
    owner: Option<&str>,
) -> Result<Attempt, StoreError> {
    let number: Option<i64> = with_conn!(conn, |c| attempts::table
        .filter(attempts::task_id.eq(task_id))
        .select(diesel::dsl::max(attempts::number))
        .first(c))?;
    let attempt = Attempt {
        attempt_id: crate::domain::keys::mint_with_prefix("att-"),
        task_id: task_id.clone(),
        number: number.unwrap_or(0) + 1,
        lease_id: lease_id.map(str::to_owned),
        owner: owner.map(str::to_owned),
        status: "active".into(),
        outcome: None,
        started_at: now(),
        ended_at: None,
    };
    with_conn!(conn, |c| {
        diesel::insert_into(attempts::table)
            .values(&attempt)
            .execute(c)?;
        diesel::update(tasks::table.filter(tasks::task_id.eq(task_id)))
            .set(tasks::attempt.eq(attempt.number))
            .execute(c)
    })?;
    Ok(attempt)
}

/// Claims `task` for this lease (`queued`/`retry_wait` → `leased`) and opens a
/// new attempt. `None` when someone changed the task first.
pub fn claim(
    conn: &mut DbConn,
    task: &Task,
    lease_id: &str,
    owner: &str,
) -> Result<Option<Attempt>, StoreError> {
    if super::steer::held_or_sending(conn, &task.task_id)? {
        // Being sent into the running turn, or held for an operator.
        return Ok(None);
    }
    let out = transition(
        conn,
        &TransitionRequest {
            task_id: &task.task_id,
            to: TaskState::Leased,
            expected_version: Some(task.state_version),
            actor: owner,
            reason: Some("won the repository lease"),
            error_code: None,
        },
    )?;
    if !matches!(out, TransitionOutcome::Applied { .. }) {
        return Ok(None);
    }
    with_conn!(conn, |c| diesel::update(
        tasks::table.filter(tasks::task_id.eq(&task.task_id))
    )
    .set(tasks::lease_id.eq(lease_id))
    .execute(c))?;
    let attempt = start_attempt(conn, &task.task_id, Some(lease_id), Some(owner))?;
    Ok(Some(attempt))
}

/// Moves a task by compare-and-swap on the version the caller decided on,
/// setting `next_retry_at` when it goes to `retry_wait`.
pub fn decide_move(
    conn: &mut DbConn,
    task_id: &TaskId,
    expected_version: i64,
    to: TaskState,
    reason: &str,
    error_code: Option<&str>,
    next_retry_at: Option<&str>,
) -> Result<TransitionOutcome, StoreError> {
    let out = transition(
        conn,
        &TransitionRequest {
            task_id,
            to,
            expected_version: Some(expected_version),
            actor: "system",
            reason: Some(reason),
            error_code,
        },
    )?;
    if let (TransitionOutcome::Applied { .. }, Some(at)) = (&out, next_retry_at) {
        with_conn!(conn, |c| diesel::update(
            tasks::table.filter(tasks::task_id.eq(task_id))
        )
        .set(tasks::next_retry_at.eq(at))
        .execute(c))?;
    }
    Ok(out)
}

/// The task's state and version now, for a decision that writes without
/// moving it: `None` when the task does not exist.
pub fn task_version(
    conn: &mut DbConn,
    task_id: &TaskId,
) -> Result<Option<(TaskState, i64)>, StoreError> {
    let row: Option<(String, i64)> = with_conn!(conn, |c| tasks::table
        .filter(tasks::task_id.eq(task_id))
        .select((tasks::state, tasks::state_version))
        .first(c)
        .optional())?;
    row.map(|(state, version)| {
        state
            .parse::<TaskState>()
            .map(|s| (s, version))
            .map_err(|e| StoreError::Query(e.to_string()))
    })
    .transpose()
}

/// Ends the task's current attempt with an outcome.
pub fn end_attempt(conn: &mut DbConn, task_id: &TaskId, outcome: &str) -> Result<(), StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(
        attempts::table
            .filter(attempts::task_id.eq(task_id))
            .filter(attempts::status.eq("active"))
    )
    .set((
        attempts::status.eq("ended"),
        attempts::outcome.eq(outcome),
        attempts::ended_at.eq(&at),
    ))
    .execute(c))?;
    Ok(())
}

/// The task's active attempt.
pub fn active_attempt(conn: &mut DbConn, task_id: &TaskId) -> Result<Option<Attempt>, StoreError> {
    Ok(with_conn!(conn, |c| attempts::table
        .filter(attempts::task_id.eq(task_id))
        .filter(attempts::status.eq("active"))
        .order(attempts::number.desc())
        .select(Attempt::as_select())
        .first(c)
        .optional())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(owner: &str, lease: &str) -> Attempt {
        Attempt {
            attempt_id: "att-1".into(),
            task_id: TaskId::mint(),
            number: 1,
            lease_id: Some(lease.into()),
            owner: Some(owner.into()),
            status: "active".into(),
            outcome: None,
            started_at: now(),
            ended_at: None,
        }
    }

    fn fence(lease: &str) -> Fence {
        Fence {
            repo_key: crate::domain::RepoKey::parse("default:acme/widgets").unwrap(),
            lease_id: lease.into(),
            token: 1,
        }
    }

    #[test]
    fn an_owner_is_a_server_process_or_a_worker_and_reads_back() {
        let w = "wrk-0123456789abcdef0123456789abcdef";
        let worker = AttemptOwner::parse(&format!("worker:{w}"));
        assert_eq!(worker, AttemptOwner::Worker(WorkerId::parse(w).unwrap()));
        assert_eq!(worker.stored(), format!("worker:{w}"));
        // A server whose instance is called "worker" is still a server.
        for server in ["default:host:42:abc", "worker:host:42:abc", "worker:wrk-x"] {
            assert_eq!(
                AttemptOwner::parse(server),
                AttemptOwner::Server(server.into())
            );
            assert_eq!(AttemptOwner::parse(server).stored(), server);
        }
    }

    #[test]
    fn the_server_holding_the_lease_drives_its_workers_attempts() {
        let me = "default:host:1:aa";
        let mine = attempt(me, "lease-1");
        assert!(mine.driven_here(me, None));
        assert!(!attempt("default:host:2:bb", "lease-1").driven_here(me, Some(&fence("lease-1"))));
        let on_worker = attempt("worker:wrk-0123456789abcdef0123456789abcdef", "lease-1");
        assert!(on_worker.driven_here(me, Some(&fence("lease-1"))));
        assert!(!on_worker.driven_here(me, Some(&fence("lease-2"))));
        assert!(!on_worker.driven_here(me, None));
    }
}
