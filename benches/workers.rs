//! Worker benchmark: what running turns on remote workers costs against
//! running them in the server. Three set-ups of the same deployment (the real
//! server binary on SQLite, the Gitea simulator, the real `codex app-server`
//! and PyPI `gitea-mcp` against the fake model, two repositories with
//! sessions on each):
//!
//! - 0 workers: `agent_runtime = "codex"`, the server runs every turn;
//! - 1 worker: `agent_runtime = "remote"`, one `codex-bridge worker` process
//!   holds both repositories;
//! - 2 workers: one worker per repository, each with its own Codex.
//!
//! For each: the per-turn latency of turns run one at a time (the webhook's
//! accept → the turn started, and → the reply verified and the task
//! `succeeded`, from the task's own history), and then a burst of turns over
//! every session at once: turns started per second (the burst's first accept
//! to its last turn started) and finished per second. A worker's overhead per
//! turn is its latency against the server's own at the same percentile.
//!
//! In the same run, the machine's own limit for the hops a worker adds: a
//! loopback HTTP round trip to the server (`/healthz`), p50 and p99.
//!
//! `cargo bench --bench workers` (`BENCH_WORKER_SEQUENTIAL`, turns one at a
//! time, default 20; `BENCH_WORKER_BURST`, turns per session in the burst,
//! default 4). Under `cargo test --all-targets` it runs a smoke version with
//! one session per repository and two turns each way.

#[macro_use]
#[path = "common/simulator.rs"]
mod simulator;

gitea_simulator!();

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#[path = "../tests/it/fakemodel/mod.rs"]
mod fakemodel;

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#[path = "../tests/it/codexhome.rs"]
mod codexhome;

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#[path = "../tests/it/testapp/mod.rs"]
mod testapp;

#[allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#[path = "../tests/it/workerproc.rs"]
mod workerproc;

#[allow(dead_code)]
mod common;

use anyhow::{bail, Context as _, Result};
use codex_bridge::lifecycle::TaskState;
use codexhome::CodexHome;
use common::percentile;
use fakemodel::{Item, Step};
use giteasim::{GiteaSim, Perm};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::BOT;
use testapp::TestApp;
use workerproc::{WorkerEnv, WorkerProc};

const OWNER: &str = "acme";
const REPOS: [&str; 2] = ["widgets", "gadgets"];
/// How long one turn may take before the run is called failed.
const TURN_TIMEOUT: Duration = Duration::from_secs(180);
/// Loopback round trips measured for the machine's limit.
const PROBES: usize = 200;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runtime {
    /// The server runs the turns.
    Local,
    /// `n` workers (1: one for both repositories; 2: one each).
    Workers(usize),
}

impl Runtime {
    fn label(self) -> String {
        match self {
            Runtime::Local => "0 workers (the server runs Codex)".to_owned(),
            Runtime::Workers(1) => "1 worker (both repositories)".to_owned(),
            Runtime::Workers(n) => format!("{n} workers (one per repository)"),
        }
    }
}

/// A deployment under test; the workers and their Codex homes live as long
/// as it does.
struct Deployment {
    app: TestApp,
    /// (repository, Issue number) of every session.
    sessions: Vec<(&'static str, i64)>,
    workers: Vec<WorkerProc>,
    _homes: Vec<CodexHome>,
}

impl Deployment {
    fn start(runtime: Runtime, per_repo: usize) -> Result<Deployment> {
        let sim = GiteaSim::start();
        sim.add_user("bob");
        let mut sessions = Vec::new();
        for repo in REPOS {
            sim.create_repo(OWNER, repo);
            // Gitea lets only repository admins read others' permissions.
            sim.set_permission(OWNER, repo, BOT, Perm::Admin);
            sim.set_permission(OWNER, repo, "bob", Perm::Write);
            for i in 0..per_repo {
                let number = sim.create_issue(OWNER, repo, &format!("Job {i}"), "Do it.", "bob");
                sessions.push((repo, number));
            }
        }
        let runtime_key = match runtime {
            Runtime::Local => "codex",
            Runtime::Workers(_) => "remote",
        };
        let app = TestApp::builder()
            .codex()
            .gitea_mcp()
            .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
            .env("CODEX_BRIDGE_AGENT_RUNTIME", runtime_key)
            // One commenter starts every turn here, several a minute in a
            // session: the defaults (30 an hour, 6 a minute) would refuse or
            // pause most of a full run.
            .env("CODEX_BRIDGE_USER_TRIGGERS_PER_HOUR", "0")
            .env("CODEX_BRIDGE_SESSION_TURNS_PER_MINUTE", "0")
            .start_with_gitea(sim);
        app.model()
            .set_default(Step::message("nothing scripted for this request"));
        let mut workers = Vec::new();
        let mut homes = Vec::new();
        let assignments: Vec<Vec<String>> = match runtime {
            Runtime::Local => Vec::new(),
            Runtime::Workers(1) => vec![REPOS.iter().map(|r| format!("{OWNER}/{r}")).collect()],
            Runtime::Workers(_) => REPOS.iter().map(|r| vec![format!("{OWNER}/{r}")]).collect(),
        };
        for (i, repos) in assignments.iter().enumerate() {
            // Each worker its own Codex, as on machines of their own.
            let home = CodexHome::new(app.model());
            let env = WorkerEnv {
                server: app.base.clone(),
                codex_home: home.path(),
                gitea_url: app.gitea().base_url(),
            };
            let repos: Vec<&str> = repos.iter().map(String::as_str).collect();
            workers.push(WorkerProc::start(&app, &format!("bench-{i}"), &repos, env));
            homes.push(home);
        }
        let d = Deployment {
            app,
            sessions,
            workers,
            _homes: homes,
        };
        if runtime != Runtime::Local {
            d.wait_leases(REPOS.len())?;
        }
        Ok(d)
    }

    fn wait_leases(&self, n: usize) -> Result<()> {
        let mut db = self.app.db();
        let held = support::poll_until(Duration::from_secs(60), || {
            support::count_where(&mut db, "worker_leases", "released_at IS NULL") == n as i64
        });
        if !held {
            bail!(
                "the workers did not lease the {n} repositories within 60 s; worker logs:\n{}",
                self.worker_logs()
            );
        }
        Ok(())
    }

    fn worker_logs(&self) -> String {
        self.workers
            .iter()
            .map(WorkerProc::logs)
            .collect::<Vec<_>>()
            .join("\n---\n")
    }

    /// Scripts the model for job `job` on (`repo`, `number`) (the comment's
    /// tool call, then its final message) and posts bob's comment; returns
    /// the comment's id.
    fn post(&self, job: &str, repo: &str, number: i64) -> Result<i64> {
        let text = format!("done {job}\n\n{{{{marker}}}}");
        let model = self.app.model();
        model.push_for_newest(
            job,
            Step::Reply(vec![Item::mcp(
                "gitea",
                "add_comment",
                json!({"owner": OWNER, "repo": repo, "issue_number": number, "body": text}),
            )]),
        );
        model.push_for_newest(job, Step::message(&text));
        let comment = self.app.gitea().post_comment_as(
            "bob",
            OWNER,
            repo,
            number,
            &format!("@{BOT} please do {job}"),
        );
        comment["id"]
            .as_i64()
            .context("the simulator's comment has no id")
    }

    /// The tasks the webhooks of `comments` created, in their order.
    fn tasks_of(&self, comments: &[i64]) -> Result<Vec<String>> {
        let sim = self.app.gitea();
        sim.wait_idle();
        let deliveries = sim.deliveries();
        comments
            .iter()
            .map(|id| {
                let d = deliveries
                    .iter()
                    .find(|d| d.json()["comment"]["id"].as_i64() == Some(*id))
                    .with_context(|| format!("no webhook delivery for comment {id}"))?;
                if d.status != Some(202) {
                    bail!(
                        "comment {id}'s webhook answered {:?}: {}",
                        d.status,
                        d.response_body
                    );
                }
                let v: serde_json::Value = serde_json::from_str(&d.response_body)?;
                Ok(v["taskId"]
                    .as_str()
                    .context("no taskId in the 202")?
                    .to_owned())
            })
            .collect()
    }

    /// Waits until every task in `tasks` succeeded; their timings.
    fn settle(&self, tasks: &[String]) -> Result<Vec<Timing>> {
        let mut db = self.app.db();
        for task in tasks {
            let done = support::poll_until(TURN_TIMEOUT, || {
                support::task_state(&mut db, task).as_deref() == Some("succeeded")
            });
            if !done {
                bail!(
                    "task {task} did not succeed (state {:?}); server log:\n{}\nworker logs:\n{}",
                    support::task_state(&mut db, task),
                    tail(&self.app.logs()),
                    tail(&self.worker_logs())
                );
            }
        }
        tasks.iter().map(|t| timing(&mut db, t)).collect()
    }
}

fn tail(s: &str) -> &str {
    &s[s.len().saturating_sub(8_000)..]
}

/// One task's way through the server, from its own history.
#[derive(Clone, Copy, Debug)]
struct Timing {
    accepted: f64,
    started: f64,
    succeeded: f64,
}

/// Seconds since the epoch of a stored time.
fn seconds(at: &str) -> Result<f64> {
    let t =
        chrono::DateTime::parse_from_rfc3339(at).with_context(|| format!("stored time {at:?}"))?;
    Ok(t.timestamp_micros() as f64 / 1e6)
}

fn timing(db: &mut codex_bridge::store::DbConn, task: &str) -> Result<Timing> {
    let id = task.parse().context("a task id")?;
    let history = codex_bridge::store::tasks::history(db, &id)?;
    let at = |state: TaskState| -> Result<f64> {
        let t = history
            .iter()
            .find(|t| t.to_state == state)
            .with_context(|| format!("task {task} never went {state:?}"))?;
        seconds(&t.at)
    };
    let accepted = seconds(
        &history
            .first()
            .with_context(|| format!("task {task} has no history"))?
            .at,
    )?;
    Ok(Timing {
        accepted,
        started: at(TaskState::Running)?,
        succeeded: at(TaskState::Succeeded)?,
    })
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

struct Figures {
    /// Accept → running, ms, sorted (turns one at a time).
    start_ms: Vec<f64>,
    /// Accept → succeeded, ms, sorted (turns one at a time).
    turn_ms: Vec<f64>,
    /// Burst: turns started per second, and finished per second.
    started_per_s: f64,
    finished_per_s: f64,
    burst: usize,
}

fn run(
    runtime: Runtime,
    per_repo: usize,
    sequential: usize,
    burst_per_session: usize,
) -> Result<Figures> {
    let d = Deployment::start(runtime, per_repo)?;
    // Warm-up: every session's first turn (the clone, the thread, its MCP
    // server) is not what is measured.
    let mut comments = Vec::new();
    for (i, (repo, number)) in d.sessions.iter().enumerate() {
        comments.push(d.post(&format!("warm-{i}"), repo, *number)?);
    }
    let warm = d.tasks_of(&comments)?;
    d.settle(&warm)?;

    let mut one_at_a_time = Vec::with_capacity(sequential);
    for j in 0..sequential {
        let (repo, number) = d.sessions[j % d.sessions.len()];
        let comment = d.post(&format!("seq-{j}"), repo, number)?;
        let task = d.tasks_of(&[comment])?;
        one_at_a_time.extend(d.settle(&task)?);
    }

    let mut comments = Vec::new();
    for k in 0..burst_per_session {
        for (i, (repo, number)) in d.sessions.iter().enumerate() {
            comments.push(d.post(&format!("burst-{k}-{i}"), repo, *number)?);
        }
    }
    let burst_tasks = d.tasks_of(&comments)?;
    let burst = d.settle(&burst_tasks)?;
    let first = burst
        .iter()
        .map(|t| t.accepted)
        .fold(f64::INFINITY, f64::min);
    let last_start = burst.iter().map(|t| t.started).fold(0.0, f64::max);
    let last_done = burst.iter().map(|t| t.succeeded).fold(0.0, f64::max);
    let n = burst.len() as f64;
    Ok(Figures {
        start_ms: sorted(
            one_at_a_time
                .iter()
                .map(|t| (t.started - t.accepted) * 1e3)
                .collect(),
        ),
        turn_ms: sorted(
            one_at_a_time
                .iter()
                .map(|t| (t.succeeded - t.accepted) * 1e3)
                .collect(),
        ),
        started_per_s: n / (last_start - first),
        finished_per_s: n / (last_done - first),
        burst: burst.len(),
    })
}

/// The machine's own limit for a worker's hops: loopback HTTP round trips to
/// a server's `/healthz`, ms, sorted.
fn loopback() -> Result<Vec<f64>> {
    let app = TestApp::builder()
        .env("CODEX_BRIDGE_AGENT_RUNTIME", "none")
        .start();
    let agent = ureq::agent();
    let url = app.url("/healthz");
    let mut out = Vec::with_capacity(PROBES);
    for _ in 0..PROBES {
        let t = Instant::now();
        agent
            .get(&url)
            .call()
            .context("GET /healthz")?
            .into_string()?;
        out.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(sorted(out))
}

fn env_count(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .with_context(|| format!("{name}={v:?} is not a count")),
        Err(_) => Ok(default),
    }
}

fn main() -> Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    let (per_repo, sequential, burst) = if full {
        (
            4,
            env_count("BENCH_WORKER_SEQUENTIAL", 20)?,
            env_count("BENCH_WORKER_BURST", 4)?,
        )
    } else {
        (1, 2, 1)
    };
    println!(
        "worker benchmark ({}): {} sessions over {} repositories, {sequential} turns one at a time, \
         then {burst} turn(s) per session at once",
        if full { "full" } else { "smoke" },
        per_repo * REPOS.len(),
        REPOS.len()
    );
    let probe = loopback()?;
    let (probe50, probe99) = (percentile(&probe, 0.5), percentile(&probe, 0.99));
    println!("  machine: loopback HTTP round trip to the server p50 {probe50:.2} ms, p99 {probe99:.2} ms");
    let mut runs = Vec::new();
    let mut local: Option<(f64, f64)> = None;
    for runtime in [Runtime::Local, Runtime::Workers(1), Runtime::Workers(2)] {
        let f = run(runtime, per_repo, sequential, burst)
            .with_context(|| format!("the run with {}", runtime.label()))?;
        let (t50, t99) = (percentile(&f.turn_ms, 0.5), percentile(&f.turn_ms, 0.99));
        let (s50, s99) = (percentile(&f.start_ms, 0.5), percentile(&f.start_ms, 0.99));
        println!("  {}:", runtime.label());
        println!(
            "    one at a time: accept -> turn started p50 {s50:.0} ms, p99 {s99:.0} ms; \
             accept -> reply verified p50 {t50:.0} ms, p99 {t99:.0} ms"
        );
        let overhead = local.map(|(l50, l99)| (t50 - l50, t99 - l99));
        if let Some((o50, o99)) = overhead {
            println!(
                "    overhead per turn against the server's own: p50 {o50:+.0} ms, p99 {o99:+.0} ms \
                 ({:.1} and {:.1} loopback round trips)",
                o50 / probe50,
                o99 / probe50
            );
        } else {
            local = Some((t50, t99));
        }
        println!(
            "    burst of {}: {:.2} turns started/s, {:.2} finished/s",
            f.burst, f.started_per_s, f.finished_per_s
        );
        runs.push(json!({
            "runtime": match runtime { Runtime::Local => 0, Runtime::Workers(n) => n },
            "startP50Ms": s50, "startP99Ms": s99,
            "turnP50Ms": t50, "turnP99Ms": t99,
            "overheadP50Ms": overhead.map(|o| o.0), "overheadP99Ms": overhead.map(|o| o.1),
            "burst": f.burst,
            "startedPerSecond": f.started_per_s,
            "finishedPerSecond": f.finished_per_s,
        }));
    }
    if full {
        let json = json!({
            "benchmark": "workers",
            "sessions": per_repo * REPOS.len(),
            "sequential": sequential,
            "burstPerSession": burst,
            "loopbackP50Ms": probe50, "loopbackP99Ms": probe99,
            "runs": runs,
        });
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-workers.json");
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
        println!("  figures written to {}", path.display());
    }
    Ok(())
}
