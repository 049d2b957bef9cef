//! The workspaces of a server whose turns run on remote workers: a worker
//! prepares a session's worktree under its own `workspace_root`, with its
//! own clone and its own read token, as a call of the same kind as the
//! runtime's. The server names folders as its own workspaces would (same
//! layout, same checks) and hands them to the worker relative to the root,
//! so the session's turns name the folder the worker prepared.

use super::{Ready, Workspaces};
use crate::agent::remote::hub::CallRoute;
use crate::domain::worktree::{TreeState, WorktreeId};
use crate::worker_api::{self as wire, CallBody, Outcome, Value};
use crate::workspace::{Checkout, RepoSpec, SessionTree, WorkspaceError, WorkspaceManager};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub struct RemoteWorkspaces {
    calls: Arc<dyn CallRoute>,
    /// Names folders (never touches them): the server's own layout.
    names: WorkspaceManager,
    instance: String,
    timeout: Duration,
}

impl RemoteWorkspaces {
    pub fn new(
        calls: Arc<dyn CallRoute>,
        names: WorkspaceManager,
        instance: String,
        timeout: Duration,
    ) -> RemoteWorkspaces {
        RemoteWorkspaces {
            calls,
            names,
            instance,
            timeout,
        }
    }

    /// Blocking (the repo actor runs workspaces on a blocking thread): the
    /// call's answer, or why none came.
    fn call(&self, repo: &str, body: CallBody) -> Result<Value, WorkspaceError> {
        let unfinished = |detail: String| WorkspaceError::Unfinished {
            repo: repo.to_owned(),
            detail,
        };
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| unfinished(format!("no runtime to wait on the worker: {e}")))?;
        let answered =
            handle.block_on(
                self.calls
                    .call(&repo.to_ascii_lowercase(), body, false, self.timeout),
            );
        let outcome = answered.map_err(|e| unfinished(e.to_string()))?.outcome;
        match outcome {
            Outcome::Ok { value } => Ok(value),
            Outcome::WorkspaceFailed {
                disposition,
                code,
                message,
            } => Err(failure(repo, &disposition, &code, message)),
            Outcome::Unavailable { message }
            | Outcome::Uncertain { message }
            | Outcome::Refused { message } => Err(unfinished(message)),
        }
    }

    fn folder(&self, repo: &str, value: Value) -> Result<Ready, WorkspaceError> {
        match value {
            Value::Workspace { cwd, head } => {
                let root = self.names.root()?;
                let path = root.join(&cwd);
                // The worker's answer names a folder under the root, or nothing.
                let plain = std::path::Path::new(&cwd)
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
                if !plain || cwd.is_empty() {
                    return Err(WorkspaceError::OutsideRoot {
                        resolved: path.clone(),
                        path,
                        root,
                    });
                }
                Ok(Ready { path, head })
            }
            other => Err(WorkspaceError::Unfinished {
                repo: repo.to_owned(),
                detail: format!("the remote worker answered {other:?} to a workspace call"),
            }),
        }
    }
}

/// A worker's workspace failure, on the same disposition as if it had
/// happened here.
fn failure(repo: &str, disposition: &str, code: &str, message: String) -> WorkspaceError {
    let detail = format!("on the remote worker ({code}): {message}");
    match disposition {
        "needs_operator" => WorkspaceError::Dirty {
            path: PathBuf::from(repo),
            detail,
        },
        "cannot_name" => WorkspaceError::InvalidRef {
            value: format!("repository {repo}"),
            reason: detail,
        },
        "permanent" => WorkspaceError::NotFound {
            op: "prepare",
            repo: repo.to_owned(),
            detail,
        },
        _ => WorkspaceError::Unfinished {
            repo: repo.to_owned(),
            detail,
        },
    }
}

pub fn checkout_to_wire(c: &Checkout) -> wire::Checkout {
    match c {
        Checkout::DefaultBranch { name } => wire::Checkout::DefaultBranch { name: name.clone() },
        Checkout::PullRequest { number, head_ref } => wire::Checkout::PullRequest {
            number: *number,
            head_ref: head_ref.clone(),
        },
    }
}

pub fn worktree_to_wire(id: WorktreeId) -> wire::Worktree {
    wire::Worktree {
        kind: id.kind.as_str().to_owned(),
        number: id.number,
        child: id.child,
    }
}

fn tree_to_wire(t: &TreeState) -> wire::Tree {
    wire::Tree {
        head: t.head.clone(),
        tree: t.tree.clone(),
    }
}

impl Workspaces for RemoteWorkspaces {
    fn prepare(&self, repo: &RepoSpec, checkout: &Checkout) -> Result<PathBuf, WorkspaceError> {
        // Only sessions run turns; a bare checkout is a session's worktree
        // with no history to check against.
        let id = WorktreeId {
            kind: crate::domain::ResourceKind::Issue,
            number: 0,
            child: None,
        };
        self.ready(repo, checkout, SessionTree { id, recorded: None })
            .map(|r| r.path)
    }

    fn ready(
        &self,
        repo: &RepoSpec,
        checkout: &Checkout,
        session: SessionTree<'_>,
    ) -> Result<Ready, WorkspaceError> {
        let full = format!("{}/{}", repo.owner, repo.name);
        let value = self.call(
            &full,
            CallBody::PrepareSession {
                instance: self.instance.clone(),
                owner: repo.owner.clone(),
                name: repo.name.clone(),
                clone_url: repo.clone_url.clone(),
                checkout: checkout_to_wire(checkout),
                worktree: worktree_to_wire(session.id),
                recorded: session.recorded.map(tree_to_wire),
            },
        )?;
        self.folder(&full, value)
    }

    fn path_for(&self, owner: &str, name: &str) -> Result<PathBuf, WorkspaceError> {
        self.names.path_for(owner, name)
    }

    fn worktree_for(
        &self,
        owner: &str,
        name: &str,
        id: WorktreeId,
    ) -> Result<PathBuf, WorkspaceError> {
        self.names.worktree_path(owner, name, id)
    }

    fn scratch_for(
        &self,
        owner: &str,
        name: &str,
        id: WorktreeId,
    ) -> Result<PathBuf, WorkspaceError> {
        let full = format!("{owner}/{name}");
        let value = self.call(
            &full,
            CallBody::Scratch {
                instance: self.instance.clone(),
                owner: owner.to_owned(),
                name: name.to_owned(),
                worktree: worktree_to_wire(id),
            },
        )?;
        self.folder(&full, value).map(|r| r.path)
    }
}
