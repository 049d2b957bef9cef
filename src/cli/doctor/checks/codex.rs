//! Codex: the binary runs (and is the pinned version), an app-server
//! started as the server starts its own initialises, and its account is
//! signed in (or the configured provider needs none).

use super::super::Check;
use crate::codex::probe::{self, Probe, PINNED_CODEX_VERSION};
use crate::config::{AgentRuntimeKind, Config};
use std::time::Duration;

const AREA: &str = "codex";

pub async fn check(config: &Config) -> Vec<Check> {
    if config.agent_runtime != AgentRuntimeKind::Codex {
        return vec![Check::ok(
            AREA,
            "runtime",
            format!(
                "not used (agent_runtime = {})",
                config.agent_runtime.as_str()
            ),
        )];
    }
    let bin = &config.codex_bin;
    let mut out = Vec::new();
    match probe::version(bin, Duration::from_secs(10)).await {
        Ok(v) if v == PINNED_CODEX_VERSION => {
            out.push(Check::ok(AREA, "binary", format!("{} {v}", bin.display())))
        }
        Ok(v) => out.push(Check::warn(
            AREA,
            "binary",
            format!(
                "{} is version {v:?}, the bridge is tested with {PINNED_CODEX_VERSION}",
                bin.display()
            ),
            format!("install codex {PINNED_CODEX_VERSION}"),
        )),
        Err(e) => {
            out.push(Check::fail(
                AREA,
                "binary",
                format!("{e}; the other Codex checks were skipped"),
                "install codex and set codex_bin to its path",
            ));
            return out;
        }
    }
    let settings = match crate::app::codex_settings(config) {
        Ok(s) => s,
        Err(e) => {
            out.push(Check::fail(
                AREA,
                "app-server",
                e.to_string(),
                "fix the key named",
            ));
            return out;
        }
    };
    match probe::probe(settings, Duration::from_secs(30)).await {
        Probe::NotStarted(why) => out.push(Check::fail(
            AREA,
            "app-server",
            why,
            "check codex_bin and codex_home (the server's log has the app-server's errors)",
        )),
        Probe::Started(account) => {
            out.push(Check::ok(AREA, "app-server", "starts and initialises"));
            out.push(match account {
                Ok(status) if status.account.is_some() => Check::ok(AREA, "account", "signed in"),
                Ok(status) if !status.requires_openai_auth => Check::ok(
                    AREA,
                    "account",
                    "no account needed (the configured model provider needs none)",
                ),
                Ok(_) => Check::fail(
                    AREA,
                    "account",
                    "signed out",
                    "run `codex-bridge codex login`",
                ),
                Err(e) => Check::fail(
                    AREA,
                    "account",
                    e,
                    "check codex_home's config.toml; then `codex-bridge codex status`",
                ),
            });
        }
    }
    out
}
