use super::*;
use crate::agent::ThreadTerms;
use crate::domain::policy::{ApprovalPolicy, RepoPolicy, Sandbox};
use crate::domain::trust::{ExecutionPolicy, Subject};
use crate::domain::{OperationId, ResourceKey};
use crate::worker_api::{Event, Outcome};
use futures_util::StreamExt;
use proptest::prelude::*;

/// A registered worker's id, as the server names the one that took a call.
const WORKER: &str = "wrk-0123456789abcdef0123456789abcdef";

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

fn agent(hub: &CallHub, timeout: Duration) -> RemoteAgent {
    RemoteAgent::new(hub.clone(), PathBuf::from("/srv/ws"), timeout)
}

proptest! {
    #[test]
    fn a_reference_names_its_repository_and_id_back(
        owner in "[a-z0-9][a-z0-9._-]{0,10}",
        name in "[a-z0-9][a-z0-9._-]{0,10}",
        id in "[A-Za-z0-9:_-]{1,40}",
    ) {
        let repository = format!("{owner}/{name}");
        let r = make_ref(&repository, &id);
        prop_assert_eq!(parse_ref(&r), Some((repository.as_str(), id.as_str())));
    }
}

#[test]
fn foreign_references_and_folders_outside_the_root_are_refused() {
    for bad in [
        "",
        "thread-1",
        "remote:",
        "remote:acme:t",
        "remote:acme/w:",
        "remote:/w:t",
    ] {
        assert_eq!(parse_ref(bad), None, "{bad}");
    }
    let root = Path::new("/srv/ws");
    assert_eq!(
        relative_cwd(root, Path::new("/srv/ws/worktrees/default/acme/w/issue-1")).as_deref(),
        Some("worktrees/default/acme/w/issue-1")
    );
    for bad in ["/srv/ws", "/srv/other/x", "/srv/ws/../x"] {
        assert_eq!(relative_cwd(root, Path::new(bad)), None, "{bad}");
    }
}

/// A worker stand-in: answers each call `answer` says, under lease `l1`.
async fn serve_one(hub: &CallHub, repo: &str, outcome: impl Fn(&CallBody) -> Outcome) -> CallBody {
    loop {
        let calls = hub.take(repo, "l1", "w1");
        if let Some(call) = calls.into_iter().next() {
            hub.answer("l1", &call.call_id, outcome(&call.body))
                .unwrap();
            return call.body;
        }
        hub.wait(repo, Duration::from_secs(5)).await;
    }
}

#[tokio::test]
async fn calls_reach_the_worker_of_their_repository_and_answers_come_back() {
    let hub = CallHub::default();
    let remote = agent(&hub, Duration::from_secs(30));
    let key = ResourceKey::parse("default:Acme/Widgets:issue:7").unwrap();
    let ensure = remote.ensure_thread(ThreadRequest {
        session_key: key,
        thread_id: None,
        fork_from: None,
        cwd: PathBuf::from("/srv/ws/worktrees/default/acme/widgets/issue-7"),
        terms: terms(),
        history: vec![],
    });
    let (thread, body) = tokio::join!(
        ensure,
        serve_one(&hub, "acme/widgets", |_| Outcome::Ok {
            value: Value::Thread {
                thread_id: "t-1".into()
            }
        })
    );
    let thread = thread.unwrap();
    assert_eq!(thread, "remote:acme/widgets:t-1");
    assert!(
        matches!(&body, CallBody::EnsureThread { cwd, .. } if cwd == "worktrees/default/acme/widgets/issue-7"),
        "{body:?}"
    );

    let task = crate::domain::TaskId::mint();
    let start = remote.start_turn(TurnRequest {
        thread_id: thread.clone(),
        operation_id: OperationId::mint(),
        text: "hello".into(),
        cwd: PathBuf::from("/srv/ws/worktrees/default/acme/widgets/issue-7"),
        terms: terms(),
        attempt: Some(crate::agent::AttemptRef {
            task_id: task.clone(),
            attempt_id: "att-1".into(),
        }),
    });
    let (started, body) = tokio::join!(
        start,
        serve_one(&hub, "acme/widgets", |_| Outcome::Ok {
            value: Value::Turn {
                turn_id: "u-1".into(),
                worker_id: Some(WORKER.into()),
            }
        })
    );
    let CallBody::StartTurn {
        thread_id, attempt, ..
    } = &body
    else {
        panic!("{body:?}")
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
        Some(WORKER),
        "the worker that took the turn is named"
    );
    // The stream is the call's: its events come, with routable keys.
    let (stream, _) = hub_stream_of(&hub);
    hub.events(
        "l1",
        &stream,
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
    .unwrap();
    let first = started.events.next().await.unwrap();
    let TurnEvent::ApprovalRequested { key, .. } = &first else {
        panic!("{first:?}")
    };
    assert_eq!(key, "remote:acme/widgets:a-1");
    assert!(matches!(
        started.events.next().await,
        Some(TurnEvent::Completed { .. })
    ));
    assert!(started.events.next().await.is_none());

    let decide = remote.decide_approval(key, true);
    let (decided, body) = tokio::join!(
        decide,
        serve_one(&hub, "acme/widgets", |_| Outcome::Ok { value: Value::Done })
    );
    decided.unwrap();
    assert_eq!(
        body,
        CallBody::DecideApproval {
            key: "a-1".into(),
            accept: true
        }
    );
}

/// The stream id of the one turn call the hub has seen (the call ids are
/// the hub's own).
fn hub_stream_of(hub: &CallHub) -> (String, ()) {
    (hub.stream_ids().into_iter().next().unwrap(), ())
}

#[tokio::test]
async fn a_call_nobody_takes_is_unavailable_and_one_taken_but_unanswered_uncertain() {
    let hub = CallHub::default();
    let remote = agent(&hub, Duration::from_millis(50));
    let nobody = remote.lookup_turn("remote:acme/widgets:t-1", "op-1").await;
    assert!(
        matches!(nobody, Err(AgentError::Unavailable(_))),
        "{nobody:?}"
    );
    assert!(
        hub.take("acme/widgets", "l1", "w1").is_empty(),
        "given up calls leave the queue"
    );

    let silent = {
        let hub = hub.clone();
        async move {
            loop {
                if !hub.take("acme/widgets", "l1", "w1").is_empty() {
                    return;
                }
                hub.wait("acme/widgets", Duration::from_secs(5)).await;
            }
        }
    };
    let (taken, ()) = tokio::join!(remote.interrupt("remote:acme/widgets:t-1", "u-1"), silent);
    assert!(matches!(taken, Err(AgentError::Uncertain(_))), "{taken:?}");

    let foreign = remote.interrupt("thread-of-codex", "u-1").await;
    assert!(
        matches!(foreign, Err(AgentError::Refused(_))),
        "{foreign:?}"
    );
}

#[tokio::test]
async fn a_reset_reaches_every_worker_leasing_a_repository() {
    let hub = CallHub::default();
    let remote = agent(&hub, Duration::from_secs(30));
    // Nobody leases anything: nothing to reset, nothing waits.
    remote.reset().await;
    assert!(hub.take("acme/widgets", "l1", "w1").is_empty());
    let ((), body) = tokio::join!(
        remote.reset(),
        serve_one(&hub, "acme/widgets", |_| Outcome::Ok { value: Value::Done })
    );
    assert_eq!(body, CallBody::Reset);
    hub.end_lease("l1", "released");
    assert!(hub.leased_repositories().is_empty());
}
