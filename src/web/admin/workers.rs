//! `/api/gitea-workflow/workers`: the remote workers an operator registered.
//! `POST` registers one and answers its token, the one time it is shown;
//! `GET` lists them (never a token); `POST /workers/{workerId}/revoke`
//! refuses a worker's token from then on and answers the audit event, like
//! every control.

use super::ControlBody;
use crate::store::worker_leases;
use crate::store::workers::{self, RepoName, WorkerId, WorkerName};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

/// `{"name", "repositories": ["owner/name", ...], "requestId", "reason"}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateBody {
    name: Option<String>,
    repositories: Option<Vec<String>>,
    #[serde(flatten)]
    control: ControlBody,
}

/// 201 `{"workerId", "token", "worker", "event"}`. A repeated `requestId`
/// mints nothing: 409 `request_replayed`, naming the worker the first
/// request created (its token cannot be shown again).
pub async fn create(
    _: Admin,
    state: web::Data<AppState>,
    body: web::Json<CreateBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    let req = body.control.into_request()?;
    let name = WorkerName::parse(body.name.as_deref().unwrap_or_default())?;
    let repositories = RepoName::parse_list(&body.repositories.unwrap_or_default())?;
    let created = state
        .store
        .write(move |c| workers::create(c, &req, &name, &repositories))
        .await?;
    Ok(HttpResponse::Created().json(serde_json::json!({
        "workerId": created.worker.worker_id,
        "token": created.token.expose(),
        "worker": created.worker,
        "event": created.event,
    })))
}

/// `{"workers": [Worker]}`, revoked ones included; each with its `health`
/// (`ok`, `never_seen`, `offline`, `uncertain`, `revoked`), the
/// `uncertainTasks` the server knows wait on it (`[{taskId, attemptId}]`),
/// the `uncertainTurns` its own journal holds as its last heartbeat said
/// (`null`: never said) and the `leases` it holds now (`[{repository,
/// leaseId, fence, expiresAt, ...}]`).
pub async fn list(_: Admin, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let (workers, leases) = state
        .store
        .read(|c| Ok((workers::status::list(c)?, worker_leases::held(c)?)))
        .await?;
    let mut shown = Vec::with_capacity(workers.len());
    for w in workers {
        let mut v = serde_json::to_value(&w).map_err(|e| {
            tracing::error!(error = %e, "a worker cannot be shown as JSON");
            ApiError::Unavailable
        })?;
        let held: Vec<_> = leases
            .iter()
            .filter(|l| l.worker_id == w.worker.worker_id.as_str())
            .collect();
        v["leases"] = serde_json::json!(held);
        shown.push(v);
    }
    Ok(HttpResponse::Ok().json(serde_json::json!({ "workers": shown })))
}

/// Answers with the audit event; an unknown worker is a 404 and records
/// nothing.
pub async fn revoke(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    let req = body.into_inner().into_request()?;
    let text = path.into_inner();
    let worker_id = WorkerId::parse(&text).ok_or_else(|| {
        let shown: String = text.chars().take(100).collect();
        ApiError::NotFound(format!(
            "worker {shown:?} (a worker id is wrk-<32 hex digits>)"
        ))
    })?;
    let revoked = worker_id.clone();
    let event = state
        .store
        .write(move |c| workers::revoke(c, &req, &revoked))
        .await?;
    // The store ended its leases; the calls they took fail closed now
    // rather than when they time out.
    state
        .worker_calls
        .end_worker(worker_id.as_str(), "an operator revoked the worker");
    Ok(HttpResponse::Ok().json(event))
}
