//! A `codex-bridge worker` process for the tests and benchmarks that run
//! remote workers: registered through an instance's admin API, started with a
//! folder of its own (token file, `ws/` workspace root, `journal.db`,
//! `state/`), its output in a log file there, and killed on drop.

use crate::codexhome::codex_bin;
use crate::support::*;
use crate::testapp::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Where a worker reaches its peers.
#[derive(Clone, Debug)]
pub struct WorkerEnv {
    /// The base URL of the instance it polls.
    pub server: String,
    /// Its `CODEX_HOME` (configured for the fake model).
    pub codex_home: PathBuf,
    /// The Gitea simulator's base URL.
    pub gitea_url: String,
}

impl WorkerEnv {
    /// The worker of a test whose server is `app`: it polls `app`, runs Codex
    /// on `app`'s home (a remote-runtime server runs none itself) and clones
    /// from `app`'s Gitea simulator.
    pub fn of(app: &TestApp) -> WorkerEnv {
        WorkerEnv {
            server: app.base.clone(),
            codex_home: app.codex_home(),
            gitea_url: app.gitea().base_url(),
        }
    }
}

/// A worker process, killed on drop.
pub struct WorkerProc {
    child: Child,
    pub log: PathBuf,
    pub id: String,
    /// Its bearer token: it must never reach a log.
    pub token: String,
    pub env: WorkerEnv,
    dir: tempfile::TempDir,
}

impl WorkerProc {
    /// Registers a worker `name` given `repositories` through `admin` (any
    /// instance) and starts its process with `env`.
    pub fn start(admin: &TestApp, name: &str, repositories: &[&str], env: WorkerEnv) -> WorkerProc {
        let (id, token) = register(admin, name, repositories);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), format!("{token}\n")).unwrap();
        let log = dir.path().join("worker.log");
        let child = spawn(&env, dir.path(), &log, &[]);
        WorkerProc {
            child,
            log,
            id,
            token,
            env,
            dir,
        }
    }

    /// What it wrote so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its folder (token, workspace root, journal).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its journal (`journal.db` in its folder).
    pub fn journal(&self) -> PathBuf {
        self.dir.path().join("journal.db")
    }

    /// Kills the process (SIGKILL) and starts it again on the same folder
    /// (the same token, workspace root and journal) with `args`, logging to
    /// `log_name`.
    pub fn restart_with(&mut self, log_name: &str, args: &[&str]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.log = self.dir.path().join(log_name);
        self.child = spawn(&self.env, self.dir.path(), &self.log, args);
    }

    /// `codex-bridge <command> <args>` with this worker's configuration, not
    /// started (e.g. `reconcile`).
    pub fn command(&self, command: &str, args: &[&str]) -> Command {
        command_on(&self.env, self.dir.path(), command, args)
    }

    /// Whether the process has exited, and how.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }
}

/// Registers a worker `name` given `repositories` through `admin`'s admin
/// API: its id and its token (shown once).
pub fn register(admin: &TestApp, name: &str, repositories: &[&str]) -> (String, String) {
    let created = admin.admin_post(
        "/api/gitea-workflow/workers",
        &json!({
            "name": name,
            "repositories": repositories,
            "requestId": format!("register-{name}"),
            "reason": "runs the turns",
        }),
    );
    assert_eq!(created.status, 201, "{:?}", created.json);
    (
        created.json["workerId"].as_str().unwrap().to_owned(),
        created.json["token"].as_str().unwrap().to_owned(),
    )
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(env: &WorkerEnv, dir: &Path, log: &Path, args: &[&str]) -> Child {
    let out = std::fs::File::create(log).unwrap();
    let mut cmd = command_on(env, dir, "worker", args);
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    cmd.spawn().unwrap()
}

/// `codex-bridge <command> <args> --server URL --token-file FILE` with the
/// worker's configuration on `dir`, and nothing of this process's
/// environment but `PATH`.
fn command_on(env: &WorkerEnv, dir: &Path, command: &str, args: &[&str]) -> Command {
    let path = |p: PathBuf| p.to_str().unwrap().to_owned();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_codex-bridge"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", path(dir.to_path_buf()))
        .arg(command)
        .args(args)
        .arg("--server")
        .arg(&env.server)
        .arg("--token-file")
        .arg(dir.join("token"))
        .env("CODEX_BRIDGE_CODEX_BIN", path(codex_bin()))
        .env("CODEX_BRIDGE_CODEX_HOME", path(env.codex_home.clone()))
        .env("CODEX_BRIDGE_WORKSPACE_ROOT", path(dir.join("ws")))
        .env("CODEX_BRIDGE_STATE_DIR", path(dir.join("state")))
        .env(
            "CODEX_BRIDGE_JOURNAL_URL",
            format!("sqlite://{}", dir.join("journal.db").display()),
        )
        .env("CODEX_BRIDGE_GITEA_URL", &env.gitea_url)
        .env("CODEX_BRIDGE_GITEA_TOKEN", GITEA_TOKEN)
        .env("CODEX_BRIDGE_BOT_LOGIN", BOT)
        .env("CODEX_BRIDGE_WORKFLOWS", "false")
        .env("CODEX_BRIDGE_GITEA_MCP_COMMAND", gitea_mcp_bin())
        .env("CODEX_BRIDGE_GITEA_MCP_ARGS", "[]")
        .env("CODEX_BRIDGE_GITEA_MCP_URL_ENV", "GITEA_URL")
        .env("CODEX_BRIDGE_GITEA_MCP_TOKEN_ENV", "GITEA_TOKEN")
        .env("CODEX_BRIDGE_LOG_FILTER", "info");
    cmd
}

/// The worker holding `acme/widgets` now, as the store says.
pub fn lease_holder(app: &TestApp) -> Option<String> {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        worker_id: String,
    }
    use diesel::RunQueryDsl;
    let mut c = app.db();
    let rows: Vec<Row> = codex_bridge::with_conn!(&mut c, |c| diesel::sql_query(
        "SELECT worker_id FROM worker_leases WHERE repository = 'acme/widgets' AND released_at IS NULL"
    )
    .load(c))
    .unwrap();
    rows.into_iter().next().map(|r| r.worker_id)
}
