//! What runs next in a repository: its row and status, the task holding it,
//! its next runnable task in arrival order, and the repositories with work.
//! The partial-index conditions the scheduler's queries must contain as
//! written live here too.

use super::models::{Repository, Task};
use super::schema::{outbox_entries, repositories, tasks};
use super::{now, DbConn, StoreError};
use crate::domain::states::{OutboxStatus, RepoStatus};
use crate::domain::RepoKey;
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;

/// States in which a task holds its session: while one exists, no other task
/// of that session starts (uncertain and blocked ones included: an operator
/// must decide first). The session-driven ones also take one of the
/// repository's `max_parallel_turns_per_repo` places.
pub const HOLDING_STATES: [TaskState; 7] = [
    TaskState::Leased,
    TaskState::Running,
    TaskState::AwaitingApproval,
    TaskState::VerifyingReply,
    TaskState::CancelRequested,
    TaskState::NeedsReconciliation,
    TaskState::BlockedWorkspace,
];

fn names(states: &[TaskState]) -> Vec<&'static str> {
    states.iter().map(|s| s.as_str()).collect()
}

/// `queued`, as the literal condition of the partial index `tasks_queued`
/// (migration 2026-11-30-000008): SQLite uses a partial index only for a query
/// that contains its condition as written, so this is never a bound parameter.
pub const QUEUED: &str = "state = 'queued'";

/// Queued messages that stopped a run to go first, as the literal condition
/// of the partial index `outbox_send_now` (migration 2026-12-03-000017).
pub const SEND_NOW: &str = "outbox_entries.mode IN ('interrupt-running', 'replace-latest') \
     AND outbox_entries.status = 'queued'";

/// The states a repository is asked about besides `queued` (those that hold it,
/// and `retry_wait`), as the literal condition of the partial index
/// `tasks_repo_active` (migration 2026-12-06-000035), a chain of `=` as
/// `SESSION_DRIVEN_STATES` is.
pub const REPO_ACTIVE_STATES: &str = "(state = 'leased' OR state = 'running' \
     OR state = 'awaiting_approval' OR state = 'verifying_reply' OR state = 'cancel_requested' \
     OR state = 'needs_reconciliation' OR state = 'blocked_workspace' OR state = 'retry_wait')";

/// A partial index's condition, written into the query as it is (see above).
pub(super) fn literal(
    condition: &'static str,
) -> diesel::expression::SqlLiteral<diesel::sql_types::Bool> {
    diesel::dsl::sql::<diesel::sql_types::Bool>(condition)
}

pub fn repository(conn: &mut DbConn, repo_key: &RepoKey) -> Result<Option<Repository>, StoreError> {
    Ok(with_conn!(conn, |c| repositories::table
        .find(repo_key)
        .select(Repository::as_select())
        .first(c)
        .optional())?)
}

/// Sets a repository's status (`active` or `disabled`) by an operator.
pub fn set_repository_status(
    conn: &mut DbConn,
    repo_key: &RepoKey,
    status: RepoStatus,
) -> Result<Option<RepoStatus>, StoreError> {
    let before = repository(conn, repo_key)?;
    let Some(before) = before else {
        return Ok(None);
    };
    let at = now();
    with_conn!(conn, |c| diesel::update(repositories::table.find(repo_key))
        .set((
            repositories::status.eq(status),
            repositories::updated_at.eq(&at),
            repositories::version.eq(before.version + 1),
        ))
        .execute(c))?;
    Ok(Some(before.status))
}

/// Every task holding one of the repository's sessions, oldest first.
pub fn holding_tasks(conn: &mut DbConn, repo_key: &RepoKey) -> Result<Vec<Task>, StoreError> {
    Ok(with_conn!(conn, |c| tasks::table
        .filter(tasks::repo_key.eq(repo_key))
        .filter(literal(REPO_ACTIVE_STATES))
        .filter(tasks::state.eq_any(names(&HOLDING_STATES)))
        .order(tasks::id.asc())
        .select(Task::as_select())
        .load(c))?)
}

/// The repository's next runnable task in FIFO order: `queued`, or
/// `retry_wait` whose time has come, whichever arrived first, of a session
/// that no task holds (`busy`: the sessions that one does).
///
/// The queued one is the repository's first entry in `tasks_queued`, which
/// orders every queued task by arrival: the look passes over the queued tasks
/// of other repositories that arrived before it (a covering index scan, tens
/// of nanoseconds each), which is what keeps the accept from writing a page per
/// repository.
pub fn next_runnable(
    conn: &mut DbConn,
    repo_key: &RepoKey,
    busy: &std::collections::HashSet<crate::domain::ResourceKey>,
) -> Result<Option<Task>, StoreError> {
    let at = now();
    // A message that stopped its session's run goes first, once that run has
    // settled (its session is free only then).
    let send_now: Option<Task> = with_conn!(conn, |c| tasks::table
        .inner_join(outbox_entries::table.on(outbox_entries::task_id.eq(tasks::task_id)))
        .filter(literal(SEND_NOW))
        .filter(outbox_entries::auto_drain.eq(true))
        .filter(tasks::repo_key.eq(repo_key))
        .filter(tasks::state.eq(TaskState::Queued.as_str()))
        .order(outbox_entries::id.asc())
        .select(Task::as_select())
        .load::<Task>(c))?
    .into_iter()
    .find(|t| !busy.contains(&t.session_key));
    if send_now.is_some() {
        return Ok(send_now);
    }
    let (queued, retry) = with_conn!(conn, |c| {
        // A turnless command is its session's to carry out, never the
        // queue's; it waits here only for the moments until its session
        // takes it, so passing over one is rare.
        let mut after = 0_i64;
        let queued = loop {
            let next: Option<Task> = tasks::table
                .filter(literal(QUEUED))
                .filter(tasks::repo_key.eq(repo_key))
                .filter(tasks::id.gt(after))
                .order(tasks::id.asc())
                .select(Task::as_select())
                .first(c)
                .optional()?;
            let Some(t) = next else {
                break None;
            };
            // One look at its entry: what followed a command's word, and
            // whether the entry waits with auto-drain on.
            let entry: Option<(Option<String>, bool, OutboxStatus)> = outbox_entries::table
                .filter(outbox_entries::task_id.eq(&t.task_id))
                .select((
                    outbox_entries::command_argument,
                    outbox_entries::auto_drain,
                    outbox_entries::status,
                ))
                .first(c)
                .optional()?;
            let (argument, auto_drain, status) = match &entry {
                Some((a, d, s)) => (a.as_deref(), *d, *s),
                // No entry: its drive fails it as `outbox_missing`.
                None => (None, true, OutboxStatus::Queued),
            };
            // Its session's command lane answers it (a turnless command, a
            // turn command with nothing to act on); an entry held for an
            // operator (auto-drain off: a steer nothing shows the turn took,
            // a second failure before admission) or a steer being sent into
            // the running turn waits: none is the queue's to start.
            let lanes = t
                .command
                .is_some_and(|cmd| cmd.answered_by_lane(argument, t.resource_key.is_pull()));
            // A workflow's continuation waits out its backoff; the sweep
            // looks again once it is due.
            let not_yet = t.continuation.is_some()
                && t.next_retry_at
                    .as_deref()
                    .is_some_and(|due| due > at.as_str());
            let held = busy.contains(&t.session_key);
            if held || lanes || not_yet || !auto_drain || status != OutboxStatus::Queued {
                after = t.id;
                continue;
            }
            break Some(t);
        };
        let retry = tasks::table
            .filter(tasks::repo_key.eq(repo_key))
            .filter(literal(REPO_ACTIVE_STATES))
            .filter(tasks::state.eq(TaskState::RetryWait.as_str()))
            .filter(
                tasks::next_retry_at
                    .le(&at)
                    .or(tasks::next_retry_at.is_null()),
            )
            .order(tasks::id.asc())
            .select(Task::as_select())
            .load::<Task>(c)?
            .into_iter()
            .find(|t| !busy.contains(&t.session_key));
        Ok::<_, diesel::result::Error>((queued, retry))
    })?;
    Ok(match (queued, retry) {
        (Some(q), Some(r)) => Some(if r.id < q.id { r } else { q }),
        (q, r) => q.or(r),
    })
}

/// When the repository's next waiting task becomes due: the earliest
/// `next_retry_at` after now of a continuation waiting out its backoff or a
/// `retry_wait` task. The repo actor wakes itself then, so neither waits
/// for the next sweep.
pub fn next_due(conn: &mut DbConn, repo_key: &RepoKey) -> Result<Option<String>, StoreError> {
    let at = now();
    let (continuation, retry) = with_conn!(conn, |c| {
        let continuation: Option<Option<String>> = tasks::table
            .filter(literal(QUEUED))
            .filter(tasks::repo_key.eq(repo_key))
            .filter(tasks::continuation.is_not_null())
            .filter(tasks::next_retry_at.gt(&at))
            .select(diesel::dsl::min(tasks::next_retry_at))
            .first(c)
            .optional()?;
        let retry: Option<Option<String>> = tasks::table
            .filter(tasks::repo_key.eq(repo_key))
            .filter(literal(REPO_ACTIVE_STATES))
            .filter(tasks::state.eq(TaskState::RetryWait.as_str()))
            .filter(tasks::next_retry_at.gt(&at))
            .select(diesel::dsl::min(tasks::next_retry_at))
            .first(c)
            .optional()?;
        Ok::<_, diesel::result::Error>((continuation.flatten(), retry.flatten()))
    })?;
    Ok(match (continuation, retry) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// A repository with work in the store: tasks waiting (`queued` or
/// `retry_wait`), or one holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoWork {
    pub repo_key: RepoKey,
    /// Tasks waiting in the repository's queue (`queued` and `retry_wait`).
    pub queue_depth: i64,
}

/// Repositories that have work waiting or holding, with their queue depth
/// (start-up and periodic sweeps; the depth feeds the health view). One pass
/// over the queued tasks and one over the active ones, whatever the number of
/// repositories.
pub fn repos_with_work(conn: &mut DbConn) -> Result<Vec<RepoWork>, StoreError> {
    let (queued, active) = with_conn!(conn, |c| {
        let queued: Vec<(RepoKey, i64)> = tasks::table
            .filter(literal(QUEUED))
            .group_by(tasks::repo_key)
            .select((tasks::repo_key, diesel::dsl::count_star()))
            .load(c)?;
        let active: Vec<(RepoKey, TaskState)> = tasks::table
            .filter(literal(REPO_ACTIVE_STATES))
            .select((tasks::repo_key, tasks::state))
            .load(c)?;
        Ok::<_, diesel::result::Error>((queued, active))
    })?;
    let mut work: std::collections::BTreeMap<RepoKey, i64> = queued.into_iter().collect();
    for (repo_key, state) in active {
        let waiting = work.entry(repo_key).or_insert(0);
        if state == TaskState::RetryWait {
            *waiting += 1;
        }
    }
    Ok(work
        .into_iter()
        .map(|(repo_key, queue_depth)| RepoWork {
            repo_key,
            queue_depth,
        })
        .collect())
}

/// The tasks this process drives now: in a session-driven state, in a
/// repository whose lease `owner` holds. Oldest first.
pub fn driven_by(conn: &mut DbConn, owner: &str) -> Result<Vec<Task>, StoreError> {
    use super::schema::leases;
    Ok(with_conn!(conn, |c| tasks::table
        .filter(
            tasks::repo_key.eq_any(
                leases::table
                    .filter(leases::owner.eq(owner))
                    .filter(leases::released_at.is_null())
                    .select(leases::repo_key)
            )
        )
        .filter(literal(super::sessions::SESSION_DRIVEN_STATES))
        .order(tasks::id.asc())
        .select(Task::as_select())
        .load(c))?)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The names inside a literal `state IN ('a', 'b')` condition.
    pub(in crate::store) fn listed(condition: &str) -> Vec<&str> {
        condition.split('\'').skip(1).step_by(2).collect()
    }

    /// `REPO_ACTIVE_STATES` is written out for SQLite's planner; it must stay
    /// the holding states and `retry_wait`, which the scheduler asks about.
    #[test]
    fn repo_active_states_are_the_holding_ones_and_retry_wait() {
        let mut want = names(&HOLDING_STATES);
        want.push(TaskState::RetryWait.as_str());
        assert_eq!(listed(REPO_ACTIVE_STATES), want);
        assert_eq!(listed(QUEUED), [TaskState::Queued.as_str()]);
    }
}
