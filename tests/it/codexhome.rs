//! The real `codex app-server` as a test peer: the pinned binary that
//! `scripts/test` installs (through `scripts/ensure-codex`, exported as
//! `CODEX_BRIDGE_TEST_CODEX_BIN`), and a fresh `CODEX_HOME` per test whose
//! minimal `config.toml` (from the protocol notes) points the model provider
//! `fake` at a [`FakeModel`]: offline, no login, no API key, no update check,
//! no plugin sync.
//!
//! Without the binary the tests fail with a message saying how to get it; they
//! never skip.

use crate::fakemodel::FakeModel;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The variable `scripts/test` sets to the codex binary's absolute path.
pub const CODEX_BIN_VAR: &str = "CODEX_BRIDGE_TEST_CODEX_BIN";

/// The codex version the tests are written against (`scripts/ensure-codex`).
pub const CODEX_VERSION: &str = "0.171.0";

/// The codex binary from [`CODEX_BIN_VAR`]; panics if it is unset or missing.
pub fn codex_bin() -> PathBuf {
    let how = format!(
        "run scripts/test, which installs codex {CODEX_VERSION} and sets {CODEX_BIN_VAR} \
         (or: export {CODEX_BIN_VAR}=$(scripts/ensure-codex))"
    );
    let Some(bin) = std::env::var_os(CODEX_BIN_VAR).filter(|v| !v.is_empty()) else {
        panic!("{CODEX_BIN_VAR} is not set: {how}");
    };
    let bin = PathBuf::from(bin);
    assert!(
        bin.is_file(),
        "{CODEX_BIN_VAR}={} does not exist: {how}",
        bin.display()
    );
    bin
}

/// A fresh `CODEX_HOME` for one test, removed on drop.
pub struct CodexHome {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl CodexHome {
    /// A new home whose provider `fake` (the default) is `model`.
    pub fn new(model: &FakeModel) -> CodexHome {
        let bin = codex_bin();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("codex")).unwrap();
        let home = CodexHome { dir, bin };
        std::fs::write(home.config_path(), minimal_config(&model.base_url())).unwrap();
        home
    }

    /// Names the model `slug` instead of `fake-model` (before spawning).
    pub fn set_model(&self, slug: &str) {
        let config = std::fs::read_to_string(self.config_path()).unwrap();
        let renamed = config.replacen("model = \"fake-model\"", &format!("model = \"{slug}\""), 1);
        assert_ne!(config, renamed, "no model line in {config}");
        std::fs::write(self.config_path(), renamed).unwrap();
    }

    /// The directory to pass as `CODEX_HOME`.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("codex")
    }

    /// Its `config.toml` (append to it before spawning for more settings).
    pub fn config_path(&self) -> PathBuf {
        self.path().join("config.toml")
    }

    /// `codex app-server` with piped stdio and only this home in its
    /// environment: `CODEX_HOME`, `HOME` (a scratch directory next to it, so
    /// nothing of the developer's home is read), `PATH` and `LANG`. Add more
    /// with `.env()`.
    pub fn app_server(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("app-server")
            .env_clear()
            .env("CODEX_HOME", self.path())
            .env("HOME", self.dir.path().join("home"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }
}

/// The minimal offline configuration: model `fake-model` from the provider
/// `fake` at `base_url`, no retries (a fault fails the turn at once).
pub fn minimal_config(base_url: &str) -> String {
    format!(
        r#"model = "fake-model"
model_provider = "fake"
approval_policy = "on-request"
sandbox_mode = "read-only"
check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false

# Otherwise start-up tries to sync plugins over the network.
[features]
plugins = false
remote_plugin = false
apps = false

[model_providers.fake]
name = "fake"
base_url = "{base_url}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 60000
"#
    )
}
