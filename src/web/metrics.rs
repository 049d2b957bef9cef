//! `GET /metrics`: the Prometheus text exposition of [`crate::metrics`].
//!
//! On the main listener it needs the admin Bearer token like the admin API
//! (nginx does not publish it either). With `metrics_listen` set, the same page
//! is also served without a token on that separate address, which is meant for a
//! loopback or private network where the Prometheus server scrapes it.

use crate::metrics::{self, Gauges};
use crate::store::tasks;
use crate::web::auth::Admin;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use std::time::Duration;

/// The main listener's route (Bearer token required).
pub fn config(cfg: &mut web::ServiceConfig) {
    cfg.route("/metrics", web::get().to(with_token));
}

/// The routes of the separate `metrics_listen` address: `/metrics` without a
/// token, and the health probes.
pub fn config_open(cfg: &mut web::ServiceConfig) {
    cfg.route("/metrics", web::get().to(open));
    super::health::config(cfg);
}

async fn with_token(_: Admin, state: web::Data<AppState>) -> HttpResponse {
    scrape(&state).await
}

async fn open(state: web::Data<AppState>) -> HttpResponse {
    scrape(&state).await
}

async fn scrape(state: &AppState) -> HttpResponse {
    let mut gauges = Gauges {
        circuit_open: state.circuit.is_open(),
        memory: metrics::Memory {
            sqlite_heap_bytes: Some(crate::store::sqlite_heap::bytes()),
            ..metrics::Memory::read()
        },
        ..Gauges::default()
    };
    match state.store.read(tasks::count_by_state).await {
        Ok(by_state) => {
            let get = |s: &str| {
                by_state
                    .iter()
                    .find(|(name, _)| name == s)
                    .map_or(0, |(_, n)| *n)
            };
            gauges.store_up = true;
            gauges.queue_depth = get("queued");
            gauges.running_turns =
                get("running") + get("awaiting_approval") + get("cancel_requested");
            gauges.tasks_by_state = by_state;
        }
        Err(e) => tracing::warn!(error = %e, "metrics: the store did not answer"),
    }
    if let Some(registry) = &state.registry {
        let snapshot = tokio::time::timeout(
            Duration::from_secs(2),
            registry.send(crate::actors::registry::Snapshot),
        )
        .await;
        if let Ok(Ok(tree)) = snapshot {
            gauges.actors = vec![
                ("repo", tree.repo_actors as i64),
                ("session", tree.session_actors as i64),
            ];
        }
    }
    match metrics::render(&gauges) {
        Ok(text) => HttpResponse::Ok()
            .content_type(metrics::CONTENT_TYPE)
            .insert_header(("Cache-Control", "no-store"))
            .body(text),
        Err(e) => {
            tracing::error!(error = %e, "metrics: the exposition could not be encoded");
            HttpResponse::InternalServerError()
                .insert_header(("Cache-Control", "no-store"))
                .finish()
        }
    }
}
