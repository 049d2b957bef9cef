//! `POST /api/worker/v1/heartbeat` with `{"version", "uncertainTurns"}`:
//! the worker is alive, runs that version, and its journal holds that many
//! uncertain turns (shown to operators beside the uncertain tasks the
//! server knows of). Answers `{"workerId", "repositories"}`: who the token
//! says it is and what it may work on, so a worker started with the wrong
//! token file finds out at once.

use super::WorkerAuth;
use crate::store::workers::{self, WorkerVersion};
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Beat {
    version: Option<String>,
    /// Turns the worker sent to Codex with no end in its journal.
    uncertain_turns: Option<u32>,
}

pub async fn beat(
    WorkerAuth(worker): WorkerAuth,
    state: web::Data<AppState>,
    body: web::Json<Beat>,
) -> Result<HttpResponse, ApiError> {
    let version = WorkerVersion::parse(body.version.as_deref().unwrap_or_default())?;
    let worker_id = worker.worker_id.clone();
    let uncertain = body.uncertain_turns;
    let recorded = state
        .store
        .write(move |c| workers::seen(c, &worker_id, &version, uncertain))
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
