//! What `codex-bridge doctor` asks of the database: whether migrations are
//! pending, whether a write goes through (made and rolled back), the SQLite
//! journal mode, and the repositories the bridge has registered.

use super::schema::repositories;
use super::{DbConn, StoreError, POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};
use crate::with_conn;
use diesel::prelude::*;
use diesel::sql_types::Text;

/// Whether this binary has migrations the database lacks.
pub fn has_pending_migrations(conn: &mut DbConn) -> Result<bool, StoreError> {
    use diesel_migrations::MigrationHarness;
    match conn {
        DbConn::Sqlite(c) => c.has_pending_migration(SQLITE_MIGRATIONS),
        DbConn::Pg(c) => c.has_pending_migration(POSTGRES_MIGRATIONS),
    }
    .map_err(|e| StoreError::Query(format!("cannot read the migration state: {e}")))
}

/// The error that makes [`probe_write`] roll its transaction back.
enum Probe {
    RolledBack,
    Failed(diesel::result::Error),
}

impl From<diesel::result::Error> for Probe {
    fn from(e: diesel::result::Error) -> Probe {
        Probe::Failed(e)
    }
}

/// Takes the write lock and creates a table inside a transaction that is
/// then rolled back: proves the database is writable and leaves nothing.
pub fn probe_write(conn: &mut DbConn) -> Result<(), StoreError> {
    let outcome: Result<(), Probe> = conn.write_transaction(|c| {
        with_conn!(c, |c| diesel::sql_query(
            "CREATE TABLE codex_bridge_doctor_probe (x INTEGER)"
        )
        .execute(c))?;
        Err(Probe::RolledBack)
    });
    match outcome {
        Ok(()) | Err(Probe::RolledBack) => Ok(()),
        Err(Probe::Failed(e)) => Err(e.into()),
    }
}

#[derive(QueryableByName)]
struct JournalMode {
    #[diesel(sql_type = Text)]
    journal_mode: String,
}

/// SQLite's `journal_mode` (`wal` expected); `None` for PostgreSQL.
pub fn journal_mode(conn: &mut DbConn) -> Result<Option<String>, StoreError> {
    match conn {
        DbConn::Sqlite(c) => {
            let mode: JournalMode =
                diesel::sql_query("PRAGMA journal_mode").get_result(&mut **c)?;
            Ok(Some(mode.journal_mode.to_lowercase()))
        }
        DbConn::Pg(_) => Ok(None),
    }
}

/// The `(owner, name)` of every registered repository.
pub fn repository_names(conn: &mut DbConn) -> Result<Vec<(String, String)>, StoreError> {
    Ok(with_conn!(conn, |c| repositories::table
        .select((repositories::owner, repositories::name))
        .order((repositories::owner, repositories::name))
        .load::<(String, String)>(c))?)
}
