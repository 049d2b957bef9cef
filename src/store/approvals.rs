//! Approval records: what the agent asked to do, where and why,
//! and the decision, by whom. The task waits in `awaiting_approval` meanwhile.

use super::audit::{self, Audit, AuditView};
use super::control::{idempotent, ControlRequest};
use super::models::Approval;
use super::schema::approvals;
use super::{now, DbConn, StoreError};
use crate::domain::TaskId;
use crate::with_conn;
use diesel::prelude::*;

/// Records a pending approval for `task_id`.
pub fn create(
    conn: &mut DbConn,
    task_id: &TaskId,
    kind: &str,
    detail: &serde_json::Value,
    request_key: &str,
) -> Result<Approval, StoreError> {
    let approval = Approval {
        approval_id: crate::domain::keys::mint_with_prefix("appr-"),
        task_id: task_id.clone(),
        kind: kind.to_owned(),
        detail: detail.to_string(),
        status: "pending".into(),
        decision: None,
        decided_by: None,
        created_at: now(),
        decided_at: None,
        request_key: Some(request_key.to_owned()),
    };
    with_conn!(conn, |c| diesel::insert_into(approvals::table)
        .values((
            approvals::approval_id.eq(&approval.approval_id),
            approvals::task_id.eq(&approval.task_id),
            approvals::kind.eq(&approval.kind),
            approvals::detail.eq(&approval.detail),
            approvals::status.eq(&approval.status),
            approvals::created_at.eq(&approval.created_at),
            approvals::request_key.eq(&approval.request_key),
        ))
        .execute(c))?;
    audit::record(
        conn,
        &Audit::new("approval.requested", "system")
            .task(task_id)
            .meta(serde_json::json!({ "approvalId": approval.approval_id, "kind": kind, "detail": detail })),
    )?;
    Ok(approval)
}

pub fn find(conn: &mut DbConn, approval_id: &str) -> Result<Option<Approval>, StoreError> {
    Ok(with_conn!(conn, |c| approvals::table
        .find(approval_id)
        .select(Approval::as_select())
        .first(c)
        .optional())?)
}

/// Pending approvals, oldest first.
pub fn pending(conn: &mut DbConn) -> Result<Vec<Approval>, StoreError> {
    Ok(with_conn!(conn, |c| approvals::table
        .filter(approvals::status.eq("pending"))
        .order(approvals::created_at.asc())
        .select(Approval::as_select())
        .load(c))?)
}

/// Decides a pending approval once. A repeated `requestId` returns the first
/// result; deciding an already decided approval is refused.
pub fn decide(
    conn: &mut DbConn,
    req: &ControlRequest,
    approval_id: &str,
    accept: bool,
) -> Result<AuditView, StoreError> {
    idempotent(conn, req, "approval.decide", approval_id, |conn| {
        record_decision(
            conn,
            approval_id,
            accept,
            &req.actor,
            &req.reason,
            Some(&req.request_id),
        )
    })
}

/// Declines an approval nobody decided in time.
pub fn expire(conn: &mut DbConn, approval_id: &str) -> Result<Option<AuditView>, StoreError> {
    match record_decision(
        conn,
        approval_id,
        false,
        "system:timeout",
        "no decision in time",
        None,
    ) {
        Ok(event) => Ok(Some(event)),
        Err(StoreError::Refused {
            code: "already_decided",
            ..
        }) => Ok(None),
        Err(e) => Err(e),
    }
}

pub(super) fn record_decision(
    conn: &mut DbConn,
    approval_id: &str,
    accept: bool,
    actor: &str,
    reason: &str,
    request_id: Option<&str>,
) -> Result<AuditView, StoreError> {
    let approval = find(conn, approval_id)?
        .ok_or_else(|| StoreError::NotFound(format!("approval {approval_id}")))?;
    let decision = if accept { "accept" } else { "decline" };
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        approvals::table
            .filter(approvals::approval_id.eq(approval_id))
            .filter(approvals::status.eq("pending"))
    )
    .set((
        approvals::status.eq("decided"),
        approvals::decision.eq(decision),
        approvals::decided_by.eq(actor),
        approvals::decided_at.eq(&at),
    ))
    .execute(c))?;
    if n == 0 {
        return Err(StoreError::Refused {
            code: "already_decided",
            message: format!(
                "approval {approval_id} was already decided ({})",
                approval.decision.as_deref().unwrap_or("unknown")
            ),
        });
    }
    audit::record(
        conn,
        &Audit::new("approval.decided", actor)
            .task(&approval.task_id)
            .meta(serde_json::json!({
                "approvalId": approval_id,
                "decision": decision,
                "reason": reason,
                "requestId": request_id,
            })),
    )
}
