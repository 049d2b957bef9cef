//! `/healthz` (the process answers) and `/readyz` (what works). No auth, so
//! `/readyz` says only states, and which configuration keys to set and what
//! to do, never a value or a path.
//!
//! `/readyz` answers 200 while the store answers, whatever else is missing:
//! intake must go on, since Gitea never retries a webhook, so a proxy must
//! not route webhooks away from an instance that can still store them.
//! `status` is `degraded` when tasks are stored but cannot run now (no Gitea
//! client, no agent runtime, a Codex that cannot be started or is not
//! signed in), and `unavailable` (503) when the store does not answer. The
//! document is [`crate::readiness::Readiness`].
//!
//! `gitea.state` `ok` means configured: Gitea is not asked on each probe, so an
//! unreachable Gitea shows in the tasks (retries, receipts), not here. The
//! `codex` and `codexAccount` states are what the Codex keeper last found
//! (it keeps the app-server started and reads its account).

use crate::web::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde_json::json;

pub fn config(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz));
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}

async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let store_ok = match state.store.ping().await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            false
        }
    };
    let body = crate::readiness::readiness(&state.config, store_ok, &state.agent.now())
        .with_circuit(state.circuit.view());
    let code = if store_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    HttpResponse::build(code).json(body)
}
