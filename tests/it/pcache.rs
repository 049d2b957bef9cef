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
use std::process::Command;

/// A key that lands anywhere in the index (as the delivery ids do), so the
/// index's pages split and rebalance out of order.
fn key(n: u64) -> String {
    format!("{:016x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
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
        let mut sql = String::from("BEGIN;");
        for _ in 0..150 {
            n += 1;
            sql.push_str(&format!(
                "INSERT INTO t (k, v) VALUES ('{}', zeroblob(600));",
                key(n)
            ));
        }
        // Every third transaction grows the database and is rolled back.
        let rolled_back = round % 3 == 1;
        sql.push_str(if rolled_back { "ROLLBACK;" } else { "COMMIT;" });
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
        let mut sql = String::from("BEGIN;");
        for _ in 0..150 {
            n += 1;
            sql.push_str(&format!(
                "INSERT INTO t (k, v) VALUES ('{}', zeroblob(600));",
                key(n)
            ));
        }
        sql.push_str("COMMIT;");
        run(&mut c, &sql).unwrap();
        committed += 150;
    }
    drop(c);

    // A stock SQLite, with its own page cache, checks what was written.
    let script = "import sqlite3, sys\n\
                  c = sqlite3.connect(sys.argv[1])\n\
                  print(c.execute('PRAGMA integrity_check').fetchone()[0])\n\
                  print(c.execute('SELECT count(*) FROM t').fetchone()[0])\n\
                  print(c.execute('SELECT count(*) FROM t WHERE length(v) = 600').fetchone()[0])\n";
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .expect("python3 runs (scripts/test installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines,
        ["ok", &committed.to_string(), &committed.to_string()],
        "{said}"
    );
}
