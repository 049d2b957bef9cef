//! What every area's tests share: Gitea-shaped signed requests, direct access
//! to the rows a server wrote, waiting on conditions, and the HTTP server the
//! stand-ins (git and Gitea simulator, fake model) run on. The server itself
//! and its peers are started by `crate::testapp`.

use codex_bridge::config::DatabaseUrl;
use codex_bridge::store::{ConnSettings, DbConn};
use diesel::prelude::*;
use serde_json::Value;
use std::future::Future;
use std::path::{Path, PathBuf};
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

/// A store on `url` with the small settings the tests share: two readers,
/// one writer thread taking up to eight writes a commit.
pub fn open_store(url: DatabaseUrl) -> codex_bridge::store::Store {
    use codex_bridge::store::{Store, StoreSettings, WriterSettings};
    Store::open(&StoreSettings {
        url,
        read_pool_size: 2,
        sqlite_busy_timeout: Duration::from_secs(5),
        writer: WriterSettings {
            batch_max: 8,
            threads: 1,
            queue_capacity: 64,
            ingest: Default::default(),
        },
    })
    .unwrap()
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

/// [`wait_until`] for async tests: polls the future `cond` makes until it
/// gives true; panics naming `what` after `timeout` (real time, also when a
/// test has paused tokio's clock).
pub async fn wait_until_async<F, Fut>(what: &str, timeout: Duration, cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    assert!(
        poll_until_async(timeout, cond).await,
        "timed out waiting for {what}"
    );
}

/// [`poll_until`] for async tests: true once `cond`'s future gives true,
/// false after `timeout` of real time. Between polls it sleeps on tokio's
/// clock, which lets a paused clock advance to the code's next timer.
pub async fn poll_until_async<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
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

/// What a stock SQLite (Python's, with the platform's own VFS and page cache)
/// prints for `script` run on the database at `path` (its `sys.argv[1]`),
/// line by line.
pub fn stock_sqlite(path: &Path, script: &str) -> Vec<String> {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n{script}"
        ))
        .arg(path)
        .output()
        .expect("python3 runs (scripts/test installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
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

/// The id of the task's latest attempt (panics if it has none).
pub fn last_attempt_id(conn: &mut DbConn, task_id: &str) -> String {
    codex_bridge::store::tasks::detail(conn, &task_id.parse().unwrap())
        .unwrap()
        .unwrap()
        .attempts
        .last()
        .expect("the task has an attempt")
        .attempt_id
        .clone()
}

/// A task's state and version, read directly from the database.
pub fn task_state(conn: &mut DbConn, task_id: &str) -> Option<String> {
    codex_bridge::store::tasks::find(conn, &task_id.parse().unwrap())
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
    let history =
        codex_bridge::store::tasks::history(&mut conn, &task_id.parse().unwrap()).unwrap();
    let path: Vec<String> = history.iter().map(|t| t.to_state.to_string()).collect();
    let why = history.last().map(|t| serde_json::to_string(t).unwrap());
    panic!("task {task_id} did not reach {state}; its history: {path:?}; the last step: {why:?}");
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

/// The terms of a trusted thread under this approval policy and sandbox
/// (every tool, the working tree's instructions).
pub fn trusted_terms(
    approval_policy: codex_bridge::domain::policy::ApprovalPolicy,
    sandbox: codex_bridge::domain::policy::Sandbox,
) -> codex_bridge::agent::ThreadTerms {
    codex_bridge::agent::ThreadTerms {
        policy: codex_bridge::domain::trust::ExecutionPolicy::trusted(
            &codex_bridge::domain::policy::RepoPolicy {
                approval_policy,
                sandbox,
                turn_timeout: std::time::Duration::from_secs(1800),
            },
        ),
        base_instructions: None,
    }
}
