//! A session's own work tree: a `git worktree` of the repository's clone, on
//! a branch of its own, kept between turns with whatever the agent left in
//! it, so work that spans turns keeps its uncommitted changes and two
//! sessions of one repository never see each other's.
//!
//! "Dirty" here means different from the state recorded when the session's
//! last turn ended ([`TreeState`]): someone or something else changed the
//! worktree, and nothing runs in it until an operator looks. The state is
//! the commit checked out and the tree of every path that is not ignored,
//! uncommitted and untracked ones included, written with an index of our
//! own so the agent's index is never touched.
//!
//! Folders: `workspace_root/.worktrees/<instance>/<owner>/<repo>/<issue-N |
//! pull-N>`; `.worktrees` cannot meet an instance (whose id cannot start
//! with `.`). Branches: `codex/issue-N`, `codex/pull-N`. A retired worktree's
//! uncommitted work is kept as a commit under `refs/codex-bridge/retired/`.

use super::disk::{inspect, Found, Layout};
use super::error::map_local;
use super::git;
use super::names::RemoteUrl;
use super::tree::{in_progress, Workspace};
use super::{Checkout, Prepared, RepoSpec, Strict, WorkspaceError, WorkspaceManager};
use crate::domain::worktree::{TreeState, WorktreeId};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Under the root, beside the instances' folders.
const WORKTREES_DIR: &str = ".worktrees";
/// Empty folders for turns that need no files of the repository (see
/// [`WorkspaceManager::scratch_for`]).
const SCRATCH_DIR: &str = ".scratch";

/// Where a retired worktree's uncommitted work is kept.
const RETIRED_REFS: &str = "refs/codex-bridge/retired";

/// A session's worktree to prepare, and what its last turn left in it.
#[derive(Debug, Clone, Copy)]
pub struct SessionTree<'a> {
    pub id: WorktreeId,
    /// Recorded when the session's last turn ended; `None` before its first
    /// turn, or once an operator accepted the worktree as it is.
    pub recorded: Option<&'a TreeState>,
}

/// What retiring a worktree did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retired {
    /// The worktree existed and was removed.
    pub removed: bool,
    /// The ref that keeps the uncommitted work it held, if it held any.
    pub kept: Option<String>,
}

impl WorkspaceManager {
    /// A session's worktree folder, validated and normalised under the root.
    pub fn worktree_path(
        &self,
        owner: &str,
        repo: &str,
        id: WorktreeId,
    ) -> Result<PathBuf, WorkspaceError> {
        if id.number < 0 {
            return Err(WorkspaceError::InvalidRef {
                value: id.dir_name(),
                reason: "an Issue or pull request number is not negative".into(),
            });
        }
        self.under_root(owner, repo, |root| {
            root.join(WORKTREES_DIR)
                .join(&self.instance_id)
                .join(owner)
                .join(repo)
                .join(id.dir_name())
        })
    }

    /// An empty folder of the session's own, made if missing, for a turn
    /// that needs nothing of the repository but must run somewhere: the
    /// reply-retry turn of a task whose worktree is in another process's
    /// workspace root (it only posts text its prompt carries). Removed with
    /// the session's worktree.
    pub fn scratch_for(
        &self,
        owner: &str,
        repo: &str,
        id: WorktreeId,
    ) -> Result<PathBuf, WorkspaceError> {
        let path = self.scratch_path(owner, repo, id)?;
        std::fs::create_dir_all(&path).map_err(|source| WorkspaceError::Io {
            what: "cannot make the session's scratch folder",
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    fn scratch_path(
        &self,
        owner: &str,
        repo: &str,
        id: WorktreeId,
    ) -> Result<PathBuf, WorkspaceError> {
        // Named as the worktree is, so the same checks hold.
        self.worktree_path(owner, repo, id)?;
        self.under_root(owner, repo, |root| {
            root.join(SCRATCH_DIR)
                .join(&self.instance_id)
                .join(owner)
                .join(repo)
                .join(id.dir_name())
        })
    }

    /// Fetch the repository's clone (cloning it the first time), then make
    /// the session's worktree ready: created on its own branch at what the
    /// task needs the first time; after, checked against the state its last
    /// turn left, and (for a pull request whose worktree holds no
    /// uncommitted change) fast-forwarded to the PR's head. Nothing in it is
    /// ever reset, cleaned or forced; an Issue's branch never moves on its
    /// own (the agent's work is on it).
    pub fn prepare_session(
        &self,
        spec: &RepoSpec,
        checkout: &Checkout,
        session: SessionTree<'_>,
    ) -> Result<Prepared, WorkspaceError> {
        let remote = self.check_request(spec, checkout)?;
        let lexical = self.worktree_path(&spec.owner, &spec.name, session.id)?;
        let synced = self.sync(spec, &remote, checkout, Strict::SharedGitOnly)?;
        let wt = self.open_worktree(spec, &remote, session.id, &lexical)?;
        let branch = session.id.branch();
        // A child's worktree builds on its parent's branch and never follows
        // the pull request's head on its own.
        let pull = matches!(checkout, Checkout::PullRequest { .. }) && session.id.child.is_none();
        match inspect(&wt.path, Layout::Worktree)? {
            Found::Missing | Found::Empty => {
                if let Some(recorded) = session.recorded {
                    // Gone with uncommitted work in it: fail closed rather
                    // than start over as if nothing had been there.
                    let head_tree = synced.ws.commit_tree(&recorded.head)?;
                    if head_tree.as_deref() != Some(recorded.tree.as_str()) {
                        return Err(WorkspaceError::Dirty {
                            path: wt.path.clone(),
                            detail: format!(
                                "the session's worktree is gone, and it held uncommitted work (tree {}) when its last turn ended; clear the task's workspace to start again from branch {branch}",
                                recorded.tree
                            ),
                        });
                    }
                }
                let ws = &synced.ws;
                ws.local("worktree", git::args(["worktree", "prune"]))?;
                let mut args = git::args(["worktree", "add", "--quiet"]);
                if ws.commit_of(&format!("refs/heads/{branch}"))?.is_some() {
                    args.push(git::arg(&wt.path));
                    args.push(branch.clone().into());
                } else {
                    // A child starts from what its parent committed, so its
                    // work builds on the parent's and its diff is its own.
                    let parent_branch = match session.id.parent() {
                        Some(p) => ws
                            .commit_of(&format!("refs/heads/{}", p.branch()))?
                            .map(|_| p.branch()),
                        None => None,
                    };
                    args.extend(git::args(["--no-track", "-b", &branch]));
                    args.push(git::arg(&wt.path));
                    args.push(
                        parent_branch
                            .unwrap_or_else(|| synced.target.clone())
                            .into(),
                    );
                }
                ws.local("worktree", args)?;
                if pull {
                    wt.follow(&synced.target)?;
                }
            }
            Found::Repo => {
                let state = wt.check_session(&branch, session.recorded)?;
                if pull && wt.commit_tree(&state.head)?.as_deref() == Some(state.tree.as_str()) {
                    wt.follow(&synced.target)?;
                }
            }
            Found::Other(detail) => {
                return Err(WorkspaceError::Dirty {
                    path: wt.path.clone(),
                    detail: detail.into(),
                })
            }
        }
        let head = wt.local(
            "rev-parse",
            git::args(["rev-parse", "--verify", "HEAD^{commit}"]),
        )?;
        tracing::debug!(repo = %wt.repo, branch = %branch, head = %head, cloned = synced.cloned, "session worktree prepared");
        Ok(Prepared {
            path: wt.path.clone(),
            branch,
            head,
            cloned: synced.cloned,
        })
    }

    /// What a session's worktree holds now (recorded when a turn ends);
    /// `None` when it has none.
    pub fn tree_state(
        &self,
        owner: &str,
        repo: &str,
        id: WorktreeId,
    ) -> Result<Option<TreeState>, WorkspaceError> {
        let path = self.worktree_path(owner, repo, id)?;
        if inspect(&path, Layout::Worktree)? != Found::Repo {
            return Ok(None);
        }
        let remote = RemoteUrl::local_only();
        let wt = self.worktree_at(owner, repo, &remote, path);
        wt.state().map(Some)
    }

    /// Removes a session's worktree (its branch stays). Uncommitted work in
    /// it is kept first as a commit under `refs/codex-bridge/retired/`, so
    /// retiring never loses what the agent left.
    pub fn retire_session(
        &self,
        owner: &str,
        repo: &str,
        id: WorktreeId,
    ) -> Result<Retired, WorkspaceError> {
        let path = self.worktree_path(owner, repo, id)?;
        let scratch = self.scratch_path(owner, repo, id)?;
        if let Err(source) = std::fs::remove_dir_all(&scratch) {
            if source.kind() != std::io::ErrorKind::NotFound {
                return Err(WorkspaceError::Io {
                    what: "cannot remove the session's scratch folder",
                    path: scratch,
                    source,
                });
            }
        }
        let clone = self.path_for(owner, repo)?;
        let remote = RemoteUrl::local_only();
        let main = self.worktree_at(owner, repo, &remote, clone.clone());
        let found = inspect(&path, Layout::Worktree)?;
        if !clone.join(".git").is_dir() {
            return Ok(Retired {
                removed: false,
                kept: None,
            });
        }
        let mut kept = None;
        if found == Found::Repo {
            let wt = self.worktree_at(owner, repo, &remote, path.clone());
            let state = wt.state()?;
            if wt.commit_tree(&state.head)?.as_deref() != Some(state.tree.as_str()) {
                let message = format!(
                    "uncommitted work of {} when its worktree was retired",
                    id.dir_name()
                );
                let commit = main.local(
                    "commit-tree",
                    git::args([
                        "-c",
                        "user.name=codex-bridge",
                        "-c",
                        "user.email=codex-bridge@localhost",
                        "commit-tree",
                        &state.tree,
                        "-p",
                        &state.head,
                        "-m",
                        &message,
                    ]),
                )?;
                let name = format!("{RETIRED_REFS}/{}", id.dir_name());
                main.local(
                    "update-ref",
                    git::args(["update-ref", "-m", &message, &name, &commit]),
                )?;
                kept = Some(name);
            }
        }
        if found != Found::Missing {
            let mut args = git::args(["worktree", "remove", "--force"]);
            args.push(git::arg(&path));
            main.local("worktree", args)?;
        }
        main.local("worktree", git::args(["worktree", "prune"]))?;
        Ok(Retired {
            removed: found != Found::Missing,
            kept,
        })
    }

    /// The worktree's folder made (its parents), resolved again now that it
    /// exists on disk.
    fn open_worktree<'a>(
        &'a self,
        spec: &RepoSpec,
        remote: &'a RemoteUrl,
        id: WorktreeId,
        lexical: &Path,
    ) -> Result<Workspace<'a>, WorkspaceError> {
        let parent = lexical.parent().unwrap_or(lexical).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(|source| WorkspaceError::Io {
            what: "could not create the worktrees folder; check the permissions and free space of workspace_root",
            path: parent,
            source,
        })?;
        let path = self.worktree_path(&spec.owner, &spec.name, id)?;
        Ok(self.worktree_at(&spec.owner, &spec.name, remote, path))
    }

    fn worktree_at<'a>(
        &'a self,
        owner: &str,
        repo: &str,
        remote: &'a RemoteUrl,
        path: PathBuf,
    ) -> Workspace<'a> {
        Workspace {
            mgr: self,
            ceiling: path.parent().unwrap_or(&path).to_path_buf(),
            path,
            remote,
            repo: format!("{owner}/{repo}"),
        }
    }
}

impl Workspace<'_> {
    /// The state of an existing session worktree, refused (as Dirty) when an
    /// operation is under way in it, it is off its branch, or it differs
    /// from what its last turn left.
    fn check_session(
        &self,
        branch: &str,
        recorded: Option<&TreeState>,
    ) -> Result<TreeState, WorkspaceError> {
        let git_dir =
            PathBuf::from(self.local("rev-parse", git::args(["rev-parse", "--absolute-git-dir"]))?);
        let mut problems = in_progress(&git_dir);
        let on = self.probe(git::args(["symbolic-ref", "-q", "HEAD"]))?;
        if on.as_deref() != Some(format!("refs/heads/{branch}").as_str()) {
            problems.push(format!(
                "it is on {}, not on its session's branch {branch}",
                on.as_deref().unwrap_or("a detached HEAD")
            ));
        }
        if !problems.is_empty() {
            return Err(WorkspaceError::Dirty {
                path: self.path.clone(),
                detail: problems.join("; "),
            });
        }
        let state = self.state()?;
        match recorded {
            Some(r) if *r != state => Err(WorkspaceError::Dirty {
                path: self.path.clone(),
                detail: format!(
                    "it changed since the session's last turn ended (then commit {} with tree {}, now commit {} with tree {}); look at it, then clear the task's workspace to run on what is there",
                    r.head, r.tree, state.head, state.tree
                ),
            }),
            Some(_) => Ok(state),
            None => {
                tracing::info!(path = %self.path.display(), head = %state.head, "session worktree taken as it is (no state was recorded for it)");
                Ok(state)
            }
        }
    }

    /// Fast-forward the worktree's branch to `target` when it is behind it;
    /// a branch with commits the target lacks stays where it is.
    fn follow(&self, target: &str) -> Result<(), WorkspaceError> {
        let Some(head) = self.commit_of("HEAD")? else {
            return Ok(());
        };
        if head == target {
            return Ok(());
        }
        if self.is_ancestor(&head, target)? {
            self.local(
                "merge",
                git::args(["merge", "--ff-only", "--quiet", target]),
            )?;
        } else {
            tracing::info!(path = %self.path.display(), head = %head, target = %target, "the session's branch has commits the pull request's head lacks; left where it is");
        }
        Ok(())
    }

    /// The tree of `commit`, or `None` when there is no such commit.
    fn commit_tree(&self, commit: &str) -> Result<Option<String>, WorkspaceError> {
        self.probe(git::args([
            "rev-parse",
            "--verify",
            "-q",
            &format!("{commit}^{{tree}}"),
        ]))
    }

    /// What the worktree holds: HEAD and the tree of every path that is not
    /// ignored, written through a copy of its index (so unchanged files are
    /// not read again, and its own index is untouched).
    pub(super) fn state(&self) -> Result<TreeState, WorkspaceError> {
        let head = self
            .commit_of("HEAD")?
            .ok_or_else(|| WorkspaceError::Dirty {
                path: self.path.clone(),
                detail: "HEAD names no commit".into(),
            })?;
        let git_dir =
            PathBuf::from(self.local("rev-parse", git::args(["rev-parse", "--absolute-git-dir"]))?);
        let index = git_dir.join("codex-bridge-state-index");
        let copied = match std::fs::copy(git_dir.join("index"), &index) {
            Ok(_) => true,
            Err(e) if e.kind() == ErrorKind::NotFound => false,
            Err(source) => {
                return Err(WorkspaceError::Io {
                    what: "could not copy the worktree's index to read its state",
                    path: index,
                    source,
                })
            }
        };
        let run = |op: &'static str, args| {
            self.run_with_index(args, Some(&index))
                .map(|out| out.trim().to_owned())
                .map_err(|f| map_local(f, op, &self.path))
        };
        let tree = (|| {
            if !copied {
                run("read-tree", git::args(["read-tree", "HEAD"]))?;
            }
            run("add", git::args(["add", "--all", "--", "."]))?;
            run("write-tree", git::args(["write-tree"]))
        })();
        let _ = std::fs::remove_file(&index);
        Ok(TreeState { head, tree: tree? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ResourceKind;

    #[test]
    fn worktrees_live_beside_the_instances_with_a_branch_of_their_own() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let m = WorkspaceManager::new(root.clone(), "default".into(), None);
        let issue = WorktreeId {
            kind: ResourceKind::Issue,
            number: 12,
            child: None,
        };
        assert_eq!(
            m.worktree_path("acme", "widgets", issue).unwrap(),
            root.join(".worktrees/default/acme/widgets/issue-12")
        );
        assert_eq!(issue.branch(), "codex/issue-12");
        let child = WorktreeId {
            child: Some(3),
            ..issue
        };
        assert_eq!(
            m.worktree_path("acme", "widgets", child).unwrap(),
            root.join(".worktrees/default/acme/widgets/issue-12-child-3")
        );
        assert_eq!(child.branch(), "codex/issue-12-child-3");
        assert_eq!(child.parent(), Some(issue));
        let pull = WorktreeId {
            kind: ResourceKind::Pull,
            number: 7,
            child: None,
        };
        assert_eq!(pull.branch(), "codex/pull-7");
        for bad in ["../x", "a/b", "..", ""] {
            assert!(m.worktree_path(bad, "w", issue).is_err(), "{bad:?}");
            assert!(m.worktree_path("acme", bad, issue).is_err(), "{bad:?}");
        }
        let negative = WorktreeId {
            kind: ResourceKind::Issue,
            number: -1,
            child: None,
        };
        assert_eq!(
            m.worktree_path("acme", "w", negative).unwrap_err().code(),
            "invalid_ref_name"
        );
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
    }
}
