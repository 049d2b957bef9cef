//! The `database_url` key: which backend, and where. The store opens it; the
//! configuration only says what was asked for, and prints it without its
//! password.

use std::fmt;
use std::path::PathBuf;

/// Which backend `database_url` names, and how to reach it.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// `sqlite://PATH` (relative paths are relative to the working directory).
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…`, passed to libpq as is. It may hold
    /// a password: print [`DatabaseUrl::redacted`], never the URL.
    Postgres(String),
}

impl DatabaseUrl {
    /// Reads a `database_url` value; the error says what forms are accepted.
    pub fn parse(url: &str) -> Result<DatabaseUrl, String> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(
                    "sqlite:// needs a file path, e.g. sqlite://./data/codex-bridge.db".into(),
                );
            }
            Ok(DatabaseUrl::Sqlite(PathBuf::from(path)))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(DatabaseUrl::Postgres(url.to_owned()))
        } else {
            Err("expected sqlite://PATH or postgres://USER@HOST:PORT/DB".into())
        }
    }

    pub fn is_sqlite(&self) -> bool {
        matches!(self, DatabaseUrl::Sqlite(_))
    }

    /// The URL with any password replaced, fit for logs and error messages.
    pub fn redacted(&self) -> String {
        match self {
            DatabaseUrl::Sqlite(p) => format!("sqlite://{}", p.display()),
            DatabaseUrl::Postgres(url) => redact_password(url),
        }
    }
}

/// Debug shows the redacted URL: a `Config` is debug-printed whole.
impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn redact_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match (authority.rfind('@'), authority.find(':')) {
        (Some(at), Some(colon)) if colon < at => format!(
            "{}{}:***{}",
            &url[..scheme_end + 3],
            &authority[..colon],
            &rest[at..]
        ),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_print_without_their_password() {
        assert_eq!(
            DatabaseUrl::parse("sqlite://./data/x.db"),
            Ok(DatabaseUrl::Sqlite(PathBuf::from("./data/x.db")))
        );
        assert_eq!(
            DatabaseUrl::parse("sqlite:///tmp/x.db"),
            Ok(DatabaseUrl::Sqlite(PathBuf::from("/tmp/x.db")))
        );
        assert!(DatabaseUrl::parse("mysql://x").is_err());
        assert!(DatabaseUrl::parse("sqlite://").is_err());
        let pg = DatabaseUrl::parse("postgres://bridge:hunter2@db:5432/cb").unwrap();
        assert_eq!(pg.redacted(), "postgres://bridge:***@db:5432/cb");
        assert!(!format!("{pg:?}").contains("hunter2"));
        assert_eq!(
            DatabaseUrl::parse("postgres://bridge@db/cb")
                .unwrap()
                .redacted(),
            "postgres://bridge@db/cb"
        );
    }
}
