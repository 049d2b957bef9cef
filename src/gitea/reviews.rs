//! Pull-request reviews: how the bridge posts the result of Codex's own
//! review (`/review`) as one review of the pull request, and how it proves
//! that review is there (by the bot, with the task's marker) before posting
//! again.

use super::client::{GiteaClient, GiteaError};
use serde::Deserialize;
use serde_json::json;

/// A review as Gitea lists it (`api.PullReview`), as far as proof goes.
#[derive(Debug, Clone, Deserialize)]
pub struct PullReview {
    pub id: i64,
    #[serde(default)]
    pub body: String,
    /// `COMMENT`, `APPROVED`, `REQUEST_CHANGES`, `PENDING`, …
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    user: Option<Login>,
}

#[derive(Debug, Clone, Deserialize)]
struct Login {
    login: String,
}

impl PullReview {
    pub fn author(&self) -> &str {
        self.user.as_ref().map(|u| u.login.as_str()).unwrap_or("")
    }
}

impl GiteaClient {
    /// `GET /pulls/{n}/reviews`, every page: the pull request's reviews,
    /// oldest first.
    pub fn list_pull_reviews(
        &self,
        owner: &str,
        repo: &str,
        number: i64,
    ) -> Result<Vec<PullReview>, GiteaError> {
        let what = format!("the reviews of pull request {owner}/{repo}#{number}");
        let path = format!("{}/pulls/{number}/reviews", Self::repo_path(owner, repo));
        self.read_all(&path, &[], &what)
    }

    /// The first submitted review by `author` (case-insensitive) whose body
    /// `matches`. A pending review is not shown to anyone else, so it does
    /// not count as posted.
    pub fn find_pull_review(
        &self,
        owner: &str,
        repo: &str,
        number: i64,
        author: &str,
        matches: impl Fn(&str) -> bool,
    ) -> Result<Option<PullReview>, GiteaError> {
        Ok(self
            .list_pull_reviews(owner, repo, number)?
            .into_iter()
            .find(|r| {
                r.state != "PENDING" && r.author().eq_ignore_ascii_case(author) && matches(&r.body)
            }))
    }

    /// `POST /pulls/{n}/reviews` as a `COMMENT` review (it neither approves
    /// nor blocks the pull request: that stays a person's call). A write:
    /// one POST, never retried here.
    pub fn create_pull_review(
        &self,
        owner: &str,
        repo: &str,
        number: i64,
        body: &str,
    ) -> Result<PullReview, GiteaError> {
        let what = format!("a new review of pull request {owner}/{repo}#{number}");
        let path = format!("{}/pulls/{number}/reviews", Self::repo_path(owner, repo));
        let payload = json!({ "body": body, "event": "COMMENT" });
        let reply = self.call("POST", &path, Some(&payload), &what)?;
        Self::decode(reply.body, &what)
    }
}
