//! A one-off look at Codex for `codex-bridge doctor`: `codex --version`, then
//! an app-server started exactly as the server starts its own (same binary,
//! CODEX_HOME, environment and handshake), asked `account/read`, and ended.
//! It only reads: it never signs in or out, so it can run beside a server
//! that owns the same CODEX_HOME.

use super::agent::CodexAgent;
use super::settings::CodexSettings;
use crate::agent::account::{AccountError, AccountStatus};
use std::time::Duration;

/// The `codex` version the bridge is built and tested against; keep it in
/// step with `scripts/ensure-codex`.
pub const PINNED_CODEX_VERSION: &str = "0.171.0";

/// What the probe found.
#[derive(Debug)]
pub enum Probe {
    /// The app-server did not start or did not answer `initialize`.
    NotStarted(String),
    /// It started; `account/read` answered this or failed so.
    Started(Result<AccountStatus, String>),
}

/// `BIN --version`: the version it prints (`codex-cli 0.171.0` → `0.171.0`),
/// or why it could not be run.
pub async fn version(bin: &std::path::Path, timeout: Duration) -> Result<String, String> {
    let run = tokio::process::Command::new(bin)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(timeout, run).await {
        Err(_) => {
            return Err(format!(
                "`{} --version` did not answer within {} s",
                bin.display(),
                timeout.as_secs()
            ))
        }
        Ok(Err(e)) => return Err(format!("cannot run {}: {e}", bin.display())),
        Ok(Ok(out)) => out,
    };
    if !out.status.success() {
        return Err(format!(
            "`{} --version` failed ({})",
            bin.display(),
            out.status
        ));
    }
    Ok(parse_version(&String::from_utf8_lossy(&out.stdout)))
}

/// The last word of the first line: `codex-cli 0.171.0` → `0.171.0`.
pub fn parse_version(text: &str) -> String {
    text.lines()
        .next()
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_default()
        .to_owned()
}

/// Starts an app-server with `settings`, reads its account, ends it.
pub async fn probe(settings: CodexSettings, timeout: Duration) -> Probe {
    let (notices, _rx) = super::notice_channel();
    let agent = CodexAgent::new(settings, notices);
    let read = tokio::time::timeout(timeout, agent.account_status()).await;
    agent.kill_process().await;
    match read {
        Err(_) => Probe::NotStarted(format!(
            "the app-server did not initialise and answer account/read within {} s",
            timeout.as_secs()
        )),
        // Nothing reached the app-server: it did not start or initialise.
        Ok(Err(AccountError::Unavailable(why))) => Probe::NotStarted(why),
        Ok(Err(e)) => Probe::Started(Err(e.to_string())),
        Ok(Ok(status)) => Probe::Started(Ok(status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_last_word_of_the_first_line() {
        assert_eq!(parse_version("codex-cli 0.171.0\n"), "0.171.0");
        assert_eq!(parse_version("0.2.0"), "0.2.0");
        assert_eq!(parse_version(""), "");
    }
}
