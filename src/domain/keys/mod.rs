//! The keys that name what the bridge works on. Each is parsed once, where it
//! enters (a webhook, a query string, a column), so no caller takes a key
//! apart by hand.
//!
//! Gitea compares owner and repository names without regard to case (`ACME`
//! and `acme` are one account), so the keys fold them to lower case: two
//! spellings of one repository share its lease, queue and sessions. The name
//! as Gitea displays it is kept in the repository's row.

use super::sql::text_column;
use diesel::sql_types::Text;
use diesel::{AsExpression, FromSqlRow};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// Why a key could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {text:?} is not valid: {why}")]
pub struct KeyError {
    what: &'static str,
    text: String,
    why: &'static str,
}

fn key_error(what: &'static str, text: &str, why: &'static str) -> KeyError {
    // A key never holds a secret, but a caller may hand over anything: keep
    // the message short.
    let text: String = text.chars().take(200).collect();
    KeyError { what, text, why }
}

/// A name as Gitea allows it for an owner or a repository.
pub fn is_gitea_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

/// An instance id as the configuration allows it (it is part of every key).
pub fn is_instance_id(s: &str) -> bool {
    s.len() <= 64
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// `<instance>:<owner>/<name>`, owner and name folded to lower case: the unit
/// of mutual exclusion (one lease, one queue, one clone per key).
///
/// The text is shared, not copied, when a key is cloned: the actor tree holds
/// a session's key in its registry, its actor and its messages, for every
/// Issue/PR it has seen.
#[derive(Clone, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
pub struct RepoKey {
    text: Arc<str>,
    /// Where the `:` after the instance id is.
    colon: u32,
    /// Where the `/` between owner and name is.
    slash: u32,
}

impl RepoKey {
    /// The key of `owner/name` on this instance. The names must be Gitea
    /// names (the webhook checks them before any key is made).
    pub fn new(instance: &str, owner: &str, name: &str) -> Result<RepoKey, KeyError> {
        RepoKey::parse(&format!("{instance}:{owner}/{name}"))
    }

    pub fn parse(text: &str) -> Result<RepoKey, KeyError> {
        const WHAT: &str = "the repository key";
        let (instance, path) = text
            .split_once(':')
            .ok_or_else(|| key_error(WHAT, text, "expected <instance>:<owner>/<name>"))?;
        let (owner, name) = path
            .split_once('/')
            .ok_or_else(|| key_error(WHAT, text, "expected <instance>:<owner>/<name>"))?;
        if !is_instance_id(instance) {
            return Err(key_error(WHAT, text, "the instance id is not valid"));
        }
        if !is_gitea_name(owner) || !is_gitea_name(name) {
            return Err(key_error(
                WHAT,
                text,
                "owner and name use only letters, digits, '-', '_' and '.'",
            ));
        }
        // Both fit: an instance id is at most 64 bytes, a Gitea name 100.
        Ok(RepoKey {
            colon: instance.len() as u32,
            slash: (instance.len() + 1 + owner.len()) as u32,
            text: text.to_ascii_lowercase().into(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn instance(&self) -> &str {
        &self.text[..self.colon as usize]
    }

    /// The owner, folded to lower case.
    pub fn owner(&self) -> &str {
        &self.text[self.colon as usize + 1..self.slash as usize]
    }

    /// The repository's name, folded to lower case.
    pub fn name(&self) -> &str {
        &self.text[self.slash as usize + 1..]
    }
}

/// Whether an event is about an Issue or a Pull Request.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    AsExpression,
    FromSqlRow,
)]
#[diesel(sql_type = Text)]
#[serde(rename_all = "lowercase")]
pub enum ResourceKind {
    Issue,
    Pull,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Issue => "issue",
            ResourceKind::Pull => "pull",
        }
    }

    pub fn parse(text: &str) -> Result<ResourceKind, KeyError> {
        match text {
            "issue" => Ok(ResourceKind::Issue),
            "pull" => Ok(ResourceKind::Pull),
            _ => Err(key_error(
                "the resource kind",
                text,
                "expected issue or pull",
            )),
        }
    }
}

/// `<repoKey>:<issue|pull>:<number>`: one Issue or Pull Request, and so one
/// session and one Codex thread. A delegated child's session is keyed
/// `<repoKey>:<issue|pull>:<number>:child:<n>`: its own session, thread and
/// worktree, about the same Issue or Pull Request. Clones share the text, as
/// [`RepoKey`]'s do.
#[derive(Clone, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
pub struct ResourceKey {
    text: Arc<str>,
    repo: RepoKey,
    kind: ResourceKind,
    number: i64,
    child: Option<i64>,
}

/// The word that marks a child's session key.
const CHILD: &str = "child";

impl ResourceKey {
    pub fn new(repo: RepoKey, kind: ResourceKind, number: i64) -> ResourceKey {
        ResourceKey {
            text: joined(&[repo.as_str(), kind.as_str()], number).into(),
            repo,
            kind,
            number,
            child: None,
        }
    }

    /// The session of the resource's delegated child number `n` (counted
    /// from 1 across the resource's children).
    pub fn child_session(&self, n: i64) -> ResourceKey {
        let base = self.resource();
        ResourceKey {
            text: format!("{}:{CHILD}:{n}", base.as_str()).into(),
            child: Some(n),
            ..base
        }
    }

    /// The Issue or Pull Request the key is about: itself, or a child
    /// session's resource.
    pub fn resource(&self) -> ResourceKey {
        ResourceKey::new(self.repo.clone(), self.kind, self.number)
    }

    /// A child session's number; `None` for the resource's own session.
    pub fn child(&self) -> Option<i64> {
        self.child
    }

    pub fn parse(text: &str) -> Result<ResourceKey, KeyError> {
        const WHAT: &str = "the resource key";
        let mut tail = text.rsplitn(3, ':');
        if let (Some(n), Some(CHILD), Some(base)) = (tail.next(), tail.next(), tail.next()) {
            let n =
                n.parse::<i64>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    key_error(WHAT, text, "a child's number is a positive integer")
                })?;
            return Ok(ResourceKey::parse(base)
                .and_then(|b| match b.child {
                    None => Ok(b),
                    Some(_) => Err(key_error(WHAT, text, "a child has no children of its own")),
                })?
                .child_session(n));
        }
        let mut parts = text.rsplitn(3, ':');
        let (Some(number), Some(kind), Some(repo)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(key_error(
                WHAT,
                text,
                "expected <instance>:<owner>/<name>:<issue|pull>:<number>",
            ));
        };
        // Gitea numbers from 1; 0 is allowed so that no stored key is unreadable.
        let number = number
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| key_error(WHAT, text, "the number is not a non-negative integer"))?;
        Ok(ResourceKey::new(
            RepoKey::parse(repo)?,
            ResourceKind::parse(kind)?,
            number,
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn repo(&self) -> &RepoKey {
        &self.repo
    }

    pub fn kind(&self) -> ResourceKind {
        self.kind
    }

    pub fn is_pull(&self) -> bool {
        self.kind == ResourceKind::Pull
    }

    /// The Issue's or Pull Request's number in its repository.
    pub fn number(&self) -> i64 {
        self.number
    }
}

/// `prefix` and the 32 lower-case hex digits of a new time-ordered UUID
/// (v7). Written straight into one allocation: the ingest mints three such
/// ids per accept on the store's one writer thread, where going through
/// `format!` cost a visible share of its time.
pub fn mint_with_prefix(prefix: &str) -> String {
    let mut digits = [0u8; uuid::fmt::Simple::LENGTH];
    let hex = uuid::Uuid::now_v7().simple().encode_lower(&mut digits);
    let mut id = String::with_capacity(prefix.len() + hex.len());
    id.push_str(prefix);
    id.push_str(hex);
    id
}

/// `bytes` as lower-case hex, through one buffer (`hex::encode` goes
/// character by character through an iterator).
/// `parts` joined by `:`, then `:` and `number`: a key's text without
/// `format!`'s machinery, which cost the webhook's writer a visible share
/// (several keys are made per accept).
fn joined(parts: &[&str], number: i64) -> String {
    let mut digits = itoa::Buffer::new();
    let number = digits.format(number);
    let len = parts.iter().map(|p| p.len() + 1).sum::<usize>() + number.len();
    let mut out = String::with_capacity(len);
    for part in parts {
        out.push_str(part);
        out.push(':');
    }
    out.push_str(number);
    out
}

pub fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// Keys made by the bridge: a fixed prefix and the 32 hex digits of a
/// time-ordered UUID (v7).
macro_rules! minted_id {
    ($(#[$doc:meta])* $ty:ident, $prefix:literal, $what:literal, $suffixes:expr, $lengths:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, AsExpression, FromSqlRow)]
        #[diesel(sql_type = Text)]
        pub struct $ty(String);

        impl $ty {
            /// A new id. Time order keeps the rows keyed by it appending to
            /// their indexes instead of dirtying a random page per insert.
            pub fn mint() -> $ty {
                $ty(mint_with_prefix($prefix))
            }

            pub fn parse(text: &str) -> Result<$ty, KeyError> {
                let hex = text
                    .strip_prefix($prefix)
                    .ok_or_else(|| key_error($what, text, concat!("expected ", $prefix, "<32 hex digits>")))?;
                let fits = |len: usize| {
                    let suffix = hex.get(len..).unwrap_or_default();
                    let digits = hex.get(..len).unwrap_or_default();
                    let suffix_ok = suffix.is_empty() || $suffixes.contains(&suffix);
                    suffix_ok
                        && digits.len() == len
                        && digits.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                };
                if $lengths.into_iter().any(fits) {
                    Ok($ty(text.to_owned()))
                } else {
                    Err(key_error($what, text, concat!("expected ", $prefix, "<lower-case hex digits>")))
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
    };
}

minted_id!(
    /// `task-<32 hex>`: one task per triggering comment.
    TaskId,
    "task-",
    "the task id",
    NO_SUFFIX,
    [32]
);
minted_id!(
    /// `op-<32 or 64 hex>`: the idempotency key of one message to the agent, sent
    /// along with the turn so the thread's history can say whether it arrived.
    OperationId,
    "op-",
    "the operation id",
    [REPLY_RETRY],
    // Minted (a UUID), or derived from the comment (a SHA-256).
    [32, 64]
);

minted_id!(
    /// `wf-<32 hex>`: one workflow (a session's top-level one, or a child).
    WorkflowId,
    "wf-",
    "the workflow id",
    NO_SUFFIX,
    [32]
);
minted_id!(
    /// `gate-<32 hex>`: one owner gate of a workflow, named in its comment.
    GateId,
    "gate-",
    "the gate id",
    NO_SUFFIX,
    [32]
);
minted_id!(
    /// `result-<32 hex>`: one child's result, immutable once recorded.
    ResultId,
    "result-",
    "the result id",
    NO_SUFFIX,
    [32]
);

const NO_SUFFIX: [&str; 0] = [];
const REPLY_RETRY: &str = "-reply-retry";

impl OperationId {
    /// The operation of a comment as written, derived from its trigger key
    /// (instance, kind and id) and the time Gitea says it was written: a
    /// redelivery of the same comment maps to the same operation; an edit
    /// (a new `updated_at`) to a new one.
    ///
    /// `op-` + 64 hex digits: the first 12 are that time in milliseconds,
    /// the rest a SHA-256 of both. Leading with the time keeps each accept's
    /// entry in the operation id's unique index next to the last one, instead
    /// of one written page per accept at a random place. A time Gitea did not
    /// write as RFC 3339 gives the whole hash (the id is as unique, only not
    /// ordered).
    pub fn of_comment(trigger_key: &str, written_at: &str) -> OperationId {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(trigger_key.as_bytes());
        h.update([0]);
        h.update(written_at.as_bytes());
        let hash = h.finalize();
        let millis = chrono::DateTime::parse_from_rfc3339(written_at)
            .ok()
            .and_then(|t| u64::try_from(t.timestamp_millis()).ok())
            .filter(|ms| *ms < 1 << 48);
        // Built by hand: the webhook's writer makes one per accept.
        let mut id = String::with_capacity(67);
        id.push_str("op-");
        match millis {
            Some(ms) => {
                // 48 bits of milliseconds, 12 hex digits, then 26 of the
                // hash's bytes (52 digits).
                id.push_str(&lower_hex(&ms.to_be_bytes()[2..]));
                id.push_str(&lower_hex(&hash[..26]));
            }
            None => id.push_str(&lower_hex(&hash)),
        }
        OperationId(id)
    }

    /// The operation of a workflow's `seq`th continuation: derived from the
    /// workflow and the number, so the continuation task created again after
    /// a crash carries the same one.
    pub fn of_continuation(workflow: &WorkflowId, seq: i64) -> OperationId {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(b"continuation\0");
        h.update(workflow.as_str().as_bytes());
        h.update([0]);
        h.update(seq.to_be_bytes());
        OperationId(format!("op-{}", hex::encode(h.finalize())))
    }

    /// The operation of the one turn that asks the agent again for a reply
    /// that did not land: derived from the task's operation, so a restart
    /// finds it in the ledger instead of sending it twice.
    pub fn reply_retry(&self) -> OperationId {
        match self.0.strip_suffix(REPLY_RETRY) {
            Some(_) => self.clone(),
            None => OperationId(format!("{}{REPLY_RETRY}", self.0)),
        }
    }
}

/// What every key shares: its text on the wire and in columns, and serde and
/// comparison by that text.
macro_rules! key_text {
    ($($ty:ty),*) => {$(
        text_column!($ty);

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self.as_str(), f)
            }
        }

        impl std::str::FromStr for $ty {
            type Err = KeyError;
            fn from_str(text: &str) -> Result<Self, KeyError> {
                <$ty>::parse(text)
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl PartialEq<str> for $ty {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $ty {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl PartialEq<String> for $ty {
            fn eq(&self, other: &String) -> bool {
                self.as_str() == other
            }
        }

        impl Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                <$ty>::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    )*};
}

key_text!(
    RepoKey,
    ResourceKey,
    TaskId,
    OperationId,
    WorkflowId,
    GateId,
    ResultId
);

/// Keys whose parts are parsed out of their text compare, order and hash by
/// that text alone: the parts follow from it.
macro_rules! by_text {
    ($($ty:ty),*) => {$(
        impl PartialEq for $ty {
            fn eq(&self, other: &Self) -> bool {
                self.text == other.text
            }
        }

        impl Eq for $ty {}

        impl std::hash::Hash for $ty {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.text.hash(state);
            }
        }

        impl PartialOrd for $ty {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $ty {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.text.cmp(&other.text)
            }
        }
    )*};
}

by_text!(RepoKey, ResourceKey);
text_column!(ResourceKind);

impl fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests;
