//! An app-server left running by a bridge process that was killed (SIGKILL,
//! the OOM killer) still holds its threads: the next app-server on the same
//! `CODEX_HOME` cannot resume them ("already has an active turn"), and a
//! turn it was waiting on an approval for never ends. So each app-server
//! runs as the leader of a process group of its own (its MCP servers and
//! commands with it), named in a file under `CODEX_HOME`, and the next start
//! on that home ends the group it names first.

use rustix::process::{getpgid, kill_process_group, Pid, Signal};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const FILE: &str = "codex-bridge-app-server.pid";

fn file(codex_home: &Path) -> PathBuf {
    codex_home.join(FILE)
}

/// Names `pid` (the leader of the new app-server's group) as this home's.
pub(super) fn record(codex_home: &Path, pid: u32) {
    if let Err(e) = std::fs::write(file(codex_home), format!("{pid}\n")) {
        tracing::warn!(error = %e, "could not record the app-server's process group; after a crash of codex-bridge, end a left-over `codex app-server` by hand");
    }
}

/// Ends the process group a previous bridge process left running on this
/// home, if it still runs and is an app-server's; the pid it ended.
pub(super) fn end(codex_home: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(file(codex_home)).ok()?;
    let raw: i32 = text.trim().parse().ok()?;
    let pid = Pid::from_raw(raw)?;
    if !is_app_server_group(pid) {
        return None;
    }
    tracing::warn!(
        pid = raw,
        "a codex app-server left running by an earlier codex-bridge process holds its threads: ending it"
    );
    if let Err(e) = kill_process_group(pid, Signal::KILL) {
        tracing::warn!(pid = raw, error = %e, "could not end the left-over app-server; end it by hand");
        return None;
    }
    // Gone once its pid no longer leads an app-server's group (reaped by
    // init, as its parent is dead).
    let deadline = Instant::now() + Duration::from_secs(5);
    while is_app_server_group(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    u32::try_from(raw).ok()
}

/// Whether `pid` leads its own process group and runs `… app-server …` (a
/// pid the file names may have been reused by anything since).
fn is_app_server_group(pid: Pid) -> bool {
    if getpgid(Some(pid)).ok() != Some(pid) {
        return false;
    }
    std::fs::read(format!("/proc/{}/cmdline", pid.as_raw_nonzero()))
        .map(|cmdline| cmdline.split(|b| *b == 0).any(|arg| arg == b"app-server"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_group_that_is_no_app_server_is_left_alone() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(end(home.path()), None, "no file, nothing to end");
        // This test process: alive, but neither a group leader running
        // `app-server` nor ours to end.
        record(home.path(), std::process::id());
        assert_eq!(end(home.path()), None);
        std::fs::write(file(home.path()), "not a pid").unwrap();
        assert_eq!(end(home.path()), None);
    }

    #[test]
    fn a_left_over_app_server_group_is_ended_with_its_children() {
        use std::os::unix::process::CommandExt;
        let home = tempfile::tempdir().unwrap();
        // A stand-in: `sh -c '…' app-server`, a group leader whose argv
        // holds `app-server`, with a child of its own.
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "sleep 600 & wait", "app-server"])
            .process_group(0)
            .spawn()
            .unwrap();
        record(home.path(), leader.id());
        let pid = Pid::from_raw(leader.id() as i32).unwrap();
        // Until the child has exec'd, its argv is still this test's.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !is_app_server_group(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(is_app_server_group(pid));
        assert_eq!(end(home.path()), Some(leader.id()));
        let status = leader.wait().unwrap();
        assert!(!status.success(), "{status:?}");
        assert!(getpgid(Some(pid)).is_err(), "the group is gone");
    }
}
