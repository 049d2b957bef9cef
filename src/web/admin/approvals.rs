//! `GET /api/gitea-workflow/approvals` (pending) and
//! `POST /api/gitea-workflow/approvals/{id}/decide` with
//! `{"decision":"accept"|"decline","requestId","reason"}`, idempotent.

use super::ControlBody;
use crate::store::approvals;
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

pub async fn pending(_: Admin, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let list = state.store.read(approvals::pending).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "approvals": list })))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecideBody {
    #[serde(flatten)]
    control: ControlBody,
    decision: Option<String>,
}

pub async fn decide(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<DecideBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    let accept = match body.decision.as_deref() {
        Some("accept") => true,
        Some("decline") => false,
        _ => {
            return Err(ApiError::bad_request(
                "invalid_decision",
                "decision must be accept or decline",
            ))
        }
    };
    let req = body.control.into_request()?;
    let id = path.into_inner();
    let a_id = id.clone();
    let event = state
        .store
        .write(move |c| approvals::decide(c, &req, &a_id, accept))
        .await?;
    wake_session(&state, id).await?;
    Ok(HttpResponse::Ok().json(event))
}

/// Tells the session that waits for this approval to read its decision now.
async fn wake_session(state: &AppState, approval_id: String) -> Result<(), ApiError> {
    let task = state
        .store
        .read(move |c| {
            let Some(a) = approvals::find(c, &approval_id)? else {
                return Ok(None);
            };
            crate::store::tasks::find(c, &a.task_id)
        })
        .await?;
    let Some(task) = task else {
        return Ok(());
    };
    // The session waiting may run in another process on the same database.
    state.store.signal(crate::store::signals::Signal::Approval {
        session_key: task.session_key.clone(),
        repo_key: task.repo_key.clone(),
        task_id: task.task_id.clone(),
    });
    if let Some(registry) = &state.registry {
        registry.do_send(crate::actors::registry::ApprovalDecided {
            session_key: task.session_key,
            repo_key: task.repo_key,
            task_id: task.task_id,
        });
    }
    Ok(())
}
