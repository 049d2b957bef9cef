//! `POST /finals` [`LateFinalRequest`] → 200 with the audit event: a worker
//! offers the durable final of an attempt whose turn the server stopped
//! following. Taken once, only for the attempt a `needs_reconciliation`
//! task waits on (a repeat answers the first event); otherwise nothing
//! changes: 400 `invalid_task`; 404 for an unknown task or attempt; 409
//! `not_uncertain` (not yet, perhaps: the worker offers it again),
//! `task_ended`, `attempt_mismatch`, `attempt_of_another_worker`,
//! `repository_not_allowed`, `already_reconciled` (never: it stops). The store decides (see
//! `store::late_finals`); the repository's actors are woken to verify the
//! reply.

use super::WorkerAuth;
use crate::domain::TaskId;
use crate::store::late_finals::{self, DurableFinal};
use crate::web::error::ApiError;
use crate::web::state::AppState;
use crate::worker_api::LateFinalRequest;
use actix_web::{web, HttpResponse};

pub async fn offer(
    WorkerAuth(worker): WorkerAuth,
    state: web::Data<AppState>,
    body: web::Json<LateFinalRequest>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    let task_id = body.task_id.parse::<TaskId>().map_err(|e| {
        ApiError::bad_request("invalid_task", format!("taskId is not a task id: {e}"))
    })?;
    let id = task_id.clone();
    let final_ = DurableFinal {
        turn_id: body.turn_id,
        final_text: body.final_text,
    };
    let event = state
        .store
        .write(move |c| late_finals::take(c, &worker, &id, &body.attempt_id, &final_))
        .await?;
    tracing::info!(task.id = %task_id, event.id = %event.event_id, "a worker's late final was taken");
    crate::web::admin::actors::after_task_control(&state, &task_id, false).await?;
    Ok(HttpResponse::Ok().json(event))
}
