//! `GET /api/gitea-workflow/stats?hours=24`: the overview's charts (also the
//! live view's `stats` event, for the last 24 hours).
//!
//! `hours` (1 to 168, default 24) is how far back the per-minute and per-hour
//! series look; anything else is a 400 `invalid_hours`. The body (camelCase):
//!
//! ```text
//! { from, to, bucketSecs,                       // the per-minute buckets' range (UTC)
//!   webhooks:        [{t, accepted, other}],     // deliveries received per bucket
//!   tasksFinished:   [{t, succeeded, failed, other}],
//!   queueDepth:      [{t, depth}],               // queued at the bucket's end; holds until the next point
//!   turnDuration:    [{t, p50Ms, p90Ms, p99Ms, count}],  // turns ended per hour
//!   tokensByRepoDay: [{day, repo, input, cachedInput, output, reasoning, total}] }  // 14 UTC days
//! ```
//!
//! `t` is a bucket's start; buckets with nothing in them are left out of
//! `webhooks`, `tasksFinished` and `turnDuration`. How each series is derived
//! is in the store's `stats` module.

use crate::store::stats::{self, Hours, Stats, MAX_HOURS};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct StatsQuery {
    hours: Option<String>,
}

pub async fn get(
    _: Admin,
    state: web::Data<AppState>,
    q: web::Query<StatsQuery>,
) -> Result<HttpResponse, ApiError> {
    let hours = match q.into_inner().hours {
        None => Hours::DAY,
        Some(text) => parse_hours(&text)?,
    };
    Ok(HttpResponse::Ok().json(compute(&state, hours).await?))
}

fn parse_hours(text: &str) -> Result<Hours, ApiError> {
    text.trim()
        .parse::<u32>()
        .ok()
        .and_then(Hours::new)
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_hours",
                format!(
                    "hours must be a whole number from 1 to {MAX_HOURS} (got {:?})",
                    text.chars().take(20).collect::<String>()
                ),
            )
        })
}

/// The charts for the `hours` up to now.
pub async fn compute(state: &AppState, hours: Hours) -> Result<Stats, ApiError> {
    let now = chrono::Utc::now();
    Ok(state
        .store
        .read(move |c| stats::stats(c, now, hours))
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_are_bounded() {
        assert_eq!(parse_hours("1").ok(), Hours::new(1));
        assert_eq!(parse_hours(" 168").ok(), Hours::new(168));
        for bad in ["0", "169", "-1", "2.5", "day", ""] {
            assert!(parse_hours(bad).is_err(), "{bad}");
        }
    }
}
