//! The names an operator writes: every key of the file with its help text, the
//! environment variable of each, and the `CODEX_BRIDGE_*` variables that are
//! not keys. These names are the operator's interface: adding one is fine,
//! renaming one breaks files and environments that work today.

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
    (
        "request_timeout_secs",
        "seconds a client has to send a request's head, then its whole body; a stalled \
         sender gets 408 and its connection is closed (default 30)",
    ),
    (
        "breaker_failures",
        "provider or app-server failures in a row after which no turn starts for a while \
         (30 s, doubling to 15 min while the first turn after it fails again); queued work \
         waits and uses no attempt (default 5; 0 = never)",
    ),
    (
        "session_turns_per_minute",
        "turns one Issue's or pull request's comments may start in a minute; past it the \
         storm guard pauses it with one notice until an operator resumes it (default 6; \
         0 = no limit)",
    ),
    (
        "breaker_open_secs",
        "how long the circuit breaker first keeps turns from starting; each failed trial \
         after it doubles this, up to 15 minutes (default 30)",
    ),
    (
        "drain_timeout_secs",
        "on SIGTERM: how long the turns under way may finish (webhooks are still taken, no \
         new turn starts) before what is left is interrupted and the server exits (default 600; \
         the systemd unit's TimeoutStopSec must be longer)",
    ),
    (
        "max_connections",
        "HTTP connections held at once; past it new ones wait to be accepted (default 1024)",
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
        "codex (the app-server), none (intake only), or scripted (tests: plays directives, no \
         model) (default codex)",
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
        "attempts a task gets when it fails before reaching Codex; after the last its entry is held for an operator (default 2)",
    ),
    (
        "prompt_context_bytes",
        "how much of the Issue/PR and its recent comments a turn's prompt carries, in bytes; \
         the newest is kept, and the prompt says what was left out (default 65536)",
    ),
    (
        "workflows",
        "whether an Issue's or pull request's work outlives a turn: its workflow stays open \
         until the agent completes it, and an ordinary final is followed by a continuation turn \
         (default true; false: a turn's final ends the work)",
    ),
    (
        "max_parallel_turns_per_repo",
        "turns of one repository that may run at once, each in its own session's worktree \
         (default 1; at most 64)",
    ),
    (
        "worktree_retention_hours",
        "hours a session's git worktree is kept once its work ended (no task left to run, no \
         open workflow) and nothing used it; then it is removed, uncommitted work kept under \
         refs/codex-bridge/retired/, and made again from its branch if the session is \
         mentioned again (default 168; 0: kept)",
    ),
    (
        "delivery_retention_days",
        "days a webhook delivery no task was made from (an ignored event, a replay found to be \
         a duplicate, a refusal) is kept; a delivery that made a task, or claimed a comment's \
         dedup key, stays with it (default 30; 0: kept; otherwise at least 8, since Gitea can \
         replay a delivery for up to 8 days)",
    ),
    (
        "turn_event_retention_days",
        "days the per-notification events of a turn are kept after the turn completed and its \
         task ended; the turn keeps its transcript and final text (default 30; 0: kept)",
    ),
    (
        "continuation_backoff_secs",
        "how long an open workflow waits after an ordinary final before its next continuation \
         turn, doubled for each final in a row without progress up to 10 minutes (default 5)",
    ),
    (
        "capacity_wait_secs",
        "how long an open workflow waits to continue after the model's provider turned a turn \
         away for capacity (a usage or rate limit, an overload), doubled for each such refusal \
         in a row up to an hour; the wait is the workflow's waitReason, never a failure \
         (default 60)",
    ),
    (
        "max_children_per_workflow",
        "children (assign_child, handoff_child) one workflow may have working at once; a \
         request past it is not admitted, and the same request may launch once one of them \
         has ended (default 2)",
    ),
    (
        "child_recovery_attempts",
        "turns a child that ended without record_result is asked again for its result \
         before the bridge gives its parent one incomplete result (default 2)",
    ),
    (
        "workflow_max_idle_finals",
        "finals in a row without durable progress (owner input) before a workflow stops and \
         waits for its owner (default 65)",
    ),
    (
        "gate_permission",
        "the least repository permission (read, write or admin) that lets someone besides a \
         workflow's owner answer its gate (default admin)",
    ),
    (
        "max_turns_per_task",
        "turns one task may take, its reply retry included (default 20); past it the task \
         ends failed (budget_exceeded) and its workflow waits for its owner",
    ),
    (
        "max_turns_per_workflow",
        "turns of all the tasks of one workflow (default 200); past it the workflow waits for \
         its owner instead of continuing",
    ),
    (
        "max_task_secs",
        "wall time of one task from its first lease, in seconds (default 7200); past it the \
         turn is interrupted and the task ends failed (budget_exceeded)",
    ),
    (
        "max_tokens_per_task",
        "tokens one task's turns may use, as Codex reports them (default 0: no limit); past \
         it the turn is interrupted and the task ends failed (budget_exceeded)",
    ),
    (
        "user_triggers_per_hour",
        "tasks one commenter may start per hour across repositories (default 30; 0: no \
         limit); past it a comment is refused (rate_limited) with one receipt",
    ),
    (
        "repo_turns_per_day",
        "turns per repository per UTC day (default 0: no limit); past it tasks wait queued \
         until the next day",
    ),
    (
        "scheduler_sweep_ms",
        "how often the registry looks for due work in the store (default 5000)",
    ),
    (
        "catchup_interval_secs",
        "how often every known repository's comments are read through Gitea's API, so that a \
         mentioning comment whose webhook never arrived still becomes a task; 0 turns it off \
         (default 60)",
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
        "when Codex asks before acting: never, on-request or untrusted (default never)",
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
        "ignore_logins",
        "logins whose comments are ignored at intake, with no receipt: other bots, which \
         Gitea's API does not mark (a list; JSON array in the environment)",
    ),
    (
        "journal_url",
        "a remote worker's journal and outbox, sqlite://PATH (default \
         sqlite://./data/worker-journal.db); read only by `codex-bridge worker`",
    ),
    (
        "worker_call_timeout_secs",
        "agent_runtime = remote: how long a session waits for a worker to take and answer one \
         call (a start, a history lookup, an interrupt) before it gives the call up; a call no \
         worker took ran nowhere, one taken is uncertain (default 120)",
    ),
    (
        "worker_lease_ttl_secs",
        "agent_runtime = remote: how long a worker's lease on a repository lives without \
         renewal; the worker renews it at a third of this, and a worker cut off longer loses \
         the repository and the calls it took become uncertain (default 30)",
    ),
    (
        "public_url",
        "the external base URL of this server, e.g. https://bridge.example.com, for links to a \
         task's admin page from the commit statuses of pull requests (unset: no links)",
    ),
    (
        "trust_fork_prs",
        "true: a pull request from a fork, or one whose head commit's author lacks \
         trigger_permission, runs with the repository's own policy and Gitea tools; false: it \
         runs read-only, without Gitea write tools, and the bridge posts its answer (default false)",
    ),
    (
        "gitea_mcp_token",
        "the token handed to the agent's Gitea MCP server, by reference: a token of a user who \
         may only comment (unset: gitea_token, the bot's own, which doctor warns about)",
    ),
    (
        "repositories",
        "per-repository overrides of approval_policy, sandbox and turn_timeout_secs: a table keyed \
         by owner/name (a JSON object in the environment)",
    ),
];

/// What every configuration variable starts with.
pub const ENV_PREFIX: &str = "CODEX_BRIDGE_";

/// `CODEX_BRIDGE_*` variables that are not configuration keys, and are
/// therefore not refused as misspelt ones: the command line's `--config` file,
/// and what the repository's scripts hand to the tests and benchmarks they run
/// (scripts/with-postgres, scripts/bench). Any other `CODEX_BRIDGE_*` variable
/// that names no key stops the start, because a misspelt one would otherwise do
/// nothing: a misspelt `CODEX_BRIDGE_WEBHOOK_SECRET` would leave the server on a
/// generated secret that Gitea does not know.
pub const NOT_KEYS: &[&str] = &["CODEX_BRIDGE_CONFIG", "CODEX_BRIDGE_PG_DURABLE"];

/// Prefixes of `CODEX_BRIDGE_*` variables that belong to the tests and
/// benchmarks (`CODEX_BRIDGE_TEST_CODEX_BIN`, `CODEX_BRIDGE_BENCH_HMAC_SECRET`):
/// no key starts with `test_` or `bench_`, so none is hidden by these.
pub const NOT_KEY_PREFIXES: &[&str] = &["CODEX_BRIDGE_TEST_", "CODEX_BRIDGE_BENCH_"];

/// `webhook_secret` → `CODEX_BRIDGE_WEBHOOK_SECRET`.
pub fn env_name(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_ascii_uppercase())
}

/// The key `name` spells, as the `'static` name errors carry.
pub(super) fn known(name: &str) -> Option<&'static str> {
    KEYS.iter().map(|(k, _)| *k).find(|k| *k == name)
}

/// Whether `name` is a variable the configuration reads or must refuse, as
/// opposed to another program's variable or one of [`NOT_KEYS`].
pub(super) fn is_config_variable(name: &str) -> bool {
    name.starts_with(ENV_PREFIX)
        && !NOT_KEYS.contains(&name)
        && !NOT_KEY_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Every key, for an error that lists them.
pub(super) fn key_list() -> String {
    KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
}

/// The key a misspelt `name` most likely meant: at most two letters added,
/// dropped or changed (case aside).
pub(super) fn nearest(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_lowercase();
    KEYS.iter()
        .map(|(k, _)| (edit_distance(&name, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance over bytes (keys are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_hides_behind_a_variable_that_is_not_one() {
        for (key, _) in KEYS {
            let name = env_name(key);
            assert!(is_config_variable(&name), "{name} would be ignored");
        }
        assert!(!is_config_variable("CODEX_BRIDGE_TEST_PG_PORT"));
        assert!(!is_config_variable("CODEX_BRIDGE_CONFIG"));
        assert!(!is_config_variable("HOME"));
        assert!(is_config_variable("CODEX_BRIDGE_WEBHOOK_SECRTE"));
    }

    #[test]
    fn a_near_miss_suggests_the_key() {
        assert_eq!(nearest("webhook_secrte"), Some("webhook_secret"));
        assert_eq!(nearest("LISEN"), Some("listen"));
        assert_eq!(nearest("something_else_entirely"), None);
    }
}
