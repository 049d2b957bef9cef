//! Children benchmark, in process, on a real SQLite store with the scripted
//! runtime (which calls the bridge's tools as a model would):
//!
//! - the bridge's cost of one result delivery: a child's turn records its
//!   result and ends → the parent's next `turn/start`, whose input carries
//!   the result. Each parent lives in a repository of its own and assigns
//!   one child; one turn per repository at a time (the default), so the
//!   parent's continuation starts once the child's turn has settled.
//! - the wall time of a parent whose two children each work for a while,
//!   mention → both results recorded, with the two children running side by
//!   side (`max_parallel_turns_per_repo = 2`) and one at a time (1).
//!
//! In the same run, the machine's own floor: one durable write transaction
//! of the same store, which a delivery pays several times.
//!
//! `cargo bench --bench children` (`BENCH_PARENTS`, default 50;
//! `BENCH_CHILD_WORK_MS`, default 500). Under `cargo test --all-targets` it
//! runs a smoke version and checks what ran.

// `rss_bytes` is not used here.
#[allow(dead_code)]
mod common;

use actix::prelude::*;
use anyhow::{bail, Result};
use codex_bridge::actors::registry::{Notify, Registry};
use codex_bridge::actors::{ActorDeps, ActorSettings};
use codex_bridge::agent::scripted::{Script, ScriptedAgent, Step};
use codex_bridge::domain::workflow::CONTINUATION_TEXT;
use codex_bridge::forge::scripted::ScriptedForge;
use codex_bridge::store::ingest::IngestOutcome;
use codex_bridge::store::Store;
use common::{percentile, Folders};
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a child's prompt says first: it names a child's turn.
const CHILD: &str = "You are a delegated child";

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

/// A registry whose parents delegate as `parent` says, whose children work
/// for `work` and record a result, and whose continuations end at once.
fn rig(parent: Vec<Step>, work: Duration, parallel: usize) -> Result<Rig> {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let store = common::sqlite_store(dir.path().join("children.db"))?;
    let runtime = ScriptedAgent::new();
    runtime.offer_workflow_tools();
    let mut child = Vec::new();
    if !work.is_zero() {
        child.push(Step::Sleep(work));
    }
    child.push(Step::CallTool(
        "record_result",
        json!({"summary": "done", "filesChanged": ["src/lib.rs"], "checksRun": ["cargo test"]}),
    ));
    child.push(Step::Complete("recorded".into()));
    runtime.on(CHILD, Script::steps(child));
    runtime.on("@ccbot", Script::steps(parent));
    runtime.on(
        CONTINUATION_TEXT,
        Script::steps(vec![Step::Complete("read it".into())]),
    );
    let mut settings = ActorSettings::new("default");
    settings.bot_login = "ccbot".into();
    settings.sweep = Duration::from_secs(3600);
    settings.session_idle = Duration::from_secs(3600);
    settings.workflows = true;
    settings.continuation_backoff = Duration::from_secs(3600);
    settings.max_parallel_turns = parallel;
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

fn assign(what: &str) -> Step {
    Step::CallTool(
        "assign_child",
        json!({"title": what, "instructions": format!("Do the {what}.")}),
    )
}

/// Mentions the bot once in each of `n` repositories.
async fn mention_all(rig: &Rig, n: usize) -> Result<()> {
    for r in 0..n {
        let req = common::trigger_request(
            &format!("c{r}"),
            1,
            r as i64 + 1,
            &format!("ch-{r}"),
            format!("@ccbot fix it {r}"),
        );
        match rig.store.ingest(req).await? {
            IngestOutcome::Accepted { .. } => {}
            other => bail!("not accepted: {other:?}"),
        }
        rig.registry.do_send(Notify {
            repo_key: format!("default:acme/c{r}").parse()?,
        });
    }
    Ok(())
}

/// Results recorded so far.
async fn results(rig: &Rig) -> Result<i64> {
    Ok(rig
        .store
        .read(|c| {
            use codex_bridge::store::schema::workflow_results as r;
            use diesel::prelude::*;
            Ok(codex_bridge::with_conn!(c, |x| r::table
                .count()
                .get_result::<i64>(x))?)
        })
        .await?)
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while !done().await? {
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// The child's turn ended → the parent's next turn/start carrying the
/// result, per parent, in milliseconds (sorted).
async fn delivery_cost(parents: usize) -> Result<Vec<f64>> {
    let rig = rig(
        vec![assign("fix"), Step::Complete("assigned".into())],
        Duration::ZERO,
        1,
    )?;
    mention_all(&rig, parents).await?;
    // Each repository: the mention's turn, the child's, the carrying one.
    wait_for("every result carried", async || {
        Ok(rig
            .runtime
            .calls()
            .iter()
            .filter(|c| c.text.contains("result(s) of your children arrived"))
            .count()
            >= parents)
    })
    .await?;
    let ends: HashMap<String, Instant> = rig.runtime.ends().into_iter().collect();
    let mut by_repo: HashMap<PathBuf, (Option<Instant>, Option<Instant>)> = HashMap::new();
    for c in rig.runtime.calls() {
        let e = by_repo.entry(c.cwd.clone()).or_default();
        if c.text.contains(CHILD) {
            e.0 = ends.get(&c.turn_id).copied();
        } else if c.text.contains("result(s) of your children arrived") {
            e.1 = Some(c.at);
        }
    }
    let mut ms: Vec<f64> = by_repo
        .values()
        .filter_map(|(end, start)| Some(start.as_ref()?.saturating_duration_since((*end)?)))
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    Ok(ms)
}

/// One parent, two children working `work` each: mention → both results.
async fn two_children(parallel: usize, work: Duration) -> Result<Duration> {
    let rig = rig(
        vec![
            assign("parser"),
            assign("docs"),
            Step::Complete("assigned".into()),
        ],
        work,
        parallel,
    )?;
    let at = Instant::now();
    mention_all(&rig, 1).await?;
    wait_for("both results", async || Ok(results(&rig).await? >= 2)).await?;
    Ok(at.elapsed())
}

/// One durable write transaction of the same kind of store (sorted ms).
async fn commit_floor(samples: usize) -> Result<Vec<f64>> {
    let rig = rig(Vec::new(), Duration::ZERO, 1)?;
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

fn main() -> Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    let (parents, work) = if full {
        (
            env_num("BENCH_PARENTS", 50),
            Duration::from_millis(env_num("BENCH_CHILD_WORK_MS", 500) as u64),
        )
    } else {
        (5, Duration::from_millis(200))
    };
    let alone = System::new().block_on(delivery_cost(1))?;
    let cost = System::new().block_on(delivery_cost(parents))?;
    let side_by_side = System::new().block_on(two_children(2, work))?;
    let one_at_a_time = System::new().block_on(two_children(1, work))?;
    let floor = System::new().block_on(commit_floor(500))?;
    println!(
        "children benchmark ({}):",
        if full { "full" } else { "smoke" }
    );
    println!(
        "  result delivery, child's turn ended -> parent's next turn/start carrying it, one parent alone: {:.2} ms",
        alone.first().copied().unwrap_or(f64::NAN),
    );
    println!(
        "  result delivery, {} parents at once (one repository each): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        cost.len(),
        percentile(&cost, 0.5),
        percentile(&cost, 0.99),
        cost.last().copied().unwrap_or(f64::NAN),
    );
    println!(
        "  two children of {} ms work each, mention -> both results: side by side {:.0} ms, one at a time {:.0} ms",
        work.as_millis(),
        side_by_side.as_secs_f64() * 1000.0,
        one_at_a_time.as_secs_f64() * 1000.0,
    );
    println!(
        "  machine's floor, one durable store write: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&floor, 0.5),
        percentile(&floor, 0.99),
    );
    if full {
        let json = serde_json::json!({
            "benchmark": "children",
            "deliveryAloneMs": alone.first(),
            "parents": cost.len(),
            "deliveryP50Ms": percentile(&cost, 0.5),
            "deliveryP99Ms": percentile(&cost, 0.99),
            "childWorkMs": work.as_millis() as u64,
            "twoChildrenSideBySideMs": side_by_side.as_secs_f64() * 1000.0,
            "twoChildrenOneAtATimeMs": one_at_a_time.as_secs_f64() * 1000.0,
            "commitFloorP50Ms": percentile(&floor, 0.5),
            "commitFloorP99Ms": percentile(&floor, 0.99),
        });
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-children.json");
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
        println!("  figures written to {}", path.display());
    } else {
        if cost.len() != parents || alone.len() != 1 {
            bail!(
                "smoke: {} and {} deliveries measured, {parents} and 1 expected",
                cost.len(),
                alone.len()
            );
        }
        // Side by side the two children's work overlaps; one at a time it
        // adds up.
        if one_at_a_time < work * 2 || side_by_side >= one_at_a_time {
            bail!(
                "smoke: two children took {side_by_side:?} side by side and {one_at_a_time:?} one at a time ({work:?} of work each)"
            );
        }
    }
    Ok(())
}

// The binary's allocator (src/main.rs), as the server runs.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
