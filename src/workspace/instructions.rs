//! The repository's instructions to the agent (`AGENTS.md`) as the base
//! branch has them. Codex loads them from its working directory, which for a
//! pull request is the head: code anyone may have written. For a thread that
//! must not follow the head's, the bridge reads the base branch's copy from
//! the fetched remote-tracking branch (never the checked-out tree) and hands
//! it over itself, bounded in size.

use super::error::map_local;
use super::git::{self, Failure, Invocation};
use super::{WorkspaceError, WorkspaceManager};

/// At most this much of the file is handed over (Codex's own default limit
/// for project instructions).
pub const MAX_INSTRUCTIONS_BYTES: usize = 32 * 1024;

/// The names Codex reads, the one it prefers first.
const NAMES: &[&str] = &["AGENTS.override.md", "AGENTS.md"];

impl WorkspaceManager {
    /// The base branch's `AGENTS.md` (`base_branch`, or the remote's default
    /// branch when `None`) as of the last fetch; `None` when it has none.
    /// Blocking; call it after [`WorkspaceManager::prepare`].
    pub fn base_instructions(
        &self,
        owner: &str,
        repo: &str,
        base_branch: Option<&str>,
    ) -> Result<Option<String>, WorkspaceError> {
        let path = self.path_for(owner, repo)?;
        let rev = match base_branch {
            Some(b) => format!("refs/remotes/origin/{}", self.check_branch(b)?),
            None => "refs/remotes/origin/HEAD".to_owned(),
        };
        let ceiling = path.parent().unwrap_or(&path).to_path_buf();
        for name in NAMES {
            let spec = format!("{rev}:{name}");
            let shown = self.git().run(Invocation {
                dir: &path,
                ceiling: &ceiling,
                args: git::args(["cat-file", "blob", spec.as_str()]),
                remote: None,
                index_file: None,
            });
            match shown {
                Ok(out) => return Ok(Some(bounded(out.stdout))),
                // Not in that tree (or no such branch): try the next name.
                Err(Failure::Exit { .. }) => continue,
                Err(f) => return Err(map_local(f, "read the base branch's AGENTS.md", &path)),
            }
        }
        Ok(None)
    }
}

/// The text cut at [`MAX_INSTRUCTIONS_BYTES`], on a character boundary.
pub fn bounded(mut text: String) -> String {
    if text.len() > MAX_INSTRUCTIONS_BYTES {
        let mut end = MAX_INSTRUCTIONS_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_instructions_are_cut_on_a_character_boundary() {
        let text = "é".repeat(MAX_INSTRUCTIONS_BYTES);
        let cut = bounded(text);
        assert!(cut.len() <= MAX_INSTRUCTIONS_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(bounded("short".into()), "short");
    }
}
