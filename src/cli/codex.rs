//! `codex-bridge codex login|status|logout`: signs the server's Codex in
//! and out through the running server's admin API. The app-server that
//! server runs owns `codex_home`, so a sign-in made this way is where the
//! server looks, and the tasks waiting for it start at once. The server is
//! `--server URL` (by default `listen` from the configuration, on this
//! machine); the admin token is `admin_token`, or the one the server
//! generated into `state_dir`. The API key is read from stdin, never from
//! the command line, where `ps` shows it to everyone on the machine.

use crate::agent::account::{AccountStatus, DeviceCode, LoginStatus, NoRateLimits, RateLimits};
use crate::config::Config;
use anyhow::{bail, Context};
use clap::Subcommand;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::{BufRead, IsTerminal, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[derive(Debug, Subcommand)]
pub enum CodexCommand {
    /// Sign Codex in: with an OpenAI API key read from stdin
    /// (`printenv OPENAI_API_KEY | codex-bridge codex login`), or with
    /// --device-code through ChatGPT: it prints an address and a code to
    /// enter there, then waits until the sign-in is done.
    Login(LoginArgs),
    /// Show Codex's account and, for a ChatGPT account, its rate limits.
    Status(StatusArgs),
    /// Sign Codex out: its stored credentials are removed.
    Logout(LogoutArgs),
}

#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// The running codex-bridge server [default: `listen` of the configuration, on this machine].
    #[arg(long, value_name = "URL")]
    server: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct LoginArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Sign in with a ChatGPT account through a device code instead of an API key.
    #[arg(long)]
    device_code: bool,
    /// Who is signing in (audited as admin:<operator>).
    #[arg(long, env = "USER", default_value = "cli")]
    operator: String,
    /// Why, for the audit log.
    #[arg(long, default_value = "signed in from the command line")]
    reason: String,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Print the admin API's JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct LogoutArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Who is signing out (audited as admin:<operator>).
    #[arg(long, env = "USER", default_value = "cli")]
    operator: String,
    /// Why, for the audit log.
    #[arg(long, default_value = "signed out from the command line")]
    reason: String,
}

/// How often a device-code sign-in is asked about, and for how long: the
/// code itself expires after 15 minutes, and the server then says so.
const POLL_EVERY: Duration = Duration::from_secs(2);
const GIVE_UP_AFTER: Duration = Duration::from_secs(30 * 60);

pub fn codex_command(config: &Config, command: CodexCommand) -> anyhow::Result<()> {
    match command {
        CodexCommand::Login(args) => {
            let server = Server::new(config, args.server)?;
            if args.device_code {
                login_device_code(&server, &args.operator, &args.reason)
            } else {
                login_api_key(&server, &args.operator, &args.reason)
            }
        }
        CodexCommand::Status(args) => {
            let server = Server::new(config, args.server)?;
            let status: Value = server.get("/codex")?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&status)?);
                return Ok(());
            }
            let status: AccountStatus = serde_json::from_value(status)
                .context("the server's answer to GET /codex is not what this codex-bridge reads")?;
            print_status(&status);
            Ok(())
        }
        CodexCommand::Logout(args) => {
            let server = Server::new(config, args.server)?;
            let _: Value = server.post(
                "/codex/logout",
                &json!({ "operator": args.operator, "reason": args.reason }),
            )?;
            println!("Codex is signed out.");
            print_status(&server.get("/codex")?);
            Ok(())
        }
    }
}

fn login_api_key(server: &Server, operator: &str, reason: &str) -> anyhow::Result<()> {
    let key = read_api_key()?;
    if let Some(host) = server.cleartext_remote_host() {
        eprintln!(
            "warning: the API key goes to {host} over plain HTTP; prefer running this on the \
             server's machine, or an https:// --server"
        );
    }
    let body = json!({
        "type": "apiKey",
        "apiKey": key.expose_secret(),
        "operator": operator,
        "reason": reason,
    });
    let _: Value = server.post("/codex/login", &body)?;
    drop(body);
    println!("Codex is signed in with an API key.");
    print_status(&server.get("/codex")?);
    Ok(())
}

/// The key from stdin: a pipe to its end, a terminal one line.
fn read_api_key() -> anyhow::Result<SecretString> {
    let stdin = std::io::stdin();
    let mut text = String::new();
    if stdin.is_terminal() {
        eprint!(
            "OpenAI API key (shown as you type; to avoid that: \
             printenv OPENAI_API_KEY | codex-bridge codex login): "
        );
        let _ = std::io::stderr().flush();
        stdin.lock().read_line(&mut text)?;
    } else {
        stdin.lock().read_to_string(&mut text)?;
    }
    let key = SecretString::from(text.trim().to_owned());
    secrecy::zeroize::Zeroize::zeroize(&mut text);
    if key.expose_secret().is_empty() {
        bail!(
            "no API key on stdin: pipe it in, e.g. printenv OPENAI_API_KEY | codex-bridge codex login \
             (or sign in with a ChatGPT account: codex-bridge codex login --device-code)"
        );
    }
    Ok(key)
}

fn login_device_code(server: &Server, operator: &str, reason: &str) -> anyhow::Result<()> {
    let code: DeviceCode = server.post(
        "/codex/login",
        &json!({ "type": "deviceCode", "operator": operator, "reason": reason }),
    )?;
    println!(
        "To sign Codex in with your ChatGPT account, open\n\n    {}\n\nsign in there and enter the code\n\n    {}\n\n\
         Waiting for the sign-in to complete (sign-in {})…",
        code.verification_url, code.user_code, code.login_id
    );
    let _ = std::io::stdout().flush();
    let started = Instant::now();
    let path = format!("/codex/login/{}", code.login_id);
    loop {
        match server.get::<LoginStatus>(&path)? {
            LoginStatus::Pending if started.elapsed() < GIVE_UP_AFTER => {
                std::thread::sleep(POLL_EVERY)
            }
            LoginStatus::Pending => bail!(
                "the sign-in is still pending after {} minutes; start a new one",
                GIVE_UP_AFTER.as_secs() / 60
            ),
            LoginStatus::Completed => break,
            LoginStatus::Failed { error } => bail!("the sign-in failed: {error}"),
        }
    }
    println!("Codex is signed in.");
    print_status(&server.get("/codex")?);
    Ok(())
}

fn print_status(status: &AccountStatus) {
    let account = match &status.account {
        Some(account) => account.to_string(),
        None if status.requires_openai_auth => "none: signed out, and the model provider needs an \
             OpenAI account; tasks wait until Codex is signed in (codex-bridge codex login)"
            .to_owned(),
        None => "none (the model provider needs no OpenAI account)".to_owned(),
    };
    println!("account:      {account}");
    match &status.rate_limits {
        RateLimits::Read(limits) => {
            let windows = [
                ("primary", &limits.primary),
                ("secondary", &limits.secondary),
            ];
            let mut any = false;
            for (name, window) in windows {
                if let Some(w) = window {
                    let label = if any { "" } else { "rate limits:" };
                    println!("{label:<13} {name} {w}");
                    any = true;
                }
            }
            if !any {
                println!("rate limits:  none reported");
            }
        }
        RateLimits::Absent(NoRateLimits::NotApplicable) => {
            let why = match status.account {
                None => "no account",
                Some(_) => "only ChatGPT accounts have them",
            };
            println!("rate limits:  not applicable ({why})");
        }
        RateLimits::Absent(NoRateLimits::Unavailable) => println!(
            "rate limits:  unavailable: {}",
            status
                .rate_limits_error
                .as_deref()
                .unwrap_or("no reason given")
        ),
    }
}

/// The admin API of the running server.
struct Server {
    /// `http://HOST:PORT`, no trailing slash.
    base: String,
    token: SecretString,
    agent: ureq::Agent,
}

/// An error answer of the admin API.
#[derive(Deserialize)]
struct ErrorBody {
    code: String,
    message: String,
}

impl Server {
    fn new(config: &Config, server: ServerArgs) -> anyhow::Result<Server> {
        let token = config.known_admin_token()?.ok_or_else(|| {
            anyhow::anyhow!(
                "no admin token: set admin_token (CODEX_BRIDGE_ADMIN_TOKEN) to the server's, or run \
                 this with the server's configuration, whose state_dir holds the token it generated"
            )
        })?;
        let base = match server.server {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("http://{}", local_address(&config.listen)),
        };
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(5))
            // A sign-in waits for the app-server, which may have to start first.
            .timeout_read(Duration::from_secs(90))
            .build();
        Ok(Server { base, token, agent })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/gitea-workflow{path}", self.base)
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let req = self.agent.get(&self.url(path));
        self.send(path, self.authorized(req).call())
    }

    fn post<T: DeserializeOwned>(&self, path: &str, body: &Value) -> anyhow::Result<T> {
        let req = self.agent.post(&self.url(path));
        self.send(path, self.authorized(req).send_json(body))
    }

    fn authorized(&self, req: ureq::Request) -> ureq::Request {
        req.set(
            "Authorization",
            &format!("Bearer {}", self.token.expose_secret()),
        )
    }

    /// The answer's JSON, or what went wrong in words an operator can act on.
    fn send<T: DeserializeOwned>(
        &self,
        path: &str,
        result: Result<ureq::Response, ureq::Error>,
    ) -> anyhow::Result<T> {
        match result {
            Ok(resp) => resp.into_json().with_context(|| {
                format!("the answer of {}{path} is not what this codex-bridge reads", self.base)
            }),
            Err(ureq::Error::Status(401, _)) => bail!(
                "the server at {} refused the admin token: use the server's admin_token \
                 (CODEX_BRIDGE_ADMIN_TOKEN), or its configuration",
                self.base
            ),
            Err(ureq::Error::Status(status, resp)) => match resp.into_json::<ErrorBody>() {
                Ok(e) => bail!("the server refused ({status} {}): {}", e.code, e.message),
                Err(_) => bail!("the server at {} answered HTTP {status}", self.base),
            },
            Err(ureq::Error::Transport(t)) => bail!(
                "cannot reach the codex-bridge server at {}: {t}. Is it running (codex-bridge serve)? \
                 If it listens elsewhere, pass --server URL",
                self.base
            ),
        }
    }

    /// The host the server is reached at, when that is another machine over
    /// plain HTTP (where a key would cross the network readable).
    fn cleartext_remote_host(&self) -> Option<String> {
        let url = self.agent.get(&self.base).request_url().ok()?;
        let host = url.host().trim_start_matches('[').trim_end_matches(']');
        let local = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        (url.scheme() == "http" && !local).then(|| host.to_owned())
    }
}

/// Where a client on this machine reaches a server listening on `listen`:
/// an unspecified address (all interfaces) is reached on the loopback.
fn local_address(listen: &str) -> String {
    match listen.parse::<SocketAddr>() {
        Ok(SocketAddr::V4(a)) if a.ip().is_unspecified() => format!("127.0.0.1:{}", a.port()),
        Ok(SocketAddr::V6(a)) if a.ip().is_unspecified() => format!("[::1]:{}", a.port()),
        _ => listen.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_on_all_interfaces_is_reached_on_the_loopback() {
        assert_eq!(local_address("0.0.0.0:8080"), "127.0.0.1:8080");
        assert_eq!(local_address("[::]:8080"), "[::1]:8080");
        assert_eq!(local_address("127.0.0.1:9000"), "127.0.0.1:9000");
        assert_eq!(local_address("bridge.internal:80"), "bridge.internal:80");
    }

    #[test]
    fn only_plain_http_to_another_machine_is_cleartext() {
        let server = |base: &str| Server {
            base: base.into(),
            token: SecretString::from("t"),
            agent: ureq::agent(),
        };
        assert_eq!(
            server("http://127.0.0.1:8080").cleartext_remote_host(),
            None
        );
        assert_eq!(
            server("http://localhost:8080").cleartext_remote_host(),
            None
        );
        assert_eq!(server("http://[::1]:8080").cleartext_remote_host(), None);
        assert_eq!(
            server("https://bridge.example").cleartext_remote_host(),
            None
        );
        assert_eq!(
            server("http://bridge.example:8080").cleartext_remote_host(),
            Some("bridge.example".into())
        );
    }
}
