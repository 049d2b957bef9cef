//! `GET /api/gitea-workflow/tasks` (filtered, paginated) and `/tasks/{taskId}`.

use crate::lifecycle::TaskState;
use crate::store::tasks::{self, TaskFilter};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    repo_key: Option<String>,
    resource_key: Option<String>,
    state: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

pub async fn list(
    _: Admin,
    state: web::Data<AppState>,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = q.into_inner();
    let filter = TaskFilter {
        repo_key: q.repo_key.filter(|s| !s.is_empty()),
        resource_key: q.resource_key.filter(|s| !s.is_empty()),
        state: match q.state.filter(|s| !s.is_empty()) {
            Some(s) => Some(
                s.parse::<TaskState>()
                    .map_err(|e| ApiError::bad_request("invalid_state", e.to_string()))?,
            ),
            None => None,
        },
        cursor: super::page_cursor(q.cursor)?,
        limit: super::page_limit(q.limit)?,
    };
    let (rows, next) = state.store.read(move |c| tasks::list(c, &filter)).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "tasks": rows,
        "nextCursor": next.map(|n| n.to_string()),
    })))
}

pub async fn show(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let task_id = super::task_in_path(&path.into_inner())?;
    let id = task_id.clone();
    let detail = state
        .store
        .read(move |c| tasks::detail(c, &id))
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("task {task_id}")))?;
    Ok(HttpResponse::Ok().json(detail))
}
