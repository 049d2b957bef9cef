//! The store's SQLite connections run on SQLite's page cache wrapped by
//! `store::pcache`, which passes over the end-of-commit truncations it can
//! tell would remove nothing. Whatever it passes over, a connection on it
//! goes through what moves pages past the database's end (transactions that
//! grow the file and roll back, a shrink by VACUUM, growth again over the
//! same page numbers) and leaves a database a stock SQLite finds intact,
//! with every committed row.
//!
//! (Whether this process's SQLite runs the wrapper depends on which test
//! opened SQLite first. The wrapper's bookkeeping is property-tested in the
//! library against a model of the cache; SQLite itself drops a rolled-back
//! page one by one and rewrites a reused one, so this test, which guards the
//! data, also passes with every truncation skipped.)

use crate::support::*;
use diesel::connection::SimpleConnection;

/// A key that lands anywhere in the index (as the delivery ids do), so the
/// index's pages split and rebalance out of order.
fn key(n: u64) -> String {
    format!("{:016x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// A transaction of 150 rows with keys after `n` (advanced), ended by `end`
/// (`COMMIT` or `ROLLBACK`).
fn transaction(n: &mut u64, end: &str) -> String {
    let mut sql = String::from("BEGIN;");
    for _ in 0..150 {
        *n += 1;
        sql.push_str(&format!(
            "INSERT INTO t (k, v) VALUES ('{}', zeroblob(600));",
            key(*n)
        ));
    }
    sql.push_str(end);
    sql.push(';');
    sql
}

#[test]
fn a_store_on_the_wrapped_cache_keeps_its_data_through_rollbacks_and_shrinks_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let mut c = connect(&format!("sqlite://{}", path.display()));
    let run = |c: &mut codex_bridge::store::DbConn, sql: &str| match c {
        codex_bridge::store::DbConn::Sqlite(c) => c.batch_execute(sql),
        codex_bridge::store::DbConn::Pg(_) => unreachable!("a SQLite test"),
    };
    run(
        &mut c,
        "CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT NOT NULL UNIQUE, v BLOB NOT NULL);",
    )
    .unwrap();
    let mut committed = 0u64;
    let mut n = 0u64;
    for round in 0..60 {
        // Every third transaction grows the database and is rolled back.
        let rolled_back = round % 3 == 1;
        let sql = transaction(&mut n, if rolled_back { "ROLLBACK" } else { "COMMIT" });
        run(&mut c, &sql).unwrap();
        if !rolled_back {
            committed += 150;
        }
    }
    // Shrink the file (its end pages leave it), then grow it again over the
    // same page numbers: pages a truncation failed to drop would come back
    // with their old content.
    run(&mut c, "DELETE FROM t WHERE id % 2 = 0; VACUUM;").unwrap();
    committed -= committed / 2;
    for _ in 0..20 {
        run(&mut c, &transaction(&mut n, "COMMIT")).unwrap();
        committed += 150;
    }
    drop(c);

    // A stock SQLite, with its own page cache, checks what was written.
    let lines = stock_sqlite(
        &path,
        "print(c.execute('PRAGMA integrity_check').fetchone()[0])\n\
         print(c.execute('SELECT count(*) FROM t').fetchone()[0])\n\
         print(c.execute('SELECT count(*) FROM t WHERE length(v) = 600').fetchone()[0])\n",
    );
    let committed = committed.to_string();
    assert_eq!(lines, ["ok", committed.as_str(), committed.as_str()]);
}
