//! The store: reachable, migrated, writable, and (SQLite) in WAL mode. Also
//! returns the repositories it has registered, which the Gitea checks cover.

use super::super::Check;
use crate::config::{Config, DatabaseUrl};
use crate::store::{health, ConnSettings, DbConn};

const AREA: &str = "store";

pub fn check(config: &Config) -> (Vec<Check>, Vec<(String, String)>) {
    let shown = config.database_url.redacted();
    if let DatabaseUrl::Sqlite(path) = &config.database_url {
        if !path.exists() {
            return (
                vec![Check::fail(
                    AREA,
                    "open",
                    format!("{shown} does not exist"),
                    "run `codex-bridge migrate` (or start the server), or point database_url at the server's database",
                )],
                Vec::new(),
            );
        }
    }
    let mut conn = match DbConn::establish(&ConnSettings::from_config(config)) {
        Ok(c) => c,
        Err(e) => {
            return (
                vec![Check::fail(
                    AREA,
                    "open",
                    format!("cannot open {shown}: {e}"),
                    "check database_url and that the database is reachable",
                )],
                Vec::new(),
            )
        }
    };
    let mut out = vec![Check::ok(AREA, "open", shown)];
    out.push(match health::has_pending_migrations(&mut conn) {
        Ok(false) => Check::ok(AREA, "migrations", "up to date"),
        Ok(true) => Check::fail(
            AREA,
            "migrations",
            "the schema is behind this binary",
            "run `codex-bridge migrate`",
        ),
        Err(e) => Check::fail(AREA, "migrations", e.to_string(), "check database_url"),
    });
    out.push(match health::probe_write(&mut conn) {
        Ok(()) => Check::ok(
            AREA,
            "writable",
            "a write went through (and was rolled back)",
        ),
        Err(e) => Check::fail(
            AREA,
            "writable",
            e.to_string(),
            "check the database's permissions and free disk",
        ),
    });
    match health::journal_mode(&mut conn) {
        Ok(Some(mode)) if mode == "wal" => out.push(Check::ok(AREA, "wal", "journal_mode = wal")),
        Ok(Some(mode)) => out.push(Check::fail(
            AREA,
            "wal",
            format!("journal_mode = {mode}"),
            "the database's directory must allow WAL files (a local file system, writable)",
        )),
        Ok(None) => {}
        Err(e) => out.push(Check::fail(
            AREA,
            "wal",
            e.to_string(),
            "check database_url",
        )),
    }
    let repos = health::repository_names(&mut conn).unwrap_or_default();
    (out, repos)
}
