//! The server process of a [`TestApp`](super::TestApp): the real binary
//! with its output captured, or `app::run` on a thread of this process.

use crate::support::poll_until;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The server itself: the binary, or `app::run` on a thread.
pub(super) struct Server {
    pub(super) base: String,
    pub(super) kind: Kind,
}

pub(super) enum Kind {
    Process {
        child: Child,
        logs: Arc<Mutex<String>>,
        /// How many of the two output readers reached the end of their pipe.
        drained: Arc<AtomicUsize>,
    },
    InProcess {
        shutdown: Option<tokio::sync::oneshot::Sender<()>>,
        thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
    },
    Stopped,
}

impl Server {
    pub(super) fn start(in_process: bool, env: BTreeMap<String, String>) -> Server {
        if in_process {
            Server::in_process(env)
        } else {
            Server::process(env)
        }
    }

    /// The binary, with exactly `env` as its configuration.
    fn process(env: BTreeMap<String, String>) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_codex-bridge"));
        cmd.arg("serve");
        for (k, _) in std::env::vars() {
            if k.starts_with("CODEX_BRIDGE_") || k == "RUST_LOG" {
                cmd.env_remove(k);
            }
        }
        cmd.envs(&env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let logs = Arc::new(Mutex::new(String::new()));
        let drained = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let read = |pipe: Box<dyn std::io::Read + Send>,
                    tx: Option<std::sync::mpsc::Sender<String>>| {
            let (logs, drained) = (logs.clone(), drained.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if let (Some(tx), Some(addr)) =
                        (&tx, line.strip_prefix("codex-bridge listening on "))
                    {
                        let _ = tx.send(addr.to_owned());
                    }
                    logs.lock().unwrap().push_str(&format!("{line}\n"));
                }
                drained.fetch_add(1, Ordering::SeqCst);
            });
        };
        read(Box::new(child.stdout.take().unwrap()), Some(tx));
        read(Box::new(child.stderr.take().unwrap()), None);
        let base = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "server did not start; its output:\n{}",
                    logs.lock().unwrap()
                );
            }
        };
        Server {
            base,
            kind: Kind::Process {
                child,
                logs,
                drained,
            },
        }
    }

    /// `app::run` on a thread of its own with its own actix system, on a
    /// listener bound here; up once `/healthz` answers.
    fn in_process(env: BTreeMap<String, String>) -> Server {
        let config = codex_bridge::config::Config::from_sources(None, &env)
            .unwrap_or_else(|e| panic!("the test configuration is refused: {e}"));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("codex-bridge".into())
            .spawn(move || {
                actix_web::rt::System::new().block_on(codex_bridge::app::run(
                    config,
                    listener,
                    async move {
                        // A dropped sender stops the server as well.
                        let _ = stop.await;
                    },
                ))
            })
            .unwrap();
        let health = format!("{base}/healthz");
        let up = poll_until(Duration::from_secs(30), || {
            thread.is_finished() || ureq::get(&health).call().is_ok()
        });
        if thread.is_finished() {
            match thread.join() {
                Ok(result) => panic!("the server stopped as it started: {result:?}"),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        assert!(
            up,
            "the in-process server did not answer /healthz within 30 s"
        );
        Server {
            base,
            kind: Kind::InProcess {
                shutdown: Some(shutdown),
                thread: Some(thread),
            },
        }
    }

    /// A graceful stop, waited for (20 s at most, then a kill).
    /// Waits up to `within` for the binary to exit by itself.
    pub(super) fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let Kind::Process { child, drained, .. } = &mut self.kind else {
            panic!("only the binary exits by itself");
        };
        let mut status = None;
        poll_until(within, || {
            status = child.try_wait().ok().flatten();
            status.is_some()
        });
        if status.is_some() {
            poll_until(Duration::from_secs(5), || {
                drained.load(Ordering::SeqCst) == 2
            });
        }
        status
    }

    pub(super) fn stop(&mut self) {
        match &mut self.kind {
            Kind::Process { child, drained, .. } => {
                let _ = Command::new("kill")
                    .arg("-TERM")
                    .arg(child.id().to_string())
                    .status();
                poll_until(Duration::from_secs(20), || {
                    matches!(child.try_wait(), Ok(Some(_)))
                });
                let _ = child.kill();
                let _ = child.wait();
                // Its last lines: read once both pipes are at their end (a
                // child of the server that kept one open only delays this).
                poll_until(Duration::from_secs(5), || {
                    drained.load(Ordering::SeqCst) == 2
                });
            }
            Kind::InProcess { shutdown, thread } => {
                if let Some(tx) = shutdown.take() {
                    let _ = tx.send(());
                }
                if let Some(thread) = thread.take() {
                    assert!(
                        poll_until(Duration::from_secs(30), || thread.is_finished()),
                        "app::run did not return within 30 s of its shutdown future"
                    );
                    match thread.join() {
                        Ok(result) => result.unwrap(),
                        Err(panic) => std::panic::resume_unwind(panic),
                    }
                }
            }
            Kind::Stopped => {}
        }
    }

    /// Ends the server at once: SIGKILL for the binary; in process, the
    /// shutdown future (the nearest there is).
    pub(super) fn kill(&mut self) {
        match std::mem::replace(&mut self.kind, Kind::Stopped) {
            Kind::Process {
                mut child,
                logs,
                drained,
            } => {
                let _ = child.kill();
                let _ = child.wait();
                self.kind = Kind::Process {
                    child,
                    logs,
                    drained,
                };
            }
            Kind::InProcess { shutdown, thread } => {
                drop(shutdown);
                // Joined once it has stopped; a server that does not stop is
                // left behind rather than hanging the test.
                if let Some(thread) = thread {
                    if poll_until(Duration::from_secs(30), || thread.is_finished()) {
                        let _ = thread.join();
                    }
                }
            }
            Kind::Stopped => {}
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
