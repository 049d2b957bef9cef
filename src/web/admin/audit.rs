//! `GET /api/gitea-workflow/audit?taskId=&since=&limit=&cursor=`: the append-only log.

use crate::domain::TaskId;
use crate::store::audit::{self, AuditFilter};
use crate::store::normalize_time;
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditQuery {
    task_id: Option<String>,
    since: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

pub async fn list(
    _: Admin,
    state: web::Data<AppState>,
    q: web::Query<AuditQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = q.into_inner();
    let limit = match q.limit {
        Some(n) if (1..=1000).contains(&n) => n,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_limit",
                "limit must be between 1 and 1000",
            ))
        }
        None => 200,
    };
    // No event names a text that is not a task id: it gets the empty page of
    // an unknown task (once the other parameters are checked).
    let (task_id, names_no_task) = match q.task_id.filter(|s| !s.is_empty()) {
        Some(text) => match TaskId::parse(&text) {
            Ok(id) => (Some(id), false),
            Err(_) => (None, true),
        },
        None => (None, false),
    };
    let filter = AuditFilter {
        task_id,
        since: match q.since.filter(|s| !s.is_empty()) {
            Some(s) => Some(normalize_time(&s).ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_since",
                    "since must be an RFC 3339 time, e.g. 2026-11-30T12:00:00Z",
                )
            })?),
            None => None,
        },
        after_seq: match q.cursor.filter(|s| !s.is_empty()) {
            Some(c) => Some(c.parse().map_err(|_| {
                ApiError::bad_request(
                    "invalid_cursor",
                    "cursor must be a nextCursor value from a previous page",
                )
            })?),
            None => None,
        },
        until: None,
        limit,
    };
    let events = if names_no_task {
        Vec::new()
    } else {
        state.store.read(move |c| audit::list(c, &filter)).await?
    };
    let next = if events.len() as i64 == limit {
        events.last().map(|e| e.seq.to_string())
    } else {
        None
    };
    Ok(HttpResponse::Ok().json(serde_json::json!({ "events": events, "nextCursor": next })))
}
