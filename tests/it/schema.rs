//! `src/store/schema.rs` is what the pinned diesel CLI prints for a database
//! migrated with `migrations/postgres`: a column added, renamed or retyped in
//! a migration and not in the schema (or the other way round) fails here.
//! SQLite's migrations keep the same shape (`migrations.rs` checks their
//! names; the suite runs every query on both backends).

use crate::support::*;
use codex_bridge::store::run_migrations;
use std::path::{Path, PathBuf};
use std::process::Command;

fn diesel_bin() -> PathBuf {
    let bin = std::env::var_os("CODEX_BRIDGE_TEST_DIESEL_BIN").unwrap_or_else(|| {
        panic!(
            "CODEX_BRIDGE_TEST_DIESEL_BIN is not set: run the tests through scripts/test, which \
             builds the pinned diesel CLI (scripts/ensure-diesel-cli)"
        )
    });
    PathBuf::from(bin)
}

#[test]
fn the_schema_is_what_diesel_prints_for_the_migrations() {
    let db = PgDb::create();
    run_migrations(&mut connect(&db.url)).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(diesel_bin())
        .arg("print-schema")
        .arg("--database-url")
        .arg(&db.url)
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "diesel print-schema failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let stored = std::fs::read_to_string(root.join("src/store/schema.rs")).unwrap();
    if printed != stored {
        let first = printed
            .lines()
            .zip(stored.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| printed.lines().count().min(stored.lines().count()));
        panic!(
            "src/store/schema.rs drifted from the migrations at line {}: regenerate it with \
             `diesel print-schema --database-url <a migrated PostgreSQL> > src/store/schema.rs`.\n\
             printed: {:?}\nstored:  {:?}",
            first + 1,
            printed.lines().nth(first),
            stored.lines().nth(first)
        );
    }
}
