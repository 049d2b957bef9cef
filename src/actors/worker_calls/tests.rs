//! The worker-call route on a SQLite store, as the remote runtime and the
//! worker API use it. Two routes on one store stand for two server
//! processes: the caller's and the one a worker polls.

use super::*;
use crate::agent::remote::{RemoteAgent, RemoteRef};
use crate::agent::{Agent, ThreadRequest, ThreadTerms, TurnEvent, TurnRequest};
use crate::config::DatabaseUrl;
use crate::domain::policy::{ApprovalPolicy, RepoPolicy, Sandbox};
use crate::domain::trust::{ExecutionPolicy, Subject};
use crate::domain::{OperationId, ResourceKey};
use crate::store::control::ControlRequest;
use crate::store::workers::{self, RepoName, WorkerName};
use crate::store::{StoreSettings, WriterSettings};
use crate::worker_api::Value;
use futures_util::StreamExt;
use std::path::PathBuf;
use std::sync::Arc;

const REPO: &str = "acme/widgets";

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    lease: WorkerLease,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&StoreSettings {
        url: DatabaseUrl::Sqlite(dir.path().join("db.sqlite")),
        read_pool_size: 2,
        sqlite_busy_timeout: Duration::from_secs(5),
        writer: WriterSettings {
            batch_max: 8,
            threads: 1,
            queue_capacity: 64,
            ingest: Default::default(),
        },
    })
    .unwrap();
    let lease = store
        .write(|c| {
            for server in ["server-a", "server-b"] {
                instances::register(c, server, "default", "test")?;
            }
            let created = workers::create(
                c,
                &ControlRequest {
                    request_id: "register".into(),
                    reason: "test".into(),
                    actor: "admin:alice".into(),
                },
                &WorkerName::parse("build-1").unwrap(),
                &RepoName::parse_list(&[REPO.to_owned()]).unwrap(),
            )?;
            let worker = workers::authenticate(c, &created.token)?.unwrap();
            let repo = RepoName::parse(REPO).unwrap();
            Ok(worker_leases::acquire(c, &worker, &repo, Duration::from_secs(60))?.unwrap())
        })
        .await
        .unwrap();
    Fixture {
        _dir: dir,
        store,
        lease,
    }
}

fn route(f: &Fixture, server: &str) -> WorkerCalls {
    WorkerCalls::new(f.store.clone(), server, Duration::from_secs(30))
}

fn lookup() -> CallBody {
    CallBody::LookupTurn {
        thread_id: "t".into(),
        operation_id: "op".into(),
    }
}

/// The calls `lease` takes through `poll`, waiting for at least one.
async fn take_some(poll: &WorkerCalls, lease: &WorkerLease) -> Vec<Call> {
    let mut waiter = poll.repository_waiter(&lease.repository);
    loop {
        waiter.seen();
        let calls = poll.take(lease).await.unwrap();
        if !calls.is_empty() {
            return calls;
        }
        waiter.wait(LOOK_EVERY).await;
    }
}

/// A worker stand-in polling `poll`: answers the first call it takes with
/// what `outcome` says.
async fn serve_one(
    poll: &WorkerCalls,
    lease: &WorkerLease,
    outcome: impl Fn(&CallBody) -> Outcome,
) -> Call {
    let call = take_some(poll, lease).await.remove(0);
    poll.answer(&lease.lease_id, &call.call_id, outcome(&call.body))
        .await
        .unwrap()
        .unwrap();
    call
}

fn done() -> Outcome {
    Outcome::Ok { value: Value::Done }
}

#[tokio::test]
async fn a_call_made_on_one_process_is_taken_and_answered_through_another() {
    let f = fixture().await;
    let (a, b) = (route(&f, "server-a"), route(&f, "server-b"));
    let waiting = a.call(REPO, lookup(), false, Duration::from_secs(30));
    let worker = async {
        let calls = take_some(&b, &f.lease).await;
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].lease_id, f.lease.lease_id);
        let id = calls[0].call_id.clone();
        // Another lease cannot answer it.
        assert_eq!(
            b.answer("wl-other", &id, done()).await.unwrap(),
            Err(Unmatched::UnknownCall)
        );
        b.answer(&f.lease.lease_id, &id, done())
            .await
            .unwrap()
            .unwrap();
        // Answered once.
        assert_eq!(
            b.answer(&f.lease.lease_id, &id, done()).await.unwrap(),
            Err(Unmatched::UnknownCall)
        );
        id
    };
    let (answered, id) = tokio::join!(waiting, worker);
    assert_eq!(answered.unwrap().outcome, done());
    // Taken once: nothing is left for another poll.
    assert!(b.take(&f.lease).await.unwrap().is_empty());
    // The caller deletes what it read.
    let id = CallId::parse(&id).unwrap();
    wait_gone(&f.store, &id).await;
}

async fn wait_gone(store: &Store, id: &CallId) {
    for _ in 0..100 {
        let i = id.clone();
        if store
            .read(move |c| calls::find(c, &i))
            .await
            .unwrap()
            .is_none()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("call {id} stayed in the store");
}

#[tokio::test]
async fn a_lost_call_is_unavailable_before_a_worker_took_it_and_uncertain_after() {
    let f = fixture().await;
    let (a, b) = (route(&f, "server-a"), route(&f, "server-b"));
    let nobody = a
        .call(REPO, lookup(), false, Duration::from_millis(100))
        .await;
    assert!(
        matches!(nobody, Err(AgentError::Unavailable(_))),
        "{:?}",
        nobody.err()
    );
    assert!(
        b.take(&f.lease).await.unwrap().is_empty(),
        "a call given up leaves the queue"
    );

    // Taken, then the lease ends: the call fails closed.
    let waiting = a.call(REPO, lookup(), false, Duration::from_secs(30));
    let ending = async {
        take_some(&b, &f.lease).await;
        assert_eq!(b.end_lease(&f.lease.lease_id, "revoked").await.unwrap(), 1);
    };
    let (taken, ()) = tokio::join!(waiting, ending);
    assert!(
        matches!(
            taken.as_ref().map(|a| &a.outcome),
            Ok(Outcome::Uncertain { .. })
        ),
        "{:?}",
        taken.map(|a| a.outcome)
    );
}

#[tokio::test]
async fn a_call_whose_lease_ended_unnoticed_is_uncertain_and_its_answer_refused() {
    let f = fixture().await;
    let (a, b) = (route(&f, "server-a"), route(&f, "server-b"));
    let waiting = a.call(REPO, lookup(), false, Duration::from_secs(30));
    let releasing = async {
        let call = take_some(&b, &f.lease).await.remove(0);
        // Released in the store, with no process told: the caller finds
        // out by itself.
        let (w, l) = (
            workers::WorkerId::parse(&f.lease.worker_id).unwrap(),
            f.lease.lease_id.clone(),
        );
        assert!(f
            .store
            .write(move |c| worker_leases::release(c, &w, &l))
            .await
            .unwrap());
        call
    };
    let (taken, call) = tokio::join!(waiting, releasing);
    assert!(
        matches!(
            taken.as_ref().map(|a| &a.outcome),
            Ok(Outcome::Uncertain { .. })
        ),
        "{:?}",
        taken.map(|a| a.outcome)
    );
    assert_eq!(
        b.answer(&f.lease.lease_id, &call.call_id, done())
            .await
            .unwrap(),
        Err(Unmatched::UnknownCall)
    );
}

#[tokio::test]
async fn the_calls_of_a_caller_that_is_not_alive_are_never_taken_and_are_swept() {
    let f = fixture().await;
    // No process of this name beats: it died before its call was taken.
    let dead = route(&f, "server-dead");
    let waiting = tokio::spawn(dead.call(REPO, lookup(), false, Duration::from_secs(30)));
    let b = route(&f, "server-b");
    let mut queued = 0;
    for _ in 0..100 {
        queued = f
            .store
            .read(|c| {
                use diesel::prelude::*;
                let n: i64 = crate::with_conn!(c, |c| crate::store::schema::worker_calls::table
                    .count()
                    .get_result(c))?;
                Ok(n)
            })
            .await
            .unwrap();
        if queued > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(queued, 1);
    assert!(b.take(&f.lease).await.unwrap().is_empty());
    waiting.abort();
    let since = crate::store::now();
    let swept = f
        .store
        .write(move |c| calls::sweep(c, &since))
        .await
        .unwrap();
    // Its own clean-up may have been first.
    assert!(swept <= 1);
}

#[tokio::test]
async fn events_flow_in_order_once_and_the_stream_ends_with_the_turn() {
    let f = fixture().await;
    let (a, b) = (route(&f, "server-a"), route(&f, "server-b"));
    let body = CallBody::Interrupt {
        thread_id: "t".into(),
        turn_id: "u".into(),
    };
    let waiting = a.call(REPO, body, true, Duration::from_secs(30));
    let worker = serve_one(&b, &f.lease, |_| Outcome::Ok {
        value: Value::Turn {
            turn_id: "u".into(),
            worker_id: None,
        },
    });
    let (answered, call) = tokio::join!(waiting, worker);
    let mut events = answered.unwrap().events.unwrap();
    let l = &f.lease.lease_id;
    let id = call.call_id.as_str();
    // One notification makes a transcript item and the delivery, with one
    // `seq`: both are events of their own.
    let batch = vec![
        Event::Other { seq: 1 },
        Event::Delivered {
            seq: 1,
            client_id: Some("op".into()),
        },
    ];
    b.events(l, id, 0, batch.clone()).await.unwrap().unwrap();
    // Sent again after a lost answer: nothing twice.
    b.events(l, id, 0, batch).await.unwrap().unwrap();
    // A batch past a gap is refused: a batch before it was lost.
    assert_eq!(
        b.events(l, id, 5, vec![Event::Idle { seq: 9 }])
            .await
            .unwrap(),
        Err(Unmatched::UnknownCall)
    );
    // Another lease cannot post into it.
    assert_eq!(
        b.events("wl-other", id, 2, vec![Event::Idle { seq: 9 }])
            .await
            .unwrap(),
        Err(Unmatched::UnknownCall)
    );
    b.events(
        l,
        id,
        2,
        vec![Event::Completed {
            seq: 3,
            final_text: Some("done".into()),
        }],
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        b.events(l, id, 3, vec![Event::Idle { seq: 4 }])
            .await
            .unwrap(),
        Err(Unmatched::UnknownCall),
        "nothing follows the end of the turn"
    );
    let mut got = Vec::new();
    while let Some(e) = events.next().await {
        got.push(e);
    }
    assert_eq!(
        got,
        vec![
            Event::Other { seq: 1 },
            Event::Delivered {
                seq: 1,
                client_id: Some("op".into())
            },
            Event::Completed {
                seq: 3,
                final_text: Some("done".into())
            },
        ]
    );
    drop(events);
    wait_gone(&f.store, &CallId::parse(id).unwrap()).await;
}

#[tokio::test]
async fn a_turns_stream_ends_when_its_lease_does() {
    let f = fixture().await;
    let (a, b) = (route(&f, "server-a"), route(&f, "server-b"));
    let waiting = a.call(REPO, lookup(), true, Duration::from_secs(30));
    let worker = serve_one(&b, &f.lease, |_| Outcome::Ok {
        value: Value::Turn {
            turn_id: "u".into(),
            worker_id: None,
        },
    });
    let (answered, call) = tokio::join!(waiting, worker);
    let mut events = answered.unwrap().events.unwrap();
    b.events(
        &f.lease.lease_id,
        &call.call_id,
        0,
        vec![Event::Idle { seq: 1 }],
    )
    .await
    .unwrap()
    .unwrap();
    b.end_lease(&f.lease.lease_id, "released").await.unwrap();
    assert_eq!(events.next().await, Some(Event::Idle { seq: 1 }));
    assert_eq!(events.next().await, None, "the stream ends with its lease");
}

#[tokio::test]
async fn a_poll_wakes_when_a_call_arrives() {
    let f = fixture().await;
    let b = route(&f, "server-b");
    let mut waiter = b.repository_waiter(REPO);
    waiter.seen();
    assert!(b.take(&f.lease).await.unwrap().is_empty());
    // Made on the same process: woken at once, not at the next look.
    let _waiting = tokio::spawn(b.call(REPO, lookup(), false, Duration::from_secs(30)));
    let t = Instant::now();
    waiter.wait(Duration::from_secs(30)).await;
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(take_some(&b, &f.lease).await.len(), 1);
}

fn terms() -> ThreadTerms {
    let repo = RepoPolicy {
        approval_policy: ApprovalPolicy::OnRequest,
        sandbox: Sandbox::WorkspaceWrite,
        turn_timeout: Duration::from_secs(60),
    };
    ThreadTerms {
        policy: ExecutionPolicy::decide(&repo, false, &Subject::Issue),
        base_instructions: None,
    }
}

#[tokio::test]
async fn the_remote_runtimes_calls_reach_the_worker_of_their_repository_and_answers_come_back() {
    let f = fixture().await;
    let (a, b) = (route(&f, "server-a"), route(&f, "server-b"));
    let remote = RemoteAgent::new(
        Arc::new(a.clone()),
        PathBuf::from("/srv/ws"),
        Duration::from_secs(30),
    );
    let cwd = PathBuf::from("/srv/ws/worktrees/default/acme/widgets/issue-7");
    let ensure = remote.ensure_thread(ThreadRequest {
        session_key: ResourceKey::parse("default:Acme/Widgets:issue:7").unwrap(),
        thread_id: None,
        fork_from: None,
        cwd: cwd.clone(),
        terms: terms(),
        history: vec![],
        home: None,
    });
    let (thread, call) = tokio::join!(
        ensure,
        serve_one(&b, &f.lease, |_| Outcome::Ok {
            value: Value::Thread {
                thread_id: "t-1".into()
            }
        })
    );
    let thread = thread.unwrap();
    assert_eq!(thread, "remote:acme/widgets:t-1");
    assert!(
        matches!(&call.body, CallBody::EnsureThread { cwd, .. } if cwd == "worktrees/default/acme/widgets/issue-7"),
        "{:?}",
        call.body
    );

    let task = crate::domain::TaskId::mint();
    let start = remote.start_turn(TurnRequest {
        thread_id: thread.clone(),
        operation_id: OperationId::mint(),
        text: "hello".into(),
        cwd,
        terms: terms(),
        attempt: Some(crate::agent::AttemptRef {
            task_id: task.clone(),
            attempt_id: "att-1".into(),
        }),
    });
    let (started, call) = tokio::join!(
        start,
        serve_one(&b, &f.lease, |_| Outcome::Ok {
            value: Value::Turn {
                turn_id: "u-1".into(),
                worker_id: Some(f.lease.worker_id.clone()),
            }
        })
    );
    let CallBody::StartTurn {
        thread_id, attempt, ..
    } = &call.body
    else {
        panic!("{:?}", call.body)
    };
    assert_eq!(thread_id, "t-1", "the worker gets its own id");
    assert_eq!(
        attempt
            .as_ref()
            .map(|a| (a.task_id.as_str(), a.attempt_id.as_str())),
        Some((task.as_str(), "att-1")),
        "the attempt crosses the wire with the turn"
    );
    let mut started = started.unwrap();
    assert_eq!(started.turn_id, "u-1");
    assert_eq!(
        started.runner.as_ref().map(|w| w.as_str()),
        Some(f.lease.worker_id.as_str()),
        "the turn names the worker the server saw take it"
    );
    b.events(
        &f.lease.lease_id,
        &call.call_id,
        0,
        vec![
            Event::ApprovalRequested {
                seq: 1,
                key: "a-1".into(),
                kind: "command".into(),
                detail: serde_json::json!({}),
            },
            Event::Completed {
                seq: 2,
                final_text: Some("done".into()),
            },
        ],
    )
    .await
    .unwrap()
    .unwrap();
    let first = started.events.next().await.unwrap();
    let TurnEvent::ApprovalRequested { key, .. } = &first else {
        panic!("{first:?}")
    };
    let routable = RemoteRef::new(RepoName::parse(REPO).unwrap(), "a-1").unwrap();
    assert_eq!(key, &routable.to_string());
    assert!(matches!(
        started.events.next().await,
        Some(TurnEvent::Completed { .. })
    ));
    assert!(started.events.next().await.is_none());

    let decide = remote.decide_approval(key, true);
    let (decided, call) = tokio::join!(decide, serve_one(&b, &f.lease, |_| done()));
    decided.unwrap();
    assert_eq!(
        call.body,
        CallBody::DecideApproval {
            key: "a-1".into(),
            accept: true
        }
    );

    // A reset reaches every worker leasing a repository.
    let ((), call) = tokio::join!(remote.reset(), serve_one(&b, &f.lease, |_| done()));
    assert_eq!(call.body, CallBody::Reset);
}

#[tokio::test]
async fn a_thread_opens_in_the_home_of_the_worker_holding_its_repository_now() {
    let f = fixture().await;
    let remote = RemoteAgent::new(
        Arc::new(route(&f, "server-a")),
        PathBuf::from("/srv/ws"),
        Duration::from_secs(30),
    );
    let repo = crate::domain::RepoKey::parse("default:Acme/Widgets").unwrap();
    assert_eq!(remote.home_for(&repo).await, None, "the worker did not say");
    let (l, home) = (
        f.lease.lease_id.clone(),
        worker_leases::HomeId::parse("home-a").unwrap(),
    );
    f.store
        .write(move |c| worker_leases::set_home(c, &l, Some(&home)))
        .await
        .unwrap();
    assert_eq!(remote.home_for(&repo).await.as_deref(), Some("home-a"));
    // Nobody holds it once it is released: a thread's home is not known.
    let (w, l) = (
        workers::WorkerId::parse(&f.lease.worker_id).unwrap(),
        f.lease.lease_id.clone(),
    );
    f.store
        .write(move |c| worker_leases::release(c, &w, &l))
        .await
        .unwrap();
    assert_eq!(remote.home_for(&repo).await, None);
    assert!(worker_leases::HomeId::parse("a/b").is_err());
    assert!(worker_leases::HomeId::parse("").is_err());
}
