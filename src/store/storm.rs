//! The storm guard's rows: a session that started more than
//! `session_turns_per_minute` turns in a minute is paused (its queued
//! tasks wait, with no attempt used) with one notice in its thread, until
//! an operator resumes it.

use super::audit::{self, Audit, AuditView};
use super::control::{idempotent, ControlRequest};
use super::schema::{sessions, tasks, turns};
use super::{now, DbConn, StoreError};
use crate::domain::{RepoKey, ResourceKey, TaskId};
use crate::with_conn;
use diesel::prelude::*;

/// Why the storm guard pauses a session.
pub const TURN_STORM: &str = "turn_storm";

/// The paused sessions of `repo`.
pub fn paused(conn: &mut DbConn, repo: &RepoKey) -> Result<Vec<ResourceKey>, StoreError> {
    Ok(with_conn!(conn, |c| sessions::table
        .filter(sessions::repo_key.eq(repo))
        .filter(sessions::paused_reason.is_not_null())
        .select(sessions::session_key)
        .load(c))?)
}

/// Turns the session's comments started since `since` and since it was
/// last resumed (continuations, the bridge's own, do not count).
pub fn comment_turns_since(
    conn: &mut DbConn,
    session: &ResourceKey,
    since: &str,
) -> Result<i64, StoreError> {
    let resumed: Option<String> = with_conn!(conn, |c| sessions::table
        .find(session)
        .select(sessions::resumed_at)
        .first::<Option<String>>(c)
        .optional())?
    .flatten();
    let since = match resumed {
        Some(r) if r.as_str() > since => r,
        _ => since.to_owned(),
    };
    Ok(with_conn!(conn, |c| turns::table
        .inner_join(tasks::table.on(tasks::task_id.eq(turns::task_id)))
        .filter(tasks::session_key.eq(session))
        .filter(tasks::continuation.is_null())
        .filter(turns::started_at.ge(&since))
        .count()
        .get_result(c))?)
}

/// Pauses the session unless it is paused already, with `notice` queued in
/// its thread (under `task`, the one that would have started). Whether it
/// paused it now.
pub fn pause(
    conn: &mut DbConn,
    session: &ResourceKey,
    task: &TaskId,
    turns: i64,
    limit: i64,
    notice: &str,
) -> Result<bool, StoreError> {
    let at = now();
    let changed = with_conn!(conn, |c| diesel::update(
        sessions::table
            .find(session)
            .filter(sessions::paused_reason.is_null())
    )
    .set((
        sessions::paused_reason.eq(TURN_STORM),
        sessions::paused_at.eq(&at),
    ))
    .execute(c))?;
    if changed == 0 {
        return Ok(false);
    }
    super::comments::enqueue_note(
        conn,
        &format!("{task}:session_paused:{at}"),
        task,
        session,
        notice,
    )?;
    audit::record(
        conn,
        &Audit::new("session.paused", "system")
            .task(task)
            .error(TURN_STORM)
            .meta(serde_json::json!({
                "sessionKey": session, "turnsInAMinute": turns,
                "limit": "session_turns_per_minute", "value": limit,
            })),
    )?;
    Ok(true)
}

/// An operator resumes a paused session: its queued tasks may start, and
/// only turns from now on count against it.
pub fn resume(
    conn: &mut DbConn,
    req: &ControlRequest,
    session: &ResourceKey,
) -> Result<AuditView, StoreError> {
    idempotent(conn, req, "session.resume", session.as_str(), |conn| {
        let at = now();
        let changed = with_conn!(conn, |c| diesel::update(
            sessions::table
                .find(session)
                .filter(sessions::paused_reason.is_not_null())
        )
        .set((
            sessions::paused_reason.eq(None::<String>),
            sessions::paused_at.eq(None::<String>),
            sessions::resumed_at.eq(&at),
        ))
        .execute(c))?;
        if changed == 0 {
            return Err(StoreError::Refused {
                code: "not_paused",
                message: format!("session {session} is not paused"),
            });
        }
        audit::record(
            conn,
            &Audit::new("session.resumed", &req.actor).meta(serde_json::json!({
                "sessionKey": session, "requestId": req.request_id, "reason": req.reason,
            })),
        )
    })
}
