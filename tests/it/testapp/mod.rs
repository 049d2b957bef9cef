//! The one test rig: the real server with the real peers a test asks for.
//!
//! ```ignore
//! let sim = GiteaSim::start();      // set up first: repositories, users, Issues
//! sim.create_repo("acme", "widgets");
//! let app = TestApp::builder()      // SQLite file of its own, intake only (agent_runtime = none)
//!     .postgres()                   // or a fresh database in the throwaway cluster
//!     .codex()                      // real `codex app-server`, fake model, own CODEX_HOME
//!     .gitea_mcp()                  // real PyPI gitea-mcp for the threads
//!     .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
//!     .start_with_gitea(sim);       // the simulator's webhook now goes to the server
//! app.model().push(Step::message("done"));
//!
//! let app = TestApp::builder().git_sim().scripted().start();  // clones only
//! app.git().create_repo("acme", "widgets");
//! ```
//!
//! The server listens on 127.0.0.1:0 and keeps its SQLite file, `state/` and
//! `ws/` in a temp dir of its own. By default it is the real binary (its
//! output captured for [`TestApp::logs`], killable for restart tests);
//! [`TestAppBuilder::in_process`] runs `app::run` on a thread of this process
//! instead, from the same configuration.
//!
//! The peers: [`GitSim`] (git over smart HTTP only, for the scripted runtime,
//! which needs a clone but no Gitea API) or [`GiteaSim`] (the whole Gitea
//! simulator, its webhook pointed at the server); [`FakeModel`] with a fresh
//! [`CodexHome`] for the real `codex app-server`; the pinned gitea-mcp. They
//! live as long as the app, and across [`TestApp::start_again`] and
//! [`TestApp::another_instance`].

use crate::codexhome::{codex_bin, CodexHome};
use crate::fakemodel::FakeModel;
use crate::giteasim::GiteaSim;
use crate::gitsim::GitSim;
use crate::support::*;
use codex_bridge::store::DbConn;
use config::configuration;
use peers::Peers;
pub use peers::SharedPeers;
use serde_json::Value;
use server::{Kind, Server};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod comments;
mod config;
mod peers;
mod server;

/// Which database a test server uses.
#[derive(Clone, Copy)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// The pinned PyPI gitea-mcp that `scripts/test` installs (through
/// `scripts/ensure-gitea-mcp`); panics, saying how to get it, when unset.
pub fn gitea_mcp_bin() -> String {
    std::env::var("CODEX_BRIDGE_TEST_GITEA_MCP_BIN")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "CODEX_BRIDGE_TEST_GITEA_MCP_BIN is not set: run the tests through scripts/test, \
                 which installs the pinned PyPI gitea-mcp, or \
                 `export CODEX_BRIDGE_TEST_GITEA_MCP_BIN=$(scripts/ensure-gitea-mcp)`"
            )
        })
}

/// What answers as Gitea.
#[derive(Clone, Copy, PartialEq)]
enum Gitea {
    /// `gitea_url` names a port nothing listens on: the client exists, and
    /// every call to it fails.
    Unreachable,
    /// Neither `gitea_url` nor `gitea_token` is set.
    Absent,
    /// [`GitSim`]: clones work, the REST API does not exist.
    Git,
    /// [`GiteaSim`] ([`TestAppBuilder::start_with_gitea`]): git, the REST
    /// API, and webhooks sent to the server.
    Sim,
}

/// Which agent runtime the server runs.
#[derive(Clone, Copy, PartialEq)]
enum Runtime {
    /// `none`: intake only.
    IntakeOnly,
    /// `scripted`: turns play the directives in the comment text.
    Scripted,
    /// The real `codex app-server`, with [`FakeModel`] as its model.
    Codex,
    /// As [`Runtime::Codex`], but `agent_runtime` left unset: the default.
    CodexByDefault,
}

impl Runtime {
    fn is_codex(self) -> bool {
        matches!(self, Runtime::Codex | Runtime::CodexByDefault)
    }
}

/// How to start a [`TestApp`]; see the module doc.
#[derive(Clone)]
pub struct TestAppBuilder {
    db: Db,
    db_url: Option<String>,
    gitea: Gitea,
    runtime: Runtime,
    /// Appended to the Codex home's `config.toml` before the server starts.
    codex_config: String,
    gitea_mcp: bool,
    in_process: bool,
    env: Vec<(String, String)>,
    /// The model slug Codex is told it talks to (the fake model answers all).
    codex_model: Option<String>,
}

impl TestAppBuilder {
    pub fn db(mut self, db: Db) -> Self {
        self.db = db;
        self
    }

    /// A fresh database in the throwaway PostgreSQL cluster.
    pub fn postgres(self) -> Self {
        self.db(Db::Postgres)
    }

    /// An existing database (one a test migrated, or another app's).
    pub fn db_url(mut self, url: &str) -> Self {
        self.db_url = Some(url.into());
        self
    }

    /// A git server ([`GitSim`], the bot's token required) as `gitea_url`.
    pub fn git_sim(mut self) -> Self {
        self.gitea = Gitea::Git;
        self
    }

    /// No Gitea configured at all (`gitea_url` and `gitea_token` left out).
    pub fn without_gitea(mut self) -> Self {
        self.gitea = Gitea::Absent;
        self
    }

    /// `agent_runtime = scripted`.
    pub fn scripted(mut self) -> Self {
        self.runtime = Runtime::Scripted;
        self
    }

    /// `agent_runtime = codex`: the pinned `codex app-server`, a [`FakeModel`]
    /// and a fresh `CODEX_HOME` pointing the model provider at it.
    pub fn codex(mut self) -> Self {
        self.runtime = Runtime::Codex;
        self
    }

    /// Codex believes its model is `slug` (still the fake one): Codex offers
    /// some tools, `apply_patch` among them, only to model slugs it knows.
    pub fn codex_model(mut self, slug: &str) -> Self {
        self.codex_model = Some(slug.into());
        self
    }

    /// As [`TestAppBuilder::codex`], with `agent_runtime` left unset: what
    /// an operator gets who does not choose.
    pub fn codex_by_default(mut self) -> Self {
        self.runtime = Runtime::CodexByDefault;
        self
    }

    /// Lines appended to the Codex home's `config.toml` (its last table is
    /// `[model_providers.fake]`, so bare keys set the fake provider's).
    pub fn codex_config(mut self, lines: &str) -> Self {
        self.codex_config.push_str(lines);
        self
    }

    /// The pinned gitea-mcp as the threads' Gitea MCP server (URL and token
    /// in `GITEA_URL` and `GITEA_TOKEN`, as the PyPI package reads them).
    pub fn gitea_mcp(mut self) -> Self {
        self.gitea_mcp = true;
        self
    }

    /// Runs `app::run` on a thread of this process instead of the binary:
    /// no output is captured and the process cannot be killed, but HTTP and
    /// the whole server are tested in process.
    pub fn in_process(mut self) -> Self {
        self.in_process = true;
        self
    }

    /// Sets a variable of the server's environment (last one wins): a
    /// `CODEX_BRIDGE_*` key of its configuration, or any other the process
    /// reads.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Starts the peers, then the server.
    pub fn start(self) -> TestApp {
        self.start_peers(None)
    }

    /// Starts with `sim` as `gitea_url` and the other peers, then the server,
    /// and points the simulator's webhook at it. The simulator comes set up:
    /// its repositories, users and Issues exist before the server does, as
    /// in a deployment (and a benchmark can measure it alone first).
    pub fn start_with_gitea(mut self, sim: GiteaSim) -> TestApp {
        self.gitea = Gitea::Sim;
        self.start_peers(Some(sim))
    }

    /// A fresh `CODEX_HOME` for the model, with the builder's settings.
    fn codex_home_for(&self, model: &FakeModel) -> CodexHome {
        let home = CodexHome::new(model);
        if let Some(slug) = &self.codex_model {
            home.set_model(slug);
        }
        let config = std::fs::read_to_string(home.config_path()).unwrap();
        std::fs::write(home.config_path(), config + &self.codex_config).unwrap();
        home
    }

    fn start_peers(self, gitea: Option<GiteaSim>) -> TestApp {
        let pg = match (&self.db_url, self.db) {
            (None, Db::Postgres) => Some(PgDb::create()),
            _ => None,
        };
        let model = self.runtime.is_codex().then(FakeModel::start);
        let home = model.as_ref().map(|model| self.codex_home_for(model));
        let peers = Peers {
            git: (self.gitea == Gitea::Git).then(|| GitSim::start(Some(GITEA_TOKEN))),
            gitea,
            home,
            model,
            _pg: pg,
        };
        let dir = tempfile::tempdir().unwrap();
        let db_url = match (&self.db_url, &peers._pg) {
            (Some(url), _) => url.clone(),
            (None, Some(pg)) => pg.url.clone(),
            (None, None) => format!("sqlite://{}", dir.path().join("bridge.db").display()),
        };
        TestApp::launch(self, Arc::new(peers), None, dir, db_url)
    }
}

/// A running server and its peers; the server is killed on drop.
pub struct TestApp {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub db_url: String,
    server: Server,
    builder: TestAppBuilder,
    peers: Arc<Peers>,
    /// The SQLite file (unless another database was given), `state/`, `ws/`.
    dir: tempfile::TempDir,
    /// Another instance's own `CODEX_HOME` (the first uses the peers'):
    /// processes never share one.
    own_home: Option<CodexHome>,
}

impl TestApp {
    pub fn builder() -> TestAppBuilder {
        TestAppBuilder {
            db: Db::Sqlite,
            db_url: None,
            gitea: Gitea::Unreachable,
            runtime: Runtime::IntakeOnly,
            codex_config: String::new(),
            gitea_mcp: false,
            in_process: false,
            env: Vec::new(),
            codex_model: None,
        }
    }

    /// The binary on a fresh database, intake only.
    pub fn start(db: Db) -> TestApp {
        Self::builder().db(db).start()
    }

    fn launch(
        builder: TestAppBuilder,
        peers: Arc<Peers>,
        own_home: Option<CodexHome>,
        dir: tempfile::TempDir,
        db_url: String,
    ) -> TestApp {
        let home = own_home
            .as_ref()
            .or(peers.home.as_ref())
            .map(CodexHome::path);
        let env = configuration(&builder, &peers, home.as_deref(), dir.path(), &db_url);
        let server = Server::start(builder.in_process, env);
        let app = TestApp {
            base: server.base.clone(),
            db_url,
            server,
            builder,
            peers,
            dir,
            own_home,
        };
        app.point_webhook_here();
        app
    }

    /// The Gitea simulator delivers its webhooks to this instance from now on.
    pub fn point_webhook_here(&self) {
        if let Some(sim) = &self.peers.gitea {
            sim.set_webhook(&self.url("/api/gitea/webhook"), SECRET);
        }
    }

    /// Starts the server again on the same database, temp dir and peers (a
    /// restart, after [`TestApp::kill9`] or [`TestApp::stop`]); the Gitea
    /// simulator's webhook follows it.
    pub fn start_again(&mut self) {
        self.server.kill();
        let home = self.codex_home_path();
        let env = configuration(
            &self.builder,
            &self.peers,
            home.as_deref(),
            self.dir.path(),
            &self.db_url,
        );
        self.server = Server::start(self.builder.in_process, env);
        self.base = self.server.base.clone();
        self.point_webhook_here();
    }

    /// A second server on the same database and peers, with its own temp dir
    /// (state and workspaces) and, with Codex, its own `CODEX_HOME`, as
    /// another instance of a deployment. The Gitea simulator's webhook goes
    /// to the instance started last.
    pub fn another_instance(&self) -> TestApp {
        self.another_instance_with(|b| b)
    }

    /// As [`TestApp::another_instance`], with `change` applied to a copy of
    /// this app's builder first: an instance of its own configuration, such
    /// as its own `listen` address, or variables for that process alone (a
    /// preloaded library that moves its clock). [`TestApp::start_again`]
    /// keeps the change. The database and the peers stay the shared ones,
    /// whatever the changed builder says about them.
    pub fn another_instance_with(
        &self,
        change: impl FnOnce(TestAppBuilder) -> TestAppBuilder,
    ) -> TestApp {
        let builder = change(self.builder.clone());
        let own_home = self
            .peers
            .model
            .as_ref()
            .map(|model| builder.codex_home_for(model));
        TestApp::launch(
            builder,
            self.peers.clone(),
            own_home,
            tempfile::tempdir().unwrap(),
            self.db_url.clone(),
        )
    }

    /// The git server ([`TestAppBuilder::git_sim`]).
    pub fn git(&self) -> &GitSim {
        self.peers
            .git
            .as_ref()
            .expect("the app has no GitSim: ask for .git_sim()")
    }

    /// The Gitea simulator ([`TestAppBuilder::start_with_gitea`]).
    pub fn gitea(&self) -> &GiteaSim {
        self.peers
            .gitea
            .as_ref()
            .expect("the app has no Gitea simulator: start it with .start_with_gitea(sim)")
    }

    /// The Codex model ([`TestAppBuilder::codex`]).
    pub fn model(&self) -> &FakeModel {
        self.peers
            .model
            .as_ref()
            .expect("the app has no fake model: ask for .codex()")
    }

    /// The simulator and model behind a handle of their own, for a thread
    /// that drives them while the test kills and restarts the server.
    pub fn shared_peers(&self) -> SharedPeers {
        SharedPeers::new(self.peers.clone())
    }

    /// The `CODEX_HOME` the server's app-server runs with ([`TestAppBuilder::codex`]).
    pub fn codex_home(&self) -> PathBuf {
        self.codex_home_path()
            .expect("the app has no Codex home: ask for .codex()")
    }

    fn codex_home_path(&self) -> Option<PathBuf> {
        self.own_home
            .as_ref()
            .or(self.peers.home.as_ref())
            .map(CodexHome::path)
    }

    /// The clone URL of `owner/name` on the git peer.
    pub fn clone_url(&self, owner: &str, name: &str) -> String {
        match (&self.peers.git, &self.peers.gitea) {
            (Some(git), _) => git.clone_url(owner, name),
            (None, Some(sim)) => sim.clone_url(owner, name),
            (None, None) => {
                panic!("the app has no git peer: ask for .git_sim() or .start_with_gitea(sim)")
            }
        }
    }

    /// The server's process id (the binary only).
    pub fn pid(&self) -> u32 {
        match &self.server.kind {
            Kind::Process { child, .. } => child.id(),
            _ => panic!("an in-process app has no process of its own"),
        }
    }

    /// The process the server runs in: its own, or this one when in process.
    pub fn server_pid(&self) -> u32 {
        match &self.server.kind {
            Kind::Process { child, .. } => child.id(),
            _ => std::process::id(),
        }
    }

    /// The server's temp dir (SQLite file, `state/`, `ws/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn post_raw(&self, path: &str, headers: &[(String, String)], body: &[u8]) -> Reply {
        let mut req = ureq::post(&self.url(path));
        for (k, v) in headers {
            req = req.set(k, v);
        }
        reply(req.send_bytes(body))
    }

    pub fn webhook(&self, headers: &[(String, String)], body: &[u8]) -> Reply {
        self.post_raw("/api/gitea/webhook", headers, body)
    }

    /// Posts a signed issue comment as Gitea would.
    pub fn comment(
        &self,
        delivery: &str,
        comment_id: i64,
        text: &str,
        repo: &str,
        number: i64,
    ) -> Reply {
        let body = comment_body(comment_id, text, repo, number);
        self.webhook(
            &gitea_headers(delivery, "issue_comment", "issue_comment", &body),
            &body,
        )
    }

    /// Posts a signed comment on Issue `number` of `acme/<repo>`, a
    /// repository the git peer serves (its clone URL and `main` in the
    /// payload); asserts 202 and returns the task.
    pub fn task_comment(
        &self,
        delivery: &str,
        comment_id: i64,
        text: &str,
        repo: &str,
        number: i64,
    ) -> String {
        let mut v: Value =
            serde_json::from_slice(&comment_body(comment_id, text, repo, number)).unwrap();
        v["repository"]["clone_url"] = self.clone_url("acme", repo).into();
        v["repository"]["default_branch"] = "main".into();
        let body = serde_json::to_string_pretty(&v).unwrap().into_bytes();
        let r = self.webhook(
            &gitea_headers(delivery, "issue_comment", "issue_comment", &body),
            &body,
        );
        assert_eq!(r.status, 202, "{:?}", r.json);
        r.json["taskId"].as_str().unwrap().to_owned()
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> Reply {
        let mut req = ureq::get(&self.url(path));
        if let Some(t) = token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        reply(req.call())
    }

    pub fn admin_get(&self, path: &str) -> Reply {
        self.get(path, Some(ADMIN_TOKEN))
    }

    pub fn admin_post(&self, path: &str, body: &Value) -> Reply {
        reply(
            ureq::post(&self.url(path))
                .set("Authorization", &format!("Bearer {ADMIN_TOKEN}"))
                .send_json(body.clone()),
        )
    }

    /// Everything the binary wrote to stdout and stderr so far (since its
    /// last start).
    pub fn logs(&self) -> String {
        match &self.server.kind {
            Kind::Process { logs, .. } => logs.lock().unwrap().clone(),
            _ => panic!(
                "an in-process app's logs go to this process's tracing subscriber, \
                 which the tests do not install: read logs from the binary"
            ),
        }
    }

    pub fn db(&self) -> DbConn {
        connect(&self.db_url)
    }

    /// The operator's verdict on a task that needs reconciliation, through
    /// the CLI: its last attempt failed, no turn is active.
    pub fn reconcile_failed(&self, task: &str) {
        let attempt = last_attempt_id(&mut self.db(), task);
        self.cli_ok(&[
            "reconcile",
            task,
            &attempt,
            "failed",
            "--confirm-no-active-turn",
        ]);
    }

    /// Runs the `codex-bridge` command line on this server's database;
    /// panics with its error output unless it succeeds.
    pub fn cli_ok(&self, args: &[&str]) {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_codex-bridge"))
            .env("CODEX_BRIDGE_DATABASE_URL", &self.db_url)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits until `cond` holds (for effects written in the background).
    pub fn wait_for(&self, what: &str, cond: impl FnMut() -> bool) {
        wait_until(what, Duration::from_secs(10), cond);
    }

    /// The actor tree's entry for a repository (`GET /api/gitea-workflow/actors`),
    /// once its actor exists.
    pub fn repo_actor(&self, repo_key: &str) -> Option<Value> {
        let tree = self.admin_get("/api/gitea-workflow/actors");
        assert_eq!(tree.status, 200, "{:?}", tree.json);
        tree.json["repositories"]
            .as_array()?
            .iter()
            .find(|r| r["repoKey"] == repo_key)
            .cloned()
    }

    /// Waits until the repository's actor has finished two scheduling passes
    /// after this call and the last one says `status`; its entry then. Call it
    /// after the change the scheduler must see: the second pass began after
    /// the first one ended, so after the change. What the test forbids (a task
    /// started) would have happened by then.
    pub fn wait_repo_passes(&self, repo_key: &str, status: &str) -> Value {
        let passes = |r: &Option<Value>| r.as_ref().map_or(0, |r| r["passes"].as_u64().unwrap());
        let start = passes(&self.repo_actor(repo_key));
        let mut last = None;
        let settled = poll_until(Duration::from_secs(20), || {
            last = self.repo_actor(repo_key);
            passes(&last) >= start + 2 && last.as_ref().is_some_and(|r| r["status"] == status)
        });
        match last {
            Some(entry) if settled => entry,
            _ => panic!(
                "{repo_key}'s actor never finished two passes ending `{status}`; last: {last:?}"
            ),
        }
    }

    /// SIGKILL: no graceful anything, as when the machine loses the process.
    /// The database, temp dir and peers stay.
    pub fn kill9(&mut self) {
        assert!(
            matches!(self.server.kind, Kind::Process { .. }),
            "an in-process app cannot be killed: use the binary"
        );
        self.server.kill();
    }

    /// A graceful stop (SIGTERM for the binary, the shutdown future in
    /// process), waited for. The database, temp dir, peers and logs stay.
    pub fn stop(&mut self) {
        self.server.stop();
    }

    /// Sends the binary SIGTERM and returns at once: it drains meanwhile.
    pub fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits up to `within` for the binary to exit; its exit status.
    pub fn wait_exit(&mut self, within: std::time::Duration) -> Option<std::process::ExitStatus> {
        self.server.wait_exit(within)
    }
}

/// An HTTP answer: status and JSON body (Null when the body is not JSON).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub json: Value,
}

fn reply(result: Result<ureq::Response, ureq::Error>) -> Reply {
    let resp = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("request failed: {e}"),
    };
    let status = resp.status();
    let text = resp.into_string().unwrap_or_default();
    Reply {
        status,
        json: serde_json::from_str(&text).unwrap_or(Value::Null),
    }
}
