//! Accepted webhooks per second with N instances on one database, and the
//! database's own limit: one durable single-row commit at a time.

use crate::pg::PgDatabase;
use crate::rig::{self, CpuMeter, CpuUse, Observer};
use crate::store_only::spread_trigger;
use anyhow::{anyhow, bail, Context as _, Result};
use codex_bridge::store::ingest::IngestOutcome;
use codex_bridge::store::signals::Signal;
use codex_bridge::store::Store;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long, and with how many callers per instance.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub callers: usize,
    pub warmup: Duration,
    pub measured: Duration,
}

#[derive(Debug, Clone)]
pub struct Figures {
    pub instances: usize,
    /// Accepts per second of each instance over the measured phase.
    pub per_instance: Vec<f64>,
    pub total: f64,
    /// Milliseconds from the call to its commit, over every instance.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub cpu: CpuUse,
    /// Deliveries stored, over the whole run (warm-up included).
    pub accepted: u64,
    /// Deadlocks PostgreSQL detected between the writers' transactions.
    pub deadlocks: i64,
}

/// What one instance's callers did.
#[derive(Default)]
struct Tally {
    accepted: AtomicU64,
    failed: AtomicU64,
    first_failure: Mutex<Option<String>>,
    /// Microseconds, taken only while the phase is measured.
    latencies: Mutex<Vec<u32>>,
}

/// `n` stores, each fed by its own callers on a thread of its own, all at
/// once; the rates of the measured phase.
pub fn run(db: &PgDatabase, n: usize, plan: Plan) -> Result<Figures> {
    let stores = rig::open_stores(&db.url, n, &[])?;
    // Each listens to the others' signals, as a server does; there is no
    // actor here to wake, so PostgreSQL's delivery of them is what it costs.
    for store in &stores {
        store.listen(|_| {})?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let tallies: Vec<Arc<Tally>> = (0..n).map(|_| Arc::default()).collect();
    let mut threads = Vec::new();
    for (i, store) in stores.into_iter().enumerate() {
        let (stop, measuring, tally) = (stop.clone(), measuring.clone(), tallies[i].clone());
        let first_caller = (i * plan.callers) as u64;
        let all_callers = (n * plan.callers) as u64;
        threads.push(
            std::thread::Builder::new()
                .name(format!("load-{i}"))
                .spawn(move || -> Result<()> {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    rt.block_on(feed(
                        store,
                        (first_caller, plan.callers as u64, all_callers),
                        stop,
                        measuring,
                        tally,
                    ));
                    Ok(())
                })
                .context("starting a load thread")?,
        );
    }
    std::thread::sleep(plan.warmup);
    let before: Vec<u64> = tallies
        .iter()
        .map(|t| t.accepted.load(Ordering::Relaxed))
        .collect();
    let cpu = CpuMeter::start(db.backend_pids());
    let started = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    std::thread::sleep(plan.measured);
    measuring.store(false, Ordering::Relaxed);
    let after: Vec<u64> = tallies
        .iter()
        .map(|t| t.accepted.load(Ordering::Relaxed))
        .collect();
    let took = started.elapsed().as_secs_f64();
    let cpu = cpu.stop();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().map_err(|_| anyhow!("a load thread panicked"))??;
    }
    let failed: u64 = tallies
        .iter()
        .map(|t| t.failed.load(Ordering::Relaxed))
        .sum();
    if failed > 0 {
        let first = tallies
            .iter()
            .find_map(|t| t.first_failure.lock().ok().and_then(|f| f.clone()))
            .unwrap_or_default();
        bail!("{n} instance(s): {failed} deliveries not accepted; the first: {first}");
    }
    let accepted: u64 = tallies
        .iter()
        .map(|t| t.accepted.load(Ordering::Relaxed))
        .sum();
    let mut db_view = Observer::connect(&db.url)?;
    let deadlocks = db_view.deadlocks_after_exit()?;
    check_one_task_each(&mut db_view, accepted)?;
    let per_instance: Vec<f64> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a - b) as f64 / took)
        .collect();
    let mut latencies: Vec<f64> = tallies
        .iter()
        .filter_map(|t| t.latencies.lock().ok().map(|l| l.clone()))
        .flatten()
        .map(|us| f64::from(us) / 1000.0)
        .collect();
    latencies.sort_by(f64::total_cmp);
    Ok(Figures {
        instances: n,
        total: per_instance.iter().sum(),
        per_instance,
        p50_ms: crate::common::percentile(&latencies, 0.5),
        p99_ms: crate::common::percentile(&latencies, 0.99),
        cpu,
        accepted,
        deadlocks,
    })
}

/// One instance's callers, each sending its own deliveries one after the
/// other until `stop`: caller `c` of `callers` sends sequence numbers
/// `c`, `c + all`, `c + 2·all`, … so no two callers anywhere send the same
/// comment. As the webhook does, each accept is followed by the signal that
/// tells the other instances.
async fn feed(
    store: Store,
    (first, callers, all): (u64, u64, u64),
    stop: Arc<AtomicBool>,
    measuring: Arc<AtomicBool>,
    tally: Arc<Tally>,
) {
    let tasks = (first..first + callers).map(|caller| {
        let (store, stop, measuring, tally) = (
            store.clone(),
            stop.clone(),
            measuring.clone(),
            tally.clone(),
        );
        async move {
            let mut seq = caller;
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // A random delivery id, as Gitea's; built as it is sent (a
                // few µs, against the ~100 µs and more a durable accept costs).
                let req = spread_trigger(seq, format!("default:{}", uuid::Uuid::new_v4()));
                seq += all;
                let repo_key = req.subject.as_ref().map(|s| s.repo.repo_key().clone());
                let t = Instant::now();
                match store.ingest(req).await {
                    Ok(IngestOutcome::Accepted { .. }) => {
                        tally.accepted.fetch_add(1, Ordering::Relaxed);
                        if measuring.load(Ordering::Relaxed) {
                            latencies.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        }
                        if let Some(repo_key) = repo_key {
                            store.signal(Signal::Repo { repo_key });
                        }
                    }
                    other => {
                        tally.failed.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut first) = tally.first_failure.lock() {
                            first.get_or_insert_with(|| format!("{other:?}"));
                        }
                    }
                }
            }
            if let Ok(mut all) = tally.latencies.lock() {
                all.extend(latencies);
            }
        }
    });
    futures_util::future::join_all(tasks).await;
}

/// Every accepted delivery is stored once with exactly one task of its own.
fn check_one_task_each(db: &mut Observer, accepted: u64) -> Result<()> {
    let deliveries = db.count("SELECT count(*) AS n FROM webhook_deliveries")?;
    let tasks = db.count("SELECT count(*) AS n FROM tasks")?;
    let orphans = db.count(
        "SELECT count(*) AS n FROM webhook_deliveries d \
         LEFT JOIN tasks t ON t.task_id = d.task_id WHERE t.task_id IS NULL",
    )?;
    let shared = db.count(
        "SELECT count(*) AS n FROM (SELECT task_id FROM webhook_deliveries \
         WHERE task_id IS NOT NULL GROUP BY task_id HAVING count(*) > 1) s",
    )?;
    let accepted = accepted as i64;
    if deliveries != accepted || tasks != accepted || orphans != 0 || shared != 0 {
        bail!(
            "{accepted} accepted, but {deliveries} deliveries and {tasks} tasks stored; \
             {orphans} deliveries without their task, {shared} tasks named by several deliveries"
        );
    }
    Ok(())
}

/// One durable single-row commit at a time through a store's writer, for
/// `measured`: PostgreSQL's commit rate when nothing can be grouped, i.e.
/// the WAL flush the machine's disk and PostgreSQL give one commit.
pub fn single_row_commits(db: &PgDatabase, measured: Duration) -> Result<(f64, f64, f64)> {
    use codex_bridge::store::audit::{record, Audit};
    let store = rig::open_store(&db.url, &[])?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut ms = Vec::new();
    let started = Instant::now();
    rt.block_on(async {
        while started.elapsed() < measured {
            let t = Instant::now();
            store
                .write(|c| record(c, &Audit::new("bench.commit", "bench")).map(|_| ()))
                .await?;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        Ok::<_, anyhow::Error>(())
    })?;
    let rate = ms.len() as f64 / started.elapsed().as_secs_f64();
    ms.sort_by(f64::total_cmp);
    Ok((
        rate,
        crate::common::percentile(&ms, 0.5),
        crate::common::percentile(&ms, 0.99),
    ))
}
