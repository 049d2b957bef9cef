//! A session's rows as its actor reads them: the session itself and its
//! thread id, its outbox (an entry per task, and how many are open), and the
//! tasks it drives.

use super::models::{OutboxEntry, Session, Task};
use super::queue::literal;
use super::schema::{outbox_entries, sessions, tasks, turns};
use super::{now, DbConn, StoreError};
use crate::domain::states::ThreadTrust;
use crate::domain::{ResourceKey, TaskId};
use crate::with_conn;
use diesel::prelude::*;

/// The states a session actor drives, as the literal condition of the partial
/// index `tasks_session_driven` (migration 2026-12-06-000035). A query must
/// contain exactly this text for SQLite to use that index, so it is written out
/// instead of bound: `leased`, `running`, `awaiting_approval`,
/// `verifying_reply`, `cancel_requested`. A chain of `=`, not an IN list:
/// SQLite builds a temporary index of an IN list's values for every row it
/// writes into a partial index with one.
pub const SESSION_DRIVEN_STATES: &str = "(state = 'leased' OR state = 'running' \
     OR state = 'awaiting_approval' OR state = 'verifying_reply' OR state = 'cancel_requested')";

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

/// Stores the session's thread id once, with the trust it was created with.
/// An ordinary retry never replaces it: returns the id that is stored
/// afterwards.
pub fn set_thread_once(
    conn: &mut DbConn,
    session_key: &ResourceKey,
    thread_id: &str,
    trust: ThreadTrust,
    tools: bool,
) -> Result<String, StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(
        sessions::table
            .filter(sessions::session_key.eq(session_key))
            .filter(sessions::thread_id.is_null())
    )
    .set((
        sessions::thread_id.eq(thread_id),
        sessions::thread_trust.eq(Some(trust)),
        sessions::thread_tools.eq(tools),
        sessions::updated_at.eq(&at)
    ))
    .execute(c))?;
    stored_thread(conn, session_key)
}

/// Replaces the session's thread `old` by `new`, created with `trust` (a
/// task whose trust differs from the old thread's starts a new one). Returns
/// the id that is stored afterwards: `new`, unless the thread had already
/// changed.
pub fn replace_thread(
    conn: &mut DbConn,
    session_key: &ResourceKey,
    old: &str,
    new: &str,
    trust: ThreadTrust,
    tools: bool,
) -> Result<String, StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(
        sessions::table
            .filter(sessions::session_key.eq(session_key))
            .filter(sessions::thread_id.eq(old))
    )
    .set((
        sessions::thread_id.eq(new),
        sessions::thread_trust.eq(Some(trust)),
        sessions::thread_tools.eq(tools),
        sessions::thread_generation.eq(sessions::thread_generation + 1),
        sessions::updated_at.eq(&at)
    ))
    .execute(c))?;
    stored_thread(conn, session_key)
}

/// The thread the session holds after a write that may have lost a race.
fn stored_thread(conn: &mut DbConn, session_key: &ResourceKey) -> Result<String, StoreError> {
    let stored: Option<String> = with_conn!(conn, |c| sessions::table
        .find(session_key)
        .select(sessions::thread_id)
        .first(c))?;
    stored.ok_or_else(|| StoreError::Query(format!("session {session_key} has no thread")))
}

/// The outbox entry of a task: the message its session sends for it.
pub fn outbox_entry(
    conn: &mut DbConn,
    task_id: &TaskId,
) -> Result<Option<OutboxEntry>, StoreError> {
    Ok(with_conn!(conn, |c| outbox_entries::table
        .filter(outbox_entries::task_id.eq(task_id))
        .select(OutboxEntry::as_select())
        .first(c)
        .optional())?)
}

/// An outbox entry by its queue id (the admin API's name for it).
pub fn entry_by_queue_id(
    conn: &mut DbConn,
    queue_id: &str,
) -> Result<Option<OutboxEntry>, StoreError> {
    Ok(with_conn!(conn, |c| outbox_entries::table
        .filter(outbox_entries::queue_id.eq(queue_id))
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

/// When the thread's latest turn started (`None`: the thread has no turn).
pub fn last_turn_started(conn: &mut DbConn, thread_id: &str) -> Result<Option<String>, StoreError> {
    Ok(with_conn!(conn, |c| turns::table
        .filter(turns::thread_id.eq(thread_id))
        .order(turns::started_at.desc())
        .select(turns::started_at)
        .first(c)
        .optional())?)
}

/// The comments of the session's unfinished tasks other than `except`:
/// requests of their own that a turn must not act on early.
pub fn waiting_comments(
    conn: &mut DbConn,
    session_key: &ResourceKey,
    except: &TaskId,
) -> Result<Vec<i64>, StoreError> {
    let ids: Vec<Option<i64>> = with_conn!(conn, |c| tasks::table
        .filter(tasks::session_key.eq(session_key))
        .filter(tasks::task_id.ne(except))
        .filter(tasks::state.ne_all(super::tasks::TERMINAL_NAMES))
        .select(tasks::comment_id)
        .load(c))?;
    Ok(ids.into_iter().flatten().collect())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::queue::tests::listed;

    /// `SESSION_DRIVEN_STATES` is written out for SQLite's planner: every
    /// name in it must be a task state.
    #[test]
    fn session_driven_states_are_task_states() {
        for name in listed(SESSION_DRIVEN_STATES) {
            assert!(
                name.parse::<crate::lifecycle::TaskState>().is_ok(),
                "{name}"
            );
        }
    }
}
