//! `/healthz` (the process answers) and `/readyz` (what works). No auth, so
//! `/readyz` says only states and which configuration keys to set, never a
//! value or a path.
//!
//! `/readyz` answers 200 while the store answers, whatever else is missing:
//! intake must go on, since Gitea never retries a webhook. `status` is
//! `degraded` when tasks are stored but cannot run (no Gitea client, no agent
//! runtime), and `unavailable` (503) when the store does not answer.
//!
//! `gitea.state` `ok` means configured: Gitea is not asked on each probe, so an
//! unreachable Gitea shows in the tasks (retries, receipts), not here.

use crate::config::Config;
use crate::web::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use serde_json::{json, Value};

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
    let (status, body) = readiness(store_ok, &state.config);
    HttpResponse::build(status).json(body)
}

/// The `/readyz` answer for a store that does (not) answer under `config`.
fn readiness(store_ok: bool, config: &Config) -> (StatusCode, Value) {
    let gitea = crate::readiness::gitea_not_configured(config);
    let codex = crate::readiness::codex_unavailable(config);
    let status = match (store_ok, gitea.is_none() && codex.is_none()) {
        (false, _) => "unavailable",
        (true, true) => "ready",
        (true, false) => "degraded",
    };
    let body = json!({
        "status": status,
        "store": { "state": if store_ok { "ok" } else { "unavailable" } },
        "gitea": {
            "state": if gitea.is_some() { "not_configured" } else { "ok" },
            "reason": gitea,
        },
        "codex": {
            "state": if codex.is_some() { "unavailable" } else { "ok" },
            "reason": codex,
        },
    });
    let code = if store_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Config {
        crate::readiness::test_config(vars)
    }

    const GITEA: [(&str, &str); 2] = [
        ("gitea_url", "http://git.test"),
        ("gitea_token", "gitea-token-never-shown-0123"),
    ];

    #[test]
    fn without_gitea_the_bridge_is_degraded_and_says_which_keys_to_set() {
        let (code, body) = readiness(true, &config(&[("agent_runtime", "scripted")]));
        assert_eq!(code, StatusCode::OK);
        assert_eq!(body["status"], "degraded");
        assert_eq!(body["store"]["state"], "ok");
        assert_eq!(body["gitea"]["state"], "not_configured");
        let reason = body["gitea"]["reason"].as_str().unwrap();
        assert!(reason.contains("gitea_url") && reason.contains("gitea_token"));
        assert_eq!(body["codex"]["state"], "ok");
    }

    #[test]
    fn configured_is_ready_and_a_store_that_does_not_answer_is_unavailable() {
        let vars = [GITEA[0], GITEA[1], ("agent_runtime", "scripted")];
        let (code, body) = readiness(true, &config(&vars));
        assert_eq!((code, &body["status"]), (StatusCode::OK, &json!("ready")));
        assert_eq!(body["gitea"], json!({"state": "ok", "reason": null}));
        assert!(!body.to_string().contains("never-shown"));

        let (code, body) = readiness(false, &config(&vars));
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["status"], "unavailable");
        assert_eq!(body["store"]["state"], "unavailable");
    }

    #[test]
    fn intake_only_runs_no_turns_so_codex_is_unavailable() {
        let (code, body) = readiness(true, &config(&GITEA));
        assert_eq!(code, StatusCode::OK);
        assert_eq!(body["status"], "degraded");
        assert_eq!(body["codex"]["state"], "unavailable");
        assert!(body["codex"]["reason"]
            .as_str()
            .unwrap()
            .contains("agent_runtime"));
    }
}
