//! The durable store: diesel over SQLite (embedded default) or
//! PostgreSQL, one schema, migrations embedded in the binary.
//!
//! Reads go through an r2d2 pool on blocking threads; every write goes through
//! the group-commit [`writer`]. Query functions are plain functions over
//! `&mut DbConn` and know nothing of HTTP or actors.

mod checkpointer;
mod conn;
mod durable;
pub mod models;
pub mod rawsql;
/// Diesel's view of the tables: exactly what `diesel print-schema` prints for a
/// database migrated with `migrations/postgres` (tests/it/schema.rs fails when
/// they drift). Its types are diesel's generic ones (`Int8` is `BigInt`), so
/// the one definition serves SQLite too, whose migrations keep the same shape;
/// times are RFC 3339 text on both.
pub mod schema;
mod settings;
pub mod writer;

pub mod approvals;
pub mod attempts;
pub mod audit;
pub mod catchup;
pub mod commands;
pub mod comments;
pub mod control;
pub mod handoff;
pub mod health;
pub mod ingest;
pub mod instances;
pub mod interrupt;
pub mod late_finals;
pub mod leases;
pub mod ledger;
pub mod limits;
pub mod pcache;
pub mod queue;
pub mod refusals;
pub mod repositories;
pub mod retention;
pub mod sessions;
pub mod signals;
pub mod signins;
pub mod sqlite_heap;
pub mod stats;
pub mod statuses;
pub mod steer;
pub mod storm;
pub mod tasks;
pub mod transcripts;
pub mod turns;
pub mod views;
pub mod walvfs;
pub mod worker_calls;
pub mod worker_leases;
pub mod workers;
pub mod workflows;
pub mod worktrees;

pub use conn::{ConnSettings, DbConn, DbManager, IDLE_IN_TRANSACTION, SQLITE_HEAP_LIMIT};
pub use writer::WriterSettings;

use crate::config::DatabaseUrl;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

pub const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");
pub const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");

/// What can go wrong in the store, phrased for the operator who reads it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or did not commit: nothing was stored.
    #[error("the database is unavailable: {0} (check that it is reachable and has free disk)")]
    Unavailable(String),
    /// A query failed in a way the caller did not expect.
    #[error("database query failed: {0}")]
    Query(String),
    /// Lost a race with another transaction (deadlock, serialization failure,
    /// SQLite busy): running the same work again is safe.
    #[error("the database reported contention ({0}); retry")]
    Contended(String),
    #[error("{0} not found")]
    NotFound(String),
    /// A domain rule refused the operation; `code` is stable snake_case.
    #[error("{message}")]
    Refused { code: &'static str, message: String },
}

impl From<diesel::result::Error> for StoreError {
    fn from(e: diesel::result::Error) -> Self {
        use diesel::result::{DatabaseErrorKind, Error};
        match e {
            Error::NotFound => StoreError::NotFound("row".into()),
            Error::DatabaseError(DatabaseErrorKind::ClosedConnection, info) => {
                StoreError::Unavailable(info.message().to_owned())
            }
            Error::DatabaseError(DatabaseErrorKind::SerializationFailure, info) => {
                StoreError::Contended(info.message().to_owned())
            }
            Error::BrokenTransactionManager => {
                StoreError::Unavailable("the connection's transaction state is broken".into())
            }
            other => {
                let text = other.to_string();
                if text.contains("deadlock detected") || text.contains("database is locked") {
                    return StoreError::Contended(text);
                }
                // SQLite reports a full disk, I/O errors and lock time-outs as
                // generic errors; they mean "not stored", not "bad request".
                if text.contains("database is locked")
                    || text.contains("disk")
                    || text.contains("I/O")
                    || text.contains("readonly")
                {
                    StoreError::Unavailable(text)
                } else {
                    StoreError::Query(text)
                }
            }
        }
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> Self {
        StoreError::Unavailable(format!("no database connection: {e}"))
    }
}

/// Everything needed to open the store.
#[derive(Clone, Debug)]
pub struct StoreSettings {
    pub url: DatabaseUrl,
    pub read_pool_size: u32,
    pub sqlite_busy_timeout: Duration,
    pub writer: WriterSettings,
}

#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    url: DatabaseUrl,
    read_pool: r2d2::Pool<DbManager>,
    /// One permit per read connection, taken before a read goes to a
    /// blocking thread: reads beyond the pool's size wait here, as tasks,
    /// instead of each holding a thread of tokio's blocking pool parked on
    /// the pool's checkout (a burst would grow that pool to as many threads
    /// as reads waiting, each keeping its stack and allocator cache until
    /// it has been idle for a while).
    read_permits: Arc<tokio::sync::Semaphore>,
    writer: writer::Writer,
    /// Takes the writer's commit syncs (SQLite only): reads wait on it.
    syncer: Option<Arc<durable::Syncer>>,
    /// Bumped by the writer after every transaction of this process that
    /// commits (once per group commit): the live view (web/live.rs) and the
    /// receipts worker wake on it instead of polling.
    changes: writer::Changes,
    /// Sends signals to the other processes (PostgreSQL only).
    notifier: Option<signals::Notifier>,
    /// Names this process's signals, so its own listener skips them.
    origin: String,
}

impl Store {
    /// Opens the database (creating a SQLite file and its folder if needed),
    /// applies pending migrations and starts the writer.
    pub fn open(settings: &StoreSettings) -> Result<Store, StoreError> {
        if let DatabaseUrl::Sqlite(path) = &settings.url {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    StoreError::Unavailable(format!(
                        "cannot create the database folder {}: {e}",
                        parent.display()
                    ))
                })?;
            }
        }
        let mut conn = DbConn::establish(&ConnSettings {
            url: settings.url.clone(),
            sqlite_busy_timeout: settings.sqlite_busy_timeout,
            read_only: false,
        })
        .map_err(|e| {
            StoreError::Unavailable(format!("cannot open {}: {e}", settings.url.redacted()))
        })?;
        run_migrations(&mut conn)?;
        drop(conn);

        let write_pool = build_pool(settings, false, settings.writer.threads.max(1) as u32)?;
        let read_pool = build_pool(
            settings,
            settings.url.is_sqlite(),
            settings.read_pool_size.max(1),
        )?;
        let mut syncer = None;
        let mut handoff = None;
        if let DatabaseUrl::Sqlite(_) = &settings.url {
            handoff = Some(checkpointer::start(
                ConnSettings {
                    url: settings.url.clone(),
                    sqlite_busy_timeout: settings.sqlite_busy_timeout,
                    read_only: false,
                },
                checkpointer::Cadence::SERVER,
            )?);
            // `writer_batch_max = 1` asks for no grouping of any kind: each
            // commit then waits for its own sync, in place.
            if settings.writer.batch_max > 1 {
                syncer = Some(durable::Syncer::start().map_err(|e| {
                    StoreError::Unavailable(format!("cannot start the WAL syncer thread: {e}"))
                })?);
            }
        }
        let changes = Arc::new(tokio::sync::watch::channel(0).0);
        let writer = writer::Writer::start(
            write_pool,
            settings.writer,
            changes.clone(),
            syncer.clone(),
            handoff,
        )
        .map_err(|e| StoreError::Unavailable(format!("cannot start the writer thread: {e}")))?;
        let origin = uuid::Uuid::new_v4().simple().to_string();
        let notifier = match &settings.url {
            DatabaseUrl::Postgres(url) => {
                Some(signals::Notifier::start(url.clone(), origin.clone())?)
            }
            DatabaseUrl::Sqlite(_) => None,
        };
        Ok(Store {
            inner: Arc::new(Inner {
                notifier,
                origin,
                url: settings.url.clone(),
                read_permits: Arc::new(tokio::sync::Semaphore::new(
                    settings.read_pool_size.max(1) as usize
                )),
                read_pool,
                writer,
                syncer,
                changes,
            }),
        })
    }

    pub fn url(&self) -> &DatabaseUrl {
        &self.inner.url
    }

    /// Tells the other processes on this database about work committed
    /// (see [`signals`]); call it after the commit. Nothing on SQLite.
    pub fn signal(&self, signal: signals::Signal) {
        if let Some(n) = &self.inner.notifier {
            n.send(signal);
        }
    }

    /// Hands every signal of the other processes to `on`, from a thread of
    /// its own, and counts each as a change ([`Store::changes`]) so that
    /// what waits on this process's commits also sees theirs. Nothing on
    /// SQLite (one process).
    pub fn listen(&self, on: impl Fn(signals::Signal) + Send + 'static) -> Result<(), StoreError> {
        let DatabaseUrl::Postgres(url) = &self.inner.url else {
            return Ok(());
        };
        let changes = self.inner.changes.clone();
        // The listener ends with the store: a process (or a test) that
        // drops its store keeps no thread reconnecting to a database it
        // no longer uses.
        let store = Arc::downgrade(&self.inner);
        signals::listen(
            url.clone(),
            self.inner.origin.clone(),
            move || store.strong_count() > 0,
            move |signal| {
                changes.send_modify(|n| *n = n.wrapping_add(1));
                on(signal);
            },
        )
    }

    /// A receiver that sees a new value after each transaction this process
    /// commits, the webhook's group commit and every task transition included,
    /// before the writes in it are answered (writes of other processes are not
    /// seen: poll the tables for those). Values coalesce: a receiver that was
    /// busy sees one change for many commits.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Runs a read on a blocking thread with a pooled connection, inside the
    /// caller's tracing span. It resolves only once everything it could have
    /// seen is durable (on SQLite a commit is visible before its sync ends:
    /// see `durable`), so a caller can act on what it read.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut DbConn) -> Result<T, StoreError> + Send + 'static,
    {
        let pool = self.inner.read_pool.clone();
        let permit = self
            .inner
            .read_permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| StoreError::Unavailable(format!("the read pool is closed: {e}")))?;
        let span = tracing::Span::current();
        let read = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let _permit = permit;
            let mut conn = pool.get()?;
            f(&mut conn)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("read task failed: {e}")))??;
        if let Some(syncer) = &self.inner.syncer {
            syncer.settled().await?;
        }
        Ok(read)
    }

    /// Queues a write for the group-commit writer and resolves once it is
    /// committed. `f` may run more than once, each time in a fresh transaction.
    pub async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&mut DbConn) -> Result<T, StoreError> + Send + 'static,
    {
        self.inner
            .writer
            .submit(f)
            .instrument(tracing::Span::current())
            .await
    }

    /// Ingests one webhook delivery; deliveries that arrive together are
    /// committed as one batch. Resolves after the commit.
    pub async fn ingest(
        &self,
        req: crate::domain::IngestRequest,
    ) -> Result<ingest::IngestOutcome, StoreError> {
        self.inner
            .writer
            .ingest(req)
            .instrument(tracing::Span::current())
            .await
    }

    /// Whether the database answers (for `/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.read(|c| c.ping().map_err(StoreError::from)).await
    }
}

fn build_pool(
    settings: &StoreSettings,
    read_only: bool,
    size: u32,
) -> Result<r2d2::Pool<DbManager>, StoreError> {
    r2d2::Pool::builder()
        .max_size(size)
        .connection_timeout(Duration::from_secs(5))
        .build(DbManager {
            settings: ConnSettings {
                url: settings.url.clone(),
                sqlite_busy_timeout: settings.sqlite_busy_timeout,
                read_only,
            },
        })
        .map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot connect to {}: {e}",
                settings.url.redacted()
            ))
        })
}

/// Applies every pending embedded migration; returns the versions applied.
pub fn run_migrations(conn: &mut DbConn) -> Result<Vec<String>, StoreError> {
    let applied = match conn {
        DbConn::Sqlite(c) => c
            .run_pending_migrations(SQLITE_MIGRATIONS)
            .map(|v| v.iter().map(ToString::to_string).collect()),
        DbConn::Pg(c) => c
            .run_pending_migrations(POSTGRES_MIGRATIONS)
            .map(|v| v.iter().map(ToString::to_string).collect()),
    };
    applied.map_err(|e| StoreError::Unavailable(format!("migrations failed: {e}")))
}

/// Reverts every applied migration (used by the migration round-trip test).
pub fn revert_all_migrations(conn: &mut DbConn) -> Result<(), StoreError> {
    let result = match conn {
        DbConn::Sqlite(c) => c.revert_all_migrations(SQLITE_MIGRATIONS).map(|_| ()),
        DbConn::Pg(c) => c.revert_all_migrations(POSTGRES_MIGRATIONS).map(|_| ()),
    };
    result.map_err(|e| StoreError::Unavailable(format!("reverting migrations failed: {e}")))
}

/// Reverts the newest applied migration (used by the tests of a migration's
/// data changes: revert it on a store with rows, then apply it again).
pub fn revert_last_migration(conn: &mut DbConn) -> Result<String, StoreError> {
    let result = match conn {
        DbConn::Sqlite(c) => c
            .revert_last_migration(SQLITE_MIGRATIONS)
            .map(|v| v.to_string()),
        DbConn::Pg(c) => c
            .revert_last_migration(POSTGRES_MIGRATIONS)
            .map(|v| v.to_string()),
    };
    result.map_err(|e| StoreError::Unavailable(format!("reverting a migration failed: {e}")))
}

/// Now, as stored: RFC 3339 UTC with microseconds, so text order is time order.
pub fn now() -> String {
    format_time(chrono::Utc::now())
}

/// The time leases (and the heartbeats that judge who is alive) are written
/// and compared by. On PostgreSQL, the database server's clock: every
/// process of a deployment reads the same one, so a process whose own clock
/// runs ahead never takes a lease its holder still renews, and one that runs
/// behind never holds one past its time. On SQLite (one host, one process)
/// this process's clock.
pub fn shared_clock(conn: &mut DbConn) -> Result<chrono::DateTime<chrono::Utc>, StoreError> {
    match conn {
        DbConn::Sqlite(_) => Ok(chrono::Utc::now()),
        DbConn::Pg(c) => {
            use diesel::RunQueryDsl;
            // clock_timestamp(), not now(): the time of this statement, not
            // of the transaction's start.
            let micros: i64 = diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
                "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
            ))
            .get_result(c)?;
            chrono::DateTime::from_timestamp_micros(micros).ok_or_else(|| {
                StoreError::Query(format!(
                    "PostgreSQL's clock reads {micros} µs since 1970, which is not a time"
                ))
            })
        }
    }
}

/// [`shared_clock`] in the stored form.
pub fn shared_now(conn: &mut DbConn) -> Result<String, StoreError> {
    shared_clock(conn).map(format_time)
}

pub fn format_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Parses an RFC 3339 time (any offset) into the stored form.
pub fn normalize_time(s: &str) -> Option<String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| format_time(t.with_timezone(&chrono::Utc)))
}

/// Lower-case hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    crate::domain::keys::lower_hex(&sha2::Sha256::digest(bytes))
}
