//! A worker's leases and the calls it runs under them:
//!
//! - `POST /leases` `{"protocol", "repository", "codexHome"}` (`codexHome`,
//!   optional: where the worker's threads live) → 200 [`LeaseGrant`]; 400
//!   `protocol_unsupported` or `invalid_codex_home`, 403
//!   `repository_not_allowed`, 409 `lease_held` (another worker holds it:
//!   ask again later).
//! - `POST /leases/{leaseId}/renew` → 200 [`LeaseGrant`]; 409 `lease_lost`.
//! - `POST /leases/{leaseId}/release` → 204.
//! - `GET /leases/{leaseId}/calls?waitMs=` → 200 `{"calls": [Call]}`,
//!   held open until a call comes or the wait runs out; 409 `lease_lost`.
//! - `POST /leases/{leaseId}/answers` [`Answer`] → 204; 404 `unknown_call`.
//! - `POST /leases/{leaseId}/events` [`EventBatch`] → 204; 404 `unknown_call`.
//!
//! Each is checked against the store's lease first: a lease that ended
//! (expired, taken over, released, its worker revoked) is refused with
//! `lease_lost`, and the calls it took fail closed at once. The calls live
//! in the store, so any server process answers these routes, whichever
//! process queued a call and waits for its answer.

use super::WorkerAuth;
use crate::actors::worker_calls::LOOK_EVERY;
use crate::store::worker_leases::{self, WorkerLease};
use crate::store::workers::{RepoName, WorkerId};
use crate::web::error::ApiError;
use crate::web::state::AppState;
use crate::worker_api::{
    Answer, EventBatch, LeaseGrant, LeaseRequest, MAX_POLL_WAIT_MS, PROTOCOL_VERSION,
};
use actix_web::{web, HttpResponse};
use serde::Deserialize;
use std::time::{Duration, Instant};

/// How long a lease lasts unless renewed (`worker_lease_ttl_secs`): a
/// worker renews at a third of it, so two lost renewals in a row still
/// keep it.
fn lease_ttl(state: &AppState) -> Duration {
    Duration::from_secs(state.config.worker_lease_ttl_secs)
}

fn grant(lease: WorkerLease, ttl: Duration) -> LeaseGrant {
    LeaseGrant {
        lease_id: lease.lease_id,
        repository: lease.repository,
        fence: lease.fence,
        expires_at: lease.expires_at,
        ttl_secs: ttl.as_secs(),
    }
}

fn lease_lost(lease_id: &str) -> ApiError {
    ApiError::Conflict {
        code: "lease_lost",
        message: format!(
            "lease {lease_id} is no longer this worker's (it expired, moved to another worker, \
             was released, or the worker was revoked); lease the repository again"
        ),
    }
}

fn unknown_call(id: &str) -> ApiError {
    ApiError::NotFound(format!(
        "call {id} under this lease (it was answered, given up on, or handed to another lease)"
    ))
}

/// The lease, if this worker holds it now; a lease that ended fails the
/// calls it took.
async fn held(
    state: &AppState,
    worker: &WorkerId,
    lease_id: &str,
) -> Result<WorkerLease, ApiError> {
    let (w, l) = (worker.clone(), lease_id.to_owned());
    match state
        .store
        .read(move |c| worker_leases::check(c, &w, &l))
        .await?
    {
        Some(lease) => Ok(lease),
        None => {
            end_lease(state, lease_id, "the worker's lease ended").await;
            Err(lease_lost(lease_id))
        }
    }
}

/// Fails the calls a lease that ended took (they are already refused to
/// it: a store that cannot take this now leaves them to their callers,
/// who find the lease ended themselves).
async fn end_lease(state: &AppState, lease_id: &str, why: &str) {
    if let Err(e) = state.worker_calls.end_lease(lease_id, why).await {
        tracing::warn!(lease.id = %lease_id, error = %e, "cannot mark the calls of an ended lease lost; their callers find out themselves");
    }
}

pub async fn lease(
    WorkerAuth(worker): WorkerAuth,
    state: web::Data<AppState>,
    body: web::Json<LeaseRequest>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    if body.protocol != PROTOCOL_VERSION {
        return Err(ApiError::bad_request(
            "protocol_unsupported",
            format!(
                "this server speaks worker protocol {PROTOCOL_VERSION}, the worker {}; run the \
                 same version of codex-bridge on both",
                body.protocol
            ),
        ));
    }
    let repository = RepoName::parse(&body.repository)?;
    let home = body
        .codex_home
        .as_deref()
        .map(worker_leases::HomeId::parse)
        .transpose()?;
    if !worker_leases::may_lease(&worker, &repository) {
        return Err(ApiError::Forbidden {
            code: "repository_not_allowed",
            message: format!(
                "this worker was not given repository {}; an operator registers a worker with \
                 the repositories it may work on",
                repository.as_str()
            ),
        });
    }
    let repo = repository.clone();
    let ttl = lease_ttl(&state);
    let acquired = state
        .store
        .write(move |c| {
            let lease = worker_leases::acquire(c, &worker, &repo, ttl)?;
            if let Some(l) = &lease {
                worker_leases::set_home(c, &l.lease_id, home.as_ref())?;
            }
            Ok(lease)
        })
        .await?;
    match acquired {
        Some(lease) => Ok(HttpResponse::Ok().json(grant(lease, ttl))),
        None => Err(ApiError::Conflict {
            code: "lease_held",
            message: format!(
                "another worker holds repository {}; ask again later",
                repository.as_str()
            ),
        }),
    }
}

pub async fn renew(
    WorkerAuth(worker): WorkerAuth,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let lease_id = path.into_inner();
    let (w, l) = (worker.worker_id.clone(), lease_id.clone());
    let ttl = lease_ttl(&state);
    match state
        .store
        .write(move |c| worker_leases::renew(c, &w, &l, ttl))
        .await?
    {
        Some(lease) => Ok(HttpResponse::Ok().json(grant(lease, ttl))),
        None => {
            end_lease(&state, &lease_id, "the worker's lease ended").await;
            Err(lease_lost(&lease_id))
        }
    }
}

pub async fn release(
    WorkerAuth(worker): WorkerAuth,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let lease_id = path.into_inner();
    let (w, l) = (worker.worker_id.clone(), lease_id.clone());
    state
        .store
        .write(move |c| worker_leases::release(c, &w, &l))
        .await?;
    end_lease(&state, &lease_id, "the worker gave its lease back").await;
    Ok(HttpResponse::NoContent().finish())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PollQuery {
    wait_ms: Option<u64>,
}

pub async fn calls(
    WorkerAuth(worker): WorkerAuth,
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<PollQuery>,
) -> Result<HttpResponse, ApiError> {
    let lease_id = path.into_inner();
    let wait = Duration::from_millis(query.wait_ms.unwrap_or(0).min(MAX_POLL_WAIT_MS));
    let until = Instant::now() + wait;
    let mut waiter = None;
    loop {
        // Checked again after every wait: a lease revoked meanwhile takes
        // no call.
        let lease = held(&state, &worker.worker_id, &lease_id).await?;
        let waiter =
            waiter.get_or_insert_with(|| state.worker_calls.repository_waiter(&lease.repository));
        waiter.seen();
        let calls = state.worker_calls.take(&lease).await?;
        let left = until.saturating_duration_since(Instant::now());
        if !calls.is_empty() || left.is_zero() {
            return Ok(HttpResponse::Ok().json(crate::worker_api::CallBatch { calls }));
        }
        waiter.wait(left.min(LOOK_EVERY)).await;
    }
}

pub async fn answers(
    WorkerAuth(worker): WorkerAuth,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<Answer>,
) -> Result<HttpResponse, ApiError> {
    let lease_id = path.into_inner();
    held(&state, &worker.worker_id, &lease_id).await?;
    let mut answer = body.into_inner();
    // The server names the worker that took a turn, as it authenticated it.
    answer.outcome.taken_by(worker.worker_id.as_str());
    state
        .worker_calls
        .answer(&lease_id, &answer.call_id, answer.outcome)
        .await?
        .map_err(|_| unknown_call(&answer.call_id))?;
    Ok(HttpResponse::NoContent().finish())
}

pub async fn events(
    WorkerAuth(worker): WorkerAuth,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<EventBatch>,
) -> Result<HttpResponse, ApiError> {
    let lease_id = path.into_inner();
    held(&state, &worker.worker_id, &lease_id).await?;
    let batch = body.into_inner();
    state
        .worker_calls
        .events(&lease_id, &batch.stream, batch.first, batch.events)
        .await?
        .map_err(|_| unknown_call(&batch.stream))?;
    Ok(HttpResponse::NoContent().finish())
}
