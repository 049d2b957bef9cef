//! Repository webhooks (`/repos/{owner}/{repo}/hooks`): list, create, edit,
//! delete. All of them need a repository administrator's token.
//!
//! What Gitea does that a caller must know: a hook is created inactive
//! unless `active` is sent; creating never looks for a hook with the same
//! URL (a second call makes a second hook); the secret is never shown and an
//! edit cannot change it (replace the hook instead); an edit rewrites the
//! events from what it is sent, nothing meaning `push` only, and clears the
//! branch filter and authorization header it is not sent. [`HookEdit`]
//! therefore always carries the events and the branch filter.

pub mod plan;

use super::client::{GiteaClient, GiteaError};
use plan::Plan;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::fmt;

/// An event a webhook subscribes to, as Gitea names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(from = "String", into = "String")]
pub enum HookEvent {
    /// A comment on an Issue.
    IssueComment,
    /// A comment in a Pull Request's conversation.
    PullRequestComment,
    /// A submitted review (Gitea delivers it as `pull_request_review_comment`,
    /// `_approved` or `_rejected`).
    PullRequestReview,
    Push,
    /// Any other (Gitea has about twenty).
    Other(String),
}

impl HookEvent {
    pub fn as_str(&self) -> &str {
        match self {
            HookEvent::IssueComment => "issue_comment",
            HookEvent::PullRequestComment => "pull_request_comment",
            HookEvent::PullRequestReview => "pull_request_review",
            HookEvent::Push => "push",
            HookEvent::Other(name) => name,
        }
    }
}

impl From<String> for HookEvent {
    fn from(name: String) -> HookEvent {
        match name.as_str() {
            "issue_comment" => HookEvent::IssueComment,
            "pull_request_comment" => HookEvent::PullRequestComment,
            "pull_request_review" => HookEvent::PullRequestReview,
            "push" => HookEvent::Push,
            _ => HookEvent::Other(name),
        }
    }
}

impl From<HookEvent> for String {
    fn from(event: HookEvent) -> String {
        event.as_str().to_owned()
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a hook sends its body.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(from = "String", into = "String")]
pub enum HookContentType {
    /// `application/json`: what the bridge's webhook endpoint reads.
    Json,
    /// `application/x-www-form-urlencoded`, `payload=<JSON>`.
    Form,
    Other(String),
}

impl HookContentType {
    pub fn as_str(&self) -> &str {
        match self {
            HookContentType::Json => "json",
            HookContentType::Form => "form",
            HookContentType::Other(name) => name,
        }
    }
}

impl From<String> for HookContentType {
    fn from(name: String) -> HookContentType {
        match name.as_str() {
            "json" => HookContentType::Json,
            "form" => HookContentType::Form,
            _ => HookContentType::Other(name),
        }
    }
}

impl From<HookContentType> for String {
    fn from(ct: HookContentType) -> String {
        ct.as_str().to_owned()
    }
}

/// A hook's `config` as Gitea shows it (never with the secret).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct HookConfig {
    #[serde(default)]
    pub url: String,
    pub content_type: Option<HookContentType>,
}

/// A repository webhook (`api.Hook`), as much of it as the bridge reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Hook {
    pub id: i64,
    /// `gitea`, `gogs`, `slack`, ...
    #[serde(rename = "type")]
    pub kind: String,
    pub config: HookConfig,
    /// In no stable order (Gitea lists them from a map).
    #[serde(default)]
    pub events: Vec<HookEvent>,
    #[serde(default)]
    pub active: bool,
    #[serde(default)]
    pub branch_filter: String,
}

/// A new `gitea` webhook, active, on every branch.
pub struct NewHook<'a> {
    pub url: &'a str,
    pub content_type: HookContentType,
    /// Signs every delivery; Gitea never shows it again.
    pub secret: &'a SecretString,
    pub events: &'a [HookEvent],
}

impl fmt::Debug for NewHook<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewHook")
            .field("url", &self.url)
            .field("content_type", &self.content_type)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

/// An edit of a webhook. Gitea rewrites the events and the branch filter
/// from every edit, so both are always sent; the secret cannot be changed.
#[derive(Debug, Clone)]
pub struct HookEdit<'a> {
    pub url: &'a str,
    pub content_type: HookContentType,
    pub events: &'a [HookEvent],
    /// `"*"` (or empty): every branch.
    pub branch_filter: &'a str,
    pub active: bool,
}

/// A repository's webhooks judged against the bridge's: the plan and the
/// hook it keeps or mends (to show what that hook is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookReport {
    pub plan: Plan,
    pub hook: Option<Hook>,
}

fn events_json(events: &[HookEvent]) -> Vec<&str> {
    events.iter().map(HookEvent::as_str).collect()
}

impl GiteaClient {
    fn hooks_path(owner: &str, repo: &str) -> String {
        format!("{}/hooks", Self::repo_path(owner, repo))
    }

    /// Every webhook of the repository (all pages).
    pub fn list_hooks(&self, owner: &str, repo: &str) -> Result<Vec<Hook>, GiteaError> {
        let what = format!("the webhooks of {owner}/{repo}");
        self.read_all(&Self::hooks_path(owner, repo), &[], &what)
    }

    /// Creates a webhook (one POST, never retried: a retry could make two).
    pub fn create_hook(
        &self,
        owner: &str,
        repo: &str,
        hook: &NewHook<'_>,
    ) -> Result<Hook, GiteaError> {
        let what = format!("a new webhook on {owner}/{repo}");
        let body = json!({
            "type": "gitea",
            "config": {
                "url": hook.url,
                "content_type": hook.content_type.as_str(),
                "secret": hook.secret.expose_secret(),
            },
            "events": events_json(hook.events),
            "branch_filter": "*",
            "active": true,
        });
        let reply = self.call("POST", &Self::hooks_path(owner, repo), Some(&body), &what)?;
        Self::decode(reply.body, &what)
    }

    /// Edits webhook `id` (one PATCH).
    pub fn edit_hook(
        &self,
        owner: &str,
        repo: &str,
        id: i64,
        edit: &HookEdit<'_>,
    ) -> Result<Hook, GiteaError> {
        let what = format!("webhook {id} of {owner}/{repo}");
        let body = json!({
            "config": {
                "url": edit.url,
                "content_type": edit.content_type.as_str(),
            },
            "events": events_json(edit.events),
            "branch_filter": edit.branch_filter,
            "active": edit.active,
        });
        let path = format!("{}/{id}", Self::hooks_path(owner, repo));
        let reply = self.call("PATCH", &path, Some(&body), &what)?;
        Self::decode(reply.body, &what)
    }

    /// Reads the repository's webhooks and judges them against the bridge's
    /// at `url` (what `gitea hook` would do, where they stand).
    pub fn inspect_hooks(
        &self,
        owner: &str,
        repo: &str,
        url: &str,
    ) -> Result<HookReport, GiteaError> {
        let hooks = self.list_hooks(owner, repo)?;
        let plan = plan::plan(&hooks, url, false);
        let hook = plan
            .hook_id()
            .and_then(|id| hooks.into_iter().find(|h| h.id == id));
        Ok(HookReport { plan, hook })
    }

    /// Deletes webhook `id`; one already gone (404) counts as deleted.
    pub fn delete_hook(&self, owner: &str, repo: &str, id: i64) -> Result<(), GiteaError> {
        let what = format!("webhook {id} of {owner}/{repo}");
        let path = format!("{}/{id}", Self::hooks_path(owner, repo));
        match self.call("DELETE", &path, None, &what) {
            Ok(_) => Ok(()),
            Err(e) if e.status() == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_reads_as_gitea_shows_it() {
        let hook: Hook = serde_json::from_value(json!({
            "id": 7, "type": "gitea", "branch_filter": "*",
            "config": {"content_type": "json", "url": "https://bridge.example/api/gitea/webhook"},
            "events": ["pull_request_review", "issue_comment", "wiki"],
            "authorization_header": "", "active": true,
            "updated_at": "2026-01-01T00:00:00Z", "created_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        assert_eq!(hook.config.content_type, Some(HookContentType::Json));
        assert_eq!(
            hook.events,
            [
                HookEvent::PullRequestReview,
                HookEvent::IssueComment,
                HookEvent::Other("wiki".into())
            ]
        );
        assert_eq!(
            String::from(HookEvent::PullRequestComment),
            "pull_request_comment"
        );
    }

    #[test]
    fn a_new_hook_keeps_its_secret_out_of_debug_output() {
        let secret = SecretString::from("hook-secret-123");
        let hook = NewHook {
            url: "https://bridge.example/api/gitea/webhook",
            content_type: HookContentType::Json,
            secret: &secret,
            events: &[HookEvent::IssueComment],
        };
        let shown = format!("{hook:?}");
        assert!(!shown.contains("hook-secret-123"), "{shown}");
        assert!(shown.contains("bridge.example"), "{shown}");
    }
}
