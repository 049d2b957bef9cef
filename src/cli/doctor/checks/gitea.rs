//! Gitea: reachable (and its version), the token valid, the token's user
//! the configured `bot_login`, and for each known repository the bot's
//! permission (admin: the bridge reads commenters' permissions, which only
//! a repository admin may) and its webhook to this server, judged by the
//! same plan as `gitea hook`.

use super::super::{Check, Outcome};
use crate::cli::hook::RepoName;
use crate::config::Config;
use crate::gitea::hooks::plan::{HookState, Plan};
use crate::gitea::{GiteaClient, GiteaError, Permission};

const AREA: &str = "gitea";

/// The repositories to check: those the store has registered and those
/// the `repositories` key configures, each once (Gitea names are
/// case-insensitive), in name order.
pub fn known_repos(config: &Config, stored: Vec<(String, String)>) -> Vec<RepoName> {
    let configured = config
        .repositories
        .keys()
        .filter_map(|k| k.parse::<RepoName>().ok());
    let stored = stored
        .into_iter()
        .map(|(owner, name)| RepoName { owner, name });
    let mut all: Vec<RepoName> = stored.chain(configured).collect();
    all.sort_by_key(|r| r.to_string().to_lowercase());
    all.dedup_by_key(|r| r.to_string().to_lowercase());
    all
}

pub fn check(config: &Config, repos: &[RepoName], url: Option<&str>) -> Vec<Check> {
    // Without these the config lines already failed, saying what to set.
    let (Some(base), Some(token)) = (&config.gitea_url, &config.gitea_token) else {
        return Vec::new();
    };
    // One try each: an unreachable Gitea answers within the connect timeout.
    let client = GiteaClient::new(base, token.clone()).with_read_backoff(Vec::new());
    let mut out = Vec::new();
    match client.version() {
        Ok(v) => out.push(Check::ok(AREA, "reachable", format!("{base}, Gitea {v}"))),
        // Gitea refuses even its version to a token it does not know: it
        // answered, so it is reachable; the token line says the rest.
        Err(e) if e.status() == Some(401) => out.push(Check::ok(
            AREA,
            "reachable",
            format!("{base} (its version is shown only to a valid token)"),
        )),
        Err(e) => {
            out.push(Check::fail(
                AREA,
                "reachable",
                format!("{e}; the other Gitea checks were skipped"),
                "check gitea_url and that this host reaches Gitea",
            ));
            return out;
        }
    }
    let login = match client.current_user() {
        Ok(user) => {
            out.push(Check::ok(
                AREA,
                "token",
                format!("valid, for user {}", user.login),
            ));
            user.login
        }
        Err(e) => {
            let action = if e.status() == Some(401) {
                "set gitea_token to a valid access token of the bot"
            } else {
                "check gitea_token"
            };
            out.push(Check::fail(
                AREA,
                "token",
                format!("{e}; the repository checks were skipped"),
                action,
            ));
            return out;
        }
    };
    out.push(if login.eq_ignore_ascii_case(&config.bot_login) {
        Check::ok(AREA, "bot_login", login.clone())
    } else {
        Check::fail(
            AREA,
            "bot_login",
            format!(
                "is {:?} but gitea_token belongs to {login:?}",
                config.bot_login
            ),
            format!("set bot_login = \"{login}\", or use the bot's token"),
        )
    });
    if repos.is_empty() {
        out.push(Check::ok(
            AREA,
            "repositories",
            "none registered or configured yet",
        ));
    }
    for repo in repos {
        let admin = match client.permission(&repo.owner, &repo.name, &login) {
            Ok(Permission::Admin) => {
                out.push(Check::ok(AREA, format!("permission {repo}"), "admin"));
                true
            }
            Ok(p) => {
                out.push(Check::fail(
                    AREA,
                    format!("permission {repo}"),
                    format!(
                        "{login} has {} (admin is needed to read commenters' permissions and the webhooks)",
                        p.as_str()
                    ),
                    format!("make {login} an admin collaborator of {repo}"),
                ));
                false
            }
            Err(e) => {
                out.push(Check::fail(
                    AREA,
                    format!("permission {repo}"),
                    e.to_string(),
                    format!("check that {repo} exists and {login} is a collaborator"),
                ));
                false
            }
        };
        out.push(hook_check(&client, repo, url, admin));
    }
    out
}

fn hook_check(client: &GiteaClient, repo: &RepoName, url: Option<&str>, admin: bool) -> Check {
    let name = format!("hook {repo}");
    let Some(url) = url else {
        return Check::warn(
            AREA,
            name,
            "not judged: the URL Gitea should call is unknown",
            "set public_url, or pass --url https://<bridge>/api/gitea/webhook",
        );
    };
    if !admin {
        return Check::warn(
            AREA,
            name,
            "not checked: only a repository admin can read its webhooks",
            "",
        );
    }
    match client.inspect_hooks(&repo.owner, &repo.name, url) {
        Ok(report) => {
            let (outcome, detail) = judge(&report.plan, url);
            let action = if outcome == Outcome::Ok {
                String::new()
            } else {
                format!("run `codex-bridge gitea hook --repo {repo} --url {url}`")
            };
            Check {
                area: AREA,
                name,
                outcome,
                detail,
                action,
            }
        }
        Err(e) => Check::fail(AREA, name, e.to_string(), hook_action(&e)),
    }
}

fn hook_action(e: &GiteaError) -> &'static str {
    match e.status() {
        Some(403) => "make the bot an admin collaborator of the repository",
        _ => "check gitea_url and gitea_token",
    }
}

/// A repository's webhook state from the plan `gitea hook` would follow:
/// nothing to do is ok; duplicates (every comment delivered twice) warn;
/// anything else fails.
pub fn judge(plan: &Plan, url: &str) -> (Outcome, String) {
    let outcome = match plan.state() {
        HookState::Ok => Outcome::Ok,
        HookState::Duplicated => Outcome::Warn,
        HookState::Missing | HookState::Drifted => Outcome::Fail,
    };
    (outcome, plan.describe(url))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitea::hooks::plan::{Action, Drift};

    const URL: &str = "https://bridge.example/api/gitea/webhook";

    #[test]
    fn a_right_hook_is_ok_and_anything_else_says_why() {
        let keep = Plan {
            action: Action::Keep { id: 3 },
            duplicates: vec![],
        };
        assert_eq!(judge(&keep, URL).0, Outcome::Ok);
        let twice = Plan {
            action: Action::Keep { id: 3 },
            duplicates: vec![4],
        };
        assert_eq!(judge(&twice, URL).0, Outcome::Warn);
        let none = Plan {
            action: Action::Create,
            duplicates: vec![],
        };
        assert_eq!(
            judge(&none, URL),
            (Outcome::Fail, format!("no webhook sends to {URL}"))
        );
        let off = Plan {
            action: Action::Update {
                id: 5,
                drift: vec![Drift::Inactive],
            },
            duplicates: vec![],
        };
        assert_eq!(
            judge(&off, URL),
            (
                Outcome::Fail,
                "webhook 5 is wrong: it was inactive".to_owned()
            )
        );
    }
}
