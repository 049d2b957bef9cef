//! The worker calls' store functions on SQLite and PostgreSQL, with two
//! connections standing for two server processes: a call queued by one is
//! taken once by a poll on the other, only while its caller beats and
//! under a held lease; answered once, by that lease; a turn's events stored
//! once each, in place, however often a batch is sent; a lease that ends
//! leaves its calls uncertain; and the caller (or, for a dead one, the
//! sweep) deletes what it no longer waits for. A start handed to a worker
//! names that worker as its attempt's owner at once, answered or not.

use crate::support::*;
use codex_bridge::store::control::ControlRequest;
use codex_bridge::store::worker_calls::{self as calls, CallId, Unmatched, Verdict};
use codex_bridge::store::workers::{self, RepoName, WorkerName};
use codex_bridge::store::{instances, run_migrations, worker_leases, DbConn};
use codex_bridge::worker_api::{CallBody, Event, Outcome, Value};
use std::time::Duration;

const REPO: &str = "acme/widgets";

fn lookup() -> CallBody {
    CallBody::LookupTurn {
        thread_id: "t".into(),
        operation_id: "op".into(),
    }
}

fn done() -> Outcome {
    Outcome::Ok { value: Value::Done }
}

fn lease_for(c: &mut DbConn, name: &str) -> worker_leases::WorkerLease {
    let created = workers::create(
        c,
        &ControlRequest {
            request_id: format!("register-{name}"),
            reason: "test".into(),
            actor: "admin:alice".into(),
        },
        &WorkerName::parse(name).unwrap(),
        &RepoName::parse_list(&[REPO.to_owned()]).unwrap(),
    )
    .unwrap();
    let worker = workers::authenticate(c, &created.token).unwrap().unwrap();
    worker_leases::acquire(
        c,
        &worker,
        &RepoName::parse(REPO).unwrap(),
        Duration::from_secs(60),
    )
    .unwrap()
    .unwrap()
}

fn queue(c: &mut DbConn, caller: &str, stream: bool) -> CallId {
    let id = CallId::mint();
    c.write_transaction(|c| {
        calls::insert(
            c,
            &id,
            REPO,
            caller,
            &lookup(),
            stream,
            Duration::from_secs(60),
        )
    })
    .unwrap();
    id
}

fn rules(mut a: DbConn, mut b: DbConn) {
    run_migrations(&mut a).unwrap();
    for server in ["server-a", "server-b"] {
        instances::register(&mut a, server, "default", "test").unwrap();
    }
    let lease = lease_for(&mut a, "build-1");
    let alive_since = "2000-01-01T00:00:00.000000Z";

    // Queued on A (and one by a process that does not beat), taken on B,
    // once.
    let id = queue(&mut a, "server-a", false);
    let orphan = queue(&mut a, "server-gone", false);
    assert_eq!(calls::watch(&mut a, &id).unwrap(), Verdict::Pending);
    let claimed = b
        .write_transaction(|c| calls::claim(c, &lease, alive_since))
        .unwrap();
    assert_eq!(claimed.calls.len(), 1, "the dead caller's call stays");
    assert_eq!(claimed.calls[0].call_id, id.as_str());
    assert!(b
        .write_transaction(|c| calls::claim(c, &lease, alive_since))
        .unwrap()
        .calls
        .is_empty());

    // Answered on B, once, by its lease only; A reads it.
    assert_eq!(
        calls::answer(&mut b, "wl-other", &id, &done()).unwrap(),
        Err(Unmatched::UnknownCall)
    );
    calls::answer(&mut b, &lease.lease_id, &id, &done())
        .unwrap()
        .unwrap();
    assert_eq!(
        calls::answer(&mut b, &lease.lease_id, &id, &done()).unwrap(),
        Err(Unmatched::UnknownCall)
    );
    assert_eq!(calls::watch(&mut a, &id).unwrap(), Verdict::Settled(done()));
    calls::delete(&mut a, &id).unwrap();
    assert!(calls::find(&mut a, &id).unwrap().is_none());

    // A turn's events: each once, in place.
    let turn = queue(&mut a, "server-a", true);
    b.write_transaction(|c| calls::claim(c, &lease, alive_since))
        .unwrap();
    let started = Outcome::Ok {
        value: Value::Turn {
            turn_id: "u".into(),
            worker_id: None,
        },
    };
    calls::answer(&mut b, &lease.lease_id, &turn, &started)
        .unwrap()
        .unwrap();
    let batch = vec![Event::Idle { seq: 1 }, Event::Active { seq: 2 }];
    for _ in 0..2 {
        b.write_transaction(|c| calls::add_events(c, &lease.lease_id, &turn, 0, &batch))
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        b.write_transaction(|c| calls::add_events(
            c,
            &lease.lease_id,
            &turn,
            4,
            &[Event::Idle { seq: 9 }]
        ))
        .unwrap(),
        Err(Unmatched::UnknownCall),
        "a gap"
    );
    let end = vec![
        Event::Active { seq: 2 },
        Event::Completed {
            seq: 3,
            final_text: Some("done".into()),
        },
        Event::Idle { seq: 4 },
    ];
    assert_eq!(
        b.write_transaction(|c| calls::add_events(c, &lease.lease_id, &turn, 1, &end))
            .unwrap(),
        Ok(1),
        "only the new event, up to the end of the turn"
    );
    let followed = calls::follow(&mut a, &turn, 1).unwrap();
    assert_eq!(
        followed.events,
        vec![
            Event::Active { seq: 2 },
            Event::Completed {
                seq: 3,
                final_text: Some("done".into())
            }
        ]
    );
    assert_eq!(count_where(&mut a, "worker_call_events", "ends_turn"), 1);

    // A call delivered under a lease that ends is lost, uncertain; its
    // late answer is refused.
    let cut = queue(&mut a, "server-a", false);
    b.write_transaction(|c| calls::claim(c, &lease, alive_since))
        .unwrap();
    let lost = b
        .write_transaction(|c| calls::end_lease(c, &lease.lease_id, "revoked"))
        .unwrap();
    assert!(lost.contains(&cut));
    assert!(matches!(
        calls::watch(&mut a, &cut).unwrap(),
        Verdict::Settled(Outcome::Uncertain { .. })
    ));
    assert_eq!(
        calls::answer(&mut b, &lease.lease_id, &cut, &done()).unwrap(),
        Err(Unmatched::UnknownCall)
    );

    // Given up while queued: gone, never taken.
    let dropped = queue(&mut a, "server-a", false);
    assert!(matches!(
        a.write_transaction(|c| calls::give_up(c, &dropped))
            .unwrap(),
        Some(Err(codex_bridge::agent::remote::hub::CallState::Queued))
    ));
    assert!(calls::find(&mut a, &dropped).unwrap().is_none());

    // A lease that moves to another worker loses the calls the old one
    // took and never answered.
    let moved = queue(&mut a, "server-a", false);
    b.write_transaction(|c| calls::claim(c, &lease, alive_since))
        .unwrap();
    let w = workers::WorkerId::parse(&lease.worker_id).unwrap();
    assert!(worker_leases::release(&mut a, &w, &lease.lease_id).unwrap());
    let next = lease_for(&mut a, "build-2");
    assert_ne!(next.lease_id, lease.lease_id);
    let claimed = b
        .write_transaction(|c| calls::claim(c, &next, alive_since))
        .unwrap();
    assert!(claimed.calls.is_empty());
    assert_eq!(claimed.lost, vec![moved.clone()]);
    assert!(matches!(
        calls::watch(&mut a, &moved).unwrap(),
        Verdict::Settled(Outcome::Uncertain { .. })
    ));

    // The sweep deletes what the dead caller left, and nothing of the
    // living.
    let now = codex_bridge::store::now();
    instances::heartbeat(&mut a, "server-a", "default", "test", None).unwrap();
    let swept = a.write_transaction(|c| calls::sweep(c, &now)).unwrap();
    assert_eq!(swept, 1);
    assert!(calls::find(&mut a, &orphan).unwrap().is_none());
    assert!(calls::find(&mut a, &turn).unwrap().is_some());
}

#[test]
fn worker_call_rules_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("w.db").display());
    let mut first = connect(&url);
    run_migrations(&mut first).unwrap();
    rules(first, connect(&url));
}

#[test]
fn worker_call_rules_postgres() {
    let db = PgDb::create();
    let mut first = connect(&db.url);
    run_migrations(&mut first).unwrap();
    rules(first, connect(&db.url));
}

/// A turn's start for `attempt` of `task`.
pub fn start(task: &str, attempt: &str) -> CallBody {
    use codex_bridge::domain::policy::{ApprovalPolicy, RepoPolicy, Sandbox};
    use codex_bridge::domain::trust::{ExecutionPolicy, Subject};
    let repo = RepoPolicy {
        approval_policy: ApprovalPolicy::Never,
        sandbox: Sandbox::WorkspaceWrite,
        turn_timeout: Duration::from_secs(60),
    };
    CallBody::StartTurn {
        thread_id: "t".into(),
        operation_id: "op".into(),
        text: "fix it".into(),
        cwd: "ws".into(),
        terms: codex_bridge::worker_api::Terms {
            policy: ExecutionPolicy::decide(&repo, false, &Subject::Issue),
            base_instructions: None,
        },
        attempt: Some(codex_bridge::worker_api::AttemptIdentity {
            task_id: task.into(),
            attempt_id: attempt.into(),
        }),
    }
}

/// The owner an attempt's row names.
fn owner(c: &mut DbConn, attempt: &str) -> Option<String> {
    use codex_bridge::store::schema::attempts;
    use diesel::prelude::*;
    codex_bridge::with_conn!(c, |c| attempts::table
        .filter(attempts::attempt_id.eq(attempt))
        .select(attempts::owner)
        .first::<Option<String>>(c))
    .unwrap()
}

fn a_start_names_the_worker_it_is_delivered_to(mut c: DbConn) {
    use codex_bridge::store::{attempts, ingest};
    run_migrations(&mut c).unwrap();
    instances::register(&mut c, "server-a", "default", "test").unwrap();
    let req = crate::actors::request("widgets", 1, 1, "@ccbot go");
    let task_id = match c.write_transaction(|c| ingest::ingest(c, &req)).unwrap() {
        ingest::IngestOutcome::Accepted { task_id, .. } => task_id,
        other => panic!("not accepted: {other:?}"),
    };
    let attempt = c
        .write_transaction(|c| {
            attempts::start_attempt(c, &task_id, Some("lease-1"), Some("server-a"))
        })
        .unwrap()
        .attempt_id;
    let lease = lease_for(&mut c, "build-1");
    let alive_since = "2000-01-01T00:00:00.000000Z";

    // Queued, the attempt is still the server's: nothing reached a worker.
    let id = CallId::mint();
    let body = start(task_id.as_str(), &attempt);
    c.write_transaction(|c| {
        calls::insert(
            c,
            &id,
            REPO,
            "server-a",
            &body,
            true,
            Duration::from_secs(60),
        )
    })
    .unwrap();
    assert_eq!(owner(&mut c, &attempt).as_deref(), Some("server-a"));
    // Taken by a poll: the turn may run there from now on, whether or not
    // its answer ever arrives.
    let claimed = c
        .write_transaction(|c| calls::claim(c, &lease, alive_since))
        .unwrap();
    assert_eq!(claimed.calls.len(), 1);
    let named = format!("worker:{}", lease.worker_id);
    assert_eq!(owner(&mut c, &attempt).as_deref(), Some(named.as_str()));
    assert_eq!(
        count_where(
            &mut c,
            "audit_events",
            &format!("action = 'attempt.taken' AND actor = '{named}'")
        ),
        1
    );
    // Its answer names the same worker: nothing changes, nothing more is
    // audited.
    c.write_transaction(|c| {
        let w = workers::WorkerId::parse(&lease.worker_id).unwrap();
        attempts::taken_by_worker(c, &task_id, &w)
    })
    .unwrap();
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'attempt.taken'"),
        1
    );
    // A call that starts no turn names nobody.
    let other = queue(&mut c, "server-a", false);
    c.write_transaction(|c| calls::claim(c, &lease, alive_since))
        .unwrap();
    assert!(calls::find(&mut c, &other).unwrap().is_some());
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'attempt.taken'"),
        1
    );
}

#[test]
fn a_start_names_the_worker_it_is_delivered_to_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("w.db").display());
    a_start_names_the_worker_it_is_delivered_to(connect(&url));
}

#[test]
fn a_start_names_the_worker_it_is_delivered_to_postgres() {
    let db = PgDb::create();
    a_start_names_the_worker_it_is_delivered_to(connect(&db.url));
}
