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
//!
//! This file holds the scenarios and the order a run takes; beside it in `ingest/`:
//! `load.rs` (the in-process generator), `server.rs` (the servers it starts),
//! `report.rs` (tables, targets, JSON), `storage.rs` (storage notes and the store-only
//! ceiling), `costs.rs` (the writer's cost per delivery) and `outside.rs` (wrk).

// Only `trigger_request` is used here.
#[allow(dead_code)]
mod common;
#[path = "ingest/costs.rs"]
mod costs;
#[path = "ingest/load.rs"]
mod load;
#[path = "ingest/outside.rs"]
mod outside;
#[path = "common/pg.rs"]
mod pg;
#[path = "ingest/report.rs"]
mod report;
#[path = "ingest/server.rs"]
mod server;
#[path = "ingest/storage.rs"]
mod storage;
#[path = "common/store_only.rs"]
mod store_only;

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use anyhow::{bail, Context, Result};
use codex_bridge::webhook::verify;
use diesel::{Connection, RunQueryDsl};
use load::*;
use pg::PgDatabase;
use report::*;
use server::*;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use storage::*;
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

// The binary's allocator (src/main.rs): the store-only ceiling runs the same
// writer in this process.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
