//! The workspaces of a server whose turns run on remote workers: a worker
//! prepares a session's worktree under its own `workspace_root`, with its
//! own clone and its own read token, as a call of the same kind as the
//! runtime's. The server names folders as its own workspaces would (same
//! layout, same checks) and hands them to the worker relative to the root,
//! so the session's turns name the folder the worker prepared. What else a
//! session keeps on disk is read or removed there too (the base branch's
//! `AGENTS.md`, the worktree's state as a turn ends, retiring it), by calls
//! that name the repository and the session, never a folder.

use super::{Ready, Workspaces};
use crate::agent::remote::hub::CallRoute;
use crate::domain::worktree::{TreeState, WorktreeId};
use crate::worker_api::{self as wire, CallBody, Outcome, Value};
use crate::workspace::{
    Checkout, RepoSpec, Retired, SessionTree, WorkspaceError, WorkspaceManager,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a call that only reads or removes what the worker has on disk
/// (no clone, no fetch) is waited for. A call the worker took and then lost
/// (it died holding it) is never answered; at a turn's end that wait holds
/// the task, so it is kept short. One that runs out leaves what it would
/// have done undone: a tree state unrecorded (the next turn then waits for
/// an operator if the worktree changed), a worktree retired on a later pass.
const LOCAL_CALL_TIMEOUT: Duration = Duration::from_secs(60);

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
        self.call_within(repo, body, self.timeout)
    }

    /// [`Self::call`] for a call that runs nothing but local git on the
    /// worker: waited for at most [`LOCAL_CALL_TIMEOUT`].
    fn call_local(&self, repo: &str, body: CallBody) -> Result<Value, WorkspaceError> {
        self.call_within(repo, body, self.timeout.min(LOCAL_CALL_TIMEOUT))
    }

    fn call_within(
        &self,
        repo: &str,
        body: CallBody,
        timeout: Duration,
    ) -> Result<Value, WorkspaceError> {
        let unfinished = |detail: String| WorkspaceError::Unfinished {
            repo: repo.to_owned(),
            detail,
        };
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| unfinished(format!("no runtime to wait on the worker: {e}")))?;
        let answered =
            handle.block_on(
                self.calls
                    .call(&repo.to_ascii_lowercase(), body, false, timeout),
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

    /// Whether a worker holds `repo`'s lease now: a call no worker can take
    /// would hold its caller for the whole timeout.
    fn leased(&self, repo: &str) -> Result<bool, WorkspaceError> {
        let handle =
            tokio::runtime::Handle::try_current().map_err(|e| WorkspaceError::Unfinished {
                repo: repo.to_owned(),
                detail: format!("no runtime to ask for the workers' leases: {e}"),
            })?;
        let leased = handle.block_on(self.calls.leased_repositories());
        Ok(leased.iter().any(|r| r.eq_ignore_ascii_case(repo)))
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

/// A worker's answer that is not what the call asks for.
fn unexpected(repo: &str, what: &str, value: &Value) -> WorkspaceError {
    WorkspaceError::Unfinished {
        repo: repo.to_owned(),
        detail: format!("the remote worker answered {value:?} to {what}; check that it runs this server's version"),
    }
}

/// Whether `id` is a git object id (SHA-1 or SHA-256, hexadecimal).
fn is_object_id(id: &str) -> bool {
    matches!(id.len(), 40 | 64) && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The worktree's state as a worker reported it: recorded, and compared by
/// that worker before the next turn, so only object ids are taken.
fn tree_from_wire(repo: &str, t: wire::Tree) -> Result<TreeState, WorkspaceError> {
    if !is_object_id(&t.head) || !is_object_id(&t.tree) {
        return Err(WorkspaceError::Unfinished {
            repo: repo.to_owned(),
            detail: "the remote worker reported a worktree state that is not a pair of git object ids; check that it runs this server's version".into(),
        });
    }
    Ok(TreeState {
        head: t.head,
        tree: t.tree,
    })
}

/// Where a retired worktree's uncommitted work is kept (as the workspaces
/// name it), bounded: the name goes into the audit log.
fn kept_ref(repo: &str, kept: Option<String>) -> Result<Option<String>, WorkspaceError> {
    const RETIRED: &str = "refs/codex-bridge/retired/";
    match kept {
        Some(r)
            if !r.starts_with(RETIRED)
                || r.len() > RETIRED.len() + 100
                || !r.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-_".contains(&b)) =>
        {
            Err(WorkspaceError::Unfinished {
                repo: repo.to_owned(),
                detail: format!(
                    "the remote worker kept a retired worktree's work under a ref that is not one of {RETIRED}*; check that it runs this server's version"
                ),
            })
        }
        other => Ok(other),
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

    fn tree_state(
        &self,
        owner: &str,
        name: &str,
        id: WorktreeId,
    ) -> Result<Option<TreeState>, WorkspaceError> {
        // Checked as the worker will check it: a name that cannot be a
        // folder under the root is refused before any call.
        self.names.worktree_path(owner, name, id)?;
        let full = format!("{owner}/{name}");
        let value = self.call_local(
            &full,
            CallBody::TreeState {
                instance: self.instance.clone(),
                owner: owner.to_owned(),
                name: name.to_owned(),
                worktree: worktree_to_wire(id),
            },
        )?;
        match value {
            Value::TreeState { state } => state.map(|t| tree_from_wire(&full, t)).transpose(),
            other => Err(unexpected(&full, "a tree_state call", &other)),
        }
    }

    fn retire(&self, owner: &str, name: &str, id: WorktreeId) -> Result<Retired, WorkspaceError> {
        self.names.worktree_path(owner, name, id)?;
        let full = format!("{owner}/{name}");
        // Retiring waits for no worker: the next idle pass tries again.
        if !self.leased(&full)? {
            return Err(WorkspaceError::Unfinished {
                repo: full,
                detail: "no remote worker holds the repository's lease, so its worktree stays on the worker's disk for now; it is retired once a worker leases the repository".into(),
            });
        }
        let value = self.call_local(
            &full,
            CallBody::RetireSession {
                instance: self.instance.clone(),
                owner: owner.to_owned(),
                name: name.to_owned(),
                worktree: worktree_to_wire(id),
            },
        )?;
        match value {
            Value::Retired { removed, kept } => Ok(Retired {
                removed,
                kept: kept_ref(&full, kept)?,
            }),
            other => Err(unexpected(&full, "a retire_session call", &other)),
        }
    }

    fn base_instructions(
        &self,
        owner: &str,
        name: &str,
        base: Option<&str>,
    ) -> Result<Option<String>, WorkspaceError> {
        self.names.path_for(owner, name)?;
        let full = format!("{owner}/{name}");
        let value = self.call_local(
            &full,
            CallBody::BaseInstructions {
                instance: self.instance.clone(),
                owner: owner.to_owned(),
                name: name.to_owned(),
                base: base.map(str::to_owned),
            },
        )?;
        match value {
            // Bounded here too: the thread gets no more than a local one.
            Value::Instructions { text } => Ok(text.map(crate::workspace::bounded_instructions)),
            other => Err(unexpected(&full, "a base_instructions call", &other)),
        }
    }
}

#[cfg(test)]
mod tests;
