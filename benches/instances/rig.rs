//! What the three measurements share: a store per instance on the one
//! PostgreSQL database, an instance's actor tree on a thread and actix system
//! of its own, the bench's own look at the tables, and CPU counters.

use crate::common::Folders;
use actix::prelude::*;
use anyhow::{anyhow, bail, Context as _, Result};
use codex_bridge::actors::registry::{wake_for, Registry};
use codex_bridge::actors::{ActorDeps, ActorSettings};
use codex_bridge::agent::scripted::ScriptedAgent;
use codex_bridge::forge::scripted::ScriptedForge;
use codex_bridge::jobs::instances::InstanceHeartbeat;
use codex_bridge::store::{Store, StoreSettings};
use diesel::{Connection, PgConnection, RunQueryDsl};
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// A store as `serve` opens it on `url` from its default configuration and
/// the `extra` configuration keys (its own pools and group-commit writer),
/// with the hourly limit per commenter off: the load comes from one commenter.
pub fn open_store(url: &str, extra: &[(&str, &str)]) -> Result<Store> {
    use codex_bridge::config::{env_name, Config};
    let mut env = std::collections::BTreeMap::from([
        (env_name("database_url"), url.to_owned()),
        (env_name("user_triggers_per_hour"), "0".to_owned()),
    ]);
    env.extend(extra.iter().map(|(k, v)| (env_name(k), (*v).to_owned())));
    let config =
        Config::from_sources(None, &env).map_err(|e| anyhow!("the default configuration: {e}"))?;
    Store::open(&StoreSettings::from_config(&config))
        .map_err(|e| anyhow!("opening a store on the benchmark's PostgreSQL database: {e}"))
}

/// `n` stores on one database, opened one after the other: the first
/// applies the migrations, which several processes starting at once on an
/// empty database would otherwise race for.
pub fn open_stores(url: &str, n: usize, extra: &[(&str, &str)]) -> Result<Vec<Store>> {
    (0..n).map(|_| open_store(url, extra)).collect()
}

/// The lease and scheduling timings an instance runs with.
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    pub lease_ttl: Duration,
    pub heartbeat: Duration,
    pub sweep: Duration,
}

/// One server process's actor tree, in this process: its registry runs on
/// a thread with an actix system of its own, so stopping that system drops
/// every actor at once without running anything more, as a crash does (no
/// lease is released, no renewal follows).
pub struct Instance {
    pub owner: String,
    pub runtime: ScriptedAgent,
    go: Option<mpsc::Sender<()>>,
    system: System,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Instance {
    /// Sets the instance up on `store`; its registry starts at [`Instance::go`].
    pub fn launch(
        name: &str,
        store: Store,
        runtime: ScriptedAgent,
        timings: Timings,
        workspaces: PathBuf,
    ) -> Result<Instance> {
        let mut settings = ActorSettings::new("default");
        settings.lease_ttl = timings.lease_ttl;
        settings.heartbeat = timings.heartbeat;
        settings.sweep = timings.sweep;
        settings.session_idle = Duration::from_secs(3600);
        let owner = settings.owner.clone();
        let deps = Arc::new(ActorDeps {
            store,
            runtime: Arc::new(runtime.clone()),
            verifier: Arc::new(ScriptedForge::default()),
            workspaces: Arc::new(Folders {
                root: workspaces,
                create: false,
            }),
            settings,
        });
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (system_tx, system_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("instance-{name}"))
            .spawn(move || {
                let runner = System::new();
                let _ = system_tx.send(System::current());
                runner.block_on(async move {
                    let released = tokio::task::spawn_blocking(move || go_rx.recv()).await;
                    if !matches!(released, Ok(Ok(()))) {
                        System::current().stop();
                        return;
                    }
                    // Registered and beating as a server process is, so
                    // the others see it serve (the affinity rule reads it).
                    let heartbeat = InstanceHeartbeat::new(
                        &deps.store,
                        &deps.settings.owner,
                        "default",
                        deps.settings.heartbeat,
                    );
                    heartbeat.register().await;
                    let registry = Registry::new(deps.clone()).start();
                    // Beats on this system until it stops (as in a crash,
                    // the beats just end: no "stopped" is written).
                    let _beating = heartbeat.start(Some(registry.clone()), None);
                    if let Err(e) = deps.store.listen(move |signal| wake_for(&registry, signal)) {
                        eprintln!("an instance cannot listen for the others' signals: {e}");
                    }
                });
                if let Err(e) = runner.run() {
                    eprintln!("an instance's actix system ended with an error: {e}");
                }
            })
            .context("starting an instance's thread")?;
        let system = system_rx
            .recv_timeout(Duration::from_secs(10))
            .context("an instance's actix system did not start")?;
        Ok(Instance {
            owner,
            runtime,
            go: Some(go_tx),
            system,
            thread: Some(thread),
        })
    }

    /// Starts the registry: its first sweep looks for work at once.
    pub fn go(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }

    /// Stops the instance as a crash would, and waits until its thread is gone.
    pub fn crash(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        self.go = None;
        self.system.stop();
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| anyhow!("an instance's thread panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("{e:#}");
        }
    }
}

/// The bench's own connection to the database, outside every instance's
/// pools: what it reads costs none of them a connection.
pub struct Observer {
    conn: PgConnection,
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

#[derive(diesel::QueryableByName, Debug, Clone)]
pub struct LeaseRow {
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub repo_key: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub owner: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub lease_id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub acquired_at: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub released_at: Option<String>,
}

#[derive(diesel::QueryableByName, Debug, Clone)]
pub struct AuditRow {
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub action: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub metadata: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub at: String,
}

/// Who ran how much: attempts, repositories and leases by owner.
#[derive(diesel::QueryableByName, Debug, Clone)]
pub struct OwnerShare {
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub owner: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub attempts: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub repos: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub leases: i64,
}

impl Observer {
    pub fn connect(url: &str) -> Result<Observer> {
        Ok(Observer {
            conn: PgConnection::establish(url).context("the bench's own connection")?,
        })
    }

    /// `query` returns one row with one BIGINT named `n`.
    pub fn count(&mut self, query: &str) -> Result<i64> {
        Ok(diesel::sql_query(query)
            .get_result::<Count>(&mut self.conn)
            .with_context(|| format!("reading `{query}`"))?
            .n)
    }

    /// One setting as PostgreSQL shows it, with its unit (`1s`).
    pub fn setting(&mut self, name: &str) -> Result<String> {
        #[derive(diesel::QueryableByName)]
        struct Shown {
            #[diesel(sql_type = diesel::sql_types::Text)]
            value: String,
        }
        Ok(diesel::sql_query("SELECT current_setting($1) AS value")
            .bind::<diesel::sql_types::Text, _>(name)
            .get_result::<Shown>(&mut self.conn)
            .with_context(|| format!("reading the setting {name}"))?
            .value)
    }

    /// The durability settings in force: they decide what a commit costs.
    pub fn durability(&mut self) -> Result<String> {
        #[derive(diesel::QueryableByName)]
        struct Setting {
            #[diesel(sql_type = diesel::sql_types::Text)]
            name: String,
            #[diesel(sql_type = diesel::sql_types::Text)]
            setting: String,
        }
        let rows: Vec<Setting> = diesel::sql_query(
            "SELECT name, setting FROM pg_settings WHERE name IN \
             ('fsync', 'synchronous_commit', 'full_page_writes', 'server_version') ORDER BY name",
        )
        .load(&mut self.conn)?;
        Ok(rows
            .iter()
            .map(|r| format!("{}={}", r.name, r.setting))
            .collect::<Vec<_>>()
            .join(", "))
    }

    /// How many tasks are in each state, e.g. `queued 3, succeeded 21`.
    pub fn task_states(&mut self) -> Result<String> {
        #[derive(diesel::QueryableByName)]
        struct State {
            #[diesel(sql_type = diesel::sql_types::Text)]
            state: String,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let rows: Vec<State> = diesel::sql_query(
            "SELECT state, count(*) AS n FROM tasks GROUP BY state ORDER BY state",
        )
        .load(&mut self.conn)?;
        Ok(rows
            .iter()
            .map(|r| format!("{} {}", r.state, r.n))
            .collect::<Vec<_>>()
            .join(", "))
    }

    /// Deadlocks PostgreSQL detected in this database, once the instances'
    /// connections are gone: a backend reports its counts when it exits (a
    /// busy one about every second, an idle one only after ten), so the count
    /// is read after every backend but this one and the signal listeners
    /// (which live as long as the process) has ended.
    pub fn deadlocks_after_exit(&mut self) -> Result<i64> {
        let others = "SELECT count(*) AS n FROM pg_stat_activity \
                      WHERE datname = current_database() AND pid <> pg_backend_pid() \
                      AND query NOT LIKE 'LISTEN%' AND query <> 'SELECT 1'";
        let gone = wait_until(
            "the instances' connections closed",
            Duration::from_secs(10),
            Duration::from_millis(20),
            || Ok(self.count(others)? == 0),
        );
        if let Err(e) = gone {
            eprintln!("warning: {e:#}; the deadlock count may miss some");
        }
        self.count("SELECT deadlocks AS n FROM pg_stat_database WHERE datname = current_database()")
    }

    pub fn leases(&mut self) -> Result<Vec<LeaseRow>> {
        Ok(diesel::sql_query(
            "SELECT repo_key, owner, lease_id, acquired_at, released_at FROM leases ORDER BY repo_key",
        )
        .load(&mut self.conn)?)
    }

    pub fn lease_audits(&mut self) -> Result<Vec<AuditRow>> {
        Ok(diesel::sql_query(
            "SELECT action, metadata, at FROM audit_events WHERE action LIKE 'lease.%' ORDER BY id",
        )
        .load(&mut self.conn)?)
    }

    pub fn shares(&mut self) -> Result<Vec<OwnerShare>> {
        Ok(diesel::sql_query(
            "SELECT a.owner AS owner, count(*) AS attempts, count(DISTINCT t.repo_key) AS repos, \
             count(DISTINCT a.lease_id) AS leases \
             FROM attempts a JOIN tasks t ON t.task_id = a.task_id \
             WHERE a.owner IS NOT NULL GROUP BY a.owner ORDER BY a.owner",
        )
        .load(&mut self.conn)?)
    }
}

/// Waits until `done` says so, looking every `every`; fails after `limit`.
pub fn wait_until(
    what: &str,
    limit: Duration,
    every: Duration,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<Instant> {
    let deadline = Instant::now() + limit;
    loop {
        if done()? {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            bail!("{what}: not within {limit:?}");
        }
        std::thread::sleep(every);
    }
}

/// CPU time, read at the start and the end of a measured phase.
pub struct CpuMeter {
    at: Instant,
    own: u64,
    postgres: u64,
    busy: Option<u64>,
    pids: Vec<u32>,
}

/// Cores used on average over a phase.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    /// This process: every instance and the bench's load.
    pub own: f64,
    /// The PostgreSQL backends connected to the benchmark's database.
    pub postgres: f64,
    /// The whole machine (other work on it included).
    pub machine: f64,
}

impl CpuMeter {
    /// Starts counting; `pids` are the PostgreSQL backends to count.
    pub fn start(pids: Vec<u32>) -> CpuMeter {
        CpuMeter {
            at: Instant::now(),
            own: ticks("self").unwrap_or(0),
            postgres: postgres_ticks(&pids),
            busy: busy_ticks(),
            pids,
        }
    }

    pub fn stop(&self) -> CpuUse {
        let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
        let wall = self.at.elapsed().as_secs_f64().max(1e-9);
        let cores = |ticks: u64| ticks as f64 / hz / wall;
        CpuUse {
            own: cores(ticks("self").unwrap_or(0).saturating_sub(self.own)),
            postgres: cores(postgres_ticks(&self.pids).saturating_sub(self.postgres)),
            machine: match (self.busy, busy_ticks()) {
                (Some(a), Some(b)) => cores(b.saturating_sub(a)),
                _ => f64::NAN,
            },
        }
    }
}

/// User and system ticks of `/proc/<pid>/stat`.
fn ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields follow its closing paren.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// A backend that ended meanwhile counts for nothing in either reading.
fn postgres_ticks(pids: &[u32]) -> u64 {
    pids.iter().filter_map(|p| ticks(&p.to_string())).sum()
}

/// Ticks the machine's CPUs were busy (not idle, not waiting for I/O).
fn busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal; guest time is already in user.
    let (idle, iowait) = (*v.get(3)?, *v.get(4)?);
    Some(v.iter().take(8).sum::<u64>() - idle - iowait)
}

/// Seconds from `earlier` to `later`, both RFC 3339 as the store writes them.
pub fn seconds_between(earlier: &str, later: &str) -> Result<f64> {
    let parse = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s).with_context(|| format!("`{s}` is not a time"))
    };
    Ok((parse(later)? - parse(earlier)?)
        .num_microseconds()
        .context("a time difference too large")? as f64
        / 1e6)
}
