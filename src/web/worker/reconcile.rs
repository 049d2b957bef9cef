//! `POST /reconcile` [`ReconcileRequest`] → 200 with the audit event: an
//! operator on the worker's machine settles one attempt the worker's
//! journal holds as uncertain. 400 `confirmation_required` without
//! `confirmNoActiveTurn`, `invalid_verdict`, `invalid_task`; 404 for an
//! unknown task or attempt; 409 `attempt_of_another_worker`,
//! `repository_not_allowed`, `already_reconciled`, `not_uncertain`,
//! `attempt_mismatch`. The store decides (see
//! `store::workers::reconcile`); the repository's actors hear of it as
//! they do of the admin's reconcile.

use super::WorkerAuth;
use crate::domain::TaskId;
use crate::store::tasks::Verdict;
use crate::store::workers::reconcile;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use crate::worker_api::ReconcileRequest;
use actix_web::{web, HttpResponse};

pub async fn reconcile(
    WorkerAuth(worker): WorkerAuth,
    state: web::Data<AppState>,
    body: web::Json<ReconcileRequest>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    if !body.confirm_no_active_turn {
        return Err(ApiError::bad_request(
            "confirmation_required",
            "set confirmNoActiveTurn after checking that no Codex turn of this attempt still runs \
             on the worker; reconciliation never re-runs anything",
        ));
    }
    let verdict = match body.verdict.as_str() {
        "failed" => Verdict::Failed,
        "succeeded" => Verdict::Succeeded,
        _ => {
            return Err(ApiError::bad_request(
                "invalid_verdict",
                "verdict must be failed or succeeded",
            ))
        }
    };
    let task_id = body.task_id.parse::<TaskId>().map_err(|e| {
        ApiError::bad_request("invalid_task", format!("taskId is not a task id: {e}"))
    })?;
    let id = task_id.clone();
    let event = state
        .store
        .write(move |c| {
            reconcile::by_worker(
                c,
                &worker,
                &id,
                &body.attempt_id,
                verdict,
                &body.operator,
                &body.reason,
            )
        })
        .await?;
    crate::web::admin::actors::after_task_control(&state, &task_id, false).await?;
    Ok(HttpResponse::Ok().json(event))
}
