//! The one `codex app-server` process: started on first use, initialised
//! once (`initialize` → `initialized` → best-effort capability probes), and
//! started again with backoff when it dies. Its stdio is the JSON-RPC
//! connection; what it sends that is not an answer goes to the [`Router`].

use super::notice::CodexNotice;
use super::protocol::{
    ClientInfo, CollaborationModeList, Initialize, InitializeCapabilities, Request, INITIALIZED,
};
use super::route::Router;
use super::rpc::RpcConnection;
use super::settings::CodexSettings;
use crate::agent::AgentError;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Live {
    conn: Arc<RpcConnection>,
    child: tokio::process::Child,
    /// Threads loaded in this process (a new process must resume them).
    loaded: HashSet<String>,
}

/// The app-server process, whichever one is running.
pub(super) struct Process {
    settings: CodexSettings,
    router: Router,
    live: tokio::sync::Mutex<Option<Live>>,
    /// Failed starts in a row, and when the last one failed (the backoff).
    failures: Mutex<(u32, Option<Instant>)>,
    /// Capability probes that failed (each is a `capability_downgrade`).
    downgrades: Mutex<Vec<String>>,
}

impl Process {
    pub(super) fn new(settings: CodexSettings, router: Router) -> Process {
        Process {
            settings,
            router,
            live: tokio::sync::Mutex::new(None),
            failures: Mutex::new((0, None)),
            downgrades: Mutex::new(Vec::new()),
        }
    }

    pub(super) fn settings(&self) -> &CodexSettings {
        &self.settings
    }

    pub(super) fn downgrades(&self) -> Vec<String> {
        self.downgrades
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default()
    }

    /// Ends the process, if one runs. The next call starts a new one.
    pub(super) async fn kill(&self) {
        if let Some(mut live) = self.live.lock().await.take() {
            let _ = live.child.kill().await;
            tracing::warn!("codex app-server process ended by codex-bridge");
        }
    }

    /// Whether the running process has loaded `thread`.
    pub(super) async fn has_loaded(&self, thread: &str) -> bool {
        let live = self.live.lock().await;
        live.as_ref().is_some_and(|l| l.loaded.contains(thread))
    }

    /// Records that the running process has loaded `thread`.
    pub(super) async fn mark_loaded(&self, thread: &str) {
        if let Some(l) = self.live.lock().await.as_mut() {
            l.loaded.insert(thread.to_owned());
        }
    }

    /// The live connection, starting (or restarting) the app-server if needed.
    pub(super) async fn connection(&self) -> Result<Arc<RpcConnection>, AgentError> {
        let mut live = self.live.lock().await;
        if let Some(l) = live.as_ref() {
            if l.conn.is_open() {
                return Ok(l.conn.clone());
            }
            tracing::warn!("the codex app-server exited; starting a new one");
        }
        *live = None;
        if let Ok(f) = self.failures.lock() {
            if let (n, Some(at)) = *f {
                let backoff = Duration::from_millis(200u64.saturating_mul(1 << n.min(8)))
                    .min(Duration::from_secs(30));
                if at.elapsed() < backoff {
                    return Err(AgentError::Unavailable(format!(
                        "the codex app-server failed to start {n} time(s); retrying after {} ms",
                        backoff.as_millis()
                    )));
                }
            }
        }
        match self.spawn().await {
            Ok(l) => {
                let conn = l.conn.clone();
                *live = Some(l);
                if let Ok(mut f) = self.failures.lock() {
                    *f = (0, None);
                }
                Ok(conn)
            }
            Err(e) => {
                if let Ok(mut f) = self.failures.lock() {
                    *f = (f.0 + 1, Some(Instant::now()));
                }
                Err(e)
            }
        }
    }

    async fn spawn(&self) -> Result<Live, AgentError> {
        let s = &self.settings;
        std::fs::create_dir_all(&s.codex_home).map_err(|e| {
            AgentError::Unavailable(format!(
                "cannot create codex_home {}: {e}",
                s.codex_home.display()
            ))
        })?;
        let mut cmd = if s.nice > 0 {
            // `nice` (coreutils) lowers the child's priority without unsafe code.
            let mut c = tokio::process::Command::new("nice");
            c.arg("-n").arg(s.nice.to_string()).arg(&s.codex_bin);
            c
        } else {
            tokio::process::Command::new(&s.codex_bin)
        };
        cmd.arg("app-server")
            .env_clear()
            .env("CODEX_HOME", &s.codex_home)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env(
                "HOME",
                std::env::var_os("HOME").unwrap_or_else(|| s.codex_home.clone().into_os_string()),
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in &s.env {
            cmd.env(k, secrecy::ExposeSecret::expose_secret(v));
        }
        let mut child = cmd.spawn().map_err(|e| {
            AgentError::Unavailable(format!(
                "cannot start {} app-server: {e} (check the config key `codex_bin`{})",
                s.codex_bin.display(),
                if s.nice > 0 {
                    ", and that `nice` is on PATH or set codex_nice = 0"
                } else {
                    ""
                }
            ))
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(AgentError::Unavailable(
                "the app-server's pipes are missing".into(),
            ));
        };
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(async move {
                let mut lines =
                    tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(target: "codex_app_server", "{}", line.chars().take(500).collect::<String>());
                }
            });
        }
        let (conn, incoming) = RpcConnection::start(stdin, stdout);
        self.router.start(conn.clone(), incoming);
        self.handshake(&conn).await?;
        tracing::info!(codex_home = %s.codex_home.display(), "codex app-server started");
        Ok(Live {
            conn,
            child,
            loaded: HashSet::new(),
        })
    }

    /// `initialize` → `initialized`, then the capability probes: a missing
    /// capability is a downgrade, never fatal.
    async fn handshake(&self, conn: &RpcConnection) -> Result<(), AgentError> {
        let timeout = self.settings.request_timeout;
        let hello = Initialize {
            client_info: ClientInfo {
                name: "codex-bridge".into(),
                title: "codex-bridge".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            capabilities: InitializeCapabilities {
                experimental_api: true,
            },
        };
        conn.call(&hello, timeout)
            .await
            .map_err(|e| AgentError::Unavailable(format!("app-server initialize failed: {e}")))?;
        conn.notify(INITIALIZED)
            .map_err(|e| AgentError::Unavailable(e.to_string()))?;
        let probe = CollaborationModeList::METHOD;
        if let Err(e) = conn.call(&CollaborationModeList {}, timeout).await {
            tracing::info!(error = %e, "capability_downgrade: {probe}");
            if let Ok(mut d) = self.downgrades.lock() {
                d.push(format!("{probe}: {e}"));
            }
            self.router
                .notices()
                .send(CodexNotice::CapabilityDowngrade {
                    probe: probe.to_owned(),
                    error: e.to_string(),
                });
        }
        Ok(())
    }
}
