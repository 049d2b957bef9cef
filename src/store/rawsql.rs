//! SQLite's own prepared statements on a diesel connection, for the writes
//! the group-commit writer repeats for every delivery.
//!
//! diesel builds each statement's SQL, looks it up in its cache and binds
//! every value through its query tree at every run: a sixth of the writer's
//! time per accept went there, against a few plain `sqlite3_bind_*` calls for
//! the same rows. [`Statements`] keeps `sqlite3_stmt`s by a name the caller
//! gives, on the connection diesel opened (the same transaction, the same
//! handle), and [`SqliteConn`] ties their life to the connection's: they are
//! finalized before diesel closes it, which it refuses to do (it panics)
//! while a statement is still open.
//!
//! diesel 2.3 does not hand out its `sqlite3*`. SQLite calls every
//! registered auto-extension on the thread that opens a connection, inside
//! the open, so one that notes the handle in a thread-local gives it to the
//! [`establish`] that asked for it.
#![expect(
    unsafe_code,
    reason = "SQLite's statement interface is C functions over raw pointers"
)]

use diesel::result::{DatabaseErrorKind, Error};
use diesel::sqlite::SqliteConnection;
use diesel::Connection;
use libsqlite3_sys as ffi;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::marker::PhantomData;
use std::ptr::{null_mut, NonNull};
use std::sync::OnceLock;

thread_local! {
    /// The handle of the last connection this thread opened.
    static OPENED: Cell<*mut ffi::sqlite3> = const { Cell::new(null_mut()) };
}

unsafe extern "C" fn note_opened(
    db: *mut ffi::sqlite3,
    _err: *mut *mut c_char,
    _api: *const ffi::sqlite3_api_routines,
) -> c_int {
    OPENED.with(|o| o.set(db));
    ffi::SQLITE_OK
}

fn install() -> Result<(), String> {
    static INSTALLED: OnceLock<c_int> = OnceLock::new();
    // SAFETY: `note_opened` has the entry point's signature, touches only a
    // thread-local and cannot fail; registering it twice would be harmless.
    let rc = *INSTALLED.get_or_init(|| unsafe { ffi::sqlite3_auto_extension(Some(note_opened)) });
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(format!(
            "SQLite refused the extension hook that names each new connection (code {rc}); \
             the bridge cannot open its database"
        ))
    }
}

/// Opens `path` with diesel, keeping its `sqlite3*` for [`Statements`].
pub fn establish(path: &str) -> Result<SqliteConn, diesel::ConnectionError> {
    install().map_err(diesel::ConnectionError::BadConnection)?;
    OPENED.with(|o| o.set(null_mut()));
    let conn = SqliteConnection::establish(path)?;
    let db = NonNull::new(OPENED.with(|o| o.replace(null_mut()))).ok_or_else(|| {
        diesel::ConnectionError::BadConnection(
            "SQLite opened the database without calling its extension hook, so the bridge \
             cannot reach the connection's statements; this is a bug of the build"
                .into(),
        )
    })?;
    Ok(SqliteConn {
        statements: Statements {
            db,
            cache: HashMap::new(),
        },
        conn,
    })
}

/// A diesel SQLite connection with statements of its own.
pub struct SqliteConn {
    // Declared first, so dropped first: finalized while the handle is open.
    statements: Statements,
    conn: SqliteConnection,
}

impl SqliteConn {
    /// The connection's own prepared statements.
    pub fn statements(&mut self) -> &mut Statements {
        &mut self.statements
    }
}

impl std::ops::Deref for SqliteConn {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for SqliteConn {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.conn
    }
}

/// Statements prepared on one connection, each kept under the name its
/// first use gave it.
pub struct Statements {
    db: NonNull<ffi::sqlite3>,
    cache: HashMap<(&'static str, usize), Stmt>,
}

// SAFETY: the handle and its statements are reached only through
// `&mut SqliteConn`, so by one thread at a time, which SQLite's multi-thread
// mode allows; the connection itself moves between threads the same way.
unsafe impl Send for Statements {}

struct Stmt(NonNull<ffi::sqlite3_stmt>);

impl Drop for Stmt {
    fn drop(&mut self) {
        // SAFETY: the statement was prepared on a handle that is still
        // open (`SqliteConn` drops its statements first) and is finalized
        // once, here.
        unsafe {
            ffi::sqlite3_finalize(self.0.as_ptr());
        }
    }
}

impl Statements {
    /// The statement kept as `key`, prepared from `sql()` on its first use,
    /// ready to be bound and run once.
    pub fn prepared<'s, 'd>(
        &'s mut self,
        key: (&'static str, usize),
        sql: impl FnOnce() -> String,
    ) -> Result<Run<'s, 'd>, Error> {
        let db = self.db;
        let stmt = match self.cache.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(prepare(db, &sql())?),
        };
        Ok(Run {
            db,
            stmt: stmt.0,
            next: 1,
            failed: None,
            _kept: PhantomData,
            _values: PhantomData,
        })
    }
}

fn prepare(db: NonNull<ffi::sqlite3>, sql: &str) -> Result<Stmt, Error> {
    let len = c_int::try_from(sql.len())
        .map_err(|_| database_error(ffi::SQLITE_TOOBIG, "statement too long".into()))?;
    let mut stmt = null_mut();
    // SAFETY: `sql` is valid for `len` bytes (no terminator needed with an
    // explicit length) and `stmt` receives the new statement.
    let rc = unsafe {
        ffi::sqlite3_prepare_v3(
            db.as_ptr(),
            sql.as_ptr().cast(),
            len,
            ffi::SQLITE_PREPARE_PERSISTENT,
            &mut stmt,
            null_mut(),
        )
    };
    match NonNull::new(stmt) {
        Some(stmt) if rc == ffi::SQLITE_OK => Ok(Stmt(stmt)),
        Some(stmt) => {
            drop(Stmt(stmt));
            Err(last_error(db, rc))
        }
        None if rc == ffi::SQLITE_OK => Err(database_error(
            ffi::SQLITE_MISUSE,
            format!("the statement {sql:?} holds no SQL"),
        )),
        None => Err(last_error(db, rc)),
    }
}

/// One run of a kept statement: values bound in order of their places
/// (`?`), then [`Run::execute`]. Every value bound must outlive the run
/// (`'d`): SQLite reads them in place. Dropped, the statement is reset and
/// its values cleared, whatever happened.
pub struct Run<'s, 'd> {
    db: NonNull<ffi::sqlite3>,
    stmt: NonNull<ffi::sqlite3_stmt>,
    next: c_int,
    failed: Option<Error>,
    _kept: PhantomData<&'s mut Statements>,
    _values: PhantomData<&'d str>,
}

impl<'d> Run<'_, 'd> {
    fn bound(&mut self, rc: c_int) {
        if rc != ffi::SQLITE_OK && self.failed.is_none() {
            self.failed = Some(last_error(self.db, rc));
        }
        self.next += 1;
    }

    pub fn text(&mut self, value: &'d str) {
        let Ok(len) = c_int::try_from(value.len()) else {
            self.bound(ffi::SQLITE_TOOBIG);
            return;
        };
        // SAFETY: `value` outlives the run (`'d`), so SQLITE_STATIC (no
        // copy) is sound; the place is checked by SQLite.
        let rc = unsafe {
            ffi::sqlite3_bind_text(
                self.stmt.as_ptr(),
                self.next,
                value.as_ptr().cast(),
                len,
                ffi::SQLITE_STATIC(),
            )
        };
        self.bound(rc);
    }

    pub fn opt_text(&mut self, value: Option<&'d str>) {
        match value {
            Some(v) => self.text(v),
            None => self.null(),
        }
    }

    pub fn int(&mut self, value: i64) {
        // SAFETY: a plain value; the place is checked by SQLite.
        let rc = unsafe { ffi::sqlite3_bind_int64(self.stmt.as_ptr(), self.next, value) };
        self.bound(rc);
    }

    pub fn opt_int(&mut self, value: Option<i64>) {
        match value {
            Some(v) => self.int(v),
            None => self.null(),
        }
    }

    pub fn boolean(&mut self, value: bool) {
        self.int(i64::from(value));
    }

    pub fn null(&mut self) {
        // SAFETY: the place is checked by SQLite.
        let rc = unsafe { ffi::sqlite3_bind_null(self.stmt.as_ptr(), self.next) };
        self.bound(rc);
    }

    /// Fails when a value could not be bound or a place was left unbound
    /// (it would be NULL, silently).
    fn ready(&mut self) -> Result<(), Error> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        // SAFETY: the statement is open.
        let places = unsafe { ffi::sqlite3_bind_parameter_count(self.stmt.as_ptr()) };
        if self.next - 1 != places {
            return Err(database_error(
                ffi::SQLITE_RANGE,
                format!(
                    "a statement of {places} value(s) was given {}; nothing was run",
                    self.next - 1
                ),
            ));
        }
        Ok(())
    }

    /// Runs the statement to its end, handing each row it yields to `each`.
    pub fn query(
        mut self,
        mut each: impl FnMut(&Row<'_>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.ready()?;
        loop {
            // SAFETY: a prepared statement of this open handle, every value
            // bound alive for `'d`.
            match unsafe { ffi::sqlite3_step(self.stmt.as_ptr()) } {
                ffi::SQLITE_ROW => each(&Row {
                    stmt: self.stmt,
                    _step: PhantomData,
                })?,
                ffi::SQLITE_DONE => return Ok(()),
                rc => return Err(last_error(self.db, rc)),
            }
        }
    }

    /// Runs the statement to its end; the rows it changed.
    pub fn execute(self) -> Result<usize, Error> {
        let db = self.db;
        self.query(|_| Ok(()))?;
        // SAFETY: the handle is open.
        let changed = unsafe { ffi::sqlite3_changes64(db.as_ptr()) };
        Ok(usize::try_from(changed).unwrap_or(0))
    }
}

/// The row a statement stands on: its columns, read in place until the
/// next step.
pub struct Row<'r> {
    stmt: NonNull<ffi::sqlite3_stmt>,
    _step: PhantomData<&'r ()>,
}

impl Row<'_> {
    /// Column `i` (from 0) as text; `None` for NULL.
    pub fn text(&self, i: c_int) -> Result<Option<&str>, Error> {
        // SAFETY: the statement stands on a row (`query` hands out `Row`s
        // only then) and the text stays valid until the next step, which
        // this borrow outlives: `Row` is only lent for the row's callback.
        let bytes = unsafe {
            let text = ffi::sqlite3_column_text(self.stmt.as_ptr(), i);
            if text.is_null() {
                return Ok(None);
            }
            let len = ffi::sqlite3_column_bytes(self.stmt.as_ptr(), i);
            std::slice::from_raw_parts(text, usize::try_from(len).unwrap_or(0))
        };
        std::str::from_utf8(bytes)
            .map(Some)
            .map_err(|e| Error::DeserializationError(Box::new(e)))
    }

    /// Column `i` as text that must be there.
    pub fn string(&self, i: c_int) -> Result<String, Error> {
        self.text(i)?.map(str::to_owned).ok_or_else(|| {
            Error::DeserializationError(
                format!("column {i} is NULL where text was expected").into(),
            )
        })
    }

    /// Column `i` as an integer that must be there.
    pub fn number(&self, i: c_int) -> Result<i64, Error> {
        self.int(i).ok_or_else(|| {
            Error::DeserializationError(
                format!("column {i} is NULL where an integer was expected").into(),
            )
        })
    }

    /// Column `i` as an integer; `None` for NULL.
    pub fn int(&self, i: c_int) -> Option<i64> {
        // SAFETY: as in `text`.
        unsafe {
            if ffi::sqlite3_column_type(self.stmt.as_ptr(), i) == ffi::SQLITE_NULL {
                None
            } else {
                Some(ffi::sqlite3_column_int64(self.stmt.as_ptr(), i))
            }
        }
    }
}

impl Drop for Run<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: the statement is open; after these two calls it holds no
        // pointer into the values this run bound.
        unsafe {
            ffi::sqlite3_reset(self.stmt.as_ptr());
            ffi::sqlite3_clear_bindings(self.stmt.as_ptr());
        }
    }
}

/// The handle's last error, in the terms diesel gives its own: callers
/// tell a locked database, a full disk or a constraint apart the same way.
fn last_error(db: NonNull<ffi::sqlite3>, rc: c_int) -> Error {
    // SAFETY: the handle is open; SQLite's message is a NUL-terminated
    // string it owns until the next call on the handle, copied here.
    let (code, message) = unsafe {
        let code = ffi::sqlite3_extended_errcode(db.as_ptr());
        let text = ffi::sqlite3_errmsg(db.as_ptr());
        let message = if text.is_null() {
            format!("SQLite error {rc}")
        } else {
            CStr::from_ptr(text).to_string_lossy().into_owned()
        };
        (code, message)
    };
    database_error(code, message)
}

fn database_error(code: c_int, message: String) -> Error {
    let kind = match code {
        ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
            DatabaseErrorKind::UniqueViolation
        }
        ffi::SQLITE_CONSTRAINT_FOREIGNKEY => DatabaseErrorKind::ForeignKeyViolation,
        ffi::SQLITE_CONSTRAINT_NOTNULL => DatabaseErrorKind::NotNullViolation,
        ffi::SQLITE_CONSTRAINT_CHECK => DatabaseErrorKind::CheckViolation,
        _ => DatabaseErrorKind::Unknown,
    };
    Error::DatabaseError(kind, Box::new(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::connection::SimpleConnection;

    fn open() -> (tempfile::TempDir, SqliteConn) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw.db");
        let mut c = establish(&path.to_string_lossy()).unwrap();
        c.batch_execute("CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER, b INTEGER NOT NULL)")
            .unwrap();
        (dir, c)
    }

    fn insert(c: &mut SqliteConn, k: &str, n: Option<i64>) -> Result<usize, Error> {
        let mut run = c.statements().prepared(("t", 1), || {
            "INSERT OR IGNORE INTO t (k, n, b) VALUES (?, ?, ?)".into()
        })?;
        run.text(k);
        run.opt_int(n);
        run.boolean(true);
        run.execute()
    }

    /// Rows written by a kept statement are read back by diesel on the same
    /// connection, and a row the statement ignores counts as not written.
    #[test]
    fn kept_statements_write_on_diesels_connection() {
        let (_dir, mut c) = open();
        assert_eq!(insert(&mut c, "a", Some(7)).unwrap(), 1);
        assert_eq!(insert(&mut c, "b", None).unwrap(), 1);
        assert_eq!(insert(&mut c, "a", Some(8)).unwrap(), 0);
        #[derive(diesel::QueryableByName, Debug, PartialEq)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::Text)]
            k: String,
            #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
            n: Option<i64>,
        }
        use diesel::RunQueryDsl;
        let rows: Vec<Row> = diesel::sql_query("SELECT k, n FROM t ORDER BY k")
            .load(&mut *c)
            .unwrap();
        assert_eq!(
            rows,
            vec![
                Row {
                    k: "a".into(),
                    n: Some(7)
                },
                Row {
                    k: "b".into(),
                    n: None
                }
            ]
        );
    }

    /// A constraint is reported as diesel reports it, with SQLite's message;
    /// a bad value place fails the run instead of running it half bound; and
    /// the connection closes cleanly with its statements kept.
    #[test]
    fn errors_are_diesel_errors_and_close_is_clean() {
        let (_dir, mut c) = open();
        let mut run = c
            .statements()
            .prepared(("t", 2), || {
                "INSERT INTO t (k, n, b) VALUES (?, ?, ?)".into()
            })
            .unwrap();
        run.text("a");
        run.null();
        run.null();
        match run.execute() {
            Err(Error::DatabaseError(DatabaseErrorKind::NotNullViolation, info)) => {
                assert!(info.message().contains("NOT NULL"), "{}", info.message())
            }
            other => panic!("expected a NOT NULL violation, got {other:?}"),
        }
        let mut run = c
            .statements()
            .prepared(("t", 2), || unreachable!("kept from the first use"))
            .unwrap();
        run.text("a");
        run.int(1);
        run.int(1);
        run.int(1); // one place too many
        assert!(run.execute().is_err());
        let mut run = c
            .statements()
            .prepared(("t", 2), || unreachable!("kept from the first use"))
            .unwrap();
        run.text("a");
        run.int(1); // one place too few: `b` would be NULL
        let err = run.execute().unwrap_err().to_string();
        assert!(err.contains("3 value(s) was given 2"), "{err}");
        assert!(c
            .statements()
            .prepared(("t", 3), || "NOT SQL".into())
            .is_err());
        // The failed runs stored nothing.
        use diesel::RunQueryDsl;
        let count: i64 = diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
            "(SELECT count(*) FROM t)",
        ))
        .get_result(&mut *c)
        .unwrap();
        assert_eq!(count, 0);
        drop(c);
    }
}
