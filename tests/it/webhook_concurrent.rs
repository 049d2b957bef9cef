//! Webhooks that reach the store at once, through several writer threads:
//! one repository and its sessions however many first sightings race, and
//! each session's count of open entries kept exact. Each on SQLite and on
//! PostgreSQL.

use crate::support::*;
use crate::testapp::*;

fn concurrent_first_sightings_yield_one_repository(db: Db, writers: &str) {
    let s = std::sync::Arc::new(
        TestApp::builder()
            .db(db)
            .env("CODEX_BRIDGE_WRITER_THREADS", writers)
            .start(),
    );
    let handles: Vec<_> = (0..24)
        .map(|i| {
            let s = s.clone();
            std::thread::spawn(move || {
                s.comment(
                    &format!("race-{i}"),
                    100 + i,
                    "@ccbot go",
                    "fresh-repo",
                    i % 3,
                )
                .status
            })
        })
        .collect();
    for h in handles {
        let status = h.join().unwrap();
        assert_eq!(status, 202, "server logs:\n{}", s.logs());
    }
    let mut c = s.db();
    assert_eq!(
        count_where(
            &mut c,
            "repositories",
            "repo_key = 'default:acme/fresh-repo'"
        ),
        1
    );
    assert_eq!(
        count_where(&mut c, "sessions", "repo_key = 'default:acme/fresh-repo'"),
        3
    );
    assert_eq!(count(&mut c, "tasks"), 24);
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'repository.registered'"),
        1
    );
}

#[test]
fn concurrent_first_sightings_yield_one_repository_sqlite() {
    concurrent_first_sightings_yield_one_repository(Db::Sqlite, "1");
}

#[test]
fn concurrent_first_sightings_yield_one_repository_postgres() {
    concurrent_first_sightings_yield_one_repository(Db::Postgres, "4");
}

/// Several writers ingest comments on the same existing Issues at once: each
/// batch locks its sessions in key order and adds its open entries with one
/// statement per increment, so no writer waits on another in a cycle and every
/// session's count of open entries is the number of its entries (here all are
/// open: no turn runs, and one commenter writes them all, so the hourly limit
/// per commenter is off).
fn concurrent_comments_on_shared_issues_keep_their_counts(db: Db, writers: &str) {
    let s = std::sync::Arc::new(
        TestApp::builder()
            .db(db)
            .env("CODEX_BRIDGE_WRITER_THREADS", writers)
            .env("CODEX_BRIDGE_USER_TRIGGERS_PER_HOUR", "0")
            .start(),
    );
    for issue in 1..=6 {
        let r = s.comment(
            &format!("first-{issue}"),
            issue,
            "@ccbot go",
            "shared",
            issue,
        );
        assert_eq!(r.status, 202, "{:?}", r.json);
    }
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                (0..18)
                    .map(|i| {
                        let n = 1000 + t * 100 + i;
                        s.comment(&format!("shared-{n}"), n, "@ccbot go", "shared", 1 + n % 6)
                            .status
                    })
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    for h in handles {
        assert!(
            h.join().unwrap().iter().all(|&st| st == 202),
            "server logs:\n{}",
            s.logs()
        );
    }
    let mut c = s.db();
    assert_eq!(count(&mut c, "outbox_entries"), 6 + 72);
    assert_eq!(
        count_where(
            &mut c,
            "sessions s",
            "s.repo_key = 'default:acme/shared' AND s.open_entries = \
             (SELECT COUNT(*) FROM outbox_entries o WHERE o.session_key = s.session_key) \
             AND s.open_entries = 13"
        ),
        6
    );
}

#[test]
fn concurrent_comments_on_shared_issues_keep_their_counts_sqlite() {
    concurrent_comments_on_shared_issues_keep_their_counts(Db::Sqlite, "1");
}

#[test]
fn concurrent_comments_on_shared_issues_keep_their_counts_postgres() {
    concurrent_comments_on_shared_issues_keep_their_counts(Db::Postgres, "4");
}
