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
    // The holder releases it.
    assert!(c
        .write_transaction(|c| leases::release(c, key, &b.lease_id))
        .unwrap());
    assert!(c
        .write_transaction(|c| leases::find(c, key))
        .unwrap()
        .is_none());
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
