//! What the file and the environment say, before it means anything: every key
//! optional, each in the shape its layers can write it. The file writes
//! numbers, arrays and tables as TOML; the environment writes only strings, so
//! its numbers are digits and its lists and tables are JSON. The readers here
//! accept both and nothing more; what a value means (ranges, addresses,
//! policies) is [`super::validate`]'s one step.
//!
//! Values are trimmed, and a blank one counts as unset (an empty variable
//! leaves the default), except a secret: a blank secret is refused later,
//! since it is a mistake that would otherwise switch to a generated one.

use super::proxies;
use figment::value::{Dict, Num, Value};
use secrecy::SecretString;
use serde::de::{Deserialize, Deserializer, Error as _};
use std::collections::BTreeMap;

/// Every key, as read; `deny_unknown_fields` refuses a name that is none
/// (a file key or a `CODEX_BRIDGE_*` variable). The fields are the keys of
/// `KEYS`, and a test holds the two lists equal.
#[derive(Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct Raw {
    #[serde(deserialize_with = "text")]
    pub listen: Option<String>,
    #[serde(deserialize_with = "text")]
    pub database_url: Option<String>,
    #[serde(deserialize_with = "secret")]
    pub webhook_secret: Option<SecretString>,
    #[serde(deserialize_with = "text")]
    pub bot_login: Option<String>,
    #[serde(deserialize_with = "text")]
    pub instance_id: Option<String>,
    #[serde(deserialize_with = "text")]
    pub gitea_url: Option<String>,
    #[serde(deserialize_with = "secret")]
    pub gitea_token: Option<SecretString>,
    #[serde(deserialize_with = "secret")]
    pub admin_token: Option<SecretString>,
    #[serde(deserialize_with = "text")]
    pub workspace_root: Option<String>,
    #[serde(deserialize_with = "text")]
    pub state_dir: Option<String>,
    #[serde(deserialize_with = "whole")]
    pub max_body_bytes: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub request_timeout_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub max_connections: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub drain_timeout_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub breaker_failures: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub breaker_open_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub session_turns_per_minute: Option<u128>,
    #[serde(deserialize_with = "text")]
    pub log_format: Option<String>,
    #[serde(deserialize_with = "text")]
    pub log_filter: Option<String>,
    #[serde(deserialize_with = "whole")]
    pub writer_batch_max: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub writer_threads: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub read_pool_size: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub sqlite_busy_timeout_ms: Option<u128>,
    #[serde(deserialize_with = "text")]
    pub codex_bin: Option<String>,
    #[serde(deserialize_with = "text")]
    pub codex_home: Option<String>,
    #[serde(deserialize_with = "whole")]
    pub codex_nice: Option<u128>,
    #[serde(deserialize_with = "text")]
    pub agent_runtime: Option<String>,
    #[serde(deserialize_with = "whole")]
    pub lease_ttl_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub lease_heartbeat_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub session_idle_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub worker_call_timeout_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub worker_lease_ttl_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub retry_backoff_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub max_attempts: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub prompt_context_bytes: Option<u128>,
    #[serde(deserialize_with = "flag")]
    pub workflows: Option<bool>,
    #[serde(deserialize_with = "whole")]
    pub continuation_backoff_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub capacity_wait_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub workflow_max_idle_finals: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub max_children_per_workflow: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub child_recovery_attempts: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub worktree_retention_hours: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub delivery_retention_days: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub turn_event_retention_days: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub max_parallel_turns_per_repo: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub max_turns_per_task: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub max_turns_per_workflow: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub max_task_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub max_tokens_per_task: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub user_triggers_per_hour: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub repo_turns_per_day: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub scheduler_sweep_ms: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub catchup_interval_secs: Option<u128>,
    #[serde(deserialize_with = "text")]
    pub gitea_mcp_command: Option<String>,
    #[serde(deserialize_with = "arguments")]
    pub gitea_mcp_args: Option<Vec<String>>,
    #[serde(deserialize_with = "text")]
    pub gitea_mcp_url_env: Option<String>,
    #[serde(deserialize_with = "text")]
    pub gitea_mcp_token_env: Option<String>,
    #[serde(deserialize_with = "whole")]
    pub turn_timeout_secs: Option<u128>,
    #[serde(deserialize_with = "whole")]
    pub approval_timeout_secs: Option<u128>,
    #[serde(deserialize_with = "text")]
    pub metrics_listen: Option<String>,
    #[serde(deserialize_with = "networks")]
    pub trusted_proxies: Option<Vec<String>>,
    #[serde(deserialize_with = "text")]
    pub approval_policy: Option<String>,
    #[serde(deserialize_with = "text")]
    pub sandbox: Option<String>,
    #[serde(deserialize_with = "text")]
    pub receipt_mode: Option<String>,
    #[serde(deserialize_with = "text")]
    pub trigger_permission: Option<String>,
    #[serde(deserialize_with = "text")]
    pub gate_permission: Option<String>,
    #[serde(deserialize_with = "logins")]
    pub trigger_allow: Option<Vec<String>>,
    #[serde(deserialize_with = "logins")]
    pub trigger_deny: Option<Vec<String>>,
    #[serde(deserialize_with = "logins")]
    pub ignore_logins: Option<Vec<String>>,
    #[serde(deserialize_with = "repositories")]
    pub repositories: Option<BTreeMap<String, RawRepo>>,
    #[serde(deserialize_with = "text")]
    pub public_url: Option<String>,
    #[serde(deserialize_with = "text")]
    pub journal_url: Option<String>,
    #[serde(deserialize_with = "flag")]
    pub trust_fork_prs: Option<bool>,
    #[serde(deserialize_with = "secret")]
    pub gitea_mcp_token: Option<SecretString>,
}

/// One entry of `repositories`, as read: what it leaves out comes from the
/// global keys.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct RawRepo {
    pub approval_policy: Option<String>,
    pub sandbox: Option<String>,
    pub turn_timeout_secs: Option<u128>,
}

/// Reads the key's value whole, then hands it to `read`, whose error message
/// becomes the key's (figment adds the key and the layer).
fn with<'de, D, T>(d: D, read: impl FnOnce(Value) -> Result<T, String>) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    read(<Value as Deserialize>::deserialize(d)?).map_err(D::Error::custom)
}

/// What a value is, for "expected …, found …" (never the value itself: it
/// may be a secret).
fn kind(v: &Value) -> &'static str {
    match v {
        Value::String(..) | Value::Char(..) => "a string",
        Value::Bool(..) => "a boolean",
        Value::Num(..) => "a number",
        Value::Empty(..) => "nothing",
        Value::Dict(..) => "a table",
        Value::Array(..) => "an array",
    }
}

/// Trimmed; blank is unset.
fn filled(s: &str) -> Option<String> {
    Some(s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// A number as written: integers of any width and sign, else the fraction.
fn number_text(n: Num) -> String {
    match (n.to_u128_lossy(), n.to_i128(), n.to_f64()) {
        (Some(u), _, _) => u.to_string(),
        (None, Some(i), _) => i.to_string(),
        (None, None, Some(f)) => f.to_string(),
        (None, None, None) => String::new(),
    }
}

/// A string. A TOML number or boolean is taken as its text, as an operator
/// who writes `bot_login = 1234` means the login `1234`.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    with(d, |v| match &v {
        Value::String(_, s) => Ok(filled(s)),
        Value::Num(_, n) => Ok(Some(number_text(*n))),
        Value::Bool(_, b) => Ok(Some(b.to_string())),
        other => Err(format!("expected a string, found {}", kind(other))),
    })
}

/// A boolean: TOML `true`/`false`, or the same words in the environment.
fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    with(d, |v| match &v {
        Value::Bool(_, b) => Ok(Some(*b)),
        Value::String(_, s) => match filled(s).as_deref() {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(other) => Err(format!(
                "`{other}` is not a boolean; expected true or false"
            )),
        },
        other => Err(format!("expected true or false, found {}", kind(other))),
    })
}

/// A secret: a string, trimmed; blank stays blank so that validation refuses
/// it. A TOML number is refused: it would lose leading zeros.
fn secret<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SecretString>, D::Error> {
    with(d, |v| match v {
        Value::String(_, s) => Ok(Some(SecretString::from(s.trim().to_owned()))),
        other => Err(format!("expected a quoted string, found {}", kind(&other))),
    })
}

/// A whole number: a TOML integer or digits. As wide as u128, so that a
/// number too large for its key is still reported with the key's range.
fn whole<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u128>, D::Error> {
    with(d, |v| whole_of(&v))
}

fn whole_of(v: &Value) -> Result<Option<u128>, String> {
    match v {
        Value::Num(_, n) => match n.to_u128_lossy() {
            Some(n) => Ok(Some(n)),
            None => Err(format!("`{}` is not a whole number", number_text(*n))),
        },
        Value::String(_, s) => {
            let Some(s) = filled(s) else {
                return Ok(None);
            };
            match s.parse::<u128>() {
                Ok(n) => Ok(Some(n)),
                Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
                    Err(format!("`{s}` is far too large a number"))
                }
                Err(_) => Err(format!("`{s}` is not a whole number")),
            }
        }
        other => Err(format!("expected a whole number, found {}", kind(other))),
    }
}

/// A list of strings: a TOML array, or a JSON array in a string.
fn list(v: Value, expected: &str) -> Result<Option<Vec<String>>, String> {
    match v {
        Value::Array(_, items) => items
            .into_iter()
            .map(|i| match i {
                Value::String(_, s) => Ok(s),
                _ => Err(expected.to_owned()),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Value::String(_, s) if s.trim().is_empty() => Ok(None),
        Value::String(_, s) => serde_json::from_str(&s)
            .map(Some)
            .map_err(|_| expected.to_owned()),
        _ => Err(expected.to_owned()),
    }
}

fn arguments<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    with(d, |v| {
        list(
            v,
            "expected a JSON array of strings, e.g. [\"-t\", \"stdio\"]",
        )
    })
}

fn logins<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    with(d, |v| {
        list(
            v,
            "expected a list of Gitea logins, e.g. [\"alice\", \"bob\"]",
        )
    })
}

/// `trusted_proxies`: an array, or in a string a JSON array or a comma list.
fn networks<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    with(d, |v| match v {
        Value::String(_, s) if s.trim().is_empty() => Ok(None),
        Value::String(_, s) => proxies::entries(&s).map(Some),
        other => list(other, proxies::EXPECTED),
    })
}

const REPOSITORIES_EXPECTED: &str = "expected a table keyed by owner/name, e.g. \
     [repositories.\"acme/app\"] with approval_policy = \"untrusted\"";

/// `repositories`: a TOML table, or a JSON object in a string.
fn repositories<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, RawRepo>>, D::Error> {
    with(d, |v| {
        let table = match v {
            Value::Dict(_, table) => table,
            Value::String(_, s) if s.trim().is_empty() => return Ok(None),
            Value::String(_, s) => match serde_json::from_str::<Value>(&s) {
                Ok(Value::Dict(_, table)) => table,
                _ => return Err(REPOSITORIES_EXPECTED.to_owned()),
            },
            _ => return Err(REPOSITORIES_EXPECTED.to_owned()),
        };
        table
            .into_iter()
            .map(|(repo, entry)| {
                match entry {
                    Value::Dict(_, fields) => {
                        repo_entry(fields).map_err(|e| format!("`{repo}`: {e}"))
                    }
                    _ => Err(format!("`{repo}`: expected a table")),
                }
                .map(|entry| (repo, entry))
            })
            .collect::<Result<BTreeMap<_, _>, _>>()
            .map(Some)
    })
}

fn repo_entry(fields: Dict) -> Result<RawRepo, String> {
    let mut entry = RawRepo::default();
    for (k, v) in fields {
        match (k.as_str(), v) {
            ("approval_policy", Value::String(_, p)) => entry.approval_policy = filled(&p),
            ("sandbox", Value::String(_, p)) => entry.sandbox = filled(&p),
            ("turn_timeout_secs", v) => {
                entry.turn_timeout_secs = whole_of(&v).map_err(|_| TIMEOUT.to_owned())?;
            }
            (other, _) => {
                return Err(format!(
                    "unknown or mistyped key `{other}` (known: approval_policy, sandbox, \
                     turn_timeout_secs)"
                ))
            }
        }
    }
    Ok(entry)
}

/// What `turn_timeout_secs` of an entry takes (its range is checked in
/// validation with the same words).
pub(super) const TIMEOUT: &str = "turn_timeout_secs must be a number of seconds from 1 to 604800";
