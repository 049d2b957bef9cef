//! `POST /api/gitea/webhook`, the hot path: read the raw body within the
//! limit → verify the HMAC → normalise → one transaction in the store → 202.
//! Nothing here waits on git, Codex or Gitea. Its rules also serve the
//! catch-up of comments whose webhook never came ([`listed`]).

pub mod command;
pub mod delivery;
pub mod event;
pub mod listed;
pub mod mention;
pub mod verify;

use crate::domain::refusals::Refused;
use crate::store::ingest::{self, IngestOutcome};
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use delivery::{delivery_headers, signed_payload, DeliveryRefusal};
use futures_util::StreamExt;
use secrecy::ExposeSecret;
use tracing_actix_web::RootSpan;

pub fn config(cfg: &mut web::ServiceConfig) {
    cfg.route(crate::config::WEBHOOK_PATH, web::post().to(receive));
}

/// A delivery id reused with another payload (409).
const DELIVERY_CONFLICT: &str = "delivery_conflict";

/// Counts the outcome and times the handler for `/metrics`.
async fn receive(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    root: RootSpan,
) -> Result<HttpResponse, ApiError> {
    let started = std::time::Instant::now();
    let result = handle(req, payload, state, root).await;
    let outcome = match &result {
        Ok((_, outcome)) => outcome,
        Err(ApiError::Unauthorized) => "bad_signature",
        Err(ApiError::BadRequest { .. } | ApiError::NotFound(_)) => "bad_request",
        Err(ApiError::PayloadTooLarge { .. }) => "too_large",
        Err(ApiError::RequestTimeout(_)) => "request_timeout",
        Err(ApiError::UnsupportedMediaType(_)) => "unsupported_media_type",
        Err(ApiError::Conflict { code, .. }) if *code == "outbox_full" => "outbox_full",
        Err(ApiError::Conflict { code, .. }) if *code == DELIVERY_CONFLICT => DELIVERY_CONFLICT,
        Err(ApiError::Conflict { .. }) => "disabled",
        // The webhook never asks the agent runtime: only the store is unavailable here.
        Err(ApiError::Unavailable | ApiError::AgentUnavailable(_) | ApiError::AgentRefused(_)) => {
            "unavailable"
        }
        Err(ApiError::Forbidden { .. }) => "forbidden",
    };
    crate::metrics::webhook(outcome, started.elapsed());
    result.map(|(response, _)| response)
}

/// The handler proper: the answer and its outcome label.
async fn handle(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    root: RootSpan,
) -> Result<(HttpResponse, &'static str), ApiError> {
    let limit = state.config.max_body_bytes;
    let body = read_body(&req, payload, limit, state.config.request_timeout).await?;
    let headers = req.headers();
    let signed = signed_payload(delivery::content_type(headers), &body)?;
    if let Err(e) = verify::verify(
        state.secrets.webhook_secret.expose_secret().as_bytes(),
        &signed,
        headers,
    ) {
        state
            .refusals
            .refused(&state.store, Refused::Signature, e.code());
        return Err(ApiError::Unauthorized);
    }
    let delivery = delivery_headers(headers)?;
    root.record("delivery.id", delivery.delivery_id.as_str());
    let delivery_id = delivery.delivery_id.clone();
    let request = match state.normalizer.normalize(&delivery, &signed) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(code = e.code(), "webhook payload refused: {e}");
            state
                .refusals
                .refused(&state.store, Refused::Payload, e.code());
            return Err(ApiError::bad_request(e.code(), e.to_string()));
        }
    };

    let repo_key = request.subject.as_ref().map(|s| s.repo.repo_key().clone());
    let session = request.session_to_wake();
    let outcome = state.store.ingest(request).await?;
    // After the commit, never before: the registry wakes the repository's
    // actor, and the session when the request gives it work at once (a
    // turnless command, an edit or deletion of a comment).
    // The other processes on the same PostgreSQL learn it too: the one
    // driving the session, or free to take the repository, acts at once.
    if let Some(repo_key) = &repo_key {
        use crate::store::signals::Signal;
        if let Some((session_key, repo_key)) = &session {
            state.store.signal(Signal::Session {
                session_key: session_key.clone(),
                repo_key: repo_key.clone(),
            });
        }
        if matches!(outcome, IngestOutcome::Accepted { .. }) {
            state.store.signal(Signal::Repo {
                repo_key: repo_key.clone(),
            });
        }
    }
    if let (Some(registry), Some(repo_key)) = (&state.registry, repo_key) {
        if let Some((session_key, repo_key)) = session {
            registry.do_send(crate::actors::registry::RunCommands {
                session_key,
                repo_key,
            });
        }
        if matches!(outcome, IngestOutcome::Accepted { .. }) {
            registry.do_send(crate::actors::registry::Notify { repo_key });
        }
    }
    let response = match outcome {
        IngestOutcome::Accepted { task_id, state: task_state } => {
            root.record("task.id", task_id.as_str());
            tracing::info!(outcome = "accepted", "webhook stored");
            let response = HttpResponse::Accepted().json(serde_json::json!({
                "deliveryId": delivery_id,
                "taskId": task_id,
                "state": task_state,
            }));
            (response, "accepted")
        }
        IngestOutcome::Duplicate { task_id, state: task_state } => {
            if let Some(id) = &task_id {
                root.record("task.id", id.as_str());
            }
            tracing::info!(outcome = "duplicate", "webhook already stored");
            let response = HttpResponse::Ok().json(serde_json::json!({
                "status": "duplicate",
                "deliveryId": delivery_id,
                "taskId": task_id,
                "state": task_state,
            }));
            (response, "duplicate")
        }
        IngestOutcome::Ignored { reason, task_id } => {
            tracing::info!(outcome = "ignored", reason = reason.as_str(), "webhook recorded, nothing to run");
            let response = HttpResponse::Ok().json(serde_json::json!({
                "status": "ignored",
                "reason": reason,
                "deliveryId": delivery_id,
                "taskId": task_id,
            }));
            (response, "ignored")
        }
        IngestOutcome::RepositoryDisabled { repo_key } => {
            return Err(ApiError::Conflict {
                code: "repository_disabled",
                message: format!("repository {repo_key} is disabled by an operator; the comment was recorded but will not run"),
            })
        }
        IngestOutcome::RateLimited { task_id, limit } => {
            root.record("task.id", task_id.as_str());
            tracing::info!(outcome = "rejected", code = "rate_limited", limit, "webhook refused: the commenter's hourly limit is reached");
            let response = HttpResponse::Ok().json(serde_json::json!({
                "status": "rejected",
                "deliveryId": delivery_id,
                "taskId": task_id,
                "code": "rate_limited",
            }));
            (response, "rejected")
        }
        IngestOutcome::DeliveryConflict { task_id } => {
            tracing::warn!(outcome = DELIVERY_CONFLICT, "webhook refused: its delivery id was stored with another payload");
            let first = task_id
                .map(|t| format!(" (the first one is task {t})"))
                .unwrap_or_default();
            return Err(ApiError::Conflict {
                code: DELIVERY_CONFLICT,
                message: format!(
                    "delivery {delivery_id} was received before with another payload{first}; the first stands and this one was not stored. Gitea never reuses a delivery id: check what else sends to this URL"
                ),
            });
        }
        IngestOutcome::OutboxFull {
            session_key,
            task_id,
        } => {
            let refusal = task_id
                .map(|t| format!(" (refused as task {t}, answered in the thread)"))
                .unwrap_or_default();
            return Err(ApiError::Conflict {
                code: "outbox_full",
                message: format!(
                    "{session_key} already has {} unfinished requests; wait for them or cancel some{refusal}",
                    ingest::OUTBOX_CAPACITY
                ),
            });
        }
    };
    Ok(response)
}

/// Reads the body, refusing it (413) as soon as it passes `limit`, and before
/// reading anything when Content-Length already says so.
async fn read_body(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<web::BytesMut, ApiError> {
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let mut body = web::BytesMut::with_capacity(declared.unwrap_or(8192).min(limit));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            if crate::web::deadline::is_timeout(&e) {
                ApiError::RequestTimeout(timeout.as_secs())
            } else {
                ApiError::bad_request("body_read_failed", format!("could not read the body: {e}"))
            }
        })?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The bytes Gitea signed: the body for JSON, the `payload` field for forms.
impl From<DeliveryRefusal> for ApiError {
    fn from(e: DeliveryRefusal) -> ApiError {
        match e {
            DeliveryRefusal::MissingDeliveryId => {
                ApiError::bad_request("missing_delivery_id", e.to_string())
            }
            DeliveryRefusal::InvalidDeliveryId => {
                ApiError::bad_request("invalid_delivery_id", e.to_string())
            }
            DeliveryRefusal::NoFormPayload => {
                ApiError::bad_request("invalid_payload", e.to_string())
            }
            DeliveryRefusal::UnsupportedMediaType(mime) => ApiError::UnsupportedMediaType(mime),
        }
    }
}

/// The payload hash as the delivery row stores it (for tests).
pub fn payload_hash(body: &[u8]) -> String {
    crate::domain::PayloadHash::of(body).as_str().to_owned()
}
