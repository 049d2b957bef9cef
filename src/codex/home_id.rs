//! The identity of a Codex home (`CODEX_HOME`): a random id kept in a file
//! inside it. Threads live in the home whose app-server created them; a
//! session records that id with its thread, and a process whose home has
//! another id knows, without asking its app-server, that it cannot resume
//! the thread and must rebuild the conversation on a new one. The id stays
//! with the directory: a process restarted on the same home resumes.

use std::io::Write;
use std::path::Path;

/// The file, inside the Codex home, that holds its id.
pub const FILE: &str = "codex-bridge-home-id";

/// The home's id, made and written on first use.
pub fn read_or_create(home: &Path) -> std::io::Result<String> {
    let path = home.join(FILE);
    if let Some(id) = read(&path)? {
        return Ok(id);
    }
    std::fs::create_dir_all(home)?;
    // Written whole under a temporary name, then linked into place: a link
    // fails if the file exists, so of two processes starting on one home
    // (which the bridge does not support, but must not corrupt) one id wins
    // and both read it, and a crash never leaves a half-written id.
    let id = uuid::Uuid::new_v4().to_string();
    let tmp = home.join(format!("{FILE}.{}", uuid::Uuid::new_v4().simple()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(id.as_bytes())?;
        f.sync_all()?;
    }
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(id),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(&path)?.ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is empty", path.display()),
            )
        }),
        Err(e) => Err(e),
    }
}

fn read(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_made_once_and_kept_with_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("codex-home");
        let first = read_or_create(&home).unwrap();
        assert_eq!(read_or_create(&home).unwrap(), first);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(read_or_create(other.path()).unwrap(), first);
        // Nothing but the id file is left behind.
        let names: Vec<_> = std::fs::read_dir(&home)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE)]);
    }
}
