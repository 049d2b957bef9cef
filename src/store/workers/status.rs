//! How each registered worker stands, for the admin view: whether it is
//! alive (by its last heartbeat, on the clock leases are judged by), and
//! which uncertain tasks wait on it (a task in `needs_reconciliation` whose
//! attempt names the worker as its owner: its journal holds that turn, and
//! an operator settles it there or on the server).

use super::{WorkerId, WorkerView};
use crate::domain::TaskId;
use crate::lifecycle::TaskState;
use crate::store::attempts::AttemptOwner;
use crate::store::schema::{attempts, tasks};
use crate::store::{shared_now, DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;

/// A worker whose last heartbeat is older than this is taken for offline
/// (it beats every 10 s).
pub const OFFLINE_AFTER: chrono::Duration = chrono::Duration::seconds(60);

/// A worker's health, worst first.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WorkerHealth {
    /// Its token is refused.
    Revoked,
    /// Uncertain tasks wait on it, or its last heartbeat said its journal
    /// holds uncertain turns: it takes no new work until they are settled.
    Uncertain,
    /// No heartbeat for [`OFFLINE_AFTER`].
    Offline,
    /// Registered, never heard from.
    NeverSeen,
    Ok,
}

/// A task waiting for an operator because its attempt ran on a worker.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UncertainTask {
    pub task_id: TaskId,
    pub attempt_id: String,
}

/// What the admin view shows of a worker (its leases aside).
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerStatus {
    #[serde(flatten)]
    pub worker: WorkerView,
    pub health: WorkerHealth,
    pub uncertain_tasks: Vec<UncertainTask>,
}

/// A worker's health at `now` (RFC 3339, the store's clock), with
/// `uncertain` tasks the server knows wait on it.
pub fn health(worker: &WorkerView, now: &str, uncertain: usize) -> WorkerHealth {
    if worker.revoked_at.is_some() {
        return WorkerHealth::Revoked;
    }
    // Either count: the worker's own holds it even when the server knows
    // of no task (a start whose answer never arrived, a task reconciled on
    // the server whose journal is not settled yet).
    if uncertain > 0 || worker.uncertain_turns.unwrap_or(0) > 0 {
        return WorkerHealth::Uncertain;
    }
    let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    match (worker.last_seen_at.as_deref().map(parse), parse(now)) {
        (None, _) => WorkerHealth::NeverSeen,
        (Some(Some(seen)), Some(now)) if now.signed_duration_since(seen) <= OFFLINE_AFTER => {
            WorkerHealth::Ok
        }
        _ => WorkerHealth::Offline,
    }
}

/// The uncertain tasks whose latest attempt a worker owns, by worker.
pub fn uncertain_tasks(conn: &mut DbConn) -> Result<Vec<(WorkerId, UncertainTask)>, StoreError> {
    // Every attempt of every uncertain task (few), latest first per task:
    // the attempt that made its task uncertain has ended, with that reason.
    let rows: Vec<(TaskId, i64, String, Option<String>)> = with_conn!(conn, |c| attempts::table
        .inner_join(tasks::table.on(tasks::task_id.eq(attempts::task_id)))
        .filter(tasks::state.eq(TaskState::NeedsReconciliation.as_str()))
        .order((attempts::task_id.asc(), attempts::number.desc()))
        .select((
            attempts::task_id,
            attempts::number,
            attempts::attempt_id,
            attempts::owner,
        ))
        .load(c))?;
    let mut found = Vec::new();
    let mut last_task: Option<TaskId> = None;
    for (task_id, _, attempt_id, owner) in rows {
        if last_task.as_ref() == Some(&task_id) {
            continue;
        }
        last_task = Some(task_id.clone());
        if let Some(AttemptOwner::Worker(w)) = owner.as_deref().map(AttemptOwner::parse) {
            found.push((
                w,
                UncertainTask {
                    task_id,
                    attempt_id,
                },
            ));
        }
    }
    Ok(found)
}

/// Every registered worker with its health and the uncertain tasks that
/// wait on it, oldest worker first.
pub fn list(conn: &mut DbConn) -> Result<Vec<WorkerStatus>, StoreError> {
    let workers = super::list(conn)?;
    let uncertain = uncertain_tasks(conn)?;
    let now = shared_now(conn)?;
    Ok(workers
        .into_iter()
        .map(|worker| {
            let uncertain_tasks: Vec<UncertainTask> = uncertain
                .iter()
                .filter(|(w, _)| *w == worker.worker_id)
                .map(|(_, t)| t.clone())
                .collect();
            WorkerStatus {
                health: health(&worker, &now, uncertain_tasks.len()),
                worker,
                uncertain_tasks,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::workers::{RepoName, WorkerName};

    fn worker(seen: Option<&str>, revoked: Option<&str>) -> WorkerView {
        WorkerView {
            worker_id: WorkerId::parse("wrk-0123456789abcdef0123456789abcdef").unwrap(),
            name: WorkerName::parse("build-1").unwrap(),
            repositories: vec![RepoName::parse("acme/widgets").unwrap()],
            created_at: "2026-12-07T06:00:00.000000Z".into(),
            revoked_at: revoked.map(str::to_owned),
            last_seen_at: seen.map(str::to_owned),
            version: None,
            uncertain_turns: None,
        }
    }

    #[test]
    fn health_says_the_worst_first() {
        let now = "2026-12-07T07:00:00.000000Z";
        let fresh = Some("2026-12-07T06:59:30.000000Z");
        let stale = Some("2026-12-07T06:58:30.000000Z");
        assert_eq!(health(&worker(fresh, None), now, 0), WorkerHealth::Ok);
        assert_eq!(health(&worker(stale, None), now, 0), WorkerHealth::Offline);
        assert_eq!(health(&worker(None, None), now, 0), WorkerHealth::NeverSeen);
        assert_eq!(
            health(&worker(fresh, None), now, 1),
            WorkerHealth::Uncertain
        );
        assert_eq!(
            health(&worker(fresh, Some(now)), now, 1),
            WorkerHealth::Revoked
        );
        assert_eq!(
            health(&worker(Some("not a time"), None), now, 0),
            WorkerHealth::Offline
        );
        let mut holding = worker(fresh, None);
        holding.uncertain_turns = Some(0);
        assert_eq!(health(&holding, now, 0), WorkerHealth::Ok);
        holding.uncertain_turns = Some(2);
        assert_eq!(
            health(&holding, now, 0),
            WorkerHealth::Uncertain,
            "its own journal's count holds it"
        );
    }
}
