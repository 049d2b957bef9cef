//! The operation ledger and turn events: proof of how far one
//! message got. `sending` before the request leaves (after that, a crash means
//! reconciliation, never replay); `accepted` with the turn id when turn/start
//! answers; `sent` when Codex echoes our operation id on the user message, live
//! or in the thread's history. A late answer only changes an entry still in the
//! state it had when sending started.

use super::schema::{operation_ledger, turn_events};
use super::{now, DbConn, StoreError};
use crate::domain::{OperationId, TaskId};
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq, Eq)]
#[diesel(table_name = operation_ledger)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    pub operation_id: OperationId,
    pub task_id: TaskId,
    pub queue_id: String,
    pub attempt_id: Option<String>,
    pub status: String,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub sending_at: String,
    pub accepted_at: Option<String>,
    pub sent_at: Option<String>,
}

/// Writes `sending`. An operation is sent once: a second `sending` for the
/// same operation id is refused (only an operator's "stop and send now" may
/// send again, under a new decision).
pub fn sending(
    conn: &mut DbConn,
    operation_id: &OperationId,
    task_id: &TaskId,
    queue_id: &str,
    attempt_id: Option<&str>,
    thread_id: &str,
) -> Result<(), StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::insert_into(operation_ledger::table)
        .values((
            operation_ledger::operation_id.eq(operation_id),
            operation_ledger::task_id.eq(task_id),
            operation_ledger::queue_id.eq(queue_id),
            operation_ledger::attempt_id.eq(attempt_id),
            operation_ledger::status.eq("sending"),
            operation_ledger::thread_id.eq(thread_id),
            operation_ledger::sending_at.eq(&at),
        ))
        .on_conflict_do_nothing()
        .execute(c))?;
    if n == 0 {
        return Err(StoreError::Refused {
            code: "operation_already_sent",
            message: format!("operation {operation_id} was already sent once; it is never sent again automatically"),
        });
    }
    Ok(())
}

/// turn/start answered: the turn id and when.
pub fn accepted(
    conn: &mut DbConn,
    operation_id: &OperationId,
    turn_id: &str,
) -> Result<bool, StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        operation_ledger::table
            .filter(operation_ledger::operation_id.eq(operation_id))
            .filter(operation_ledger::status.eq("sending"))
    )
    .set((
        operation_ledger::status.eq("accepted"),
        operation_ledger::turn_id.eq(turn_id),
        operation_ledger::accepted_at.eq(&at),
    ))
    .execute(c))?;
    Ok(n == 1)
}

/// Codex recorded the user message with our operation id: delivery confirmed.
pub fn sent(
    conn: &mut DbConn,
    operation_id: &OperationId,
    turn_id: Option<&str>,
) -> Result<bool, StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| {
        let target = operation_ledger::table
            .filter(operation_ledger::operation_id.eq(operation_id))
            .filter(operation_ledger::status.ne("sent"));
        match turn_id {
            Some(turn) => diesel::update(target)
                .set((
                    operation_ledger::status.eq("sent"),
                    operation_ledger::sent_at.eq(&at),
                    operation_ledger::turn_id.eq(turn),
                ))
                .execute(c),
            None => diesel::update(target)
                .set((
                    operation_ledger::status.eq("sent"),
                    operation_ledger::sent_at.eq(&at),
                ))
                .execute(c),
        }
    })?;
    Ok(n == 1)
}

pub fn find(
    conn: &mut DbConn,
    operation_id: &OperationId,
) -> Result<Option<LedgerEntry>, StoreError> {
    Ok(with_conn!(conn, |c| operation_ledger::table
        .find(operation_id)
        .select(LedgerEntry::as_select())
        .first(c)
        .optional())?)
}

/// The task's ledger entries, oldest first.
pub fn of_task(conn: &mut DbConn, task_id: &TaskId) -> Result<Vec<LedgerEntry>, StoreError> {
    Ok(with_conn!(conn, |c| operation_ledger::table
        .filter(operation_ledger::task_id.eq(task_id))
        .order(operation_ledger::sending_at.asc())
        .select(LedgerEntry::as_select())
        .load(c))?)
}

/// Stores a turn event once: `false` when this sequence number was already applied.
pub fn record_event(
    conn: &mut DbConn,
    turn_id: &str,
    seq: i64,
    kind: &str,
) -> Result<bool, StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::insert_into(turn_events::table)
        .values((
            turn_events::turn_id.eq(turn_id),
            turn_events::seq.eq(seq),
            turn_events::kind.eq(kind),
            turn_events::at.eq(&at),
        ))
        .on_conflict_do_nothing()
        .execute(c))?;
    Ok(n == 1)
}

/// How many events of a turn are stored.
pub fn event_count(conn: &mut DbConn, turn_id: &str) -> Result<i64, StoreError> {
    Ok(with_conn!(conn, |c| turn_events::table
        .filter(turn_events::turn_id.eq(turn_id))
        .count()
        .get_result(c))?)
}
