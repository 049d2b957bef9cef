//! Catch-up benchmark: one pass over many known repositories (default 500)
//! in the Gitea simulator, its duration and its requests.
//!
//! Each repository is registered the way it is in use (a webhook's task),
//! then gets a few plain comments that reach it only through the REST API;
//! one in ten also gets a mention whose webhook was lost, and one in fifty a
//! mention on a Pull Request (which costs one more request, for its
//! branches). Three passes run, in process, on a SQLite store on the build
//! disk: the first finds the mentions and makes their tasks, the next two
//! find nothing new (the steady state: one listing per repository).
//!
//! In the same run, the machine's own limit: the simulator's round trip for
//! the same listing, one request at a time and four at a time (the pass's
//! concurrency), from this process, without the bridge.
//!
//! `cargo bench --bench catchup` (`BENCH_CATCHUP_REPOS`, default 500). Under
//! `cargo test --all-targets` it runs a smoke version with 20 repositories
//! and checks what the passes did (tasks and requests), not their speed.

#[macro_use]
#[path = "common/simulator.rs"]
mod simulator;

gitea_simulator!();

#[allow(dead_code)]
mod common;

use anyhow::{bail, ensure, Context as _, Result};
use codex_bridge::config::DatabaseUrl;
use codex_bridge::gitea::GiteaClient;
use codex_bridge::jobs::catchup::{CatchupSettings, CatchupWorker, PassReport};
use codex_bridge::store::ingest::IngestOutcome;
use codex_bridge::store::{Store, StoreSettings, WriterSettings};
use codex_bridge::webhook::event::Normalizer;
use common::percentile;
use giteasim::{GiteaSim, Perm};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{BOT, GITEA_TOKEN};

const OWNER: &str = "acme";
/// Plain comments per repository (no mention).
const PLAIN: usize = 3;
/// Listings timed one at a time for the machine's limit.
const PROBES: usize = 200;

fn repo(n: usize) -> String {
    format!("r{n}")
}

/// What the simulator holds, and what a pass should make of it.
struct World {
    sim: GiteaSim,
    /// Mentions whose webhook was lost, on an Issue / on a Pull Request.
    issue_mentions: usize,
    pull_mentions: usize,
}

/// The repositories, each with an Issue (number 1); one in fifty also with a
/// Pull Request (number 2).
fn repositories(repos: usize) -> GiteaSim {
    let sim = GiteaSim::start();
    sim.add_user("bob");
    for n in 0..repos {
        let name = repo(n);
        sim.create_repo(OWNER, &name);
        sim.set_permission(OWNER, &name, BOT, Perm::Admin);
        sim.set_permission(OWNER, &name, "bob", Perm::Write);
        sim.create_issue(OWNER, &name, "Issue", "", "bob");
        if n % 50 == 0 {
            sim.commit(OWNER, &name, "topic", "x.txt", "x\n", "wip");
            sim.create_pull(OWNER, &name, "Topic", "", "bob", "topic", "main");
        }
    }
    sim
}

/// The comments only the REST API has (the simulator has no hook), said
/// after the bridge first saw each repository.
fn comments(sim: GiteaSim, repos: usize) -> World {
    let (mut issue_mentions, mut pull_mentions) = (0, 0);
    for n in 0..repos {
        let name = repo(n);
        for k in 0..PLAIN {
            sim.post_comment_without_webhook("bob", OWNER, &name, 1, &format!("plain remark {k}"));
        }
        if n % 10 == 0 {
            sim.post_comment_without_webhook(
                "bob",
                OWNER,
                &name,
                1,
                &format!("@{BOT} please look ({n})"),
            );
            issue_mentions += 1;
        }
        if n % 50 == 0 {
            sim.post_comment_without_webhook(
                "bob",
                OWNER,
                &name,
                2,
                &format!("@{BOT} review this ({n})"),
            );
            pull_mentions += 1;
        }
    }
    World {
        sim,
        issue_mentions,
        pull_mentions,
    }
}

/// The store with every repository known: each got a task from a webhook,
/// as the server registers repositories.
async fn store(dir: &std::path::Path, repos: usize) -> Result<Store> {
    let store = Store::open(&StoreSettings {
        url: DatabaseUrl::Sqlite(dir.join("catchup.db")),
        read_pool_size: 8,
        sqlite_busy_timeout: Duration::from_secs(5),
        writer: WriterSettings {
            batch_max: 256,
            threads: 1,
            queue_capacity: 4096,
            ingest: Default::default(),
        },
    })?;
    for n in 0..repos {
        let req = common::trigger_request(
            &repo(n),
            1,
            900_000_000 + n as i64,
            &format!("register-{n}"),
            format!("@{BOT} hello"),
        );
        let outcome = store.ingest(req).await?;
        ensure!(
            matches!(outcome, IngestOutcome::Accepted { .. }),
            "registering {}: {outcome:?}",
            repo(n)
        );
    }
    Ok(store)
}

/// The machine's limit: the same listing the pass makes, straight from this
/// process. (ms of one round trip, sorted; requests per second four at a time)
fn machine_limit(sim: &GiteaSim, repos: usize) -> Result<(Vec<f64>, f64)> {
    let since = (chrono::Utc::now() - chrono::Duration::hours(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let url = |n: usize| {
        format!(
            "{}/repos/{OWNER}/{}/issues/comments?since={since}&page=1&limit=50",
            sim.api_url(),
            repo(n)
        )
    };
    let auth = format!("token {GITEA_TOKEN}");
    let agent = ureq::agent();
    let get = |agent: &ureq::Agent, n: usize| -> Result<()> {
        agent
            .get(&url(n))
            .set("Authorization", &auth)
            .call()
            .context("probe listing")?
            .into_string()?;
        Ok(())
    };
    let mut one = Vec::with_capacity(PROBES);
    for i in 0..PROBES {
        let t = Instant::now();
        get(&agent, i % repos)?;
        one.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    one.sort_by(f64::total_cmp);
    let started = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let get = &get;
                s.spawn(move || -> Result<()> {
                    let agent = ureq::agent();
                    for n in (w..repos).step_by(4) {
                        get(&agent, n)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join()
                .map_err(|_| anyhow::anyhow!("a probe thread panicked"))??;
        }
        Ok(())
    })?;
    let per_second = repos as f64 / started.elapsed().as_secs_f64();
    Ok((one, per_second))
}

/// One pass and what it cost: its report, its time, the requests the
/// simulator saw.
struct Pass {
    report: PassReport,
    took: Duration,
    requests: usize,
}

async fn pass(worker: &CatchupWorker, sim: &GiteaSim) -> Pass {
    let before = sim.requests().len();
    let started = Instant::now();
    let report = worker.pass().await;
    let took = started.elapsed();
    Pass {
        report,
        took,
        requests: sim.requests().len() - before,
    }
}

fn run(repos: usize) -> Result<(World, Vec<f64>, f64, Vec<Pass>)> {
    let sim = repositories(repos);
    // On the build disk, as a deployment would have it, whatever TMPDIR says.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let store = rt.block_on(store(dir.path(), repos))?;
    let w = comments(sim, repos);
    let (one, ceiling) = machine_limit(&w.sim, repos)?;
    let worker = CatchupWorker::new(
        store,
        GiteaClient::new(&w.sim.base_url(), GITEA_TOKEN.to_owned().into()),
        Arc::new(Normalizer {
            instance_id: "default".into(),
            bot_login: BOT.into(),
            ignore_logins: Default::default(),
        }),
        None,
        CatchupSettings {
            instance_id: "default".into(),
            owner: "bench".into(),
            interval: Duration::from_secs(60),
            lease_ttl: Duration::from_secs(60),
            // Passes back to back: no repository is left for having been
            // read a moment ago.
            quiet: Duration::ZERO,
            concurrency: codex_bridge::jobs::catchup::CONCURRENCY,
            max_pages: codex_bridge::jobs::catchup::MAX_PAGES,
        },
    );
    let passes = rt.block_on(async {
        let mut passes = Vec::new();
        for _ in 0..3 {
            passes.push(pass(&worker, &w.sim).await);
        }
        passes
    });
    Ok((w, one, ceiling, passes))
}

fn main() -> Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    let repos = if full {
        std::env::var("BENCH_CATCHUP_REPOS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(500)
    } else {
        20
    };
    println!(
        "catch-up benchmark ({}): {repos} known repositories in the Gitea simulator, {PLAIN} plain comments each",
        if full { "full" } else { "smoke" }
    );
    let (w, one, ceiling, passes) = run(repos)?;
    let expected_tasks = w.issue_mentions + w.pull_mentions;
    for (i, p) in passes.iter().enumerate() {
        let r = &p.report;
        let secs = p.took.as_secs_f64();
        println!(
            "  pass {}: {:.3} s, {} requests ({:.0}/s), {} repositories read, {} failed, {} comments, {} tasks",
            i + 1,
            secs,
            p.requests,
            p.requests as f64 / secs,
            r.read,
            r.failed,
            r.comments,
            r.tasks
        );
    }
    let (p50, p99) = (percentile(&one, 0.5), percentile(&one, 0.99));
    println!(
        "  machine limit, the same listing from this process: one at a time p50 {p50:.2} ms, p99 {p99:.2} ms; \
         four at a time {ceiling:.0} requests/s"
    );
    let steady = &passes[2];
    let steady_rate = steady.requests as f64 / steady.took.as_secs_f64();
    println!(
        "  steady pass: {:.0} requests/s = {:.0}% of the simulator's four-at-a-time ceiling",
        steady_rate,
        100.0 * steady_rate / ceiling
    );

    // What the passes must have done, whatever the machine's speed.
    let first = &passes[0];
    if first.report.failed > 0 || first.report.read != repos {
        bail!(
            "the first pass read {} of {repos} repositories ({} failed)",
            first.report.read,
            first.report.failed
        );
    }
    ensure!(
        first.report.tasks == expected_tasks,
        "the first pass made {} tasks, expected {expected_tasks}",
        first.report.tasks
    );
    ensure!(
        first.requests == repos + w.pull_mentions,
        "the first pass made {} requests: one listing per repository and one per Pull Request mention ({}) expected",
        first.requests,
        repos + w.pull_mentions
    );
    for p in &passes[1..] {
        ensure!(
            p.report.tasks == 0,
            "a later pass made {} tasks",
            p.report.tasks
        );
        ensure!(
            p.requests == repos,
            "a later pass made {} requests, one listing per repository ({repos}) expected",
            p.requests
        );
    }
    if full {
        let json = serde_json::json!({
            "benchmark": "catchup",
            "repositories": repos,
            "tasks": first.report.tasks,
            "firstPassSeconds": first.took.as_secs_f64(),
            "firstPassRequests": first.requests,
            "steadyPassSeconds": steady.took.as_secs_f64(),
            "steadyPassRequests": steady.requests,
            "steadyRequestsPerSecond": steady_rate,
            "simListingP50Ms": p50,
            "simListingP99Ms": p99,
            "simCeilingRequestsPerSecond": ceiling,
        });
        let path =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-catchup.json");
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
        println!("  figures written to {}", path.display());
    }
    Ok(())
}
