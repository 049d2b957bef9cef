//! Reads of the admin views that span tables: the overview's counts, and the
//! live view's look at the ends of the task history and the audit log (the
//! ids there, and the rows of the ids it has not sent yet).

use super::audit::AuditView;
use super::models::{AuditEvent, Transition};
use super::schema::{audit_events, repositories, task_transitions, webhook_deliveries};
use super::{DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// What the overview counts besides tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverviewCounts {
    /// Webhook deliveries received since the time asked about, by status.
    pub webhooks_by_status: BTreeMap<String, i64>,
    /// Repositories the store knows.
    pub repositories: i64,
}

/// Deliveries received at or after `received_since` (a stored time), counted
/// by status, and the number of repositories.
pub fn overview_counts(
    conn: &mut DbConn,
    received_since: &str,
) -> Result<OverviewCounts, StoreError> {
    let (webhooks, repositories) = with_conn!(conn, |c| {
        let webhooks = webhook_deliveries::table
            .filter(webhook_deliveries::received_at.ge(received_since))
            .group_by(webhook_deliveries::status)
            .select((webhook_deliveries::status, diesel::dsl::count_star()))
            .load::<(String, i64)>(c)?;
        let repositories = repositories::table.count().get_result::<i64>(c)?;
        Ok::<_, diesel::result::Error>((webhooks, repositories))
    })?;
    Ok(OverviewCounts {
        webhooks_by_status: webhooks.into_iter().collect(),
        repositories,
    })
}

/// One id in each of the task history (`task_transitions`) and the audit log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogIds {
    pub transition: i64,
    pub audit: i64,
}

/// Ids of rows in the task history and in the audit log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogIdSets {
    pub transitions: BTreeSet<i64>,
    pub audits: BTreeSet<i64>,
}

/// The highest id of the task history and of the audit log (0 while empty).
pub fn last_log_ids(conn: &mut DbConn) -> Result<LogIds, StoreError> {
    let (transition, audit) = with_conn!(conn, |c| {
        let t: Option<i64> = task_transitions::table
            .select(diesel::dsl::max(task_transitions::id))
            .first(c)?;
        let a: Option<i64> = audit_events::table
            .select(diesel::dsl::max(audit_events::id))
            .first(c)?;
        Ok::<_, diesel::result::Error>((t.unwrap_or(0), a.unwrap_or(0)))
    })?;
    Ok(LogIds { transition, audit })
}

/// The ids of each log in the range `(above, up_to]`.
pub fn log_ids_between(
    conn: &mut DbConn,
    above: LogIds,
    up_to: LogIds,
) -> Result<LogIdSets, StoreError> {
    let (transitions, audits) = with_conn!(conn, |c| {
        let t: Vec<i64> = task_transitions::table
            .filter(task_transitions::id.gt(above.transition))
            .filter(task_transitions::id.le(up_to.transition))
            .select(task_transitions::id)
            .load(c)?;
        let a: Vec<i64> = audit_events::table
            .filter(audit_events::id.gt(above.audit))
            .filter(audit_events::id.le(up_to.audit))
            .select(audit_events::id)
            .load(c)?;
        Ok::<_, diesel::result::Error>((t, a))
    })?;
    Ok(LogIdSets {
        transitions: transitions.into_iter().collect(),
        audits: audits.into_iter().collect(),
    })
}

/// The task history's rows with these ids, in id order.
pub fn transitions_by_id(conn: &mut DbConn, ids: &[i64]) -> Result<Vec<Transition>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(with_conn!(conn, |c| task_transitions::table
        .filter(task_transitions::id.eq_any(ids))
        .order(task_transitions::id.asc())
        .select(Transition::as_select())
        .load(c))?)
}

/// The audit log's events with these ids, in id order.
pub fn audit_events_by_id(conn: &mut DbConn, ids: &[i64]) -> Result<Vec<AuditView>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<AuditEvent> = with_conn!(conn, |c| audit_events::table
        .filter(audit_events::id.eq_any(ids))
        .order(audit_events::id.asc())
        .select(AuditEvent::as_select())
        .load(c))?;
    Ok(rows.into_iter().map(AuditView::from).collect())
}
