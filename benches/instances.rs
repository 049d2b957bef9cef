//! Several-instances benchmark: what 1, 2 and 3 server instances on one
//! PostgreSQL do together, in process (each instance its own store, pools,
//! writer and actor tree, as a separate process would have):
//!
//! 1. accepted webhooks per second: every instance's store ingesting
//!    distinct deliveries at once (the webhook's `store.ingest`, then its
//!    signal to the other instances), in total and per instance;
//! 2. turns started per second: a backlog of tasks over several
//!    repositories, released to N actor trees at once (scripted runtime whose
//!    turns complete at once, plain-folder workspaces, a forge that confirms
//!    every reply), LISTEN/NOTIFY on and short sweeps, with the default
//!    writer threads and with one; and how the repositories spread over the
//!    instances;
//! 3. how long a dead instance's repositories wait: A holds every
//!    repository's lease with a turn running in each, then stops as a crash
//!    does; per repository, A's last renewal to another instance's takeover.
//!
//! Beside each figure: the cores this process (every instance and the load),
//! the database's PostgreSQL backends and the whole machine used, and the
//! deadlocks PostgreSQL detected between the instances' transactions.
//!
//! In the same run, the machine's own limit: PostgreSQL's durable commits of
//! one row, one at a time (the 1-instance accept rate is the other: one
//! store alone with nothing else). Every instance and the PostgreSQL server
//! share this machine's cores, so the ratios say what coordination costs on
//! one machine, not how more machines would scale.
//!
//! `CODEX_BRIDGE_PG_DURABLE=1 scripts/with-postgres cargo bench --bench instances`.
//! Environment: `BENCH_SECONDS` (accepts measured per instance count, default
//! 5), `BENCH_WARMUP_SECONDS` (default 1), `BENCH_CALLERS` (callers per
//! instance, default 64), `BENCH_INSTANCE_TASKS` (default 600) and
//! `BENCH_INSTANCE_REPOS` (default 12). Without `--bench` (under
//! `cargo test --all-targets`) it runs a smoke version of a few seconds that
//! checks every accepted delivery has one task, every queued task started
//! exactly once, and no lease moved before its holder's expiry. Both need
//! `TEST_DATABASE_URL` (scripts/with-postgres).

// Only `trigger_request`, `percentile` and `Folders` are used here.
#[allow(dead_code)]
mod common;
#[path = "instances/ingest.rs"]
mod ingest;
#[path = "common/pg.rs"]
mod pg;
#[path = "instances/rig.rs"]
mod rig;
#[allow(dead_code)] // `spread_trigger` only
#[path = "common/store_only.rs"]
mod store_only;
#[path = "instances/takeover.rs"]
mod takeover;
#[path = "instances/turns.rs"]
mod turns;

use anyhow::{Context as _, Result};
use rig::{CpuUse, Timings};
use std::path::PathBuf;
use std::time::Duration;

/// Instance counts compared.
const INSTANCES: [usize; 3] = [1, 2, 3];

/// Sizes of one run: the full benchmark's, or the smoke test's.
struct Sizes {
    ingest: ingest::Plan,
    commit_probe: Duration,
    tasks: usize,
    repos: usize,
    instances: Vec<usize>,
    /// The turns run with the server's lease timings (a lease that expired
    /// under a busy machine would move mid-turn, and that turn run again,
    /// which is the takeover's subject, not this one's) and a short sweep.
    turn_timings: Timings,
    /// `writer_threads` settings the turns run with (`None`: the default).
    writer_threads: Vec<Option<usize>>,
    /// The takeover's; then again with the server's default sweep if set.
    takeover_timings: Timings,
    default_sweep: Option<Duration>,
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

/// The server's own lease timings (`lease_ttl_secs`, `lease_heartbeat_secs`).
const SERVER_LEASE_TTL: Duration = Duration::from_secs(60);
const SERVER_HEARTBEAT: Duration = Duration::from_secs(15);

fn sizes(full: bool) -> Result<Sizes> {
    if !full {
        return Ok(Sizes {
            ingest: ingest::Plan {
                callers: 8,
                warmup: Duration::from_millis(200),
                measured: Duration::from_millis(800),
            },
            commit_probe: Duration::from_millis(300),
            tasks: 24,
            repos: 6,
            instances: vec![1, 2],
            turn_timings: Timings {
                lease_ttl: SERVER_LEASE_TTL,
                heartbeat: SERVER_HEARTBEAT,
                sweep: Duration::from_millis(100),
            },
            writer_threads: vec![None],
            takeover_timings: Timings {
                lease_ttl: Duration::from_secs(2),
                heartbeat: Duration::from_millis(500),
                sweep: Duration::from_millis(100),
            },
            default_sweep: None,
        });
    }
    let repos: usize = env_number("BENCH_INSTANCE_REPOS", 12)?;
    anyhow::ensure!(
        repos >= 6,
        "BENCH_INSTANCE_REPOS must be 6 or more, so work spreads"
    );
    Ok(Sizes {
        ingest: ingest::Plan {
            callers: env_number("BENCH_CALLERS", 64)?,
            warmup: Duration::from_secs_f64(env_number("BENCH_WARMUP_SECONDS", 1.0)?),
            measured: Duration::from_secs_f64(env_number("BENCH_SECONDS", 5.0)?),
        },
        commit_probe: Duration::from_secs(3),
        tasks: env_number("BENCH_INSTANCE_TASKS", 600)?,
        repos,
        instances: INSTANCES.to_vec(),
        turn_timings: Timings {
            lease_ttl: SERVER_LEASE_TTL,
            heartbeat: SERVER_HEARTBEAT,
            sweep: Duration::from_millis(500),
        },
        // Again with one writer thread per store: with the default's
        // several, one batch's transaction can hold a lease row another
        // batch's write waits for while waiting for one that batch holds,
        // and PostgreSQL breaks each such deadlock only after its
        // `deadlock_timeout`.
        writer_threads: vec![None, Some(1)],
        takeover_timings: Timings {
            lease_ttl: Duration::from_secs(3),
            heartbeat: Duration::from_secs(1),
            sweep: Duration::from_millis(500),
        },
        default_sweep: Some(Duration::from_secs(5)),
    })
}

fn main() -> Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    let admin = std::env::var("TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .context(
            "TEST_DATABASE_URL is not set: this benchmark runs several instances on one \
             PostgreSQL; run it under scripts/with-postgres (CODEX_BRIDGE_PG_DURABLE=1 for \
             commits that cost what they cost in production)",
        )?;
    let s = sizes(full)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "several-instances benchmark ({}): 1..{} instances in this process on one PostgreSQL, \
         {cores} cores shared by all of them and by PostgreSQL",
        if full { "full" } else { "smoke" },
        s.instances.iter().max().copied().unwrap_or(1)
    );
    let mut admin_view = rig::Observer::connect(&admin)?;
    println!("postgres: {}", admin_view.durability()?);
    // The machine's limit first, on an idle machine.
    let mut dbs = Databases {
        admin: admin.clone(),
        kept: Vec::new(),
    };
    let (commits, commit_p50, commit_p99) =
        ingest::single_row_commits(dbs.fresh()?, s.commit_probe)?;
    println!(
        "\nmachine limit: PostgreSQL durable single-row commits, one at a time through a store's \
         writer: {commits:.0}/s (p50 {commit_p50:.2} ms, p99 {commit_p99:.2} ms)"
    );

    let mut accepts = Vec::new();
    for &n in &s.instances {
        eprintln!("[accepts] {n} instance(s)");
        accepts.push(ingest::run(dbs.fresh()?, n, s.ingest)?);
    }
    print_accepts(&accepts, s.ingest);

    let mut turns = Vec::new();
    for &threads in &s.writer_threads {
        for &n in &s.instances {
            eprintln!("[turns] {n} instance(s), writer_threads {threads:?}");
            turns.push(turns::run(
                dbs.fresh()?,
                n,
                s.tasks,
                s.repos,
                s.turn_timings,
                threads,
            )?);
        }
    }
    print_turns(&turns, s.turn_timings);

    let survivors = 2;
    let mut takeovers = vec![takeover::run(
        dbs.fresh()?,
        s.repos,
        survivors,
        s.takeover_timings,
    )?];
    if let Some(sweep) = s.default_sweep {
        let timings = Timings {
            sweep,
            ..s.takeover_timings
        };
        takeovers.push(takeover::run(dbs.fresh()?, s.repos, survivors, timings)?);
    }
    print_takeovers(&takeovers, survivors);

    println!(
        "\nWhat one machine hides: the instances divide {cores} cores with each other and with \
         the one PostgreSQL server, so a second instance adds no CPU and no disk; the ratios \
         above are what sharing one database costs (row locks, lease races, sweeps, signals) \
         with the machine already busy, not what instances on their own machines would add. \
         PostgreSQL stays one server whatever the number of instances. The database's \
         deadlock_timeout ({}) is what each deadlock costs before one side is rolled back.",
        admin_view.setting("deadlock_timeout")?
    );
    if full {
        let path = write_json(commits, &accepts, &turns, &takeovers, cores)?;
        println!("figures written to {}", path.display());
    }
    Ok(())
}

/// A fresh database for every run, each kept until the end: a store's
/// signal listener lives as long as the process, and one whose database is
/// gone reconnects every second, which forks a PostgreSQL backend each time
/// while the next runs are measured.
struct Databases {
    admin: String,
    kept: Vec<pg::PgDatabase>,
}

impl Databases {
    fn fresh(&mut self) -> Result<&pg::PgDatabase> {
        self.kept.push(pg::PgDatabase::create(&self.admin)?);
        self.kept.last().context("the database just created")
    }
}

fn cpu_text(c: &CpuUse) -> String {
    format!("{:.2} / {:.2} / {:.2}", c.own, c.postgres, c.machine)
}

fn print_accepts(runs: &[ingest::Figures], plan: ingest::Plan) {
    println!(
        "\naccepted webhooks per second ({} callers per instance, {:.1} s measured after {:.1} s; \
         each instance its own store and writer):",
        plan.callers,
        plan.measured.as_secs_f64(),
        plan.warmup.as_secs_f64()
    );
    println!(
        "  {:<9} {:>9} {:>7} {:>26} {:>8} {:>8} {:>9}   cores: bench+instances / PG backends / machine",
        "instances", "total/s", "ratio", "per instance/s", "p50 ms", "p99 ms", "deadlocks"
    );
    let one = runs.first().map_or(f64::NAN, |r| r.total);
    for r in runs {
        let per: Vec<String> = r.per_instance.iter().map(|v| format!("{v:.0}")).collect();
        println!(
            "  {:<9} {:>9.0} {:>7.2} {:>26} {:>8.2} {:>8.2} {:>9}   {}",
            r.instances,
            r.total,
            r.total / one,
            per.join(" + "),
            r.p50_ms,
            r.p99_ms,
            r.deadlocks,
            cpu_text(&r.cpu)
        );
    }
    let stored: u64 = runs.iter().map(|r| r.accepted).sum();
    println!(
        "  checked: each of the {stored} accepted deliveries stored once, with one task of its own"
    );
}

fn print_turns(runs: &[turns::Figures], t: Timings) {
    let Some(first) = runs.first() else { return };
    println!(
        "\nturns started per second ({} tasks over {} repositories queued, then the instances \
         released at once; sweep {} ms, lease TTL {} s, heartbeat {:.1} s):",
        first.tasks,
        first.repos,
        t.sweep.as_millis(),
        t.lease_ttl.as_secs(),
        t.heartbeat.as_secs_f64()
    );
    println!(
        "  {:<9} {:<14} {:>8} {:>7} {:>13} {:>18} {:>18} {:>9}   cores: bench+instances / PG backends / machine",
        "instances", "writer threads", "turns/s", "ratio", "all done in s", "repositories each", "turns each", "deadlocks"
    );
    for r in runs {
        // Each writer setting against its own single instance.
        let one = runs
            .iter()
            .find(|o| o.instances == 1 && o.writer_threads == r.writer_threads)
            .map_or(f64::NAN, turns::Figures::turns_per_s);
        let repos: Vec<String> = r.shares.iter().map(|s| s.repos.to_string()).collect();
        let attempts: Vec<String> = r.shares.iter().map(|s| s.attempts.to_string()).collect();
        println!(
            "  {:<9} {:<14} {:>8.0} {:>7.2} {:>13.2} {:>18} {:>18} {:>9}   {}",
            r.instances,
            r.writer_threads
                .map_or_else(|| "default".to_owned(), |t| t.to_string()),
            r.turns_per_s(),
            r.turns_per_s() / one,
            r.succeeded.as_secs_f64(),
            repos.join(" + "),
            attempts.join(" + "),
            r.deadlocks,
            cpu_text(&r.cpu)
        );
    }
    let leases: Vec<String> = runs
        .iter()
        .filter(|r| r.writer_threads.is_none())
        .map(|r| {
            let l: Vec<String> = r.shares.iter().map(|s| s.leases.to_string()).collect();
            format!("{}: {}", r.instances, l.join(" + "))
        })
        .collect();
    println!(
        "  leases taken per instance (instances: each, default writers): {}",
        leases.join("; ")
    );
    println!(
        "  checked: every queued task started exactly one turn, under one attempt, and succeeded"
    );
}

fn print_takeovers(runs: &[takeover::Figures], survivors: usize) {
    for r in runs {
        let t = r.timings;
        let target = t.lease_ttl.as_secs_f64() + 1.0;
        let median = common::percentile(&r.moves, 0.5);
        let max = r.moves.last().copied().unwrap_or(f64::NAN);
        println!(
            "\nlease move after an instance dies ({} repositories held by A, {survivors} instances \
             beside it; lease TTL {} s, heartbeat {} ms, sweep {} ms):",
            r.repos,
            t.lease_ttl.as_secs(),
            t.heartbeat.as_millis(),
            t.sweep.as_millis()
        );
        println!(
            "  A's last renewal -> taken by another instance: median {median:.2} s, max {max:.2} s  \
             target <= TTL + 1 s = {target:.1} s  {}",
            if max <= target { "PASS" } else { "MISS" }
        );
        let each: Vec<String> = r.by_instance.iter().map(|n| n.to_string()).collect();
        println!(
            "  {} taken from the expired lease, {} after a sweep released it; repositories each: {}",
            r.taken_over,
            r.handed_over,
            each.join(" + ")
        );
    }
    println!("  checked: no lease moved while A lived, none before A's expiry, every one moved");
}

fn write_json(
    commits: f64,
    accepts: &[ingest::Figures],
    turns: &[turns::Figures],
    takeovers: &[takeover::Figures],
    cores: usize,
) -> Result<PathBuf> {
    let cpu = |c: &CpuUse| serde_json::json!({"benchInstancesCores": c.own, "postgresCores": c.postgres, "machineCores": c.machine});
    let json = serde_json::json!({
        "benchmark": "instances",
        "cores": cores,
        "singleRowCommitsPerS": commits,
        "accepts": accepts.iter().map(|r| serde_json::json!({
            "instances": r.instances, "totalPerS": r.total, "perInstancePerS": r.per_instance,
            "p50Ms": r.p50_ms, "p99Ms": r.p99_ms, "deadlocks": r.deadlocks, "cpu": cpu(&r.cpu),
        })).collect::<Vec<_>>(),
        "turns": turns.iter().map(|r| serde_json::json!({
            "instances": r.instances, "writerThreads": r.writer_threads, "deadlocks": r.deadlocks,
            "tasks": r.tasks, "repositories": r.repos,
            "turnsPerS": r.turns_per_s(), "allSucceededS": r.succeeded.as_secs_f64(),
            "repositoriesEach": r.shares.iter().map(|s| s.repos).collect::<Vec<_>>(),
            "leasesEach": r.shares.iter().map(|s| s.leases).collect::<Vec<_>>(),
            "turnsEach": r.shares.iter().map(|s| s.attempts).collect::<Vec<_>>(),
            "cpu": cpu(&r.cpu),
        })).collect::<Vec<_>>(),
        "takeovers": takeovers.iter().map(|r| serde_json::json!({
            "repositories": r.repos, "leaseTtlS": r.timings.lease_ttl.as_secs_f64(),
            "heartbeatS": r.timings.heartbeat.as_secs_f64(), "sweepS": r.timings.sweep.as_secs_f64(),
            "movesS": r.moves, "takenOver": r.taken_over, "handedOver": r.handed_over,
        })).collect::<Vec<_>>(),
    });
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-instances.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
    Ok(path)
}

// The binary's allocator (src/main.rs), as in a server process.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
