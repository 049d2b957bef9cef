//! Repository leases: one holder at a time, renewal and release only by the
//! holder's lease id, takeover only after expiry (SQLite and PostgreSQL).

use crate::support::*;
use codex_bridge::store::leases;
use codex_bridge::store::{run_migrations, DbConn};
use std::time::Duration;

fn lease_rules(mut c: DbConn) {
    run_migrations(&mut c).unwrap();
    exec(&mut c, "INSERT INTO repositories (repo_key, instance_id, owner, name, status, registered_at, updated_at, version) VALUES ('default:acme/w', 'default', 'acme', 'w', 'active', 't', 't', 1)").unwrap();
    let key = &codex_bridge::domain::RepoKey::parse("default:acme/w").unwrap();
    let a = c
        .write_transaction(|c| leases::acquire(c, key, "A", Duration::from_secs(60)))
        .unwrap()
        .unwrap();
    // B cannot take a live lease; A renews its own.
    assert!(c
        .write_transaction(|c| leases::acquire(c, key, "B", Duration::from_secs(60)))
        .unwrap()
        .is_none());
    let renewed = c
        .write_transaction(|c| leases::acquire(c, key, "A", Duration::from_secs(60)))
        .unwrap()
        .unwrap();
    assert_eq!(renewed.lease_id, a.lease_id);
    // A's lease expires (renewed with no time left); B takes it over.
    let expired = c
        .write_transaction(|c| leases::renew(c, key, &a.lease_id, Duration::ZERO))
        .unwrap()
        .unwrap();
    wait_until(
        "A's lease to lie in the past",
        Duration::from_secs(1),
        || codex_bridge::store::now() > expired.expires_at,
    );
    let b = c
        .write_transaction(|c| leases::acquire(c, key, "B", Duration::from_secs(60)))
        .unwrap()
        .unwrap();
    assert_ne!(b.lease_id, a.lease_id);
    assert_eq!(b.owner, "B");
    // The old owner can neither renew nor release the new owner's lease.
    assert!(c
        .write_transaction(|c| leases::renew(c, key, &a.lease_id, Duration::from_secs(60)))
        .unwrap()
        .is_none());
    assert!(!c
        .write_transaction(|c| leases::release(c, key, &a.lease_id))
        .unwrap());
    assert_eq!(
        c.write_transaction(|c| leases::find(c, key))
            .unwrap()
            .unwrap()
            .lease_id,
        b.lease_id
    );
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'lease.taken_over'"),
        1
    );
    // The holder releases it: the row stays, marked, so the next holder's
    // token follows B's.
    assert!(c
        .write_transaction(|c| leases::release(c, key, &b.lease_id))
        .unwrap());
    let released = c
        .write_transaction(|c| leases::find(c, key))
        .unwrap()
        .unwrap();
    assert!(released.released_at.is_some());
    assert!(!released.is_held(&codex_bridge::store::now()));
    assert!(c
        .write_transaction(|c| leases::renew(c, key, &b.lease_id, Duration::from_secs(60)))
        .unwrap()
        .is_none());
}

fn fenced_repo(c: &mut DbConn) -> codex_bridge::domain::RepoKey {
    run_migrations(c).unwrap();
    exec(c, "INSERT INTO repositories (repo_key, instance_id, owner, name, status, registered_at, updated_at, version) VALUES ('default:acme/f', 'default', 'acme', 'f', 'active', 't', 't', 1)").unwrap();
    codex_bridge::domain::RepoKey::parse("default:acme/f").unwrap()
}

/// Lets `lease` expire where it stands (renewed with no time left).
fn expire(c: &mut DbConn, lease: &leases::Lease) {
    let gone = c
        .write_transaction(|c| leases::renew(c, &lease.repo_key, &lease.lease_id, Duration::ZERO))
        .unwrap()
        .unwrap();
    wait_until(
        "the lease to lie in the past",
        Duration::from_secs(1),
        || codex_bridge::store::now() > gone.expires_at,
    );
}

fn audited(c: &mut DbConn, action: &str) -> Vec<serde_json::Value> {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        metadata: String,
    }
    let q = format!("SELECT metadata FROM audit_events WHERE action = '{action}' ORDER BY id");
    codex_bridge::with_conn!(c, |c| diesel::RunQueryDsl::load::<Row>(
        diesel::sql_query(&q),
        c
    ))
    .unwrap()
    .into_iter()
    .map(|r| serde_json::from_str(&r.metadata).unwrap())
    .collect()
}

/// Every new holder gets the next fencing token, and every move between
/// holders is audited with both; a holder's own expired lease, untaken,
/// is renewed under the same id and token.
fn fence_rules(mut c: DbConn) {
    let key = &fenced_repo(&mut c);
    let ttl = Duration::from_secs(60);
    let a = c
        .write_transaction(|c| leases::acquire(c, key, "A", ttl))
        .unwrap()
        .unwrap();
    assert_eq!(a.fence, 1);
    expire(&mut c, &a);
    let again = c
        .write_transaction(|c| leases::acquire(c, key, "A", ttl))
        .unwrap()
        .unwrap();
    assert_eq!(
        (again.lease_id.as_str(), again.fence),
        (a.lease_id.as_str(), 1)
    );
    assert!(c
        .write_transaction(|c| leases::release(c, key, &a.lease_id))
        .unwrap());
    let b = c
        .write_transaction(|c| leases::acquire(c, key, "B", ttl))
        .unwrap()
        .unwrap();
    assert_eq!(b.fence, 2);
    let handed = audited(&mut c, "lease.handed_over");
    assert_eq!(handed.len(), 1, "{handed:?}");
    assert_eq!(handed[0]["previousOwner"], "A");
    assert_eq!(handed[0]["owner"], "B");
    assert_eq!(handed[0]["fence"], 2);
    expire(&mut c, &b);
    let d = c
        .write_transaction(|c| leases::acquire(c, key, "D", ttl))
        .unwrap()
        .unwrap();
    assert_eq!(d.fence, 3);
    let taken = audited(&mut c, "lease.taken_over");
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(
        (
            &taken[0]["previousOwner"],
            &taken[0]["previousFence"],
            &taken[0]["owner"]
        ),
        (
            &serde_json::json!("B"),
            &serde_json::json!(2),
            &serde_json::json!("D")
        )
    );
    // B's late write is refused, and with it everything in its transaction;
    // D's passes.
    let late = c.write_transaction(|c| {
        leases::check(c, &b.fence())?;
        exec(
            c,
            "UPDATE repositories SET status = 'disabled' WHERE repo_key = 'default:acme/f'",
        )
        .map_err(|e| codex_bridge::store::StoreError::Query(e.to_string()))
    });
    match late {
        Err(codex_bridge::store::StoreError::Refused { code, .. }) => {
            assert_eq!(code, "lease_lost")
        }
        other => panic!("B's write under a lease D took over was not refused: {other:?}"),
    }
    assert_eq!(
        count_where(&mut c, "repositories", "status = 'disabled'"),
        0
    );
    c.write_transaction(|c| leases::check(c, &d.fence()))
        .unwrap();
    // A fence naming the right lease but another token is refused as well.
    let mut forged = d.fence();
    forged.token += 1;
    assert!(c.write_transaction(|c| leases::check(c, &forged)).is_err());
    // Released, D's fence no longer passes either.
    assert!(c
        .write_transaction(|c| leases::release(c, key, &d.lease_id))
        .unwrap());
    assert!(c
        .write_transaction(|c| leases::check(c, &d.fence()))
        .is_err());
}

#[test]
fn fence_rules_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    fence_rules(connect(&format!(
        "sqlite://{}",
        dir.path().join("f.db").display()
    )));
}

#[test]
fn fence_rules_postgres() {
    let db = PgDb::create();
    fence_rules(connect(&db.url));
}

/// On PostgreSQL several processes write at once: a holder's check keeps
/// the lease row share-locked until its transaction ends, so a takeover
/// waits for that transaction, and a check after a committed takeover
/// refuses.
#[test]
fn a_takeover_passes_over_a_lease_its_holder_is_writing_under_postgres() {
    let db = PgDb::create();
    let mut a_conn = connect(&db.url);
    let key = fenced_repo(&mut a_conn);
    let ttl = Duration::from_secs(60);
    let a = a_conn
        .write_transaction(|c| leases::acquire(c, &key, "A", ttl))
        .unwrap()
        .unwrap();
    expire(&mut a_conn, &a);
    // A's transaction checks its (expired, untaken) fence and stays open,
    // as a holder paused in the middle of a write leaves it.
    exec(&mut a_conn, "BEGIN").unwrap();
    leases::check(&mut a_conn, &a.fence()).unwrap();
    // B neither takes the lease nor waits for A's lock (its writer serves
    // every other write of its process): it answers at once that it is busy.
    let mut b_conn = connect(&db.url);
    let started = std::time::Instant::now();
    let taken = b_conn
        .write_transaction(|c| leases::acquire(c, &key, "B", ttl))
        .unwrap();
    assert_eq!(taken, None, "B took the lease while A's write was open");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "B waited on A's lock"
    );
    exec(
        &mut a_conn,
        "UPDATE repositories SET status = 'disabled' WHERE repo_key = 'default:acme/f'",
    )
    .unwrap();
    exec(&mut a_conn, "COMMIT").unwrap();
    let b = b_conn
        .write_transaction(|c| leases::acquire(c, &key, "B", ttl))
        .unwrap()
        .expect("B takes the lease once A's write committed");
    assert_eq!((b.owner.as_str(), b.fence), ("B", 2));
    // A's write landed before the takeover; after it, A's check refuses.
    assert_eq!(
        count_where(&mut a_conn, "repositories", "status = 'disabled'"),
        1
    );
    assert!(a_conn
        .write_transaction(|c| leases::check(c, &a.fence()))
        .is_err());
}

/// Two writer threads of one holder, each a transaction of writes (checked
/// under their repositories' leases) and renewals of other leases, never
/// wait for each other on the lease rows, so they cannot deadlock: a
/// renewal changes no key, and a check locks only against key changes.
#[test]
fn a_holders_writes_and_renewals_never_wait_for_each_other_postgres() {
    let db = PgDb::create();
    let mut one = connect(&db.url);
    let x = fenced_repo(&mut one);
    exec(&mut one, "INSERT INTO repositories (repo_key, instance_id, owner, name, status, registered_at, updated_at, version) VALUES ('default:acme/g', 'default', 'acme', 'g', 'active', 't', 't', 1)").unwrap();
    let y = codex_bridge::domain::RepoKey::parse("default:acme/g").unwrap();
    let ttl = Duration::from_secs(60);
    let held = |c: &mut DbConn, key| {
        c.write_transaction(|c| leases::acquire(c, key, "A", ttl))
            .unwrap()
            .unwrap()
    };
    let (lx, ly) = (held(&mut one, &x), held(&mut one, &y));
    let mut two = connect(&db.url);
    for c in [&mut one, &mut two] {
        // A wait is a failure here, reported at once.
        exec(c, "SET lock_timeout = '2s'").unwrap();
        exec(c, "BEGIN").unwrap();
    }
    leases::check(&mut one, &lx.fence()).unwrap();
    leases::check(&mut two, &ly.fence()).unwrap();
    assert!(leases::renew(&mut one, &y, &ly.lease_id, ttl)
        .expect("renewing Y waited for the write checked under it")
        .is_some());
    assert!(leases::renew(&mut two, &x, &lx.lease_id, ttl)
        .expect("renewing X waited for the write checked under it")
        .is_some());
    exec(&mut one, "COMMIT").unwrap();
    exec(&mut two, "COMMIT").unwrap();
}

/// A session left in a transaction (a process paused mid-write) is ended by
/// PostgreSQL, and its locks with it, within the bridge's bound.
#[test]
fn a_session_paused_in_a_transaction_is_ended_and_its_lock_released_postgres() {
    let db = PgDb::create();
    let mut a_conn = connect(&db.url);
    let key = fenced_repo(&mut a_conn);
    let a = a_conn
        .write_transaction(|c| leases::acquire(c, &key, "A", Duration::from_secs(60)))
        .unwrap()
        .unwrap();
    expire(&mut a_conn, &a);
    exec(&mut a_conn, "BEGIN").unwrap();
    leases::check(&mut a_conn, &a.fence()).unwrap();
    let mut b_conn = connect(&db.url);
    wait_until(
        "the idle transaction to end and B to take the lease",
        codex_bridge::store::IDLE_IN_TRANSACTION + Duration::from_secs(10),
        || {
            b_conn
                .write_transaction(|c| leases::acquire(c, &key, "B", Duration::from_secs(60)))
                .unwrap()
                .is_some()
        },
    );
    // A's connection was ended under it.
    assert!(exec(&mut a_conn, "SELECT 1").is_err());
}

#[test]
fn lease_rules_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    lease_rules(connect(&format!(
        "sqlite://{}",
        dir.path().join("l.db").display()
    )));
}

#[test]
fn lease_rules_postgres() {
    let db = PgDb::create();
    lease_rules(connect(&db.url));
}
