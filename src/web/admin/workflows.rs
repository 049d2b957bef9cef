//! `GET /api/gitea-workflow/workflows` (by session, paginated),
//! `/workflows/{workflowId}`, and the operator's controls: cancel a
//! workflow, answer its gate on the owner's behalf.

use super::ControlBody;
use crate::domain::{GateId, ResourceKey, WorkflowId};
use crate::store::workflows::admin::{self, GateAnswer, WorkflowFilter};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    session_key: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

pub async fn list(
    _: Admin,
    state: web::Data<AppState>,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = q.into_inner();
    let filter = WorkflowFilter {
        session_key: match q.session_key.filter(|s| !s.is_empty()) {
            Some(s) => Some(ResourceKey::parse(&s).map_err(|e| {
                ApiError::bad_request("invalid_session_key", format!("sessionKey: {e}"))
            })?),
            None => None,
        },
        cursor: super::page_cursor(q.cursor)?,
        limit: super::page_limit(q.limit)?,
    };
    let (rows, next) = state.store.read(move |c| admin::list(c, &filter)).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "workflows": rows,
        "nextCursor": next.map(|n| n.to_string()),
    })))
}

/// The workflow a request path names; anything else is the 404 of an
/// unknown workflow, with what an id looks like.
fn workflow_in_path(text: &str) -> Result<WorkflowId, ApiError> {
    WorkflowId::parse(text).map_err(|e| ApiError::NotFound(format!("workflow {text} ({e})")))
}

pub async fn show(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = workflow_in_path(&path.into_inner())?;
    let key = id.clone();
    let (detail, turns) = state
        .store
        .read(move |c| {
            let turns = crate::store::workflows::turns_of(c, &key)?;
            Ok(admin::detail(c, &key)?.map(|d| (d, turns)))
        })
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("workflow {id}")))?;
    // Usage against the limits a workflow stops at.
    let limits = state.config.workflow_limits();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "usage": {
            "turns": turns,
            "maxTurnsPerWorkflow": limits.max_turns,
            "idleFinals": detail.workflow.idle_finals,
            "workflowMaxIdleFinals": limits.max_idle_finals,
        },
        "workflow": detail.workflow,
        "children": detail.children,
        "gates": detail.gates,
        "results": detail.results,
        "turns": detail.turns,
    })))
}

pub async fn cancel(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    let id = workflow_in_path(&path.into_inner())?;
    let req = body.into_inner().into_request()?;
    let limits = state.config.workflow_limits();
    let (key, instance) = (id.clone(), state.config.instance_id.clone());
    let event = state
        .store
        .write(move |c| admin::cancel(c, &req, &key, limits, &instance))
        .await?;
    wake(&state, &id).await?;
    Ok(HttpResponse::Ok().json(event))
}

pub async fn resume_gate(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    let (workflow, gate) = path.into_inner();
    let id = workflow_in_path(&workflow)?;
    let gate_id =
        GateId::parse(&gate).map_err(|e| ApiError::NotFound(format!("gate {gate} ({e})")))?;
    let req = body.into_inner().into_request()?;
    let (instance, max_idle) = (
        state.config.instance_id.clone(),
        state.config.workflow_limits(),
    );
    let key = id.clone();
    let event = state
        .store
        .write(move |c| {
            admin::resume_gate(
                c,
                &req,
                &GateAnswer {
                    workflow_id: &key,
                    gate_id: &gate_id,
                    instance_id: &instance,
                    limits: max_idle,
                },
            )
        })
        .await?;
    wake(&state, &id).await?;
    Ok(HttpResponse::Ok().json(event))
}

/// The workflow's repository hears of the change: a continuation due now
/// starts without waiting for the sweep.
async fn wake(state: &AppState, id: &WorkflowId) -> Result<(), ApiError> {
    let key = id.clone();
    let found = state
        .store
        .read(move |c| crate::store::workflows::find(c, &key))
        .await?;
    if let Some(w) = found {
        state.wake_repo(w.session_key.repo());
    }
    Ok(())
}
