use super::*;
use crate::domain::policy::{ApprovalPolicy, RepoPolicy, Sandbox};
use crate::domain::trust::{ExecutionPolicy, Subject};

fn terms() -> Terms {
    let repo = RepoPolicy {
        approval_policy: ApprovalPolicy::OnRequest,
        sandbox: Sandbox::WorkspaceWrite,
        turn_timeout: std::time::Duration::from_secs(60),
    };
    Terms {
        policy: ExecutionPolicy::decide(&repo, false, &Subject::Issue),
        base_instructions: Some("be brief".into()),
    }
}

fn round_trip<T>(value: &T) -> serde_json::Value
where
    T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let json = serde_json::to_value(value).unwrap();
    let back: T = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(&back, value);
    json
}

#[test]
fn every_call_round_trips_and_names_its_kind() {
    let bodies = vec![
        CallBody::EnsureThread {
            session_key: "acme/widgets#issue/1".into(),
            thread_id: None,
            fork_from: Some("t0".into()),
            cwd: "acme/widgets/issue-1".into(),
            terms: terms(),
            history: vec![Exchange {
                asked: "q".into(),
                answered: "a".into(),
            }],
            home: Some("home-1".into()),
        },
        CallBody::StartTurn {
            thread_id: "t1".into(),
            operation_id: "op-1".into(),
            text: "hello".into(),
            cwd: "x".into(),
            terms: terms(),
            attempt: Some(AttemptIdentity {
                task_id: "task-1".into(),
                attempt_id: "att-1".into(),
            }),
        },
        CallBody::StartReview {
            thread_id: "t1".into(),
            base_branch: "main".into(),
            cwd: "x".into(),
            terms: terms(),
            attempt: None,
        },
        CallBody::Interrupt {
            thread_id: "t1".into(),
            turn_id: "u1".into(),
        },
        CallBody::SteerTurn {
            thread_id: "t1".into(),
            expected_turn_id: "u1".into(),
            operation_id: "op-2".into(),
            text: "more".into(),
        },
        CallBody::RevertThread {
            thread_id: "t1".into(),
            before_turn_id: "u1".into(),
        },
        CallBody::DecideApproval {
            key: "k".into(),
            accept: true,
        },
        CallBody::AnswerTool {
            key: "k".into(),
            success: false,
            text: "no".into(),
        },
        CallBody::Reset,
        CallBody::PrepareSession {
            instance: "default".into(),
            owner: "acme".into(),
            name: "widgets".into(),
            clone_url: Some("http://gitea/acme/widgets.git".into()),
            checkout: Checkout::PullRequest {
                number: 3,
                head_ref: "pr-3".into(),
            },
            worktree: Worktree {
                kind: "pull".into(),
                number: 3,
                child: None,
            },
            recorded: Some(Tree {
                head: "h".into(),
                tree: "t".into(),
            }),
        },
        CallBody::Scratch {
            instance: "default".into(),
            owner: "acme".into(),
            name: "widgets".into(),
            worktree: Worktree {
                kind: "issue".into(),
                number: 1,
                child: Some(2),
            },
        },
        CallBody::LookupTurn {
            thread_id: "t1".into(),
            operation_id: "op-1".into(),
        },
        CallBody::BaseInstructions {
            instance: "default".into(),
            owner: "acme".into(),
            name: "widgets".into(),
            base: Some("main".into()),
        },
        CallBody::TreeState {
            instance: "default".into(),
            owner: "acme".into(),
            name: "widgets".into(),
            worktree: Worktree {
                kind: "pull".into(),
                number: 3,
                child: None,
            },
        },
        CallBody::RetireSession {
            instance: "default".into(),
            owner: "acme".into(),
            name: "widgets".into(),
            worktree: Worktree {
                kind: "issue".into(),
                number: 1,
                child: Some(2),
            },
        },
    ];
    for body in bodies {
        let call = Call {
            call_id: "c1".into(),
            lease_id: "l1".into(),
            body: body.clone(),
        };
        let json = round_trip(&call);
        assert_eq!(json["body"]["kind"], body.kind());
    }
    let json = round_trip(&CallBody::StartTurn {
        thread_id: "t1".into(),
        operation_id: "op-1".into(),
        text: "hi".into(),
        cwd: "x".into(),
        terms: terms(),
        attempt: Some(AttemptIdentity {
            task_id: "task-1".into(),
            attempt_id: "att-1".into(),
        }),
    });
    assert_eq!(json["operationId"], "op-1");
    assert_eq!(json["terms"]["policy"]["sandbox"], "workspace-write");
    assert_eq!(json["attempt"]["attemptId"], "att-1");
}

#[test]
fn messages_without_the_added_fields_still_parse() {
    // As a peer of the first protocol version sends them.
    let mut old = serde_json::to_value(CallBody::StartTurn {
        thread_id: "t1".into(),
        operation_id: "op-1".into(),
        text: "hi".into(),
        cwd: "x".into(),
        terms: terms(),
        attempt: None,
    })
    .unwrap();
    assert!(old.get("attempt").is_none());
    old.as_object_mut().unwrap().remove("attempt");
    let body: CallBody = serde_json::from_value(old).unwrap();
    assert!(matches!(body, CallBody::StartTurn { attempt: None, .. }));
    let answer: Answer = serde_json::from_value(serde_json::json!({
        "callId": "c1",
        "outcome": {"result": "ok", "value": {"type": "turn", "turnId": "u1"}},
    }))
    .unwrap();
    let mut outcome = answer.outcome;
    assert_eq!(
        outcome,
        Outcome::Ok {
            value: Value::Turn {
                turn_id: "u1".into(),
                worker_id: None
            }
        }
    );
    outcome.taken_by("wrk-1");
    assert!(matches!(
        outcome,
        Outcome::Ok { value: Value::Turn { worker_id: Some(ref w), .. } } if w == "wrk-1"
    ));
    let mut done = Outcome::Ok { value: Value::Done };
    done.taken_by("wrk-1");
    assert_eq!(done, Outcome::Ok { value: Value::Done });
}

#[test]
fn the_session_workspace_calls_read_as_a_peer_writes_them() {
    // Optional fields may be left out, as for every call.
    let body: CallBody = serde_json::from_value(serde_json::json!({
        "kind": "base_instructions",
        "instance": "default",
        "owner": "acme",
        "name": "widgets",
    }))
    .unwrap();
    assert_eq!(
        body,
        CallBody::BaseInstructions {
            instance: "default".into(),
            owner: "acme".into(),
            name: "widgets".into(),
            base: None,
        }
    );
    let body: CallBody = serde_json::from_value(serde_json::json!({
        "kind": "retire_session",
        "instance": "default",
        "owner": "acme",
        "name": "widgets",
        "worktree": {"kind": "issue", "number": 4, "child": null},
    }))
    .unwrap();
    assert_eq!(body.kind(), "retire_session");
    for (json, value) in [
        (
            serde_json::json!({"type": "instructions", "text": null}),
            Value::Instructions { text: None },
        ),
        (
            serde_json::json!({"type": "tree_state", "state": {"head": "h", "tree": "t"}}),
            Value::TreeState {
                state: Some(Tree {
                    head: "h".into(),
                    tree: "t".into(),
                }),
            },
        ),
        (
            serde_json::json!({"type": "retired", "removed": false, "kept": null}),
            Value::Retired {
                removed: false,
                kept: None,
            },
        ),
    ] {
        assert_eq!(serde_json::from_value::<Value>(json).unwrap(), value);
    }
}

#[test]
fn answers_events_and_leases_round_trip() {
    for outcome in [
        Outcome::Ok {
            value: Value::Thread {
                thread_id: "t".into(),
            },
        },
        Outcome::Ok {
            value: Value::Turn {
                turn_id: "u".into(),
                worker_id: Some("wrk-1".into()),
            },
        },
        Outcome::Ok { value: Value::Done },
        Outcome::Ok {
            value: Value::Lookup {
                lookup: Lookup::Failed {
                    turn_id: "u".into(),
                    error: "e".into(),
                    denial: Some(CapacityDenial::RateLimited),
                },
            },
        },
        Outcome::Unavailable {
            message: "m".into(),
        },
        Outcome::Uncertain {
            message: "m".into(),
        },
        Outcome::Refused {
            message: "m".into(),
        },
        Outcome::WorkspaceFailed {
            disposition: "needs_operator".into(),
            code: "workspace_dirty".into(),
            message: "m".into(),
        },
        Outcome::Ok {
            value: Value::Workspace {
                cwd: "worktrees/default/acme/widgets/issue-1".into(),
                head: None,
            },
        },
        Outcome::Ok {
            value: Value::Instructions {
                text: Some("be brief".into()),
            },
        },
        Outcome::Ok {
            value: Value::TreeState {
                state: Some(Tree {
                    head: "h".into(),
                    tree: "t".into(),
                }),
            },
        },
        Outcome::Ok {
            value: Value::Retired {
                removed: true,
                kept: Some("refs/codex-bridge/retired/issue-1".into()),
            },
        },
    ] {
        round_trip(&Answer {
            call_id: "c".into(),
            outcome,
        });
    }
    let events = vec![
        Event::Progress {
            seq: 1,
            kind: "k".into(),
        },
        Event::Delivered {
            seq: 2,
            client_id: Some("op".into()),
        },
        Event::ToolCall {
            seq: 3,
            phase: "started".into(),
            server: "gitea".into(),
            tool: "create_comment".into(),
            arguments: serde_json::json!({"body": "x"}),
            status: "inProgress".into(),
            error: None,
        },
        Event::ApprovalRequested {
            seq: 4,
            key: "a".into(),
            kind: "command".into(),
            detail: serde_json::json!({}),
        },
        Event::ToolRequested {
            seq: 5,
            key: "t".into(),
            tool: "complete".into(),
            arguments: serde_json::json!({}),
        },
        Event::Idle { seq: 6 },
        Event::Active { seq: 7 },
        Event::Other { seq: 8 },
        Event::Interrupted { seq: 9 },
        Event::Failed {
            seq: 10,
            error: "e".into(),
            denial: None,
        },
        Event::Completed {
            seq: 11,
            final_text: Some("done".into()),
        },
    ];
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq(), i as i64 + 1);
    }
    assert_eq!(
        events.iter().filter(|e| e.ends_turn()).count(),
        3,
        "completed, failed and interrupted end a turn"
    );
    let json = round_trip(&EventBatch {
        stream: "c1".into(),
        first: 0,
        events,
    });
    assert_eq!(json["events"][1]["clientId"], "op");
    // Transcript items and token counts cross as the transcript keeps them.
    let item = round_trip(&Event::Item {
        seq: 12,
        phase: ItemPhase::Completed,
        item_id: "i1".into(),
        status: crate::agent::transcript::ItemStatus::Completed,
        body: serde_json::json!({"kind": "agentMessage", "text": "hi", "truncated": false}),
    });
    assert_eq!(
        (&item["event"], &item["phase"], &item["itemId"]),
        (
            &serde_json::json!("item"),
            &serde_json::json!("completed"),
            &serde_json::json!("i1")
        )
    );
    let counts = crate::agent::transcript::TokenCounts {
        input: 1,
        cached_input: 2,
        output: 3,
        reasoning: 4,
        total: 10,
    };
    let usage = round_trip(&Event::TokenUsage {
        seq: 13,
        start: Default::default(),
        end: counts,
    });
    assert_eq!(usage["end"]["cachedInput"], 2);
    // A batch of an older worker, with `other` in their place, still parses.
    let old: EventBatch = serde_json::from_str(
        r#"{"stream":"c1","first":0,"events":[{"event":"other","seq":1},{"event":"completed","seq":2,"finalText":"done"}]}"#,
    )
    .unwrap();
    assert_eq!(old.events[0], Event::Other { seq: 1 });
    assert!(old.events[1].ends_turn());
    let lease = round_trip(&LeaseRequest {
        protocol: super::super::PROTOCOL_VERSION,
        repository: "acme/widgets".into(),
        codex_home: Some("home-1".into()),
    });
    assert_eq!(lease["codexHome"], "home-1");
    // A worker that does not say where its threads live still leases.
    let old: LeaseRequest =
        serde_json::from_str(r#"{"protocol":1,"repository":"acme/widgets"}"#).unwrap();
    assert_eq!(old.codex_home, None);
    round_trip(&LeaseGrant {
        lease_id: "l".into(),
        repository: "acme/widgets".into(),
        fence: 3,
        expires_at: "2026-01-01T00:00:00Z".into(),
        ttl_secs: 60,
    });
}
