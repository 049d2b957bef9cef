//! One connection type for both backends. Query functions are written once and
//! compiled for each backend by [`with_conn!`], so every diesel feature of each
//! backend stays available (unlike a lowest-common-denominator multi-backend).

use crate::config::DatabaseUrl;
use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::pg::PgConnection;
use diesel::r2d2::R2D2Connection;
use diesel::{Connection, QueryResult};
use std::time::Duration;

/// A live database connection of either backend.
pub enum DbConn {
    /// diesel's connection with SQLite statements of the bridge's own
    /// (`rawsql`); it dereferences to diesel's.
    Sqlite(super::rawsql::SqliteConn),
    Pg(PgConnection),
}

/// Runs `$body` with `$c` bound to the concrete connection (`&mut SqliteConnection`
/// or `&mut PgConnection`): the body is compiled once per backend.
#[macro_export]
macro_rules! with_conn {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::store::DbConn::Sqlite(sqlite) => {
                let $c: &mut diesel::sqlite::SqliteConnection = &mut *sqlite;
                $body
            }
            $crate::store::DbConn::Pg($c) => $body,
        }
    };
}

/// SQLite's heap across every connection of the process, in bytes: its
/// page caches (the writer's 8 MiB and what the readers hold), statements
/// and schemas. `/metrics` shows it as `codex_bridge_sqlite_heap_bytes`.
pub const SQLITE_HEAP_LIMIT: u64 = 32 << 20;

/// How long a PostgreSQL session may sit in a transaction waiting for its
/// client before the server ends it (and its locks go).
pub const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(10);

/// How a pool's connections are set up.
#[derive(Clone, Debug)]
pub struct ConnSettings {
    pub url: DatabaseUrl,
    pub sqlite_busy_timeout: Duration,
    /// Read-pool connections refuse writes (`PRAGMA query_only`), so nothing
    /// but the single writer can ever take SQLite's write lock.
    pub read_only: bool,
}

impl DbConn {
    /// Opens one connection and applies the per-connection settings: for SQLite
    /// WAL, `synchronous=FULL` (an accepted webhook survives power loss), foreign
    /// keys and a busy timeout.
    pub fn establish(settings: &ConnSettings) -> Result<DbConn, diesel::ConnectionError> {
        match &settings.url {
            DatabaseUrl::Sqlite(path) => {
                // Every SQLite connection writes its WAL through the gathering
                // VFS (`walvfs.rs`; it relies on `synchronous = FULL` below).
                super::walvfs::install().map_err(diesel::ConnectionError::BadConnection)?;
                let mut c = super::rawsql::establish(&path.to_string_lossy())?;
                // In-memory statement journals keep the writer's per-request
                // I/O to the WAL itself. Checkpoints are the checkpointer
                // thread's, and the last one of each WAL the writer's when
                // the checkpointer asks (`checkpointer.rs`). The automatic
                // checkpoint is only the limit for a WAL the two could not
                // restart: past it the writer checkpoints after every commit
                // until the WAL restarts (read transactions hold it off), so
                // it is high: 50,000 pages, about 200 MiB.
                //
                // Page cache: 64 MiB for readers; 8 MiB for writing connections,
                // because SQLite sweeps a writer's cache at the end of every
                // write transaction, which cost the group-commit writer more
                // than re-reading pages from the OS cache (ingest bench: 7.7k/s
                // with 64 MiB, 8.9k/s with 8 MiB, 8.5k/s with 2 MiB).
                //
                // All caches of the process together stay under
                // `SQLITE_HEAP_LIMIT` (a soft limit: past it SQLite reuses
                // its least recently used pages instead of allocating).
                // Without it the readers' caches (each emptied only when a
                // commit changed the database) keep what the largest query of
                // each read, and resident memory creeps up with the database.
                let pragmas = format!(
                    "PRAGMA busy_timeout = {}; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
                     PRAGMA foreign_keys = ON; PRAGMA query_only = {}; PRAGMA cache_size = {}; \
                     PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = {}; \
                     PRAGMA soft_heap_limit = {};",
                    settings.sqlite_busy_timeout.as_millis(),
                    if settings.read_only { 1 } else { 0 },
                    if settings.read_only { -65536 } else { -8192 },
                    super::checkpointer::WRITER_CHECKPOINT_FRAMES,
                    SQLITE_HEAP_LIMIT,
                );
                c.batch_execute(&pragmas)
                    .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                Ok(DbConn::Sqlite(c))
            }
            DatabaseUrl::Postgres(url) => {
                let mut c = PgConnection::establish(url)?;
                // diesel keeps prepared statements, and after five runs
                // PostgreSQL may switch one to a generic plan made from the
                // statistics of that moment. On a young database (before
                // autovacuum's first ANALYZE) that plan can be a sequential
                // scan, kept while the table grows. Readers' queries are
                // planned for their own values every time. Writing connections
                // keep PostgreSQL's own choice: the ingest rules sequential
                // scans out of its transaction, so its lookups' generic plans
                // use the indexes (`ingest::lookups`), and replanning each
                // multi-row INSERT and each foreign-key check cost the group
                // commit an eighth of its rate.
                if settings.read_only {
                    c.batch_execute("SET plan_cache_mode = force_custom_plan;")
                        .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                }
                // A process stopped in the middle of a transaction (paused,
                // cut off) would keep its row locks, a lease row's among them,
                // for as long as it is gone; PostgreSQL ends such a session
                // instead, well within a lease's time. No transaction of the
                // bridge waits on its client that long.
                c.batch_execute(&format!(
                    "SET idle_in_transaction_session_timeout = {};",
                    IDLE_IN_TRANSACTION.as_millis()
                ))
                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                Ok(DbConn::Pg(c))
            }
        }
    }

    pub fn is_sqlite(&self) -> bool {
        matches!(self, DbConn::Sqlite(_))
    }

    /// Runs `f` in a transaction (a savepoint when one is already open): commit on
    /// `Ok`, roll back on `Err`.
    pub fn transaction<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut DbConn) -> Result<T, E>,
        E: From<diesel::result::Error>,
    {
        with_conn!(self, |c| AnsiTransactionManager::begin_transaction(c))?;
        self.finish_transaction(f)
    }

    /// Like [`DbConn::transaction`] but, on SQLite, takes the write lock at BEGIN
    /// (`BEGIN IMMEDIATE`) so a writer never fails half-way on a lock upgrade.
    /// Must be the outermost transaction.
    pub fn write_transaction<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut DbConn) -> Result<T, E>,
        E: From<diesel::result::Error>,
    {
        match self {
            DbConn::Sqlite(c) => {
                AnsiTransactionManager::begin_transaction_sql(&mut **c, "BEGIN IMMEDIATE")?
            }
            DbConn::Pg(c) => AnsiTransactionManager::begin_transaction(c)?,
        }
        self.finish_transaction(f)
    }

    fn finish_transaction<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut DbConn) -> Result<T, E>,
        E: From<diesel::result::Error>,
    {
        match f(self) {
            Ok(value) => {
                with_conn!(self, |c| AnsiTransactionManager::commit_transaction(c))?;
                Ok(value)
            }
            Err(err) => {
                // A failed rollback leaves the connection broken; r2d2 then drops it.
                let _ = with_conn!(self, |c| AnsiTransactionManager::rollback_transaction(c));
                Err(err)
            }
        }
    }

    pub fn ping(&mut self) -> QueryResult<()> {
        with_conn!(self, |c| R2D2Connection::ping(c))
    }

    fn is_broken(&mut self) -> bool {
        with_conn!(self, |c| R2D2Connection::is_broken(c))
    }
}

/// The r2d2 manager that makes [`DbConn`]s.
#[derive(Clone, Debug)]
pub struct DbManager {
    pub settings: ConnSettings,
}

impl r2d2::ManageConnection for DbManager {
    type Connection = DbConn;
    type Error = diesel::ConnectionError;

    fn connect(&self) -> Result<DbConn, Self::Error> {
        DbConn::establish(&self.settings)
    }

    fn is_valid(&self, conn: &mut DbConn) -> Result<(), Self::Error> {
        conn.ping()
            .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))
    }

    fn has_broken(&self, conn: &mut DbConn) -> bool {
        std::thread::panicking() || conn.is_broken()
    }
}
