//! Configuration: a TOML file, every key overridable from the environment as
//! `CODEX_BRIDGE_<KEY>`, validated once at start into [`Config`].
//!
//! - [`keys`]: the names: every key with its help text, the variables that are not keys.
//! - `sources`: the file and environment layers, merged by figment into `raw`'s
//!   serde struct, which refuses unknown names in either.
//! - `validate`: the one step from what was written to what the server runs with.
//! - [`secrets`]: the webhook secret and admin token, generated when not configured.
//! - [`database`], [`proxies`]: the values with a syntax of their own.
//!
//! Errors name the key (or the file, or the variable) and what to do; secrets
//! are kept in `SecretString` and never printed. The configuration holds plain
//! values only: each layer that runs something (store, actors, gitea) builds
//! its own settings from a `&Config`.

pub mod database;
pub mod keys;
pub mod proxies;
mod raw;
pub mod secrets;
mod sources;
mod validate;

#[cfg(test)]
mod tests;

pub use database::DatabaseUrl;
pub use keys::{env_name, KEYS};
pub use proxies::TrustedProxies;
pub use secrets::ServerSecrets;

use crate::domain::policy::RepoPolicy;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Where the server takes Gitea's webhooks, below `public_url`.
pub const WEBHOOK_PATH: &str = "/api/gitea/webhook";

/// A configuration problem, naming the key (or file, or variable) and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config key `{key}`: {problem} (set it in the config file or as {env})")]
    Invalid {
        key: &'static str,
        env: String,
        problem: String,
    },
    #[error("config file {path}: {problem}")]
    File { path: String, problem: String },
    #[error("environment variable {name}: {problem}")]
    Variable { name: String, problem: String },
}

fn invalid(key: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        env: env_name(key),
        problem: problem.into(),
    }
}

/// The validated configuration.
#[derive(Clone)]
pub struct Config {
    pub listen: String,
    pub database_url: DatabaseUrl,
    pub webhook_secret: Option<SecretString>,
    pub bot_login: String,
    pub instance_id: String,
    pub gitea_url: Option<String>,
    pub gitea_token: Option<SecretString>,
    pub admin_token: Option<SecretString>,
    pub workspace_root: PathBuf,
    pub state_dir: PathBuf,
    pub max_body_bytes: usize,
    /// How long a client has to send a request's head, and then its whole
    /// body (`request_timeout_secs`): a slow or stalled sender is answered
    /// 408 and its connection closed.
    pub request_timeout: std::time::Duration,
    /// Connections the HTTP server holds at once (`max_connections`); past
    /// it, new ones wait to be accepted.
    pub max_connections: usize,
    /// How long a stopping server lets the turns under way finish before it
    /// interrupts them (`drain_timeout_secs`).
    pub drain_timeout: std::time::Duration,
    /// Provider or app-server failures in a row that open the circuit
    /// breaker (`breaker_failures`; 0: never).
    pub breaker_failures: u32,
    /// How long the circuit first stays open (`breaker_open_secs`).
    pub breaker_open_secs: u64,
    /// Turns one Issue's or pull request's comments may start in a minute
    /// before the storm guard pauses it (`session_turns_per_minute`; 0: no
    /// limit).
    pub session_turns_per_minute: i64,
    pub log_format: LogFormat,
    pub log_filter: String,
    pub writer_batch_max: usize,
    pub writer_threads: usize,
    pub read_pool_size: u32,
    pub sqlite_busy_timeout_ms: u64,
    pub agent_runtime: AgentRuntimeKind,
    pub codex_bin: PathBuf,
    pub codex_home: PathBuf,
    pub codex_nice: u8,
    pub gitea_mcp_command: Option<String>,
    pub gitea_mcp_args: Vec<String>,
    pub gitea_mcp_url_env: String,
    pub gitea_mcp_token_env: String,
    pub lease_ttl_secs: u64,
    pub turn_timeout_secs: u64,
    pub approval_timeout_secs: u64,
    /// Thread policy of every repository without an override.
    pub default_policy: RepoPolicy,
    /// Overrides by lower-case `owner/name`.
    pub repositories: BTreeMap<String, RepoPolicy>,
    pub receipt_mode: ReceiptMode,
    /// The least permission a commenter needs to trigger work.
    pub trigger_permission: TriggerPermission,
    /// The least permission that lets someone besides a workflow's owner
    /// answer its gate.
    pub gate_permission: TriggerPermission,
    /// Lower-case logins that may trigger whatever their permission.
    pub trigger_allow: BTreeSet<String>,
    /// Lower-case logins that may never trigger.
    pub trigger_deny: BTreeSet<String>,
    /// Logins whose comments never trigger anything, not even a refusal
    /// (other bots: Gitea's API has no bot flag), in lower case.
    pub ignore_logins: BTreeSet<String>,
    pub lease_heartbeat_secs: u64,
    pub session_idle_secs: u64,
    /// How long a session waits for a remote worker to take and answer one
    /// call (`agent_runtime = "remote"`).
    pub worker_call_timeout_secs: u64,
    /// How long a worker's repository lease lives without renewal.
    pub worker_lease_ttl_secs: u64,
    pub retry_backoff_secs: u64,
    pub max_attempts: i64,
    /// How much of the Issue/PR and its comments a turn's prompt carries.
    pub prompt_context_bytes: u64,
    /// Work outlives a turn: workflows, their tools and continuations.
    pub workflows: bool,
    /// Wait before an open workflow's next continuation (doubled per idle final).
    pub continuation_backoff_secs: u64,
    /// Wait before a workflow continues after a capacity refusal (doubled
    /// per refusal in a row).
    pub capacity_wait_secs: u64,
    /// Finals in a row without progress before a workflow waits for its owner.
    pub workflow_max_idle_finals: i64,
    /// Children one workflow may have working at once.
    pub max_children_per_workflow: i64,
    /// Turns a child without a result is asked again before it is incomplete.
    pub child_recovery_attempts: i64,
    /// Turns of one repository, in different sessions' worktrees, that may
    /// run at once.
    pub max_parallel_turns_per_repo: u64,
    /// Hours a session's worktree stays after its work ended (0: kept).
    pub worktree_retention_hours: u64,
    /// Days a delivery no task was made from is kept (0: kept).
    pub delivery_retention_days: u64,
    /// Days an ended turn's events are kept (0: kept).
    pub turn_event_retention_days: u64,
    /// What the agent may spend, since an open workflow runs on its own.
    pub limits: crate::domain::limits::Limits,
    pub scheduler_sweep_ms: u64,
    /// Seconds between catch-up passes over the known repositories' comments
    /// (0: no catch-up).
    pub catchup_interval_secs: u64,
    /// A separate listener for `/metrics` without a token (`None`: main listener only).
    pub metrics_listen: Option<String>,
    /// Proxies whose forwarded headers are believed (see `web::client`).
    pub trusted_proxies: TrustedProxies,
    /// The external base URL of this server (no trailing `/`), for links
    /// to it in what the bridge writes into Gitea; `None`: no links.
    pub public_url: Option<String>,
    /// The SQLite file of a remote worker's journal and outbox
    /// (`journal_url`, default `sqlite://./data/worker-journal.db`): read
    /// only by `codex-bridge worker`.
    pub journal_path: PathBuf,
    /// Whether an untrusted pull request (from a fork, or whose head
    /// commit's author lacks `trigger_permission`) runs with the
    /// repository's own policy and tools anyway.
    pub trust_fork_prs: bool,
    /// The token the agent's Gitea MCP server gets (`None`: `gitea_token`).
    /// Kept apart because the bot's own token is a repository admin's.
    pub gitea_mcp_token: Option<SecretString>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |s: &Option<SecretString>| if s.is_some() { "<set>" } else { "<unset>" };
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("database_url", &self.database_url)
            .field("webhook_secret", &set(&self.webhook_secret))
            .field("bot_login", &self.bot_login)
            .field("instance_id", &self.instance_id)
            .field("gitea_url", &self.gitea_url)
            .field("gitea_token", &set(&self.gitea_token))
            .field("admin_token", &set(&self.admin_token))
            .field("gitea_mcp_token", &set(&self.gitea_mcp_token))
            .field("workspace_root", &self.workspace_root)
            .field("state_dir", &self.state_dir)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// The limits a workflow's decisions apply.
    pub fn workflow_limits(&self) -> crate::domain::workflow::decide::WorkflowLimits {
        crate::domain::workflow::decide::WorkflowLimits {
            max_idle_finals: self.workflow_max_idle_finals,
            max_turns: self.limits.max_turns_per_workflow,
        }
    }

    /// The token the agent's Gitea MCP server gets: `gitea_mcp_token`, else
    /// the bot's own `gitea_token`.
    pub fn agent_gitea_token(&self) -> Option<&SecretString> {
        self.gitea_mcp_token.as_ref().or(self.gitea_token.as_ref())
    }

    /// Reads `path` (if given) and the process environment, and validates everything.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut env = BTreeMap::new();
        for (name, value) in std::env::vars_os() {
            // Configuration variables are ASCII; a name that is not text is
            // another program's.
            let Some(name) = name.to_str() else {
                continue;
            };
            match value.into_string() {
                Ok(value) => {
                    env.insert(name.to_owned(), value);
                }
                Err(_) if keys::is_config_variable(name) => {
                    return Err(ConfigError::Variable {
                        name: name.to_owned(),
                        problem: "is not valid UTF-8".to_owned(),
                    })
                }
                Err(_) => {}
            }
        }
        Self::from_sources(path, &env)
    }

    /// The URL Gitea's webhooks should call: `public_url` and the webhook
    /// path (`None` without `public_url`: only the operator knows how Gitea
    /// reaches this server).
    pub fn webhook_url(&self) -> Option<String> {
        self.public_url
            .as_deref()
            .map(|base| format!("{base}{WEBHOOK_PATH}"))
    }

    /// Like [`Config::load`] with an explicit environment (for tests).
    pub fn from_sources(
        path: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<Config, ConfigError> {
        validate::validate(sources::read(path, env)?)
    }
}

/// Implements `as_str`, `Display` and `FromStr` (whose error lists the
/// accepted words, for the key's message) for a config word enum.
macro_rules! words {
    ($ty:ident, $expected:literal, { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The word the config uses.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $word),+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| $expected.to_owned())
            }
        }
    };
}

/// `log_format`: how log lines are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Plain,
    Json,
}

words!(LogFormat, "expected plain or json", { Plain => "plain", Json => "json" });

/// `agent_runtime`: which agent runtime runs the turns (default `codex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentRuntimeKind {
    /// Intake only: webhooks are stored, nothing runs.
    None,
    /// The Codex app-server.
    Codex,
    /// Plays directives from the instruction text; no model. For tests.
    Scripted,
    /// Remote workers (`codex-bridge worker`) run the turns: the server
    /// keeps the sessions' logic and hands each runtime call to the worker
    /// holding the repository's lease.
    Remote,
}

words!(AgentRuntimeKind, "expected none, codex, scripted or remote", {
    None => "none",
    Codex => "codex",
    Scripted => "scripted",
    Remote => "remote",
});

/// `receipt_mode`: how a queued task is acknowledged on Gitea.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiptMode {
    /// A comment in the thread.
    Comment,
    /// An `eyes` reaction on the triggering comment.
    Reaction,
}

words!(ReceiptMode, "expected comment or reaction", {
    Comment => "comment",
    Reaction => "reaction",
});

/// `trigger_permission`: the least repository permission, as Gitea names it,
/// that lets a commenter trigger work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TriggerPermission {
    Read,
    Write,
    Admin,
}

words!(TriggerPermission, "expected read, write or admin", {
    Read => "read",
    Write => "write",
    Admin => "admin",
});
