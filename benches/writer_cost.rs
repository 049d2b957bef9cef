//! The store's writer, counted rather than timed: `BENCH_DELIVERIES` webhook
//! accepts (default 8,000) through the same store and writer as the server,
//! fed in-process by 64 callers in batches of up to 32 (what the group commit
//! forms under load; `BENCH_BATCH_MAX` sets another bound, to tell what a
//! batch costs from what a delivery does), on a fresh SQLite database.
//!
//! Timed, it is the store-only ceiling of `benches/ingest.rs`. Its point is
//! to be run under callgrind by `scripts/writer-instructions`, which counts
//! the instructions of the writer thread for N and for 2N deliveries: the
//! difference, divided by N, is what one accept costs the writer once the
//! database holds N deliveries. That figure does not move with what else the
//! machine is doing, where the writer's CPU time per delivery moved by a
//! sixth between hours of one day on the same code (docs/PERFORMANCE.md).

#[path = "common/mod.rs"]
#[allow(dead_code)]
mod common;
#[path = "common/store_only.rs"]
mod store_only;

use anyhow::{anyhow, Context, Result};

/// Callers: as the ingest bench's connections.
const CALLERS: usize = 64;

fn main() -> Result<()> {
    let n: u64 = match std::env::var("BENCH_DELIVERIES") {
        Ok(v) => v
            .parse()
            .with_context(|| format!("BENCH_DELIVERIES={v:?} is not a count"))?,
        Err(_) => 8_000,
    };
    let dir = tempfile::tempdir().context("creating the database folder")?;
    // Batches as the group commit forms them at 64 connections; without a
    // bound, a slow run (under callgrind) would batch everything queued.
    let batch = std::env::var("BENCH_BATCH_MAX").unwrap_or_else(|_| "32".to_owned());
    let store = store_only::configured_sqlite_store(
        &dir.path().join("writer.db"),
        &[("writer_batch_max", batch.as_str())],
    )?;
    // A random-looking delivery id (as Gitea's), the same in every run, so two
    // runs insert the same keys in the same order.
    let request = |seq: u64| {
        let id = (u128::from(seq) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
        store_only::spread_trigger(seq, format!("default:{}", uuid::Uuid::from_u128(id)))
    };
    let mut pools: Vec<Vec<_>> = vec![Vec::new(); CALLERS];
    for seq in 0..n {
        pools[seq as usize % CALLERS].push(request(seq));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let before = codex_bridge::metrics::writer::writer_totals();
    rt.block_on(async {
        let callers = pools.into_iter().map(|pool| {
            let store = store.clone();
            async move {
                for req in pool {
                    match store.ingest(req).await {
                        Ok(codex_bridge::store::ingest::IngestOutcome::Accepted { .. }) => {}
                        other => return Err(anyhow!("an accept failed: {other:?}")),
                    }
                }
                Ok(())
            }
        });
        futures_util::future::join_all(callers)
            .await
            .into_iter()
            .collect::<Result<()>>()
    })?;
    let spent = codex_bridge::metrics::writer::writer_totals().since(&before);
    println!(
        "{n} deliveries in {} commits ({:.1} per commit), {:.0} WAL bytes per delivery, \
         {} page-cache sweeps passed over; the writer's CPU {:.1} us and its transactions \
         {:.1} us per delivery",
        spent.transactions,
        n as f64 / spent.transactions.max(1) as f64,
        spent.wal_bytes as f64 / n.max(1) as f64,
        codex_bridge::store::pcache::sweeps_skipped(),
        spent.writer_cpu_seconds * 1e6 / n.max(1) as f64,
        spent.transaction_seconds * 1e6 / n.max(1) as f64,
    );
    Ok(())
}

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
