//! Restart benchmark: how long the server binary takes from its start to
//! answering `/readyz` with a store full of work it must pick up again
//! (default 100,000 non-terminal tasks over 1,000 repositories, in mixed
//! states: queued, retry_wait, leased, running, awaiting_approval,
//! needs_reconciliation), on SQLite and, when `TEST_DATABASE_URL` is set, on
//! PostgreSQL. In the same run, the machine's own limit: the same binary on
//! the same kind of store with no task at all.
//!
//! The store is filled through the ingest (as webhooks fill it), then
//! states are spread with one UPDATE each; the server runs the scripted
//! runtime with intake paused, so what is timed is opening the store,
//! reconciling after the restart and starting the actors, not turns.
//!
//! `scripts/with-postgres cargo bench --bench restart` (`BENCH_RESTART_TASKS`,
//! default 100000). Under `cargo test --all-targets` it runs a smoke version
//! with 2,000 tasks and checks that the server comes up with them all.

#[allow(dead_code)]
mod common;
#[allow(dead_code)] // the ingest benchmark uses the rest of it
#[path = "common/pg.rs"]
mod pg;

use anyhow::{ensure, Context as _, Result};
use codex_bridge::config::DatabaseUrl;
use codex_bridge::store::{ingest, DbConn};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const REPOS: usize = 1_000;
const PER_ISSUE: usize = 10;

/// The states the tasks are spread over, by `id % 20`.
const SPREAD: [(&str, &str); 5] = [
    ("retry_wait", "id % 20 IN (1, 2)"),
    ("leased", "id % 20 = 3"),
    ("running", "id % 20 IN (4, 5)"),
    ("awaiting_approval", "id % 20 = 6"),
    ("needs_reconciliation", "id % 20 = 7"),
];

fn fill(url: &DatabaseUrl, tasks: usize) -> Result<()> {
    let store = codex_bridge::store::Store::open(&codex_bridge::store::StoreSettings {
        url: url.clone(),
        read_pool_size: 2,
        sqlite_busy_timeout: Duration::from_secs(5),
        writer: codex_bridge::store::WriterSettings {
            batch_max: 256,
            threads: 1,
            queue_capacity: 1 << 16,
            ingest: Default::default(),
        },
    })?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut made = 0;
    while made < tasks {
        let batch: Vec<_> = (made..(made + 1_000).min(tasks))
            .map(|i| {
                let repo = format!("r{}", i % REPOS);
                let number = ((i / REPOS) / PER_ISSUE + 1) as i64;
                common::trigger_request(
                    &repo,
                    number,
                    i as i64 + 1,
                    &format!("k{i}"),
                    format!("@ccbot task {i}"),
                )
            })
            .collect();
        made += batch.len();
        let outcomes = rt.block_on(store.write(move |c| ingest::ingest_batch(c, &batch)))?;
        let accepted = outcomes
            .iter()
            .filter(|o| matches!(o, ingest::IngestOutcome::Accepted { .. }))
            .count();
        ensure!(
            accepted == outcomes.len(),
            "only {accepted} of {} accepted",
            outcomes.len()
        );
    }
    rt.block_on(store.write(|c| {
        for (state, which) in SPREAD {
            codex_bridge::with_conn!(c, |c| diesel::RunQueryDsl::execute(
                diesel::sql_query(format!("UPDATE tasks SET state = '{state}' WHERE {which}")),
                c
            ))?;
        }
        // Paused: the actors start and load, and take no task.
        codex_bridge::with_conn!(c, |c| diesel::RunQueryDsl::execute(
            diesel::sql_query("UPDATE control SET global_paused = true"),
            c
        ))?;
        Ok::<_, codex_bridge::store::StoreError>(())
    }))?;
    Ok(())
}

/// Starts the server on `url`; the time to its first `/readyz` 200.
fn start_to_ready(url: &str, dir: &std::path::Path) -> Result<Duration> {
    let began = Instant::now();
    let mut child: Child = Command::new(env!("CARGO_BIN_EXE_codex-bridge"))
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("CODEX_BRIDGE_LISTEN", "127.0.0.1:0")
        .env("CODEX_BRIDGE_DATABASE_URL", url)
        .env("CODEX_BRIDGE_WEBHOOK_SECRET", "restart-bench-secret")
        .env("CODEX_BRIDGE_ADMIN_TOKEN", "restart-bench-admin-token")
        .env("CODEX_BRIDGE_BOT_LOGIN", "ccbot")
        .env("CODEX_BRIDGE_GITEA_URL", "http://127.0.0.1:9")
        .env("CODEX_BRIDGE_GITEA_TOKEN", "restart-bench-gitea-token")
        .env("CODEX_BRIDGE_AGENT_RUNTIME", "scripted")
        .env("CODEX_BRIDGE_STATE_DIR", dir.join("state"))
        .env("CODEX_BRIDGE_WORKSPACE_ROOT", dir.join("ws"))
        .env("CODEX_BRIDGE_LOG_FILTER", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the server binary")?;
    let stdout = child.stdout.take().context("the server's stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("codex-bridge listening on ") {
                let _ = tx.send(addr.to_owned());
            }
        }
    });
    let result = (|| {
        let base = rx
            .recv_timeout(Duration::from_secs(120))
            .context("the server did not start listening within 120 s")?;
        loop {
            if let Ok(r) = ureq::get(&format!("{base}/readyz")).call() {
                if r.status() == 200 {
                    return Ok(began.elapsed());
                }
            }
            ensure!(
                began.elapsed() < Duration::from_secs(120),
                "not ready within 120 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn count_open(url: &DatabaseUrl) -> Result<i64> {
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut c = DbConn::establish(&codex_bridge::store::ConnSettings {
        url: url.clone(),
        sqlite_busy_timeout: Duration::from_secs(5),
        read_only: true,
    })?;
    let q = "SELECT COUNT(*) AS n FROM tasks WHERE state IN \
             ('queued', 'retry_wait', 'leased', 'running', 'awaiting_approval', 'needs_reconciliation')";
    Ok(
        codex_bridge::with_conn!(&mut c, |c| diesel::RunQueryDsl::get_result::<N>(
            diesel::sql_query(q),
            c
        ))?
        .n,
    )
}

/// Fills a store with `tasks`, then times three starts; the median.
fn measure(url: &str, tasks: usize, dir: &std::path::Path) -> Result<(Duration, i64)> {
    let parsed = DatabaseUrl::parse(url).map_err(anyhow::Error::msg)?;
    let fill_began = Instant::now();
    fill(&parsed, tasks)?;
    let filled = fill_began.elapsed();
    let mut times: Vec<Duration> = (0..3)
        .map(|_| start_to_ready(url, dir))
        .collect::<Result<_>>()?;
    times.sort();
    let open = count_open(&parsed)?;
    eprintln!("    (filled in {filled:.1?}; starts {times:.2?})");
    Ok((times[1], open))
}

fn main() -> Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    let tasks = if full {
        std::env::var("BENCH_RESTART_TASKS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000)
    } else {
        2_000
    };
    println!(
        "restart benchmark ({}): start to /readyz with {tasks} non-terminal tasks",
        if full { "full" } else { "smoke" }
    );
    let dir = tempfile::tempdir()?;
    let empty_dir = tempfile::tempdir()?;
    let sqlite = |d: &std::path::Path| format!("sqlite://{}", d.join("bridge.db").display());
    let (empty, _) = measure(&sqlite(empty_dir.path()), 0, empty_dir.path())?;
    let (loaded, open) = measure(&sqlite(dir.path()), tasks, dir.path())?;
    ensure!(
        open == tasks as i64,
        "{open} of {tasks} tasks open after the starts"
    );
    println!(
        "  SQLite:     {:.2} s with {tasks} tasks (empty store: {:.2} s; target ≤ 5 s)",
        loaded.as_secs_f64(),
        empty.as_secs_f64()
    );
    match std::env::var("TEST_DATABASE_URL") {
        Ok(admin) => {
            let (empty_db, full_db) = (pg::PgDatabase::create(&admin)?, pg::PgDatabase::create(&admin)?);
            let (empty, _) = measure(&empty_db.url, 0, empty_dir.path())?;
            let (loaded, open) = measure(&full_db.url, tasks, dir.path())?;
            ensure!(open == tasks as i64, "{open} of {tasks} tasks open after the starts");
            println!(
                "  PostgreSQL: {:.2} s with {tasks} tasks (empty store: {:.2} s)",
                loaded.as_secs_f64(),
                empty.as_secs_f64()
            );
        }
        Err(_) => println!("  PostgreSQL: skipped (TEST_DATABASE_URL is not set; run it under scripts/with-postgres)"),
    }
    Ok(())
}
