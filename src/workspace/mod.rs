//! The workspace manager: one git work tree per repository at
//! `workspace_root/<instance>/<owner>/<repo>`, cloned the first time, fetched
//! after, and checked out at what a task needs (the default branch, or a pull
//! request's head branch).
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
//! The caller moves the task; [`WorkspaceError::disposition`] says where.

mod git;
mod names;

use git::{Failure, Git, Invocation, RemoteAuth, RemoteFailure};
use names::{absolute_lexical, check_name, precheck_branch, quote, RemoteUrl};
use secrecy::SecretString;
use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// Long enough for a first clone of a large repository over a slow link.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Where half-finished clones live, under the root. An instance id cannot
/// start with `.`, so this never meets a workspace.
const STAGING_DIR: &str = ".staging";

/// Files in `.git` that say an operation is under way (or died half-way).
/// Switching branches over any of them could lose or garble work.
const IN_PROGRESS: &[(&str, &str)] = &[
    ("MERGE_HEAD", "a merge is in progress"),
    ("CHERRY_PICK_HEAD", "a cherry-pick is in progress"),
    ("REVERT_HEAD", "a revert is in progress"),
    ("rebase-merge", "a rebase is in progress"),
    ("rebase-apply", "a rebase or `git am` is in progress"),
    ("BISECT_LOG", "a bisect is in progress"),
    (
        "index.lock",
        "another git process holds the index lock, or one died holding it",
    ),
    (
        "HEAD.lock",
        "another git process holds the HEAD lock, or one died holding it",
    ),
];

/// How many `git status` lines a Dirty message quotes.
const STATUS_QUOTED: usize = 5;

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
    /// (with a warning), never used.
    pub clone_url: String,
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

/// Where the caller should move the task for an error (a lifecycle state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// The input is wrong; nothing was touched: refuse the task and audit it.
    Refuse,
    /// `blocked_workspace` until an operator has looked at the workspace.
    Blocked,
    /// `retry_wait`, then `failed` if the retry fails the same way.
    RetryOnce,
    /// `retry_wait`, within the caller's usual retry limit.
    Retry,
    /// `failed`.
    Fail,
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
}

impl WorkspaceError {
    /// Stable snake_case code for audit events and the admin API.
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
        }
    }

    /// Where the task goes. I/O errors are retried: a full disk or a wrong
    /// permission is fixed by an operator, not by failing the task at once.
    pub fn disposition(&self) -> Disposition {
        match self {
            WorkspaceError::InvalidName { .. }
            | WorkspaceError::OutsideRoot { .. }
            | WorkspaceError::InvalidRef { .. }
            | WorkspaceError::InvalidUrl { .. } => Disposition::Refuse,
            WorkspaceError::Dirty { .. } => Disposition::Blocked,
            WorkspaceError::Auth { .. } => Disposition::RetryOnce,
            WorkspaceError::Transient { .. } | WorkspaceError::Io { .. } => Disposition::Retry,
            WorkspaceError::NotFound { .. } | WorkspaceError::Git { .. } => Disposition::Fail,
        }
    }
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
        check_name("instance_id", &self.instance_id)?;
        check_name("owner", owner)?;
        check_name("repository", repo)?;
        let root = self.resolved_root()?;
        let path = root.join(&self.instance_id).join(owner).join(repo);
        let plain = path.strip_prefix(&root).is_ok_and(|rel| {
            rel.components().count() == 3
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

    /// Clone (first time) or fetch (after), then check out what the task needs.
    /// On any error the work tree, the index and the local branches are as they
    /// were (a fetch may have updated remote-tracking refs), and a failed first
    /// clone leaves nothing behind.
    pub fn prepare(
        &self,
        spec: &RepoSpec,
        checkout: &Checkout,
    ) -> Result<Prepared, WorkspaceError> {
        // Everything the caller gave is checked before the disk or the network.
        self.path_for(&spec.owner, &spec.name)?;
        let remote = RemoteUrl::parse(&spec.clone_url)?;
        if let Some(origin) = &self.gitea_origin {
            if &remote.origin != origin {
                return Err(WorkspaceError::InvalidUrl {
                    url: quote(&remote.url),
                    reason: "it is not on gitea_url, and the token is only sent to Gitea",
                });
            }
        }
        let repo = format!("{}/{}", spec.owner, spec.name);
        if remote.had_userinfo {
            tracing::warn!(
                repo = %repo,
                had_password = remote.had_password,
                "the clone URL carried user information; it was removed (the token is passed separately)"
            );
        }
        let named_branch = match checkout {
            Checkout::DefaultBranch { name: Some(name) } => Some(self.check_branch(name)?),
            Checkout::DefaultBranch { name: None } => None,
            Checkout::PullRequest { number, head_ref } => {
                if *number <= 0 {
                    return Err(WorkspaceError::InvalidRef {
                        value: format!("pull request #{number}"),
                        reason: "a pull request number is positive".into(),
                    });
                }
                self.check_branch(head_ref)?;
                None
            }
        };

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
            remote: &remote,
            repo,
        };

        let cloned = match inspect(&ws.path)? {
            Found::Missing | Found::Empty => {
                ws.clone_fresh()?;
                true
            }
            Found::Repo => {
                ws.check_clean()?;
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
            Checkout::DefaultBranch { .. } => {
                if !cloned {
                    ws.fetch(true, None)?;
                }
                let branch = match named_branch {
                    Some(b) => b,
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
        ws.check_out(&branch, &target, &what)?;
        let head = ws.local(
            "rev-parse",
            git::args(["rev-parse", "--verify", "HEAD^{commit}"]),
        )?;
        if head != target {
            return Err(WorkspaceError::Git {
                op: "checkout",
                path: ws.path.clone(),
                stderr: format!("HEAD is at {head} after the checkout, expected {target}"),
            });
        }
        tracing::debug!(repo = %ws.repo, branch = %branch, head = %head, cloned, "workspace prepared");
        Ok(Prepared {
            path: ws.path,
            branch,
            head,
            cloned,
        })
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

/// Refuse `path` if its deepest existing part under `root` is not itself (a
/// symbolic link somewhere on the way).
fn check_no_links(root: &Path, path: &Path) -> Result<(), WorkspaceError> {
    let mut existing = path;
    loop {
        match std::fs::symlink_metadata(existing) {
            Ok(_) => break,
            Err(e) if e.kind() == ErrorKind::NotFound => match existing.parent() {
                Some(parent) if parent.starts_with(root) => existing = parent,
                // Not even the root exists: nothing on disk to escape through.
                _ => return Ok(()),
            },
            Err(source) => {
                return Err(WorkspaceError::Io {
                    what: "could not inspect the workspace path",
                    path: existing.to_path_buf(),
                    source,
                })
            }
        }
    }
    let resolved = match existing.canonicalize() {
        Ok(r) => r,
        // A dangling symbolic link.
        Err(_) => std::fs::read_link(existing).unwrap_or_else(|_| existing.to_path_buf()),
    };
    if resolved != existing {
        return Err(WorkspaceError::OutsideRoot {
            path: path.to_path_buf(),
            resolved,
            root: root.to_path_buf(),
        });
    }
    Ok(())
}

/// What is at a workspace path.
enum Found {
    Missing,
    /// An empty directory: cloned into like a missing one.
    Empty,
    /// A directory with a `.git` directory.
    Repo,
    /// Something we did not make; never touched.
    Other(&'static str),
}

fn inspect(path: &Path) -> Result<Found, WorkspaceError> {
    let io = |source| WorkspaceError::Io {
        what: "could not inspect the workspace",
        path: path.to_path_buf(),
        source,
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return Err(io(e)),
    };
    if !meta.is_dir() {
        return Ok(Found::Other("it is not a directory; move it away"));
    }
    match std::fs::symlink_metadata(path.join(".git")) {
        Ok(m) if m.is_dir() => return Ok(Found::Repo),
        Ok(_) => {
            return Ok(Found::Other(
                ".git is not a directory (a linked worktree or submodule?); move it away",
            ))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let empty = std::fs::read_dir(path).map_err(io)?.next().is_none();
    Ok(if empty {
        Found::Empty
    } else {
        Found::Other("it is not a git work tree (there is no .git directory); move it away")
    })
}

fn pull_ref(number: i64) -> String {
    format!("refs/pull/{number}/head")
}

/// One repository's workspace, during one `prepare`.
struct Workspace<'a> {
    mgr: &'a WorkspaceManager,
    path: PathBuf,
    /// The owner folder: git never looks for a repository above the workspace.
    ceiling: PathBuf,
    remote: &'a RemoteUrl,
    /// `owner/name`, for messages.
    repo: String,
}

impl Workspace<'_> {
    /// Clone into a staging folder under the root, then move it into place:
    /// the workspace path only ever holds a complete clone, even if git is
    /// killed at the deadline or the process dies.
    fn clone_fresh(&self) -> Result<(), WorkspaceError> {
        let root = self.mgr.resolved_root()?;
        let staging_dir = root.join(STAGING_DIR);
        std::fs::create_dir_all(&staging_dir).map_err(|source| WorkspaceError::Io {
            what: "could not create the staging folder for clones",
            path: staging_dir.clone(),
            source,
        })?;
        let name = self
            .path
            .strip_prefix(&root)
            .map(|rel| rel.to_string_lossy().replace('/', "."))
            .unwrap_or_default();
        let staging = staging_dir.join(format!("{name}.{}", uuid::Uuid::new_v4().simple()));
        let mut args = git::args(["clone", "--quiet", "--origin", "origin", "--"]);
        args.push(OsString::from(&self.remote.url));
        args.push(git::arg(&staging));
        let cloned = self.network("clone", &staging_dir, args);
        let moved = cloned.and_then(|_| {
            std::fs::rename(&staging, &self.path).map_err(|source| WorkspaceError::Io {
                what: "could not move the fresh clone into the workspace path",
                path: self.path.clone(),
                source,
            })
        });
        if moved.is_err() {
            // Only our own half-made clone: nobody has worked in it.
            let _ = std::fs::remove_dir_all(&staging);
        }
        moved
    }

    /// Refuse (as Dirty) anything a checkout could lose or garble.
    fn check_clean(&self) -> Result<(), WorkspaceError> {
        let git_dir = self.path.join(".git");
        let mut problems: Vec<String> = IN_PROGRESS
            .iter()
            .filter(|(file, _)| std::fs::symlink_metadata(git_dir.join(file)).is_ok())
            .map(|(file, what)| format!("{what} (.git/{file})"))
            .collect();

        let status = self.local_raw(
            "status",
            git::args([
                "status",
                "--porcelain",
                "--untracked-files=normal",
                "--ignore-submodules=none",
            ]),
        )?;
        let lines: Vec<&str> = status.lines().filter(|l| !l.trim().is_empty()).collect();
        if !lines.is_empty() {
            let mut quoted: Vec<String> = lines
                .iter()
                .take(STATUS_QUOTED)
                .map(|l| format!("`{l}`"))
                .collect();
            if lines.len() > STATUS_QUOTED {
                quoted.push(format!("and {} more", lines.len() - STATUS_QUOTED));
            }
            problems.push(format!(
                "{} uncommitted or untracked path(s): {}",
                lines.len(),
                quoted.join(", ")
            ));
        }

        // A detached HEAD whose commit no ref holds would be lost by a checkout.
        if self
            .probe(git::args(["symbolic-ref", "-q", "HEAD"]))?
            .is_none()
        {
            if let Some(head) = self.commit_of("HEAD")? {
                let holders = self.local(
                    "for-each-ref",
                    git::args([
                        "for-each-ref",
                        "--count=1",
                        "--format=%(refname)",
                        "--contains",
                        &head,
                    ]),
                )?;
                if holders.is_empty() {
                    problems.push(format!(
                        "HEAD is detached at {head}, a commit no branch or tag contains"
                    ));
                }
            }
        }

        if problems.is_empty() {
            Ok(())
        } else {
            Err(WorkspaceError::Dirty {
                path: self.path.clone(),
                detail: problems.join("; "),
            })
        }
    }

    /// Point `origin` at the clone URL we were given (the repository may have
    /// moved, or the config been edited). The URL never has user information.
    fn sync_remote_url(&self) -> Result<(), WorkspaceError> {
        let current = self.probe(git::args(["config", "--get", "remote.origin.url"]))?;
        let url = self.remote.url.as_str();
        match current {
            Some(u) if u == url => Ok(()),
            Some(_) => {
                // The old URL is not logged: it may hold credentials.
                tracing::warn!(repo = %self.repo, url, "origin pointed elsewhere; set to the clone URL");
                self.local("remote", git::args(["remote", "set-url", "origin", url]))
                    .map(drop)
            }
            None => self
                .local("remote", git::args(["remote", "add", "origin", url]))
                .map(drop),
        }
    }

    /// Fetch the branches (`heads`) and, for a pull request, its head ref.
    /// The PR head is stored as `refs/pull/<n>/head`, outside
    /// `refs/remotes/origin/`, where a branch named `pr/<n>` and `--prune`
    /// could clash with it.
    fn fetch(&self, heads: bool, pull: Option<i64>) -> Result<(), WorkspaceError> {
        let mut args = git::args([
            "fetch",
            "--quiet",
            "--prune",
            "--no-recurse-submodules",
            "--no-write-fetch-head",
            "origin",
        ]);
        if heads {
            args.push(OsString::from("+refs/heads/*:refs/remotes/origin/*"));
        }
        if let Some(n) = pull {
            args.push(OsString::from(format!("+{0}:{0}", pull_ref(n))));
        }
        self.network("fetch", &self.path, args).map(drop)
    }

    /// The remote's default branch, from `origin/HEAD`. A clone records it;
    /// if it is missing or points at a branch that is gone, ask the remote
    /// again (one more request).
    fn default_branch(&self, cloned: bool) -> Result<String, WorkspaceError> {
        if let Some(b) = self.recorded_default_branch()? {
            return Ok(b);
        }
        if !cloned {
            self.network(
                "remote set-head",
                &self.path,
                git::args(["remote", "set-head", "origin", "--auto"]),
            )?;
            if let Some(b) = self.recorded_default_branch()? {
                return Ok(b);
            }
        }
        Err(WorkspaceError::NotFound {
            op: "clone",
            repo: self.repo.clone(),
            detail: "the remote has no default branch (is the repository empty?)".into(),
        })
    }

    fn recorded_default_branch(&self) -> Result<Option<String>, WorkspaceError> {
        let target = self.probe(git::args([
            "symbolic-ref",
            "-q",
            "refs/remotes/origin/HEAD",
        ]))?;
        let Some(branch) =
            target.and_then(|t| t.strip_prefix("refs/remotes/origin/").map(str::to_owned))
        else {
            return Ok(None);
        };
        Ok(self
            .commit_of(&format!("refs/remotes/origin/{branch}"))?
            .map(|_| branch))
    }

    fn remote_branch_commit(&self, branch: &str) -> Result<String, WorkspaceError> {
        self.commit_of(&format!("refs/remotes/origin/{branch}"))?
            .ok_or_else(|| WorkspaceError::NotFound {
                op: "fetch",
                repo: self.repo.clone(),
                detail: format!("there is no branch {} on the remote", quote(branch)),
            })
    }

    /// Put local branch `branch` at `target` and check it out, creating it if
    /// absent and only fast-forwarding it if present. `what` names the target.
    fn check_out(&self, branch: &str, target: &str, what: &str) -> Result<(), WorkspaceError> {
        let local_ref = format!("refs/heads/{branch}");
        let Some(local) = self.commit_of(&local_ref)? else {
            return self
                .local(
                    "switch",
                    git::args(["switch", "--no-track", "-c", branch, target]),
                )
                .map(drop);
        };
        if local != target && !self.is_ancestor(&local, target)? {
            let ahead = self.local(
                "rev-list",
                git::args(["rev-list", "--count", &format!("{target}..{local}")]),
            )?;
            return Err(WorkspaceError::Dirty {
                path: self.path.clone(),
                detail: format!(
                    "local branch {} (at {local}) has {ahead} commit(s) that {what} (at {target}) does not, so it cannot be fast-forwarded",
                    quote(branch)
                ),
            });
        }
        let current = self.probe(git::args(["symbolic-ref", "-q", "HEAD"]))?;
        if current.as_deref() != Some(local_ref.as_str()) {
            self.local("switch", git::args(["switch", "--no-guess", branch]))?;
        }
        if local != target {
            self.local(
                "merge",
                git::args(["merge", "--ff-only", "--quiet", target]),
            )?;
        }
        Ok(())
    }

    /// The commit `rev` names, or `None` if it names none.
    fn commit_of(&self, rev: &str) -> Result<Option<String>, WorkspaceError> {
        self.probe(git::args([
            "rev-parse",
            "--verify",
            "-q",
            &format!("{rev}^{{commit}}"),
        ]))
    }

    fn is_ancestor(&self, ancestor: &str, of: &str) -> Result<bool, WorkspaceError> {
        Ok(self
            .probe(git::args(["merge-base", "--is-ancestor", ancestor, of]))?
            .is_some())
    }

    /// A local command whose exit status 1 means "no" (rev-parse -q,
    /// symbolic-ref -q, config --get, merge-base --is-ancestor): its trimmed
    /// output, or `None`.
    fn probe(&self, args: Vec<OsString>) -> Result<Option<String>, WorkspaceError> {
        let op = probe_name(&args);
        match self.run_local(args) {
            Ok(out) => Ok(Some(out)),
            Err(Failure::Exit { code: Some(1), .. }) => Ok(None),
            Err(f) => Err(map_local(f, op, &self.path)),
        }
    }

    /// A local command in the workspace; its trimmed stdout.
    fn local(&self, op: &'static str, args: Vec<OsString>) -> Result<String, WorkspaceError> {
        self.run_local(args)
            .map_err(|f| map_local(f, op, &self.path))
    }

    /// A local command in the workspace; its stdout as printed (leading
    /// spaces matter in `status --porcelain`).
    fn local_raw(&self, op: &'static str, args: Vec<OsString>) -> Result<String, WorkspaceError> {
        self.mgr
            .git()
            .run(Invocation {
                dir: &self.path,
                ceiling: &self.ceiling,
                args,
                remote: None,
            })
            .map(|o| o.stdout)
            .map_err(|f| map_local(f, op, &self.path))
    }

    fn run_local(&self, args: Vec<OsString>) -> Result<String, Failure> {
        self.mgr
            .git()
            .run(Invocation {
                dir: &self.path,
                ceiling: &self.ceiling,
                args,
                remote: None,
            })
            .map(|o| o.stdout.trim().to_owned())
    }

    /// A command that talks to the remote, with the token in its environment.
    fn network(
        &self,
        op: &'static str,
        dir: &Path,
        args: Vec<OsString>,
    ) -> Result<String, WorkspaceError> {
        self.mgr
            .git()
            .run(Invocation {
                dir,
                ceiling: &self.ceiling,
                args,
                remote: Some(RemoteAuth {
                    origin: &self.remote.origin,
                    token: self.mgr.token.as_ref(),
                }),
            })
            .map(|o| o.stdout.trim().to_owned())
            .map_err(|f| self.map_remote(f, op, dir))
    }

    fn map_remote(&self, failure: Failure, op: &'static str, dir: &Path) -> WorkspaceError {
        let stderr = failure.stderr();
        let repo = self.repo.clone();
        match failure {
            Failure::Spawn(_) => map_local(failure, op, dir),
            Failure::TimedOut { .. } => WorkspaceError::Transient { op, repo, stderr },
            Failure::Exit { .. } => match git::classify_remote(&stderr) {
                RemoteFailure::Auth => WorkspaceError::Auth { op, repo, stderr },
                RemoteFailure::NotFound => WorkspaceError::NotFound {
                    op,
                    repo,
                    detail: stderr,
                },
                RemoteFailure::Transient => WorkspaceError::Transient { op, repo, stderr },
                RemoteFailure::Other if stderr.contains("Cannot determine remote HEAD") => {
                    WorkspaceError::NotFound {
                        op,
                        repo,
                        detail: stderr,
                    }
                }
                RemoteFailure::Other => map_local(failure, op, dir),
            },
        }
    }
}

/// The subcommand of a probe, for messages.
fn probe_name(args: &[OsString]) -> &'static str {
    match args.first().and_then(|a| a.to_str()) {
        Some("rev-parse") => "rev-parse",
        Some("symbolic-ref") => "symbolic-ref",
        Some("config") => "config",
        Some("merge-base") => "merge-base",
        _ => "git",
    }
}

/// A failed command that did not need the remote: a lock means someone else
/// is at work in the workspace (Dirty); anything else is reported as is.
fn map_local(failure: Failure, op: &'static str, path: &Path) -> WorkspaceError {
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
    fn dispositions_follow_the_lifecycle() {
        let dirty = WorkspaceError::Dirty {
            path: PathBuf::from("/w"),
            detail: "x".into(),
        };
        assert_eq!(dirty.disposition(), Disposition::Blocked);
        assert_eq!(dirty.code(), "workspace_dirty");
        let auth = WorkspaceError::Auth {
            op: "fetch",
            repo: "a/b".into(),
            stderr: "401".into(),
        };
        assert_eq!(auth.disposition(), Disposition::RetryOnce);
        assert_eq!(auth.code(), "git_auth_failed");
        let transient = WorkspaceError::Transient {
            op: "fetch",
            repo: "a/b".into(),
            stderr: "500".into(),
        };
        assert_eq!(transient.disposition(), Disposition::Retry);
        assert_eq!(transient.code(), "git_transient");
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
