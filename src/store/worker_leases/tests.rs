use super::*;
use crate::config::DatabaseUrl;
use crate::store::control::ControlRequest;
use crate::store::workers::{self, WorkerName};
use crate::store::{run_migrations, ConnSettings};
use proptest::prelude::*;

fn db(dir: &tempfile::TempDir) -> DbConn {
    let mut c = DbConn::establish(&ConnSettings {
        url: DatabaseUrl::Sqlite(dir.path().join("db.sqlite")),
        sqlite_busy_timeout: Duration::from_secs(5),
        read_only: false,
    })
    .unwrap();
    run_migrations(&mut c).unwrap();
    c
}

fn request(id: &str) -> ControlRequest {
    ControlRequest {
        request_id: id.into(),
        reason: "test".into(),
        actor: "admin:alice".into(),
    }
}

/// A registered worker given `repos`, and its token.
fn worker(c: &mut DbConn, req: &str, repos: &[&str]) -> (Worker, WorkerToken) {
    let texts: Vec<String> = repos.iter().map(|r| r.to_string()).collect();
    let created = workers::create(
        c,
        &request(req),
        &WorkerName::parse(req).unwrap(),
        &RepoName::parse_list(&texts).unwrap(),
    )
    .unwrap();
    let w = workers::authenticate(c, &created.token).unwrap().unwrap();
    (w, created.token)
}

fn repo(text: &str) -> RepoName {
    RepoName::parse(text).unwrap()
}

const LONG: Duration = Duration::from_secs(600);

#[test]
fn a_worker_leases_only_its_repositories_and_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = db(&dir);
    let (a, _) = worker(&mut c, "a", &["acme/widgets"]);
    let (b, _) = worker(&mut c, "b", &["acme/widgets"]);

    let refused = acquire(&mut c, &a, &repo("acme/other"), LONG).unwrap_err();
    assert!(matches!(
        refused,
        StoreError::Refused {
            code: "repository_not_allowed",
            ..
        }
    ));

    let first = acquire(&mut c, &a, &repo("acme/widgets"), LONG)
        .unwrap()
        .unwrap();
    assert_eq!(first.fence, 1);
    assert_eq!(
        acquire(&mut c, &b, &repo("acme/widgets"), LONG).unwrap(),
        None
    );
    // Asking again renews: same lease, same fence.
    let again = acquire(&mut c, &a, &repo("acme/widgets"), LONG)
        .unwrap()
        .unwrap();
    assert_eq!(
        (again.lease_id.as_str(), again.fence),
        (first.lease_id.as_str(), 1)
    );
    assert!(check(&mut c, &a.worker_id, &first.lease_id)
        .unwrap()
        .is_some());
    assert!(check(&mut c, &b.worker_id, &first.lease_id)
        .unwrap()
        .is_none());

    // Released: the other worker takes it with a fence past the last, and
    // the first can neither use nor renew its old lease.
    assert!(release(&mut c, &a.worker_id, &first.lease_id).unwrap());
    assert!(!release(&mut c, &a.worker_id, &first.lease_id).unwrap());
    let taken = acquire(&mut c, &b, &repo("acme/widgets"), LONG)
        .unwrap()
        .unwrap();
    assert_eq!(taken.fence, 2);
    assert_ne!(taken.lease_id, first.lease_id);
    assert!(check(&mut c, &a.worker_id, &first.lease_id)
        .unwrap()
        .is_none());
    assert!(renew(&mut c, &a.worker_id, &first.lease_id, LONG)
        .unwrap()
        .is_none());
    assert_eq!(held_by(&mut c, &b.worker_id).unwrap(), vec![taken]);
}

#[test]
fn an_expired_lease_moves_and_its_holder_cannot_use_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = db(&dir);
    let (a, _) = worker(&mut c, "a", &["acme/widgets"]);
    let (b, _) = worker(&mut c, "b", &["acme/widgets"]);
    let stale = acquire(&mut c, &a, &repo("acme/widgets"), Duration::ZERO)
        .unwrap()
        .unwrap();
    assert!(check(&mut c, &a.worker_id, &stale.lease_id)
        .unwrap()
        .is_none());
    let taken = acquire(&mut c, &b, &repo("acme/widgets"), LONG)
        .unwrap()
        .unwrap();
    assert_eq!(taken.fence, stale.fence + 1);
    assert!(renew(&mut c, &a.worker_id, &stale.lease_id, LONG)
        .unwrap()
        .is_none());
}

#[test]
fn revoking_a_worker_ends_its_leases_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = db(&dir);
    let (a, token) = worker(&mut c, "a", &["acme/widgets", "acme/gadgets"]);
    let (b, _) = worker(&mut c, "b", &["acme/widgets"]);
    let held = acquire(&mut c, &a, &repo("acme/widgets"), LONG)
        .unwrap()
        .unwrap();
    acquire(&mut c, &a, &repo("acme/gadgets"), LONG)
        .unwrap()
        .unwrap();
    assert!(!is_revoked_token(&mut c, &token).unwrap());

    workers::revoke(&mut c, &request("r"), &a.worker_id).unwrap();
    assert!(is_revoked_token(&mut c, &token).unwrap());
    assert!(check(&mut c, &a.worker_id, &held.lease_id)
        .unwrap()
        .is_none());
    assert!(renew(&mut c, &a.worker_id, &held.lease_id, LONG)
        .unwrap()
        .is_none());
    assert!(held_by(&mut c, &a.worker_id).unwrap().is_empty());
    // Nobody waits for its expiry.
    let taken = acquire(&mut c, &b, &repo("acme/widgets"), LONG)
        .unwrap()
        .unwrap();
    assert_eq!(taken.fence, held.fence + 1);
}

fn holding() -> impl Strategy<Value = (String, i64, String, bool, bool)> {
    (
        prop::sample::select(vec!["wrk-a".to_string(), "wrk-b".to_string()]),
        1_i64..100,
        prop::sample::select(vec!["t1".to_string(), "t3".to_string(), "t5".to_string()]),
        any::<bool>(),
        any::<bool>(),
    )
}

proptest! {
    /// Whatever the lease row: a live lease of another worker is never
    /// taken, the asker's own is renewed, and every move raises the fence.
    #[test]
    fn a_claim_never_takes_a_live_lease_and_the_fence_only_grows(
        current in prop::option::of(holding()),
        asker in prop::sample::select(vec!["wrk-a", "wrk-b"]),
        at in prop::sample::select(vec!["t0", "t2", "t4", "t6"]),
    ) {
        let h = current.as_ref().map(|(w, fence, exp, released, revoked)| Holding {
            worker_id: w,
            fence: *fence,
            expires_at: exp,
            released: *released,
            revoked: *revoked,
        });
        let claim = judge(h.as_ref(), asker, at);
        match (&h, claim) {
            (None, c) => prop_assert_eq!(c, Claim::Insert),
            (Some(h), Claim::Busy) => {
                prop_assert!(h.is_held(at));
                prop_assert_ne!(h.worker_id, asker);
            }
            (Some(h), Claim::Renew) => {
                prop_assert_eq!(h.worker_id, asker);
                prop_assert!(!h.released && !h.revoked);
            }
            (Some(h), Claim::TakeOver { fence }) => {
                prop_assert!(fence > h.fence);
                prop_assert!(!h.is_held(at) || h.worker_id == asker);
                prop_assert!(h.released || h.revoked || h.worker_id != asker);
            }
            (Some(_), Claim::Insert) => prop_assert!(false, "a row exists"),
        }
    }
}
