//! SQLite's own heap: its page caches, prepared statements and schemas, for
//! every connection of the process together. Read for `/metrics`, so that
//! growth of the resident memory can be told apart from the caches filling.
#![expect(
    unsafe_code,
    reason = "SQLite's memory statistics exist only as C functions"
)]

/// Bytes SQLite holds now, across every connection of this process.
pub fn bytes() -> u64 {
    // SAFETY: sqlite3_memory_used takes no arguments and only reads SQLite's
    // global statistics under its own mutex; it may be called at any time,
    // before the first connection is opened included.
    let used = unsafe { libsqlite3_sys::sqlite3_memory_used() };
    u64::try_from(used).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use diesel::connection::SimpleConnection;
    use diesel::Connection;

    #[test]
    fn the_count_holds_a_connections_pages() {
        // An in-memory database of 2 MB lives in its page cache, which the
        // count must show (other tests' connections only add to it).
        // (SQLite is set up by the store's first connection, as in the server.)
        crate::store::walvfs::install().unwrap();
        let mut c = diesel::sqlite::SqliteConnection::establish(":memory:").unwrap();
        c.batch_execute(
            "CREATE TABLE t(x BLOB); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n \
             WHERE i < 2000) INSERT INTO t SELECT randomblob(1000) FROM n;",
        )
        .unwrap();
        let held = super::bytes();
        assert!(held >= 2_000_000, "SQLite's heap holds only {held} bytes");
    }
}
