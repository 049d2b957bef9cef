//! `POST /api/gitea-workflow/control/pause` and `/resume`: `{"requestId","reason"}`,
//! idempotent on requestId; the answer is the resulting audit event.

use super::ControlBody;
use crate::store::control;
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};

pub async fn pause(
    _: Admin,
    state: web::Data<AppState>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    set(state, body.into_inner(), true).await
}

pub async fn resume(
    _: Admin,
    state: web::Data<AppState>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    set(state, body.into_inner(), false).await
}

async fn set(
    state: web::Data<AppState>,
    body: ControlBody,
    paused: bool,
) -> Result<HttpResponse, ApiError> {
    let req = body.into_request()?;
    let event = state
        .store
        .write(move |c| control::set_paused(c, &req, paused))
        .await?;
    if !paused {
        // Queued work everywhere may start now, in every process.
        state.wake_everything();
    }
    Ok(HttpResponse::Ok().json(event))
}
