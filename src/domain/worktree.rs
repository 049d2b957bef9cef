//! A session's own worktree, as every floor names it: which session it
//! belongs to ([`WorktreeId`]) and what it held when a turn ended
//! ([`TreeState`]).

use super::keys::{ResourceKey, ResourceKind};

/// The session a worktree belongs to: an Issue's or a pull request's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorktreeId {
    pub kind: ResourceKind,
    /// The Issue's or pull request's number.
    pub number: i64,
    /// A delegated child's number: its own worktree and branch.
    pub child: Option<i64>,
}

impl WorktreeId {
    /// The worktree of the session about `key`.
    pub fn of(key: &ResourceKey) -> WorktreeId {
        WorktreeId {
            kind: key.kind(),
            number: key.number(),
            child: key.child(),
        }
    }

    /// The worktree of the session a child's was delegated from.
    pub fn parent(&self) -> Option<WorktreeId> {
        self.child.map(|_| WorktreeId {
            child: None,
            ..*self
        })
    }

    /// The worktree's folder name, `issue-12`, `pull-7`, or a child's
    /// `issue-12-child-3`.
    pub fn dir_name(&self) -> String {
        let kind = match self.kind {
            ResourceKind::Issue => "issue",
            ResourceKind::Pull => "pull",
        };
        match self.child {
            None => format!("{kind}-{}", self.number),
            Some(n) => format!("{kind}-{}-child-{n}", self.number),
        }
    }

    /// The session's local branch, `codex/issue-12` or `codex/pull-7`: its
    /// own, so it is never checked out in two worktrees.
    pub fn branch(&self) -> String {
        format!("codex/{}", self.dir_name())
    }
}

/// What a worktree holds: the commit checked out and the tree of every path
/// that is not ignored (uncommitted and untracked ones included). Two equal
/// states hold the same content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeState {
    pub head: String,
    pub tree: String,
}
