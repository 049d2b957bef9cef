//! The Gitea REST client: `Authorization: token …`, Gitea's error
//! bodies surfaced with their status, reads retried with backoff, writes never
//! retried blindly — a write is repeated only after a read proved it missing,
//! and that decision belongs to the caller, not to this client.
//!
//! Calls are blocking (ureq) and run on tokio's blocking pool: the bridge makes
//! a handful per task, and this keeps the futures `Send` for the actors.

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

/// Why a Gitea call failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum GiteaError {
    /// Gitea answered with an error status; `message` is Gitea's own.
    #[error("Gitea answered {status} for {what}: {message}")]
    Status {
        status: u16,
        what: String,
        message: String,
    },
    /// No answer (connection, timeout, TLS) or an answer that is not Gitea's JSON.
    #[error("Gitea could not be reached for {what}: {detail} (check gitea_url and the network)")]
    Transport { what: String, detail: String },
    /// The bridge held a write back: sending it now could outlast the
    /// claim under which it may be sent (another process may take it next).
    #[error("{what} was not sent: {why}; it is tried again")]
    Withheld { what: String, why: String },
}

impl GiteaError {
    /// Gitea said so explicitly: the thing is not there, or we may not touch it.
    pub fn status(&self) -> Option<u16> {
        match self {
            GiteaError::Status { status, .. } => Some(*status),
            GiteaError::Transport { .. } | GiteaError::Withheld { .. } => None,
        }
    }

    /// Worth another try later (no answer, a server error, rate limiting).
    pub fn is_transient(&self) -> bool {
        match self {
            GiteaError::Transport { .. } | GiteaError::Withheld { .. } => true,
            GiteaError::Status { status, .. } => *status >= 500 || *status == 429,
        }
    }
}

/// A comment as the bridge needs it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Comment {
    pub id: i64,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub html_url: String,
    #[serde(default)]
    pub user: Option<User>,
    /// RFC 3339, whole seconds.
    #[serde(default)]
    pub created_at: String,
}

impl Comment {
    pub fn author(&self) -> &str {
        self.user.as_ref().map(|u| u.login.as_str()).unwrap_or("")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct User {
    pub login: String,
}

/// A pull request's branches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRefs {
    pub head_ref: String,
    pub head_sha: String,
    pub base_ref: String,
}

/// The repository facts the bridge uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoInfo {
    pub clone_url: String,
    pub default_branch: String,
    pub private: bool,
}

/// A user's permission on a repository, as Gitea names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    None,
    Read,
    Write,
    Admin,
}

impl Permission {
    pub fn parse(s: &str) -> Permission {
        match s {
            "owner" | "admin" => Permission::Admin,
            "write" => Permission::Write,
            "read" => Permission::Read,
            _ => Permission::None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::None => "none",
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Admin => "admin",
        }
    }
}

/// The client. Cheap to clone.
#[derive(Clone)]
pub struct GiteaClient {
    /// `https://git.example.com` (no trailing slash, no `/api/v1`).
    base: String,
    token: SecretString,
    agent: ureq::Agent,
    /// Waits between read attempts (their count is one more than this).
    read_backoff: Vec<Duration>,
}

impl std::fmt::Debug for GiteaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GiteaClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// One answer: its status, its JSON (`Null` when empty) and the paging
/// headers Gitea sets on listings.
#[derive(Debug)]
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) body: Value,
    /// `X-Total-Count`: the items of the whole listing, not of this page.
    pub(super) total: Option<u64>,
    /// `Link` (only some listings have it).
    pub(super) link: Option<String>,
}

pub(super) type Answer = Result<Reply, GiteaError>;

impl GiteaClient {
    pub fn new(base_url: &str, token: SecretString) -> GiteaClient {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(5))
            .timeout(Duration::from_secs(20))
            .user_agent(concat!("codex-bridge/", env!("CARGO_PKG_VERSION")))
            .build();
        GiteaClient {
            base: base_url.trim_end_matches('/').to_owned(),
            token,
            agent,
            read_backoff: vec![Duration::from_millis(200), Duration::from_secs(1)],
        }
    }

    /// Waits between read attempts (tests shorten them).
    pub fn with_read_backoff(mut self, backoff: Vec<Duration>) -> GiteaClient {
        self.read_backoff = backoff;
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub(super) fn repo_path(owner: &str, repo: &str) -> String {
        format!(
            "/api/v1/repos/{}/{}",
            encode_segment(owner),
            encode_segment(repo)
        )
    }

    /// One request, no retry.
    pub(super) fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Answer {
        let url = format!("{}{}", self.base, path);
        let req = self
            .agent
            .request(method, &url)
            .set(
                "Authorization",
                &format!("token {}", self.token.expose_secret()),
            )
            .set("Accept", "application/json");
        let result = match body {
            Some(b) => req.send_json(b.clone()),
            None => req.call(),
        };
        let response = match result {
            Ok(r) => r,
            Err(ureq::Error::Status(status, r)) => {
                let text = r.into_string().unwrap_or_default();
                let message = serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| {
                        if status >= 500 {
                            "internal server error (Gitea gave no detail)".into()
                        } else {
                            text.chars().take(200).collect()
                        }
                    });
                return Err(GiteaError::Status {
                    status,
                    what: what.to_owned(),
                    message,
                });
            }
            Err(e) => {
                return Err(GiteaError::Transport {
                    what: what.to_owned(),
                    detail: e.kind().to_string(),
                })
            }
        };
        let status = response.status();
        let total = response
            .header("X-Total-Count")
            .and_then(|t| t.trim().parse().ok());
        let link = response.header("Link").map(str::to_owned);
        let text = response.into_string().map_err(|e| GiteaError::Transport {
            what: what.to_owned(),
            detail: format!("reading the answer: {e}"),
        })?;
        let value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|e| GiteaError::Transport {
                what: what.to_owned(),
                detail: format!("the answer is not JSON: {e}"),
            })?
        };
        Ok(Reply {
            status,
            body: value,
            total,
            link,
        })
    }

    /// A read: retried with backoff while the failure is transient.
    pub(super) fn read(&self, path: &str, what: &str) -> Answer {
        let mut waits = self.read_backoff.iter();
        loop {
            match self.call("GET", path, None, what) {
                Err(e) if e.is_transient() => match waits.next() {
                    Some(wait) => {
                        tracing::debug!(what, error = %e, "Gitea read failed; trying again");
                        std::thread::sleep(*wait);
                    }
                    None => return Err(e),
                },
                other => return other,
            }
        }
    }

    pub(super) fn decode<T: serde::de::DeserializeOwned>(
        value: Value,
        what: &str,
    ) -> Result<T, GiteaError> {
        serde_json::from_value(value).map_err(|e| GiteaError::Transport {
            what: what.to_owned(),
            detail: format!("unexpected answer shape: {e}"),
        })
    }

    /// `GET /api/v1/version`.
    pub fn version(&self) -> Result<String, GiteaError> {
        let v = self.read("/api/v1/version", "the Gitea version")?.body;
        Ok(v.get("version")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned())
    }

    /// Every plain comment of an Issue/PR (Gitea returns them all at once).
    pub fn list_comments(
        &self,
        owner: &str,
        repo: &str,
        number: i64,
    ) -> Result<Vec<Comment>, GiteaError> {
        let what = format!("the comments of {owner}/{repo}#{number}");
        let path = format!("{}/issues/{number}/comments", Self::repo_path(owner, repo));
        Self::decode(self.read(&path, &what)?.body, &what)
    }

    /// The first comment on an Issue/PR by `author` (case-insensitive, as
    /// Gitea logins are) whose body `matches`: how a marked reply or receipt
    /// is proven to be there.
    pub fn find_comment(
        &self,
        owner: &str,
        repo: &str,
        number: i64,
        author: &str,
        matches: impl Fn(&str) -> bool,
    ) -> Result<Option<Comment>, GiteaError> {
        Ok(self
            .list_comments(owner, repo, number)?
            .into_iter()
            .find(|c| c.author().eq_ignore_ascii_case(author) && matches(&c.body)))
    }

    /// `GET /issues/comments/{id}`: `None` when Gitea says 404, or 204 (not a
    /// plain comment).
    pub fn get_comment(
        &self,
        owner: &str,
        repo: &str,
        id: i64,
    ) -> Result<Option<Comment>, GiteaError> {
        let what = format!("comment {id} of {owner}/{repo}");
        let path = format!("{}/issues/comments/{id}", Self::repo_path(owner, repo));
        match self.read(&path, &what) {
            Ok(Reply { status: 204, .. }) => Ok(None),
            Ok(reply) => Self::decode(reply.body, &what).map(Some),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A write: one POST, never retried here.
    pub fn create_comment(
        &self,
        owner: &str,
        repo: &str,
        number: i64,
        body: &str,
    ) -> Result<Comment, GiteaError> {
        let what = format!("a new comment on {owner}/{repo}#{number}");
        let path = format!("{}/issues/{number}/comments", Self::repo_path(owner, repo));
        let reply = self.call("POST", &path, Some(&json!({ "body": body })), &what)?;
        Self::decode(reply.body, &what)
    }

    /// Adds a reaction to a comment; `true` when new (201), `false` when it was
    /// already there (200). Idempotent by Gitea's own rule.
    pub fn add_reaction(
        &self,
        owner: &str,
        repo: &str,
        comment_id: i64,
        content: &str,
    ) -> Result<bool, GiteaError> {
        let what = format!("a {content} reaction on comment {comment_id} of {owner}/{repo}");
        let path = format!(
            "{}/issues/comments/{comment_id}/reactions",
            Self::repo_path(owner, repo)
        );
        let reply = self.call("POST", &path, Some(&json!({ "content": content })), &what)?;
        Ok(reply.status == 201)
    }

    /// The reactions on a comment: (user login, content) each.
    pub fn list_reactions(
        &self,
        owner: &str,
        repo: &str,
        comment_id: i64,
    ) -> Result<Vec<(String, String)>, GiteaError> {
        let what = format!("the reactions on comment {comment_id} of {owner}/{repo}");
        let path = format!(
            "{}/issues/comments/{comment_id}/reactions",
            Self::repo_path(owner, repo)
        );
        let v = self.read(&path, &what)?.body;
        Ok(v.as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|r| {
                        (
                            r.pointer("/user/login")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            r.get("content")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// `GET /issues/{n}`: the Issue (or PR) as JSON.
    pub fn get_issue(&self, owner: &str, repo: &str, number: i64) -> Result<Value, GiteaError> {
        let what = format!("issue {owner}/{repo}#{number}");
        let path = format!("{}/issues/{number}", Self::repo_path(owner, repo));
        Ok(self.read(&path, &what)?.body)
    }

    /// `GET /pulls/{n}`: the PR's head and base.
    pub fn get_pull(&self, owner: &str, repo: &str, number: i64) -> Result<PullRefs, GiteaError> {
        let what = format!("pull request {owner}/{repo}#{number}");
        let path = format!("{}/pulls/{number}", Self::repo_path(owner, repo));
        let v = self.read(&path, &what)?.body;
        let s = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Ok(PullRefs {
            head_ref: s("/head/ref"),
            head_sha: s("/head/sha"),
            base_ref: s("/base/ref"),
        })
    }

    /// `GET /repos/{o}/{r}`.
    pub fn get_repo(&self, owner: &str, repo: &str) -> Result<RepoInfo, GiteaError> {
        let what = format!("repository {owner}/{repo}");
        let v = self.read(&Self::repo_path(owner, repo), &what)?.body;
        Ok(RepoInfo {
            clone_url: v
                .get("clone_url")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            default_branch: v
                .get("default_branch")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            private: v.get("private").and_then(Value::as_bool).unwrap_or(true),
        })
    }

    /// The commenter's permission on the repository
    /// (`GET /collaborators/{user}/permission`). A user Gitea does not know
    /// as a collaborator (404) has none.
    pub fn permission(
        &self,
        owner: &str,
        repo: &str,
        user: &str,
    ) -> Result<Permission, GiteaError> {
        let what = format!("the permission of {user} on {owner}/{repo}");
        let path = format!(
            "{}/collaborators/{}/permission",
            Self::repo_path(owner, repo),
            encode_segment(user)
        );
        match self.read(&path, &what) {
            Ok(reply) => Ok(Permission::parse(
                reply
                    .body
                    .get("permission")
                    .and_then(Value::as_str)
                    .unwrap_or("none"),
            )),
            Err(e) if e.status() == Some(404) => Ok(Permission::None),
            Err(e) => Err(e),
        }
    }
}

/// Percent-encodes one path segment (Gitea names are plain, but never trust
/// them into a URL).
pub(super) fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(encode_segment("acme"), "acme");
        assert_eq!(encode_segment("../x"), "..%2Fx");
        assert_eq!(encode_segment("a b?"), "a%20b%3F");
    }

    #[test]
    fn permissions_order_and_parse() {
        assert!(Permission::Admin > Permission::Write);
        assert!(Permission::Write > Permission::Read);
        assert_eq!(Permission::parse("owner"), Permission::Admin);
        assert_eq!(Permission::parse("weird"), Permission::None);
    }

    #[test]
    fn the_token_stays_out_of_debug_output() {
        let c = GiteaClient::new("https://git.example.com/", SecretString::from("tok-123456"));
        let shown = format!("{c:?}");
        assert!(!shown.contains("tok-123456"), "{shown}");
        assert_eq!(c.base_url(), "https://git.example.com");
    }
}
