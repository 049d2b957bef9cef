//! [`RemoteRef`]: what the remote runtime hands a session for something that
//! lives on a worker (a thread, an approval request, a tool call), with the
//! repository whose lease routes later calls on it. Its text,
//! `remote:<owner>/<name>:<id>`, is what the store keeps as a thread id, so
//! it never changes shape: rows written before this type still parse.

use crate::domain::worker::RepoName;
use std::fmt;
use std::str::FromStr;

/// How the text of a reference begins.
const PREFIX: &str = "remote:";

/// An id on a worker and the repository whose worker runs calls on it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RemoteRef {
    repository: RepoName,
    /// The worker's own id (its Codex's thread id, or its key for a request).
    id: String,
}

/// A text that is no reference of the remote runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{shown:?} is not a reference of the remote runtime (remote:<owner>/<name>:<id>): {why}; it \
     was made by another agent runtime, and the session must open its thread again"
)]
pub struct NotRemote {
    shown: String,
    why: &'static str,
}

impl RemoteRef {
    /// `id` on the worker of `repository`. `None`: `id` is empty, which no
    /// worker hands out.
    pub fn new(repository: RepoName, id: impl Into<String>) -> Option<RemoteRef> {
        let id = id.into();
        (!id.is_empty()).then_some(RemoteRef { repository, id })
    }

    pub fn repository(&self) -> &RepoName {
        &self.repository
    }

    /// The worker's own id, as its calls name it.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for RemoteRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}:{}", self.repository.as_str(), self.id)
    }
}

impl FromStr for RemoteRef {
    type Err = NotRemote;

    fn from_str(text: &str) -> Result<RemoteRef, NotRemote> {
        let refuse = |why| NotRemote {
            shown: text.chars().take(100).collect(),
            why,
        };
        let rest = text
            .strip_prefix(PREFIX)
            .ok_or_else(|| refuse("it does not begin with `remote:`"))?;
        // A repository never holds a `:`; an id may.
        let (repository, id) = rest
            .split_once(':')
            .ok_or_else(|| refuse("no `:` ends the repository"))?;
        let repository =
            RepoName::parse(repository).map_err(|_| refuse("the repository is not owner/name"))?;
        RemoteRef::new(repository, id).ok_or_else(|| refuse("the id is empty"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Written and read back, a reference names the same repository
        /// and id, and its text is the one the store has always kept.
        #[test]
        fn a_reference_reads_back_as_written(
            owner in "[a-z0-9][a-z0-9_-]{0,10}",
            name in "[a-z0-9][a-z0-9._-]{0,10}",
            id in "[A-Za-z0-9:_-]{1,40}",
        ) {
            let repository = RepoName::parse(&format!("{owner}/{name}")).unwrap();
            let r = RemoteRef::new(repository, id.clone()).unwrap();
            let text = r.to_string();
            prop_assert_eq!(&text, &format!("remote:{owner}/{name}:{id}"));
            prop_assert_eq!(text.parse::<RemoteRef>(), Ok(r));
        }

        /// Any text either reads as a reference that writes back to the
        /// same text (folded to lower case) or is refused: never a panic,
        /// never a second spelling.
        #[test]
        fn any_text_reads_back_or_is_refused(text in "(remote:)?[a-zA-Z0-9/:._-]{0,30}") {
            if let Ok(r) = text.parse::<RemoteRef>() {
                let (repo, id) = text["remote:".len()..].split_once(':').unwrap();
                prop_assert_eq!(r.to_string(), format!("remote:{}:{id}", repo.to_ascii_lowercase()));
            }
        }
    }

    #[test]
    fn foreign_and_malformed_references_are_refused_with_why() {
        for (bad, why) in [
            ("", "does not begin"),
            ("thread-1", "does not begin"),
            ("remote:", "no `:`"),
            ("remote:acme/w", "no `:`"),
            ("remote:acme:t", "not owner/name"),
            ("remote:/w:t", "not owner/name"),
            ("remote:a/b/c:t", "not owner/name"),
            ("remote:acme/..:t", "not owner/name"),
            ("remote:acme/w:", "the id is empty"),
        ] {
            let e = bad.parse::<RemoteRef>().unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
        // Rows written before the type: the same text, the same parts.
        let r: RemoteRef = "remote:acme/widgets:019a-t:1".parse().unwrap();
        assert_eq!(
            (r.repository().as_str(), r.id()),
            ("acme/widgets", "019a-t:1")
        );
    }
}
