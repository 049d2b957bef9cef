//! The store's settings from the configuration: the configuration says what
//! the operator asked for in plain values, and the store turns them into its
//! own settings here, so that `config` needs nothing of the store. The
//! database URL is the configuration's own [`crate::config::DatabaseUrl`],
//! parsed and redacted in one place.

use super::{ConnSettings, StoreSettings, WriterSettings};
use crate::config::Config;
use std::time::Duration;

/// Operations that may wait for the writer before callers get 503; not a
/// config key: it bounds memory, and 16k covers every burst measured.
const QUEUE_CAPACITY: usize = 16_384;

impl StoreSettings {
    pub fn from_config(config: &Config) -> StoreSettings {
        StoreSettings {
            url: config.database_url.clone(),
            read_pool_size: config.read_pool_size,
            sqlite_busy_timeout: Duration::from_millis(config.sqlite_busy_timeout_ms),
            writer: WriterSettings {
                batch_max: config.writer_batch_max,
                threads: config.writer_threads,
                queue_capacity: QUEUE_CAPACITY,
                ingest: super::ingest::IngestRules {
                    user_triggers_per_hour: config.limits.user_triggers_per_hour,
                },
            },
        }
    }
}

impl ConnSettings {
    /// One connection as the command line opens it, outside the pools.
    pub fn from_config(config: &Config) -> ConnSettings {
        ConnSettings {
            url: config.database_url.clone(),
            sqlite_busy_timeout: Duration::from_millis(config.sqlite_busy_timeout_ms),
            read_only: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_configured_tuning_reaches_the_store() {
        let env: BTreeMap<String, String> = [
            ("CODEX_BRIDGE_DATABASE_URL", "postgres://u:pw@h/db"),
            ("CODEX_BRIDGE_WRITER_BATCH_MAX", "17"),
            ("CODEX_BRIDGE_WRITER_THREADS", "3"),
            ("CODEX_BRIDGE_READ_POOL_SIZE", "5"),
            ("CODEX_BRIDGE_SQLITE_BUSY_TIMEOUT_MS", "250"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let config = Config::from_sources(None, &env).unwrap();
        let s = StoreSettings::from_config(&config);
        assert_eq!(
            s.url,
            crate::config::DatabaseUrl::Postgres("postgres://u:pw@h/db".into())
        );
        assert_eq!((s.writer.batch_max, s.writer.threads), (17, 3));
        assert_eq!(s.read_pool_size, 5);
        assert_eq!(s.sqlite_busy_timeout, Duration::from_millis(250));
        assert_eq!(ConnSettings::from_config(&config).url, s.url);
    }
}
