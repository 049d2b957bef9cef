//! `POST /api/worker/v1/heartbeat` with `{"version"}`: the worker is alive
//! and runs that version. Answers `{"workerId", "repositories"}`: who the
//! token says it is and what it may work on, so a worker started with the
//! wrong token file finds out at once.

use super::WorkerAuth;
use crate::store::workers::{self, WorkerVersion};
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct Beat {
    version: Option<String>,
}

pub async fn beat(
    WorkerAuth(worker): WorkerAuth,
    state: web::Data<AppState>,
    body: web::Json<Beat>,
) -> Result<HttpResponse, ApiError> {
    let version = WorkerVersion::parse(body.version.as_deref().unwrap_or_default())?;
    let worker_id = worker.worker_id.clone();
    let recorded = state
        .store
        .write(move |c| workers::seen(c, &worker_id, &version))
        .await?;
    if !recorded {
        // Revoked between the token's check and this write.
        return Err(ApiError::Unauthorized);
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "workerId": worker.worker_id,
        "repositories": worker.repositories,
    })))
}
