//! Actor-tree benchmark: memory per idle session actor, and scheduling latency
//! from a webhook's commit to the agent runtime's start, in process, on a real
//! SQLite store with the scripted runtime.
//!
//! `cargo bench --bench actors` (or `scripts/bench-actors`). Environment:
//! `BENCH_SESSIONS` (default 100000), `BENCH_REPOS` (default 300). Without
//! `--bench` (under `cargo test --all-targets`) it runs a small smoke version
//! and only checks that everything was scheduled.

mod common;

use actix::prelude::*;
use anyhow::{bail, Result};
use codex_bridge::actors::registry::{DrainSession, Notify, Registry, Snapshot};
use codex_bridge::actors::{ActorDeps, ActorSettings};
use codex_bridge::agent::scripted::ScriptedAgent;
use codex_bridge::domain::IngestRequest;
use codex_bridge::forge::scripted::ScriptedForge;
use codex_bridge::store::ingest::IngestOutcome;
use codex_bridge::store::Store;
use common::{percentile, rss_bytes, Folders};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn request(repo: usize, n: usize) -> IngestRequest {
    common::trigger_request(
        &format!("repo{repo}"),
        n as i64,
        (repo * 1_000_000 + n) as i64,
        &format!("bench-{repo}-{n}"),
        format!("@ccbot bench {repo}-{n}"),
    )
}

struct Rig {
    store: Store,
    runtime: ScriptedAgent,
    registry: Addr<Registry>,
    _dir: tempfile::TempDir,
}

fn rig() -> Result<Rig> {
    let dir = tempfile::tempdir()?;
    let store = common::sqlite_store(dir.path().join("actors.db"))?;
    let runtime = ScriptedAgent::new();
    let mut settings = ActorSettings::new("default");
    // Long sweeps, so that only the notification path schedules work.
    settings.sweep = Duration::from_secs(3600);
    settings.session_idle = Duration::from_secs(3600);
    let deps = Arc::new(ActorDeps {
        store: store.clone(),
        runtime: Arc::new(runtime.clone()),
        verifier: Arc::new(ScriptedForge::default()),
        workspaces: Arc::new(Folders {
            root: dir.path().join("ws"),
            create: false,
        }),
        settings,
    });
    let registry = Registry::new(deps).start();
    Ok(Rig {
        store,
        runtime,
        registry,
        _dir: dir,
    })
}

/// What `n` idle session actors cost: the allocator's live bytes per actor
/// (the figure judged), and the process's RSS before and after.
struct IdleCost {
    live_per_actor: f64,
    rss_before: u64,
    rss_after: u64,
}

/// Bytes the allocator has handed out and not got back. RSS also holds pages
/// jemalloc keeps after a burst of short-lived futures (its decay takes
/// seconds), so it says more about the start-up burst than about an idle actor.
fn live_bytes() -> Result<u64> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().map_err(|e| anyhow::anyhow!("jemalloc epoch: {e}"))?;
    let bytes = stats::allocated::read().map_err(|e| anyhow::anyhow!("jemalloc stats: {e}"))?;
    Ok(bytes as u64)
}

async fn idle_sessions(n: usize) -> Result<IdleCost> {
    let rig = rig()?;
    // Warm up the store and the runtime of actix before measuring.
    for i in 0..100 {
        rig.registry.do_send(DrainSession {
            session_key: format!("default:warm/w:issue:{}", i + 1).parse()?,
            repo_key: "default:warm/w".parse()?,
        });
    }
    wait_settled(&rig.registry, 100).await?;
    let rss_before = rss_bytes()?;
    let live_before = live_bytes()?;
    for i in 0..n {
        rig.registry.do_send(DrainSession {
            session_key: format!("default:acme/r{}:issue:{}", i % 500, i + 1).parse()?,
            repo_key: format!("default:acme/r{}", i % 500).parse()?,
        });
        if i % 2000 == 0 {
            tokio::task::yield_now().await;
        }
    }
    wait_settled(&rig.registry, n + 100).await?;
    let live_after = live_bytes()?;
    let rss_after = rss_bytes()?;
    drop(rig);
    Ok(IdleCost {
        live_per_actor: live_after.saturating_sub(live_before) as f64 / n as f64,
        rss_before,
        rss_after,
    })
}

/// Waits until `n` session actors have each finished a drive and have none
/// running or queued: idle, with no start-up work in flight.
async fn wait_settled(registry: &Addr<Registry>, n: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let tree = registry.send(Snapshot).await?;
        let settled = tree
            .repositories
            .iter()
            .flat_map(|r| &r.sessions)
            .filter(|s| s.normal_lane.passes > 0 && !s.normal_lane.busy && s.mailbox_backlog == 0)
            .count();
        if settled >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {settled} of {n} session actors settled");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Commit → runtime start, for one task in each of `repos` repositories:
/// all committed at once (`pace` zero) or one every `pace`.
async fn scheduling(repos: usize, pace: Duration) -> Result<Vec<f64>> {
    let rig = rig()?;
    let mut committed: HashMap<String, Instant> = HashMap::new();
    let mut pending = Vec::new();
    for r in 0..repos {
        let store = rig.store.clone();
        let registry = rig.registry.clone();
        let start = pace * r as u32;
        pending.push(async move {
            tokio::time::sleep(start).await;
            let out = store.ingest(request(r, 1)).await?;
            let at = Instant::now();
            registry.do_send(Notify {
                repo_key: format!("default:acme/repo{r}").parse()?,
            });
            match out {
                IngestOutcome::Accepted { .. } => {
                    Ok::<_, anyhow::Error>((format!("@ccbot bench {r}-1"), at))
                }
                other => bail!("not accepted: {other:?}"),
            }
        });
    }
    for result in futures_util::future::join_all(pending).await {
        let (text, at) = result?;
        committed.insert(text, at);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while rig.runtime.calls().len() < repos {
        if Instant::now() > deadline {
            bail!(
                "only {} of {repos} tasks reached the runtime",
                rig.runtime.calls().len()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut ms: Vec<f64> = rig
        .runtime
        .calls()
        .iter()
        .filter_map(|c| {
            committed
                .get(&c.text)
                .map(|at| c.at.saturating_duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    Ok(ms)
}

struct Figures {
    label: String,
    p50: f64,
    p99: f64,
    max: f64,
    count: usize,
}

fn figures(label: String, latencies: &[f64]) -> Figures {
    Figures {
        label,
        p50: percentile(latencies, 0.5),
        p99: percentile(latencies, 0.99),
        max: latencies.last().copied().unwrap_or(f64::NAN),
        count: latencies.len(),
    }
}

fn main() -> Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    let (sessions, repos) = if full {
        (
            env_num("BENCH_SESSIONS", 100_000),
            env_num("BENCH_REPOS", 300),
        )
    } else {
        (1_000, 20)
    };
    // Each phase in its own actix system, so one phase's actors are gone
    // before the next is measured.
    let idle = System::new().block_on(idle_sessions(sessions))?;
    let per_session = idle.live_per_actor;
    let rss_per_session = idle.rss_after.saturating_sub(idle.rss_before) as f64 / sessions as f64;
    let burst = System::new().block_on(scheduling(repos, Duration::ZERO))?;
    // A steady stream over the same repositories: 150 commits a second.
    let paced = System::new().block_on(scheduling(repos, Duration::from_micros(6_667)))?;
    let runs = [
        figures(format!("{repos} repositories committed at once"), &burst),
        figures(format!("{repos} repositories, 150 commits/s"), &paced),
    ];
    println!("actor benchmark ({}):", if full { "full" } else { "smoke" });
    println!(
        "  idle session actors: {sessions}, live heap {:.0} bytes ({:.2} KiB) per actor (RSS {:.1} MiB -> {:.1} MiB, {:.2} KiB per actor)  target <= 16 KiB  {}",
        per_session,
        per_session / 1024.0,
        idle.rss_before as f64 / 1048576.0,
        idle.rss_after as f64 / 1048576.0,
        rss_per_session / 1024.0,
        if per_session <= 16.0 * 1024.0 { "PASS" } else { "MISS" }
    );
    for f in &runs {
        println!(
            "  scheduling, commit -> runtime start, {}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms  target p99 <= 20 ms  {}",
            f.label,
            f.p50,
            f.p99,
            f.max,
            if f.p99 <= 20.0 { "PASS" } else { "MISS" }
        );
    }
    if full {
        let json = serde_json::json!({
            "benchmark": "actors",
            "sessions": sessions,
            "rssBeforeBytes": idle.rss_before,
            "rssAfterBytes": idle.rss_after,
            "bytesPerIdleSession": per_session,
            "scheduling": runs.iter().map(|f| serde_json::json!({
                "run": f.label, "p50Ms": f.p50, "p99Ms": f.p99, "maxMs": f.max, "count": f.count,
            })).collect::<Vec<_>>(),
        });
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-actors.json");
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
        println!("  figures written to {}", path.display());
    } else if runs.iter().any(|f| f.count != repos) {
        bail!("smoke: not every task was scheduled");
    }
    Ok(())
}

// The binary's allocator (src/main.rs), so that memory per actor is what the
// server would show.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
