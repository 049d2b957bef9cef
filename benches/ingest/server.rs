//! The servers a scenario runs: the real `codex-bridge serve` on a fresh
//! database, or this binary re-executed as the HMAC-only server.

use super::*;

/// Counts what a server logs, echoing the first lines.
#[derive(Default)]
pub(super) struct ServerLog {
    pub(super) lines: AtomicU64,
    pub(super) warnings: AtomicU64,
}

impl ServerLog {
    pub(super) fn record(&self, name: &str, line: &str) {
        let n = self.lines.fetch_add(1, Ordering::Relaxed);
        if line.contains("WARN") || line.contains("ERROR") {
            self.warnings.fetch_add(1, Ordering::Relaxed);
        }
        if n < ECHOED_LOG_LINES {
            eprintln!("    [{name} server] {line}");
        } else if n == ECHOED_LOG_LINES {
            eprintln!("    [{name} server] ... (further lines only counted)");
        }
    }
}

/// A server process; killed and reaped when dropped.
/// A server and the database it runs on, dropped in that order: the
/// database goes only once nothing is connected to it.
pub(super) struct Started {
    pub(super) server: Server,
    pub(super) pg: Option<PgDatabase>,
}

pub(super) struct Server {
    pub(super) child: Child,
    pub(super) addr: SocketAddr,
    pub(super) log: Arc<ServerLog>,
    /// State dir and SQLite file; removed after the process is gone (fields drop after `drop`).
    pub(super) _dir: Option<tempfile::TempDir>,
}

impl Server {
    pub(super) fn real(
        scenario: Scenario,
        secret: &str,
        admin_token: &str,
        pg_url: Option<&str>,
    ) -> Result<Server> {
        let dir = tempfile::Builder::new()
            .prefix("codex-bridge-bench-")
            .tempdir()
            .context("creating a temporary directory for the server's state and SQLite file")?;
        let database_url = match pg_url {
            Some(url) => url.to_owned(),
            None => format!("sqlite://{}", dir.path().join("bench.db").display()),
        };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_codex-bridge"));
        cmd.arg("serve");
        scrub_env(&mut cmd);
        cmd.env("CODEX_BRIDGE_LISTEN", "127.0.0.1:0")
            .env("CODEX_BRIDGE_DATABASE_URL", database_url)
            .env("CODEX_BRIDGE_WEBHOOK_SECRET", secret)
            .env("CODEX_BRIDGE_ADMIN_TOKEN", admin_token)
            .env("CODEX_BRIDGE_BOT_LOGIN", BOT_LOGIN)
            // Intake alone is measured: no agent runtime (the default is codex).
            .env("CODEX_BRIDGE_AGENT_RUNTIME", "none")
            .env("CODEX_BRIDGE_STATE_DIR", dir.path().join("state"))
            .env("CODEX_BRIDGE_WORKSPACE_ROOT", dir.path().join("workspaces"))
            .env("CODEX_BRIDGE_LOG_FILTER", "warn")
            // Its load comes from a handful of commenters: the hourly limit
            // per commenter would refuse it; intake's cost is measured here.
            .env("CODEX_BRIDGE_USER_TRIGGERS_PER_HOUR", "0");
        if let Some(n) = scenario.batch_max() {
            cmd.env("CODEX_BRIDGE_WRITER_BATCH_MAX", n.to_string());
        }
        if let (None, Ok(n)) = (scenario.batch_max(), std::env::var("BENCH_BATCH_MAX")) {
            cmd.env("CODEX_BRIDGE_WRITER_BATCH_MAX", n);
        }
        if let Ok(n) = std::env::var("BENCH_WRITER_THREADS") {
            cmd.env("CODEX_BRIDGE_WRITER_THREADS", n);
        }
        Server::spawn(scenario.name(), cmd, Some(dir))
    }

    pub(super) fn hmac_only(secret: &str) -> Result<Server> {
        let exe = std::env::current_exe().context("locating the benchmark executable")?;
        let mut cmd = Command::new(exe);
        cmd.arg(SERVE_HMAC_ONLY_ARG);
        scrub_env(&mut cmd);
        cmd.env(HMAC_SECRET_ENV, secret);
        Server::spawn(Scenario::HmacOnly.name(), cmd, None)
    }

    pub(super) fn spawn(
        name: &'static str,
        mut cmd: Command,
        dir: Option<tempfile::TempDir>,
    ) -> Result<Server> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting the {name} server"))?;
        let log = Arc::new(ServerLog::default());
        let (tx, rx) = mpsc::channel::<String>();
        // Both pipes are drained for the server's whole life: a full pipe would block it.
        if let Some(stdout) = child.stdout.take() {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    match line.split_once("listening on http://") {
                        Some((_, addr)) => {
                            let _ = tx.send(addr.trim().to_owned());
                        }
                        None => log.record(name, &line),
                    }
                }
            });
        }
        if let Some(stderr) = child.stderr.take() {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    log.record(name, &line);
                }
            });
        }
        let mut server = Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
            _dir: dir,
        };
        match rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(addr) => {
                server.addr = addr.parse().with_context(|| {
                    format!("{name}: cannot parse the listening address `{addr}`")
                })?;
                Ok(server)
            }
            Err(_) => {
                // The pipe closes as the process exits, a moment before it can be reaped.
                let mut status = None;
                for _ in 0..50 {
                    status = server.child.try_wait().ok().flatten();
                    if status.is_some() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                bail!(
                    "the {name} server did not say it was listening within {STARTUP_TIMEOUT:?} (exit status: {}); \
                     its output is above",
                    status.map_or_else(|| "still running".into(), |s| s.to_string())
                )
            }
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGKILL: what was answered 202 is committed, and a graceful stop would only
        // wait for keep-alive connections.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Nothing from the caller's environment may change the server's configuration
/// (`RUST_LOG` would override the log filter).
pub(super) fn scrub_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if let Some(k) = key.to_str() {
            if k.starts_with("CODEX_BRIDGE_") || k == "RUST_LOG" {
                cmd.env_remove(k);
            }
        }
    }
}

/// The `--serve-hmac-only` child: HTTP + signature check in actix-web's default process
/// model (same worker count as the real server), nothing else.
pub(super) fn serve_hmac_only() -> Result<()> {
    let secret = std::env::var(HMAC_SECRET_ENV).with_context(|| {
        format!("{HMAC_SECRET_ENV} is not set; this mode is started by the benchmark itself")
    })?;
    let secret = web::Data::new(HmacSecret(secret.into_bytes()));
    actix_web::rt::System::new().block_on(async move {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let server = HttpServer::new(move || {
            App::new()
                .app_data(secret.clone())
                .app_data(web::PayloadConfig::new(1024 * 1024))
                .route("/api/gitea/webhook", web::post().to(hmac_only_webhook))
        })
        .listen(listener)?
        .run();
        println!("codex-bridge-bench hmac-only listening on http://{addr}");
        server.await?;
        Ok(())
    })
}

pub(super) struct HmacSecret(Vec<u8>);

pub(super) async fn hmac_only_webhook(
    req: HttpRequest,
    body: web::Bytes,
    secret: web::Data<HmacSecret>,
) -> HttpResponse {
    match verify::verify(&secret.0, &body, req.headers()) {
        // The same shape as the real answer, so both send about as many bytes.
        Ok(()) => {
            let delivery = req
                .headers()
                .get("x-gitea-delivery")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            HttpResponse::Accepted().json(serde_json::json!({
                "deliveryId": delivery,
                "taskId": "task-00000000000000000000000000000000",
                "state": "queued",
            }))
        }
        Err(e) => HttpResponse::Unauthorized().json(serde_json::json!({ "code": e.code() })),
    }
}
