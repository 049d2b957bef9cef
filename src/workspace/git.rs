//! Running the system `git`: argv only (never a shell), stdin closed, no
//! prompt of any kind, a deadline, and the token only ever in the environment
//! of the commands that talk to the remote.

use secrecy::{ExposeSecret, SecretString};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What replaces the token if it ever shows up in git's output.
const REDACTED: &str = "[REDACTED]";

/// Most of git's stderr kept for an error message; the rest is noise.
const STDERR_KEEP: usize = 4096;

/// Variables that would make git work on another repository or another index
/// than the one we name, trace HTTP traffic (headers included) to stderr, or
/// add configuration we did not choose. Removed from every command.
const REMOVED_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_TRACE",
    "GIT_TRACE_CURL",
    "GIT_TRACE_CURL_NO_DATA",
    "GIT_TRACE_PACKET",
    "GIT_TRACE_PERFORMANCE",
    "GIT_TRACE2",
    "GIT_TRACE2_EVENT",
    "GIT_TRACE2_PERF",
    "GIT_CURL_VERBOSE",
    "GIT_SSH_COMMAND",
    "GIT_PROXY_COMMAND",
    "GIT_EXTERNAL_DIFF",
];

/// Configuration every command gets (highest precedence, over the repository's
/// own `.git/config`, which whatever runs in the workspace can edit): no hooks
/// and no fsmonitor command (either would run code, and see the environment
/// that holds the token), no credential helper (nothing may prompt or store a
/// credential), and HTTP(S) as the only transports.
const FIXED_CONFIG: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("credential.helper", ""),
    ("protocol.allow", "never"),
    ("protocol.http.allow", "always"),
    ("protocol.https.allow", "always"),
    ("advice.detachedHead", "false"),
];

/// The token and where it may be sent.
pub(super) struct RemoteAuth<'a> {
    /// `scheme://authority/` of the clone URL: the header is configured as
    /// `http.<origin>.extraHeader`, so git sends it there and nowhere else
    /// (not to a host an `url.*.insteadOf` in the workspace's config points at).
    pub origin: &'a str,
    pub token: Option<&'a SecretString>,
}

/// How to run git: which program, how long one command may take.
pub(super) struct Git<'a> {
    pub program: &'a OsStr,
    pub timeout: Duration,
}

/// One command to run.
pub(super) struct Invocation<'a> {
    pub dir: &'a Path,
    /// Git never looks for a repository above this directory (so a workspace
    /// that lost its `.git` is never mistaken for a repository it sits in).
    pub ceiling: &'a Path,
    pub args: Vec<OsString>,
    /// Set only for commands that talk to the remote.
    pub remote: Option<RemoteAuth<'a>>,
    /// An index of our own (`GIT_INDEX_FILE`), so that reading the work
    /// tree's state never touches the index the agent works with.
    pub index_file: Option<&'a Path>,
}

/// What a successful command printed.
#[derive(Debug)]
pub(super) struct Output {
    pub stdout: String,
}

/// Why a command did not succeed. `stderr` is trimmed, shortened and scrubbed
/// of the token.
#[derive(Debug)]
pub(super) enum Failure {
    /// Git could not be started at all.
    Spawn(std::io::Error),
    /// Killed at the deadline.
    TimedOut { after: Duration, stderr: String },
    /// Exited with a non-zero status (`code` is `None` when killed by a signal).
    Exit { code: Option<i32>, stderr: String },
}

impl Failure {
    pub fn stderr(&self) -> String {
        match self {
            Failure::Spawn(e) => e.to_string(),
            Failure::TimedOut { after, stderr } => {
                let waited = format!(
                    "git did not finish within {}s and was killed",
                    after.as_secs()
                );
                if stderr.is_empty() {
                    waited
                } else {
                    format!("{waited}; it said: {stderr}")
                }
            }
            Failure::Exit { stderr, code } => {
                if stderr.is_empty() {
                    match code {
                        Some(c) => format!("git exited with status {c} and said nothing"),
                        None => "git was killed by a signal".to_owned(),
                    }
                } else {
                    stderr.clone()
                }
            }
        }
    }
}

impl Git<'_> {
    /// Run `git <args>` in `inv.dir` and wait for it, at most `self.timeout`.
    pub fn run(&self, inv: Invocation<'_>) -> Result<Output, Failure> {
        tracing::debug!(
            dir = %inv.dir.display(),
            args = ?inv.args,
            remote = inv.remote.as_ref().map(|r| r.origin),
            "running git"
        );
        let token = inv
            .remote
            .as_ref()
            .and_then(|r| r.token)
            .map(|t| t.expose_secret());
        let mut cmd = self.command(&inv);
        let mut child = cmd.spawn().map_err(Failure::Spawn)?;
        let (tx, rx) = mpsc::channel();
        let stdout = drain(child.stdout.take(), Stream::Out, tx.clone());
        let stderr = drain(child.stderr.take(), Stream::Err, tx);
        let status = wait_until(&mut child, Instant::now() + self.timeout);
        // After a normal exit both pipes close at once. After a kill, a helper
        // git started (git-remote-http) may hold them a little longer; it exits
        // on its own when it finds its parent gone, so we do not wait for it.
        let grace = if status.is_some() {
            Duration::from_secs(5)
        } else {
            Duration::from_millis(200)
        };
        let mut out = Vec::new();
        let mut err = Vec::new();
        let until = Instant::now() + grace;
        for _ in 0..usize::from(stdout) + usize::from(stderr) {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok((Stream::Out, bytes)) => out = bytes,
                Ok((Stream::Err, bytes)) => err = bytes,
                Err(_) => break,
            }
        }
        let err = tidy_stderr(&err, token);
        match status {
            None => Err(Failure::TimedOut {
                after: self.timeout,
                stderr: err,
            }),
            Some(Err(e)) => Err(Failure::Spawn(e)),
            Some(Ok(s)) if s.success() => Ok(Output {
                stdout: String::from_utf8_lossy(&out).into_owned(),
            }),
            Some(Ok(s)) => Err(Failure::Exit {
                code: s.code(),
                stderr: err,
            }),
        }
    }

    fn command(&self, inv: &Invocation<'_>) -> Command {
        let mut cmd = Command::new(self.program);
        cmd.current_dir(inv.dir)
            .args(&inv.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in REMOVED_ENV {
            cmd.env_remove(var);
        }
        for (key, _) in std::env::vars_os() {
            let key_str = key.to_string_lossy();
            if key_str.starts_with("GIT_CONFIG_KEY_") || key_str.starts_with("GIT_CONFIG_VALUE_") {
                cmd.env_remove(&key);
            }
        }
        // English messages, so that failures can be classified; never a prompt:
        // no terminal, no askpass program (an empty GIT_ASKPASS also stops git
        // from trying SSH_ASKPASS), no credential-manager window.
        cmd.env("LC_ALL", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "")
            .env("SSH_ASKPASS", "")
            .env("GCM_INTERACTIVE", "never")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_CEILING_DIRECTORIES", inv.ceiling);
        if let Some(index) = inv.index_file {
            cmd.env("GIT_INDEX_FILE", index);
        }
        let mut config: Vec<(String, String)> = FIXED_CONFIG
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if let Some(remote) = &inv.remote {
            // A stalled transfer ends well before the deadline kills git.
            let stall = self.timeout.as_secs().clamp(1, 60);
            cmd.env("GIT_HTTP_LOW_SPEED_LIMIT", "1")
                .env("GIT_HTTP_LOW_SPEED_TIME", stall.to_string());
            if let Some(token) = remote.token {
                // The one place the token leaves this process: git reads it as
                // configuration from the environment, so it is in no argv, no
                // URL and no file, and `git clone` does not persist it.
                config.push((
                    format!("http.{}.extraHeader", remote.origin),
                    format!("Authorization: token {}", token.expose_secret()),
                ));
            }
        }
        cmd.env("GIT_CONFIG_COUNT", config.len().to_string());
        for (i, (key, value)) in config.into_iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{i}"), key)
                .env(format!("GIT_CONFIG_VALUE_{i}"), value);
        }
        cmd
    }
}

#[derive(Clone, Copy)]
enum Stream {
    Out,
    Err,
}

/// Read a pipe to its end on its own thread (so that a chatty git never blocks
/// on a full pipe while we wait for it) and send the bytes to `tx`.
/// Returns whether a reader was started.
fn drain<R: Read + Send + 'static>(
    pipe: Option<R>,
    which: Stream,
    tx: mpsc::Sender<(Stream, Vec<u8>)>,
) -> bool {
    let Some(mut pipe) = pipe else {
        return false;
    };
    let spawned = std::thread::Builder::new()
        .name("git-output".into())
        .spawn(move || {
            let mut buf = Vec::new();
            // A read error ends the output early; what was read is still useful.
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send((which, buf));
        });
    spawned.is_ok()
}

/// Wait for `child` until `deadline`; kill it there. `None` means killed.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<std::io::Result<ExitStatus>> {
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(Ok(status)),
            Ok(None) => {}
            Err(e) => return Some(Err(e)),
        }
        let now = Instant::now();
        if now >= deadline {
            // Already exited in between is fine; then wait() reaps it.
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Git's stderr as one short, trimmed text without the token, fit for an
/// error message an operator reads.
pub(super) fn tidy_stderr(raw: &[u8], token: Option<&str>) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut text = scrub(text.trim(), token);
    if text.len() > STDERR_KEEP {
        let mut cut = STDERR_KEEP;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Remove the token, and any `Authorization:` header value, from `text`.
/// Git does not print either; this is the second line of defence.
pub(super) fn scrub(text: &str, token: Option<&str>) -> String {
    let mut text = match token {
        Some(t) if !t.is_empty() => text.replace(t, REDACTED),
        _ => text.to_owned(),
    };
    let lower = text.to_ascii_lowercase();
    if let Some(at) = lower.find("authorization:") {
        let value_start = at + "authorization:".len();
        let value_end = text[value_start..]
            .find('\n')
            .map_or(text.len(), |i| value_start + i);
        text.replace_range(value_start..value_end, &format!(" {REDACTED}"));
    }
    text
}

/// What a failed command that talked to the remote means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RemoteFailure {
    /// The remote refused our credentials (or asked for ones we do not have).
    Auth,
    /// The repository or a ref does not exist (or is hidden from us).
    NotFound,
    /// The network, the server or the deadline: trying again may work.
    Transient,
    /// Anything else.
    Other,
}

/// Classify git's stderr (in the C locale) from a clone or fetch.
pub(super) fn classify_remote(stderr: &str) -> RemoteFailure {
    let s = stderr.to_ascii_lowercase();
    let any = |needles: &[&str]| needles.iter().any(|n| s.contains(n));
    if any(&[
        "authentication failed",
        "could not read username",
        "could not read password",
        "terminal prompts disabled",
        "http 401",
        "http 403",
        "returned error: 401",
        "returned error: 403",
        "invalid username or password",
        "invalid credentials",
    ]) {
        return RemoteFailure::Auth;
    }
    if any(&[
        "returned error: 404",
        "http 404",
        "couldn't find remote ref",
        "does not appear to be a git repository",
    ]) || (s.contains("repository '") && s.contains("' not found"))
    {
        return RemoteFailure::NotFound;
    }
    let server_error = [
        "returned error: 5",
        "http 5",
        "returned error: 429",
        "http 429",
    ];
    if any(&server_error)
        || any(&[
            "could not resolve host",
            "couldn't resolve host",
            "temporary failure in name resolution",
            "failed to connect",
            "couldn't connect",
            "could not connect",
            "connection refused",
            "connection reset",
            "connection timed out",
            "operation timed out",
            "timed out",
            "network is unreachable",
            "no route to host",
            "early eof",
            "unexpected disconnect",
            "the remote end hung up",
            "rpc failed",
            "empty reply from server",
            "recv failure",
            "send failure",
            "transfer closed",
            "ssl",
            "gnutls",
            "tls connect",
            "tls handshake",
            "http/2 stream",
            "remote end hung up",
        ])
    {
        return RemoteFailure::Transient;
    }
    RemoteFailure::Other
}

/// A path as an argument (git arguments are `OsString`s; paths need not be UTF-8).
pub(super) fn arg(p: &Path) -> OsString {
    p.as_os_str().to_owned()
}

/// Several string arguments.
pub(super) fn args<const N: usize>(items: [&str; N]) -> Vec<OsString> {
    items.iter().map(OsString::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_gits_own_words() {
        let cases = [
            (
                "fatal: could not read Username for 'http://127.0.0.1:1': terminal prompts disabled",
                RemoteFailure::Auth,
            ),
            (
                "remote: Unauthorized\nfatal: Authentication failed for 'https://h/a/b.git/'",
                RemoteFailure::Auth,
            ),
            (
                "fatal: unable to access 'https://h/a/b.git/': The requested URL returned error: 403",
                RemoteFailure::Auth,
            ),
            (
                "error: RPC failed; HTTP 401 curl 22 The requested URL returned error: 401",
                RemoteFailure::Auth,
            ),
            (
                "fatal: unable to access 'http://h/a.git/': The requested URL returned error: 500",
                RemoteFailure::Transient,
            ),
            (
                "fatal: unable to access 'http://h/a.git/': Failed to connect to h port 80 after 0 ms: Couldn't connect to server",
                RemoteFailure::Transient,
            ),
            (
                "fatal: unable to access 'https://nohost/': Could not resolve host: nohost",
                RemoteFailure::Transient,
            ),
            ("fatal: early EOF", RemoteFailure::Transient),
            (
                "remote: Not found.\nfatal: repository 'http://h/a/b.git/' not found",
                RemoteFailure::NotFound,
            ),
            (
                "fatal: couldn't find remote ref refs/pull/9/head",
                RemoteFailure::NotFound,
            ),
            ("fatal: something new", RemoteFailure::Other),
        ];
        for (stderr, want) in cases {
            assert_eq!(classify_remote(stderr), want, "{stderr}");
        }
    }

    #[test]
    fn scrub_removes_token_and_header_values() {
        let s = scrub(
            "x tok-123 y\n> Authorization: token tok-456\nnext",
            Some("tok-123"),
        );
        assert!(!s.contains("tok-123") && !s.contains("tok-456"), "{s}");
        assert!(s.ends_with("\nnext"), "{s}");
        assert_eq!(scrub("plain", None), "plain");
    }

    #[test]
    fn stderr_is_trimmed_and_shortened() {
        let long = "é".repeat(STDERR_KEEP);
        let t = tidy_stderr(format!("  \n{long}\n").as_bytes(), None);
        assert!(t.len() <= STDERR_KEEP + '…'.len_utf8());
        assert!(t.ends_with('…'));
    }

    #[test]
    fn a_hanging_command_is_killed_at_the_deadline() {
        let dir = std::env::temp_dir();
        let git = Git {
            program: OsStr::new("sleep"),
            timeout: Duration::from_millis(200),
        };
        let started = Instant::now();
        let res = git.run(Invocation {
            dir: &dir,
            ceiling: &dir,
            args: args(["30"]),
            remote: None,
            index_file: None,
        });
        assert!(matches!(res, Err(Failure::TimedOut { .. })), "{res:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_token_is_only_in_the_environment() {
        let dir = std::env::temp_dir();
        let token = SecretString::from("tok-in-env-only");
        let git = Git {
            program: OsStr::new("git"),
            timeout: Duration::from_secs(30),
        };
        let cmd = git.command(&Invocation {
            dir: &dir,
            ceiling: &dir,
            args: args([
                "config",
                "--get-urlmatch",
                "http.extraHeader",
                "https://h:1/a/b.git",
            ]),
            remote: Some(RemoteAuth {
                origin: "https://h:1/",
                token: Some(&token),
            }),
            index_file: None,
        });
        assert!(cmd
            .get_args()
            .all(|a| !a.to_string_lossy().contains("tok-in-env-only")));
        // And git does read it from there, for that origin only.
        let out = git
            .run(Invocation {
                dir: &dir,
                ceiling: &dir,
                args: args([
                    "config",
                    "--get-urlmatch",
                    "http.extraHeader",
                    "https://h:1/a/b.git",
                ]),
                remote: Some(RemoteAuth {
                    origin: "https://h:1/",
                    token: Some(&token),
                }),
                index_file: None,
            })
            .unwrap();
        assert_eq!(out.stdout.trim(), "Authorization: token tok-in-env-only");
        let other = git.run(Invocation {
            dir: &dir,
            ceiling: &dir,
            args: args([
                "config",
                "--get-urlmatch",
                "http.extraHeader",
                "https://evil:1/a/b.git",
            ]),
            remote: Some(RemoteAuth {
                origin: "https://h:1/",
                token: Some(&token),
            }),
            index_file: None,
        });
        assert!(
            matches!(other, Err(Failure::Exit { code: Some(1), .. })),
            "{other:?}"
        );
    }
}
