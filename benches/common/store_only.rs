//! The store-only load of the ingest benches (`ingest`, `writer_cost`): the
//! store as the server opens it, and deliveries spread over Issues as the
//! HTTP load generator spreads them.

use anyhow::Result;
use codex_bridge::domain::IngestRequest;

/// Repositories the ingest load spreads over.
pub const REPOS: u64 = 50;
/// Issues per repository: 2,000 in all. Each session's outbox holds at most
/// 256 unfinished tasks (nothing finishes them in these benches), so 500
/// Issues capped a run at 128k deliveries, which a 12k/s server reaches
/// within its warm-up and measured phase.
pub const ISSUES_PER_REPO: u64 = 40;

/// The store the server would open on the SQLite file at `path` with the
/// default configuration, the hourly limit per commenter off (the load comes
/// from a handful of commenters), and the `extra` configuration keys.
pub fn configured_sqlite_store(
    path: &std::path::Path,
    extra: &[(&str, &str)],
) -> Result<codex_bridge::store::Store> {
    use codex_bridge::config::{env_name, Config};
    use codex_bridge::store::{Store, StoreSettings};
    let mut env = std::collections::BTreeMap::from([
        (
            env_name("database_url"),
            format!("sqlite://{}", path.display()),
        ),
        (env_name("user_triggers_per_hour"), "0".to_owned()),
    ]);
    env.extend(extra.iter().map(|(k, v)| (env_name(k), (*v).to_owned())));
    let config = Config::from_sources(None, &env)
        .map_err(|e| anyhow::anyhow!("the default configuration: {e}"))?;
    Store::open(&StoreSettings::from_config(&config))
        .map_err(|e| anyhow::anyhow!("opening the store at {}: {e}", path.display()))
}

/// Delivery `seq` of the store-only load, under `delivery_key`: like the
/// ingest bench's HTTP deliveries, comment ids in order, spread over
/// [`REPOS`] × [`ISSUES_PER_REPO`] Issues.
pub fn spread_trigger(seq: u64, delivery_key: String) -> IngestRequest {
    let repo = format!("repo{}", seq % REPOS);
    let issue = (1 + (seq / REPOS) % ISSUES_PER_REPO) as i64;
    let comment = 1_000_000 + seq as i64;
    let text = "@ccbot please fix the flaky parser test".to_owned();
    let mut req = crate::common::trigger_request(&repo, issue, comment, &comment.to_string(), text);
    req.delivery_key = delivery_key;
    req
}
