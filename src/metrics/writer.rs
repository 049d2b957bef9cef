//! What the store's writer spends per commit: how many operations a group
//! commit carries, how long its transaction takes, the writer thread's CPU
//! time, and the WAL's syncs and bytes. These say where a durable accept's
//! cost goes: work in SQLite (CPU) or waiting for the disk (sync), and how
//! many pages each commit dirties.

use prometheus::core::Metric;
use prometheus::proto::MetricFamily;
use prometheus::{Histogram, HistogramOpts, IntCounter, Opts, Registry};
use std::sync::OnceLock;
use std::time::Duration;

/// Operations per group commit (deliveries and other writes).
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
/// A transaction or a sync: from a tenth of a millisecond to a second.
const IO_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 1.0,
];

struct StoreMetrics {
    registry: Registry,
    batch: Histogram,
    transaction: Histogram,
    writer_cpu_micros: IntCounter,
    wal_sync: Histogram,
    wal_bytes: IntCounter,
}

fn build() -> prometheus::Result<StoreMetrics> {
    let registry = Registry::new();
    let histogram = |name: &str, help: &str, buckets: &[f64]| {
        let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))?;
        registry.register(Box::new(h.clone()))?;
        Ok::<_, prometheus::Error>(h)
    };
    let counter = |name: &str, help: &str| {
        let c = IntCounter::with_opts(Opts::new(name, help))?;
        registry.register(Box::new(c.clone()))?;
        Ok::<_, prometheus::Error>(c)
    };
    Ok(StoreMetrics {
        batch: histogram(
            "codex_bridge_store_commit_operations",
            "Writes carried by one commit of the store's writer (group commit).",
            BATCH_BUCKETS,
        )?,
        transaction: histogram(
            "codex_bridge_store_transaction_seconds",
            "Time of one writer transaction, from its start to its commit being durable.",
            IO_BUCKETS,
        )?,
        writer_cpu_micros: counter(
            "codex_bridge_store_writer_cpu_microseconds_total",
            "CPU time the store's writer threads spent in their transactions, in microseconds.",
        )?,
        wal_sync: histogram(
            "codex_bridge_store_wal_sync_seconds",
            "Time of one sync of SQLite's WAL file (fdatasync): the disk's part of a commit.",
            IO_BUCKETS,
        )?,
        wal_bytes: counter(
            "codex_bridge_store_wal_bytes_total",
            "Bytes SQLite appended to its WAL (each page plus its 24-byte frame header).",
        )?,
        registry,
    })
}

fn metrics() -> Option<&'static StoreMetrics> {
    static M: OnceLock<Option<StoreMetrics>> = OnceLock::new();
    M.get_or_init(|| match build() {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::error!("the store's metrics could not be registered: {e}");
            None
        }
    })
    .as_ref()
}

/// The CPU time this thread has used so far.
pub fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// One writer transaction that carried `operations` writes.
pub fn transaction(operations: usize, took: Duration, cpu: Duration) {
    if let Some(m) = metrics() {
        m.batch.observe(operations as f64);
        m.transaction.observe(took.as_secs_f64());
        m.writer_cpu_micros.inc_by(cpu.as_micros() as u64);
    }
}

/// One sync of a WAL file.
pub fn wal_sync(took: Duration) {
    if let Some(m) = metrics() {
        m.wal_sync.observe(took.as_secs_f64());
    }
}

/// `bytes` appended to a WAL file.
pub fn wal_bytes(bytes: usize) {
    if let Some(m) = metrics() {
        m.wal_bytes.inc_by(bytes as u64);
    }
}

pub(super) fn families() -> Vec<MetricFamily> {
    metrics().map(|m| m.registry.gather()).unwrap_or_default()
}

/// Totals since the process started, for a benchmark's report.
#[derive(Debug, Clone, Default)]
pub struct WriterTotals {
    pub transactions: u64,
    pub operations: f64,
    pub transaction_seconds: f64,
    pub writer_cpu_seconds: f64,
    pub syncs: u64,
    pub sync_seconds: f64,
    /// Syncs per upper bound of [`IO_BUCKETS`] (cumulative, as Prometheus).
    pub sync_buckets: Vec<(f64, u64)>,
    pub wal_bytes: u64,
}

impl WriterTotals {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &WriterTotals) -> WriterTotals {
        WriterTotals {
            transactions: self.transactions - earlier.transactions,
            operations: self.operations - earlier.operations,
            transaction_seconds: self.transaction_seconds - earlier.transaction_seconds,
            writer_cpu_seconds: self.writer_cpu_seconds - earlier.writer_cpu_seconds,
            syncs: self.syncs - earlier.syncs,
            sync_seconds: self.sync_seconds - earlier.sync_seconds,
            sync_buckets: self
                .sync_buckets
                .iter()
                .zip(&earlier.sync_buckets)
                .map(|((le, n), (_, m))| (*le, n - m))
                .collect(),
            wal_bytes: self.wal_bytes - earlier.wal_bytes,
        }
    }

    /// The smallest bucket bound at or under which a share `q` of the syncs
    /// fell (an upper estimate of that quantile).
    pub fn sync_quantile(&self, q: f64) -> Option<f64> {
        let want = (q * self.syncs as f64).ceil() as u64;
        self.sync_buckets
            .iter()
            .find(|(_, n)| *n >= want.max(1))
            .map(|(le, _)| *le)
    }
}

pub fn writer_totals() -> WriterTotals {
    let Some(m) = metrics() else {
        return WriterTotals::default();
    };
    let sync = m.wal_sync.metric();
    let sync = sync.get_histogram();
    WriterTotals {
        transactions: m.transaction.get_sample_count(),
        operations: m.batch.get_sample_sum(),
        transaction_seconds: m.transaction.get_sample_sum(),
        writer_cpu_seconds: m.writer_cpu_micros.get() as f64 / 1e6,
        syncs: m.wal_sync.get_sample_count(),
        sync_seconds: m.wal_sync.get_sample_sum(),
        sync_buckets: sync
            .get_bucket()
            .iter()
            .map(|b| (b.upper_bound(), b.cumulative_count()))
            .collect(),
        wal_bytes: m.wal_bytes.get(),
    }
}
