//! Workflow benchmark: the bridge's cost of one continuation (the turn's
//! final committed → the next `turn/start`), and memory per open workflow
//! with many open, in process, on a real SQLite store with the scripted
//! runtime and no backoff.
//!
//! Each workflow lives in a repository of its own (one turn per repository
//! at a time is the default), starts from a mention, and is continued after
//! every ordinary final until `workflow_max_idle_finals` finals in a row open
//! its owner gate. The latency of a continuation is measured from the end of
//! the previous turn as the runtime reports it (so it includes committing the
//! final) to the continuation's turn start.
//!
//! In the same run, the machine's own floor: one durable write transaction
//! of the same store (SQLite, `synchronous=FULL`), which every step of a
//! continuation pays at least once.
//!
//! `cargo bench --bench workflows` (`BENCH_WORKFLOWS`, default 50 continued
//! workflows; `BENCH_OPEN_WORKFLOWS`, default 1000 open ones). Under `cargo
//! test --all-targets` it runs a smoke version and checks what ran.

mod common;

use actix::prelude::*;
use anyhow::{bail, Result};
use codex_bridge::actors::registry::{Notify, Registry};
use codex_bridge::actors::{ActorDeps, ActorSettings};
use codex_bridge::agent::scripted::{Script, ScriptedAgent, Step};
use codex_bridge::domain::workflow::{WorkflowState, CONTINUATION_TEXT};
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

struct Rig {
    store: Store,
    runtime: ScriptedAgent,
    registry: Addr<Registry>,
    _dir: tempfile::TempDir,
}

/// A registry whose workflows continue at once (`backoff` zero) or wait.
fn rig(idle_finals: i64, backoff: Duration) -> Result<Rig> {
    // On the build disk, as a deployment would have it, whatever TMPDIR says.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let store = common::sqlite_store(dir.path().join("workflows.db"))?;
    let runtime = ScriptedAgent::new();
    runtime.offer_workflow_tools();
    // The mention's turn and every continuation end with an ordinary final.
    runtime.on(
        "@ccbot",
        Script::steps(vec![Step::Complete("working".into())]),
    );
    runtime.on(
        CONTINUATION_TEXT,
        Script::steps(vec![Step::Complete("still working".into())]),
    );
    let mut settings = ActorSettings::new("default");
    settings.bot_login = "ccbot".into();
    settings.sweep = Duration::from_secs(3600);
    settings.session_idle = Duration::from_secs(3600);
    settings.workflows = true;
    settings.continuation_backoff = backoff;
    settings.workflow_max_idle_finals = idle_finals;
    settings.limits.user_triggers_per_hour = 0;
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

/// Starts one workflow in each of `n` repositories.
async fn mention_all(rig: &Rig, n: usize) -> Result<()> {
    for r in 0..n {
        let req = common::trigger_request(
            &format!("w{r}"),
            1,
            r as i64 + 1,
            &format!("wf-{r}"),
            format!("@ccbot keep going {r}"),
        );
        match rig.store.ingest(req).await? {
            IngestOutcome::Accepted { .. } => {}
            other => bail!("not accepted: {other:?}"),
        }
        rig.registry.do_send(Notify {
            repo_key: format!("default:acme/w{r}").parse()?,
        });
    }
    Ok(())
}

/// Waits until the runtime has started `calls` turns and then no more for
/// a moment (every workflow reached its gate, or waits out its backoff).
async fn wait_calls(rig: &Rig, calls: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while rig.runtime.calls().len() < calls {
        if Instant::now() > deadline {
            bail!(
                "only {} of {calls} turns reached the runtime",
                rig.runtime.calls().len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Final → next turn start, per continuation, in milliseconds (sorted).
async fn continuation_cost(workflows: usize, idle_finals: i64) -> Result<Vec<f64>> {
    let rig = rig(idle_finals, Duration::ZERO)?;
    mention_all(&rig, workflows).await?;
    // The mention's turn, then a continuation after each of its finals but
    // the last, which opens the gate.
    let per_workflow = idle_finals as usize;
    wait_calls(&rig, workflows * per_workflow).await?;
    // Read the turns only once every workflow stopped at its gate: before
    // that, its last continuation may or may not have started.
    let deadline = Instant::now() + Duration::from_secs(600);
    while workflows_in(&rig, WorkflowState::WaitingOwner).await? < workflows as i64 {
        if Instant::now() > deadline {
            bail!("not every workflow reached its gate");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ends: HashMap<String, Instant> = rig.runtime.ends().into_iter().collect();
    let mut by_repo: HashMap<PathBuf, Vec<(Instant, Option<Instant>)>> = HashMap::new();
    for c in rig.runtime.calls() {
        by_repo
            .entry(c.cwd.clone())
            .or_default()
            .push((c.at, ends.get(&c.turn_id).copied()));
    }
    let mut ms = Vec::new();
    for turns in by_repo.values_mut() {
        turns.sort_by_key(|t| t.0);
        for pair in turns.windows(2) {
            if let Some(ended) = pair[0].1 {
                ms.push(pair[1].0.saturating_duration_since(ended).as_secs_f64() * 1000.0);
            }
        }
    }
    ms.sort_by(|a, b| a.total_cmp(b));
    Ok(ms)
}

/// How many workflows are in `state`.
async fn workflows_in(rig: &Rig, state: WorkflowState) -> Result<i64> {
    Ok(rig
        .store
        .read(move |c| {
            use codex_bridge::store::schema::workflows as w;
            use diesel::prelude::*;
            Ok(codex_bridge::with_conn!(c, |x| w::table
                .filter(w::state.eq(state))
                .count()
                .get_result::<i64>(x))?)
        })
        .await?)
}

/// One durable write transaction of the same kind of store, in
/// milliseconds (sorted): the floor under every continuation step.
async fn commit_floor(samples: usize) -> Result<Vec<f64>> {
    let rig = rig(1, Duration::ZERO)?;
    let mut ms = Vec::with_capacity(samples);
    for _ in 0..samples {
        let at = Instant::now();
        rig.store
            .write(|c| {
                use codex_bridge::store::audit::{self, Audit};
                audit::record(c, &Audit::new("bench.floor", "bench")).map(drop)
            })
            .await?;
        ms.push(at.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(|a, b| a.total_cmp(b));
    Ok(ms)
}

/// Bytes the allocator has handed out and not got back.
fn live_bytes() -> Result<u64> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().map_err(|e| anyhow::anyhow!("jemalloc epoch: {e}"))?;
    let bytes = stats::allocated::read().map_err(|e| anyhow::anyhow!("jemalloc stats: {e}"))?;
    Ok(bytes as u64)
}

/// What `n` open workflows cost: live heap per workflow (each waits out a
/// long backoff after its first final, its session actor idle), and the
/// process's RSS before and after.
struct OpenCost {
    heap_per_workflow: f64,
    rss_before: u64,
    rss_after: u64,
}

async fn open_workflows(n: usize) -> Result<OpenCost> {
    let rig = rig(65, Duration::from_secs(3600))?;
    // Warm the store and actix up with workflows that are not counted.
    mention_all(&rig, 20).await?;
    wait_calls(&rig, 20).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (live_before, rss_before) = (live_bytes()?, rss_bytes()?);
    for r in 20..20 + n {
        let req = common::trigger_request(
            &format!("w{r}"),
            1,
            r as i64 + 1,
            &format!("wf-{r}"),
            format!("@ccbot keep going {r}"),
        );
        if !matches!(rig.store.ingest(req).await?, IngestOutcome::Accepted { .. }) {
            bail!("a mention was not accepted");
        }
        rig.registry.do_send(Notify {
            repo_key: format!("default:acme/w{r}").parse()?,
        });
    }
    wait_calls(&rig, 20 + n).await?;
    // The last finals commit their continuation; then all is quiet.
    let deadline = Instant::now() + Duration::from_secs(300);
    while workflows_in(&rig, WorkflowState::Open).await? < (20 + n) as i64 {
        if Instant::now() > deadline {
            bail!("not every workflow is open");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (live_after, rss_after) = (live_bytes()?, rss_bytes()?);
    Ok(OpenCost {
        heap_per_workflow: live_after.saturating_sub(live_before) as f64 / n as f64,
        rss_before,
        rss_after,
    })
}

fn main() -> Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    let (workflows, idle_finals, open) = if full {
        (
            env_num("BENCH_WORKFLOWS", 50),
            10,
            env_num("BENCH_OPEN_WORKFLOWS", 1000),
        )
    } else {
        (5, 3, 50)
    };
    // One workflow alone (the bridge's own cost), then many at once.
    let alone = System::new().block_on(continuation_cost(1, idle_finals * 5))?;
    let cost = System::new().block_on(continuation_cost(workflows, idle_finals))?;
    let floor = System::new().block_on(commit_floor(500))?;
    let mem = System::new().block_on(open_workflows(open))?;
    // Each workflow: its comment's turn, then a continuation after each
    // final until the `idle_finals`-th final without progress opens its gate.
    let expected = workflows * idle_finals as usize;
    println!(
        "workflow benchmark ({}):",
        if full { "full" } else { "smoke" }
    );
    println!(
        "  continuation, final -> next turn/start, one workflow alone, {} continuations: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        alone.len(),
        percentile(&alone, 0.5),
        percentile(&alone, 0.99),
        alone.last().copied().unwrap_or(f64::NAN),
    );
    println!(
        "  continuation, final -> next turn/start, {} continuations of {workflows} workflows: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        cost.len(),
        percentile(&cost, 0.5),
        percentile(&cost, 0.99),
        cost.last().copied().unwrap_or(f64::NAN),
    );
    println!(
        "  machine's floor, one durable store write: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&floor, 0.5),
        percentile(&floor, 0.99),
    );
    println!(
        "  open workflows: {open}, live heap {:.0} bytes ({:.2} KiB) per workflow, its idle session actor included (RSS {:.1} MiB -> {:.1} MiB)",
        mem.heap_per_workflow,
        mem.heap_per_workflow / 1024.0,
        mem.rss_before as f64 / 1048576.0,
        mem.rss_after as f64 / 1048576.0,
    );
    if full {
        let json = serde_json::json!({
            "benchmark": "workflows",
            "aloneContinuations": alone.len(),
            "aloneP50Ms": percentile(&alone, 0.5),
            "aloneP99Ms": percentile(&alone, 0.99),
            "continuations": cost.len(),
            "continuationP50Ms": percentile(&cost, 0.5),
            "continuationP99Ms": percentile(&cost, 0.99),
            "commitFloorP50Ms": percentile(&floor, 0.5),
            "commitFloorP99Ms": percentile(&floor, 0.99),
            "openWorkflows": open,
            "heapBytesPerOpenWorkflow": mem.heap_per_workflow,
        });
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-workflows.json");
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
        println!("  figures written to {}", path.display());
    } else if cost.len() != expected || alone.len() != idle_finals as usize * 5 {
        bail!(
            "smoke: {} and {} continuations measured, {expected} and {} expected",
            cost.len(),
            alone.len(),
            idle_finals * 5
        );
    }
    Ok(())
}

// The binary's allocator (src/main.rs), so that memory per workflow is what
// the server would show.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
