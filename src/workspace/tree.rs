//! One repository's workspace during one `prepare`: the git commands that
//! clone, check, fetch and check out, and how their failures read.

use super::error::map_local;
use super::git::{self, Failure, Invocation, RemoteAuth, RemoteFailure};
use super::names::{quote, RemoteUrl};
use super::{WorkspaceError, WorkspaceManager, STAGING_DIR};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

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

/// What the files in `git_dir` say is under way, one line each.
pub(super) fn in_progress(git_dir: &Path) -> Vec<String> {
    IN_PROGRESS
        .iter()
        .filter(|(file, _)| std::fs::symlink_metadata(git_dir.join(file)).is_ok())
        .map(|(file, what)| format!("{what} ({}/{file})", git_dir.display()))
        .collect()
}

pub(super) fn pull_ref(number: i64) -> String {
    format!("refs/pull/{number}/head")
}

/// One repository's workspace, during one `prepare`.
pub(super) struct Workspace<'a> {
    pub(super) mgr: &'a WorkspaceManager,
    pub(super) path: PathBuf,
    /// The owner folder: git never looks for a repository above the workspace.
    pub(super) ceiling: PathBuf,
    pub(super) remote: &'a RemoteUrl,
    /// `owner/name`, for messages.
    pub(super) repo: String,
}

impl Workspace<'_> {
    /// Clone into a staging folder under the root, then move it into place:
    /// the workspace path only ever holds a complete clone, even if git is
    /// killed at the deadline or the process dies.
    pub(super) fn clone_fresh(&self) -> Result<(), WorkspaceError> {
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
    pub(super) fn check_clean(&self) -> Result<(), WorkspaceError> {
        let mut problems = in_progress(&self.path.join(".git"));

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
    pub(super) fn sync_remote_url(&self) -> Result<(), WorkspaceError> {
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
    pub(super) fn fetch(&self, heads: bool, pull: Option<i64>) -> Result<(), WorkspaceError> {
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
    pub(super) fn default_branch(&self, cloned: bool) -> Result<String, WorkspaceError> {
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

    pub(super) fn remote_branch_commit(&self, branch: &str) -> Result<String, WorkspaceError> {
        self.commit_of(&format!("refs/remotes/origin/{branch}"))?
            .ok_or_else(|| WorkspaceError::NotFound {
                op: "fetch",
                repo: self.repo.clone(),
                detail: format!("there is no branch {} on the remote", quote(branch)),
            })
    }

    /// Put local branch `branch` at `target` and check it out, creating it if
    /// absent and only fast-forwarding it if present. `what` names the target.
    pub(super) fn check_out(
        &self,
        branch: &str,
        target: &str,
        what: &str,
    ) -> Result<(), WorkspaceError> {
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
    pub(super) fn commit_of(&self, rev: &str) -> Result<Option<String>, WorkspaceError> {
        self.probe(git::args([
            "rev-parse",
            "--verify",
            "-q",
            &format!("{rev}^{{commit}}"),
        ]))
    }

    pub(super) fn is_ancestor(&self, ancestor: &str, of: &str) -> Result<bool, WorkspaceError> {
        Ok(self
            .probe(git::args(["merge-base", "--is-ancestor", ancestor, of]))?
            .is_some())
    }

    /// A local command whose exit status 1 means "no" (rev-parse -q,
    /// symbolic-ref -q, config --get, merge-base --is-ancestor): its trimmed
    /// output, or `None`.
    pub(super) fn probe(&self, args: Vec<OsString>) -> Result<Option<String>, WorkspaceError> {
        let op = probe_name(&args);
        match self.run_local(args) {
            Ok(out) => Ok(Some(out)),
            Err(Failure::Exit { code: Some(1), .. }) => Ok(None),
            Err(f) => Err(map_local(f, op, &self.path)),
        }
    }

    /// A local command in the workspace; its trimmed stdout.
    pub(super) fn local(
        &self,
        op: &'static str,
        args: Vec<OsString>,
    ) -> Result<String, WorkspaceError> {
        self.run_local(args)
            .map_err(|f| map_local(f, op, &self.path))
    }

    /// A local command in the workspace; its stdout as printed (leading
    /// spaces matter in `status --porcelain`).
    fn local_raw(&self, op: &'static str, args: Vec<OsString>) -> Result<String, WorkspaceError> {
        self.run_local_untrimmed(args)
            .map_err(|f| map_local(f, op, &self.path))
    }

    fn run_local(&self, args: Vec<OsString>) -> Result<String, Failure> {
        self.run_local_untrimmed(args)
            .map(|out| out.trim().to_owned())
    }

    fn run_local_untrimmed(&self, args: Vec<OsString>) -> Result<String, Failure> {
        self.run_with_index(args, None)
    }

    /// A local command with `index` as its index instead of the work tree's.
    pub(super) fn run_with_index(
        &self,
        args: Vec<OsString>,
        index: Option<&Path>,
    ) -> Result<String, Failure> {
        self.mgr
            .git()
            .run(Invocation {
                dir: &self.path,
                ceiling: &self.ceiling,
                args,
                remote: None,
                index_file: index,
            })
            .map(|o| o.stdout)
    }

    /// A command that talks to the remote, with the token in its environment.
    fn network(
        &self,
        op: &'static str,
        dir: &Path,
        args: Vec<OsString>,
    ) -> Result<String, WorkspaceError> {
        if self.remote.origin.is_empty() {
            return Err(WorkspaceError::Git {
                op,
                path: dir.to_path_buf(),
                stderr: "this workspace was opened for local commands only".into(),
            });
        }
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
                index_file: None,
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
