//! The one `codex app-server` process: started on first use (and at once by
//! the keeper, `keeper.rs`), initialised once (`initialize` → `initialized` →
//! best-effort capability probes), and started again when it dies; a start
//! that fails is tried again only after a backoff (1 s, doubling to 60 s).
//! Its stdio is the JSON-RPC connection; what it sends that is not an answer
//! goes to the [`Router`].

use super::notice::CodexNotice;
use super::protocol::{
    ClientInfo, CollaborationModeList, Initialize, InitializeCapabilities, Request, INITIALIZED,
};
use super::route::Router;
use super::rpc::RpcConnection;
use super::settings::CodexSettings;
use crate::agent::{AgentError, StartProblem};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Live {
    conn: Arc<RpcConnection>,
    child: tokio::process::Child,
    /// Threads loaded in this process (a new process must resume them).
    loaded: HashSet<String>,
}

/// The `-c` override that keeps the app-server's credentials (an API key,
/// ChatGPT tokens) in files under CODEX_HOME.
const CREDENTIALS_IN_CODEX_HOME: &str = "cli_auth_credentials_store=\"file\"";

/// Why the app-server could not be started. `detail` is for the log and
/// the authenticated admin view: it may name the binary's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StartError {
    pub(super) problem: StartProblem,
    pub(super) detail: String,
}

impl StartError {
    fn new(problem: StartProblem, detail: String) -> StartError {
        StartError { problem, detail }
    }
}

impl From<StartError> for AgentError {
    /// Nothing reached the agent: the turn may be tried again.
    fn from(e: StartError) -> AgentError {
        AgentError::Unavailable(e.detail)
    }
}

/// Failed starts in a row, when the last one failed and why.
#[derive(Default)]
struct Failures {
    count: u32,
    last: Option<(Instant, StartError)>,
}

/// How long to wait after `failures` failed starts in a row before the next:
/// 1 s, doubling, at most 60 s. A binary that is missing now is often
/// installed within minutes; a minute between tries costs nothing.
pub(super) fn start_backoff(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    Duration::from_secs(1u64 << (failures - 1).min(6)).min(Duration::from_secs(60))
}

/// The app-server process, whichever one is running.
pub(super) struct Process {
    settings: CodexSettings,
    router: Router,
    live: tokio::sync::Mutex<Option<Live>>,
    /// Failed starts in a row (the backoff).
    failures: Mutex<Failures>,
    /// Capability probes that failed (each is a `capability_downgrade`).
    downgrades: Mutex<Vec<String>>,
    /// Processes ended by the bridge itself ([`Process::kill`]): the keeper
    /// tells such an end from a crash.
    kills: std::sync::atomic::AtomicU64,
}

impl Process {
    pub(super) fn new(settings: CodexSettings, router: Router) -> Process {
        Process {
            settings,
            router,
            live: tokio::sync::Mutex::new(None),
            failures: Mutex::new(Failures::default()),
            downgrades: Mutex::new(Vec::new()),
            kills: std::sync::atomic::AtomicU64::new(0),
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
            self.kills.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = live.child.kill().await;
            tracing::warn!("codex app-server process ended by codex-bridge");
        }
    }

    /// How many processes the bridge has ended itself so far.
    pub(super) fn kills(&self) -> u64 {
        self.kills.load(std::sync::atomic::Ordering::SeqCst)
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

    /// How long until the next start may be tried (zero: now).
    pub(super) fn retry_in(&self) -> Duration {
        self.failures
            .lock()
            .ok()
            .and_then(|f| {
                let (at, _) = f.last.as_ref()?;
                Some(start_backoff(f.count).saturating_sub(at.elapsed()))
            })
            .unwrap_or(Duration::ZERO)
    }

    /// The live connection, starting (or restarting) the app-server if
    /// needed. Within the backoff after a failed start, the last failure
    /// again (nothing is started).
    pub(super) async fn connection(&self) -> Result<Arc<RpcConnection>, StartError> {
        let mut live = self.live.lock().await;
        if let Some(l) = live.as_ref() {
            if l.conn.is_open() {
                return Ok(l.conn.clone());
            }
            tracing::warn!("the codex app-server exited; starting a new one");
        }
        *live = None;
        if let Ok(f) = self.failures.lock() {
            if let Some((at, last)) = &f.last {
                let backoff = start_backoff(f.count);
                if at.elapsed() < backoff {
                    return Err(StartError::new(
                        last.problem,
                        format!(
                            "{} (failed to start {} time(s) in a row; next try within {} s)",
                            last.detail,
                            f.count,
                            backoff.saturating_sub(at.elapsed()).as_secs() + 1
                        ),
                    ));
                }
            }
        }
        match self.spawn().await {
            Ok(l) => {
                let conn = l.conn.clone();
                *live = Some(l);
                if let Ok(mut f) = self.failures.lock() {
                    *f = Failures::default();
                }
                Ok(conn)
            }
            Err(e) => {
                if let Ok(mut f) = self.failures.lock() {
                    f.count += 1;
                    f.last = Some((Instant::now(), e.clone()));
                }
                Err(e)
            }
        }
    }

    async fn spawn(&self) -> Result<Live, StartError> {
        let s = &self.settings;
        std::fs::create_dir_all(&s.codex_home).map_err(|e| {
            StartError::new(
                StartProblem::HomeUnusable,
                format!("cannot create codex_home {}: {e}", s.codex_home.display()),
            )
        })?;
        // Under `nice` a missing binary would look like an app-server that
        // exits at once (`nice` itself starts and fails): look first.
        if !runnable(&s.codex_bin) {
            return Err(StartError::new(
                StartProblem::NotInstalled,
                format!(
                    "{} is not found or not executable (check the config key `codex_bin`)",
                    s.codex_bin.display()
                ),
            ));
        }
        // Before a second app-server on this home: the one a killed bridge
        // process left running would hold the threads this one resumes.
        let home = s.codex_home.clone();
        let _ = tokio::task::spawn_blocking(move || super::leftover::end(&home)).await;
        let mut cmd = if s.nice > 0 {
            // `nice` (coreutils) lowers the child's priority without unsafe code.
            let mut c = tokio::process::Command::new("nice");
            c.arg("-n").arg(s.nice.to_string()).arg(&s.codex_bin);
            c
        } else {
            tokio::process::Command::new(&s.codex_bin)
        };
        cmd.arg("app-server")
            // Credentials as files under CODEX_HOME, which the bridge owns:
            // a headless server has no keyring to keep them in, and a
            // sign-in through the bridge must be found by the next process.
            .args(["-c", CREDENTIALS_IN_CODEX_HOME])
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
            // Its own process group, with its MCP servers and commands: the
            // one a later start ends if this bridge process dies first.
            .process_group(0)
            .kill_on_drop(true);
        for (k, v) in &s.env {
            cmd.env(k, secrecy::ExposeSecret::expose_secret(v));
        }
        let mut child = cmd.spawn().map_err(|e| {
            StartError::new(
                StartProblem::NotInstalled,
                format!(
                    "cannot start {} app-server: {e} (check the config key `codex_bin`{})",
                    s.codex_bin.display(),
                    if s.nice > 0 {
                        ", and that `nice` is on PATH or set codex_nice = 0"
                    } else {
                        ""
                    }
                ),
            )
        })?;
        if let Some(pid) = child.id() {
            super::leftover::record(&s.codex_home, pid);
        }
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(StartError::new(
                StartProblem::FailedToStart,
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
    async fn handshake(&self, conn: &RpcConnection) -> Result<(), StartError> {
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
        let failed = |e: super::rpc::RpcError| {
            StartError::new(
                StartProblem::FailedToStart,
                format!("app-server initialize failed: {e}"),
            )
        };
        conn.call(&hello, timeout).await.map_err(failed)?;
        conn.notify(INITIALIZED).map_err(failed)?;
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

/// Whether `bin` names an executable file: a path as given, a bare name
/// through `PATH`, as starting a process would find it.
fn runnable(bin: &std::path::Path) -> bool {
    if bin.components().count() > 1 {
        return is_executable(bin);
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| is_executable(&dir.join(bin))))
        .unwrap_or(false)
}

#[cfg(unix)]
fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(not(unix))]
fn is_executable(path: &std::path::Path) -> bool {
    path.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_is_runnable_by_its_path_or_through_path_and_only_if_executable() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("codex");
        assert!(!runnable(&bin), "missing");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert!(!runnable(&bin), "not executable");
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        assert!(runnable(&bin));
        assert!(runnable(std::path::Path::new("sh")), "found through PATH");
        assert!(!runnable(std::path::Path::new(
            "no-such-codex-binary-anywhere"
        )));
    }

    #[test]
    fn failed_starts_back_off_from_one_second_doubling_to_a_minute() {
        let waits: Vec<u64> = (0..10).map(|n| start_backoff(n).as_secs()).collect();
        assert_eq!(waits, [0, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(start_backoff(u32::MAX), Duration::from_secs(60));
    }
}
