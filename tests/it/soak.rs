//! The soak: the crash loop's server and steady load (`crashloop/load.rs`)
//! without the kills, for a while, sampling the server process every few
//! seconds: its resident memory (and, from its `/metrics`, the parts of it:
//! the allocator's live and resident bytes, SQLite's heap), its open file
//! descriptors, the SQLite WAL file, and how long the tasks that ended since the last sample took from
//! accept to their end. It prints one line per minute and fails when the
//! end of the run is worse than its start (after a minute's warm-up) by
//! more than the bounds below; once the load stops, every task must end.
//!
//! CI runs two minutes; the long run is
//! `CODEX_BRIDGE_TEST_SOAK_SECS=1800 scripts/test --test it -- soak --nocapture`.

use crate::crashloop::{load::Load, settle, start, Db, Operator};
use crate::support::*;
use codex_bridge::store::SQLITE_HEAP_LIMIT;
use diesel::prelude::*;
use std::time::{Duration, Instant};

/// Resident memory is judged as a whole and by the parts a leak would show
/// in, from where it stood after the warm-up to the end:
/// - what the program holds (the allocator's live bytes) grows by at most
///   a quarter and 4 MiB: a leak of a few KiB per task over a long run
///   does not stay under that;
/// - SQLite's heap (its page caches above all) stays near its soft limit,
///   [`SQLITE_HEAP_LIMIT`], at every sample;
/// - resident memory as a whole grows by at most SQLite's room under that
///   limit plus 32 MiB: the pages the allocator keeps for reuse (spread
///   over its arenas, purged in the background), the code paged in as the
///   run reaches more of it, thread stacks. Those level off; a leak of
///   either heap does not.
const LIVE_GROWTH: f64 = 1.25;
const LIVE_SLACK_KIB: u64 = 4 * 1024;
const SQLITE_SLACK_KIB: u64 = 4 * 1024;
const RSS_SLACK_KIB: u64 = 32 * 1024;
/// Open descriptors: a few in flight at any moment, never a steady climb.
const FD_SLACK: u64 = 24;
/// The WAL is checkpointed as it goes; it never holds the whole run.
const WAL_MAX_BYTES: u64 = 64 << 20;
/// Latency may double, plus 5 s (a turn is seconds of Codex's own work).
const LATENCY_GROWTH: f64 = 2.0;
const LATENCY_SLACK: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    rss_kib: u64,
    fds: u64,
    wal_bytes: u64,
    /// The server's own account (`/metrics`): what its allocator has handed
    /// out, what of the allocator's pages is resident, and SQLite's heap.
    heap_allocated_kib: u64,
    heap_resident_kib: u64,
    sqlite_kib: u64,
    /// Median accept-to-end time of the tasks that ended in the window.
    latency: Option<Duration>,
    ended: usize,
}

impl Sample {
    /// The lowest of each measure over `samples` (the last one's time).
    fn floor(samples: &[&Sample]) -> Sample {
        let min = |f: fn(&Sample) -> u64| samples.iter().map(|s| f(s)).min().unwrap_or(0);
        Sample {
            at: samples.last().map_or(Duration::ZERO, |s| s.at),
            rss_kib: min(|s| s.rss_kib),
            fds: min(|s| s.fds),
            wal_bytes: min(|s| s.wal_bytes),
            heap_allocated_kib: min(|s| s.heap_allocated_kib),
            heap_resident_kib: min(|s| s.heap_resident_kib),
            sqlite_kib: min(|s| s.sqlite_kib),
            latency: None,
            ended: 0,
        }
    }

    /// Resident memory that is neither the allocator's nor SQLite's.
    fn rest_kib(&self) -> u64 {
        self.rss_kib
            .saturating_sub(self.heap_resident_kib)
            .saturating_sub(self.sqlite_kib)
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

fn fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64
}

#[derive(QueryableByName)]
struct Ended {
    #[diesel(sql_type = diesel::sql_types::Text)]
    created_at: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    updated_at: String,
}

fn parse(t: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(t).unwrap().into()
}

/// The median accept-to-end time of mentions that ended after `since`.
fn latency(db_url: &str, since: &str) -> (Option<Duration>, usize) {
    let sql = format!(
        "SELECT created_at, updated_at FROM tasks WHERE command IS NULL \
         AND state IN ('succeeded', 'succeeded_with_rest_fallback') AND updated_at > '{since}'"
    );
    let rows: Vec<Ended> =
        codex_bridge::with_conn!(&mut connect(db_url), |c| diesel::sql_query(&sql).load(c))
            .unwrap();
    let mut took: Vec<Duration> = rows
        .iter()
        .map(|r| {
            (parse(&r.updated_at) - parse(&r.created_at))
                .to_std()
                .unwrap_or_default()
        })
        .collect();
    took.sort();
    (took.get(took.len() / 2).copied(), took.len())
}

fn now_text() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

#[derive(QueryableByName)]
struct Bytes {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// Prints the store's size, the rows of its largest tables, and the size
/// a week at this run's rate of webhook deliveries comes to (before
/// retention, whose shortest default is 30 days, lets go of anything).
fn store_size(db_url: &str, took: Duration) {
    let mut c = connect(db_url);
    let bytes = codex_bridge::with_conn!(&mut c, |c| diesel::sql_query(
        "SELECT page_count * page_size AS n FROM pragma_page_count(), pragma_page_size()"
    )
    .get_result::<Bytes>(c))
    .unwrap()
    .n;
    let tables = [
        "webhook_deliveries",
        "tasks",
        "task_transitions",
        "audit_events",
        "turns",
        "turn_events",
        "transcript_items",
        "outbox_entries",
    ];
    let rows: Vec<String> = tables
        .iter()
        .map(|t| format!("{t} {}", count(&mut c, t)))
        .collect();
    let deliveries = count(&mut c, "webhook_deliveries").max(1);
    let per_delivery = bytes as f64 / deliveries as f64;
    let per_week = deliveries as f64 / took.as_secs_f64() * 7.0 * 86_400.0;
    eprintln!(
        "soak: store {:.1} MiB for {deliveries} deliveries ({:.1} KiB each, all tables); rows: {}; \
         a week at this rate ({:.0} deliveries) comes to {:.2} GiB",
        bytes as f64 / (1 << 20) as f64,
        per_delivery / 1024.0,
        rows.join(", "),
        per_week,
        per_week * per_delivery / (1u64 << 30) as f64,
    );
}

#[test]
fn soak_keeps_memory_descriptors_wal_and_latency_flat() {
    let secs = std::env::var("CODEX_BRIDGE_TEST_SOAK_SECS")
        .ok()
        .map(|v| {
            v.parse::<u64>()
                .expect("CODEX_BRIDGE_TEST_SOAK_SECS is seconds")
        })
        .unwrap_or(120);
    let (app, issues) = start(Db::Sqlite);
    let pid = app.pid();
    let wal = app.dir().join("bridge.db-wal");
    let load = Load::start(app.shared_peers(), app.db_url.clone(), issues, 7);
    let began = Instant::now();
    let every = Duration::from_secs(10);
    let mut samples: Vec<Sample> = Vec::new();
    let mut since = now_text();
    while began.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(every);
        let (latency, ended) = latency(&app.db_url, &since);
        since = now_text();
        let m = crate::metrics::scrape(&app.url("/metrics"), Some(ADMIN_TOKEN));
        let kib = |name: &str| crate::metrics::get(&m, name) as u64 / 1024;
        let s = Sample {
            heap_allocated_kib: kib("codex_bridge_heap_allocated_bytes"),
            heap_resident_kib: kib("codex_bridge_heap_resident_bytes"),
            sqlite_kib: kib("codex_bridge_sqlite_heap_bytes"),
            at: began.elapsed(),
            rss_kib: rss_kib(pid),
            fds: fds(pid),
            wal_bytes: std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0),
            latency,
            ended,
        };
        samples.push(s);
        if samples.len() % 6 == 0 {
            let minute: Vec<&Sample> = samples.iter().rev().take(6).collect();
            let ended: usize = minute.iter().map(|s| s.ended).sum();
            let worst = minute.iter().filter_map(|s| s.latency).max();
            eprintln!(
                "soak: minute {:>2}: rss {} MiB (heap {} of {} MiB resident, SQLite {} MiB, \
                 rest {} MiB), fds {}, wal {} KiB, {ended} tasks ended, median latency (worst \
                 window) {worst:.1?}",
                samples.len() / 6,
                s.rss_kib / 1024,
                s.heap_allocated_kib / 1024,
                s.heap_resident_kib / 1024,
                s.sqlite_kib / 1024,
                s.rest_kib() / 1024,
                s.fds,
                s.wal_bytes / 1024,
            );
        }
    }
    let record = load.finish();
    let mut operator = Operator::default();
    settle(&app, &mut operator);
    let tasks = count(&mut app.db(), "tasks");
    eprintln!(
        "soak: {} operations, {tasks} tasks, all ended",
        record.ops.len()
    );
    store_size(&app.db_url, began.elapsed());

    // Compared: the first minute after the warm-up, and the last minute,
    // each by its lowest sample of each measure: a burst in flight at one
    // sample is not growth, while a leak raises the floor too.
    let warm: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at >= Duration::from_secs(60))
        .collect();
    assert!(warm.len() >= 3, "too short to compare: {samples:?}");
    let window = warm.len().min(6);
    let (first, last) = (
        Sample::floor(&warm[..window]),
        Sample::floor(&warm[warm.len() - window..]),
    );
    let live_bound = (first.heap_allocated_kib as f64 * LIVE_GROWTH) as u64 + LIVE_SLACK_KIB;
    assert!(
        last.heap_allocated_kib <= live_bound,
        "the memory the program holds grew: {first:?} → {last:?}"
    );
    let sqlite_limit_kib = SQLITE_HEAP_LIMIT / 1024;
    for s in &samples {
        assert!(
            s.sqlite_kib <= sqlite_limit_kib + SQLITE_SLACK_KIB,
            "SQLite's heap is past its limit: {s:?}"
        );
    }
    let rss_bound =
        first.rss_kib + sqlite_limit_kib.saturating_sub(first.sqlite_kib) + RSS_SLACK_KIB;
    eprintln!(
        "soak: rss {:.1} → {:.1} MiB (bound {:.1}); the program's live heap {:.1} → {:.1} MiB \
         (bound {:.1}); SQLite at most {:.1} MiB (limit {}); fds {} → {}",
        first.rss_kib as f64 / 1024.0,
        last.rss_kib as f64 / 1024.0,
        rss_bound as f64 / 1024.0,
        first.heap_allocated_kib as f64 / 1024.0,
        last.heap_allocated_kib as f64 / 1024.0,
        live_bound as f64 / 1024.0,
        samples.iter().map(|s| s.sqlite_kib).max().unwrap_or(0) as f64 / 1024.0,
        sqlite_limit_kib / 1024,
        first.fds,
        last.fds,
    );
    assert!(
        last.rss_kib <= rss_bound,
        "resident memory grew past {} MiB: {first:?} → {last:?}",
        rss_bound / 1024
    );
    assert!(
        last.fds <= first.fds + FD_SLACK,
        "descriptors grew: {first:?} → {last:?}"
    );
    for s in &samples {
        assert!(s.wal_bytes <= WAL_MAX_BYTES, "WAL at {s:?}");
    }
    let median = |ss: &[&Sample]| {
        let mut l: Vec<Duration> = ss.iter().filter_map(|s| s.latency).collect();
        l.sort();
        l.get(l.len() / 2).copied()
    };
    let half = warm.len() / 2;
    if let (Some(early), Some(late)) = (median(&warm[..half.max(1)]), median(&warm[half..])) {
        let bound = early.mul_f64(LATENCY_GROWTH) + LATENCY_SLACK;
        assert!(late <= bound, "latency grew: {early:?} → {late:?}");
    } else {
        panic!("no task ended while measured: {samples:?}");
    }
}
