//! The workspace manager: one clone per repository at
//! `workspace_root/<instance>/<owner>/<repo>`, cloned the first time and
//! fetched after, and a worktree of it per Issue/PR session
//! (`worktree.rs`) where that session's turns run, checked out at what its
//! task needs (the default branch, or a pull request's head).
//!
//! It is blocking (the repo actor runs it on a blocking thread, and holds the
//! repository's lease, so two calls never work on one workspace at once) and
//! runs the system `git` with argv only, never through a shell.
//!
//! What it promises:
//!
//! - **Paths** are built only from validated Gitea names and checked to stay
//!   under the root, lexically and on disk (no symbolic link on the way).
//! - **The token** reaches git only through the environment, as
//!   `http.<origin>.extraHeader` configuration for the clone URL's origin and
//!   only for commands that talk to the remote: never in argv, a URL,
//!   `.git/config`, a log line or an error message.
//! - **Nothing is ever reset, cleaned, stashed or forced.** A workspace with
//!   uncommitted changes, an operation in progress, a lock, or a branch that
//!   cannot be fast-forwarded is reported as [`WorkspaceError::Dirty`] and left
//!   exactly as it was.
//! - **No prompt**: git never waits for a password; every command has a
//!   deadline and is killed there.
//!
//! A failure is one [`WorkspaceError`]: the caller moves the task where its
//! [`WorkspaceError::disposition`] says, with its [`WorkspaceError::code`].

mod disk;
mod error;
mod git;
mod instructions;
mod names;
mod tree;
mod worktree;

pub use crate::domain::worktree::{TreeState, WorktreeId};
pub use error::{Disposition, WorkspaceError};
pub use instructions::{bounded as bounded_instructions, MAX_INSTRUCTIONS_BYTES};
pub use worktree::{Retired, SessionTree};

use disk::{check_no_links, inspect, Found, Layout};
use error::map_local;
use git::{Failure, Git, Invocation};
use names::{absolute_lexical, check_name, precheck_branch, quote, RemoteUrl};
use secrecy::SecretString;
use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Component, PathBuf};
use std::time::Duration;
use tree::{pull_ref, Workspace};

/// Long enough for a first clone of a large repository over a slow link.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Where half-finished clones live, under the root. An instance id cannot
/// start with `.`, so this never meets a workspace.
const STAGING_DIR: &str = ".staging";

/// Whether the clone's own work tree must be clean: it must when the task
/// works in it; a session works in its own worktree, and the clone is only
/// the shared `.git` it hangs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strict {
    CleanCheckout,
    SharedGitOnly,
}

/// A clone that is fetched, and what the task wants from it.
struct Synced<'a> {
    ws: Workspace<'a>,
    cloned: bool,
    /// The branch the task names (the default branch, or the PR's head).
    branch: String,
    /// The commit it is at on the remote.
    target: String,
    /// How messages name the target.
    what: String,
}

/// Clones, fetches and checks out repositories under one root.
#[derive(Debug)]
pub struct WorkspaceManager {
    /// `workspace_root` as configured (maybe relative; resolved on each use, so
    /// the root may be created after the manager).
    root: PathBuf,
    /// The first path component under the root (`default`).
    instance_id: String,
    /// The bot's Gitea token; `None` for public repositories.
    token: Option<SecretString>,
    /// `scheme://authority/` of `gitea_url`: when set, clone URLs elsewhere are
    /// refused, so a payload cannot send the token to another host.
    gitea_origin: Option<String>,
    git_program: OsString,
    /// Deadline of one git command.
    timeout: Duration,
}

/// The repository to work on, as Gitea names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoSpec {
    pub owner: String,
    pub name: String,
    /// Gitea's `clone_url` (http or https). User information in it is removed
    /// (with a warning), never used. `None` (the webhook carried none) is
    /// refused as [`WorkspaceError::NoCloneUrl`].
    pub clone_url: Option<String>,
}

/// What a task needs checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checkout {
    /// The named branch, or the remote's default branch (`origin/HEAD`) when
    /// `None`. Pass the name from the webhook when there is one: it follows a
    /// change of the default branch without an extra request.
    DefaultBranch { name: Option<String> },
    /// A pull request: `refs/pull/<number>/head` of the base repository (Gitea
    /// keeps it for fork PRs too), checked out as local branch `head_ref`.
    /// For a fork PR whose branch name equals a base branch (`main`), pass a
    /// distinct name such as `pr-<number>` to keep the base branch untouched.
    PullRequest { number: i64, head_ref: String },
}

/// A workspace ready for a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The work tree (canonical).
    pub path: PathBuf,
    /// The local branch checked out.
    pub branch: String,
    /// The commit checked out (full sha).
    pub head: String,
    /// Cloned by this call (rather than fetched).
    pub cloned: bool,
}

impl WorkspaceManager {
    /// A manager for `root` (created on first use), with the bot's token.
    pub fn new(root: PathBuf, instance_id: String, token: Option<SecretString>) -> Self {
        WorkspaceManager {
            root,
            instance_id,
            token,
            gitea_origin: None,
            git_program: OsString::from("git"),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Only accept clone URLs on `gitea_url`'s scheme, host and port, so that
    /// the token is never sent anywhere else.
    pub fn with_gitea_url(mut self, gitea_url: &str) -> Result<Self, WorkspaceError> {
        self.gitea_origin = Some(names::origin_of(gitea_url)?);
        Ok(self)
    }

    /// The deadline of one git command (default [`DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The workspace folder of a repository, validated and normalised under the
    /// root. It need not exist; if part of it does, that part must be plain
    /// directories (a symbolic link is how a path escapes).
    pub fn path_for(&self, owner: &str, repo: &str) -> Result<PathBuf, WorkspaceError> {
        self.under_root(owner, repo, |root| {
            root.join(&self.instance_id).join(owner).join(repo)
        })
    }

    /// The folder `place` builds from the root, for validated names only,
    /// made of plain components under the root, with no symbolic link on the
    /// way where it exists.
    fn under_root(
        &self,
        owner: &str,
        repo: &str,
        place: impl FnOnce(&std::path::Path) -> PathBuf,
    ) -> Result<PathBuf, WorkspaceError> {
        check_name("instance_id", &self.instance_id)?;
        check_name("owner", owner)?;
        check_name("repository", repo)?;
        let root = self.resolved_root()?;
        let path = place(&root);
        let plain = path.strip_prefix(&root).is_ok_and(|rel| {
            rel.components().count() >= 3
                && rel.components().all(|c| matches!(c, Component::Normal(_)))
        });
        if !plain {
            // Unreachable with validated names; kept because it is the promise.
            return Err(WorkspaceError::OutsideRoot {
                resolved: path.clone(),
                path,
                root,
            });
        }
        check_no_links(&root, &path)?;
        Ok(path)
    }

    /// Clone (first time) or fetch (after), then check out what the task needs
    /// in the repository's own work tree. On any error the work tree, the
    /// index and the local branches are as they were (a fetch may have updated
    /// remote-tracking refs), and a failed first clone leaves nothing behind.
    pub fn prepare(
        &self,
        spec: &RepoSpec,
        checkout: &Checkout,
    ) -> Result<Prepared, WorkspaceError> {
        let remote = self.check_request(spec, checkout)?;
        let synced = self.sync(spec, &remote, checkout, Strict::CleanCheckout)?;
        let ws = &synced.ws;
        ws.check_out(&synced.branch, &synced.target, &synced.what)?;
        let head = ws.local(
            "rev-parse",
            git::args(["rev-parse", "--verify", "HEAD^{commit}"]),
        )?;
        if head != synced.target {
            return Err(WorkspaceError::Git {
                op: "checkout",
                path: ws.path.clone(),
                stderr: format!(
                    "HEAD is at {head} after the checkout, expected {}",
                    synced.target
                ),
            });
        }
        tracing::debug!(repo = %ws.repo, branch = %synced.branch, head = %head, cloned = synced.cloned, "workspace prepared");
        Ok(Prepared {
            path: synced.ws.path,
            branch: synced.branch,
            head,
            cloned: synced.cloned,
        })
    }

    /// Everything the caller gave, checked before the disk or the network:
    /// the clone URL (on `gitea_url` when that is set) and the names.
    fn check_request(
        &self,
        spec: &RepoSpec,
        checkout: &Checkout,
    ) -> Result<RemoteUrl, WorkspaceError> {
        let Some(clone_url) = spec.clone_url.as_deref() else {
            return Err(WorkspaceError::NoCloneUrl {
                repo: format!("{}/{}", spec.owner, spec.name),
            });
        };
        self.path_for(&spec.owner, &spec.name)?;
        let remote = RemoteUrl::parse(clone_url)?;
        if let Some(origin) = &self.gitea_origin {
            if &remote.origin != origin {
                return Err(WorkspaceError::InvalidUrl {
                    url: quote(&remote.url),
                    reason: "it is not on gitea_url, and the token is only sent to Gitea",
                });
            }
        }
        if remote.had_userinfo {
            tracing::warn!(
                repo = %format!("{}/{}", spec.owner, spec.name),
                had_password = remote.had_password,
                "the clone URL carried user information; it was removed (the token is passed separately)"
            );
        }
        match checkout {
            Checkout::DefaultBranch { name: Some(name) } => {
                self.check_branch(name)?;
            }
            Checkout::DefaultBranch { name: None } => {}
            Checkout::PullRequest { number, head_ref } => {
                if *number <= 0 {
                    return Err(WorkspaceError::InvalidRef {
                        value: format!("pull request #{number}"),
                        reason: "a pull request number is positive".into(),
                    });
                }
                self.check_branch(head_ref)?;
            }
        }
        Ok(remote)
    }

    /// The repository's clone, cloned or fetched, and the commit the task
    /// wants (not yet checked out anywhere).
    fn sync<'a>(
        &'a self,
        spec: &RepoSpec,
        remote: &'a RemoteUrl,
        checkout: &Checkout,
        strict: Strict,
    ) -> Result<Synced<'a>, WorkspaceError> {
        let lexical = self.path_for(&spec.owner, &spec.name)?;
        let owner_dir = lexical.parent().unwrap_or(&lexical).to_path_buf();
        std::fs::create_dir_all(&owner_dir).map_err(|source| WorkspaceError::Io {
            what: "could not create the workspace folder; check the permissions and free space of workspace_root",
            path: owner_dir.clone(),
            source,
        })?;
        // Again, now that the root exists and resolves to its canonical form.
        let path = self.path_for(&spec.owner, &spec.name)?;
        let ws = Workspace {
            mgr: self,
            ceiling: path.parent().unwrap_or(&path).to_path_buf(),
            path,
            remote,
            repo: format!("{}/{}", spec.owner, spec.name),
        };

        let cloned = match inspect(&ws.path, Layout::Clone)? {
            Found::Missing | Found::Empty => {
                ws.clone_fresh()?;
                true
            }
            Found::Repo => {
                if strict == Strict::CleanCheckout {
                    ws.check_clean()?;
                }
                ws.sync_remote_url()?;
                false
            }
            Found::Other(detail) => {
                return Err(WorkspaceError::Dirty {
                    path: ws.path.clone(),
                    detail: detail.into(),
                })
            }
        };

        let (branch, target, what) = match checkout {
            Checkout::DefaultBranch { name } => {
                if !cloned {
                    ws.fetch(true, None)?;
                }
                let branch = match name {
                    Some(b) => b.clone(),
                    None => ws.default_branch(cloned)?,
                };
                let target = ws.remote_branch_commit(&branch)?;
                let what = format!("origin/{branch}");
                (branch, target, what)
            }
            Checkout::PullRequest { number, head_ref } => {
                // Right after a clone the branches are fresh; only the PR ref is new.
                ws.fetch(!cloned, Some(*number))?;
                let target =
                    ws.commit_of(&pull_ref(*number))?
                        .ok_or_else(|| WorkspaceError::NotFound {
                            op: "fetch",
                            repo: ws.repo.clone(),
                            detail: format!("{} is missing after the fetch", pull_ref(*number)),
                        })?;
                (head_ref.clone(), target, format!("pull request #{number}"))
            }
        };
        Ok(Synced {
            ws,
            cloned,
            branch,
            target,
            what,
        })
    }

    /// `workspace_root` as every path under it is named: absolute, and
    /// canonical once it exists. A remote runtime sends folders relative to it.
    pub fn root(&self) -> Result<PathBuf, WorkspaceError> {
        self.resolved_root()
    }

    /// `workspace_root` made absolute, canonical when it exists.
    fn resolved_root(&self) -> Result<PathBuf, WorkspaceError> {
        let io = |source| WorkspaceError::Io {
            what: "could not resolve workspace_root",
            path: self.root.clone(),
            source,
        };
        let lexical = absolute_lexical(&self.root).map_err(io)?;
        match lexical.canonicalize() {
            Ok(c) => Ok(c),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(lexical),
            Err(e) => Err(io(e)),
        }
    }

    /// A branch name git accepts as such (`git check-ref-format --branch`),
    /// after our own checks for what could be read as an option or revision.
    fn check_branch(&self, name: &str) -> Result<String, WorkspaceError> {
        precheck_branch(name)?;
        let dir = std::env::temp_dir();
        let out = self
            .git()
            .run(Invocation {
                dir: &dir,
                ceiling: &dir,
                args: git::args(["check-ref-format", "--branch", name]),
                remote: None,
                index_file: None,
            })
            .map_err(|f| match f {
                Failure::Exit { .. } => WorkspaceError::InvalidRef {
                    value: format!("branch {}", quote(name)),
                    reason: "git does not accept it as a branch name".into(),
                },
                other => map_local(other, "check-ref-format", &dir),
            })?;
        if out.stdout.trim_end_matches('\n') != name {
            return Err(WorkspaceError::InvalidRef {
                value: format!("branch {}", quote(name)),
                reason: "git reads it as another branch".into(),
            });
        }
        Ok(name.to_owned())
    }

    fn git(&self) -> Git<'_> {
        Git {
            program: &self.git_program,
            timeout: self.timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn manager(root: &Path) -> WorkspaceManager {
        WorkspaceManager::new(root.to_path_buf(), "default".into(), None)
    }

    #[test]
    fn paths_are_three_plain_components_under_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let m = manager(&root);
        assert_eq!(
            m.path_for("acme", "widgets").unwrap(),
            root.join("default/acme/widgets")
        );
        for bad in ["../x", "a/b", "/etc", "..", ".", "", "x\0y", "a\\b"] {
            assert_eq!(
                m.path_for(bad, "w").unwrap_err().code(),
                "invalid_repository_name"
            );
            assert_eq!(
                m.path_for("acme", bad).unwrap_err().code(),
                "invalid_repository_name"
            );
        }
        let bad_instance = WorkspaceManager::new(root.clone(), "../up".into(), None);
        assert_eq!(
            bad_instance.path_for("acme", "w").unwrap_err().code(),
            "invalid_repository_name"
        );
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
    }

    #[test]
    fn a_relative_root_is_made_absolute() {
        let m = WorkspaceManager::new(PathBuf::from("./no/such/../root"), "default".into(), None);
        let p = m.path_for("acme", "w").unwrap();
        assert!(p.is_absolute());
        assert!(p.ends_with("no/root/default/acme/w"), "{}", p.display());
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_on_the_way_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(root.join("default")).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("default/acme")).unwrap();
        let err = manager(&root).path_for("acme", "w").unwrap_err();
        assert_eq!(err.code(), "workspace_outside_root", "{err}");
        // A symbolic link as the root itself is fine: the root is canonicalised.
        let link_root = tmp.path().join("link-root");
        std::os::unix::fs::symlink(&elsewhere, &link_root).unwrap();
        let p = manager(&link_root).path_for("acme", "w").unwrap();
        assert!(p.starts_with(elsewhere.canonicalize().unwrap()));
    }

    #[test]
    fn a_repository_without_a_clone_url_is_refused_before_anything_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let spec = RepoSpec {
            owner: "acme".into(),
            name: "widgets".into(),
            clone_url: None,
        };
        let checkout = Checkout::DefaultBranch { name: None };
        let err = manager(&root).prepare(&spec, &checkout).unwrap_err();
        assert_eq!(err.code(), "no_clone_url", "{err}");
        assert_eq!(err.disposition(), Disposition::Permanent);
        assert!(!root.exists(), "nothing was created");
    }

    #[test]
    fn bad_branch_names_are_refused_before_anything_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let m = manager(tmp.path());
        for bad in [
            "a..b", "-x", "x y", "@{-1}", "a.lock", "HEAD", "x~1", "x:y", "", "@",
        ] {
            let err = m.check_branch(bad).unwrap_err();
            assert_eq!(err.code(), "invalid_ref_name", "{bad:?}: {err}");
        }
        assert_eq!(m.check_branch("feature/x").unwrap(), "feature/x");
    }
}
