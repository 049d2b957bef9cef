//! The Gitea MCP server: started as the app-server starts it (the command,
//! its arguments, Gitea's URL and the token in the configured variables),
//! spoken to over stdio (`initialize`, `notifications/initialized`,
//! `tools/list`), and ok when it lists a tool to comment with, which is how
//! the agent posts its answer.

use super::super::Check;
use crate::config::Config;
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const AREA: &str = "gitea-mcp";

/// A Python or Node server can take a few seconds to start.
const TIMEOUT: Duration = Duration::from_secs(20);

pub fn check(config: &Config) -> Vec<Check> {
    let Some(command) = &config.gitea_mcp_command else {
        return vec![Check::warn(
            AREA,
            "tools",
            "gitea_mcp_command is not set: the agent has no Gitea tools to answer with",
            "set gitea_mcp_command (e.g. gitea-mcp) and gitea_mcp_args",
        )];
    };
    vec![
        token(config),
        match list_tools(config, command) {
            Ok(tools) => match tools.iter().find(|t| t.contains("comment")) {
                Some(tool) => Check::ok(
                    AREA,
                    "tools",
                    format!("{command} lists {} tools, {tool} among them", tools.len()),
                ),
                None => Check::fail(
                    AREA,
                    "tools",
                    format!("{command} lists no comment tool ({} tools)", tools.len()),
                    "use a Gitea MCP server that can create comments",
                ),
            },
            Err(why) => Check::fail(
                AREA,
                "tools",
                why,
                "check gitea_mcp_command, gitea_mcp_args and the *_env keys",
            ),
        },
    ]
}

/// Whether the agent's server holds a token of its own: the bot's
/// `gitea_token` is a repository admin's, and whatever the agent is talked
/// into doing with its Gitea tools, it does with that token.
fn token(config: &Config) -> Check {
    let same = match (&config.gitea_mcp_token, &config.gitea_token) {
        (None, _) => true,
        (Some(mcp), Some(bot)) => mcp.expose_secret() == bot.expose_secret(),
        (Some(_), None) => false,
    };
    if same {
        Check::warn(
            AREA,
            "token",
            "the agent's Gitea MCP server holds the bot's admin token",
            "set gitea_mcp_token to a token of a user with write access only",
        )
    } else {
        Check::ok(AREA, "token", "gitea_mcp_token is its own token")
    }
}

/// The names of the tools the server lists, or why none were.
fn list_tools(config: &Config, command: &str) -> Result<Vec<String>, String> {
    let mut cmd = Command::new(command);
    cmd.args(&config.gitea_mcp_args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for var in ["HOME", "LANG"] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    if let Some(url) = &config.gitea_url {
        cmd.env(&config.gitea_mcp_url_env, url);
    }
    if let Some(token) = config.agent_gitea_token() {
        cmd.env(&config.gitea_mcp_token_env, token.expose_secret());
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {command}: {e}"))?;
    let result = talk(&mut child);
    let _ = child.kill();
    let _ = child.wait();
    result.map_err(|why| format!("{command}: {why}"))
}

fn talk(child: &mut std::process::Child) -> Result<Vec<String>, String> {
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("its pipes are missing".into());
    };
    let (tx, rx) = mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // Anything that is not a JSON-RPC message (a log line) is skipped.
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if tx.send(v).is_err() {
                    break;
                }
            }
        }
    });
    let deadline = Instant::now() + TIMEOUT;
    let mut send = |msg: Value| {
        writeln!(stdin, "{msg}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("it stopped reading its input: {e}"))
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "codex-bridge-doctor", "version": env!("CARGO_PKG_VERSION")}
        }}),
    )?;
    answer(&rx, 1, deadline)?;
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}))?;
    let listed = answer(&rx, 2, deadline)?;
    Ok(listed["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// The result of request `id`, skipping what else the server sends.
fn answer(rx: &mpsc::Receiver<Value>, id: i64, deadline: Instant) -> Result<Value, String> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = rx.recv_timeout(left).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => {
                format!("no answer within {} s", TIMEOUT.as_secs())
            }
            mpsc::RecvTimeoutError::Disconnected => "it exited before answering".to_owned(),
        })?;
        if msg["id"].as_i64() != Some(id) {
            continue;
        }
        if let Some(err) = msg.get("error") {
            return Err(format!("it answered an error: {err}"));
        }
        return Ok(msg["result"].clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn config(pairs: &[(&str, &str)]) -> Config {
        let env: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_sources(None, &env).unwrap()
    }

    #[test]
    fn the_agent_holding_the_bots_token_is_a_warning() {
        let bot = ("CODEX_BRIDGE_GITEA_TOKEN", "bot-admin-token-1");
        for c in [
            config(&[bot]),
            config(&[bot, ("CODEX_BRIDGE_GITEA_MCP_TOKEN", "bot-admin-token-1")]),
        ] {
            let check = token(&c);
            assert_eq!(check.outcome, crate::cli::doctor::Outcome::Warn);
            assert!(check.detail.contains("admin token"), "{}", check.detail);
            assert!(check.action.contains("gitea_mcp_token"), "{}", check.action);
        }
        let own = config(&[bot, ("CODEX_BRIDGE_GITEA_MCP_TOKEN", "agent-token-2")]);
        assert_eq!(token(&own).outcome, crate::cli::doctor::Outcome::Ok);
    }
}
