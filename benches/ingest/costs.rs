//! Where the store-only writer's time goes, per delivery: its CPU in
//! SQLite and the ingest's code, its waits on the WAL's sync, and the bytes
//! it appends to the WAL; next to the disk's own sync rate measured in the
//! same run (the machine's part of the limit).

use anyhow::{Context, Result};
use codex_bridge::metrics::writer::WriterTotals;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// SQLite's page size in the store (its default).
const PAGE: f64 = 4096.0;
/// The WAL's frame: a page plus its header.
const FRAME: f64 = PAGE + 24.0;

/// The disk's own figures: appends of `bytes` each followed by fdatasync,
/// as a WAL commit does, for `seconds`, in `dir` (the store's folder).
pub struct DiskSync {
    pub syncs: usize,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub bytes: usize,
}

pub fn disk_sync(dir: &Path, bytes: usize, seconds: f64) -> Result<DiskSync> {
    let path = dir.join("sync-probe");
    let file = std::fs::File::create(&path)
        .with_context(|| format!("creating the sync probe {}", path.display()))?;
    let block = vec![0x5au8; bytes];
    let mut at = 0u64;
    let mut took = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs_f64(seconds) {
        let t = Instant::now();
        file.write_all_at(&block, at)?;
        file.sync_data()?;
        took.push(t.elapsed());
        at += bytes as u64;
    }
    let elapsed = started.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(&path);
    took.sort_unstable();
    let q = |p: f64| {
        took.get(((p * took.len() as f64).ceil() as usize).clamp(1, took.len().max(1)) - 1)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    Ok(DiskSync {
        syncs: took.len(),
        per_second: took.len() as f64 / elapsed.max(1e-9),
        p50_ms: q(0.50),
        p99_ms: q(0.99),
        bytes,
    })
}

/// Prints the writer's cost per delivery over a phase that stored
/// `stored` deliveries in `wall` seconds; `disk` is the same disk's probe.
pub fn print(t: &WriterTotals, stored: u64, wall: f64, disk: Option<&DiskSync>) {
    let n = stored.max(1) as f64;
    let commits = t.transactions.max(1) as f64;
    let cpu_us = t.writer_cpu_seconds / n * 1e6;
    let tx_us = t.transaction_seconds / n * 1e6;
    let sync_us = t.sync_seconds / n * 1e6;
    let q = |p: f64| {
        t.sync_quantile(p)
            .map_or("-".into(), |s| format!("{:.2}", s * 1000.0))
    };
    println!("  the writer per delivery ({stored} stored in {wall:.1} s, {} commits, {:.1} writes per commit):",
        t.transactions, t.operations / commits);
    println!(
        "    transaction time {tx_us:.1} us = the writer's CPU {cpu_us:.1} us \
         + off the CPU {:.1} us; the WAL's syncs (on the syncer thread, beside the writer) took {sync_us:.1} us \
         ({} syncs, {:.2} ms each on average, p50 <= {} ms, p99 <= {} ms)",
        (tx_us - cpu_us).max(0.0),
        t.syncs,
        t.sync_seconds / t.syncs.max(1) as f64 * 1000.0,
        q(0.50),
        q(0.99),
    );
    println!(
        "    WAL appended {:.0} bytes per delivery, {:.2} pages ({:.0} KiB per commit); writer busy {:.0}% of the phase",
        t.wal_bytes as f64 / n,
        t.wal_bytes as f64 / FRAME / n,
        t.wal_bytes as f64 / commits / 1024.0,
        t.transaction_seconds / wall.max(1e-9) * 100.0
    );
    if let Some(d) = disk {
        println!(
            "    the disk alone: {:.0} syncs/s of {} KiB appends (p50 {:.2} ms, p99 {:.2} ms, {} syncs)",
            d.per_second,
            d.bytes / 1024,
            d.p50_ms,
            d.p99_ms,
            d.syncs
        );
    }
    let _ = std::io::stdout().flush();
}
