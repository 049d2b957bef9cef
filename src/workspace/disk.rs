//! What is on disk at a workspace path, looked at without following links.

use super::WorkspaceError;
use std::io::ErrorKind;
use std::path::Path;

/// Refuse `path` if its deepest existing part under `root` is not itself (a
/// symbolic link somewhere on the way).
pub(super) fn check_no_links(root: &Path, path: &Path) -> Result<(), WorkspaceError> {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    Missing,
    /// An empty directory: cloned (or a worktree added) into like a missing one.
    Empty,
    /// A directory whose `.git` is what its layout wants.
    Repo,
    /// Something we did not make; never touched.
    Other(&'static str),
}

/// Which kind of git work tree a workspace path should hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// A repository's clone: `.git` is a directory.
    Clone,
    /// A session's worktree: `.git` is the file that points at the clone.
    Worktree,
}

pub(super) fn inspect(path: &Path, layout: Layout) -> Result<Found, WorkspaceError> {
    let io = |source| WorkspaceError::Io {
        what: match layout {
            Layout::Clone => "could not inspect the workspace",
            Layout::Worktree => "could not inspect the session's worktree",
        },
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
    match (std::fs::symlink_metadata(path.join(".git")), layout) {
        (Ok(m), Layout::Clone) if m.is_dir() => return Ok(Found::Repo),
        (Ok(m), Layout::Worktree) if m.is_file() => return Ok(Found::Repo),
        (Ok(_), Layout::Clone) => {
            return Ok(Found::Other(
                ".git is not a directory (a linked worktree or submodule?); move it away",
            ))
        }
        (Ok(_), Layout::Worktree) => return Ok(Found::Other(
            "it is not a worktree of the repository's clone (its .git is not a file); move it away",
        )),
        (Err(e), _) if e.kind() == ErrorKind::NotFound => {}
        (Err(e), _) => return Err(io(e)),
    }
    let empty = std::fs::read_dir(path).map_err(io)?.next().is_none();
    Ok(match (empty, layout) {
        (true, _) => Found::Empty,
        (false, Layout::Clone) => {
            Found::Other("it is not a git work tree (there is no .git directory); move it away")
        }
        (false, Layout::Worktree) => {
            Found::Other("it is not a git worktree (there is no .git); move it away")
        }
    })
}
