//! `GET /api/gitea-workflow/overview`: pause state, queue, running work, tasks
//! per state, the last hour of webhooks, and `blockers`: why no task runs
//! now (`[{code, message, action}]`, empty when tasks run), which the web
//! view shows as a banner until it is fixed, and `catchup`: whether comments
//! whose webhook never arrived are caught up, and what that cannot see.

use crate::store::{catchup, control, format_time, tasks, views};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use std::collections::BTreeMap;

/// What the catch-up's listing of a repository's comments cannot see, so an
/// operator knows what a lost webhook may still have cost.
pub const CATCHUP_BLIND_SPOTS: &str = "submitted reviews (Gitea lists only plain comments), \
     and edits or deletions of comments made while webhooks were lost";

/// Each limit by its key: its configured value (0: off) and the highest
/// usage now, with who has it.
fn limits_view(
    l: &crate::domain::limits::Limits,
    u: &crate::store::limits::LimitUsage,
) -> serde_json::Value {
    let one = |limit: i64, used: &Option<crate::store::limits::Highest>| serde_json::json!({"limit": limit, "highest": used});
    serde_json::json!({
        "max_turns_per_task": one(l.max_turns_per_task, &u.max_turns_per_task),
        "max_turns_per_workflow": one(l.max_turns_per_workflow, &u.max_turns_per_workflow),
        "max_task_secs": one(i64::try_from(l.max_task_secs).unwrap_or(i64::MAX), &u.max_task_secs),
        "max_tokens_per_task": one(l.max_tokens_per_task, &u.max_tokens_per_task),
        "user_triggers_per_hour": one(l.user_triggers_per_hour, &u.user_triggers_per_hour),
        "repo_turns_per_day": one(l.repo_turns_per_day, &u.repo_turns_per_day),
    })
}

pub async fn get(_: Admin, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(compute(&state).await?))
}

/// The overview document (also the live view's `overview` event).
pub async fn compute(state: &AppState) -> Result<serde_json::Value, ApiError> {
    let instance = state.config.instance_id.clone();
    // Why nothing runs: the configuration's blockers and the agent runtime's,
    // the same the scheduler holds on.
    let mut blockers = crate::readiness::all_blockers(&state.config, &state.agent.now());
    let circuit = state.circuit.view();
    if let Some(until) = &circuit.until {
        blockers.push(crate::readiness::Blocker {
            code: "circuit_open",
            message: format!(
                "the agent runtime failed turn after turn (breaker_failures = {}): no task starts until {until} \
                 (queued tasks wait and use no attempt)",
                state.config.breaker_failures
            ),
            action: "look at the failed tasks' errors and the server log (the provider, its \
                     key or quota, the codex app-server); turns start again by themselves"
                .into(),
        });
    }
    let catchup_on = state.config.catchup_interval_secs > 0
        && state.config.gitea_url.is_some()
        && state.config.gitea_token.is_some();
    let interval = state.config.catchup_interval_secs;
    let configured = state.config.limits;
    let body = state
        .store
        .read(move |c| {
            let ctl = control::get(c)?;
            let by_state: BTreeMap<String, i64> = tasks::count_by_state(c)?.into_iter().collect();
            let hour_ago = format_time(chrono::Utc::now() - chrono::Duration::hours(1));
            let counts = views::overview_counts(c, &hour_ago)?;
            let caught = catchup::summary(c)?;
            let usage = crate::store::limits::usage(c)?;
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
                "circuit": circuit,
                "limits": limits_view(&configured, &usage),
                "catchup": {
                    "enabled": catchup_on,
                    "intervalSecs": interval,
                    "repositories": caught.repositories,
                    "lastPassAt": caught.last_pass_at,
                    "cannotSee": CATCHUP_BLIND_SPOTS,
                },
            }))
        })
        .await?;
    Ok(body)
}
