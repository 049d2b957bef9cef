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

/// A thread the session's commit records, and what it was created with.
#[derive(Debug, Clone, Copy)]
pub struct ThreadRecord<'a> {
    pub thread_id: &'a str,
    pub trust: ThreadTrust,
    /// It was started with the bridge's tools.
    pub tools: bool,
    /// The Codex home it lives in (`None`: the runtime cannot say).
    pub home: Option<&'a str>,
    /// When the conversation it carries began: `None` for a new
    /// conversation (it begins now); a thread rebuilt elsewhere goes on
    /// with its predecessor's.
    pub since: Option<&'a str>,
}

/// Stores the session's thread id once, with what it was created with. An
/// ordinary retry never replaces it: returns the id that is stored
/// afterwards.
pub fn set_thread_once(
    conn: &mut DbConn,
    session_key: &ResourceKey,
    t: &ThreadRecord<'_>,
) -> Result<String, StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(
        sessions::table
            .filter(sessions::session_key.eq(session_key))
            .filter(sessions::thread_id.is_null())
    )
    .set((
        sessions::thread_id.eq(t.thread_id),
        sessions::thread_trust.eq(Some(t.trust)),
        sessions::thread_tools.eq(t.tools),
        sessions::thread_home.eq(t.home),
        sessions::conversation_since.eq(t.since.unwrap_or(&at)),
        sessions::updated_at.eq(&at)
    ))
    .execute(c))?;
    stored_thread(conn, session_key)
}

/// Replaces the session's thread `old` by `t` (a task whose trust differs
/// from the old thread's starts a new one; a thread that lives in another
/// process's Codex home is rebuilt here), as a new generation of the
/// session. Returns the id that is stored afterwards: `t`'s, unless the
/// thread had already changed.
pub fn replace_thread(
    conn: &mut DbConn,
    session_key: &ResourceKey,
    old: &str,
    t: &ThreadRecord<'_>,
) -> Result<String, StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(
        sessions::table
            .filter(sessions::session_key.eq(session_key))
            .filter(sessions::thread_id.eq(old))
    )
    .set((
        sessions::thread_id.eq(t.thread_id),
        sessions::thread_trust.eq(Some(t.trust)),
        sessions::thread_tools.eq(t.tools),
        sessions::thread_home.eq(t.home),
        sessions::conversation_since.eq(t.since.unwrap_or(&at)),
        sessions::thread_generation.eq(sessions::thread_generation + 1),
        sessions::updated_at.eq(&at)
    ))
    .execute(c))?;
    stored_thread(conn, session_key)
}

/// One exchange of a conversation as the bridge stored it: what the
/// comment asked and the agent's final answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredExchange {
    pub asked: String,
    pub answered: String,
    pub started_at: String,
}

/// The completed turns of the conversation the session's thread `thread`
/// carries, oldest first: every normal turn of the session since
/// `since`, or, when that was not recorded, the thread's own (a turn
/// counts once it has a final answer). At most `limit`, the newest ones.
pub fn exchanges(
    conn: &mut DbConn,
    session_key: &ResourceKey,
    thread: &str,
    since: Option<&str>,
    limit: i64,
) -> Result<Vec<StoredExchange>, StoreError> {
    let mut rows: Vec<(String, Option<String>, String)> = with_conn!(conn, |c| {
        let q = turns::table
            .inner_join(tasks::table.on(tasks::task_id.eq(turns::task_id)))
            .inner_join(outbox_entries::table.on(outbox_entries::task_id.eq(turns::task_id)))
            .filter(tasks::session_key.eq(session_key))
            .filter(turns::kind.eq("normal"))
            .filter(turns::final_text.is_not_null())
            .into_boxed();
        let q = match since {
            Some(since) => q.filter(turns::started_at.ge(since)),
            None => q.filter(turns::thread_id.eq(thread)),
        };
        q.order(turns::started_at.desc())
            .limit(limit)
            .select((
                outbox_entries::user_text,
                turns::final_text,
                turns::started_at,
            ))
            .load(c)
    })?;
    rows.reverse();
    Ok(rows
        .into_iter()
        .map(|(asked, answered, started_at)| StoredExchange {
            asked,
            answered: answered.unwrap_or_default(),
            started_at,
        })
        .collect())
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
