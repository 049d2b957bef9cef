//! `/api/gitea-workflow/*`: one file per resource.

pub(crate) mod actors;
mod approvals;
mod audit;
mod codex;
mod control;
mod hooks;
mod instances;
pub(crate) mod overview;
pub(crate) mod stats;
mod tasks;
mod transcripts;
mod workers;
mod workflows;

use crate::domain::TaskId;
use crate::web::error::ApiError;
use actix_web::web;
use serde::Deserialize;

pub fn config(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/api/gitea-workflow")
            .route("/overview", web::get().to(overview::get))
            .route("/stats", web::get().to(stats::get))
            .route("/tasks", web::get().to(tasks::list))
            .route("/tasks/{task_id}", web::get().to(tasks::show))
            .route(
                "/tasks/{task_id}/transcript",
                web::get().to(transcripts::task_transcript),
            )
            .route(
                "/sessions/{session_key:.+}/turns",
                web::get().to(transcripts::session_turns),
            )
            .route(
                "/sessions/{session_key:.+}/resume",
                web::post().to(actors::resume_session),
            )
            .route("/audit", web::get().to(audit::list))
            .route("/control/pause", web::post().to(control::pause))
            .route("/control/resume", web::post().to(control::resume))
            .route("/actors", web::get().to(actors::tree))
            .route("/approvals", web::get().to(approvals::pending))
            .route(
                "/approvals/{approval_id}/decide",
                web::post().to(approvals::decide),
            )
            .route("/repos/{repo_key:.+}/hook", web::get().to(hooks::show))
            .route(
                "/repos/{repo_key:.+}/disable",
                web::post().to(actors::disable_repo),
            )
            .route(
                "/repos/{repo_key:.+}/enable",
                web::post().to(actors::enable_repo),
            )
            .route("/tasks/{task_id}/cancel", web::post().to(actors::cancel))
            .route(
                "/outbox/{queue_id}/drop",
                web::post().to(actors::drop_entry),
            )
            .route(
                "/outbox/{queue_id}/send-now",
                web::post().to(actors::send_now),
            )
            .route("/tasks/{task_id}/abort", web::post().to(actors::abort))
            .route(
                "/tasks/{task_id}/reconcile",
                web::post().to(actors::reconcile),
            )
            .route(
                "/tasks/{task_id}/clear-workspace",
                web::post().to(actors::clear_workspace),
            )
            .route("/workflows", web::get().to(workflows::list))
            .route("/workflows/{workflow_id}", web::get().to(workflows::show))
            .route(
                "/workflows/{workflow_id}/cancel",
                web::post().to(workflows::cancel),
            )
            .route(
                "/workflows/{workflow_id}/gates/{gate_id}/resume",
                web::post().to(workflows::resume_gate),
            )
            .route("/codex", web::get().to(codex::account))
            .route("/codex/account", web::get().to(codex::account))
            .route("/codex/login", web::post().to(codex::login))
            .route(
                "/codex/login/{login_id}",
                web::get().to(codex::login_status),
            )
            .route("/codex/logout", web::post().to(codex::logout))
            .route("/instances", web::get().to(instances::list))
            .route(
                "/instances/{server_id}/drain",
                web::post().to(instances::drain),
            )
            .route("/workers", web::post().to(workers::create))
            .route("/workers", web::get().to(workers::list))
            .route(
                "/workers/{worker_id}/revoke",
                web::post().to(workers::revoke),
            )
            .route("/events", web::get().to(super::live::events)),
    );
}

/// A list's `cursor`: the `nextCursor` of the previous page (none: the
/// first page).
fn page_cursor(cursor: Option<String>) -> Result<Option<i64>, ApiError> {
    match cursor.filter(|s| !s.is_empty()) {
        Some(c) => c.parse::<i64>().map(Some).map_err(|_| {
            ApiError::bad_request(
                "invalid_cursor",
                "cursor must be a nextCursor value from a previous page",
            )
        }),
        None => Ok(None),
    }
}

/// A list's `limit`: 1 to 500 rows, 50 when not given.
fn page_limit(limit: Option<i64>) -> Result<i64, ApiError> {
    match limit {
        Some(n) if (1..=500).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::bad_request(
            "invalid_limit",
            "limit must be between 1 and 500",
        )),
        None => Ok(50),
    }
}

/// The task a request path names. A text that is not a task id names no task:
/// it gets the 404 of an unknown task, with what a task id looks like.
fn task_in_path(text: &str) -> Result<TaskId, ApiError> {
    TaskId::parse(text).map_err(|e| ApiError::NotFound(format!("task {text} ({e})")))
}

/// The body every control request carries: its `requestId` makes a repeated
/// request return the first result instead of acting again.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlBody {
    pub request_id: Option<String>,
    pub reason: Option<String>,
    /// Who is acting (shown as `admin:<operator>` in the audit log).
    pub operator: Option<String>,
}

impl ControlBody {
    /// Validates the body into a store request.
    pub fn into_request(self) -> Result<crate::store::control::ControlRequest, ApiError> {
        let request_id = self
            .request_id
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty() && s.len() <= 128)
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_request_id",
                    "requestId is required (1-128 characters); reuse it to retry safely",
                )
            })?;
        let reason = self
            .reason
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty() && s.len() <= 2000)
            .ok_or_else(|| {
                ApiError::bad_request("invalid_reason", "reason is required (1-2000 characters)")
            })?;
        Ok(crate::store::control::ControlRequest {
            request_id,
            reason,
            actor: actor_of(self.operator)?,
        })
    }
}

/// Who is acting, as the audit log names them: `admin:<operator>`, or
/// `admin:admin` when no operator is given.
fn actor_of(operator: Option<String>) -> Result<String, ApiError> {
    let operator = operator
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "admin".into());
    if operator.len() > 64
        || !operator
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
    {
        return Err(ApiError::bad_request(
            "invalid_operator",
            "operator: at most 64 letters, digits or -_.@",
        ));
    }
    Ok(format!("admin:{operator}"))
}
