//! `GET /api/gitea-workflow/overview`: pause state, queue, running work, tasks
//! per state, the last hour of webhooks, and `blockers`: why no task runs
//! (`[{code, message}]`, empty when tasks run).

use crate::store::schema::{repositories, webhook_deliveries};
use crate::store::{control, format_time, tasks};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use crate::with_conn;
use actix_web::{web, HttpResponse};
use diesel::prelude::*;
use std::collections::BTreeMap;

pub async fn get(_: Admin, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(compute(&state).await?))
}

/// The overview document (also the live view's `overview` event).
pub async fn compute(state: &AppState) -> Result<serde_json::Value, ApiError> {
    let instance = state.config.instance_id.clone();
    // Why nothing runs, from the configuration: the same list the scheduler holds on.
    let blockers = crate::readiness::blockers(&state.config);
    let body = state
        .store
        .read(move |c| {
            let ctl = control::get(c)?;
            let by_state: BTreeMap<String, i64> = tasks::count_by_state(c)?.into_iter().collect();
            let hour_ago = format_time(chrono::Utc::now() - chrono::Duration::hours(1));
            let (webhooks, repos) = with_conn!(c, |conn| {
                let webhooks = webhook_deliveries::table
                    .filter(webhook_deliveries::received_at.ge(&hour_ago))
                    .group_by(webhook_deliveries::status)
                    .select((webhook_deliveries::status, diesel::dsl::count_star()))
                    .load::<(String, i64)>(conn)?;
                let repos = repositories::table.count().get_result::<i64>(conn)?;
                Ok::<_, diesel::result::Error>((webhooks, repos))
            })?;
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
                "repositories": repos,
                "webhooksLastHour": webhooks.into_iter().collect::<BTreeMap<_, _>>(),
                "blockers": blockers,
            }))
        })
        .await?;
    Ok(body)
}
