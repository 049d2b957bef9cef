//! A repository's comments across its Issues and Pull Requests (`GET
//! /repos/{o}/{r}/issues/comments`), for finding comments whose webhook
//! never arrived.
//!
//! Gitea's rules: only plain comments (no timeline events, no inline review
//! comments); ordered by creation time, then id; `since` and `before` are
//! inclusive and compare the *updated* time, so an old comment edited
//! lately comes back, at its old place in the order; timestamps have whole
//! seconds. Without `page` Gitea would return everything at once; the
//! client pages.

use super::client::{GiteaClient, GiteaError, User};
use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};
use serde::Deserialize;

/// A comment as the repository listing shows it (`api.Comment`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RepoComment {
    pub id: i64,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub user: Option<User>,
    #[serde(default)]
    pub html_url: String,
    /// The Issue's page; empty on a Pull Request's comment.
    #[serde(default)]
    pub issue_url: String,
    /// The Pull Request's page; empty on an Issue's comment.
    #[serde(default)]
    pub pull_request_url: String,
    /// RFC 3339, whole seconds.
    #[serde(default)]
    pub created_at: String,
    #[serde(default)]
    pub updated_at: String,
    /// Its attachments (`api.Attachment`), by id.
    #[serde(default)]
    pub assets: Vec<Asset>,
}

/// An attachment of a comment: only its id is read.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Asset {
    pub id: i64,
}

impl RepoComment {
    pub fn author(&self) -> &str {
        self.user.as_ref().map(|u| u.login.as_str()).unwrap_or("")
    }

    /// On a Pull Request rather than an Issue.
    pub fn is_pull(&self) -> bool {
        !self.pull_request_url.is_empty()
    }

    /// The number of the Issue or Pull Request it is on: Gitea's comment
    /// carries no number, only the page's URL, which ends in it.
    pub fn number(&self) -> Option<i64> {
        let page = if self.is_pull() {
            &self.pull_request_url
        } else {
            &self.issue_url
        };
        page.trim_end_matches('/').rsplit('/').next()?.parse().ok()
    }

    pub fn created(&self) -> Option<DateTime<FixedOffset>> {
        DateTime::parse_from_rfc3339(&self.created_at).ok()
    }

    pub fn updated(&self) -> Option<DateTime<FixedOffset>> {
        DateTime::parse_from_rfc3339(&self.updated_at).ok()
    }
}

impl GiteaClient {
    /// The repository's comments updated at or after `since` (and at or
    /// before `before`), in Gitea's order (creation, then id), all pages.
    /// Gitea compares whole seconds: pass the last pass's start, not its
    /// end, and expect to see a boundary comment again.
    pub fn list_repo_comments(
        &self,
        owner: &str,
        repo: &str,
        since: Option<DateTime<Utc>>,
        before: Option<DateTime<Utc>>,
    ) -> Result<Vec<RepoComment>, GiteaError> {
        let what = format!("the comments of {owner}/{repo}");
        let path = format!("{}/issues/comments", Self::repo_path(owner, repo));
        let stamp = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        let mut query = Vec::new();
        if let Some(t) = since {
            query.push(("since", stamp(t)));
        }
        if let Some(t) = before {
            query.push(("before", stamp(t)));
        }
        self.read_all(&path, &query, &what)
    }
}

/// A part of a repository's comment listing ([`GiteaClient::list_repo_comments_from`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentListing {
    pub comments: Vec<RepoComment>,
    /// Every comment updated since the time asked for is here; `false`: the
    /// page limit ended the read, and more follow (each created at or after
    /// the last one here, in Gitea's order).
    pub complete: bool,
}

impl GiteaClient {
    /// The repository's comments updated at or after `since`, in Gitea's
    /// order, at most `max_pages` pages of them: a caller that must not
    /// read for ever learns whether it has them all.
    pub fn list_repo_comments_from(
        &self,
        owner: &str,
        repo: &str,
        since: DateTime<Utc>,
        max_pages: u32,
    ) -> Result<CommentListing, GiteaError> {
        let what = format!("the comments of {owner}/{repo}");
        let path = format!("{}/issues/comments", Self::repo_path(owner, repo));
        let since = since.to_rfc3339_opts(SecondsFormat::Secs, true);
        let pages = self.read_pages(&path, &[("since", since)], &what, max_pages)?;
        Ok(CommentListing {
            comments: pages.items,
            complete: pages.complete,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_comment_knows_where_it_is() {
        let on_pull: RepoComment = serde_json::from_value(json!({
            "id": 9, "html_url": "https://g.example/acme/w/pulls/12#issuecomment-9",
            "pull_request_url": "https://g.example/acme/w/pulls/12", "issue_url": "",
            "user": {"login": "bob"}, "body": "@ccbot hi",
            "created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-02T03:04:06+02:00"
        }))
        .unwrap();
        assert!(on_pull.is_pull());
        assert_eq!(on_pull.number(), Some(12));
        assert_eq!(on_pull.author(), "bob");
        assert_eq!(
            on_pull.updated().unwrap().with_timezone(&Utc).to_rfc3339(),
            "2026-01-02T01:04:06+00:00"
        );
        let on_issue: RepoComment = serde_json::from_value(json!({
            "id": 10, "issue_url": "https://g.example/acme/w/issues/3", "pull_request_url": ""
        }))
        .unwrap();
        assert_eq!((on_issue.is_pull(), on_issue.number()), (false, Some(3)));
        let nowhere: RepoComment = serde_json::from_value(json!({"id": 11})).unwrap();
        assert_eq!(nowhere.number(), None);
    }
}
