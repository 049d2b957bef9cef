//! What the webhook hands to the store: a verified delivery, normalised into
//! the repository, the Issue/PR and what the event means.

use super::command::CommandLine;
use super::keys::{KeyError, RepoKey, ResourceKey, ResourceKind};

/// A repository as the webhook names it. The key folds case; `owner` and
/// `name` keep the spelling Gitea displays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoRef {
    pub key: RepoKey,
    pub owner: String,
    pub name: String,
    pub clone_url: Option<String>,
    pub default_branch: Option<String>,
}

impl RepoRef {
    /// Refuses names Gitea would not allow, so no path trick reaches a key.
    pub fn new(instance_id: &str, owner: &str, name: &str) -> Result<RepoRef, KeyError> {
        Ok(RepoRef {
            key: RepoKey::new(instance_id, owner, name)?,
            owner: owner.to_owned(),
            name: name.to_owned(),
            clone_url: None,
            default_branch: None,
        })
    }

    /// `<instance>:<owner>/<repo>`, the unit of mutual exclusion.
    pub fn repo_key(&self) -> &RepoKey {
        &self.key
    }
}

/// The Issue/PR (and comment) an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub repo: RepoRef,
    pub kind: ResourceKind,
    pub number: i64,
    pub comment_id: Option<i64>,
    /// Who wrote the triggering text.
    pub author: String,
    pub head_ref: Option<String>,
    pub base_ref: Option<String>,
}

impl Subject {
    /// `<repoKey>:<issue|pull>:<number>`: one Codex thread per resource.
    pub fn resource_key(&self) -> ResourceKey {
        ResourceKey::new(self.repo.key.clone(), self.kind, self.number)
    }
}

/// What the webhook decided the event means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// Nothing to do (no mention, the bot's own comment, another event type...).
    Ignore { reason: &'static str },
    /// A new instruction for the agent.
    Trigger {
        /// One task per triggering comment or review, ever.
        trigger_key: String,
        text: String,
        /// The `/word` right after the mention; `None`: an instruction.
        command: Option<CommandLine>,
        /// When the comment was written, as Gitea says (part of the fingerprint).
        written_at: String,
        /// The comment's attachments (Gitea asset ids; part of the fingerprint).
        attachments: Vec<i64>,
    },
    /// A comment was edited. A task is created only if the edit added the first
    /// mention to a comment that has none; otherwise it is recorded and linked.
    Edit {
        trigger_key: String,
        text: String,
        command: Option<CommandLine>,
        written_at: String,
        attachments: Vec<i64>,
        mention_added: bool,
    },
    /// A comment was deleted: recorded and linked to its task, if any.
    Delete { trigger_key: String },
}

/// How the delivery ids the catch-up gives the comments it takes up begin
/// (Gitea's own are UUIDs): retention keeps those deliveries, as the
/// catch-up can list their comments again at any time.
pub const CATCHUP_DELIVERY_PREFIX: &str = "catchup:";

/// The delivery id of the catch-up's request for a comment.
pub fn catchup_delivery_id(comment_id: i64) -> String {
    format!("{CATCHUP_DELIVERY_PREFIX}{comment_id}")
}

/// One verified webhook request, normalised.
#[derive(Debug, Clone)]
pub struct IngestRequest {
    pub delivery_key: String,
    pub delivery_id: String,
    pub event_type: String,
    pub action: Option<String>,
    pub payload_hash: PayloadHash,
    /// comment id + action + updated_at: Gitea's replay sends the same bytes
    /// under a new delivery id, and this finds the original.
    pub content_key: Option<String>,
    pub sender: Option<String>,
    pub subject: Option<Subject>,
    pub intent: Intent,
}

impl IngestRequest {
    /// The session this request gives work to at once, outside the
    /// repository's queue: a turnless command to carry out, a steer,
    /// interrupt or replace for the running turn, or an edit or deletion of
    /// a comment to decide on.
    pub fn session_to_wake(&self) -> Option<(ResourceKey, RepoKey)> {
        let wakes = match &self.intent {
            Intent::Trigger { command, .. } => command
                .as_ref()
                .is_some_and(|c| c.command.is_turnless() || c.command.carries_text()),
            Intent::Edit { .. } | Intent::Delete { .. } => true,
            Intent::Ignore { .. } => false,
        };
        let subject = self.subject.as_ref()?;
        wakes.then(|| (subject.resource_key(), subject.repo.repo_key().clone()))
    }
}

/// What a delivery's bytes hash to, as its row keeps it (`blake3:<hex>`): the
/// same delivery id over other bytes is a conflict, never a retry. BLAKE3,
/// not SHA-256: every webhook body is already hashed once with SHA-256 for
/// its signature, and the two SHA-256 passes together were a fifth of what
/// the HTTP workers spent on a webhook.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct PayloadHash(String);

impl PayloadHash {
    const PREFIX: &'static str = "blake3:";

    /// The hash of `bytes`.
    pub fn of(bytes: &[u8]) -> PayloadHash {
        PayloadHash(format!("{}{}", Self::PREFIX, blake3::hash(bytes).to_hex()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether a stored row's hash names the same bytes: `None` when that row
    /// was hashed another way (rows stored with SHA-256, or a continuation's
    /// marker), which cannot tell.
    pub fn matches(&self, stored: &str) -> Option<bool> {
        stored.starts_with(Self::PREFIX).then(|| stored == self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::PayloadHash;

    #[test]
    fn a_hash_tells_other_bytes_only_against_its_own_kind() {
        let h = PayloadHash::of(b"{\"action\":\"created\"}");
        assert_eq!(h.matches(h.as_str()), Some(true));
        assert_eq!(h.matches(PayloadHash::of(b"{}").as_str()), Some(false));
        assert_eq!(h.matches(&format!("sha256:{}", "0".repeat(64))), None);
        assert_eq!(h.matches("continuation"), None);
        assert_eq!(h.as_str().len(), "blake3:".len() + 64);
    }
}
