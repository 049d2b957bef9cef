//! Commit statuses: set one (`POST /repos/{o}/{r}/statuses/{sha}`, which
//! needs write access), list a commit's, read its combined state.
//!
//! Gitea's quirks: a status's state comes back under `status` (the request
//! says `state`); its `id` counts per commit from 1; an unknown commit is a
//! bare 500; the combined state is the worst of each context's latest, with
//! `error` reported as `failure`.

use super::client::{encode_segment, GiteaClient, GiteaError};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::fmt;

/// A status's state, as Gitea names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(from = "String", into = "String")]
pub enum CommitState {
    Pending,
    Success,
    Error,
    Failure,
    Warning,
    /// A word Gitea stored without knowing it (it checks none), or a newer
    /// Gitea's (`skipped`).
    Other(String),
}

impl CommitState {
    pub fn as_str(&self) -> &str {
        match self {
            CommitState::Pending => "pending",
            CommitState::Success => "success",
            CommitState::Error => "error",
            CommitState::Failure => "failure",
            CommitState::Warning => "warning",
            CommitState::Other(word) => word,
        }
    }
}

impl From<String> for CommitState {
    fn from(word: String) -> CommitState {
        match word.as_str() {
            "pending" => CommitState::Pending,
            "success" => CommitState::Success,
            "error" => CommitState::Error,
            "failure" => CommitState::Failure,
            "warning" => CommitState::Warning,
            _ => CommitState::Other(word),
        }
    }
}

impl From<CommitState> for String {
    fn from(state: CommitState) -> String {
        state.as_str().to_owned()
    }
}

impl fmt::Display for CommitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status to set.
#[derive(Debug, Clone)]
pub struct NewStatus<'a> {
    pub state: CommitState,
    /// Where the status links to (empty: nowhere).
    pub target_url: &'a str,
    pub description: &'a str,
    /// What the status is about, e.g. `codex-bridge`: a commit's combined
    /// state counts each context's latest status.
    pub context: &'a str,
}

/// A status as Gitea shows it (`api.CommitStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CommitStatus {
    /// Per commit, from 1.
    pub id: i64,
    #[serde(rename = "status")]
    pub state: CommitState,
    #[serde(default)]
    pub target_url: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub context: String,
    /// RFC 3339.
    #[serde(default)]
    pub created_at: String,
}

/// A commit's combined status (`api.CombinedStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CombinedStatus {
    /// `None` when the commit has no status at all.
    #[serde(default, deserialize_with = "empty_is_none")]
    pub state: Option<CommitState>,
    #[serde(default)]
    pub sha: String,
    /// Each context's latest status, most recent first.
    #[serde(default, deserialize_with = "null_is_empty")]
    pub statuses: Vec<CommitStatus>,
}

fn empty_is_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<CommitState>, D::Error> {
    let word = Option::<String>::deserialize(d)?;
    Ok(word.filter(|w| !w.is_empty()).map(CommitState::from))
}

fn null_is_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<CommitStatus>, D::Error> {
    Ok(Option::<Vec<CommitStatus>>::deserialize(d)?.unwrap_or_default())
}

impl GiteaClient {
    /// Sets a status on commit `sha` (one POST, never retried: setting the
    /// same status twice is harmless but costs a row, so the caller
    /// decides).
    pub fn create_status(
        &self,
        owner: &str,
        repo: &str,
        sha: &str,
        status: &NewStatus<'_>,
    ) -> Result<CommitStatus, GiteaError> {
        let what = format!(
            "the {} status {} of {owner}/{repo}@{sha}",
            status.context, status.state
        );
        let path = format!(
            "{}/statuses/{}",
            Self::repo_path(owner, repo),
            encode_segment(sha)
        );
        let body = json!({
            "state": status.state.as_str(),
            "target_url": status.target_url,
            "description": status.description,
            "context": status.context,
        });
        let reply = self.call("POST", &path, Some(&body), &what)?;
        Self::decode(reply.body, &what)
    }

    /// Every status of commit `sha`, newest first (all pages).
    pub fn list_statuses(
        &self,
        owner: &str,
        repo: &str,
        sha: &str,
    ) -> Result<Vec<CommitStatus>, GiteaError> {
        let what = format!("the statuses of {owner}/{repo}@{sha}");
        let path = format!(
            "{}/statuses/{}",
            Self::repo_path(owner, repo),
            encode_segment(sha)
        );
        self.read_all(&path, &[], &what)
    }

    /// The combined status of `reference` (a commit id or a branch).
    pub fn combined_status(
        &self,
        owner: &str,
        repo: &str,
        reference: &str,
    ) -> Result<CombinedStatus, GiteaError> {
        let what = format!("the combined status of {owner}/{repo}@{reference}");
        let path = format!(
            "{}/commits/{}/status",
            Self::repo_path(owner, repo),
            encode_segment(reference)
        );
        Self::decode(self.read(&path, &what)?.body, &what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_gitea_writes_them() {
        let s: CommitStatus = serde_json::from_value(json!({
            "id": 2, "status": "pending", "target_url": "", "description": "queued",
            "url": "https://g.example/api/v1/repos/a/b/statuses/abc", "context": "codex-bridge",
            "creator": {"login": "ccbot"}, "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        assert_eq!(s.state, CommitState::Pending);
        assert_eq!(s.context, "codex-bridge");
        let none: CombinedStatus = serde_json::from_value(json!({
            "state": "", "sha": "", "total_count": 0, "statuses": null,
            "repository": null, "commit_url": "", "url": ""
        }))
        .unwrap();
        assert_eq!(none.state, None);
        assert!(none.statuses.is_empty());
        assert_eq!(
            CommitState::from("skipped".to_owned()),
            CommitState::Other("skipped".into())
        );
    }
}
