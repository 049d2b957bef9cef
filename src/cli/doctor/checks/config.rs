//! The configuration: it loaded (so every key is valid), and the secrets are
//! set and long enough. A secret is judged by its length only, never shown.

use super::super::Check;
use crate::config::{env_name, Config};
use secrecy::{ExposeSecret, SecretString};

const AREA: &str = "config";

/// Shorter secrets are guessable.
const MIN_SECRET_LEN: usize = 16;

pub fn check(config: &Config) -> Vec<Check> {
    let generated = generated_keys(config);
    let mut out = vec![Check::ok(AREA, "keys", "every key is valid")];
    for (key, value) in [
        ("webhook_secret", &config.webhook_secret),
        ("admin_token", &config.admin_token),
    ] {
        out.push(server_secret(
            key,
            value.as_ref(),
            generated.contains(&key.to_owned()),
            config,
        ));
    }
    out.push(match &config.gitea_url {
        Some(url) => Check::ok(AREA, "gitea_url", url.clone()),
        None => Check::fail(
            AREA,
            "gitea_url",
            "not set",
            format!(
                "set gitea_url (or {}) to Gitea's address",
                env_name("gitea_url")
            ),
        ),
    });
    out.push(match &config.gitea_token {
        Some(t) if t.expose_secret().trim().is_empty() => Check::fail(
            AREA,
            "gitea_token",
            "empty",
            "set gitea_token to the bot's Gitea access token",
        ),
        Some(_) => Check::ok(AREA, "gitea_token", "set"),
        None => Check::fail(
            AREA,
            "gitea_token",
            "not set",
            format!(
                "set gitea_token (or {}) to the bot's Gitea access token",
                env_name("gitea_token")
            ),
        ),
    });
    out
}

/// The keys the server generated into `state_dir/generated-secrets.toml`.
fn generated_keys(config: &Config) -> Vec<String> {
    std::fs::read_to_string(config.state_dir.join("generated-secrets.toml"))
        .ok()
        .and_then(|text| text.parse::<toml::Table>().ok())
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default()
}

fn server_secret(
    key: &'static str,
    value: Option<&SecretString>,
    generated: bool,
    config: &Config,
) -> Check {
    match value {
        Some(s) if s.expose_secret().chars().count() < MIN_SECRET_LEN => Check::warn(
            AREA,
            key,
            format!("shorter than {MIN_SECRET_LEN} characters"),
            format!("set {key} to a longer one (e.g. `openssl rand -hex 32`)"),
        ),
        Some(_) => Check::ok(AREA, key, "set"),
        None if generated => Check::ok(
            AREA,
            key,
            format!(
                "generated, in {}",
                config.state_dir.join("generated-secrets.toml").display()
            ),
        ),
        None => Check::warn(
            AREA,
            key,
            "not set; the server generates one at its first start",
            format!("set {key} (or {}) to choose it", env_name(key)),
        ),
    }
}
