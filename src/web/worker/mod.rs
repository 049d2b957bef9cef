//! `/api/worker/v1/*`: the API remote workers (`codex-bridge worker`) call.
//! Every route takes a worker's own bearer token ([`WorkerAuth`]), never the
//! admin token; what a worker may do is bounded by the repositories an
//! operator gave it.

mod auth;
mod finals;
mod heartbeat;
mod leases;
mod reconcile;

pub use auth::WorkerAuth;

use crate::store::workers::Invalid;
use crate::web::error::ApiError;
use actix_web::web;

pub fn config(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope(crate::worker_api::API_PREFIX)
            .route("/heartbeat", web::post().to(heartbeat::beat))
            .route("/leases", web::post().to(leases::lease))
            .route("/leases/{leaseId}/renew", web::post().to(leases::renew))
            .route("/leases/{leaseId}/release", web::post().to(leases::release))
            .route("/leases/{leaseId}/calls", web::get().to(leases::calls))
            .route("/leases/{leaseId}/answers", web::post().to(leases::answers))
            .service(
                web::resource("/leases/{leaseId}/events")
                    .app_data(
                        web::JsonConfig::default()
                            .limit(crate::worker_api::MAX_EVENTS_BODY)
                            .error_handler(events_json_error),
                    )
                    .route(web::post().to(leases::events)),
            )
            .route("/reconcile", web::post().to(reconcile::reconcile))
            .route("/finals", web::post().to(finals::offer)),
    );
}

/// An event batch the route could not read: too large (413), too slow
/// (408), or not an event batch (400).
fn events_json_error(
    err: actix_web::error::JsonPayloadError,
    req: &actix_web::HttpRequest,
) -> actix_web::Error {
    use actix_web::error::JsonPayloadError as E;
    match &err {
        E::Overflow { .. } | E::OverflowKnownLength { .. } => ApiError::PayloadTooLarge {
            limit: crate::worker_api::MAX_EVENTS_BODY,
        },
        E::Payload(p) if crate::web::deadline::is_timeout(p) => ApiError::RequestTimeout(
            req.app_data::<web::Data<crate::web::state::AppState>>()
                .map_or(0, |s| s.config.request_timeout.as_secs()),
        ),
        _ => ApiError::bad_request("invalid_json", err.to_string()),
    }
    .into()
}

/// A worker's name, repositories or version as sent cannot be taken: the
/// caller's to correct, so a 400 with the check's code (the admin routes
/// that register workers answer it alike).
impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> Self {
        ApiError::BadRequest {
            code: e.code,
            message: e.message,
        }
    }
}
