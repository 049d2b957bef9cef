//! `GET /api/gitea-workflow/overview`: pause state, queue, running work, tasks
//! per state, the last hour of webhooks, and `blockers`: why no task runs
//! now (`[{code, message, action}]`, empty when tasks run), which the web
//! view shows as a banner until it is fixed.

use crate::store::{control, format_time, tasks, views};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use std::collections::BTreeMap;

pub async fn get(_: Admin, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(compute(&state).await?))
}

/// The overview document (also the live view's `overview` event).
pub async fn compute(state: &AppState) -> Result<serde_json::Value, ApiError> {
    let instance = state.config.instance_id.clone();
    // Why nothing runs: the configuration's blockers and the agent runtime's,
    // the same the scheduler holds on.
    let blockers = crate::readiness::all_blockers(&state.config, &state.agent.now());
    let body = state
        .store
        .read(move |c| {
            let ctl = control::get(c)?;
            let by_state: BTreeMap<String, i64> = tasks::count_by_state(c)?.into_iter().collect();
            let hour_ago = format_time(chrono::Utc::now() - chrono::Duration::hours(1));
            let counts = views::overview_counts(c, &hour_ago)?;
            let get = |s: &str| by_state.get(s).copied().unwrap_or(0);
            Ok(serde_json::json!({
                "instanceId": instance,
                "paused": ctl.global_paused,
                "pauseReason": ctl.pause_reason,
                "pausedBy": ctl.updated_by,
                "queueDepth": get("queued"),
                "running": get("running") + get("awaiting_approval") + get("verifying_reply"),
                "needsAttention": get("needs_reconciliation") + get("blocked_workspace") + get("failed_reply"),
                "tasksByState": by_state,
                "repositories": counts.repositories,
                "webhooksLastHour": counts.webhooks_by_status,
                "blockers": blockers,
            }))
        })
        .await?;
    Ok(body)
}
