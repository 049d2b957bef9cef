//! A fault-injecting relay between the bridge and the real `codex
//! app-server` (`relay/codex_relay.py`): it holds or drops the client
//! requests its rules name and copies everything else both ways, so a test
//! can put a real app-server into the moments a race would (a steer that
//! reaches Codex only after the turn ended, an interrupt that never
//! arrives). The server's answers are Codex's own.

use crate::codexhome::codex_bin;
use crate::support::wait_until;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

const SCRIPT: &str = include_str!("relay/codex_relay.py");

pub struct Relay {
    dir: tempfile::TempDir,
}

impl Relay {
    /// A relay to the pinned app-server with no rules.
    pub fn new() -> Relay {
        let dir = tempfile::tempdir().expect("a directory for the relay");
        let script = dir.path().join("codex");
        std::fs::write(&script, SCRIPT).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            dir.path().join("target"),
            codex_bin().to_string_lossy().as_bytes(),
        )
        .unwrap();
        let relay = Relay { dir };
        relay.set_rules(serde_json::json!([]));
        relay
    }

    /// What the server's `codex_bin` is set to.
    pub fn bin(&self) -> PathBuf {
        self.dir.path().join("codex")
    }

    /// Replaces the rules (written whole, then renamed: the relay never
    /// reads half of them).
    pub fn set_rules(&self, rules: Value) {
        let tmp = self.dir.path().join("rules.tmp");
        std::fs::write(&tmp, rules.to_string()).unwrap();
        std::fs::rename(&tmp, self.dir.path().join("rules")).unwrap();
    }

    /// Every rule applied so far, oldest first (`hold turn/steer`, `release
    /// turn/steer after turn/completed`, `drop turn/interrupt`).
    pub fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Waits until the log has the line `line`.
    pub fn wait_logged(&self, line: &str, timeout: Duration) {
        wait_until(&format!("the relay to {line}"), timeout, || {
            self.log().iter().any(|l| l == line)
        });
    }
}
