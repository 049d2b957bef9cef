//! `GET /api/gitea-workflow/tasks/{taskId}/transcript`: what the agent did in
//! a task's turns, page by page; and `GET /api/gitea-workflow/sessions/
//! {sessionKey}/turns`: the turns of an Issue/PR's thread across its tasks.

use crate::domain::ResourceKey;
use crate::store::transcripts::{self, TranscriptCursor};
use crate::store::{sessions, tasks};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptQuery {
    turn_id: Option<String>,
    cursor: Option<String>,
    limit: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct TurnsQuery {
    cursor: Option<String>,
    limit: Option<i64>,
}

fn bad_cursor() -> ApiError {
    ApiError::bad_request(
        "invalid_cursor",
        "cursor must be a nextCursor value from a previous page",
    )
}

/// `limit` within `1..=max`, `default` when not given.
fn limit(asked: Option<i64>, default: i64, max: i64) -> Result<i64, ApiError> {
    match asked {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::bad_request(
            "invalid_limit",
            format!("limit must be between 1 and {max}"),
        )),
    }
}

/// `{"turns": [TurnTranscript], "nextCursor"}`: the task's turns in start
/// order (or only `turnId`), each with this page's items.
pub async fn task_transcript(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    q: web::Query<TranscriptQuery>,
) -> Result<HttpResponse, ApiError> {
    let task_id = super::task_in_path(&path.into_inner())?;
    let q = q.into_inner();
    let cursor = match q.cursor.filter(|s| !s.is_empty()) {
        Some(c) => TranscriptCursor::parse(&c).ok_or_else(bad_cursor)?,
        None => TranscriptCursor::START,
    };
    let limit = limit(q.limit, 100, 500)?;
    let turn_id = q.turn_id.filter(|s| !s.is_empty());
    let id = task_id.clone();
    let page = state
        .store
        .read(move |c| {
            if tasks::find(c, &id)?.is_none() {
                return Ok(None);
            }
            transcripts::task_transcript(c, &id, turn_id.as_deref(), cursor, limit).map(Some)
        })
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("task {task_id}")))?;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "turns": page.turns,
        "nextCursor": page.next.map(|c| c.to_string()),
    })))
}

/// `{"sessionKey", "threadId", "turns": [SessionTurn], "nextCursor"}`: the
/// session's turns across its tasks, oldest first.
pub async fn session_turns(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    q: web::Query<TurnsQuery>,
) -> Result<HttpResponse, ApiError> {
    let key = ResourceKey::parse(&super::actors::decode_key(&path.into_inner()))
        .map_err(|e| ApiError::bad_request("invalid_session_key", e.to_string()))?;
    let q = q.into_inner();
    let offset = match q.cursor.filter(|s| !s.is_empty()) {
        Some(c) => c
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(bad_cursor)?,
        None => 0,
    };
    let limit = limit(q.limit, 50, 200)?;
    let k = key.clone();
    let found = state
        .store
        .read(move |c| {
            let Some(session) = sessions::session(c, &k)? else {
                return Ok(None);
            };
            let (turns, next) = transcripts::session_turns(c, &k, offset, limit)?;
            Ok(Some((session.thread_id, turns, next)))
        })
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("session {key}")))?;
    let (thread_id, turns, next) = found;
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "sessionKey": key,
        "threadId": thread_id,
        "turns": turns,
        "nextCursor": next.map(|n| n.to_string()),
    })))
}
