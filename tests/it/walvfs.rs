//! The store's SQLite connections write their WAL through `store::walvfs`,
//! which gathers a transaction's frame writes into one. What it writes must be
//! a WAL like any other: a stock SQLite (Python's, with the platform's own VFS)
//! opens the database while our connection still holds every frame in the WAL,
//! finds it intact and sees every committed row.

use crate::support::*;
use codex_bridge::store::ingest;
use codex_bridge::store::{run_migrations, walvfs};

#[test]
fn a_stock_sqlite_reads_the_wal_we_write_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let mut c = connect(&format!("sqlite://{}", path.display()));
    run_migrations(&mut c).unwrap();
    let (asked_before, made_before) = walvfs::write_counts();
    // 20 group commits of 25 accepts over 10 repositories: hundreds of frames,
    // left in the WAL (no checkpointer runs here, and the connection stays open).
    for batch in 0..20 {
        let reqs: Vec<_> = (0..25)
            .map(|i| {
                let n = batch * 25 + i + 1;
                crate::actors::request(&format!("r{}", n % 10), n % 7 + 1, n, "@ccbot go")
            })
            .collect();
        c.write_transaction(|c| ingest::ingest_batch(c, &reqs))
            .unwrap();
    }
    let (asked, made) = walvfs::write_counts();
    let (asked, made) = (asked - asked_before, made - made_before);
    // Two writes a frame asked (header, page); about one made a commit. (Other
    // tests write at the same time: the counts are the process's.)
    assert!(asked >= 2 * 20 * 10, "asked {asked}");
    assert!(
        made * 2 <= asked,
        "asked {asked}, made {made}: nothing was gathered"
    );
    let wal = std::fs::metadata(dir.path().join("w.db-wal"))
        .unwrap()
        .len();
    assert!(
        wal > 100 * 4096,
        "the frames are still in the WAL: {wal} bytes"
    );

    let lines = stock_sqlite(
        &path,
        "print(c.execute('PRAGMA integrity_check').fetchone()[0])\n\
         print(c.execute('SELECT count(*) FROM tasks').fetchone()[0])\n\
         print(c.execute('SELECT count(*) FROM webhook_deliveries').fetchone()[0])\n\
         print(c.execute(\"SELECT count(*) FROM task_transitions WHERE to_state = 'queued'\").fetchone()[0])\n",
    );
    assert_eq!(lines, ["ok", "500", "500", "500"]);
    drop(c);
}
