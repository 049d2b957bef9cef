//! Configuration: a TOML file, every key overridable from the
//! environment as `CODEX_BRIDGE_<KEY>`, validated once at start. Errors name the
//! key; secrets are kept in `SecretString` and never printed.

use crate::store::{DbUrl, StoreSettings, WriterSettings};
use secrecy::{ExposeSecret, SecretString};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every key the file and the environment may set, with its help text. Adding a
/// key is fine; renaming one breaks operators' files and environments.
pub const KEYS: &[(&str, &str)] = &[
    (
        "listen",
        "address:port of the HTTP server (default 127.0.0.1:8080)",
    ),
    (
        "database_url",
        "sqlite://PATH or postgres://... (default sqlite://./data/codex-bridge.db)",
    ),
    (
        "webhook_secret",
        "the Gitea webhook secret (generated into state_dir if unset)",
    ),
    (
        "bot_login",
        "the bot's Gitea login that comments mention (default codex-bot)",
    ),
    (
        "instance_id",
        "namespace of this Gitea instance in every key (default default)",
    ),
    (
        "gitea_url",
        "base URL of Gitea, e.g. https://git.example.com",
    ),
    ("gitea_token", "the bot's Gitea API token"),
    (
        "admin_token",
        "Bearer token of the admin API and web view (generated into state_dir if unset)",
    ),
    (
        "workspace_root",
        "where repositories are cloned (default ./data/workspaces)",
    ),
    (
        "state_dir",
        "where generated secrets and local state live (default ./data)",
    ),
    (
        "max_body_bytes",
        "webhook body limit in bytes (default 1048576)",
    ),
    ("log_format", "plain or json (default plain)"),
    (
        "log_filter",
        "tracing filter, e.g. info or codex_bridge=debug (default info; RUST_LOG wins)",
    ),
    (
        "writer_batch_max",
        "most writes committed together by the group-commit writer (default 256)",
    ),
    (
        "writer_threads",
        "writer threads (default 1 for SQLite; for PostgreSQL 4, or the number of cores if fewer)",
    ),
    (
        "read_pool_size",
        "database connections for reads (default 8)",
    ),
    (
        "sqlite_busy_timeout_ms",
        "how long SQLite waits for a lock (default 5000)",
    ),
    (
        "codex_bin",
        "the codex binary the app-server runs from (default codex, from PATH)",
    ),
    (
        "codex_home",
        "the CODEX_HOME given to the app-server (default <state_dir>/codex-home)",
    ),
    (
        "codex_nice",
        "how much nicer (lower CPU priority) the app-server runs than the bridge, 0 to 19; \
         0 runs it at the same priority (default 10)",
    ),
    (
        "agent_runtime",
        "none (intake only), codex, or scripted (tests: plays directives, no model) (default none)",
    ),
    (
        "lease_ttl_secs",
        "how long a repository lease lives without renewal (default 60)",
    ),
    (
        "lease_heartbeat_secs",
        "how often a held lease is renewed (default 15)",
    ),
    (
        "session_idle_secs",
        "an idle session actor is stopped after this long (default 600)",
    ),
    (
        "retry_backoff_secs",
        "wait before a retry_wait task runs again (default 30)",
    ),
    (
        "max_attempts",
        "attempts a task gets before a transient failure fails it (default 2)",
    ),
    (
        "scheduler_sweep_ms",
        "how often the registry looks for due work in the store (default 5000)",
    ),
    (
        "gitea_mcp_command",
        "the Gitea MCP server each thread gets, e.g. gitea-mcp (unset: none)",
    ),
    (
        "gitea_mcp_args",
        "its arguments: a TOML array, or a JSON array in the environment",
    ),
    (
        "gitea_mcp_url_env",
        "the variable it reads Gitea's URL from (default GITEA_HOST)",
    ),
    (
        "gitea_mcp_token_env",
        "the variable it reads the token from, passed by reference (default GITEA_ACCESS_TOKEN)",
    ),
    (
        "turn_timeout_secs",
        "a turn running longer is interrupted and the task timed_out (default 1800)",
    ),
    (
        "approval_timeout_secs",
        "an approval nobody decides within this is declined (default 600)",
    ),
    (
        "metrics_listen",
        "address:port of a separate listener serving /metrics (and the health probes) without a token, \
         e.g. 127.0.0.1:9464 (unset: /metrics only on listen, with the admin Bearer token)",
    ),
    (
        "trusted_proxies",
        "addresses or CIDR networks of the reverse proxies whose X-Forwarded-For and \
         X-Forwarded-Proto are believed, e.g. [\"127.0.0.1\", \"::1\"] (a TOML array, or a JSON \
         array or comma-separated list in the environment; default none: the peer address counts)",
    ),
    (
        "approval_policy",
        "when Codex asks before acting: never, on-request, on-failure or untrusted (default never)",
    ),
    (
        "sandbox",
        "what Codex's commands may touch: read-only, workspace-write or danger-full-access \
         (default danger-full-access)",
    ),
    (
        "receipt_mode",
        "how a queued task is acknowledged: comment or reaction (an eyes reaction on the \
         triggering comment) (default comment)",
    ),
    (
        "trigger_permission",
        "the least repository permission a commenter needs to trigger work: read, write or admin \
         (default write)",
    ),
    (
        "trigger_allow",
        "logins that may trigger work whatever their permission (a list; JSON array in the environment)",
    ),
    (
        "trigger_deny",
        "logins that may never trigger work (a list; JSON array in the environment)",
    ),
    (
        "repositories",
        "per-repository overrides of approval_policy, sandbox and turn_timeout_secs: a table keyed \
         by owner/name (a JSON object in the environment)",
    ),
];

const SECRET_KEYS: &[&str] = &["webhook_secret", "gitea_token", "admin_token"];

/// A configuration problem, naming the key and what to do.
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
}

fn invalid(key: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        env: env_name(key),
        problem: problem.into(),
    }
}

/// `webhook_secret` → `CODEX_BRIDGE_WEBHOOK_SECRET`.
pub fn env_name(key: &str) -> String {
    format!("CODEX_BRIDGE_{}", key.to_ascii_uppercase())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Plain,
    Json,
}

/// The validated configuration.
#[derive(Clone)]
pub struct Config {
    pub listen: String,
    pub database_url: DbUrl,
    pub webhook_secret: Option<SecretString>,
    pub bot_login: String,
    pub instance_id: String,
    pub gitea_url: Option<String>,
    pub gitea_token: Option<SecretString>,
    pub admin_token: Option<SecretString>,
    pub workspace_root: PathBuf,
    pub state_dir: PathBuf,
    pub max_body_bytes: usize,
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
    pub receipt_mode: crate::gitea::receipts::ReceiptMode,
    pub trigger_policy: crate::gitea::TriggerPolicy,
    pub lease_heartbeat_secs: u64,
    pub session_idle_secs: u64,
    pub retry_backoff_secs: u64,
    pub max_attempts: i64,
    pub scheduler_sweep_ms: u64,
    /// A separate listener for `/metrics` without a token (`None`: main listener only).
    pub metrics_listen: Option<String>,
    /// Proxies whose forwarded headers are believed (see `web::client`).
    pub trusted_proxies: TrustedProxies,
}

/// Which agent runtime runs the turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentRuntimeKind {
    /// Intake only: webhooks are stored, nothing runs.
    None,
    /// The Codex app-server.
    Codex,
    /// Plays directives from the instruction text; no model. For tests.
    Scripted,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |s: &Option<SecretString>| if s.is_some() { "<set>" } else { "<unset>" };
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("database_url", &self.database_url.redacted())
            .field("webhook_secret", &set(&self.webhook_secret))
            .field("bot_login", &self.bot_login)
            .field("instance_id", &self.instance_id)
            .field("gitea_url", &self.gitea_url)
            .field("gitea_token", &set(&self.gitea_token))
            .field("admin_token", &set(&self.admin_token))
            .field("workspace_root", &self.workspace_root)
            .field("state_dir", &self.state_dir)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

/// The secrets the server cannot run without, resolved by [`Config::server_secrets`].
#[derive(Clone)]
pub struct ServerSecrets {
    pub webhook_secret: SecretString,
    pub admin_token: SecretString,
    /// Where generated secrets were written, if any were.
    pub generated_file: Option<PathBuf>,
}

impl Config {
    /// Reads `path` (if given) and the environment, and validates everything.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let env: BTreeMap<String, String> = std::env::vars().collect();
        Self::from_sources(path, &env)
    }

    /// Like [`Config::load`] with an explicit environment (for tests).
    pub fn from_sources(
        path: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<Config, ConfigError> {
        let mut values: BTreeMap<&'static str, String> = BTreeMap::new();
        if let Some(path) = path {
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
                path: path.display().to_string(),
                problem: format!("cannot read it: {e}"),
            })?;
            let table: toml::Table =
                text.parse()
                    .map_err(|e: toml::de::Error| ConfigError::File {
                        path: path.display().to_string(),
                        problem: format!("not valid TOML: {}", e.message()),
                    })?;
            for (k, v) in table {
                let Some((key, _)) = KEYS.iter().find(|(name, _)| *name == k) else {
                    return Err(ConfigError::File {
                        path: path.display().to_string(),
                        problem: format!("unknown key `{k}` (known keys: {})", key_list()),
                    });
                };
                let value = match v {
                    toml::Value::String(s) => s,
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Boolean(b) => b.to_string(),
                    // Tables (repositories) travel as JSON text, as in the environment.
                    toml::Value::Table(t) => serde_json::to_string(&t).unwrap_or_default(),
                    // Arrays (gitea_mcp_args) travel as JSON text, as in the environment.
                    toml::Value::Array(items) => serde_json::to_string(
                        &items
                            .iter()
                            .map(|i| {
                                i.as_str()
                                    .map(str::to_owned)
                                    .unwrap_or_else(|| i.to_string())
                            })
                            .collect::<Vec<_>>(),
                    )
                    .unwrap_or_default(),
                    other => {
                        return Err(invalid(
                            key,
                            format!("expected a string or a number, found {}", other.type_str()),
                        ))
                    }
                };
                values.insert(key, value);
            }
        }
        for (key, _) in KEYS {
            if let Some(v) = env.get(&env_name(key)) {
                values.insert(key, v.clone());
            }
        }
        Self::validate(values)
    }

    fn validate(mut v: BTreeMap<&'static str, String>) -> Result<Config, ConfigError> {
        let mut take = |key: &'static str| {
            v.remove(key)
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        };

        let listen = take("listen").unwrap_or_else(|| "127.0.0.1:8080".into());
        {
            use std::net::ToSocketAddrs;
            let ok = listen
                .to_socket_addrs()
                .map(|mut a| a.next().is_some())
                .unwrap_or(false);
            if !ok {
                return Err(invalid(
                    "listen",
                    format!("`{listen}` is not an address:port, e.g. 127.0.0.1:8080"),
                ));
            }
        }
        let database_url = DbUrl::parse(
            &take("database_url").unwrap_or_else(|| "sqlite://./data/codex-bridge.db".into()),
        )
        .map_err(|p| invalid("database_url", p))?;

        let webhook_secret = take("webhook_secret").map(SecretString::from);
        if let Some(s) = &webhook_secret {
            check_secret("webhook_secret", s)?;
        }
        let admin_token = take("admin_token").map(SecretString::from);
        if let Some(s) = &admin_token {
            check_secret("admin_token", s)?;
        }
        let gitea_token = take("gitea_token").map(SecretString::from);

        let bot_login = take("bot_login").unwrap_or_else(|| "codex-bot".into());
        if !is_gitea_name(&bot_login) {
            return Err(invalid(
                "bot_login",
                "a Gitea login uses only letters, digits, '-', '_' and '.'",
            ));
        }
        let instance_id = take("instance_id").unwrap_or_else(|| "default".into());
        let instance_ok = instance_id.len() <= 64
            && instance_id
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && instance_id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !instance_ok {
            return Err(invalid(
                "instance_id",
                "use at most 64 lower-case letters, digits, '-' and '_' (it is part of every key)",
            ));
        }
        let gitea_url = match take("gitea_url") {
            Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                Some(u.trim_end_matches('/').to_owned())
            }
            Some(_) => return Err(invalid("gitea_url", "expected an http:// or https:// URL")),
            None => None,
        };
        let state_dir = PathBuf::from(take("state_dir").unwrap_or_else(|| "./data".into()));
        let workspace_root =
            PathBuf::from(take("workspace_root").unwrap_or_else(|| "./data/workspaces".into()));
        let max_body_bytes = parse_num(
            "max_body_bytes",
            take("max_body_bytes"),
            1024 * 1024,
            1024,
            64 * 1024 * 1024,
        )?;
        let log_format = match take("log_format").as_deref() {
            None | Some("plain") => LogFormat::Plain,
            Some("json") => LogFormat::Json,
            Some(_) => return Err(invalid("log_format", "expected plain or json")),
        };
        let log_filter = take("log_filter").unwrap_or_else(|| "info".into());
        if tracing_subscriber::EnvFilter::try_new(&log_filter).is_err() {
            return Err(invalid(
                "log_filter",
                "not a tracing filter, e.g. info or codex_bridge=debug,info",
            ));
        }
        let writer_batch_max =
            parse_num("writer_batch_max", take("writer_batch_max"), 256, 1, 10_000)?;
        // PostgreSQL: 4 writers, but no more than the cores: on 2 cores, 4
        // writers made smaller batches and more commits than 2 (ingest bench,
        // fsync on: 4 → 4.7k/s p99 32 ms, 2 → 5.8k/s p99 24 ms, 1 → 3.1k/s).
        let default_threads = if database_url.is_sqlite() {
            1
        } else {
            std::thread::available_parallelism().map_or(4, |n| n.get().clamp(1, 4))
        };
        let writer_threads = parse_num(
            "writer_threads",
            take("writer_threads"),
            default_threads,
            1,
            64,
        )?;
        let read_pool_size = parse_num("read_pool_size", take("read_pool_size"), 8, 1, 256)? as u32;
        let sqlite_busy_timeout_ms = parse_num(
            "sqlite_busy_timeout_ms",
            take("sqlite_busy_timeout_ms"),
            5000,
            0,
            600_000,
        )? as u64;
        let agent_runtime = match take("agent_runtime").as_deref() {
            None | Some("none") => AgentRuntimeKind::None,
            Some("codex") => AgentRuntimeKind::Codex,
            Some("scripted") => AgentRuntimeKind::Scripted,
            Some(_) => return Err(invalid("agent_runtime", "expected none, codex or scripted")),
        };
        let codex_bin = PathBuf::from(take("codex_bin").unwrap_or_else(|| "codex".into()));
        let codex_home = take("codex_home")
            .map(PathBuf::from)
            .unwrap_or_else(|| state_dir.join("codex-home"));
        let codex_nice = parse_num("codex_nice", take("codex_nice"), 10, 0, 19)? as u8;
        let gitea_mcp_command = take("gitea_mcp_command");
        let gitea_mcp_args: Vec<String> = match take("gitea_mcp_args") {
            Some(text) => serde_json::from_str(&text).map_err(|_| {
                invalid(
                    "gitea_mcp_args",
                    "expected a JSON array of strings, e.g. [\"-t\", \"stdio\"]",
                )
            })?,
            None => Vec::new(),
        };
        let gitea_mcp_url_env = take("gitea_mcp_url_env").unwrap_or_else(|| "GITEA_HOST".into());
        let gitea_mcp_token_env =
            take("gitea_mcp_token_env").unwrap_or_else(|| "GITEA_ACCESS_TOKEN".into());
        let approval_timeout_secs = parse_num(
            "approval_timeout_secs",
            take("approval_timeout_secs"),
            600,
            1,
            604_800,
        )? as u64;
        let turn_timeout_secs = parse_num(
            "turn_timeout_secs",
            take("turn_timeout_secs"),
            1800,
            1,
            604_800,
        )? as u64;
        let default_policy = RepoPolicy {
            approval_policy: match take("approval_policy") {
                Some(p) => parse_approval_policy(&p).map_err(|e| invalid("approval_policy", e))?,
                None => "never".into(),
            },
            sandbox: match take("sandbox") {
                Some(p) => parse_sandbox(&p).map_err(|e| invalid("sandbox", e))?,
                None => "danger-full-access".into(),
            },
            turn_timeout: Duration::from_secs(turn_timeout_secs),
        };
        let repositories = match take("repositories") {
            Some(text) => parse_repositories(&text, &default_policy)
                .map_err(|e| invalid("repositories", e))?,
            None => BTreeMap::new(),
        };
        let receipt_mode = match take("receipt_mode").as_deref() {
            None | Some("comment") => crate::gitea::receipts::ReceiptMode::Comment,
            Some("reaction") => crate::gitea::receipts::ReceiptMode::Reaction,
            Some(_) => return Err(invalid("receipt_mode", "expected comment or reaction")),
        };
        let min = match take("trigger_permission").as_deref() {
            None | Some("write") => crate::gitea::Permission::Write,
            Some("read") => crate::gitea::Permission::Read,
            Some("admin") => crate::gitea::Permission::Admin,
            Some(_) => {
                return Err(invalid(
                    "trigger_permission",
                    "expected read, write or admin",
                ))
            }
        };
        let logins = |key: &'static str,
                      text: Option<String>|
         -> Result<std::collections::BTreeSet<String>, ConfigError> {
            let Some(text) = text else {
                return Ok(Default::default());
            };
            let list: Vec<String> = serde_json::from_str(&text).map_err(|_| {
                invalid(
                    key,
                    "expected a list of Gitea logins, e.g. [\"alice\", \"bob\"]",
                )
            })?;
            list.into_iter()
                .map(|l| {
                    if is_gitea_name(&l) {
                        Ok(l.to_ascii_lowercase())
                    } else {
                        Err(invalid(key, format!("`{l}` is not a Gitea login")))
                    }
                })
                .collect()
        };
        let trigger_policy = crate::gitea::TriggerPolicy {
            min,
            allow: logins("trigger_allow", take("trigger_allow"))?,
            deny: logins("trigger_deny", take("trigger_deny"))?,
        };
        let lease_ttl_secs =
            parse_num("lease_ttl_secs", take("lease_ttl_secs"), 60, 1, 86_400)? as u64;
        let lease_heartbeat_secs = parse_num(
            "lease_heartbeat_secs",
            take("lease_heartbeat_secs"),
            15,
            1,
            86_400,
        )? as u64;
        if lease_heartbeat_secs >= lease_ttl_secs {
            return Err(invalid(
                "lease_heartbeat_secs",
                "must be shorter than lease_ttl_secs, or leases expire between renewals",
            ));
        }
        let session_idle_secs = parse_num(
            "session_idle_secs",
            take("session_idle_secs"),
            600,
            1,
            604_800,
        )? as u64;
        let retry_backoff_secs = parse_num(
            "retry_backoff_secs",
            take("retry_backoff_secs"),
            30,
            0,
            86_400,
        )? as u64;
        let max_attempts = parse_num("max_attempts", take("max_attempts"), 2, 1, 10)? as i64;
        let scheduler_sweep_ms = parse_num(
            "scheduler_sweep_ms",
            take("scheduler_sweep_ms"),
            5000,
            10,
            600_000,
        )? as u64;

        let metrics_listen = take("metrics_listen");
        if let Some(addr) = &metrics_listen {
            check_listen("metrics_listen", addr)?;
        }
        let trusted_proxies = match take("trusted_proxies") {
            Some(text) => {
                TrustedProxies::parse(&text).map_err(|p| invalid("trusted_proxies", p))?
            }
            None => TrustedProxies::default(),
        };

        // Every documented key must be read above: one that is accepted but
        // ignored would silently do nothing for the operator who set it.
        if let Some(key) = v.keys().next() {
            return Err(invalid(
                key,
                "is documented but not read by this build; this is a bug, please report it",
            ));
        }

        Ok(Config {
            listen,
            database_url,
            webhook_secret,
            bot_login,
            instance_id,
            gitea_url,
            gitea_token,
            admin_token,
            workspace_root,
            state_dir,
            max_body_bytes,
            log_format,
            log_filter,
            writer_batch_max,
            writer_threads,
            read_pool_size,
            sqlite_busy_timeout_ms,
            agent_runtime,
            codex_bin,
            codex_home,
            codex_nice,
            gitea_mcp_command,
            gitea_mcp_args,
            gitea_mcp_url_env,
            gitea_mcp_token_env,
            lease_ttl_secs,
            turn_timeout_secs,
            approval_timeout_secs,
            default_policy,
            repositories,
            receipt_mode,
            trigger_policy,
            lease_heartbeat_secs,
            session_idle_secs,
            retry_backoff_secs,
            max_attempts,
            scheduler_sweep_ms,
            metrics_listen,
            trusted_proxies,
        })
    }

    /// Timings of the actor tree.
    pub fn actor_settings(&self) -> crate::actors::ActorSettings {
        let mut s = crate::actors::ActorSettings::new(&self.instance_id);
        s.lease_ttl = Duration::from_secs(self.lease_ttl_secs);
        s.heartbeat = Duration::from_secs(self.lease_heartbeat_secs);
        s.session_idle = Duration::from_secs(self.session_idle_secs);
        s.retry_backoff = Duration::from_secs(self.retry_backoff_secs);
        s.max_attempts = self.max_attempts;
        s.sweep = Duration::from_millis(self.scheduler_sweep_ms);
        s.turn_timeout = Duration::from_secs(self.turn_timeout_secs);
        s.approval_timeout = Duration::from_secs(self.approval_timeout_secs);
        s.turn_timeout = self.default_policy.turn_timeout;
        s.approval_policy = self.default_policy.approval_policy.clone();
        s.sandbox = self.default_policy.sandbox.clone();
        s.repositories = std::sync::Arc::new(self.repositories.clone());
        s.bot_login = self.bot_login.clone();
        s
    }

    pub fn store_settings(&self) -> StoreSettings {
        StoreSettings {
            url: self.database_url.clone(),
            read_pool_size: self.read_pool_size,
            sqlite_busy_timeout: Duration::from_millis(self.sqlite_busy_timeout_ms),
            writer: WriterSettings {
                batch_max: self.writer_batch_max,
                threads: self.writer_threads,
                queue_capacity: 16_384,
            },
        }
    }

    /// The webhook secret and admin token. When either is not configured, it is
    /// generated once into `state_dir/generated-secrets.toml` (mode 0600) and
    /// reused on later starts, so a fresh `serve` works and says where to look.
    pub fn server_secrets(&self) -> Result<ServerSecrets, ConfigError> {
        if let (Some(w), Some(a)) = (&self.webhook_secret, &self.admin_token) {
            return Ok(ServerSecrets {
                webhook_secret: w.clone(),
                admin_token: a.clone(),
                generated_file: None,
            });
        }
        let file = self.state_dir.join("generated-secrets.toml");
        let mut stored: toml::Table = match std::fs::read_to_string(&file) {
            Ok(text) => text
                .parse()
                .map_err(|e: toml::de::Error| ConfigError::File {
                    path: file.display().to_string(),
                    problem: format!(
                        "not valid TOML: {} (delete it to generate new secrets)",
                        e.message()
                    ),
                })?,
            Err(_) => toml::Table::new(),
        };
        let mut changed = false;
        let mut resolve = |key: &'static str, configured: &Option<SecretString>| -> SecretString {
            if let Some(s) = configured {
                return s.clone();
            }
            if let Some(toml::Value::String(s)) = stored.get(key) {
                return SecretString::from(s.clone());
            }
            let fresh = format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            stored.insert(key.to_owned(), toml::Value::String(fresh.clone()));
            changed = true;
            SecretString::from(fresh)
        };
        let webhook_secret = resolve("webhook_secret", &self.webhook_secret);
        let admin_token = resolve("admin_token", &self.admin_token);
        if changed {
            write_private(&file, &stored.to_string()).map_err(|e| ConfigError::File {
                path: file.display().to_string(),
                problem: format!("cannot write generated secrets: {e}; set webhook_secret and admin_token instead"),
            })?;
        }
        Ok(ServerSecrets {
            webhook_secret,
            admin_token,
            generated_file: Some(file),
        })
    }
}

fn check_listen(key: &'static str, addr: &str) -> Result<(), ConfigError> {
    use std::net::ToSocketAddrs;
    let ok = addr
        .to_socket_addrs()
        .map(|mut a| a.next().is_some())
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(invalid(
            key,
            format!("`{addr}` is not an address:port, e.g. 127.0.0.1:9464"),
        ))
    }
}

/// An address or network (`10.0.0.0/8`, `fd00::/8`, `127.0.0.1`) of `trusted_proxies`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: std::net::IpAddr,
    prefix: u8,
}

impl IpNet {
    pub fn parse(text: &str) -> Result<IpNet, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: std::net::IpAddr = addr
            .parse()
            .map_err(|_| format!("`{text}` is not an IP address or network (e.g. 10.0.0.0/8)"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("`{text}`: the prefix length must be 0..={max}"))?,
        };
        Ok(IpNet {
            addr: addr.to_canonical(),
            prefix,
        })
    }

    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr::{V4, V6};
        match (self.addr, ip.to_canonical()) {
            (V4(net), V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (V6(net), V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// The reverse proxies whose `X-Forwarded-*` headers the server believes.
/// Empty (the default): none, every request's client is its TCP peer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// A JSON array (`["127.0.0.1", "10.0.0.0/8"]`, as a TOML array arrives) or
    /// a comma-separated list.
    pub fn parse(text: &str) -> Result<TrustedProxies, String> {
        let items: Vec<String> = if text.trim_start().starts_with('[') {
            serde_json::from_str(text).map_err(|_| {
                "expected an array of addresses or networks, e.g. [\"127.0.0.1\", \"10.0.0.0/8\"]"
                    .to_owned()
            })?
        } else {
            text.split(',').map(str::to_owned).collect()
        };
        items
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| IpNet::parse(s))
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(ip))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn key_list() -> String {
    KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
}

fn check_secret(key: &'static str, s: &SecretString) -> Result<(), ConfigError> {
    debug_assert!(SECRET_KEYS.contains(&key));
    if s.expose_secret().len() < 16 {
        return Err(invalid(
            key,
            "too short: use at least 16 characters (e.g. `openssl rand -hex 32`)",
        ));
    }
    Ok(())
}

/// How Codex works in one repository: the thread's approval
/// policy and sandbox, and the turn deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoPolicy {
    pub approval_policy: String,
    pub sandbox: String,
    pub turn_timeout: Duration,
}

fn parse_approval_policy(p: &str) -> Result<String, String> {
    match p {
        "never" | "on-request" | "on-failure" | "untrusted" => Ok(p.to_owned()),
        _ => Err(format!(
            "`{p}` is not an approval policy; expected never, on-request, on-failure or untrusted"
        )),
    }
}

fn parse_sandbox(p: &str) -> Result<String, String> {
    match p {
        "read-only" | "workspace-write" | "danger-full-access" => Ok(p.to_owned()),
        _ => Err(format!(
            "`{p}` is not a sandbox mode; expected read-only, workspace-write or danger-full-access"
        )),
    }
}

/// `{"owner/name": {"approval_policy"?, "sandbox"?, "turn_timeout_secs"?}}`;
/// what an entry leaves out comes from the global keys.
fn parse_repositories(
    text: &str,
    default: &RepoPolicy,
) -> Result<BTreeMap<String, RepoPolicy>, String> {
    let table: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|_| {
            "expected a table keyed by owner/name, e.g. [repositories.\"acme/app\"] with \
             approval_policy = \"untrusted\""
                .to_owned()
        })?;
    let mut out = BTreeMap::new();
    for (repo, entry) in table {
        let valid_name = repo
            .split_once('/')
            .is_some_and(|(o, n)| is_gitea_name(o) && is_gitea_name(n) && n != ".." && o != "..");
        if !valid_name {
            return Err(format!("`{repo}` is not owner/name"));
        }
        let serde_json::Value::Object(fields) = entry else {
            return Err(format!("`{repo}`: expected a table"));
        };
        let mut policy = default.clone();
        for (k, v) in fields {
            match (k.as_str(), &v) {
                ("approval_policy", serde_json::Value::String(p)) => {
                    policy.approval_policy = parse_approval_policy(p).map_err(|e| format!("`{repo}`: {e}"))?;
                }
                ("sandbox", serde_json::Value::String(p)) => {
                    policy.sandbox = parse_sandbox(p).map_err(|e| format!("`{repo}`: {e}"))?;
                }
                ("turn_timeout_secs", v) => {
                    let secs = v
                        .as_u64()
                        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                        .filter(|s| (1..=604_800).contains(s))
                        .ok_or_else(|| {
                            format!("`{repo}`: turn_timeout_secs must be a number of seconds from 1 to 604800")
                        })?;
                    policy.turn_timeout = Duration::from_secs(secs);
                }
                (other, _) => {
                    return Err(format!(
                        "`{repo}`: unknown or mistyped key `{other}` (known: approval_policy, sandbox, \
                         turn_timeout_secs)"
                    ))
                }
            }
        }
        out.insert(repo.to_ascii_lowercase(), policy);
    }
    Ok(out)
}

fn parse_num(
    key: &'static str,
    value: Option<String>,
    default: usize,
    min: usize,
    max: usize,
) -> Result<usize, ConfigError> {
    let Some(text) = value else {
        return Ok(default);
    };
    let n: usize = text
        .parse()
        .map_err(|_| invalid(key, format!("`{text}` is not a whole number")))?;
    if n < min || n > max {
        return Err(invalid(key, format!("{n} is out of range {min}..={max}")));
    }
    Ok(n)
}

/// Gitea's user/org/repo name alphabet.
pub fn is_gitea_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert_eq!(c.listen, "127.0.0.1:8080");
        assert_eq!(
            c.database_url,
            DbUrl::Sqlite(PathBuf::from("./data/codex-bridge.db"))
        );
        assert_eq!(c.instance_id, "default");
        assert_eq!(c.max_body_bytes, 1024 * 1024);
        assert_eq!(c.writer_threads, 1);
        let pg = Config::from_sources(
            None,
            &env(&[("CODEX_BRIDGE_DATABASE_URL", "postgres://u@localhost/db")]),
        )
        .unwrap();
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        assert_eq!(pg.writer_threads, cores.clamp(1, 4));
    }

    #[test]
    fn environment_overrides_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9000\"\nmax_body_bytes = 2048\nbot_login = \"ccbot\"\n",
        )
        .unwrap();
        let c = Config::from_sources(
            Some(&path),
            &env(&[("CODEX_BRIDGE_LISTEN", "127.0.0.1:9001")]),
        )
        .unwrap();
        assert_eq!(c.listen, "127.0.0.1:9001");
        assert_eq!(c.max_body_bytes, 2048);
        assert_eq!(c.bot_login, "ccbot");
    }

    #[test]
    fn errors_name_the_key_and_never_echo_secrets() {
        let err = Config::from_sources(
            None,
            &env(&[("CODEX_BRIDGE_WEBHOOK_SECRET", "short-sekrit")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("webhook_secret"), "{err}");
        assert!(err.contains("CODEX_BRIDGE_WEBHOOK_SECRET"), "{err}");
        assert!(!err.contains("short-sekrit"), "{err}");

        let err = Config::from_sources(None, &env(&[("CODEX_BRIDGE_MAX_BODY_BYTES", "lots")]))
            .unwrap_err();
        assert!(err.to_string().contains("max_body_bytes"));
        let err =
            Config::from_sources(None, &env(&[("CODEX_BRIDGE_LISTEN", "nowhere")])).unwrap_err();
        assert!(err.to_string().contains("listen"));
        let err = Config::from_sources(None, &env(&[("CODEX_BRIDGE_DATABASE_URL", "mysql://x")]))
            .unwrap_err();
        assert!(err.to_string().contains("database_url"));
        let err =
            Config::from_sources(None, &env(&[("CODEX_BRIDGE_INSTANCE_ID", "a:b")])).unwrap_err();
        assert!(err.to_string().contains("instance_id"));
    }

    #[test]
    fn every_documented_key_is_read_from_the_environment() {
        let set = env(&[
            ("CODEX_BRIDGE_AGENT_RUNTIME", "scripted"),
            ("CODEX_BRIDGE_LEASE_TTL_SECS", "9"),
            ("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "3"),
            ("CODEX_BRIDGE_SESSION_IDLE_SECS", "7"),
            ("CODEX_BRIDGE_RETRY_BACKOFF_SECS", "4"),
            ("CODEX_BRIDGE_MAX_ATTEMPTS", "3"),
            ("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "150"),
        ]);
        for key in set.keys() {
            let name = key.trim_start_matches("CODEX_BRIDGE_").to_ascii_lowercase();
            assert!(
                KEYS.iter().any(|(k, _)| *k == name),
                "{name} is not documented in KEYS"
            );
        }
        let c = Config::from_sources(None, &set).unwrap();
        assert_eq!(c.agent_runtime, AgentRuntimeKind::Scripted);
        assert_eq!((c.lease_ttl_secs, c.lease_heartbeat_secs), (9, 3));
        assert_eq!(
            (c.session_idle_secs, c.retry_backoff_secs, c.max_attempts),
            (7, 4, 3)
        );
        assert_eq!(c.scheduler_sweep_ms, 150);
        let err = Config::from_sources(
            None,
            &env(&[
                ("CODEX_BRIDGE_LEASE_TTL_SECS", "5"),
                ("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "5"),
            ]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("lease_heartbeat_secs"));
    }

    #[test]
    fn the_example_config_in_deploy_is_valid_and_sets_every_key() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/codex-bridge.example.toml");
        let c = Config::from_sources(Some(&path), &env(&[])).unwrap();
        assert_eq!(c.agent_runtime, AgentRuntimeKind::Codex);
        assert_eq!(c.gitea_mcp_args, vec!["-t".to_owned(), "stdio".to_owned()]);
        let text = std::fs::read_to_string(&path).unwrap();
        for (key, _) in KEYS {
            assert!(
                text.contains(&format!("{key} =")),
                "deploy example lacks `{key}`"
            );
        }
    }

    #[test]
    fn trusted_proxies_parse_addresses_and_networks() {
        let p = TrustedProxies::parse(r#"["127.0.0.1", "10.0.0.0/8", "fd00::/8"]"#).unwrap();
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert!(p.contains(ip("127.0.0.1")));
        assert!(p.contains(ip("::ffff:127.0.0.1")), "v4-mapped peers match");
        assert!(!p.contains(ip("127.0.0.2")));
        assert!(p.contains(ip("10.200.3.4")));
        assert!(!p.contains(ip("11.0.0.1")));
        assert!(p.contains(ip("fd12::1")));
        assert!(!p.contains(ip("fe80::1")));
        let list = TrustedProxies::parse("192.168.0.0/16, ::1").unwrap();
        assert!(list.contains(ip("192.168.7.7")) && list.contains(ip("::1")));
        assert!(TrustedProxies::parse("0.0.0.0/0")
            .unwrap()
            .contains(ip("8.8.8.8")));
        for bad in ["10.0.0.0/33", "proxy.example.com", "[1]"] {
            assert!(TrustedProxies::parse(bad).is_err(), "{bad}");
        }
        let err = Config::from_sources(
            None,
            &env(&[("CODEX_BRIDGE_TRUSTED_PROXIES", "10.0.0.0/99")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("trusted_proxies"), "{err}");
        let err = Config::from_sources(None, &env(&[("CODEX_BRIDGE_METRICS_LISTEN", "nope")]))
            .unwrap_err();
        assert!(err.to_string().contains("metrics_listen"), "{err}");
        let c = Config::from_sources(None, &env(&[])).unwrap();
        assert!(c.trusted_proxies.is_empty() && c.metrics_listen.is_none());
    }

    #[test]
    fn repositories_override_the_thread_policy_per_repository() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "sandbox = \"workspace-write\"\nturn_timeout_secs = 100\n\
             [repositories.\"Acme/Payments\"]\napproval_policy = \"untrusted\"\n\
             turn_timeout_secs = 7\n",
        )
        .unwrap();
        let c = Config::from_sources(Some(&path), &env(&[])).unwrap();
        let s = c.actor_settings();
        let strict = s.policy_for("acme", "payments");
        assert_eq!(strict.approval_policy, "untrusted");
        // Left out of the entry: from the global keys.
        assert_eq!(strict.sandbox, "workspace-write");
        assert_eq!(strict.turn_timeout, Duration::from_secs(7));
        let other = s.policy_for("acme", "web");
        assert_eq!(other.approval_policy, "never");
        assert_eq!(other.sandbox, "workspace-write");
        assert_eq!(other.turn_timeout, Duration::from_secs(100));

        // The environment takes JSON and wins over the file.
        let c = Config::from_sources(
            Some(&path),
            &env(&[(
                "CODEX_BRIDGE_REPOSITORIES",
                r#"{"acme/web": {"sandbox": "read-only"}}"#,
            )]),
        )
        .unwrap();
        assert_eq!(
            c.actor_settings().policy_for("acme", "web").sandbox,
            "read-only"
        );
        assert_eq!(
            c.actor_settings()
                .policy_for("acme", "payments")
                .approval_policy,
            "never"
        );

        for (bad, names) in [
            (r#"{"acme/web": {"sandbox": "yolo"}}"#, "sandbox mode"),
            (
                r#"{"acme/web": {"approval": "never"}}"#,
                "unknown or mistyped key `approval`",
            ),
            (r#"{"../etc": {}}"#, "is not owner/name"),
            (
                r#"{"acme/web": {"turn_timeout_secs": 0}}"#,
                "turn_timeout_secs",
            ),
            ("[1, 2]", "table keyed by owner/name"),
        ] {
            let err = Config::from_sources(None, &env(&[("CODEX_BRIDGE_REPOSITORIES", bad)]))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("repositories") && err.contains(names),
                "{bad}: {err}"
            );
        }
        let err = Config::from_sources(None, &env(&[("CODEX_BRIDGE_APPROVAL_POLICY", "always")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("approval_policy"), "{err}");
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "lisen = \"127.0.0.1:9000\"\n").unwrap();
        let err = Config::from_sources(Some(&path), &env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown key `lisen`"), "{err}");
    }

    #[test]
    fn debug_output_hides_secrets() {
        let c = Config::from_sources(
            None,
            &env(&[
                ("CODEX_BRIDGE_WEBHOOK_SECRET", "0123456789abcdef-webhook"),
                ("CODEX_BRIDGE_DATABASE_URL", "postgres://u:pw-secret@h/db"),
            ]),
        )
        .unwrap();
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("0123456789abcdef-webhook"));
        assert!(!dbg.contains("pw-secret"));
    }

    #[test]
    fn missing_secrets_are_generated_once_and_kept_private() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let c = Config::from_sources(
            None,
            &env(&[("CODEX_BRIDGE_STATE_DIR", state.to_str().unwrap())]),
        )
        .unwrap();
        let first = c.server_secrets().unwrap();
        let second = c.server_secrets().unwrap();
        assert_eq!(
            first.webhook_secret.expose_secret(),
            second.webhook_secret.expose_secret()
        );
        assert_eq!(
            first.admin_token.expose_secret(),
            second.admin_token.expose_secret()
        );
        assert!(first.webhook_secret.expose_secret().len() >= 32);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(first.generated_file.unwrap())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(
                mode & 0o077,
                0,
                "generated secrets must not be readable by others"
            );
        }
    }
}
