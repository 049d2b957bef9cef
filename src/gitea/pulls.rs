//! What trust in a pull request rests on, as Gitea states it: where its head
//! lives (`GET /pulls/{n}`: `head.repo` against `base.repo`), its head
//! commit, and the Gitea user that commit's author is
//! (`GET /git/commits/{sha}`: `author`, which Gitea fills from the commit's
//! e-mail address and leaves empty for an address it does not know).

use super::client::{GiteaClient, GiteaError};
use serde::Deserialize;

/// A pull request's head, as far as trust goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullHead {
    /// The head branch is in the base repository (not a fork, not a deleted
    /// repository).
    pub in_base_repo: bool,
    /// The head commit (full sha).
    pub sha: String,
}

#[derive(Deserialize)]
struct RepoId {
    id: i64,
}

#[derive(Deserialize)]
struct Branch {
    #[serde(default)]
    sha: String,
    /// Null once the head's repository is deleted.
    #[serde(default)]
    repo: Option<RepoId>,
}

#[derive(Deserialize)]
struct Pull {
    head: Branch,
    base: Branch,
}

#[derive(Deserialize)]
struct Login {
    login: String,
}

#[derive(Deserialize)]
struct Commit {
    /// The Gitea user of the commit's author e-mail; null when none.
    #[serde(default)]
    author: Option<Login>,
}

impl GiteaClient {
    /// `GET /pulls/{n}`: where the pull request's head lives, and its commit.
    pub fn pull_head(&self, owner: &str, repo: &str, number: i64) -> Result<PullHead, GiteaError> {
        let what = format!("pull request {owner}/{repo}#{number}");
        let path = format!("{}/pulls/{number}", Self::repo_path(owner, repo));
        let pull: Pull = Self::decode(self.read(&path, &what)?.body, &what)?;
        let in_base_repo = match (&pull.head.repo, &pull.base.repo) {
            (Some(head), Some(base)) => head.id == base.id,
            _ => false,
        };
        Ok(PullHead {
            in_base_repo,
            sha: pull.head.sha,
        })
    }

    /// `GET /git/commits/{sha}` of the base repository (which holds a fork
    /// pull request's commits under `refs/pull/{n}/head`): the Gitea login
    /// of the commit's author, `None` when its address belongs to no user.
    pub fn commit_author(
        &self,
        owner: &str,
        repo: &str,
        sha: &str,
    ) -> Result<Option<String>, GiteaError> {
        let what = format!("commit {sha} of {owner}/{repo}");
        if sha.is_empty() || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(GiteaError::Transport {
                what,
                detail: "Gitea named no head commit for the pull request".into(),
            });
        }
        let path = format!("{}/git/commits/{sha}", Self::repo_path(owner, repo));
        let commit: Commit = Self::decode(self.read(&path, &what)?.body, &what)?;
        Ok(commit.author.map(|a| a.login).filter(|l| !l.is_empty()))
    }
}

/// A changed file of a pull request (`api.ChangedFile`, the fields read).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ChangedFile {
    pub filename: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub additions: i64,
    #[serde(default)]
    pub deletions: i64,
}

/// Pages of changed files read at most: a pull request with more is
/// described by its first files and a note that more exist.
const MAX_FILE_PAGES: u32 = 4;

impl GiteaClient {
    /// `GET /pulls/{n}/files`: the pull request's changed files with their
    /// diff stat, and whether they are all of them.
    pub fn pull_files(
        &self,
        owner: &str,
        repo: &str,
        number: i64,
    ) -> Result<(Vec<ChangedFile>, bool), GiteaError> {
        let what = format!("the changed files of pull request {owner}/{repo}#{number}");
        let path = format!("{}/pulls/{number}/files", Self::repo_path(owner, repo));
        let pages = self.read_pages(&path, &[], &what, MAX_FILE_PAGES)?;
        Ok((pages.items, pages.complete))
    }
}
