//! `codex-bridge doctor`: checks everything the server depends on and prints
//! one line per check, `ok`, `warn` or `fail`, with what to do. It exits 0
//! only when nothing failed. It changes nothing: the store's write is rolled
//! back, the workspace's file removed, the probed processes ended. Secrets
//! never appear in its output: a line names a key, never its value.
//!
//! Each area is a module of [`checks`]; a check that depends on another
//! (the Gitea token on Gitea being reachable) is left out when that one
//! failed, and the failed line says so.

mod checks;

use crate::config::Config;
use serde::Serialize;
use std::fmt;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Where Gitea should send the webhooks (the bridge's /api/gitea/webhook as
    /// Gitea reaches it), as for `gitea hook`. Default: public_url +
    /// /api/gitea/webhook; without either the hooks are not judged.
    #[arg(long, value_name = "URL", value_parser = super::hook::parse_url)]
    pub url: Option<String>,
    /// Print the checks as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Ok => "ok",
            Outcome::Warn => "warn",
            Outcome::Fail => "fail",
        })
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// `config`, `store`, `gitea`, `codex`, `gitea-mcp`, `workspace`.
    pub area: &'static str,
    /// What was checked, e.g. `token` or `hook acme/widgets`.
    pub name: String,
    pub outcome: Outcome,
    /// What was found.
    pub detail: String,
    /// What to do about it (empty when nothing).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub action: String,
}

impl Check {
    pub fn ok(area: &'static str, name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            area,
            name: name.into(),
            outcome: Outcome::Ok,
            detail: detail.into(),
            action: String::new(),
        }
    }

    pub fn warn(
        area: &'static str,
        name: impl Into<String>,
        detail: impl Into<String>,
        action: impl Into<String>,
    ) -> Check {
        Check {
            outcome: Outcome::Warn,
            action: action.into(),
            ..Check::ok(area, name, detail)
        }
    }

    pub fn fail(
        area: &'static str,
        name: impl Into<String>,
        detail: impl Into<String>,
        action: impl Into<String>,
    ) -> Check {
        Check {
            outcome: Outcome::Fail,
            action: action.into(),
            ..Check::ok(area, name, detail)
        }
    }
}

/// The exit decision: success only when no check failed (warnings pass).
pub fn passed(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.outcome != Outcome::Fail)
}

/// One line per check, its columns aligned: outcome, area, name, detail
/// and (after ` -> `) the action.
pub fn render(checks: &[Check]) -> String {
    let area_w = checks.iter().map(|c| c.area.len()).max().unwrap_or(0);
    let name_w = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in checks {
        let mut line = format!(
            "{:<4}  {:<area_w$}  {:<name_w$}  {}",
            c.outcome.to_string(),
            c.area,
            c.name,
            c.detail
        );
        if !c.action.is_empty() {
            line.push_str(" -> ");
            line.push_str(&c.action);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Runs every check and prints them; an error (so a non-zero exit) when any failed.
pub fn run(config: &Config, args: &DoctorArgs) -> anyhow::Result<()> {
    let checks = all_checks(config, args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        print!("{}", render(&checks));
    }
    let failed = checks.iter().filter(|c| c.outcome == Outcome::Fail).count();
    if failed > 0 {
        anyhow::bail!("{failed} of {} checks failed (see above)", checks.len());
    }
    Ok(())
}

/// The checks of every area, in the order they are printed.
fn all_checks(config: &Config, args: &DoctorArgs) -> anyhow::Result<Vec<Check>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut out = checks::config::check(config);
    let (store_checks, stored_repos) = checks::store::check(config);
    out.extend(store_checks);
    let repos = checks::gitea::known_repos(config, stored_repos);
    let url = args.url.clone().or_else(|| config.webhook_url());
    out.extend(checks::gitea::check(config, &repos, url.as_deref()));
    out.extend(runtime.block_on(checks::codex::check(config)));
    out.extend(checks::mcp::check(config));
    out.extend(checks::workspace::check(config));
    Ok(out)
}

/// A Config-load failure as doctor's one line (the rest cannot run).
pub fn config_failed(error: &dyn fmt::Display) -> String {
    render(&[Check::fail(
        "config",
        "load",
        error.to_string(),
        "fix the key named, then run doctor again",
    )])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failure_fails_the_run() {
        let ok = Check::ok("store", "wal", "journal_mode = wal");
        let warn = Check::warn("gitea", "hook acme/w", "not judged", "pass --url");
        let fail = Check::fail("codex", "binary", "not found", "install codex");
        assert!(passed(&[]));
        assert!(passed(&[ok.clone(), warn.clone()]));
        assert!(!passed(&[ok, warn, fail]));
    }

    #[test]
    fn lines_are_aligned_and_carry_the_action() {
        let text = render(&[
            Check::ok("store", "wal", "journal_mode = wal"),
            Check::fail("gitea", "token", "401", "check gitea_token"),
        ]);
        assert_eq!(
            text,
            "ok    store  wal    journal_mode = wal\n\
             fail  gitea  token  401 -> check gitea_token\n"
        );
    }

    #[test]
    fn json_names_the_outcome_in_lower_case() {
        let v = serde_json::to_value(Check::warn("a", "b", "c", "d")).unwrap();
        assert_eq!(v["outcome"], "warn");
        let v = serde_json::to_value(Check::ok("a", "b", "c")).unwrap();
        assert!(v.get("action").is_none());
    }
}
