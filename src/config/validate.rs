//! The one step from what the layers say ([`Raw`]) to what the server runs
//! with ([`Config`]): defaults, ranges, addresses, names, policies and the
//! rules between keys. Every error names its key and never quotes a secret.

use super::database::DatabaseUrl;
use super::proxies::TrustedProxies;
use super::raw::{Raw, RawRepo, TIMEOUT};
use super::{
    invalid, AgentRuntimeKind, Config, ConfigError, LogFormat, ReceiptMode, TriggerPermission,
};
use crate::domain::keys::is_gitea_name;
use crate::domain::policy::{ApprovalPolicy, RepoPolicy, Sandbox};
use secrecy::{ExposeSecret, SecretString};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

pub(super) fn validate(raw: Raw) -> Result<Config, ConfigError> {
    let listen = raw.listen.unwrap_or_else(|| "127.0.0.1:8080".into());
    check_listen("listen", &listen, "127.0.0.1:8080")?;
    let database_url = DatabaseUrl::parse(
        &raw.database_url
            .unwrap_or_else(|| "sqlite://./data/codex-bridge.db".into()),
    )
    .map_err(|p| invalid("database_url", p))?;

    let webhook_secret = checked_secret(SecretKey::WebhookSecret, raw.webhook_secret)?;
    let admin_token = checked_secret(SecretKey::AdminToken, raw.admin_token)?;
    let gitea_token = checked_secret(SecretKey::GiteaToken, raw.gitea_token)?;
    let gitea_mcp_token = checked_secret(SecretKey::GiteaMcpToken, raw.gitea_mcp_token)?;

    let bot_login = raw.bot_login.unwrap_or_else(|| "codex-bot".into());
    if !is_gitea_name(&bot_login) {
        return Err(invalid(
            "bot_login",
            "a Gitea login uses only letters, digits, '-', '_' and '.'",
        ));
    }
    let instance_id = raw.instance_id.unwrap_or_else(|| "default".into());
    if !is_instance_id(&instance_id) {
        return Err(invalid(
            "instance_id",
            "use at most 64 lower-case letters, digits, '-' and '_' (it is part of every key)",
        ));
    }
    let gitea_url = match raw.gitea_url {
        Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
            Some(u.trim_end_matches('/').to_owned())
        }
        Some(_) => return Err(invalid("gitea_url", "expected an http:// or https:// URL")),
        None => None,
    };
    let state_dir = PathBuf::from(raw.state_dir.unwrap_or_else(|| "./data".into()));
    let workspace_root = PathBuf::from(
        raw.workspace_root
            .unwrap_or_else(|| "./data/workspaces".into()),
    );
    let max_body_bytes = number(
        "max_body_bytes",
        raw.max_body_bytes,
        1024 * 1024,
        1024,
        64 * 1024 * 1024,
    )? as usize;
    let request_timeout = std::time::Duration::from_secs(number(
        "request_timeout_secs",
        raw.request_timeout_secs,
        30,
        1,
        3600,
    )?);
    let max_connections =
        number("max_connections", raw.max_connections, 1024, 1, 1_000_000)? as usize;
    let drain_timeout = std::time::Duration::from_secs(number(
        "drain_timeout_secs",
        raw.drain_timeout_secs,
        600,
        0,
        86_400,
    )?);
    let breaker_failures = number("breaker_failures", raw.breaker_failures, 5, 0, 1_000)? as u32;
    let breaker_open_secs = number("breaker_open_secs", raw.breaker_open_secs, 30, 1, 900)?;
    let session_turns_per_minute = number(
        "session_turns_per_minute",
        raw.session_turns_per_minute,
        6,
        0,
        10_000,
    )? as i64;
    let log_format = word("log_format", raw.log_format, LogFormat::Plain)?;
    let log_filter = raw.log_filter.unwrap_or_else(|| "info".into());
    if tracing_subscriber::EnvFilter::try_new(&log_filter).is_err() {
        return Err(invalid(
            "log_filter",
            "not a tracing filter, e.g. info or codex_bridge=debug,info",
        ));
    }
    let writer_batch_max =
        number("writer_batch_max", raw.writer_batch_max, 256, 1, 10_000)? as usize;
    // PostgreSQL: 4 writers, but no more than the cores: on 2 cores, 4
    // writers made smaller batches and more commits than 2 (ingest bench,
    // fsync on: 4 → 4.7k/s p99 32 ms, 2 → 5.8k/s p99 24 ms, 1 → 3.1k/s).
    let default_threads = if database_url.is_sqlite() {
        1
    } else {
        std::thread::available_parallelism().map_or(4, |n| n.get().clamp(1, 4)) as u64
    };
    let writer_threads =
        number("writer_threads", raw.writer_threads, default_threads, 1, 64)? as usize;
    let read_pool_size = number("read_pool_size", raw.read_pool_size, 8, 1, 256)? as u32;
    let sqlite_busy_timeout_ms = number(
        "sqlite_busy_timeout_ms",
        raw.sqlite_busy_timeout_ms,
        5000,
        0,
        600_000,
    )?;
    let agent_runtime = word("agent_runtime", raw.agent_runtime, AgentRuntimeKind::Codex)?;
    let codex_bin = PathBuf::from(raw.codex_bin.unwrap_or_else(|| "codex".into()));
    let codex_home = raw
        .codex_home
        .map(PathBuf::from)
        .unwrap_or_else(|| state_dir.join("codex-home"));
    let codex_nice = number("codex_nice", raw.codex_nice, 10, 0, 19)? as u8;
    let gitea_mcp_url_env = raw.gitea_mcp_url_env.unwrap_or_else(|| "GITEA_HOST".into());
    let gitea_mcp_token_env = raw
        .gitea_mcp_token_env
        .unwrap_or_else(|| "GITEA_ACCESS_TOKEN".into());
    let approval_timeout_secs = number(
        "approval_timeout_secs",
        raw.approval_timeout_secs,
        600,
        1,
        604_800,
    )?;
    let turn_timeout_secs = number("turn_timeout_secs", raw.turn_timeout_secs, 1800, 1, 604_800)?;
    let default_policy = RepoPolicy {
        approval_policy: word(
            "approval_policy",
            raw.approval_policy,
            ApprovalPolicy::Never,
        )?,
        sandbox: word("sandbox", raw.sandbox, Sandbox::DangerFullAccess)?,
        turn_timeout: Duration::from_secs(turn_timeout_secs),
    };
    let repositories = match raw.repositories {
        Some(table) => {
            repositories(table, &default_policy).map_err(|e| invalid("repositories", e))?
        }
        None => BTreeMap::new(),
    };
    let receipt_mode = word("receipt_mode", raw.receipt_mode, ReceiptMode::Comment)?;
    let trigger_permission = word(
        "trigger_permission",
        raw.trigger_permission,
        TriggerPermission::Write,
    )?;
    let gate_permission = word(
        "gate_permission",
        raw.gate_permission,
        TriggerPermission::Admin,
    )?;
    let trigger_allow = logins("trigger_allow", raw.trigger_allow)?;
    let trigger_deny = logins("trigger_deny", raw.trigger_deny)?;
    let ignore_logins = logins("ignore_logins", raw.ignore_logins)?;
    let lease_ttl_secs = number("lease_ttl_secs", raw.lease_ttl_secs, 60, 1, 86_400)?;
    let lease_heartbeat_secs = number(
        "lease_heartbeat_secs",
        raw.lease_heartbeat_secs,
        15,
        1,
        86_400,
    )?;
    if lease_heartbeat_secs >= lease_ttl_secs {
        return Err(invalid(
            "lease_heartbeat_secs",
            "must be shorter than lease_ttl_secs, or leases expire between renewals",
        ));
    }
    let session_idle_secs = number("session_idle_secs", raw.session_idle_secs, 600, 1, 604_800)?;
    // A call waits at most an hour: longer, a session would sit on a
    // worker that is gone rather than find the turn in its history.
    let worker_call_timeout_secs = number(
        "worker_call_timeout_secs",
        raw.worker_call_timeout_secs,
        120,
        1,
        3600,
    )?;
    // At least 3 s: the worker renews at a third of it, once a second at
    // the most. At most an hour: past it a cut-off worker would keep its
    // repository, and the calls it took, from every other worker that long.
    let worker_lease_ttl_secs = number(
        "worker_lease_ttl_secs",
        raw.worker_lease_ttl_secs,
        30,
        3,
        3600,
    )?;
    let retry_backoff_secs = number("retry_backoff_secs", raw.retry_backoff_secs, 30, 0, 86_400)?;
    let max_attempts = number("max_attempts", raw.max_attempts, 2, 1, 10)? as i64;
    let prompt_context_bytes = number(
        "prompt_context_bytes",
        raw.prompt_context_bytes,
        65_536,
        0,
        1_048_576,
    )?;
    let continuation_backoff_secs = number(
        "continuation_backoff_secs",
        raw.continuation_backoff_secs,
        5,
        0,
        86_400,
    )?;
    let capacity_wait_secs = number("capacity_wait_secs", raw.capacity_wait_secs, 60, 0, 86_400)?;
    let max_parallel_turns_per_repo = number(
        "max_parallel_turns_per_repo",
        raw.max_parallel_turns_per_repo,
        1,
        1,
        64,
    )?;
    let worktree_retention_hours = number(
        "worktree_retention_hours",
        raw.worktree_retention_hours,
        168,
        0,
        87_600,
    )?;
    let delivery_retention_days = number(
        "delivery_retention_days",
        raw.delivery_retention_days,
        30,
        0,
        crate::domain::retention::MAX_RETENTION_DAYS,
    )?;
    let floor = crate::domain::retention::MIN_DELIVERY_RETENTION_DAYS;
    if (1..floor).contains(&delivery_retention_days) {
        return Err(invalid(
            "delivery_retention_days",
            format!(
                "{delivery_retention_days} is below {floor}: Gitea can replay a delivery for up to {floor} days \
                 (its hook tasks are cleaned 168 hours after delivery, at midnight), and a replay must still \
                 be found a duplicate; use 0 to keep deliveries"
            ),
        ));
    }
    let turn_event_retention_days = number(
        "turn_event_retention_days",
        raw.turn_event_retention_days,
        30,
        0,
        crate::domain::retention::MAX_RETENTION_DAYS,
    )?;
    let workflow_max_idle_finals = number(
        "workflow_max_idle_finals",
        raw.workflow_max_idle_finals,
        65,
        1,
        10_000,
    )? as i64;
    let max_children_per_workflow = number(
        "max_children_per_workflow",
        raw.max_children_per_workflow,
        2,
        0,
        64,
    )? as i64;
    let child_recovery_attempts = number(
        "child_recovery_attempts",
        raw.child_recovery_attempts,
        2,
        0,
        10,
    )? as i64;
    let limits = crate::domain::limits::Limits {
        max_turns_per_task: number("max_turns_per_task", raw.max_turns_per_task, 20, 1, 10_000)?
            as i64,
        max_turns_per_workflow: number(
            "max_turns_per_workflow",
            raw.max_turns_per_workflow,
            200,
            1,
            1_000_000,
        )? as i64,
        max_task_secs: number("max_task_secs", raw.max_task_secs, 7200, 1, 2_592_000)?,
        max_tokens_per_task: number(
            "max_tokens_per_task",
            raw.max_tokens_per_task,
            0,
            0,
            1_000_000_000_000,
        )? as i64,
        user_triggers_per_hour: number(
            "user_triggers_per_hour",
            raw.user_triggers_per_hour,
            30,
            0,
            1_000_000,
        )? as i64,
        repo_turns_per_day: number(
            "repo_turns_per_day",
            raw.repo_turns_per_day,
            0,
            0,
            1_000_000,
        )? as i64,
    };
    let scheduler_sweep_ms = number(
        "scheduler_sweep_ms",
        raw.scheduler_sweep_ms,
        5000,
        10,
        600_000,
    )?;
    let catchup_interval_secs = number(
        "catchup_interval_secs",
        raw.catchup_interval_secs,
        60,
        0,
        86_400,
    )?;
    if let Some(addr) = &raw.metrics_listen {
        check_listen("metrics_listen", addr, "127.0.0.1:9464")?;
    }
    let trusted_proxies = match raw.trusted_proxies {
        Some(entries) => {
            TrustedProxies::from_entries(&entries).map_err(|p| invalid("trusted_proxies", p))?
        }
        None => TrustedProxies::default(),
    };
    let public_url = raw.public_url.map(|u| public_url(&u)).transpose()?;
    let journal_path = match DatabaseUrl::parse(
        &raw.journal_url
            .unwrap_or_else(|| "sqlite://./data/worker-journal.db".into()),
    )
    .map_err(|p| invalid("journal_url", p))?
    {
        DatabaseUrl::Sqlite(path) => path,
        _ => {
            return Err(invalid(
                "journal_url",
                "the worker's journal is a local SQLite file: sqlite://PATH",
            ))
        }
    };

    Ok(Config {
        journal_path,
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
        request_timeout,
        max_connections,
        drain_timeout,
        breaker_failures,
        breaker_open_secs,
        session_turns_per_minute,
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
        gitea_mcp_command: raw.gitea_mcp_command,
        gitea_mcp_args: raw.gitea_mcp_args.unwrap_or_default(),
        gitea_mcp_url_env,
        gitea_mcp_token_env,
        lease_ttl_secs,
        turn_timeout_secs,
        approval_timeout_secs,
        default_policy,
        repositories,
        receipt_mode,
        trigger_permission,
        gate_permission,
        trigger_allow,
        trigger_deny,
        ignore_logins,
        lease_heartbeat_secs,
        session_idle_secs,
        worker_call_timeout_secs,
        worker_lease_ttl_secs,
        retry_backoff_secs,
        max_attempts,
        prompt_context_bytes,
        workflows: raw.workflows.unwrap_or(true),
        continuation_backoff_secs,
        capacity_wait_secs,
        workflow_max_idle_finals,
        max_children_per_workflow,
        child_recovery_attempts,
        worktree_retention_hours,
        delivery_retention_days,
        turn_event_retention_days,
        max_parallel_turns_per_repo,
        limits,
        scheduler_sweep_ms,
        catchup_interval_secs,
        metrics_listen: raw.metrics_listen,
        trusted_proxies,
        public_url,
        trust_fork_prs: raw.trust_fork_prs.unwrap_or(false),
        gitea_mcp_token,
    })
}

/// `public_url`: an absolute http(s) URL with a host and no query or
/// fragment (links are made by appending paths to it), kept without its
/// trailing `/`.
fn public_url(url: &str) -> Result<String, ConfigError> {
    let bad = |why: &str| {
        invalid(
            "public_url",
            format!(
                "{why}: expected the server's external base URL, e.g. https://bridge.example.com"
            ),
        )
    };
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| bad("not an http:// or https:// URL"))?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Err(bad("it names no host (or carries user information)"));
    }
    if url.contains(['?', '#']) || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("it has a query, a fragment or a space"));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// A whole number of `key` within `min..=max`, or `default` when unset.
fn number(
    key: &'static str,
    value: Option<u128>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let Some(n) = value else {
        return Ok(default);
    };
    match u64::try_from(n) {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(invalid(key, format!("{n} is out of range {min}..={max}"))),
    }
}

/// One of the words `T` accepts, or `default` when unset.
fn word<T: FromStr<Err = String>>(
    key: &'static str,
    value: Option<String>,
    default: T,
) -> Result<T, ConfigError> {
    match value {
        Some(text) => text.parse().map_err(|e| invalid(key, e)),
        None => Ok(default),
    }
}

fn check_listen(key: &'static str, addr: &str, example: &str) -> Result<(), ConfigError> {
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
            format!("`{addr}` is not an address:port, e.g. {example}"),
        ))
    }
}

fn is_instance_id(id: &str) -> bool {
    id.len() <= 64
        && id
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// The keys that hold secrets, and what their rules depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SecretKey {
    WebhookSecret,
    GiteaToken,
    AdminToken,
    GiteaMcpToken,
}

impl SecretKey {
    pub(super) fn key(self) -> &'static str {
        match self {
            SecretKey::WebhookSecret => "webhook_secret",
            SecretKey::GiteaToken => "gitea_token",
            SecretKey::AdminToken => "admin_token",
            SecretKey::GiteaMcpToken => "gitea_mcp_token",
        }
    }

    /// Ours to choose (generated when unset), so held to a length; the Gitea
    /// token is whatever Gitea issued.
    fn generated(self) -> bool {
        !matches!(self, SecretKey::GiteaToken | SecretKey::GiteaMcpToken)
    }

    /// Sent in an `Authorization` header, which cannot hold a line break.
    fn in_header(self) -> bool {
        self != SecretKey::WebhookSecret
    }

    /// Why `secret` cannot be what the operator meant: blank (a variable set
    /// from an empty file or a mistyped substitution, which must not fall back
    /// to a generated secret), split over lines where a header carries it, or
    /// too short to resist guessing. Never quotes the secret.
    pub(super) fn check(self, secret: &str) -> Result<(), String> {
        if secret.trim().is_empty() {
            return Err(if self.generated() {
                "is empty: leave the key out to have one generated into state_dir, or set at \
                 least 16 characters (e.g. `openssl rand -hex 32`)"
                    .to_owned()
            } else {
                match self {
                    SecretKey::GiteaMcpToken => "is empty: set the token the agent's Gitea MCP \
                         server gets, or leave the key out to hand it gitea_token"
                        .to_owned(),
                    _ => "is empty: set the bot's Gitea API token, or leave the key out to run \
                          without Gitea"
                        .to_owned(),
                }
            });
        }
        if self.in_header() && secret.chars().any(char::is_control) {
            return Err(
                "contains a line break or another control character, which no HTTP header can \
                 carry: write it on one line"
                    .to_owned(),
            );
        }
        if self.generated() && secret.len() < 16 {
            return Err(
                "too short: use at least 16 characters (e.g. `openssl rand -hex 32`)".to_owned(),
            );
        }
        Ok(())
    }
}

/// A configured secret, checked by [`SecretKey::check`].
fn checked_secret(
    key: SecretKey,
    value: Option<SecretString>,
) -> Result<Option<SecretString>, ConfigError> {
    let Some(secret) = value else {
        return Ok(None);
    };
    key.check(secret.expose_secret())
        .map_err(|p| invalid(key.key(), p))?;
    Ok(Some(secret))
}

/// `trigger_allow` / `trigger_deny`: Gitea logins, compared in lower case.
fn logins(key: &'static str, list: Option<Vec<String>>) -> Result<BTreeSet<String>, ConfigError> {
    list.unwrap_or_default()
        .into_iter()
        .map(|l| {
            if is_gitea_name(&l) {
                Ok(l.to_ascii_lowercase())
            } else {
                Err(invalid(key, format!("`{l}` is not a Gitea login")))
            }
        })
        .collect()
}

/// The `repositories` overrides by lower-case `owner/name`; what an entry
/// leaves out comes from `default`.
fn repositories(
    table: BTreeMap<String, RawRepo>,
    default: &RepoPolicy,
) -> Result<BTreeMap<String, RepoPolicy>, String> {
    let mut out = BTreeMap::new();
    for (repo, entry) in table {
        let valid_name = repo
            .split_once('/')
            .is_some_and(|(o, n)| is_gitea_name(o) && is_gitea_name(n));
        if !valid_name {
            return Err(format!("`{repo}` is not owner/name"));
        }
        let in_repo = |e: String| format!("`{repo}`: {e}");
        let mut policy = *default;
        if let Some(p) = entry.approval_policy {
            policy.approval_policy = p.parse().map_err(in_repo)?;
        }
        if let Some(p) = entry.sandbox {
            policy.sandbox = p.parse().map_err(in_repo)?;
        }
        if let Some(secs) = entry.turn_timeout_secs {
            let secs = u64::try_from(secs)
                .ok()
                .filter(|s| (1..=604_800).contains(s))
                .ok_or_else(|| in_repo(TIMEOUT.to_owned()))?;
            policy.turn_timeout = Duration::from_secs(secs);
        }
        out.insert(repo.to_ascii_lowercase(), policy);
    }
    Ok(out)
}
