//! What a run says about its storage: PostgreSQL's durability settings,
//! SQLite's folder and filesystem, and the store-only ceiling.

use super::*;

#[derive(diesel::QueryableByName)]
pub(super) struct PgSetting {
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub(super) name: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub(super) setting: String,
}

/// The durability settings of the PostgreSQL in use: they decide what a commit costs.
pub(super) fn postgres_note(url: &str) -> String {
    let settings = diesel::PgConnection::establish(url)
        .map_err(anyhow::Error::from)
        .and_then(|mut c| {
            diesel::sql_query(
                "SELECT name, setting FROM pg_settings \
                 WHERE name IN ('fsync', 'synchronous_commit', 'server_version') ORDER BY name",
            )
            .load::<PgSetting>(&mut c)
            .map_err(anyhow::Error::from)
        });
    match settings {
        Ok(rows) => {
            let text: Vec<String> = rows
                .iter()
                .map(|r| format!("{}={}", r.name, r.setting))
                .collect();
            format!("postgres: {}", text.join(", "))
        }
        Err(e) => format!("postgres: settings unknown ({e:#})"),
    }
}

/// Deliveries per second through the server's own store (SQLite file in the
/// temp dir, the settings `serve` derives from its default configuration, and
/// its group-commit writer), fed by `callers` concurrent in-process callers for
/// `measured` (or until `total` deliveries are stored): the durable ceiling
/// that HTTP, signature checks and JSON parsing stand in front of.
pub(super) fn store_only_rate(
    callers: usize,
    measured: Duration,
    total: usize,
) -> Result<(u64, f64)> {
    use codex_bridge::domain::IngestRequest;
    let dir = tempfile::tempdir().context("creating the store-only database folder")?;
    let store = store_only::configured_sqlite_store(&dir.path().join("store-only.db"), &[])?;
    // A random delivery id, as Gitea's.
    let request =
        |seq: u64| store_only::spread_trigger(seq, format!("default:{}", uuid::Uuid::new_v4()));
    // Built before the clock starts, and within the outboxes' capacity.
    let total = total.min((REPOS * ISSUES_PER_REPO * 200) as usize);
    let mut pools: Vec<Vec<IngestRequest>> = vec![Vec::new(); callers];
    for seq in 0..total as u64 {
        pools[seq as usize % callers].push(request(seq));
    }
    eprintln!(
        "[store-only] {total} requests built; measuring for {:.1} s",
        measured.as_secs_f64()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let before = codex_bridge::metrics::writer::writer_totals();
    let started = Instant::now();
    let done = rt.block_on(async {
        let deadline = tokio::time::Instant::now() + measured;
        let tasks: Vec<_> = pools
            .into_iter()
            .map(|pool| {
                let store = store.clone();
                async move {
                    let mut n = 0u64;
                    for req in pool {
                        if tokio::time::Instant::now() >= deadline {
                            break;
                        }
                        match store.ingest(req).await {
                            Ok(codex_bridge::store::ingest::IngestOutcome::Accepted { .. }) => {
                                n += 1
                            }
                            other => return Err(anyhow::anyhow!("store-only ingest: {other:?}")),
                        }
                    }
                    Ok(n)
                }
            })
            .collect();
        let started = Instant::now();
        let counts = futures_util::future::join_all(tasks).await;
        let took = started.elapsed();
        counts
            .into_iter()
            .sum::<Result<u64>>()
            .map(|n| (n, n as f64 / took.as_secs_f64()))
    })?;
    let spent = codex_bridge::metrics::writer::writer_totals().since(&before);
    let wall = started.elapsed().as_secs_f64();
    // The disk's own sync rate, with appends of the size the writer's
    // commits made, in the same folder.
    let commit_bytes = (spent.wal_bytes / spent.transactions.max(1)).max(4096) as usize;
    let disk = costs::disk_sync(dir.path(), commit_bytes, 2.0)
        .map_err(|e| eprintln!("[store-only] the disk's sync probe failed: {e:#}"))
        .ok();
    costs::print(&spent, done.0, wall, disk.as_ref());
    Ok(done)
}

/// Where the SQLite files go, and on what filesystem (tmpfs would make fsync free).
pub(super) fn sqlite_storage_note() -> String {
    let dir = std::env::temp_dir();
    let fs = std::fs::read_to_string("/proc/mounts")
        .ok()
        .and_then(|mounts| {
            mounts
                .lines()
                .filter_map(|l| {
                    let mut f = l.split_whitespace();
                    let (_, mount, fstype) = (f.next()?, f.next()?, f.next()?);
                    dir.starts_with(mount)
                        .then(|| (mount.len(), format!("{fstype} mounted on {mount}")))
                })
                .max_by_key(|(len, _)| *len)
                .map(|(_, text)| text)
        });
    format!(
        "sqlite: database files in {} ({}), WAL + synchronous=FULL (the server's settings)",
        dir.display(),
        fs.unwrap_or_else(|| "filesystem unknown".into())
    )
}
