//! Webhook ingest benchmark: how many signed Gitea webhooks per second the running
//! server durably accepts, and at what latency.
//!
//! `scripts/bench` (which provides PostgreSQL through `TEST_DATABASE_URL`) runs
//! `cargo bench --bench ingest`. Each scenario gets a freshly started server process on
//! a fresh database, and this process is the load generator: one tokio current-thread
//! runtime driving keep-alive HTTP/1.1 connections over raw TCP, with every request
//! (body and signature) built before the clock starts, so that the client spends as
//! little as possible of the CPU it shares with the server.
//!
//! Scenarios: `hmac-only` (this binary re-executed as a minimal actix-web server that
//! only verifies the signature: the ceiling of HTTP + HMAC in the server's process
//! model), `sqlite-naive` / `postgres-naive` (one commit per request,
//! `writer_batch_max = 1`) and `sqlite-group` / `postgres-group` (default group commit).
//!
//! Environment: `BENCH_SECONDS` (measured phase, default 10), `BENCH_WARMUP_SECONDS`
//! (default 2), `BENCH_CONNECTIONS` (default 64), `BENCH_OUTSIDE=0` (skip the outside
//! generator), `BENCH_WRITER_THREADS` and `BENCH_BATCH_MAX` (the server's `writer_threads`
//! and, in the group-commit scenarios, `writer_batch_max`). Arguments that do not start with `-` select scenarios by substring
//! (`scripts/bench sqlite`).
//!
//! After the in-process generator, `hmac-only`, `sqlite-group` and `postgres-group` (those
//! selected) run again, each on a fresh server, under an outside generator: Debian's `wrk`
//! replaying pre-signed deliveries (`ingest/outside.rs`), with the first seconds reported
//! apart from the steady state.
//!
//! Without `--bench` (that is, under `cargo test --all-targets`) it runs a smoke
//! version instead: a few hundred requests against `hmac-only` and `sqlite-group`,
//! failing unless every answer is 202. Speed is never judged there.

// Only `trigger_request` is used here.
#[allow(dead_code)]
mod common;
#[path = "ingest/costs.rs"]
mod costs;
#[path = "ingest/outside.rs"]
mod outside;
#[path = "common/pg.rs"]
mod pg;
#[path = "common/store_only.rs"]
mod store_only;

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use anyhow::{bail, Context, Result};
use codex_bridge::webhook::verify;
use diesel::{Connection, RunQueryDsl};
use pg::PgDatabase;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The private argument that turns this binary into the HMAC-only server.
const SERVE_HMAC_ONLY_ARG: &str = "--serve-hmac-only";
/// How the HMAC-only child learns the secret: the environment, not argv (which `ps` shows).
const HMAC_SECRET_ENV: &str = "CODEX_BRIDGE_BENCH_HMAC_SECRET";
const FIXTURE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/gitea/issue_comment.created.issue.mention.json"
));
/// The login the fixture's comment mentions.
const BOT_LOGIN: &str = "ccbot";
use store_only::{ISSUES_PER_REPO, REPOS};
/// Above this share of failed requests a scenario fails.
const MAX_ERROR_RATE: f64 = 0.001;
/// Targets from the issue (2 cores, SQLite synchronous=FULL, 64 connections).
const TARGET_CEILING_SHARE: f64 = 0.25;
const TARGET_P99_MS: f64 = 25.0;
const TARGET_NAIVE_FACTOR: f64 = 4.0;
/// Requests built for the warm-up (and reused in a loop by `hmac-only`).
const WARMUP_POOL: usize = 8_000;
const SMOKE_REQUESTS: usize = 300;
const SMOKE_CONNECTIONS: usize = 8;
/// A server that does not answer within this is stuck, not slow.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Debug builds (smoke mode) start slower, and migrations run first.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);
/// Server log lines echoed per scenario; the rest are only counted, so that a server
/// logging every request does not drown the report (or eat the client's CPU).
const ECHOED_LOG_LINES: u64 = 20;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == SERVE_HMAC_ONLY_ARG) {
        serve_hmac_only()
    } else if args.iter().any(|a| a == "--bench") {
        run_full(&args)
    } else {
        run_smoke()
    }
}

// ---------------------------------------------------------------------------------
// Scenarios and settings
// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scenario {
    HmacOnly,
    SqliteNaive,
    SqliteGroup,
    PostgresGroup,
    PostgresNaive,
}

impl Scenario {
    const ALL: [Scenario; 5] = [
        Scenario::HmacOnly,
        Scenario::SqliteNaive,
        Scenario::SqliteGroup,
        Scenario::PostgresGroup,
        Scenario::PostgresNaive,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::HmacOnly => "hmac-only",
            Scenario::SqliteNaive => "sqlite-naive",
            Scenario::SqliteGroup => "sqlite-group",
            Scenario::PostgresGroup => "postgres-group",
            Scenario::PostgresNaive => "postgres-naive",
        }
    }

    fn is_postgres(self) -> bool {
        matches!(self, Scenario::PostgresGroup | Scenario::PostgresNaive)
    }

    /// `Some(1)` for the commit-per-request baselines; the default batching otherwise.
    fn batch_max(self) -> Option<usize> {
        match self {
            Scenario::SqliteNaive | Scenario::PostgresNaive => Some(1),
            _ => None,
        }
    }

    /// Whether the server stores what it gets: then every request must be new (a
    /// repeated comment id is a duplicate, answered 200), otherwise requests may repeat.
    fn stores(self) -> bool {
        self != Scenario::HmacOnly
    }
}

/// How one run drives each scenario.
struct Plan {
    connections: usize,
    /// `None`: no warm-up, and the measured phase uses `fixed_requests`.
    warmup: Option<Duration>,
    measured: Duration,
    /// Smoke mode: exactly this many requests, each answered, whatever the time.
    fixed_requests: Option<usize>,
}

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> Result<T> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("{name}=`{text}` is not a number")),
        _ => Ok(default),
    }
}

// ---------------------------------------------------------------------------------
// Modes
// ---------------------------------------------------------------------------------

fn run_full(args: &[String]) -> Result<()> {
    let seconds: f64 = env_number("BENCH_SECONDS", 10.0)?;
    let warmup: f64 = env_number("BENCH_WARMUP_SECONDS", 2.0)?;
    let connections: usize = env_number("BENCH_CONNECTIONS", 64)?;
    if !(seconds > 0.0 && warmup >= 0.0 && connections > 0) {
        bail!("BENCH_SECONDS and BENCH_CONNECTIONS must be positive, BENCH_WARMUP_SECONDS not negative");
    }
    let plan = Plan {
        connections,
        warmup: Some(Duration::from_secs_f64(warmup)),
        measured: Duration::from_secs_f64(seconds),
        fixed_requests: None,
    };
    // Positional arguments select scenarios; cargo's own flags start with '-'.
    let filters: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with('-'))
        .map(String::as_str)
        .collect();
    let scenarios: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|s| filters.is_empty() || filters.iter().any(|f| s.name().contains(f)))
        .collect();
    if scenarios.is_empty() {
        bail!(
            "no scenario matches {filters:?}; scenarios: {}",
            Scenario::ALL.map(Scenario::name).join(", ")
        );
    }
    let pg_url = std::env::var("TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if pg_url.is_none() && scenarios.iter().any(|s| s.is_postgres()) {
        // Never skip silently: a run without PostgreSQL would quietly lose half the report.
        bail!(
            "TEST_DATABASE_URL is not set, so the PostgreSQL scenarios cannot run. Run the benchmark \
             with scripts/bench, which starts a throwaway PostgreSQL and sets it (or pass scenario \
             names, e.g. `scripts/bench sqlite hmac`, to run only some)"
        );
    }

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "ingest benchmark: {connections} keep-alive connections, {warmup} s warm-up, then {seconds} s measured, \
         per scenario a freshly started server on a fresh database"
    );
    println!(
        "CPU split: {cores} cores shared by both processes. Load generator = this process, 1 thread \
         (tokio current-thread runtime), requests and signatures built before timing. Server = its own \
         process, actix-web's default {cores} workers (one per core) + store writer thread(s) \
         [+ the PostgreSQL backends in the postgres rows]."
    );
    println!("{}", sqlite_storage_note());
    if let Some(url) = &pg_url {
        println!("{}", postgres_note(url));
    }
    println!();

    let run = Run::new(pg_url)?;
    let mut reports = Vec::new();
    for scenario in scenarios {
        settle_disk();
        let report = run
            .scenario(scenario, &plan)
            .unwrap_or_else(|e| Report::failed(scenario, format!("{e:#}")));
        reports.push(report);
    }
    // The store's own limit in the same run: what the SQLite group-commit
    // writer takes when nothing stands in front of it.
    let store_only = if reports
        .iter()
        .any(|r| r.name == Scenario::SqliteGroup.name())
    {
        // Enough for 25k/s over the measured phase.
        let total = (plan.measured.as_secs_f64() * 25_000.0) as usize;
        settle_disk();
        Some(store_only_rate(connections, plan.measured, total)?.1)
    } else {
        None
    };
    println!();
    print_table(&reports);
    let checks = checks(&reports, connections);
    print_checks(&checks, connections);
    if let (Some(rate), Some(group)) = (
        store_only,
        reports
            .iter()
            .find(|r| r.name == Scenario::SqliteGroup.name()),
    ) {
        println!(
            "  store-only ceiling (the same store and writer fed in-process by {connections} callers: \
             no HTTP, HMAC or JSON): {rate:.0}/s; sqlite-group reaches {:.2} of it",
            group.accepted_per_s / rate
        );
    }
    // The outside generator, each scenario on a fresh server again.
    let mut outside_reports = Vec::new();
    let mut failed: Vec<String> = reports
        .iter()
        .filter(|r| r.failure.is_some())
        .map(|r| r.name.to_owned())
        .collect();
    if env_number("BENCH_OUTSIDE", 1u8)? != 0 {
        for scenario in [
            Scenario::HmacOnly,
            Scenario::SqliteGroup,
            Scenario::PostgresGroup,
        ] {
            let Some(inside) = reports.iter().find(|r| r.name == scenario.name()) else {
                continue;
            };
            let rate = (inside.accepted_per_s > 0.0).then_some(inside.accepted_per_s);
            match run.outside(scenario, &plan, rate) {
                Ok(r) => {
                    if r.problem().is_some() {
                        failed.push(format!("wrk {}", scenario.name()));
                    }
                    outside_reports.push(r);
                }
                Err(e) => {
                    eprintln!("[wrk {}] FAILED: {e:#}", scenario.name());
                    failed.push(format!("wrk {}", scenario.name()));
                }
            }
        }
        outside::print(&outside_reports, connections);
    }
    let path = write_json(
        &reports,
        &checks,
        &plan,
        cores,
        store_only,
        &outside_reports,
    )?;
    println!("\nfigures written to {}", path.display());
    if !failed.is_empty() {
        bail!("scenario(s) failed: {}", failed.join(", "));
    }
    Ok(())
}

fn run_smoke() -> Result<()> {
    println!(
        "ingest benchmark, smoke mode (no --bench argument): {SMOKE_REQUESTS} requests over \
         {SMOKE_CONNECTIONS} connections per scenario, every answer must be 202; speed is not judged"
    );
    let plan = Plan {
        connections: SMOKE_CONNECTIONS,
        warmup: None,
        measured: REQUEST_TIMEOUT,
        fixed_requests: Some(SMOKE_REQUESTS),
    };
    let run = Run::new(None)?;
    let mut reports = Vec::new();
    for scenario in [Scenario::HmacOnly, Scenario::SqliteGroup] {
        let mut report = run
            .scenario(scenario, &plan)
            .unwrap_or_else(|e| Report::failed(scenario, format!("{e:#}")));
        if report.failure.is_none()
            && (report.accepted as usize != SMOKE_REQUESTS || report.sent != report.accepted)
        {
            report.failure = Some(format!(
                "{} of {SMOKE_REQUESTS} requests accepted with 202 ({} sent)",
                report.accepted, report.sent
            ));
        }
        reports.push(report);
    }
    print_table(&reports);
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| r.failure.is_some())
        .map(|r| r.name)
        .collect();
    if !failed.is_empty() {
        bail!("smoke run failed: {}", failed.join(", "));
    }
    // The store-only loop: every delivery accepted, within a generous deadline.
    let (stored, rate) = store_only_rate(SMOKE_CONNECTIONS, REQUEST_TIMEOUT, SMOKE_REQUESTS)?;
    if stored as usize != SMOKE_REQUESTS {
        bail!("store-only: {stored} of {SMOKE_REQUESTS} deliveries stored");
    }
    println!("store-only: {SMOKE_REQUESTS} deliveries stored ({rate:.0}/s, not judged)");
    Ok(())
}

// ---------------------------------------------------------------------------------
// One scenario
// ---------------------------------------------------------------------------------

/// What a whole run shares: the secrets, the request factory, the client runtime.
struct Run {
    secret: String,
    admin_token: String,
    factory: RequestFactory,
    runtime: tokio::runtime::Runtime,
    pg_url: Option<String>,
}

impl Run {
    fn new(pg_url: Option<String>) -> Result<Run> {
        // Random per run and never printed; 64 hex characters like `openssl rand -hex 32`.
        let secret = random_hex();
        let factory = RequestFactory::new(&secret)?;
        Ok(Run {
            admin_token: random_hex(),
            secret,
            factory,
            // One thread: the other core(s) belong to the server (see the CPU split line).
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            pg_url,
        })
    }

    /// A freshly started server for `scenario`, on a fresh database.
    fn start(&self, scenario: Scenario) -> Result<Started> {
        let name = scenario.name();
        eprintln!("[{name}] starting the server");
        let pg = match (scenario.is_postgres(), &self.pg_url) {
            (true, Some(url)) => Some(PgDatabase::create(url)?),
            (true, None) => bail!("{name} needs TEST_DATABASE_URL (run scripts/bench)"),
            (false, _) => None,
        };
        let server = match scenario {
            Scenario::HmacOnly => Server::hmac_only(&self.secret)?,
            _ => Server::real(
                scenario,
                &self.secret,
                &self.admin_token,
                pg.as_ref().map(|p| p.url.as_str()),
            )?,
        };
        Ok(Started { server, pg })
    }

    /// `scenario` driven by the outside generator (see `outside.rs`): its
    /// first seconds, then its steady state. `rate`: what the in-process
    /// generator measured for it in this run, to size the pools.
    fn outside(
        &self,
        scenario: Scenario,
        plan: &Plan,
        rate: Option<f64>,
    ) -> Result<outside::OutsideReport> {
        let name = scenario.name();
        let mut pools = outside::Pools::new()?;
        let first_for = plan.warmup.unwrap_or_default().max(Duration::from_secs(1));
        let (first_pool, steady_pool) = if scenario.stores() {
            let rate = rate.unwrap_or(outside::DEFAULT_RATE);
            let first = outside::pool_size(rate, first_for, plan.connections);
            let steady = outside::pool_size(rate, plan.measured, plan.connections);
            eprintln!(
                "[wrk {name}] writing {} pre-signed deliveries",
                first + steady
            );
            (
                pools.write(&self.factory, "first", first)?,
                pools.write(&self.factory, "steady", steady)?,
            )
        } else {
            let p = pools.cyclic(&self.factory)?;
            (p.clone(), p)
        };
        settle_disk();
        let Started { server, pg } = self.start(scenario)?;
        eprintln!("[wrk {name}] first {:.0} s", first_for.as_secs_f64());
        let first = outside::run(
            &pools,
            &first_pool,
            server.addr,
            plan.connections,
            first_for,
        )?;
        eprintln!("[wrk {name}] steady {:.0} s", plan.measured.as_secs_f64());
        let steady = outside::run(
            &pools,
            &steady_pool,
            server.addr,
            plan.connections,
            plan.measured,
        )?;
        drop(server);
        drop(pg);
        let report = outside::OutsideReport {
            scenario,
            first,
            steady,
        };
        eprintln!(
            "[wrk {name}] done: {:.0}/s steady, p99 {:.2} ms",
            report.steady.rate(),
            report.steady.p99_ms
        );
        Ok(report)
    }

    fn scenario(&self, scenario: Scenario, plan: &Plan) -> Result<Report> {
        let name = scenario.name();
        let Started { server, pg } = self.start(scenario)?;
        let mut next_seq: u64 = 0;
        let mut warmup_pool = Vec::new();
        let mut warmup_rate = None;
        if let Some(warmup) = plan.warmup {
            warmup_pool = self.factory.build(next_seq, WARMUP_POOL)?;
            next_seq += WARMUP_POOL as u64;
            let outcome = self.runtime.block_on(run_phase(
                server.addr,
                &warmup_pool,
                !scenario.stores(),
                plan.connections,
                warmup,
                server.pid(),
                &[],
            ))?;
            let rate = outcome.sent as f64 / outcome.elapsed.as_secs_f64().max(1e-9);
            eprintln!(
                "[{name}] warm-up: {} requests in {:.2} s ({rate:.0}/s), {} errors{}",
                outcome.sent,
                outcome.elapsed.as_secs_f64(),
                outcome.error_count(),
                describe_errors(&outcome),
            );
            warmup_rate = Some(rate);
        }

        let (pool, cyclic) = match (plan.fixed_requests, warmup_rate) {
            (Some(n), _) => (self.factory.build(next_seq, n)?, false),
            // Requests may repeat when nothing is stored: reuse the warm-up's.
            (None, _) if !scenario.stores() => (std::mem::take(&mut warmup_pool), true),
            (None, rate) => {
                // Twice what the warm-up rate needs, so that the pool outlasts the phase
                // unless the server speeds up a lot; a session's outbox holds at most
                // OUTBOX_CAPACITY unfinished tasks, and nothing finishes them here.
                let capacity = ((REPOS * ISSUES_PER_REPO) as usize
                    * codex_bridge::store::ingest::OUTBOX_CAPACITY.max(0) as usize)
                    .saturating_sub(next_seq as usize + plan.connections);
                let wanted = rate.unwrap_or(1000.0) * plan.measured.as_secs_f64() * 2.0;
                let size = (wanted as usize + plan.connections * 32).min(capacity);
                eprintln!("[{name}] building {size} requests for the measured phase");
                (self.factory.build(next_seq, size)?, false)
            }
        };
        drop(warmup_pool);
        let duration = plan.measured;
        match plan.fixed_requests {
            Some(n) => eprintln!("[{name}] sending {n} requests"),
            None => eprintln!("[{name}] measuring for {:.1} s", duration.as_secs_f64()),
        }
        // The server's pools are connected by now; their backends do its SQL work.
        let db_pids = pg
            .as_ref()
            .map(PgDatabase::backend_pids)
            .unwrap_or_default();
        let outcome = self.runtime.block_on(run_phase(
            server.addr,
            &pool,
            cyclic,
            plan.connections,
            duration,
            server.pid(),
            &db_pids,
        ))?;
        drop(pool);
        let warnings = server.log.warnings.load(Ordering::Relaxed);
        let log_lines = server.log.lines.load(Ordering::Relaxed);
        drop(server);
        drop(pg);

        let mut report = Report::from_outcome(scenario, outcome, warmup_rate);
        report.server_log_lines = log_lines;
        report.server_warnings = warnings;
        if plan.fixed_requests.is_none() && report.pool_exhausted && scenario.stores() {
            report.notes.push(format!(
                "ran out of pre-built requests after {:.1} s; the rate covers that time only",
                report.elapsed_s
            ));
        }
        if report.sent > 0 && report.errors as f64 > MAX_ERROR_RATE * report.sent as f64 {
            report.failure = Some(format!(
                "{} of {} requests failed (more than {}%){}",
                report.errors,
                report.sent,
                MAX_ERROR_RATE * 100.0,
                describe_error_map(&report.errors_by_kind, &report.error_samples)
            ));
        } else if report.sent == 0 {
            report.failure = Some("no request was sent".into());
        }
        if let Some(f) = &report.failure {
            eprintln!("[{name}] FAILED: {f}");
        }
        eprintln!(
            "[{name}] done: {:.0} accepted/s, p99 {:.2} ms, {} errors, server log: {log_lines} lines ({warnings} warnings/errors)",
            report.accepted_per_s,
            report.p99_ms.unwrap_or(f64::NAN),
            report.errors
        );
        Ok(report)
    }
}

// ---------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------

struct Report {
    name: &'static str,
    sent: u64,
    accepted: u64,
    errors: u64,
    errors_by_kind: BTreeMap<String, u64>,
    error_samples: Vec<String>,
    accepted_per_s: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
    each_second: Vec<u64>,
    elapsed_s: f64,
    pool_exhausted: bool,
    warmup_rate: Option<f64>,
    /// Share of one core used during the measured phase.
    client_cpu: Option<f64>,
    server_cpu: Option<f64>,
    db_cpu: Option<f64>,
    other_cpu: Option<f64>,
    server_log_lines: u64,
    server_warnings: u64,
    notes: Vec<String>,
    failure: Option<String>,
}

impl Report {
    fn failed(scenario: Scenario, why: String) -> Report {
        eprintln!("[{}] FAILED: {why}", scenario.name());
        Report {
            name: scenario.name(),
            sent: 0,
            accepted: 0,
            errors: 0,
            errors_by_kind: BTreeMap::new(),
            error_samples: Vec::new(),
            accepted_per_s: 0.0,
            p50_ms: None,
            p99_ms: None,
            max_ms: None,
            each_second: Vec::new(),
            elapsed_s: 0.0,
            pool_exhausted: false,
            warmup_rate: None,
            client_cpu: None,
            server_cpu: None,
            db_cpu: None,
            other_cpu: None,
            server_log_lines: 0,
            server_warnings: 0,
            notes: Vec::new(),
            failure: Some(why),
        }
    }

    fn from_outcome(scenario: Scenario, mut o: PhaseOutcome, warmup_rate: Option<f64>) -> Report {
        o.latencies_us.sort_unstable();
        let elapsed = o.elapsed.as_secs_f64().max(1e-9);
        Report {
            name: scenario.name(),
            sent: o.sent,
            accepted: o.accepted,
            errors: o.error_count(),
            accepted_per_s: o.accepted as f64 / elapsed,
            p50_ms: percentile_ms(&o.latencies_us, 0.50),
            p99_ms: percentile_ms(&o.latencies_us, 0.99),
            max_ms: o.latencies_us.last().map(|&us| f64::from(us) / 1000.0),
            elapsed_s: elapsed,
            each_second: std::mem::take(&mut o.each_second),
            pool_exhausted: o.pool_exhausted,
            warmup_rate,
            client_cpu: o.client_cpu,
            server_cpu: o.server_cpu,
            db_cpu: o.db_cpu,
            other_cpu: o.other_cpu,
            server_log_lines: 0,
            server_warnings: 0,
            errors_by_kind: o.errors,
            error_samples: o.error_samples,
            notes: Vec::new(),
            failure: None,
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "scenario": self.name,
            "ok": self.failure.is_none(),
            "failure": self.failure,
            "sent": self.sent,
            "accepted": self.accepted,
            "errors": self.errors,
            "errorsByKind": self.errors_by_kind,
            "acceptedPerSecond": self.accepted_per_s,
            "p50Ms": self.p50_ms,
            "p99Ms": self.p99_ms,
            "maxMs": self.max_ms,
            "acceptedEachSecond": self.each_second,
            "measuredSeconds": self.elapsed_s,
            "warmupRequestsPerSecond": self.warmup_rate,
            "clientCpuCores": self.client_cpu,
            "serverCpuCores": self.server_cpu,
            "postgresBackendsCpuCores": self.db_cpu,
            "otherCpuCores": self.other_cpu,
            "serverLogLines": self.server_log_lines,
            "serverWarnings": self.server_warnings,
            "notes": self.notes,
        })
    }
}

/// Nearest-rank percentile of sorted microseconds, in milliseconds.
fn percentile_ms(sorted_us: &[u32], p: f64) -> Option<f64> {
    let n = sorted_us.len();
    if n == 0 {
        return None;
    }
    let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
    Some(f64::from(sorted_us[rank - 1]) / 1000.0)
}

fn fmt_opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
}

fn fmt_cpu(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.0}%", v * 100.0))
}

fn print_table(reports: &[Report]) {
    println!(
        "{:<15} {:>11} {:>8} {:>8} {:>8} {:>7} {:>9} {:>8} {:>8} {:>7} {:>9}  status",
        "scenario",
        "accepted/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "errors",
        "requests",
        "cli cpu",
        "srv cpu",
        "pg cpu",
        "other cpu"
    );
    for r in reports {
        let status = match &r.failure {
            None => "ok".to_string(),
            Some(f) => format!("FAILED: {f}"),
        };
        println!(
            "{:<15} {:>11.1} {:>8} {:>8} {:>8} {:>7} {:>9} {:>8} {:>8} {:>7} {:>9}  {status}",
            r.name,
            r.accepted_per_s,
            fmt_opt(r.p50_ms, 2),
            fmt_opt(r.p99_ms, 2),
            fmt_opt(r.max_ms, 2),
            r.errors,
            r.sent,
            fmt_cpu(r.client_cpu),
            fmt_cpu(r.server_cpu),
            fmt_cpu(r.db_cpu),
            fmt_cpu(r.other_cpu),
        );
        for note in &r.notes {
            println!("{:<15} note: {note}", "");
        }
    }
    println!(
        "(cpu = share of one core during the measured phase, from /proc: cli = this load generator, \
         srv = the server process (SQLite runs inside it), pg = the PostgreSQL backends serving the \
         server, other = everything else on the machine: a large `other` means the run was disturbed)"
    );
    if reports.iter().any(|r| r.each_second.len() > 1) {
        // A falling series means the server slows down as its database grows.
        println!("\naccepted in each second of the measured phase");
        for r in reports.iter().filter(|r| !r.each_second.is_empty()) {
            let series: Vec<String> = r.each_second.iter().map(u64::to_string).collect();
            println!("  {:<15} {}", r.name, series.join(" "));
        }
    }
}

struct Check {
    label: String,
    value: Option<f64>,
    unit: &'static str,
    target: String,
    pass: Option<bool>,
}

fn checks(reports: &[Report], connections: usize) -> Vec<Check> {
    let ok = |name: &str| {
        reports
            .iter()
            .find(|r| r.name == name && r.failure.is_none())
    };
    let rate = |name: &str| ok(name).map(|r| r.accepted_per_s).filter(|r| *r > 0.0);
    let ratio = |a: &str, b: &str| Some(rate(a)? / rate(b)?);
    let mut out = Vec::new();
    for (group, naive) in [
        ("sqlite-group", "sqlite-naive"),
        ("postgres-group", "postgres-naive"),
    ] {
        let share = ratio(group, "hmac-only");
        out.push(Check {
            label: format!("{group} / hmac-only"),
            value: share,
            unit: "",
            target: format!(">= {TARGET_CEILING_SHARE}"),
            pass: share.map(|v| v >= TARGET_CEILING_SHARE),
        });
        let p99 = ok(group).and_then(|r| r.p99_ms);
        out.push(Check {
            label: format!("{group} p99 at {connections} connections"),
            value: p99,
            unit: " ms",
            target: format!("<= {TARGET_P99_MS} ms"),
            pass: p99.map(|v| v <= TARGET_P99_MS),
        });
        let factor = ratio(group, naive);
        out.push(Check {
            label: format!("{group} / {naive}"),
            value: factor,
            unit: "x",
            target: format!(">= {TARGET_NAIVE_FACTOR}x"),
            pass: factor.map(|v| v >= TARGET_NAIVE_FACTOR),
        });
    }
    out
}

fn print_checks(checks: &[Check], connections: usize) {
    println!("\nratios and targets (targets: 2 cores, SQLite synchronous=FULL, 64 connections)");
    for c in checks {
        let verdict = match c.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "n/a",
        };
        println!(
            "  {:<42} {:>9} {:<3}  target {:<10} {verdict}",
            c.label,
            fmt_opt(c.value, 2),
            if c.value.is_some() { c.unit } else { "" },
            c.target
        );
    }
    if connections != 64 {
        println!("  (the p99 target is stated for 64 connections; this run used {connections})");
    }
    println!(
        "  (postgres rows: see the `postgres:` settings line at the top; scripts/bench starts its cluster with \
         fsync on; with fsync=off, as the test cluster runs, a commit flushes nothing and group commit has little to save)"
    );
}

fn write_json(
    reports: &[Report],
    checks: &[Check],
    plan: &Plan,
    cores: usize,
    store_only: Option<f64>,
    outside: &[outside::OutsideReport],
) -> Result<PathBuf> {
    let doc = serde_json::json!({
        "sqliteStoreOnlyPerSecond": store_only,
        "outsideGenerator": outside.iter().map(outside::OutsideReport::json).collect::<Vec<_>>(),
        "benchmark": "ingest",
        "connections": plan.connections,
        "warmupSeconds": plan.warmup.map(|d| d.as_secs_f64()),
        "measuredSeconds": plan.measured.as_secs_f64(),
        "cores": cores,
        "clientThreads": 1,
        "scenarios": reports.iter().map(Report::json).collect::<Vec<_>>(),
        "checks": checks.iter().map(|c| serde_json::json!({
            "check": c.label,
            "value": c.value,
            "target": c.target,
            "pass": c.pass,
        })).collect::<Vec<_>>(),
    });
    let dir = target_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("bench-ingest.json");
    std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Cargo's target directory: the ancestor of this executable that Cargo tagged.
fn target_dir() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.ancestors().find(|a| a.join("CACHEDIR.TAG").is_file()) {
            return dir.to_path_buf();
        }
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target")
}

fn describe_errors(o: &PhaseOutcome) -> String {
    describe_error_map(&o.errors, &o.error_samples)
}

fn describe_error_map(errors: &BTreeMap<String, u64>, samples: &[String]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let kinds: Vec<String> = errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    let mut text = format!(" ({})", kinds.join(", "));
    for s in samples {
        text.push_str(&format!("\n    e.g. {s}"));
    }
    text
}

// ---------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------

fn random_hex() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Builds signed `issue_comment` deliveries from the Gitea fixture, each with its own
/// comment id and delivery id, spread over REPOS repositories × ISSUES_PER_REPO issues.
struct RequestFactory {
    template: serde_json::Value,
    secret: Vec<u8>,
}

impl RequestFactory {
    fn new(secret: &str) -> Result<RequestFactory> {
        let template: serde_json::Value =
            serde_json::from_str(FIXTURE).context("parsing the fixture")?;
        let body = template
            .pointer("/comment/body")
            .and_then(|b| b.as_str())
            .unwrap_or("");
        if !body.contains(&format!("@{BOT_LOGIN}")) {
            bail!(
                "the fixture's comment no longer mentions @{BOT_LOGIN}: no task would be created"
            );
        }
        Ok(RequestFactory {
            template,
            secret: secret.as_bytes().to_vec(),
        })
    }

    /// Request number `seq`, as the bytes to write on the socket.
    fn request(&self, seq: u64) -> Result<Vec<u8>> {
        let repo_n = seq % REPOS;
        let issue = 1 + (seq / REPOS) % ISSUES_PER_REPO;
        let comment_id = 100_000_000 + seq;
        let written = chrono::DateTime::from_timestamp(1_764_000_000 + (seq / 100) as i64, 0)
            .map_or_else(String::new, |t| t.to_rfc3339());
        let repo = format!("bench-repo-{repo_n:02}");
        let full_name = format!("acme/{repo}");
        let web = format!("https://git.example.com/{full_name}");
        let api = format!("https://git.example.com/api/v1/repos/{full_name}");
        let mut v = self.template.clone();
        let fields = [
            ("/repository/id", serde_json::json!(1000 + repo_n)),
            ("/repository/name", serde_json::json!(repo)),
            ("/repository/full_name", serde_json::json!(full_name)),
            ("/repository/html_url", serde_json::json!(web)),
            ("/repository/url", serde_json::json!(api)),
            (
                "/repository/clone_url",
                serde_json::json!(format!("{web}.git")),
            ),
            (
                "/repository/ssh_url",
                serde_json::json!(format!("git@git.example.com:{full_name}.git")),
            ),
            ("/issue/id", serde_json::json!(repo_n * 1000 + issue)),
            ("/issue/number", serde_json::json!(issue)),
            (
                "/issue/url",
                serde_json::json!(format!("{api}/issues/{issue}")),
            ),
            (
                "/issue/html_url",
                serde_json::json!(format!("{web}/issues/{issue}")),
            ),
            ("/issue/repository/id", serde_json::json!(1000 + repo_n)),
            ("/issue/repository/name", serde_json::json!(repo)),
            ("/issue/repository/full_name", serde_json::json!(full_name)),
            ("/comment/id", serde_json::json!(comment_id)),
            // Written one after the other, as a real stream of comments is
            // (the operation id derived from this time leads with it).
            ("/comment/created_at", serde_json::json!(written)),
            ("/comment/updated_at", serde_json::json!(written)),
            (
                "/comment/html_url",
                serde_json::json!(format!("{web}/issues/{issue}#issuecomment-{comment_id}")),
            ),
            (
                "/comment/issue_url",
                serde_json::json!(format!("{web}/issues/{issue}")),
            ),
        ];
        for (pointer, value) in fields {
            *v.pointer_mut(pointer)
                .with_context(|| format!("the fixture has no {pointer}"))? = value;
        }
        // Gitea sends 2-space-indented JSON, and the signature covers exactly these bytes.
        let body = serde_json::to_string_pretty(&v)?;
        let signature = verify::sign(&self.secret, body.as_bytes());
        // A random UUID, as Gitea's `X-Gitea-Delivery` (`uuid.New()`): the
        // store's delivery index then takes the random inserts it takes in
        // production, which ordered ids would hide.
        let delivery = uuid::Uuid::new_v4();
        let mut bytes = format!(
            "POST /api/gitea/webhook HTTP/1.1\r\n\
             Host: 127.0.0.1\r\n\
             User-Agent: codex-bridge-bench\r\n\
             Content-Type: application/json\r\n\
             Content-Length: {}\r\n\
             X-Gitea-Delivery: {delivery}\r\n\
             X-Gitea-Event: issue_comment\r\n\
             X-Gitea-Event-Type: issue_comment\r\n\
             X-Gitea-Signature: {signature}\r\n\
             \r\n",
            body.len()
        )
        .into_bytes();
        bytes.extend_from_slice(body.as_bytes());
        Ok(bytes)
    }

    /// Requests `first..first + count`, built on all cores (the server is idle meanwhile).
    fn build(&self, first: u64, count: usize) -> Result<Vec<Vec<u8>>> {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .max(1);
        let chunk = count.div_ceil(threads).max(1) as u64;
        let end = first + count as u64;
        let parts: Vec<Result<Vec<Vec<u8>>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads as u64)
                .map(|t| {
                    let lo = (first + t * chunk).min(end);
                    let hi = (lo + chunk).min(end);
                    scope.spawn(move || {
                        (lo..hi)
                            .map(|seq| self.request(seq))
                            .collect::<Result<Vec<_>>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("building requests panicked")))
                })
                .collect()
        });
        let mut all = Vec::with_capacity(count);
        for part in parts {
            all.extend(part?);
        }
        Ok(all)
    }
}

// ---------------------------------------------------------------------------------
// Load generator
// ---------------------------------------------------------------------------------

#[derive(Default)]
struct PhaseOutcome {
    sent: u64,
    accepted: u64,
    /// "HTTP 503", "i/o: ConnectionReset", "timeout", ...
    errors: BTreeMap<String, u64>,
    error_samples: Vec<String>,
    latencies_us: Vec<u32>,
    /// Accepted requests in each whole second of the phase.
    each_second: Vec<u64>,
    elapsed: Duration,
    pool_exhausted: bool,
    client_cpu: Option<f64>,
    server_cpu: Option<f64>,
    /// The PostgreSQL backends serving the benchmark's database.
    db_cpu: Option<f64>,
    other_cpu: Option<f64>,
}

impl PhaseOutcome {
    fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    fn error(&mut self, kind: String, sample: Option<String>) {
        *self.errors.entry(kind).or_default() += 1;
        if let Some(s) = sample {
            if self.error_samples.len() < 3 {
                self.error_samples.push(s);
            }
        }
    }

    fn merge(&mut self, other: PhaseOutcome) {
        self.sent += other.sent;
        self.accepted += other.accepted;
        for (k, n) in other.errors {
            *self.errors.entry(k).or_default() += n;
        }
        for s in other.error_samples {
            if self.error_samples.len() < 3 {
                self.error_samples.push(s);
            }
        }
        self.latencies_us.extend(other.latencies_us);
    }
}

/// What the connections of one phase share (one thread, hence `Cell`).
struct PhaseCtx<'a> {
    addr: SocketAddr,
    start: Instant,
    each_second: RefCell<Vec<u64>>,
    pool: &'a [Vec<u8>],
    cyclic: bool,
    deadline: Instant,
    next: Cell<usize>,
    stop: Cell<bool>,
    exhausted: Cell<bool>,
}

impl PhaseCtx<'_> {
    fn take(&self) -> Option<&[u8]> {
        if self.stop.get() || Instant::now() >= self.deadline || self.pool.is_empty() {
            return None;
        }
        let i = self.next.get();
        if i >= self.pool.len() && !self.cyclic {
            // Every connection stops, so that the phase ends cleanly when the pool does.
            self.exhausted.set(true);
            self.stop.set(true);
            return None;
        }
        self.next.set(i + 1);
        Some(&self.pool[i % self.pool.len()])
    }
}

/// Drives `connections` keep-alive connections for `duration` (or until a non-cyclic
/// pool runs out), each sending its next request as soon as the previous answer is in.
/// Writes out what earlier scenarios left dirty in the page cache, so that the
/// kernel's writeback of one scenario's files does not run during the next
/// one's measured phase: without it, a store-only run here was comparable only
/// right after a `sync` by hand.
fn settle_disk() {
    match std::process::Command::new("sync").status() {
        Ok(status) if status.success() => {}
        other => eprintln!("warning: `sync` before the scenario did not run cleanly: {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(500));
}

async fn run_phase(
    addr: SocketAddr,
    pool: &[Vec<u8>],
    cyclic: bool,
    connections: usize,
    duration: Duration,
    server_pid: u32,
    db_pids: &[u32],
) -> Result<PhaseOutcome> {
    // Connect before the clock starts: the phase measures requests, not handshakes.
    let mut streams = Vec::with_capacity(connections);
    for _ in 0..connections {
        streams.push(
            connect(addr)
                .await
                .with_context(|| format!("connecting to {addr}"))?,
        );
    }
    let server = server_pid.to_string();
    let cpu_before = (
        cpu_ticks("self"),
        cpu_ticks(&server),
        busy_ticks(),
        cpu_ticks_sum(db_pids),
    );
    let start = Instant::now();
    let ctx = PhaseCtx {
        addr,
        start,
        each_second: RefCell::new(Vec::new()),
        pool,
        cyclic,
        deadline: start + duration,
        next: Cell::new(0),
        stop: Cell::new(false),
        exhausted: Cell::new(false),
    };
    let per_connection =
        futures_util::future::join_all(streams.into_iter().map(|s| drive_connection(&ctx, s)))
            .await;
    let mut total = PhaseOutcome::default();
    let mut last_done = start;
    for (outcome, done) in per_connection {
        last_done = last_done.max(done);
        total.merge(outcome);
    }
    total.elapsed = last_done.duration_since(start);
    total.pool_exhausted = ctx.exhausted.get();
    // Only whole seconds: the last one would hold just the stragglers after the deadline.
    total.each_second = ctx.each_second.take();
    total.each_second.truncate(total.elapsed.as_secs() as usize);
    let seconds = total.elapsed.as_secs_f64().max(1e-9);
    let cpu_after = (
        cpu_ticks("self"),
        cpu_ticks(&server),
        busy_ticks(),
        cpu_ticks_sum(db_pids),
    );
    let share = |before: Option<u64>, after: Option<u64>| {
        Some(after?.saturating_sub(before?) as f64 / CLOCK_TICKS / seconds)
    };
    total.client_cpu = share(cpu_before.0, cpu_after.0);
    total.server_cpu = share(cpu_before.1, cpu_after.1);
    total.db_cpu = share(cpu_before.3, cpu_after.3);
    // Whatever else ran meanwhile (other builds and tests, PostgreSQL's background
    // processes) competed for the same cores: a large figure means the run was disturbed.
    total.other_cpu = share(cpu_before.2, cpu_after.2)
        .map(|busy| {
            busy - total.client_cpu.unwrap_or(0.0)
                - total.server_cpu.unwrap_or(0.0)
                - total.db_cpu.unwrap_or(0.0)
        })
        .map(|other| other.max(0.0));
    Ok(total)
}

async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(addr).await?;
    // Requests are written in one go; Nagle would only add delay.
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// One connection's loop; returns its outcome and when its last answer came.
async fn drive_connection(ctx: &PhaseCtx<'_>, stream: TcpStream) -> (PhaseOutcome, Instant) {
    let mut out = PhaseOutcome::default();
    let mut stream = Some(stream);
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    let mut last_done = Instant::now();
    while let Some(request) = ctx.take() {
        out.sent += 1;
        let conn = match &mut stream {
            Some(s) => s,
            None => match connect(ctx.addr).await {
                Ok(s) => stream.insert(s),
                Err(e) => {
                    out.error(format!("connect: {:?}", e.kind()), Some(e.to_string()));
                    // Do not spin against a server that refuses connections.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let t0 = Instant::now();
        let result = tokio::time::timeout(REQUEST_TIMEOUT, exchange(conn, request, &mut buf)).await;
        last_done = Instant::now();
        match result {
            Ok(Ok(response)) => {
                let us = last_done
                    .duration_since(t0)
                    .as_micros()
                    .min(u128::from(u32::MAX)) as u32;
                out.latencies_us.push(us);
                let body = &buf[response.body.clone()];
                if response.status == 202 && contains(body, b"\"queued\"") {
                    out.accepted += 1;
                    let second = last_done.duration_since(ctx.start).as_secs() as usize;
                    let mut each = ctx.each_second.borrow_mut();
                    if each.len() <= second {
                        each.resize(second + 1, 0);
                    }
                    each[second] += 1;
                } else {
                    let text = String::from_utf8_lossy(body);
                    let text: String = text.chars().take(300).collect();
                    out.error(
                        format!("HTTP {}", response.status),
                        Some(format!("{}: {text}", response.status)),
                    );
                }
                if response.close {
                    stream = None;
                }
            }
            Ok(Err(e)) => {
                out.error(format!("i/o: {:?}", e.kind()), Some(e.to_string()));
                stream = None;
            }
            Err(_) => {
                out.error(
                    "timeout".into(),
                    Some(format!("no answer within {REQUEST_TIMEOUT:?}")),
                );
                stream = None;
            }
        }
    }
    (out, last_done)
}

struct Response {
    status: u16,
    /// Where the body sits in the read buffer.
    body: std::ops::Range<usize>,
    /// The server said `Connection: close`.
    close: bool,
}

/// Writes one request and reads its whole response (status line, headers, then
/// `Content-Length` bytes) into `buf`.
async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> std::io::Result<Response> {
    use std::io::{Error, ErrorKind};
    stream.write_all(request).await?;
    buf.clear();
    let head_end = loop {
        if let Some(p) = find(buf, b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > 64 * 1024 {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "response head larger than 64 KiB",
            ));
        }
        read_more(stream, buf).await?;
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| Error::new(ErrorKind::InvalidData, "response head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, "no status line"))?;
    let mut length = None;
    let mut close = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "chunked responses are not supported here",
            ));
        }
    }
    let length = length
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, "response without content-length"))?;
    let end = head_end + length;
    while buf.len() < end {
        read_more(stream, buf).await?;
    }
    Ok(Response {
        status,
        body: head_end..end,
        close,
    })
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.reserve(4096);
    if stream.read_buf(buf).await? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

/// Linux reports process CPU time in USER_HZ ticks, 100 per second on every
/// mainstream architecture.
const CLOCK_TICKS: f64 = 100.0;

/// Summed CPU ticks of processes (`None` for none); one that exits counts as zero.
fn cpu_ticks_sum(pids: &[u32]) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    Some(pids.iter().filter_map(|p| cpu_ticks(&p.to_string())).sum())
}

/// CPU time of the whole machine not spent idle, from the first line of `/proc/stat`.
fn busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    Some(total - idle)
}

/// utime + stime of a process (all its threads), from `/proc/PID/stat`; `None` off Linux.
fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it are plain.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

// ---------------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------------

/// Counts what a server logs, echoing the first lines.
#[derive(Default)]
struct ServerLog {
    lines: AtomicU64,
    warnings: AtomicU64,
}

impl ServerLog {
    fn record(&self, name: &str, line: &str) {
        let n = self.lines.fetch_add(1, Ordering::Relaxed);
        if line.contains("WARN") || line.contains("ERROR") {
            self.warnings.fetch_add(1, Ordering::Relaxed);
        }
        if n < ECHOED_LOG_LINES {
            eprintln!("    [{name} server] {line}");
        } else if n == ECHOED_LOG_LINES {
            eprintln!("    [{name} server] ... (further lines only counted)");
        }
    }
}

/// A server process; killed and reaped when dropped.
/// A server and the database it runs on, dropped in that order: the
/// database goes only once nothing is connected to it.
struct Started {
    server: Server,
    pg: Option<PgDatabase>,
}

struct Server {
    child: Child,
    addr: SocketAddr,
    log: Arc<ServerLog>,
    /// State dir and SQLite file; removed after the process is gone (fields drop after `drop`).
    _dir: Option<tempfile::TempDir>,
}

impl Server {
    fn real(
        scenario: Scenario,
        secret: &str,
        admin_token: &str,
        pg_url: Option<&str>,
    ) -> Result<Server> {
        let dir = tempfile::Builder::new()
            .prefix("codex-bridge-bench-")
            .tempdir()
            .context("creating a temporary directory for the server's state and SQLite file")?;
        let database_url = match pg_url {
            Some(url) => url.to_owned(),
            None => format!("sqlite://{}", dir.path().join("bench.db").display()),
        };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_codex-bridge"));
        cmd.arg("serve");
        scrub_env(&mut cmd);
        cmd.env("CODEX_BRIDGE_LISTEN", "127.0.0.1:0")
            .env("CODEX_BRIDGE_DATABASE_URL", database_url)
            .env("CODEX_BRIDGE_WEBHOOK_SECRET", secret)
            .env("CODEX_BRIDGE_ADMIN_TOKEN", admin_token)
            .env("CODEX_BRIDGE_BOT_LOGIN", BOT_LOGIN)
            // Intake alone is measured: no agent runtime (the default is codex).
            .env("CODEX_BRIDGE_AGENT_RUNTIME", "none")
            .env("CODEX_BRIDGE_STATE_DIR", dir.path().join("state"))
            .env("CODEX_BRIDGE_WORKSPACE_ROOT", dir.path().join("workspaces"))
            .env("CODEX_BRIDGE_LOG_FILTER", "warn")
            // Its load comes from a handful of commenters: the hourly limit
            // per commenter would refuse it; intake's cost is measured here.
            .env("CODEX_BRIDGE_USER_TRIGGERS_PER_HOUR", "0");
        if let Some(n) = scenario.batch_max() {
            cmd.env("CODEX_BRIDGE_WRITER_BATCH_MAX", n.to_string());
        }
        if let (None, Ok(n)) = (scenario.batch_max(), std::env::var("BENCH_BATCH_MAX")) {
            cmd.env("CODEX_BRIDGE_WRITER_BATCH_MAX", n);
        }
        if let Ok(n) = std::env::var("BENCH_WRITER_THREADS") {
            cmd.env("CODEX_BRIDGE_WRITER_THREADS", n);
        }
        Server::spawn(scenario.name(), cmd, Some(dir))
    }

    fn hmac_only(secret: &str) -> Result<Server> {
        let exe = std::env::current_exe().context("locating the benchmark executable")?;
        let mut cmd = Command::new(exe);
        cmd.arg(SERVE_HMAC_ONLY_ARG);
        scrub_env(&mut cmd);
        cmd.env(HMAC_SECRET_ENV, secret);
        Server::spawn(Scenario::HmacOnly.name(), cmd, None)
    }

    fn spawn(
        name: &'static str,
        mut cmd: Command,
        dir: Option<tempfile::TempDir>,
    ) -> Result<Server> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting the {name} server"))?;
        let log = Arc::new(ServerLog::default());
        let (tx, rx) = mpsc::channel::<String>();
        // Both pipes are drained for the server's whole life: a full pipe would block it.
        if let Some(stdout) = child.stdout.take() {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    match line.split_once("listening on http://") {
                        Some((_, addr)) => {
                            let _ = tx.send(addr.trim().to_owned());
                        }
                        None => log.record(name, &line),
                    }
                }
            });
        }
        if let Some(stderr) = child.stderr.take() {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    log.record(name, &line);
                }
            });
        }
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
            _dir: dir,
        };
        match rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(addr) => {
                server.addr = addr.parse().with_context(|| {
                    format!("{name}: cannot parse the listening address `{addr}`")
                })?;
                Ok(server)
            }
            Err(_) => {
                // The pipe closes as the process exits, a moment before it can be reaped.
                let mut status = None;
                for _ in 0..50 {
                    status = server.child.try_wait().ok().flatten();
                    if status.is_some() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                bail!(
                    "the {name} server did not say it was listening within {STARTUP_TIMEOUT:?} (exit status: {}); \
                     its output is above",
                    status.map_or_else(|| "still running".into(), |s| s.to_string())
                )
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGKILL: what was answered 202 is committed, and a graceful stop would only
        // wait for keep-alive connections.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Nothing from the caller's environment may change the server's configuration
/// (`RUST_LOG` would override the log filter).
fn scrub_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if let Some(k) = key.to_str() {
            if k.starts_with("CODEX_BRIDGE_") || k == "RUST_LOG" {
                cmd.env_remove(k);
            }
        }
    }
}

/// The `--serve-hmac-only` child: HTTP + signature check in actix-web's default process
/// model (same worker count as the real server), nothing else.
fn serve_hmac_only() -> Result<()> {
    let secret = std::env::var(HMAC_SECRET_ENV).with_context(|| {
        format!("{HMAC_SECRET_ENV} is not set; this mode is started by the benchmark itself")
    })?;
    let secret = web::Data::new(HmacSecret(secret.into_bytes()));
    actix_web::rt::System::new().block_on(async move {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let server = HttpServer::new(move || {
            App::new()
                .app_data(secret.clone())
                .app_data(web::PayloadConfig::new(1024 * 1024))
                .route("/api/gitea/webhook", web::post().to(hmac_only_webhook))
        })
        .listen(listener)?
        .run();
        println!("codex-bridge-bench hmac-only listening on http://{addr}");
        server.await?;
        Ok(())
    })
}

struct HmacSecret(Vec<u8>);

async fn hmac_only_webhook(
    req: HttpRequest,
    body: web::Bytes,
    secret: web::Data<HmacSecret>,
) -> HttpResponse {
    match verify::verify(&secret.0, &body, req.headers()) {
        // The same shape as the real answer, so both send about as many bytes.
        Ok(()) => {
            let delivery = req
                .headers()
                .get("x-gitea-delivery")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            HttpResponse::Accepted().json(serde_json::json!({
                "deliveryId": delivery,
                "taskId": "task-00000000000000000000000000000000",
                "state": "queued",
            }))
        }
        Err(e) => HttpResponse::Unauthorized().json(serde_json::json!({ "code": e.code() })),
    }
}

// ---------------------------------------------------------------------------------
// Storage details
// ---------------------------------------------------------------------------------

#[derive(diesel::QueryableByName)]
struct PgSetting {
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    setting: String,
}

/// The durability settings of the PostgreSQL in use: they decide what a commit costs.
fn postgres_note(url: &str) -> String {
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
fn store_only_rate(callers: usize, measured: Duration, total: usize) -> Result<(u64, f64)> {
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
fn sqlite_storage_note() -> String {
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

// The binary's allocator (src/main.rs): the store-only ceiling runs the same
// writer in this process.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
