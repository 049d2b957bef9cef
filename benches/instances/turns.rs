//! Turns started per second with N instances on one database: a backlog of
//! tasks over several repositories, released to N actor trees at once.

use crate::pg::PgDatabase;
use crate::rig::{self, CpuMeter, CpuUse, Instance, Observer, OwnerShare, Timings};
use anyhow::{bail, ensure, Context as _, Result};
use codex_bridge::agent::scripted::ScriptedAgent;
use codex_bridge::store::ingest::IngestOutcome;
use codex_bridge::store::Store;
use std::collections::HashSet;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Figures {
    pub instances: usize,
    pub tasks: usize,
    pub repos: usize,
    /// From the release to the last task's turn start.
    pub started: Duration,
    /// From the release to every task seen `succeeded` (looked at every 20 ms).
    pub succeeded: Duration,
    pub cpu: CpuUse,
    /// Attempts, repositories and leases of each instance, in launch order.
    pub shares: Vec<OwnerShare>,
    /// `writer_threads` of each instance's store (`None`: the default).
    pub writer_threads: Option<usize>,
    /// Deadlocks PostgreSQL detected between the writers' transactions.
    pub deadlocks: i64,
}

impl Figures {
    pub fn turns_per_s(&self) -> f64 {
        self.tasks as f64 / self.started.as_secs_f64()
    }
}

/// `tasks` tasks, each on an Issue of its own, over `repos` repositories,
/// queued before any instance runs; then `n` registries start at once (the
/// release), each finding the backlog in its first sweep.
pub fn run(
    db: &PgDatabase,
    n: usize,
    tasks: usize,
    repos: usize,
    timings: Timings,
    writer_threads: Option<usize>,
) -> Result<Figures> {
    let threads = writer_threads.map(|t| t.to_string());
    let extra: Vec<(&str, &str)> = threads
        .iter()
        .map(|t| ("writer_threads", t.as_str()))
        .collect();
    let stores = rig::open_stores(&db.url, n, &extra)?;
    queue(&stores[0], tasks, repos)?;
    let ws = tempfile::tempdir()?;
    let mut instances = stores
        .into_iter()
        .enumerate()
        .map(|(i, store)| {
            Instance::launch(
                &i.to_string(),
                store,
                ScriptedAgent::new(),
                timings,
                ws.path().join(i.to_string()),
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let mut db_view = Observer::connect(&db.url)?;
    let cpu = CpuMeter::start(db.backend_pids());
    let released = Instant::now();
    for i in &mut instances {
        i.go();
    }
    let limit = Duration::from_secs(60) + Duration::from_millis(100) * tasks as u32;
    rig::wait_until(
        "every task's turn started",
        limit,
        Duration::from_millis(10),
        || {
            Ok(instances
                .iter()
                .map(|i| i.runtime.calls().len())
                .sum::<usize>()
                >= tasks)
        },
    )?;
    let done = rig::wait_until(
        "every task succeeded",
        limit,
        Duration::from_millis(20),
        || {
            Ok(
                db_view.count("SELECT count(*) AS n FROM tasks WHERE state = 'succeeded'")?
                    == tasks as i64,
            )
        },
    );
    let done = match done {
        Ok(at) => at,
        Err(e) => bail!("{e:#} (tasks now: {})", db_view.task_states()?),
    };
    let cpu = cpu.stop();
    let calls: Vec<_> = instances.iter().flat_map(|i| i.runtime.calls()).collect();
    let last_start = calls
        .iter()
        .map(|c| c.at)
        .max()
        .context("no turn started")?;
    // Exactly once: as many turns as tasks, each task's text in one of them.
    let texts: HashSet<&str> = calls.iter().map(|c| c.text.as_str()).collect();
    ensure!(
        calls.len() == tasks && texts.len() == tasks,
        "{} turns started for {tasks} tasks ({} distinct)",
        calls.len(),
        texts.len()
    );
    let not_once = db_view.count(
        "SELECT count(*) AS n FROM (SELECT t.task_id FROM tasks t \
         LEFT JOIN attempts a ON a.task_id = t.task_id \
         GROUP BY t.task_id HAVING count(a.attempt_id) <> 1) x",
    )?;
    ensure!(
        not_once == 0,
        "{not_once} tasks without exactly one attempt"
    );
    let found = db_view.shares()?;
    // Only the instances launched here took attempts.
    if let Some(stranger) = found
        .iter()
        .find(|s| !instances.iter().any(|i| i.owner == s.owner))
    {
        bail!("attempts by an owner no instance has: {}", stranger.owner);
    }
    // In launch order, an instance that took nothing included.
    let shares = instances
        .iter()
        .map(|i| {
            found
                .iter()
                .find(|s| s.owner == i.owner)
                .cloned()
                .unwrap_or_else(|| OwnerShare {
                    owner: i.owner.clone(),
                    attempts: 0,
                    repos: 0,
                    leases: 0,
                })
        })
        .collect();
    drop(instances);
    let deadlocks = db_view.deadlocks_after_exit()?;
    Ok(Figures {
        instances: n,
        tasks,
        repos,
        started: last_start.saturating_duration_since(released),
        succeeded: done.saturating_duration_since(released),
        cpu,
        shares,
        writer_threads,
        deadlocks,
    })
}

/// Commits the backlog through `store`, as webhooks would have, and checks
/// each was accepted.
fn queue(store: &Store, tasks: usize, repos: usize) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let pending = (0..tasks).map(|j| {
            let req = crate::common::trigger_request(
                &format!("repo{}", j % repos),
                (j / repos + 1) as i64,
                j as i64 + 1,
                &format!("turns-{j}"),
                format!("@ccbot bench {j}"),
            );
            store.ingest(req)
        });
        for outcome in futures_util::future::join_all(pending).await {
            match outcome? {
                IngestOutcome::Accepted { .. } => {}
                other => bail!("a queued task was not accepted: {other:?}"),
            }
        }
        Ok(())
    })
}
