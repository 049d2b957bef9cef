//! What can go wrong preparing a workspace, and what it means for the task:
//! the one error a failure travels in, from git to the task's state. Each
//! variant says, through [`WorkspaceError::disposition`], where the task goes
//! and, through [`WorkspaceError::code`], the error code it carries; its
//! message is what the operator reads in the audit log.

use super::git::Failure;
use std::path::{Path, PathBuf};

/// What a failure means for the task that needed the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// No workspace can be named from what the task carries: a name, a
    /// branch or a clone URL was refused before anything ran, and nothing was
    /// touched. The task fails.
    CannotName,
    /// An operator must look at the workspace first (changes, an operation
    /// in progress, a lock, a branch that cannot be fast-forwarded); nothing
    /// was changed. The task waits in `blocked_workspace`.
    NeedsOperator,
    /// Another try may succeed (the network, the server, the credentials,
    /// the disk): `retry_wait` while the task has attempts left, then `failed`.
    Transient,
    /// Trying again cannot help (no such repository, branch or pull request,
    /// no clone URL, git failed otherwise). The task fails.
    Permanent,
}

/// What can go wrong, phrased for the operator who reads it. No message ever
/// contains the token.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// An instance, owner or repository name that is not a plain Gitea name.
    #[error("refusing {field} {value}: {reason}; a workspace path is built only from Gitea names (letters, digits, '-', '_' and '.')")]
    InvalidName {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    /// The path leaves the root, or goes through a symbolic link.
    #[error("refusing workspace path {path}: it resolves to {resolved}; a workspace must be a plain directory under the workspace root {root}, so remove the symbolic link")]
    OutsideRoot {
        path: PathBuf,
        resolved: PathBuf,
        root: PathBuf,
    },
    /// A branch name (or pull request number) git would not accept safely.
    #[error("refusing {value}: {reason}")]
    InvalidRef {
        /// What was refused: `branch "x"` or `pull request #0`.
        value: String,
        reason: String,
    },
    /// A clone URL that is not plain http(s), or not on the configured Gitea.
    #[error("refusing clone URL {url}: {reason}")]
    InvalidUrl { url: String, reason: &'static str },
    /// Uncommitted changes, an operation in progress, a lock, or a branch that
    /// cannot be fast-forwarded. Nothing was changed.
    #[error("workspace {path} cannot be updated safely: {detail}. codex-bridge never resets, cleans or stashes a workspace: commit and push, or remove, what is there by hand, then requeue the task")]
    Dirty { path: PathBuf, detail: String },
    /// The server refused the credentials (or asked for ones we do not have).
    #[error("git {op} of {repo} was refused by the server: {stderr}. Check that gitea_token is set and valid and that the bot can read the repository")]
    Auth {
        op: &'static str,
        repo: String,
        stderr: String,
    },
    /// The network, a 5xx or 429 from the server, or the deadline.
    #[error("git {op} of {repo} failed, probably transiently: {stderr}. It can be retried; if it persists, check the network and Gitea")]
    Transient {
        op: &'static str,
        repo: String,
        stderr: String,
    },
    /// The repository, branch or pull request ref does not exist on the server
    /// (or is hidden from the bot).
    #[error("git {op} of {repo}: not found on the server: {detail}. Check that the repository, branch or pull request exists and that the bot can read it")]
    NotFound {
        op: &'static str,
        repo: String,
        detail: String,
    },
    /// Git failed in a way none of the above covers.
    #[error("git {op} in {path} failed: {stderr}")]
    Git {
        op: &'static str,
        path: PathBuf,
        stderr: String,
    },
    /// The file system (or starting git) failed.
    #[error("{what} ({path}): {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The repository has no clone URL to fetch from.
    #[error("repository {repo} has no clone URL (the webhook did not carry one)")]
    NoCloneUrl { repo: String },
    /// The preparation ended without an answer (the thread that ran it
    /// panicked or was cancelled); the log has the cause.
    #[error("preparing the workspace of {repo} stopped without a result: {detail}")]
    Unfinished { repo: String, detail: String },
}

impl WorkspaceError {
    /// The stable snake_case code the task carries (its `error_code`, shown
    /// by the admin API and in the failure receipt) and the audit event.
    pub fn code(&self) -> &'static str {
        match self {
            WorkspaceError::InvalidName { .. } => "invalid_repository_name",
            WorkspaceError::OutsideRoot { .. } => "workspace_outside_root",
            WorkspaceError::InvalidRef { .. } => "invalid_ref_name",
            WorkspaceError::InvalidUrl { .. } => "invalid_clone_url",
            WorkspaceError::Dirty { .. } => "workspace_dirty",
            WorkspaceError::Auth { .. } => "git_auth_failed",
            WorkspaceError::Transient { .. } => "git_transient",
            WorkspaceError::NotFound { .. } => "git_not_found",
            WorkspaceError::Git { .. } => "git_failed",
            WorkspaceError::Io { .. } => "workspace_io",
            WorkspaceError::NoCloneUrl { .. } => "no_clone_url",
            WorkspaceError::Unfinished { .. } => "workspace_failed",
        }
    }

    /// Where the task goes. I/O errors are retried: a full disk or a wrong
    /// permission is fixed by an operator, not by failing the task at once.
    /// Refused credentials get the same retries: a token an operator is
    /// replacing may work by the next attempt.
    pub fn disposition(&self) -> Disposition {
        match self {
            WorkspaceError::InvalidName { .. }
            | WorkspaceError::OutsideRoot { .. }
            | WorkspaceError::InvalidRef { .. }
            | WorkspaceError::InvalidUrl { .. } => Disposition::CannotName,
            WorkspaceError::Dirty { .. } => Disposition::NeedsOperator,
            WorkspaceError::Auth { .. }
            | WorkspaceError::Transient { .. }
            | WorkspaceError::Io { .. }
            | WorkspaceError::Unfinished { .. } => Disposition::Transient,
            WorkspaceError::NotFound { .. }
            | WorkspaceError::Git { .. }
            | WorkspaceError::NoCloneUrl { .. } => Disposition::Permanent,
        }
    }
}

/// A failed command that did not need the remote: a lock means someone else
/// is at work in the workspace (Dirty); anything else is reported as is.
pub(super) fn map_local(failure: Failure, op: &'static str, path: &Path) -> WorkspaceError {
    let stderr = failure.stderr();
    match failure {
        Failure::Spawn(source) => WorkspaceError::Io {
            what: "could not run git; install it, or check the git program the manager was given",
            path: path.to_path_buf(),
            source,
        },
        Failure::TimedOut { .. } => WorkspaceError::Transient {
            op,
            repo: path.display().to_string(),
            stderr,
        },
        Failure::Exit { .. } if stderr.contains(".lock': File exists") => WorkspaceError::Dirty {
            path: path.to_path_buf(),
            detail: format!("another git process holds a lock: {stderr}"),
        },
        Failure::Exit { .. } => WorkspaceError::Git {
            op,
            path: path.to_path_buf(),
            stderr,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispositions_follow_the_lifecycle() {
        let dirty = WorkspaceError::Dirty {
            path: PathBuf::from("/w"),
            detail: "x".into(),
        };
        assert_eq!(dirty.disposition(), Disposition::NeedsOperator);
        assert_eq!(dirty.code(), "workspace_dirty");
        let auth = WorkspaceError::Auth {
            op: "fetch",
            repo: "a/b".into(),
            stderr: "401".into(),
        };
        assert_eq!(auth.disposition(), Disposition::Transient);
        assert_eq!(auth.code(), "git_auth_failed");
        let transient = WorkspaceError::Transient {
            op: "fetch",
            repo: "a/b".into(),
            stderr: "500".into(),
        };
        assert_eq!(transient.disposition(), Disposition::Transient);
        assert_eq!(transient.code(), "git_transient");
        let missing = WorkspaceError::NoCloneUrl { repo: "a/b".into() };
        assert_eq!(missing.disposition(), Disposition::Permanent);
        assert_eq!(missing.code(), "no_clone_url");
    }
}
