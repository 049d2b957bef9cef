//! The test harness: the real `codex-bridge` binary on 127.0.0.1:0 with its own
//! database (a fresh SQLite file, or a fresh database in the throwaway
//! PostgreSQL that `scripts/test` starts), Gitea-shaped signed requests, and
//! direct access to the rows the server wrote.

use codex_bridge::config::DatabaseUrl;
use codex_bridge::store::{ConnSettings, DbConn};
use diesel::prelude::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const SECRET: &str = "s3cr3t-ccbot-webhook";
pub const ADMIN_TOKEN: &str = "admin-token-for-tests-0123456789";
pub const GITEA_TOKEN: &str = "gitea-token-for-tests-9876543210";
pub const BOT: &str = "ccbot";

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gitea")
}

/// A Gitea fixture: its body bytes (exactly as Gitea sends them) and headers.
pub fn fixture(name: &str) -> (Vec<u8>, Vec<(String, String)>) {
    let dir = fixtures_dir();
    let body = std::fs::read(dir.join(format!("{name}.json"))).unwrap();
    let headers: serde_json::Map<String, Value> =
        serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.headers.json"))).unwrap())
            .unwrap();
    let headers = headers
        .into_iter()
        .map(|(k, v)| (k, v.as_str().unwrap().to_owned()))
        .collect();
    (body, headers)
}

/// Headers as Gitea sets them for `body`, signed with `SECRET`.
pub fn gitea_headers(
    delivery: &str,
    event: &str,
    event_type: &str,
    body: &[u8],
) -> Vec<(String, String)> {
    let sig = codex_bridge::webhook::verify::sign(SECRET.as_bytes(), body);
    vec![
        ("Content-Type".into(), "application/json".into()),
        ("X-Gitea-Delivery".into(), delivery.into()),
        ("X-Gitea-Event".into(), event.into()),
        ("X-Gitea-Event-Type".into(), event_type.into()),
        ("X-Gitea-Signature".into(), sig.clone()),
        ("X-Hub-Signature-256".into(), format!("sha256={sig}")),
        ("User-Agent".into(), "Go-http-client/1.1".into()),
    ]
}

/// A comment body in Gitea's format (2-space indent), from the issue fixture,
/// with the fields a test wants changed.
pub fn comment_body(comment_id: i64, text: &str, repo: &str, number: i64) -> Vec<u8> {
    let (body, _) = fixture("issue_comment.created.issue.mention");
    let mut v: Value = serde_json::from_slice(&body).unwrap();
    v["comment"]["id"] = comment_id.into();
    v["comment"]["body"] = text.into();
    v["repository"]["name"] = repo.into();
    v["repository"]["full_name"] = format!("acme/{repo}").into();
    v["issue"]["number"] = number.into();
    serde_json::to_string_pretty(&v).unwrap().into_bytes()
}

/// Which database a test server uses.
#[derive(Clone, Copy)]
pub enum Db {
    Sqlite,
    Postgres,
}

/// A fresh database of the throwaway PostgreSQL cluster, dropped with this value.
pub struct PgDb {
    pub url: String,
    admin_url: String,
    name: String,
}

pub fn pg_admin_url() -> String {
    std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "TEST_DATABASE_URL is not set: the PostgreSQL tests need the throwaway cluster that \
             `scripts/test` (or `scripts/with-postgres cargo test`) starts"
        )
    })
}

impl PgDb {
    pub fn create() -> PgDb {
        let admin_url = pg_admin_url();
        let name = format!("cb_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::establish(&admin_url).unwrap();
        diesel::sql_query(format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .unwrap();
        let base = admin_url.rsplit_once('/').unwrap().0;
        PgDb {
            url: format!("{base}/{name}"),
            admin_url,
            name,
        }
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        if let Ok(mut admin) = PgConnection::establish(&self.admin_url) {
            let _ = diesel::sql_query(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .execute(&mut admin);
        }
    }
}

/// Opens a connection of the lib's own kind to a test database.
pub fn connect(url: &str) -> DbConn {
    DbConn::establish(&ConnSettings {
        url: DatabaseUrl::parse(url).unwrap(),
        sqlite_busy_timeout: Duration::from_secs(10),
        read_only: false,
    })
    .unwrap()
}

/// Everything a running test server has.
pub struct TestServer {
    child: Child,
    pub base: String,
    pub db_url: String,
    /// Holds the SQLite file and state dir for as long as the server value lives.
    _dir: tempfile::TempDir,
    logs: Arc<Mutex<String>>,
    _pg: Option<PgDb>,
}

#[derive(Clone)]
pub struct ServerBuilder {
    db: Db,
    env: Vec<(String, String)>,
    /// Variables the server must not see at all (a key left out, not empty).
    unset: Vec<String>,
    db_url: Option<String>,
}

impl ServerBuilder {
    pub fn new(db: Db) -> Self {
        ServerBuilder {
            db,
            env: Vec::new(),
            unset: Vec::new(),
            db_url: None,
        }
    }

    /// Leaves `key` out of the server's environment (the rig sets some keys).
    pub fn without(mut self, key: &str) -> Self {
        self.unset.push(key.into());
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Reuse an existing database (e.g. to restart on the same file).
    pub fn db_url(mut self, url: &str) -> Self {
        self.db_url = Some(url.into());
        self
    }

    pub fn start(self) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let (db_url, pg) = match (self.db_url, self.db) {
            (Some(url), _) => (url, None),
            (None, Db::Sqlite) => (
                format!("sqlite://{}", dir.path().join("bridge.db").display()),
                None,
            ),
            (None, Db::Postgres) => {
                let pg = PgDb::create();
                (pg.url.clone(), Some(pg))
            }
        };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_codex-bridge"));
        cmd.arg("serve");
        for (k, _) in std::env::vars() {
            if k.starts_with("CODEX_BRIDGE_") || k == "RUST_LOG" {
                cmd.env_remove(k);
            }
        }
        cmd.env("CODEX_BRIDGE_LISTEN", "127.0.0.1:0")
            .env("CODEX_BRIDGE_DATABASE_URL", &db_url)
            .env("CODEX_BRIDGE_WEBHOOK_SECRET", SECRET)
            .env("CODEX_BRIDGE_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("CODEX_BRIDGE_GITEA_TOKEN", GITEA_TOKEN)
            .env("CODEX_BRIDGE_GITEA_URL", "http://127.0.0.1:9")
            .env("CODEX_BRIDGE_BOT_LOGIN", BOT)
            .env("CODEX_BRIDGE_STATE_DIR", dir.path().join("state"))
            .env("CODEX_BRIDGE_WORKSPACE_ROOT", dir.path().join("ws"))
            .env("CODEX_BRIDGE_LOG_FILTER", "info");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        for k in &self.unset {
            cmd.env_remove(k);
        }
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let logs = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let stdout = child.stdout.take().unwrap();
        let out_logs = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("codex-bridge listening on ") {
                    let _ = tx.send(addr.to_owned());
                }
                out_logs.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        let stderr = child.stderr.take().unwrap();
        let err_logs = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                err_logs.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        let base = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "server did not start; its output:\n{}",
                    logs.lock().unwrap()
                );
            }
        };
        TestServer {
            child,
            base,
            db_url,
            _dir: dir,
            logs,
            _pg: pg,
        }
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

impl TestServer {
    pub fn start(db: Db) -> TestServer {
        ServerBuilder::new(db).start()
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's temp dir (SQLite file, `state/`, `ws/`).
    pub fn dir(&self) -> &Path {
        self._dir.path()
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

    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    pub fn db(&self) -> DbConn {
        connect(&self.db_url)
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
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and wait for a graceful exit. The database and temp dir stay.
    pub fn stop(&mut self) -> String {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(50));
        self.logs()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `cond` until it holds; panics naming `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    assert!(poll_until(timeout, cond), "timed out waiting for {what}");
}

/// Polls `cond` until it holds (true) or `timeout` passes (false).
pub fn poll_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Counts rows of a table through the lib's own connection type.
pub fn count(conn: &mut DbConn, table: &str) -> i64 {
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let q = format!("SELECT COUNT(*) AS n FROM {table}");
    codex_bridge::with_conn!(conn, |c| diesel::sql_query(&q).get_result::<N>(c))
        .unwrap()
        .n
}

/// Counts rows matching a WHERE clause (trusted test SQL).
pub fn count_where(conn: &mut DbConn, table: &str, clause: &str) -> i64 {
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let q = format!("SELECT COUNT(*) AS n FROM {table} WHERE {clause}");
    codex_bridge::with_conn!(conn, |c| diesel::sql_query(&q).get_result::<N>(c))
        .unwrap()
        .n
}

/// Runs trusted test SQL.
pub fn exec(conn: &mut DbConn, sql: &str) -> Result<usize, diesel::result::Error> {
    codex_bridge::with_conn!(conn, |c| diesel::sql_query(sql).execute(c))
}

/// A task's state and version, read directly from the database.
pub fn task_state(conn: &mut DbConn, task_id: &str) -> Option<String> {
    codex_bridge::store::tasks::find(conn, task_id)
        .unwrap()
        .map(|t| t.state.to_string())
}

/// Waits until the task is in `state` (panics with the task's history otherwise).
pub fn wait_task_state(db_url: &str, task_id: &str, state: &str, timeout: Duration) {
    let mut conn = connect(db_url);
    if poll_until(timeout, || {
        task_state(&mut conn, task_id).as_deref() == Some(state)
    }) {
        return;
    }
    let history = codex_bridge::store::tasks::history(&mut conn, task_id).unwrap();
    let path: Vec<String> = history.iter().map(|t| t.to_state.to_string()).collect();
    panic!("task {task_id} did not reach {state}; its history: {path:?}");
}

/// An actix-web server on 127.0.0.1:0 in its own thread and actix system, for
/// the project's stand-ins (git and Gitea simulator, fake model). Stopped and
/// joined on drop.
pub struct TestHttpServer {
    pub addr: std::net::SocketAddr,
    handle: actix_web::dev::ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestHttpServer {
    /// Starts a one-worker server whose app is built by `configure`.
    pub fn start<F>(name: &'static str, configure: F) -> TestHttpServer
    where
        F: Fn(&mut actix_web::web::ServiceConfig) + Send + Clone + 'static,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let system = actix_web::rt::System::new();
                let result = system.block_on(async move {
                    let server = actix_web::HttpServer::new(move || {
                        actix_web::App::new().configure(configure.clone())
                    })
                    .workers(1)
                    .disable_signals()
                    .shutdown_timeout(1)
                    .listen(listener)?
                    .run();
                    let _ = tx.send(server.handle());
                    server.await
                });
                if let Err(e) = result {
                    eprintln!("{name} stopped with an error: {e}");
                }
            })
            .unwrap();
        let handle = rx.recv().unwrap_or_else(|_| panic!("{name} did not start"));
        TestHttpServer {
            addr,
            handle,
            thread: Some(thread),
        }
    }
}

impl Drop for TestHttpServer {
    fn drop(&mut self) {
        // `stop` sends the command at once; the returned future only reports
        // completion, which joining the thread waits for instead.
        drop(self.handle.stop(false));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An operation id named by a test's label (`op-1`, `op-mcp`): the same label
/// always gives the same id, so a test can look up what it sent.
pub fn op_id(label: &str) -> codex_bridge::domain::OperationId {
    let hex = codex_bridge::store::sha256_hex(label.as_bytes());
    let hex = hex.trim_start_matches("sha256:");
    codex_bridge::domain::OperationId::parse(&format!("op-{}", &hex[..32])).unwrap()
}

/// A resource key from its text (panics on a malformed one: test data).
pub fn resource(key: &str) -> codex_bridge::domain::ResourceKey {
    key.parse().unwrap()
}

/// A repository key from its text (panics on a malformed one: test data).
pub fn repo(key: &str) -> codex_bridge::domain::RepoKey {
    key.parse().unwrap()
}
