//! The append-only audit log: an intent before every
//! external side effect, a result after, every transition and every refusal.

use super::models::{AuditEvent, NewAuditEvent};
use super::schema::audit_events;
use super::{now, DbConn, StoreError};
use crate::domain::TaskId;
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;

/// An event to append. Build with `Audit::new(action, actor)` and the setters.
#[derive(Debug, Clone, Default)]
pub struct Audit<'a> {
    pub task_id: Option<&'a TaskId>,
    pub action: &'a str,
    pub actor: &'a str,
    pub from_state: Option<TaskState>,
    pub to_state: Option<TaskState>,
    pub delivery_id: Option<&'a str>,
    pub turn_id: Option<&'a str>,
    pub comment_id: Option<i64>,
    pub error_code: Option<&'a str>,
    pub metadata: Option<serde_json::Value>,
}

impl<'a> Audit<'a> {
    pub fn new(action: &'a str, actor: &'a str) -> Self {
        Audit {
            action,
            actor,
            ..Default::default()
        }
    }
    pub fn task(mut self, task_id: &'a TaskId) -> Self {
        self.task_id = Some(task_id);
        self
    }
    pub fn states(mut self, from: Option<TaskState>, to: Option<TaskState>) -> Self {
        self.from_state = from;
        self.to_state = to;
        self
    }
    pub fn turn(mut self, turn_id: &'a str) -> Self {
        self.turn_id = Some(turn_id);
        self
    }
    pub fn delivery(mut self, delivery_id: &'a str) -> Self {
        self.delivery_id = Some(delivery_id);
        self
    }
    pub fn comment(mut self, comment_id: Option<i64>) -> Self {
        self.comment_id = comment_id;
        self
    }
    pub fn error(mut self, code: &'a str) -> Self {
        self.error_code = Some(code);
        self
    }
    pub fn meta(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

/// An audit event as the admin API shows it; its field names are part of the
/// API and must not change.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AuditView {
    #[serde(skip)]
    pub seq: i64,
    pub event_id: String,
    pub task_id: Option<TaskId>,
    pub action: String,
    pub actor: String,
    pub from_state: Option<TaskState>,
    pub to_state: Option<TaskState>,
    pub delivery_id: Option<String>,
    pub turn_id: Option<String>,
    pub comment_id: Option<i64>,
    pub error_code: Option<String>,
    pub timestamp: String,
    pub metadata: serde_json::Value,
}

impl From<AuditEvent> for AuditView {
    fn from(e: AuditEvent) -> Self {
        AuditView {
            seq: e.id,
            event_id: e.event_id,
            task_id: e.task_id,
            action: e.action,
            actor: e.actor,
            from_state: e.from_state,
            to_state: e.to_state,
            delivery_id: e.delivery_id,
            turn_id: e.turn_id,
            comment_id: e.comment_id,
            error_code: e.error_code,
            timestamp: e.at,
            metadata: serde_json::from_str(&e.metadata).unwrap_or(serde_json::Value::Null),
        }
    }
}

/// Appends one event and returns it as stored.
pub fn record(conn: &mut DbConn, event: &Audit<'_>) -> Result<AuditView, StoreError> {
    let event_id = crate::domain::keys::mint_with_prefix("audit-");
    let at = now();
    let metadata = event
        .metadata
        .clone()
        .unwrap_or_else(|| serde_json::Value::Object(Default::default()));
    let metadata_text = metadata.to_string();
    let row = NewAuditEvent {
        event_id: &event_id,
        task_id: event.task_id,
        action: event.action,
        actor: event.actor,
        from_state: event.from_state,
        to_state: event.to_state,
        delivery_id: event.delivery_id,
        turn_id: event.turn_id,
        comment_id: event.comment_id,
        error_code: event.error_code,
        metadata: &metadata_text,
        at: &at,
    };
    with_conn!(conn, |c| diesel::insert_into(audit_events::table)
        .values(&row)
        .execute(c))?;
    Ok(AuditView {
        seq: 0,
        event_id,
        task_id: event.task_id.cloned(),
        action: event.action.to_owned(),
        actor: event.actor.to_owned(),
        from_state: event.from_state,
        to_state: event.to_state,
        delivery_id: event.delivery_id.map(str::to_owned),
        turn_id: event.turn_id.map(str::to_owned),
        comment_id: event.comment_id,
        error_code: event.error_code.map(str::to_owned),
        timestamp: at,
        metadata,
    })
}

/// Which events to list.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub task_id: Option<TaskId>,
    /// Only events at or after this stored time (RFC 3339 UTC).
    pub since: Option<String>,
    /// Only events before this stored time.
    pub until: Option<String>,
    /// Only events after this sequence number (for paging).
    pub after_seq: Option<i64>,
    pub limit: i64,
}

/// Events in the order they were written.
pub fn list(conn: &mut DbConn, filter: &AuditFilter) -> Result<Vec<AuditView>, StoreError> {
    let rows: Vec<AuditEvent> = with_conn!(conn, |c| {
        let mut q = audit_events::table
            .select(AuditEvent::as_select())
            .order(audit_events::id.asc())
            .limit(filter.limit)
            .into_boxed();
        if let Some(task) = &filter.task_id {
            q = q.filter(audit_events::task_id.eq(task));
        }
        if let Some(since) = &filter.since {
            q = q.filter(audit_events::at.ge(since));
        }
        if let Some(until) = &filter.until {
            q = q.filter(audit_events::at.lt(until));
        }
        if let Some(after) = filter.after_seq {
            q = q.filter(audit_events::id.gt(after));
        }
        q.load(c)
    })?;
    Ok(rows.into_iter().map(AuditView::from).collect())
}

/// Finds one event by its id.
pub fn find(conn: &mut DbConn, event_id: &str) -> Result<Option<AuditView>, StoreError> {
    let row: Option<AuditEvent> = with_conn!(conn, |c| audit_events::table
        .filter(audit_events::event_id.eq(event_id))
        .select(AuditEvent::as_select())
        .first(c)
        .optional())?;
    Ok(row.map(AuditView::from))
}
