//! Retention's deletions, in bounded batches so that a long backlog never
//! holds the writer for long; what may go is decided by
//! `domain::retention::cutoffs`, whose notes say what stays and why.

use super::schema::{
    refusal_counts, server_instances, tasks, turn_events, turns, webhook_deliveries,
};
use super::{DbConn, StoreError};
use crate::domain::request::CATCHUP_DELIVERY_PREFIX;
use crate::with_conn;
use diesel::dsl::{exists, not};
use diesel::prelude::*;

/// Deletes up to `limit` deliveries received before `before` that no task
/// was made from, that claim no content key and that the catch-up did not
/// make; how many.
pub fn prune_deliveries(conn: &mut DbConn, before: &str, limit: i64) -> Result<usize, StoreError> {
    let catchup_ids = format!("{CATCHUP_DELIVERY_PREFIX}%");
    Ok(with_conn!(conn, |c| {
        // A delivery a task was made from names that task (and the task names
        // it back); a duplicate or an edit names another delivery's task.
        let unreferenced = || {
            not(exists(
                tasks::table
                    .filter(tasks::task_id.nullable().eq(webhook_deliveries::task_id))
                    .filter(tasks::delivery_key.eq(webhook_deliveries::delivery_key)),
            ))
        };
        let keys: Vec<String> = webhook_deliveries::table
            .filter(webhook_deliveries::received_at.lt(before))
            .filter(webhook_deliveries::content_key.is_null())
            .filter(not(
                webhook_deliveries::delivery_id.like(catchup_ids.as_str())
            ))
            .filter(unreferenced())
            .select(webhook_deliveries::delivery_key)
            .limit(limit)
            .load(c)?;
        if keys.is_empty() {
            return Ok(0);
        }
        diesel::delete(
            webhook_deliveries::table
                .filter(webhook_deliveries::delivery_key.eq_any(&keys))
                .filter(unreferenced()),
        )
        .execute(c)
    })?)
}

/// Deletes the events of up to `limit` turns that completed before `before`
/// and whose task ended; how many events.
pub fn compact_turn_events(
    conn: &mut DbConn,
    before: &str,
    limit: i64,
) -> Result<usize, StoreError> {
    let ended = super::tasks::TERMINAL_NAMES;
    Ok(with_conn!(conn, |c| {
        let ids: Vec<String> = turns::table
            .filter(turns::completed_at.lt(before))
            .filter(exists(
                turn_events::table.filter(turn_events::turn_id.eq(turns::turn_id)),
            ))
            .filter(exists(
                tasks::table
                    .filter(tasks::task_id.eq(turns::task_id))
                    .filter(tasks::state.eq_any(ended)),
            ))
            .select(turns::turn_id)
            .limit(limit)
            .load(c)?;
        if ids.is_empty() {
            return Ok(0);
        }
        diesel::delete(turn_events::table.filter(turn_events::turn_id.eq_any(&ids))).execute(c)
    })?)
}

/// Deletes the refusal counts of minutes before `before`; how many rows.
pub fn prune_refusal_counts(conn: &mut DbConn, before: &str) -> Result<usize, StoreError> {
    Ok(with_conn!(conn, |c| diesel::delete(
        refusal_counts::table.filter(refusal_counts::minute.lt(before))
    )
    .execute(c))?)
}

/// Deletes the rows of server processes that stopped before `before`, or
/// that last beat before it without saying they stopped (they died, and
/// nothing of theirs can still hold a lease): one row is written per start,
/// so the instances view would otherwise list every start for ever. How
/// many.
pub fn prune_instances(conn: &mut DbConn, before: &str) -> Result<usize, StoreError> {
    Ok(with_conn!(conn, |c| diesel::delete(
        server_instances::table.filter(
            server_instances::stopped_at
                .lt(before)
                .or(server_instances::heartbeat_at.lt(before))
        )
    )
    .execute(c))?)
}
