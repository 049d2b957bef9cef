//! A registered remote worker's id: what attempts it runs name as their owner
//! (`worker:<workerId>`), and what every layer that speaks of a worker carries,
//! from the store to the agent runtime that reports which worker ran a turn.

use super::keys::is_gitea_name;
use serde::Serialize;
use std::fmt;

/// How a worker's id begins.
const ID_PREFIX: &str = "wrk-";

/// `wrk-<32 hex>`: one registered worker.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct WorkerId(String);

impl WorkerId {
    /// A new id, time-ordered (UUID v7) like the bridge's other ids.
    pub fn mint() -> WorkerId {
        WorkerId(super::keys::mint_with_prefix(ID_PREFIX))
    }

    /// The id a text names, if it has the shape of one (`None`: it names no
    /// worker).
    pub fn parse(text: &str) -> Option<WorkerId> {
        let hex = text.strip_prefix(ID_PREFIX)?;
        let ok = hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| WorkerId(text.to_owned()))
    }

    /// An id read back from the store's own column, which holds only ids
    /// minted here.
    pub fn stored(text: String) -> WorkerId {
        WorkerId(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The most repositories one worker may be given.
pub(crate) const REPOSITORIES_MAX: usize = 1000;

/// Input that cannot be taken as it is: the caller's to correct (an HTTP
/// caller gets a 400 with `code`). A store caller that lets it through gets
/// it as [`StoreError::Refused`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    /// Stable snake_case.
    pub code: &'static str,
    pub message: String,
}

/// A short excerpt of what a caller sent, for an error message.
pub(crate) fn excerpt(text: &str) -> String {
    let short: String = text.chars().take(120).collect();
    format!("{short:?}")
}

/// A repository a worker may work on: `owner/name` as Gitea names them, folded
/// to lower case (Gitea compares them without regard to case, as the
/// repository keys do).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct RepoName(String);

impl RepoName {
    /// Exactly one `/` between two Gitea names: no empty part, no `.` or
    /// `..`, no other separator, so the text can never point elsewhere once
    /// it becomes part of a key or a path.
    pub fn parse(text: &str) -> Result<RepoName, Invalid> {
        let valid = text
            .split_once('/')
            .is_some_and(|(owner, name)| is_gitea_name(owner) && is_gitea_name(name));
        if !valid {
            return Err(Invalid {
                code: "invalid_repositories",
                message: format!(
                    "repository {} is not owner/name: two Gitea names (letters, digits, '-', '_', \
                     '.'; not '.' or '..') joined by one '/'",
                    excerpt(text)
                ),
            });
        }
        Ok(RepoName(text.to_ascii_lowercase()))
    }

    /// Every repository of a request: at least one, at most 1000; each
    /// valid. The same repository spelt twice counts once; the list comes
    /// back sorted.
    pub fn parse_list(texts: &[String]) -> Result<Vec<RepoName>, Invalid> {
        if texts.is_empty() || texts.len() > REPOSITORIES_MAX {
            return Err(Invalid {
                code: "invalid_repositories",
                message: format!(
                    "repositories must list 1 to {REPOSITORIES_MAX} repositories as \"owner/name\" \
                     (got {})",
                    texts.len()
                ),
            });
        }
        let mut repos = texts
            .iter()
            .map(|t| RepoName::parse(t))
            .collect::<Result<Vec<_>, _>>()?;
        repos.sort();
        repos.dedup();
        Ok(repos)
    }

    /// A name read back from the store's own column, which holds only
    /// names [`RepoName::parse`] took.
    pub fn stored(text: String) -> RepoName {
        RepoName(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}
