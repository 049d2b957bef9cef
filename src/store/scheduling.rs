//! What the repo and session actors ask of the store: which task may run next
//! in a repository, claiming it, and recording a turn's start and end. Every
//! state change still goes through `tasks::transition`.

use super::audit::{self, Audit};
use super::models::{Attempt, OutboxEntry, Repository, Session, Task};
use super::schema::{outbox_entries, repositories, sessions, tasks, turns};
use super::tasks::{self as task_store, TransitionOutcome, TransitionRequest};
use super::{now, DbConn, StoreError};
use crate::domain::states::RepoStatus;
use crate::domain::{OperationId, RepoKey, ResourceKey};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;

/// States in which a task holds its repository: while one exists, no other
/// task of that repository starts (uncertain and blocked ones included: an
/// operator must decide first).
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

pub fn repository(conn: &mut DbConn, repo_key: &RepoKey) -> Result<Option<Repository>, StoreError> {
    Ok(with_conn!(conn, |c| repositories::table
        .find(repo_key)
        .select(Repository::as_select())
        .first(c)
        .optional())?)
}

pub fn session(
    conn: &mut DbConn,
    session_key: &ResourceKey,
) -> Result<Option<Session>, StoreError> {
    Ok(with_conn!(conn, |c| sessions::table
        .find(session_key)
        .select(Session::as_select())
        .first(c)
        .optional())?)
}

/// `queued`, as the literal condition of the partial index `tasks_queued`
/// (migration 2026-11-30-000008): SQLite uses a partial index only for a query
/// that contains its condition as written, so this is never a bound parameter.
pub const QUEUED: &str = "state = 'queued'";

/// The states a repository is asked about besides `queued` (those that hold it,
/// and `retry_wait`), as the literal condition of the partial index
/// `tasks_repo_active` (migration 2026-11-30-000008).
pub const REPO_ACTIVE_STATES: &str = "state IN ('leased', 'running', 'awaiting_approval', \
     'verifying_reply', 'cancel_requested', 'needs_reconciliation', 'blocked_workspace', \
     'retry_wait')";

/// A partial index's condition, written into the query as it is (see above).
fn literal(condition: &'static str) -> diesel::expression::SqlLiteral<diesel::sql_types::Bool> {
    diesel::dsl::sql::<diesel::sql_types::Bool>(condition)
}

/// The task currently holding the repository, if any (oldest first).
pub fn holding_task(conn: &mut DbConn, repo_key: &RepoKey) -> Result<Option<Task>, StoreError> {
    Ok(with_conn!(conn, |c| tasks::table
        .filter(tasks::repo_key.eq(repo_key))
        .filter(literal(REPO_ACTIVE_STATES))
        .filter(tasks::state.eq_any(names(&HOLDING_STATES)))
        .order(tasks::id.asc())
        .select(Task::as_select())
        .first(c)
        .optional())?)
}

/// The repository's next runnable task in FIFO order: `queued`, or
/// `retry_wait` whose time has come, whichever arrived first.
///
/// The queued one is the repository's first entry in `tasks_queued`, which
/// orders every queued task by arrival: the look passes over the queued tasks
/// of other repositories that arrived before it (a covering index scan, tens
/// of nanoseconds each), which is what keeps the accept from writing a page per
/// repository.
pub fn next_runnable(conn: &mut DbConn, repo_key: &RepoKey) -> Result<Option<Task>, StoreError> {
    let at = now();
    let (queued, retry) = with_conn!(conn, |c| {
        let queued = tasks::table
            .filter(literal(QUEUED))
            .filter(tasks::repo_key.eq(repo_key))
            .order(tasks::id.asc())
            .select(Task::as_select())
            .first(c)
            .optional()?;
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
            .first(c)
            .optional()?;
        Ok::<_, diesel::result::Error>((queued, retry))
    })?;
    Ok(match (queued, retry) {
        (Some(q), Some(r)) => Some(if r.id < q.id { r } else { q }),
        (q, r) => q.or(r),
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

/// Claims `task` for this lease (`queued`/`retry_wait` → `leased`) and opens a
/// new attempt. `None` when someone changed the task first.
pub fn claim(
    conn: &mut DbConn,
    task: &Task,
    lease_id: &str,
    owner: &str,
) -> Result<Option<Attempt>, StoreError> {
    let out = task_store::transition(
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
    let attempt = task_store::start_attempt(conn, &task.task_id, Some(lease_id), Some(owner))?;
    Ok(Some(attempt))
}

/// Moves a task, setting `next_retry_at` when it goes to `retry_wait`.
pub fn move_task(
    conn: &mut DbConn,
    task_id: &str,
    to: TaskState,
    actor: &str,
    reason: &str,
    error_code: Option<&str>,
    next_retry_at: Option<&str>,
) -> Result<TransitionOutcome, StoreError> {
    let out = task_store::transition(
        conn,
        &TransitionRequest {
            task_id,
            to,
            expected_version: None,
            actor,
            reason: Some(reason),
            error_code,
        },
    )?;
    if matches!(out, TransitionOutcome::Applied { .. }) {
        if let Some(at) = next_retry_at {
            with_conn!(conn, |c| diesel::update(
                tasks::table.filter(tasks::task_id.eq(task_id))
            )
            .set(tasks::next_retry_at.eq(at))
            .execute(c))?;
        }
    }
    Ok(out)
}

/// The states a session actor drives, as the literal condition of the partial
/// index `tasks_session_driven` (migration 2026-11-30-000006). A query must
/// contain exactly this text for SQLite to use that index, so it is written out
/// instead of bound: `leased`, `running`, `awaiting_approval`,
/// `verifying_reply`, `cancel_requested`.
pub const SESSION_DRIVEN_STATES: &str =
    "state IN ('leased', 'running', 'awaiting_approval', 'verifying_reply', 'cancel_requested')";

/// The session's tasks that hold a lease and wait for their turn, oldest first.
pub fn leased_tasks_of_session(
    conn: &mut DbConn,
    session_key: &ResourceKey,
) -> Result<Vec<Task>, StoreError> {
    Ok(with_conn!(conn, |c| tasks::table
        .filter(tasks::session_key.eq(session_key))
        .filter(literal(SESSION_DRIVEN_STATES))
        .filter(tasks::state.eq(TaskState::Leased.as_str()))
        .order(tasks::id.asc())
        .select(Task::as_select())
        .load(c))?)
}

pub fn outbox_entry(conn: &mut DbConn, task_id: &str) -> Result<Option<OutboxEntry>, StoreError> {
    Ok(with_conn!(conn, |c| outbox_entries::table
        .filter(outbox_entries::task_id.eq(task_id))
        .select(OutboxEntry::as_select())
        .first(c)
        .optional())?)
}

/// Outbox entries of a session whose task has not ended (for the health view).
pub fn outbox_depth(conn: &mut DbConn, session_key: &ResourceKey) -> Result<i64, StoreError> {
    Ok(with_conn!(conn, |c| sessions::table
        .find(session_key)
        .select(sessions::open_entries)
        .first(c)
        .optional())?
    .unwrap_or(0))
}

/// Stores the session's thread id once. An ordinary retry never replaces it:
/// returns the id that is stored afterwards.
pub fn set_thread_once(
    conn: &mut DbConn,
    session_key: &ResourceKey,
    thread_id: &str,
) -> Result<String, StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(
        sessions::table
            .filter(sessions::session_key.eq(session_key))
            .filter(sessions::thread_id.is_null())
    )
    .set((
        sessions::thread_id.eq(thread_id),
        sessions::updated_at.eq(&at)
    ))
    .execute(c))?;
    let stored: Option<String> = with_conn!(conn, |c| sessions::table
        .find(session_key)
        .select(sessions::thread_id)
        .first(c))?;
    stored.ok_or_else(|| StoreError::Query(format!("session {session_key} has no thread")))
}

/// The turn/start intent: written before the request leaves. After
/// this, a crash means reconciliation, never replay.
pub fn record_turn_intent(
    conn: &mut DbConn,
    task: &Task,
    entry: &OutboxEntry,
    thread_id: &str,
    attempt_id: &str,
) -> Result<(), StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        outbox_entries::table
            .filter(outbox_entries::queue_id.eq(&entry.queue_id))
            .filter(outbox_entries::version.eq(entry.version))
    )
    .set((
        outbox_entries::status.eq("sending"),
        outbox_entries::updated_at.eq(&at),
        outbox_entries::version.eq(entry.version + 1),
    ))
    .execute(c))?;
    if n == 0 {
        return Err(StoreError::Refused {
            code: "outbox_changed",
            message: format!("outbox entry {} changed before sending", entry.queue_id),
        });
    }
    with_conn!(conn, |c| {
        diesel::update(tasks::table.filter(tasks::task_id.eq(&task.task_id)))
            .set((tasks::thread_id.eq(thread_id), tasks::updated_at.eq(&at)))
            .execute(c)?;
        // The session's last task: the one that last reached the agent.
        diesel::update(sessions::table.find(&task.session_key))
            .set((
                sessions::last_task_id.eq(&task.task_id),
                sessions::updated_at.eq(&at),
            ))
            .execute(c)
    })?;
    super::ledger::sending(
        conn,
        &entry.operation_id,
        &task.task_id,
        &entry.queue_id,
        Some(attempt_id).filter(|a| !a.is_empty()),
        thread_id,
    )?;
    audit::record(
        conn,
        &Audit::new("turn.start_intent", "system")
            .task(&task.task_id)
            .meta(serde_json::json!({
                "threadId": thread_id,
                "operationId": entry.operation_id,
                "queueId": entry.queue_id,
                "attemptId": attempt_id,
            })),
    )?;
    Ok(())
}

/// Records an accepted turn: the ledger's `accepted`, the turns row and the
/// task's turn id. The move to `running` is the caller's decision, written in
/// the same commit.
pub fn record_turn_admitted(
    conn: &mut DbConn,
    task_id: &str,
    thread_id: &str,
    turn_id: &str,
    kind: &str,
    operation_id: &OperationId,
) -> Result<(), StoreError> {
    super::ledger::accepted(conn, operation_id, turn_id)?;
    let at = now();
    with_conn!(conn, |c| {
        diesel::insert_into(turns::table)
            .values((
                turns::turn_id.eq(turn_id),
                turns::task_id.eq(task_id),
                turns::thread_id.eq(thread_id),
                turns::kind.eq(kind),
                turns::status.eq("started"),
                turns::event_seq.eq(0_i64),
                turns::started_at.eq(&at),
            ))
            .on_conflict_do_nothing()
            .execute(c)?;
        diesel::update(tasks::table.filter(tasks::task_id.eq(task_id)))
            .set(tasks::turn_id.eq(turn_id))
            .execute(c)
    })?;
    audit::record(
        conn,
        &Audit::new("turn.started", "system")
            .task(task_id)
            .meta(serde_json::json!({ "threadId": thread_id, "turnId": turn_id, "kind": kind })),
    )?;
    Ok(())
}

/// Moves a task by compare-and-swap on the version the caller decided on,
/// setting `next_retry_at` when it goes to `retry_wait`.
pub fn decide_move(
    conn: &mut DbConn,
    task_id: &str,
    expected_version: i64,
    to: TaskState,
    reason: &str,
    error_code: Option<&str>,
    next_retry_at: Option<&str>,
) -> Result<TransitionOutcome, StoreError> {
    let out = task_store::transition(
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
    task_id: &str,
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

/// Stores how a turn ended and its final agent message (kept durably: a reply
/// can be published from it without running the model again).
pub fn record_turn_finished(
    conn: &mut DbConn,
    turn_id: &str,
    status: &str,
    final_text: Option<&str>,
    event_seq: i64,
) -> Result<(), StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(turns::table.find(turn_id))
        .set((
            turns::status.eq(status),
            turns::final_text.eq(final_text),
            turns::event_seq.eq(event_seq),
            turns::completed_at.eq(&at),
        ))
        .execute(c))?;
    Ok(())
}

/// Ends the task's current attempt with an outcome.
pub fn end_attempt(conn: &mut DbConn, task_id: &str, outcome: &str) -> Result<(), StoreError> {
    use super::schema::attempts;
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
pub fn active_attempt(conn: &mut DbConn, task_id: &str) -> Result<Option<Attempt>, StoreError> {
    use super::schema::attempts;
    Ok(with_conn!(conn, |c| attempts::table
        .filter(attempts::task_id.eq(task_id))
        .filter(attempts::status.eq("active"))
        .order(attempts::number.desc())
        .select(Attempt::as_select())
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

/// Undoes the turn/start intent when the runtime proved nothing was sent
/// (pre-admission failure): the entry is queued again, not "sending", and the
/// ledger forgets the attempt, but only while it still says `sending`.
pub fn release_intent(conn: &mut DbConn, task_id: &str) -> Result<(), StoreError> {
    use super::schema::operation_ledger;
    let at = now();
    with_conn!(conn, |c| {
        diesel::delete(
            operation_ledger::table
                .filter(operation_ledger::task_id.eq(task_id))
                .filter(operation_ledger::status.eq("sending")),
        )
        .execute(c)?;
        diesel::update(
            outbox_entries::table
                .filter(outbox_entries::task_id.eq(task_id))
                .filter(outbox_entries::status.eq("sending")),
        )
        .set((
            outbox_entries::status.eq("queued"),
            outbox_entries::updated_at.eq(&at),
            outbox_entries::version.eq(outbox_entries::version + 1),
        ))
        .execute(c)
    })?;
    Ok(())
}

/// The session's tasks that a session actor drives (leased or later, not yet
/// settled), oldest first.
pub fn driven_tasks_of_session(
    conn: &mut DbConn,
    session_key: &ResourceKey,
) -> Result<Vec<Task>, StoreError> {
    Ok(with_conn!(conn, |c| tasks::table
        .filter(tasks::session_key.eq(session_key))
        .filter(literal(SESSION_DRIVEN_STATES))
        .order(tasks::id.asc())
        .select(Task::as_select())
        .load(c))?)
}

/// One turn by id.
pub fn turn(conn: &mut DbConn, turn_id: &str) -> Result<Option<super::models::Turn>, StoreError> {
    Ok(with_conn!(conn, |c| turns::table
        .find(turn_id)
        .select(super::models::Turn::as_select())
        .first(c)
        .optional())?)
}

/// The final text of the task's own turn (not of a reply-retry turn): what a
/// reply publishes, durable since the turn ended.
pub fn original_final_text(conn: &mut DbConn, task_id: &str) -> Result<Option<String>, StoreError> {
    let text: Option<Option<String>> = with_conn!(conn, |c| turns::table
        .filter(turns::task_id.eq(task_id))
        .filter(turns::kind.eq("normal"))
        .filter(turns::final_text.is_not_null())
        .order(turns::started_at.desc())
        .select(turns::final_text)
        .first(c)
        .optional())?;
    Ok(text.flatten())
}

/// Whether the task's reply-retry turn has ended (completed, failed or interrupted).
pub fn reply_retry_finished(conn: &mut DbConn, task_id: &str) -> Result<bool, StoreError> {
    let n: i64 = with_conn!(conn, |c| turns::table
        .filter(turns::task_id.eq(task_id))
        .filter(turns::kind.eq("reply_retry"))
        .filter(turns::status.ne("started"))
        .count()
        .get_result(c))?;
    Ok(n > 0)
}

/// The intent of the task's one reply-retry turn, before its turn/start
/// leaves: `reply_attempt` goes from 0 to 1 (refused if it is not 0: there is
/// only one), and the ledger holds the new operation as `sending`.
pub fn begin_reply_retry(
    conn: &mut DbConn,
    task_id: &str,
    operation_id: &OperationId,
    queue_id: &str,
    thread_id: &str,
) -> Result<(), StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        tasks::table
            .filter(tasks::task_id.eq(task_id))
            .filter(tasks::reply_attempt.eq(0_i64))
    )
    .set((tasks::reply_attempt.eq(1_i64), tasks::updated_at.eq(&at)))
    .execute(c))?;
    if n == 0 {
        return Err(StoreError::Refused {
            code: "reply_retry_used",
            message: format!("task {task_id} already had its one reply-retry turn"),
        });
    }
    super::ledger::sending(conn, operation_id, task_id, queue_id, None, thread_id)?;
    audit::record(
        conn,
        &Audit::new("turn.start_intent", "system")
            .task(task_id)
            .meta(serde_json::json!({
                "threadId": thread_id,
                "operationId": operation_id,
                "kind": "reply_retry",
            })),
    )?;
    Ok(())
}

/// The reply-retry turn/start was not admitted: forget its intent (the
/// attempt stays used).
pub fn release_reply_retry(
    conn: &mut DbConn,
    operation_id: &OperationId,
) -> Result<(), StoreError> {
    use super::schema::operation_ledger;
    with_conn!(conn, |c| diesel::delete(
        operation_ledger::table
            .filter(operation_ledger::operation_id.eq(operation_id))
            .filter(operation_ledger::status.eq("sending")),
    )
    .execute(c))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names inside a literal `state IN ('a', 'b')` condition.
    fn listed(condition: &str) -> Vec<&str> {
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
        for name in listed(SESSION_DRIVEN_STATES) {
            assert!(name.parse::<TaskState>().is_ok(), "{name}");
        }
    }
}
