//! What keeps this process from running turns, decided from its configuration
//! alone. While a blocker holds, the scheduler leases nothing and every task
//! stays `queued` (intake goes on: Gitea never retries a webhook); `/readyz`
//! and the admin overview name the blockers, so an operator sees why nothing
//! runs and which keys to set.
//!
//! Messages name configuration keys, never their values: `/readyz` answers
//! without a token.

use crate::config::{AgentRuntimeKind, Config};
use serde::Serialize;
use std::path::Path;

/// One reason nothing runs: a stable snake_case `code` and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Blocker {
    pub code: &'static str,
    pub message: String,
}

/// Why this process runs no turns, in the order an operator should fix them.
/// Empty when turns can run. The scripted runtime is the test mode: it brings
/// its own verifier and needs no Gitea.
pub fn blockers(config: &Config) -> Vec<Blocker> {
    let mut out = Vec::new();
    match config.agent_runtime {
        AgentRuntimeKind::Scripted => return out,
        AgentRuntimeKind::None => out.push(Blocker {
            code: "agent_runtime_none",
            message: "agent_runtime = none: webhooks are stored and queued, but this process runs \
                      no turns; set agent_runtime = \"codex\" to run them"
                .into(),
        }),
        AgentRuntimeKind::Codex => {}
    }
    if let Some(message) = gitea_not_configured(config) {
        out.push(Blocker {
            code: "gitea_not_configured",
            message,
        });
    }
    out
}

/// Why there is no Gitea client, or `None` when `gitea_url` and `gitea_token`
/// are both set.
pub fn gitea_not_configured(config: &Config) -> Option<String> {
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
    Some(format!(
        "{keys} {verb} not set: without a Gitea client no commenter's permission can be checked \
         and no reply verified, so no turn starts and tasks stay queued; set gitea_url and \
         gitea_token (the bot's API token)"
    ))
}

/// Why the agent runtime cannot run turns, or `None` when it can as far as a
/// cheap look tells (the configured binary exists and is executable; nothing
/// is started to find out).
pub fn codex_unavailable(config: &Config) -> Option<String> {
    match config.agent_runtime {
        AgentRuntimeKind::None => Some(
            "agent_runtime = none: this process runs no turns; set agent_runtime = \"codex\" to \
             run them"
                .into(),
        ),
        AgentRuntimeKind::Scripted => None,
        AgentRuntimeKind::Codex if !resolves(&config.codex_bin) => Some(
            "the binary named by codex_bin is not found or not executable; set codex_bin to the \
             codex binary's path (scripts/ensure-codex prints the pinned one's)"
                .into(),
        ),
        AgentRuntimeKind::Codex => None,
    }
}

/// Whether `bin` names an executable file: a path as given, a bare name
/// through `PATH`, as starting a process would find it.
fn resolves(bin: &Path) -> bool {
    if bin.components().count() > 1 {
        return is_executable(bin);
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| is_executable(&dir.join(bin))))
        .unwrap_or(false)
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
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
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Config {
        test_config(vars)
    }

    #[test]
    fn codex_without_gitea_is_blocked_and_the_message_names_the_keys() {
        let c = config(&[("agent_runtime", "codex")]);
        let b = blockers(&c);
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].code, "gitea_not_configured");
        assert!(b[0]
            .message
            .starts_with("gitea_url and gitea_token are not set"));

        let c = config(&[("agent_runtime", "codex"), ("gitea_url", "http://git.test")]);
        let b = blockers(&c);
        assert!(b[0].message.starts_with("gitea_token is not set"), "{b:?}");

        let c = config(&[
            ("agent_runtime", "codex"),
            ("gitea_url", "http://git.test"),
            ("gitea_token", "a-token-value-that-must-not-show"),
        ]);
        assert_eq!(blockers(&c), Vec::new());
    }

    #[test]
    fn intake_only_says_so_and_the_scripted_test_mode_needs_no_gitea() {
        let b = blockers(&config(&[]));
        let codes: Vec<&str> = b.iter().map(|b| b.code).collect();
        assert_eq!(codes, ["agent_runtime_none", "gitea_not_configured"]);
        assert_eq!(blockers(&config(&[("agent_runtime", "scripted")])), []);
    }

    #[test]
    fn a_missing_codex_binary_is_named_by_its_key_not_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-codex");
        let c = config(&[
            ("agent_runtime", "codex"),
            ("codex_bin", missing.to_str().unwrap()),
        ]);
        let why = codex_unavailable(&c).unwrap();
        assert!(
            why.contains("codex_bin") && !why.contains("no-such-codex"),
            "{why}"
        );

        let present = dir.path().join("codex");
        std::fs::write(&present, "#!/bin/sh\n").unwrap();
        let c = config(&[
            ("agent_runtime", "codex"),
            ("codex_bin", present.to_str().unwrap()),
        ]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert!(codex_unavailable(&c).is_some(), "not executable yet");
            std::fs::set_permissions(&present, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        assert_eq!(codex_unavailable(&c), None);
        assert!(codex_unavailable(&config(&[])).is_some());
        assert_eq!(
            codex_unavailable(&config(&[("agent_runtime", "scripted")])),
            None
        );
    }
}
