//! Operator controls (DESIGN §11): global pause, and the idempotency of every
//! control request: a repeated `requestId` returns the first result and does
//! nothing again.

use super::audit::{self, Audit, AuditView};
use super::models::Control;
use super::schema::{control, control_requests};
use super::{now, DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;

/// Who asked for a control action, and why.
#[derive(Debug, Clone)]
pub struct ControlRequest {
    pub request_id: String,
    pub reason: String,
    /// `admin:<operator>` as it appears in audit events.
    pub actor: String,
}

pub fn get(conn: &mut DbConn) -> Result<Control, StoreError> {
    Ok(with_conn!(conn, |c| control::table
        .find(1_i64)
        .select(Control::as_select())
        .first(c))?)
}

/// Runs `apply` once per `requestId`: a repeat with the same action and target
/// returns the stored result; the same id for anything else is refused.
pub fn idempotent<F>(
    conn: &mut DbConn,
    req: &ControlRequest,
    action: &str,
    target: &str,
    apply: F,
) -> Result<AuditView, StoreError>
where
    F: FnOnce(&mut DbConn) -> Result<AuditView, StoreError>,
{
    let previous: Option<(String, String, String)> = with_conn!(conn, |c| control_requests::table
        .find(&req.request_id)
        .select((
            control_requests::action,
            control_requests::target,
            control_requests::result
        ))
        .first(c)
        .optional())?;
    if let Some((prev_action, prev_target, result)) = previous {
        if prev_action != action || prev_target != target {
            return Err(StoreError::Refused {
                code: "request_id_conflict",
                message: format!(
                    "requestId {} was already used for `{prev_action}` on `{prev_target}`; use a new requestId",
                    req.request_id
                ),
            });
        }
        let stored: serde_json::Value = serde_json::from_str(&result)
            .map_err(|e| StoreError::Query(format!("stored control result is not JSON: {e}")))?;
        return audit_view_from_json(&stored);
    }
    let event = apply(conn)?;
    let text = serde_json::to_string(&event).map_err(|e| StoreError::Query(e.to_string()))?;
    let at = now();
    with_conn!(conn, |c| diesel::insert_into(control_requests::table)
        .values((
            control_requests::request_id.eq(&req.request_id),
            control_requests::action.eq(action),
            control_requests::target.eq(target),
            control_requests::result.eq(&text),
            control_requests::created_at.eq(&at),
        ))
        .execute(c))?;
    Ok(event)
}

fn audit_view_from_json(v: &serde_json::Value) -> Result<AuditView, StoreError> {
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    Ok(AuditView {
        seq: 0,
        event_id: s("eventId")
            .ok_or_else(|| StoreError::Query("stored result has no eventId".into()))?,
        task_id: s("taskId"),
        action: s("action").unwrap_or_default(),
        actor: s("actor").unwrap_or_default(),
        from_state: s("fromState"),
        to_state: s("toState"),
        delivery_id: s("deliveryId"),
        turn_id: s("turnId"),
        comment_id: v.get("commentId").and_then(|x| x.as_i64()),
        error_code: s("errorCode"),
        timestamp: s("timestamp").unwrap_or_default(),
        metadata: v
            .get("metadata")
            .cloned()
            .unwrap_or(serde_json::Value::Null),
    })
}

/// Pauses (`paused = true`) or resumes intake scheduling. Webhooks are still
/// accepted and stored while paused; their tasks stay `queued`.
pub fn set_paused(
    conn: &mut DbConn,
    req: &ControlRequest,
    paused: bool,
) -> Result<AuditView, StoreError> {
    let action = if paused {
        "control.pause"
    } else {
        "control.resume"
    };
    idempotent(conn, req, action, "global", |conn| {
        let before = get(conn)?;
        let at = now();
        with_conn!(conn, |c| diesel::update(control::table.find(1_i64))
            .set((
                control::global_paused.eq(paused),
                control::pause_reason.eq(if paused {
                    Some(req.reason.as_str())
                } else {
                    None
                }),
                control::updated_by.eq(&req.actor),
                control::updated_at.eq(&at),
                control::version.eq(before.version + 1),
            ))
            .execute(c))?;
        audit::record(
            conn,
            &Audit::new(action, &req.actor).meta(serde_json::json!({
                "requestId": req.request_id,
                "reason": req.reason,
                "wasPaused": before.global_paused,
                "paused": paused,
                "version": before.version + 1,
            })),
        )
    })
}
