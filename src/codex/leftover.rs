//! An app-server left running by a bridge process that was killed (SIGKILL,
//! the OOM killer) still holds its threads: the next app-server on the same
//! `CODEX_HOME` cannot resume them ("already has an active turn"), and a
//! turn it was waiting on an approval for never ends. So each app-server
//! runs as the leader of a process group of its own (its commands with
//! it), recorded under `CODEX_HOME` with the bridge process that started
//! it, and every start on that home first ends the recorded groups whose
//! bridge process is gone. An app-server whose bridge process still runs
//! (a server, and a `doctor` or sign-in beside it) is never touched, nor is
//! one on another `CODEX_HOME`: pids are reused within minutes on a busy
//! host (the kernel's default limit is 32,768), so a recorded pid may name
//! another bridge's app-server by the time it is read.

use rustix::process::{getpgid, kill_process_group, Pid, Signal};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const DIR: &str = "codex-bridge-app-servers";

fn dir(codex_home: &Path) -> PathBuf {
    codex_home.join(DIR)
}

/// Records `pid`, the leader of a new app-server's group, as started by
/// this process.
pub(super) fn record(codex_home: &Path, pid: u32) {
    let written = std::fs::create_dir_all(dir(codex_home)).and_then(|()| {
        std::fs::write(
            dir(codex_home).join(pid.to_string()),
            format!("{}\n", std::process::id()),
        )
    });
    if let Err(e) = written {
        tracing::warn!(error = %e, "could not record the app-server's process group; after a crash of codex-bridge, end a left-over `codex app-server` by hand");
    }
}

/// Ends every recorded app-server group whose bridge process is gone; the
/// pids it ended. Records of groups that no longer run are removed.
pub(super) fn end(codex_home: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir(codex_home)) else {
        return Vec::new();
    };
    let mut ended = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
            .and_then(Pid::from_raw)
        else {
            continue;
        };
        let owner = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok());
        if !is_app_server_group(pid, codex_home) {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        // Its bridge process still runs it: not left over.
        if owner.is_some() && parent_of(pid) == owner {
            continue;
        }
        let raw = pid.as_raw_nonzero().get();
        tracing::warn!(
            pid = raw,
            "a codex app-server left running by an earlier codex-bridge process holds its threads: ending it"
        );
        if let Err(e) = kill_process_group(pid, Signal::KILL) {
            tracing::warn!(pid = raw, error = %e, "could not end the left-over app-server; end it by hand");
            continue;
        }
        // Gone once its pid no longer leads an app-server's group.
        let deadline = Instant::now() + Duration::from_secs(5);
        while is_app_server_group(pid, codex_home) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(&path);
        ended.extend(u32::try_from(raw).ok());
    }
    ended
}

/// Whether `pid` leads its own process group and runs `… app-server …` on
/// `codex_home` (a recorded pid may have been reused by anything since,
/// another bridge's app-server included).
fn is_app_server_group(pid: Pid, codex_home: &Path) -> bool {
    if getpgid(Some(pid)).ok() != Some(pid) {
        return false;
    }
    let proc = format!("/proc/{}", pid.as_raw_nonzero());
    let runs_app_server = std::fs::read(format!("{proc}/cmdline"))
        .map(|cmdline| cmdline.split(|b| *b == 0).any(|arg| arg == b"app-server"))
        .unwrap_or(false);
    // The environment it was started with: the bridge sets CODEX_HOME.
    let mut wanted = b"CODEX_HOME=".to_vec();
    wanted.extend_from_slice(codex_home.as_os_str().as_bytes());
    runs_app_server
        && std::fs::read(format!("{proc}/environ"))
            .map(|env| env.split(|b| *b == 0).any(|var| var == wanted.as_slice()))
            .unwrap_or(false)
}

/// The parent process of `pid`, from `/proc/<pid>/stat` (the fields after
/// the command name in parentheses: state, then the parent's pid).
fn parent_of(pid: Pid) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// A stand-in app-server on `home`: `sh -c '…' app-server`, a group
    /// leader whose argv holds `app-server`, with a child of its own;
    /// returned once it runs as one.
    fn stand_in(home: &Path) -> (std::process::Child, Pid) {
        let leader = std::process::Command::new("sh")
            .args(["-c", "sleep 600 & wait", "app-server"])
            .env("CODEX_HOME", home)
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(leader.id() as i32).unwrap();
        // Until the child has exec'd, its argv is still this test's.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !is_app_server_group(pid, home) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(is_app_server_group(pid, home));
        (leader, pid)
    }

    #[test]
    fn a_recorded_pid_that_is_no_app_server_is_forgotten() {
        let home = tempfile::tempdir().unwrap();
        assert!(end(home.path()).is_empty(), "no records, nothing to end");
        // This test process: alive, but no group leader running `app-server`.
        record(home.path(), std::process::id());
        assert!(end(home.path()).is_empty());
        assert_eq!(std::fs::read_dir(dir(home.path())).unwrap().count(), 0);
    }

    #[test]
    fn an_app_server_whose_bridge_process_runs_is_left_alone() {
        let home = tempfile::tempdir().unwrap();
        let (mut leader, pid) = stand_in(home.path());
        // Recorded by this process, which is its parent and alive.
        record(home.path(), leader.id());
        assert!(end(home.path()).is_empty());
        assert!(is_app_server_group(pid, home.path()));
        leader.kill().unwrap();
        leader.wait().unwrap();
        let _ = kill_process_group(pid, Signal::KILL);
    }

    #[test]
    fn a_left_over_app_server_group_is_ended_with_its_children() {
        let home = tempfile::tempdir().unwrap();
        let (mut leader, pid) = stand_in(home.path());
        // Recorded by a bridge process that is not its parent any more.
        std::fs::create_dir_all(dir(home.path())).unwrap();
        std::fs::write(dir(home.path()).join(leader.id().to_string()), "1\n").unwrap();
        assert_eq!(end(home.path()), vec![leader.id()]);
        let status = leader.wait().unwrap();
        assert!(!status.success(), "{status:?}");
        assert!(getpgid(Some(pid)).is_err(), "the group is gone");
        assert_eq!(std::fs::read_dir(dir(home.path())).unwrap().count(), 0);
    }

    #[test]
    fn a_recorded_pid_now_leading_an_app_server_on_another_home_is_left_alone() {
        let (home, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        // The pid was reused by another bridge's app-server: a group leader
        // running `app-server`, not a child of the recorded bridge process.
        let (mut leader, pid) = stand_in(other.path());
        std::fs::create_dir_all(dir(home.path())).unwrap();
        std::fs::write(dir(home.path()).join(leader.id().to_string()), "1\n").unwrap();
        assert!(end(home.path()).is_empty());
        assert!(is_app_server_group(pid, other.path()), "still running");
        assert_eq!(std::fs::read_dir(dir(home.path())).unwrap().count(), 0);
        let _ = kill_process_group(pid, Signal::KILL);
        leader.wait().unwrap();
    }
}
