//! `codex-bridge gitea hook`: installs the webhook that sends a repository's
//! comments and reviews to the bridge, through Gitea's API.
//!
//! For each repository: read its hooks, decide ([`plan`], pure, shared with
//! `doctor` and the admin view), act, and print one line. The hook the
//! bridge wants is type `gitea`, JSON, signed with `webhook_secret`,
//! subscribed to [`BRIDGE_EVENTS`], active, on every branch. A hook
//! already pointing at the URL is kept when it is that,
//! edited when it is not (the events are always sent: Gitea resets a hook's
//! events to `push` when an edit leaves them out), and replaced when an edit
//! cannot fix it (another hook type, or `--recreate`: Gitea never shows a
//! hook's secret and cannot change it, so a changed `webhook_secret` reaches
//! a hook only through a new one). Further hooks at the same URL would
//! deliver every comment twice: they are removed. Running it again changes
//! nothing. Each repository hooked is registered as known in the store
//! (when it can be opened), so the catch-up covers it from then on.

use crate::config::{env_name, Config, WEBHOOK_PATH};
use crate::domain::keys::is_gitea_name;
use crate::domain::RepoKey;
use crate::gitea::hooks::plan::{names, plan, Action, Drift, ReplaceWhy, BRIDGE_EVENTS};
use crate::gitea::hooks::{Hook, HookContentType, HookEdit, HookEvent, NewHook};
use crate::gitea::{GiteaClient, GiteaError};
use crate::store::repositories::{self, KnownRepository, Registered};
use crate::store::DbConn;
use anyhow::bail;
use secrecy::SecretString;
use std::fmt;
use std::str::FromStr;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["repo", "all"])))]
pub struct HookArgs {
    /// The repository, as OWNER/NAME (repeat for several).
    #[arg(long, value_name = "OWNER/NAME")]
    pub repo: Vec<RepoName>,
    /// Every repository the bot administers (GET /user/repos, admin permission).
    #[arg(long)]
    pub all: bool,
    /// Where Gitea sends the webhooks: the bridge's /api/gitea/webhook as Gitea
    /// reaches it. Default: public_url + /api/gitea/webhook, when public_url is set.
    #[arg(long, value_name = "URL", value_parser = parse_url)]
    pub url: Option<String>,
    /// Replace the hook even when it looks right, so that it carries the current
    /// webhook_secret (Gitea never shows a hook's secret and cannot change it).
    #[arg(long)]
    pub recreate: bool,
}

pub(super) fn parse_url(s: &str) -> Result<String, String> {
    let host = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"));
    match host {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(s.to_owned()),
        _ => Err(
            "expected an http:// or https:// URL, e.g. https://bridge.example/api/gitea/webhook"
                .into(),
        ),
    }
}

/// A repository as `OWNER/NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoName {
    pub owner: String,
    pub name: String,
}

impl FromStr for RepoName {
    type Err = String;

    fn from_str(s: &str) -> Result<RepoName, String> {
        match s.split_once('/') {
            Some((owner, name)) if is_gitea_name(owner) && is_gitea_name(name) => Ok(RepoName {
                owner: owner.to_owned(),
                name: name.to_owned(),
            }),
            _ => Err(format!(
                "expected OWNER/NAME (letters, digits, '-', '_', '.'), got {s:?}"
            )),
        }
    }
}

impl fmt::Display for RepoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// What was done to one repository.
enum Outcome {
    Created { id: i64 },
    Unchanged { id: i64 },
    Updated { id: i64, drift: Vec<Drift> },
    Replaced { old: i64, new: i64, why: ReplaceWhy },
}

impl Outcome {
    /// The hook kept the secret it was made with (which nobody can read).
    fn kept_secret(&self) -> bool {
        matches!(self, Outcome::Unchanged { .. } | Outcome::Updated { .. })
    }

    /// The line printed for the repository, after its name.
    fn describe(&self, url: &str, removed: &[i64]) -> String {
        let events = names(&BRIDGE_EVENTS);
        let line = match self {
            Outcome::Created { id } => format!("created webhook {id}: sends {events} to {url}"),
            Outcome::Unchanged { id } => {
                format!("unchanged: webhook {id} already sends {events} to {url}")
            }
            Outcome::Updated { id, drift } => {
                let drift: Vec<String> = drift.iter().map(Drift::to_string).collect();
                format!("updated webhook {id} ({})", drift.join("; "))
            }
            Outcome::Replaced { old, new, why } => {
                let why = match why {
                    ReplaceWhy::Asked => "--recreate".to_owned(),
                    ReplaceWhy::Kind(kind) => {
                        format!("it was a {kind} hook, which an edit cannot change")
                    }
                };
                format!("replaced webhook {old} with webhook {new} ({why})")
            }
        };
        if removed.is_empty() {
            return line;
        }
        let ids: Vec<String> = removed.iter().map(i64::to_string).collect();
        format!("{line}; removed duplicate webhook {}", ids.join(", "))
    }
}

/// `gitea_url`, `gitea_token` and `webhook_secret`, or an error naming the
/// one missing.
fn settings(config: &Config) -> anyhow::Result<(String, SecretString, SecretString)> {
    let missing = |key: &str, why: &str| {
        anyhow::anyhow!(
            "config key `{key}` is not set: {why} (set it in the config file or as {})",
            env_name(key)
        )
    };
    let Some(url) = config.gitea_url.clone() else {
        return Err(missing("gitea_url", "`gitea hook` talks to Gitea's API"));
    };
    let Some(token) = config.gitea_token.clone() else {
        return Err(missing(
            "gitea_token",
            "`gitea hook` needs the token of a user who administers the repositories",
        ));
    };
    let Some(secret) = config.webhook_secret.clone() else {
        return Err(missing(
            "webhook_secret",
            "the hook is signed with the secret the server checks; a server that \
             generated its own keeps it in <state_dir>/generated-secrets.toml",
        ));
    };
    Ok((url, token, secret))
}

/// Runs the command: one line per repository on stdout; an error (so a
/// non-zero exit) when any repository failed.
pub fn run(config: &Config, args: &HookArgs) -> anyhow::Result<()> {
    let url = hook_url(config, args)?;
    let url = url.as_str();
    let (gitea_url, token, secret) = settings(config)?;
    let client = GiteaClient::new(&gitea_url, token);
    let repos = if args.all {
        admin_repos(&client)?
    } else {
        args.repo.clone()
    };
    if repos.is_empty() {
        println!(
            "no repository: the bot administers none (GET /user/repos shows no admin permission)"
        );
        return Ok(());
    }
    let (mut failed, mut kept_secret, mut hooked) = (0, false, Vec::new());
    for repo in &repos {
        match install(&client, repo, url, &secret, args.recreate) {
            Ok((outcome, removed)) => {
                kept_secret |= outcome.kept_secret();
                println!("{repo}: {}", outcome.describe(url, &removed));
                hooked.push(repo);
            }
            Err(why) => {
                failed += 1;
                println!("{repo}: failed: {why}");
            }
        }
    }
    if kept_secret {
        println!(
            "note: Gitea never shows a webhook's secret and cannot change it; if webhook_secret \
             changed since these hooks were made, run again with --recreate"
        );
    }
    register_all(config, &client, &hooked);
    if failed > 0 {
        bail!(
            "{failed} of {} repositories failed (see above)",
            repos.len()
        );
    }
    Ok(())
}

/// `--url`, or `public_url` and the webhook path.
fn hook_url(config: &Config, args: &HookArgs) -> anyhow::Result<String> {
    match (&args.url, config.webhook_url()) {
        (Some(url), _) => Ok(url.clone()),
        (None, Some(url)) => Ok(url),
        (None, None) => bail!(
            "no webhook URL: pass --url https://<bridge>{WEBHOOK_PATH}, or set config key \
             `public_url` (or {}) to this server's external base URL",
            env_name("public_url")
        ),
    }
}

/// Registers the hooked repositories as known, so that the catch-up covers
/// them from now on: a line for each one new to the store, or one note
/// saying why none was. The hooks stand either way, so this never fails
/// the run.
fn register_all(config: &Config, client: &GiteaClient, repos: &[&RepoName]) {
    if repos.is_empty() {
        return;
    }
    let mut conn = match super::connect(config) {
        Ok(conn) => conn,
        Err(e) => {
            println!(
                "note: not registered as known repositories ({e:#}); the catch-up covers \
                 a repository from its first webhook on, or run this again once the \
                 database is there"
            );
            return;
        }
    };
    for repo in repos {
        match register(&mut conn, client, config, repo) {
            Ok(Registered::New) => {
                println!("{repo}: registered: the catch-up reads its comments from now on")
            }
            Ok(Registered::Known) => {}
            Err(why) => println!("{repo}: not registered: {why}"),
        }
    }
}

fn register(
    conn: &mut DbConn,
    client: &GiteaClient,
    config: &Config,
    repo: &RepoName,
) -> Result<Registered, String> {
    let repo_key =
        RepoKey::new(&config.instance_id, &repo.owner, &repo.name).map_err(|e| e.to_string())?;
    // The clone URL is needed to run a task; a webhook would carry it.
    let info = client
        .get_repo(&repo.owner, &repo.name)
        .map_err(|e| explain(&e, Some(repo)))?;
    let known = KnownRepository {
        repo_key,
        owner: repo.owner.clone(),
        name: repo.name.clone(),
        clone_url: Some(info.clone_url).filter(|u| !u.is_empty()),
        default_branch: Some(info.default_branch).filter(|b| !b.is_empty()),
    };
    repositories::register(conn, &known, "cli:gitea-hook").map_err(|e| e.to_string())
}

/// `--all`: the repositories whose `permissions.admin` the bot holds.
fn admin_repos(client: &GiteaClient) -> anyhow::Result<Vec<RepoName>> {
    let listed = client.list_my_repos().map_err(|e| {
        anyhow::anyhow!("cannot list the bot's repositories: {}", explain(&e, None))
    })?;
    Ok(listed
        .into_iter()
        .filter(|r| r.permissions.admin)
        .map(|r| RepoName {
            owner: r.owner.login,
            name: r.name,
        })
        .collect())
}

/// Reads, decides, acts; the outcome and the duplicates removed, or why not.
fn install(
    client: &GiteaClient,
    repo: &RepoName,
    url: &str,
    secret: &SecretString,
    recreate: bool,
) -> Result<(Outcome, Vec<i64>), String> {
    let (owner, name) = (repo.owner.as_str(), repo.name.as_str());
    let fail = |e: GiteaError| explain(&e, Some(repo));
    let hooks = client.list_hooks(owner, name).map_err(fail)?;
    let plan = plan(&hooks, url, recreate);
    let create = || {
        let made = client
            .create_hook(
                owner,
                name,
                &NewHook {
                    url,
                    content_type: HookContentType::Json,
                    secret,
                    events: &BRIDGE_EVENTS,
                },
            )
            .map_err(fail)?;
        check_kept(&made)?;
        Ok::<_, String>(made.id)
    };
    let outcome = match plan.action {
        Action::Create => Outcome::Created { id: create()? },
        Action::Keep { id } => Outcome::Unchanged { id },
        Action::Update { id, drift } => {
            let edited = client
                .edit_hook(
                    owner,
                    name,
                    id,
                    &HookEdit {
                        url,
                        content_type: HookContentType::Json,
                        events: &BRIDGE_EVENTS,
                        branch_filter: "*",
                        active: true,
                    },
                )
                .map_err(fail)?;
            check_kept(&edited)?;
            Outcome::Updated { id, drift }
        }
        Action::Replace { id, why } => {
            let new = create()?;
            client.delete_hook(owner, name, id).map_err(|e| {
                format!(
                    "made webhook {new}, but webhook {id} is still there: {}",
                    explain(&e, Some(repo))
                )
            })?;
            Outcome::Replaced { old: id, new, why }
        }
    };
    for &dup in &plan.duplicates {
        client.delete_hook(owner, name, dup).map_err(|e| {
            format!(
                "the hook is in place, but duplicate webhook {dup} is still there: {}",
                explain(&e, Some(repo))
            )
        })?;
    }
    Ok((outcome, plan.duplicates))
}

/// A Gitea that does not know an event drops it silently: say so rather
/// than report a hook that will never deliver reviews.
fn check_kept(hook: &Hook) -> Result<(), String> {
    let missing: Vec<HookEvent> = BRIDGE_EVENTS
        .iter()
        .filter(|e| !hook.events.contains(e))
        .cloned()
        .collect();
    if missing.is_empty() && hook.active {
        return Ok(());
    }
    Err(format!(
        "Gitea kept webhook {} without {}{}: it may be too old for them; \
         upgrade Gitea or set the hook up by hand",
        hook.id,
        names(&missing),
        if hook.active { "" } else { " (and inactive)" }
    ))
}

/// A failure as an operator reads it: what happened and what to do.
fn explain(e: &GiteaError, repo: Option<&RepoName>) -> String {
    let repo = repo.map_or_else(|| "the repositories".to_owned(), RepoName::to_string);
    match e.status() {
        Some(401) => format!("{e}; check gitea_token"),
        Some(403) => format!(
            "{e}; the bot must administer {repo}: make it an admin collaborator, \
             or add the webhook by hand in the repository's settings"
        ),
        Some(404) => format!(
            "{e}; Gitea shows the bot no repository {repo}: check the name and that \
             the bot is a collaborator"
        ),
        Some(422) => format!("{e}; check --url"),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://bridge.example/api/gitea/webhook";

    #[test]
    fn repository_names_and_urls_are_checked() {
        let r: RepoName = "acme/widgets".parse().unwrap();
        assert_eq!((r.owner.as_str(), r.name.as_str()), ("acme", "widgets"));
        assert_eq!(r.to_string(), "acme/widgets");
        for bad in [
            "acme",
            "acme/",
            "/widgets",
            "acme/wid/gets",
            "acme/wid gets",
            "../x",
        ] {
            assert!(bad.parse::<RepoName>().is_err(), "{bad}");
        }
        assert!(parse_url(URL).is_ok());
        for bad in ["bridge.example/hook", "ftp://x", "https://", "http:///x"] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }
}
