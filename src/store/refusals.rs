//! Refused webhooks counted per kind and minute (`refusal_counts`): every
//! refusal is added here, in batches, whether or not the audit log kept a
//! sample of it.

use crate::store::schema::refusal_counts;
use crate::store::{DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;

/// Refusals of one kind in one minute.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusalCount {
    /// The audit action of the kind (`webhook.signature_rejected`, …).
    pub action: String,
    /// The minute's start, in the store's time format.
    pub minute: String,
    pub count: i64,
}

/// Adds `count` refusals of `action` to `minute`'s row.
pub fn add(conn: &mut DbConn, action: &str, minute: &str, count: i64) -> Result<(), StoreError> {
    with_conn!(conn, |c| diesel::insert_into(refusal_counts::table)
        .values((
            refusal_counts::action.eq(action),
            refusal_counts::minute.eq(minute),
            refusal_counts::count.eq(count),
        ))
        .on_conflict((refusal_counts::action, refusal_counts::minute))
        .do_update()
        .set(refusal_counts::count.eq(refusal_counts::count + count))
        .execute(c))?;
    Ok(())
}

/// The counts of minutes at or after `since`, oldest first.
pub fn since(conn: &mut DbConn, since: &str) -> Result<Vec<RefusalCount>, StoreError> {
    Ok(with_conn!(conn, |c| refusal_counts::table
        .filter(refusal_counts::minute.ge(since))
        .order((refusal_counts::minute.asc(), refusal_counts::action.asc()))
        .select((
            refusal_counts::action,
            refusal_counts::minute,
            refusal_counts::count
        ))
        .load::<RefusalCount>(c))?)
}
