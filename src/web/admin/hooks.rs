//! `GET /api/gitea-workflow/repos/{repoKey}/hook`: where a repository's
//! webhook to this server stands, judged as `gitea hook` and `doctor` judge
//! it, against the URL the server would install (`public_url` and the
//! webhook path). Gitea is asked on each request (one listing of the
//! repository's hooks); when it cannot be asked the state is `unknown`,
//! still a 200, with why and what to do.

use crate::domain::RepoKey;
use crate::gitea::hooks::plan::HookState;
use crate::gitea::hooks::HookReport;
use crate::gitea::{GiteaClient, GiteaError};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Serialize;

/// The answer, one repository's hook.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct HookView {
    /// The repository key, as asked.
    repo: String,
    /// `ok`, `missing`, `drifted`, `duplicated`, or `unknown` (Gitea could
    /// not be asked; `detail` says why).
    state: &'static str,
    /// What was found, in a sentence.
    detail: String,
    /// The hook at the URL that `gitea hook` would keep or mend.
    hook_id: Option<i64>,
    /// Where the hook should send (`None` without `public_url`).
    url: Option<String>,
    events: Option<Vec<String>>,
    content_type: Option<String>,
    active: Option<bool>,
    /// What to do about it; `None` when nothing.
    action: Option<String>,
}

impl HookView {
    fn unknown(repo: &RepoKey, url: Option<String>, detail: String, action: String) -> HookView {
        HookView {
            repo: repo.as_str().to_owned(),
            state: "unknown",
            detail,
            hook_id: None,
            url,
            events: None,
            content_type: None,
            active: None,
            action: Some(action),
        }
    }

    fn judged(repo: &RepoKey, url: String, report: HookReport) -> HookView {
        let state = report.plan.state();
        let fix = format!(
            "run `codex-bridge gitea hook --repo {}/{}`",
            repo.owner(),
            repo.name()
        );
        let hook = report.hook;
        HookView {
            repo: repo.as_str().to_owned(),
            state: state.as_str(),
            detail: report.plan.describe(&url),
            hook_id: hook.as_ref().map(|h| h.id),
            events: hook
                .as_ref()
                .map(|h| h.events.iter().map(|e| e.as_str().to_owned()).collect()),
            content_type: hook
                .as_ref()
                .and_then(|h| h.config.content_type.as_ref())
                .map(|c| c.as_str().to_owned()),
            active: hook.as_ref().map(|h| h.active),
            url: Some(url),
            action: (state != HookState::Ok).then_some(fix),
        }
    }
}

/// What an operator does about a Gitea that would not show the hooks.
fn action_for(e: &GiteaError) -> &'static str {
    match e.status() {
        Some(401) => "set gitea_token to a valid access token of the bot",
        Some(403) => {
            "make the bot an admin collaborator of the repository (only admins see webhooks)"
        }
        Some(404) => "check that the repository exists and the bot is a collaborator",
        _ => "check gitea_url and that this server reaches Gitea",
    }
}

pub async fn show(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let text = super::actors::decode_key(&path.into_inner());
    let repo = RepoKey::parse(&text)
        .map_err(|e| ApiError::NotFound(format!("repository {text} ({e})")))?;
    let config = &state.config;
    if !repo.instance().eq_ignore_ascii_case(&config.instance_id) {
        return Err(ApiError::NotFound(format!(
            "repository {text} (this server is instance {})",
            config.instance_id
        )));
    }
    let url = config.webhook_url();
    let (Some(base), Some(token)) = (&config.gitea_url, &config.gitea_token) else {
        return Ok(HttpResponse::Ok().json(HookView::unknown(
            &repo,
            url,
            "Gitea is not configured: its webhooks cannot be read".into(),
            "set gitea_url and gitea_token".into(),
        )));
    };
    let Some(url) = url else {
        return Ok(HttpResponse::Ok().json(HookView::unknown(
            &repo,
            None,
            "public_url is not set: the URL Gitea should call is unknown".into(),
            "set public_url to this server's external base URL".into(),
        )));
    };
    // One try: the page asks again on its next look.
    let client = GiteaClient::new(base, token.clone()).with_read_backoff(Vec::new());
    let (owner, name) = (repo.owner().to_owned(), repo.name().to_owned());
    let asked = url.clone();
    let report = tokio::task::spawn_blocking(move || client.inspect_hooks(&owner, &name, &asked))
        .await
        .map_err(|_| ApiError::Unavailable)?;
    let view = match report {
        Ok(report) => HookView::judged(&repo, url, report),
        Err(e) => HookView::unknown(&repo, Some(url), e.to_string(), action_for(&e).into()),
    };
    Ok(HttpResponse::Ok().json(view))
}
