//! What keeps this process from running turns, and what `/readyz` says of
//! each dependency. Two sources: the configuration (no Gitea client,
//! `agent_runtime = none`), fixed for the process's life, and the agent
//! runtime's own [`RuntimeStatus`] (a codex binary that cannot be run, an
//! app-server that does not start or is not signed in), which changes while
//! the process runs. While a blocker holds, the scheduler leases nothing and
//! every task stays `queued` (intake goes on: Gitea never retries a
//! webhook); `/readyz` and the admin overview name each blocker and what to
//! do, so an operator sees why nothing runs.
//!
//! Messages name configuration keys, never their values or paths: `/readyz`
//! answers without a token.

use crate::agent::{AccountState, ProcessState, RuntimeStatus, StartProblem};
use crate::config::{AgentRuntimeKind, Config};
use serde::Serialize;

/// One reason nothing runs: a stable snake_case `code`, what is wrong
/// (`message`) and what to do about it (`action`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Blocker {
    pub code: &'static str,
    pub message: String,
    pub action: String,
}

/// Why this process runs no turns, from its configuration alone, in the
/// order an operator should fix them. Empty when turns can run. The
/// scripted runtime is the test mode: it brings its own verifier and needs
/// no Gitea.
pub fn blockers(config: &Config) -> Vec<Blocker> {
    let mut out = Vec::new();
    match config.agent_runtime {
        AgentRuntimeKind::Scripted => return out,
        AgentRuntimeKind::None => out.push(Blocker {
            code: "agent_runtime_none",
            message: "agent_runtime = none: webhooks are stored and queued, but this process runs \
                      no turns"
                .into(),
            action: "set agent_runtime = \"codex\" (the default) to run them".into(),
        }),
        // The server verifies replies on Gitea whoever runs the turn.
        AgentRuntimeKind::Codex | AgentRuntimeKind::Remote => {}
    }
    if let Some(blocker) = gitea_not_configured(config) {
        out.push(blocker);
    }
    out
}

/// Why the agent runtime cannot run turns now, as it last found (empty
/// while it starts: that is no fault, and takes a moment).
pub fn runtime_blockers(status: &RuntimeStatus) -> Vec<Blocker> {
    let queued = "no turn can start, tasks stay queued";
    let retries = "the bridge tries again by itself (waiting up to a minute between tries) and \
                   then starts the queued tasks";
    match (&status.process, status.account) {
        (ProcessState::Unavailable { problem, .. }, _) => vec![match problem {
            StartProblem::NotInstalled => Blocker {
                code: "codex_not_installed",
                message: format!(
                    "the codex binary named by codex_bin cannot be run (not found or not \
                     executable): {queued}"
                ),
                action: format!(
                    "install codex and set codex_bin to its path (or put codex on PATH; with \
                     codex_nice above 0, nice as well); {retries}"
                ),
            },
            StartProblem::HomeUnusable => Blocker {
                code: "codex_home_unusable",
                message: format!("the directory named by codex_home cannot be created: {queued}"),
                action: format!(
                    "make codex_home a directory this server's user can write; {retries}"
                ),
            },
            StartProblem::FailedToStart => Blocker {
                code: "codex_failed_to_start",
                message: format!(
                    "the codex app-server exits or does not answer its handshake: {queued}"
                ),
                action: format!(
                    "run `codex app-server` by hand with CODEX_HOME set to this server's \
                     codex_home to see its error (the server log has its output at debug \
                     level); {retries}"
                ),
            },
        }],
        (ProcessState::Running, AccountState::SignedOut) => vec![Blocker {
            code: "codex_signed_out",
            message: format!(
                "the codex app-server is not signed in and its model provider needs an OpenAI \
                 account: {queued}"
            ),
            action: "sign Codex in through this server: `codex-bridge codex login` with an \
                     OpenAI API key on stdin (`printenv OPENAI_API_KEY | codex-bridge codex \
                     login`), `codex-bridge codex login --device-code` for a ChatGPT account, \
                     or the admin view's Codex panel; or configure a model provider that needs \
                     no account. The bridge notices within seconds and starts the queued tasks"
                .into(),
        }],
        _ => Vec::new(),
    }
}

/// Everything that keeps turns from running now: the configuration's
/// blockers, then the runtime's (an intake-only process has no runtime).
pub fn all_blockers(config: &Config, status: &RuntimeStatus) -> Vec<Blocker> {
    let mut out = blockers(config);
    if config.agent_runtime != AgentRuntimeKind::None {
        out.extend(runtime_blockers(status));
    }
    out
}

/// Why there is no Gitea client, or `None` when `gitea_url` and `gitea_token`
/// are both set.
pub fn gitea_not_configured(config: &Config) -> Option<Blocker> {
    let missing: Vec<&str> = [
        ("gitea_url", config.gitea_url.is_none()),
        ("gitea_token", config.gitea_token.is_none()),
    ]
    .into_iter()
    .filter_map(|(key, unset)| unset.then_some(key))
    .collect();
    if missing.is_empty() {
        return None;
    }
    let (keys, verb) = match missing.as_slice() {
        [one] => ((*one).to_owned(), "is"),
        _ => (missing.join(" and "), "are"),
    };
    Some(Blocker {
        code: "gitea_not_configured",
        message: format!(
            "{keys} {verb} not set: without a Gitea client no commenter's permission can be \
             checked and no reply verified, so no turn starts and tasks stay queued"
        ),
        action: "set gitea_url and gitea_token (the bot's API token)".into(),
    })
}

/// A dependency's state in `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Ok,
    /// Being started (the app-server, as the process starts).
    Starting,
    Unavailable,
    NotConfigured,
    SignedIn,
    SignedOut,
    /// The model provider needs no account (or no Codex runs here).
    NotRequired,
    /// Not known (the app-server does not run, or cannot say).
    Unknown,
}

/// One dependency in `/readyz`: its state, and while it keeps turns from
/// running, why and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dependency {
    pub state: State,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

impl Dependency {
    fn fine(state: State) -> Dependency {
        Dependency {
            state,
            reason: None,
            action: None,
        }
    }

    fn blocked(state: State, blocker: Blocker) -> Dependency {
        Dependency {
            state,
            reason: Some(blocker.message),
            action: Some(blocker.action),
        }
    }

    /// Whether it keeps this process from being `ready`.
    fn degrades(&self) -> bool {
        !matches!(
            self.state,
            State::Ok | State::SignedIn | State::NotRequired | State::Unknown
        )
    }
}

/// `/readyz`'s overall status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Webhooks are taken and tasks run.
    Ready,
    /// Webhooks are taken and stored, but tasks wait (see the dependencies).
    Degraded,
    /// The store does not answer: webhooks are refused.
    Unavailable,
}

/// The `/readyz` document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    pub status: Status,
    pub store: Dependency,
    pub gitea: Dependency,
    pub codex: Dependency,
    pub codex_account: Dependency,
    /// The circuit breaker: `open` while the agent runtime's failures keep
    /// turns from starting (queued work waits), with when it closes.
    pub circuit: crate::agent::circuit::CircuitView,
}

impl Readiness {
    /// The document with the circuit breaker as it is now: an open circuit
    /// degrades a store that answers (tasks are taken and wait).
    pub fn with_circuit(mut self, circuit: crate::agent::circuit::CircuitView) -> Readiness {
        if circuit.state == "open" && self.status == Status::Ready {
            self.status = Status::Degraded;
        }
        self.circuit = circuit;
        self
    }
}

/// What `/readyz` says for a store that does (not) answer, under `config`,
/// with the agent runtime's last `status`.
pub fn readiness(config: &Config, store_ok: bool, status: &RuntimeStatus) -> Readiness {
    let store = if store_ok {
        Dependency::fine(State::Ok)
    } else {
        Dependency {
            state: State::Unavailable,
            reason: Some(
                "the database does not answer: webhooks are refused with 503 (Gitea does not \
                 send them again)"
                    .into(),
            ),
            action: Some(
                "check that the database named by database_url is up and reachable".into(),
            ),
        }
    };
    let gitea = match gitea_not_configured(config) {
        Some(blocker) => Dependency::blocked(State::NotConfigured, blocker),
        None => Dependency::fine(State::Ok),
    };
    let (codex, codex_account) = match config.agent_runtime {
        AgentRuntimeKind::None => {
            let none = blockers(config)
                .into_iter()
                .find(|b| b.code == "agent_runtime_none");
            let codex = match none {
                Some(blocker) => Dependency::blocked(State::Unavailable, blocker),
                None => Dependency::fine(State::Unavailable),
            };
            (codex, Dependency::fine(State::NotRequired))
        }
        AgentRuntimeKind::Scripted | AgentRuntimeKind::Codex | AgentRuntimeKind::Remote => {
            runtime_dependencies(status)
        }
    };
    let degraded = [&gitea, &codex, &codex_account]
        .iter()
        .any(|d| d.degrades());
    Readiness {
        status: match (store_ok, degraded) {
            (false, _) => Status::Unavailable,
            (true, true) => Status::Degraded,
            (true, false) => Status::Ready,
        },
        store,
        gitea,
        codex,
        codex_account,
        circuit: crate::agent::circuit::CircuitView::closed(),
    }
}

/// `codex` and `codexAccount` from the runtime's status.
fn runtime_dependencies(status: &RuntimeStatus) -> (Dependency, Dependency) {
    let blocker = runtime_blockers(status).into_iter().next();
    let codex = match (&status.process, blocker.clone()) {
        (ProcessState::Starting, _) => Dependency {
            state: State::Starting,
            reason: Some("the codex app-server is starting".into()),
            action: None,
        },
        (ProcessState::Unavailable { .. }, Some(blocker)) => {
            Dependency::blocked(State::Unavailable, blocker)
        }
        (ProcessState::Unavailable { .. }, None) => Dependency::fine(State::Unavailable),
        (ProcessState::Running, _) => Dependency::fine(State::Ok),
    };
    let account = match (status.account, blocker) {
        (AccountState::SignedOut, Some(blocker)) => Dependency::blocked(State::SignedOut, blocker),
        (AccountState::SignedOut, None) => Dependency::fine(State::SignedOut),
        (AccountState::SignedIn, _) => Dependency::fine(State::SignedIn),
        (AccountState::NotRequired, _) => Dependency::fine(State::NotRequired),
        (AccountState::Unknown, _) => Dependency::fine(State::Unknown),
    };
    (codex, account)
}

/// A configuration from `CODEX_BRIDGE_*` variables named without their
/// prefix, for the unit tests of what reads it.
#[cfg(test)]
pub(crate) fn test_config(vars: &[(&str, &str)]) -> Config {
    let env: std::collections::BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| {
            (
                format!("CODEX_BRIDGE_{}", k.to_ascii_uppercase()),
                (*v).into(),
            )
        })
        .collect();
    Config::from_sources(None, &env).unwrap()
}

#[cfg(test)]
mod tests;
