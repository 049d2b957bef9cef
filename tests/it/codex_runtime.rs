//! The production Codex runtime against the real `codex app-server` (pinned
//! 0.171.0, installed by scripts/test) and the project's fake model: turns,
//! history lookup by our client message id, failures, a dead process and
//! thread resumption. The client is driven directly, below any server, on the
//! same peers a `crate::testapp` server with `.codex()` gets (a [`FakeModel`]
//! and a fresh [`CodexHome`]); the whole server on them is `e2e.rs` and
//! `codex_paths.rs`.

use crate::codexhome::{codex_bin, CodexHome};
use crate::fakemodel::{FakeModel, Step};
use crate::support::{op_id, resource, wait_until_async};
use codex_bridge::agent::{Agent, ThreadRequest, TurnEvent, TurnLookup, TurnRequest};
use codex_bridge::codex::{developer_instructions, notice_channel, CodexAgent, CodexSettings};
use codex_bridge::domain::policy::{ApprovalPolicy, Sandbox};
use futures_util::StreamExt;
use std::time::Duration;

/// Where a runtime whose notices no test looks at sends them.
fn unaudited() -> codex_bridge::codex::NoticeSender {
    notice_channel().0
}

fn runtime(home: &CodexHome) -> CodexAgent {
    CodexAgent::new(
        CodexSettings {
            codex_bin: codex_bin(),
            codex_home: home.path(),
            developer_instructions: developer_instructions("ccbot"),
            thread_config: serde_json::Map::new(),
            env: Vec::new(),
            request_timeout: Duration::from_secs(30),
            nice: 0,
            workflow_tools: false,
        },
        unaudited(),
    )
}

async fn turn(
    rt: &CodexAgent,
    thread: &str,
    op: &str,
    text: &str,
    cwd: &std::path::Path,
) -> (String, Vec<TurnEvent>) {
    let started = rt
        .start_turn(TurnRequest {
            thread_id: thread.into(),
            operation_id: op_id(op),
            text: text.into(),
            cwd: cwd.into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::ReadOnly),
            attempt: None,
        })
        .await
        .unwrap();
    let events = tokio::time::timeout(Duration::from_secs(30), started.events.collect::<Vec<_>>())
        .await
        .unwrap();
    (started.turn_id, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_completes_and_is_found_in_history_by_its_operation_id() {
    let model = FakeModel::start();
    model.push(Step::message("The flaky test is a timer race."));
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let rt = runtime(&home);
    let thread = rt
        .ensure_thread(ThreadRequest {
            session_key: resource("default:acme/widgets:issue:1"),
            fork_from: None,
            thread_id: None,
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::ReadOnly),
            history: Vec::new(),
            home: None,
        })
        .await
        .unwrap();
    let (turn_id, events) = turn(
        &rt,
        &thread,
        "op-1",
        "why does TestRetryBackoff flake?",
        work.path(),
    )
    .await;
    match events.last() {
        Some(TurnEvent::Completed { final_text, .. }) => {
            assert_eq!(
                final_text.as_deref(),
                Some("The flaky test is a timer race.")
            )
        }
        other => panic!("turn did not complete: {other:?}"),
    }
    // The model saw the instruction and our developer instructions.
    let body = model.requests().pop().unwrap();
    assert!(crate::fakemodel::user_texts(&body)
        .iter()
        .any(|t| t.contains("TestRetryBackoff")));
    assert!(body.to_string().contains("UNTRUSTED DATA"));
    assert_eq!(
        rt.lookup_turn(&thread, op_id("op-1").as_str())
            .await
            .unwrap(),
        TurnLookup::Completed {
            turn_id,
            final_text: Some("The flaky test is a timer race.".into())
        }
    );
    assert_eq!(
        rt.lookup_turn(&thread, op_id("op-never-sent").as_str())
            .await
            .unwrap(),
        TurnLookup::Missing
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_model_call_fails_the_turn() {
    let model = FakeModel::start();
    model.push(Step::http_error(500));
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let rt = runtime(&home);
    let thread = rt
        .ensure_thread(ThreadRequest {
            session_key: resource("default:acme/widgets:issue:1"),
            fork_from: None,
            thread_id: None,
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::ReadOnly),
            history: Vec::new(),
            home: None,
        })
        .await
        .unwrap();
    let (_, events) = turn(&rt, &thread, "op-f", "hello", work.path()).await;
    assert!(
        matches!(events.last(), Some(TurnEvent::Failed { .. })),
        "{events:?}"
    );
    assert!(matches!(
        rt.lookup_turn(&thread, op_id("op-f").as_str())
            .await
            .unwrap(),
        TurnLookup::Failed { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_app_server_dies_the_thread_is_resumed_in_a_new_one() {
    let model = FakeModel::start();
    model.push(Step::message("first answer"));
    model.push(Step::message("second answer"));
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let rt = runtime(&home);
    let thread = rt
        .ensure_thread(ThreadRequest {
            session_key: resource("default:acme/widgets:issue:1"),
            fork_from: None,
            thread_id: None,
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::ReadOnly),
            history: Vec::new(),
            home: None,
        })
        .await
        .unwrap();
    let (_, first) = turn(&rt, &thread, "op-a", "turn one", work.path()).await;
    assert!(matches!(first.last(), Some(TurnEvent::Completed { .. })));
    rt.kill_process().await;
    // The stored thread id is used again, never replaced.
    let again = rt
        .ensure_thread(ThreadRequest {
            session_key: resource("default:acme/widgets:issue:1"),
            fork_from: None,
            thread_id: Some(thread.clone()),
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::ReadOnly),
            history: Vec::new(),
            home: None,
        })
        .await
        .unwrap();
    assert_eq!(again, thread);
    let (_, second) = turn(&rt, &thread, "op-b", "turn two", work.path()).await;
    match second.last() {
        Some(TurnEvent::Completed { final_text, .. }) => {
            assert_eq!(final_text.as_deref(), Some("second answer"))
        }
        other => panic!("{other:?}"),
    }
    // Both turns are in the thread's history, found by their operation ids.
    assert!(matches!(
        rt.lookup_turn(&thread, op_id("op-a").as_str())
            .await
            .unwrap(),
        TurnLookup::Completed { .. }
    ));
    assert!(matches!(
        rt.lookup_turn(&thread, op_id("op-b").as_str())
            .await
            .unwrap(),
        TurnLookup::Completed { .. }
    ));
    // The second model request carried the first turn's conversation.
    let body = model.requests().pop().unwrap();
    assert!(body.to_string().contains("first answer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_a_hanging_turn() {
    let model = FakeModel::start();
    model.push(Step::hang());
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let rt = runtime(&home);
    let thread = rt
        .ensure_thread(ThreadRequest {
            session_key: resource("default:acme/widgets:issue:1"),
            fork_from: None,
            thread_id: None,
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::ReadOnly),
            history: Vec::new(),
            home: None,
        })
        .await
        .unwrap();
    let started = rt
        .start_turn(TurnRequest {
            thread_id: thread.clone(),
            operation_id: op_id("op-h"),
            text: "hang".into(),
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::ReadOnly),
            attempt: None,
        })
        .await
        .unwrap();
    model.wait_for_requests(1, Duration::from_secs(20));
    rt.interrupt(&thread, &started.turn_id).await.unwrap();
    let events = tokio::time::timeout(Duration::from_secs(15), started.events.collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(
        matches!(events.last(), Some(TurnEvent::Interrupted { .. })),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_reaches_only_the_expected_active_turn() {
    let model = FakeModel::start();
    model.push(Step::hang());
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let rt = runtime(&home);
    let thread = rt
        .ensure_thread(ThreadRequest {
            session_key: resource("default:acme/widgets:issue:1"),
            fork_from: None,
            thread_id: None,
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::ReadOnly),
            history: Vec::new(),
            home: None,
        })
        .await
        .unwrap();
    let started = rt
        .start_turn(TurnRequest {
            thread_id: thread.clone(),
            operation_id: op_id("op-s"),
            text: "work".into(),
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::ReadOnly),
            attempt: None,
        })
        .await
        .unwrap();
    model.wait_for_requests(1, Duration::from_secs(20));
    let wrong = rt
        .steer(&thread, "not-the-turn", "also this", "op-steer-0")
        .await;
    assert!(wrong.is_err(), "{wrong:?}");
    let steered = rt
        .steer(&thread, &started.turn_id, "also this", "op-steer-1")
        .await
        .unwrap();
    assert_eq!(steered, started.turn_id);
    rt.interrupt(&thread, &started.turn_id).await.unwrap();
    let events = tokio::time::timeout(Duration::from_secs(15), started.events.collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(
        matches!(events.last(), Some(TurnEvent::Interrupted { .. })),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_approval_reaches_the_turn_and_the_decision_goes_back_to_codex() {
    let model = FakeModel::start();
    model.push(Step::shell(
        "echo approved-run > approved.txt && cat approved.txt",
    ));
    model.push(Step::message("ran it"));
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    // Under `untrusted`, Codex asks before running a command that writes.
    let rt = runtime(&home);
    let thread = rt
        .ensure_thread(ThreadRequest {
            session_key: resource("default:acme/widgets:issue:1"),
            fork_from: None,
            thread_id: None,
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(
                ApprovalPolicy::Untrusted,
                Sandbox::WorkspaceWrite,
            ),
            history: Vec::new(),
            home: None,
        })
        .await
        .unwrap();
    let mut started = rt
        .start_turn(TurnRequest {
            thread_id: thread.clone(),
            operation_id: op_id("op-ap"),
            text: "run it".into(),
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(
                ApprovalPolicy::Untrusted,
                Sandbox::WorkspaceWrite,
            ),
            attempt: None,
        })
        .await
        .unwrap();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ev = tokio::time::timeout_at(deadline, started.events.next())
            .await
            .unwrap()
            .expect("stream ended early");
        seen.push(ev.clone());
        match ev {
            TurnEvent::ApprovalRequested {
                key, kind, detail, ..
            } => {
                assert_eq!(kind, "command");
                assert!(
                    detail["command"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("approved-run"),
                    "{detail}"
                );
                rt.decide_approval(&key, true).await.unwrap();
                // Answered once: a second answer is refused.
                assert!(rt.decide_approval(&key, true).await.is_err());
            }
            TurnEvent::Completed { final_text, .. } => {
                assert_eq!(final_text.as_deref(), Some("ran it"));
                break;
            }
            TurnEvent::Failed { error, .. } => panic!("turn failed: {error}; events {seen:?}"),
            _ => {}
        }
    }
    assert!(
        seen.iter()
            .any(|e| matches!(e, TurnEvent::ApprovalRequested { .. })),
        "{seen:?}"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("approved.txt"))
            .unwrap()
            .trim(),
        "approved-run"
    );
}

/// A runtime whose threads get a Gitea MCP server run as `command args`
/// (its calls recorded in `log`).
pub fn with_mcp(
    home: &CodexHome,
    command: &str,
    args: Vec<String>,
    log: &std::path::Path,
) -> CodexAgent {
    use codex_bridge::codex::GiteaMcp;
    let mcp = GiteaMcp {
        command: command.into(),
        args,
        url_env: "GITEA_HOST".into(),
        url: "http://gitea.invalid".into(),
        token_env: "GITEA_ACCESS_TOKEN".into(),
    };
    let mut thread_config = mcp.thread_config();
    // The stub learns where to record its calls the same way (a plain variable).
    thread_config.insert(
        "mcp_servers.gitea.env".into(),
        serde_json::json!({ "GITEA_HOST": "http://gitea.invalid", "STUB_LOG": log }),
    );
    CodexAgent::new(
        CodexSettings {
            codex_bin: codex_bin(),
            codex_home: home.path(),
            developer_instructions: developer_instructions("ccbot"),
            thread_config,
            env: vec![(
                "GITEA_ACCESS_TOKEN".into(),
                secrecy::SecretString::from("mcp-token-0123456789".to_owned()),
            )],
            request_timeout: Duration::from_secs(30),
            nice: 0,
            workflow_tools: false,
        },
        unaudited(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gitea_mcp_server_is_ready_before_the_first_turn_and_gets_its_token_by_reference() {
    let model = FakeModel::start();
    model.push(Step::mcp("gitea", "create_issue_comment", serde_json::json!({"owner": "acme", "repo": "widgets", "index": 17, "body": "done <!-- codex-bridge task=t turn=u -->"})));
    model.push(Step::message("posted"));
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("mcp-calls.jsonl");
    let stub =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/gitea_stub.py");
    let rt = with_mcp(&home, "python3", vec![stub.display().to_string()], &log);
    let thread = rt
        .ensure_thread(ThreadRequest {
            session_key: resource("default:acme/widgets:issue:1"),
            fork_from: None,
            thread_id: None,
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::DangerFullAccess),
            history: Vec::new(),
            home: None,
        })
        .await
        .unwrap();
    let (_, events) = turn(&rt, &thread, "op-mcp", "answer in the issue", work.path()).await;
    assert!(
        matches!(events.last(), Some(TurnEvent::Completed { .. })),
        "{events:?}"
    );
    // The model was offered the Gitea tool on the very first request.
    let first = &model.requests()[0];
    assert!(
        crate::fakemodel::tool_names(first)
            .iter()
            .any(|t| t.contains("create_issue_comment")),
        "{:?}",
        crate::fakemodel::tool_names(first)
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    let call: serde_json::Value = serde_json::from_str(calls.lines().next().unwrap()).unwrap();
    assert_eq!(call["arguments"]["index"], 17);
    assert_eq!(call["host"], "http://gitea.invalid");
    assert_eq!(call["token_set"], true, "the token arrived by reference");
    assert!(!calls.contains("mcp-token-0123456789"));
}

/// The thread of a session whose Gitea MCP server is `command args`: what
/// `ensure_thread` answers, and how long it took.
async fn thread_with_mcp(
    command: &str,
    args: Vec<String>,
) -> (
    Result<String, codex_bridge::agent::AgentError>,
    std::time::Duration,
) {
    let model = FakeModel::start();
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let rt = with_mcp(&home, command, args, &work.path().join("x"));
    let began = std::time::Instant::now();
    let out = rt
        .ensure_thread(ThreadRequest {
            session_key: resource("default:acme/widgets:issue:1"),
            fork_from: None,
            thread_id: None,
            cwd: work.path().into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::DangerFullAccess),
            history: Vec::new(),
            home: None,
        })
        .await;
    (out, began.elapsed())
}

/// The same, with `sh -c <script>` as the server.
async fn thread_with_mcp_script(
    script: &str,
) -> (
    Result<String, codex_bridge::agent::AgentError>,
    std::time::Duration,
) {
    thread_with_mcp("/bin/sh", vec!["-c".into(), script.into()]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitea_mcp_server_that_does_not_start_refuses_the_thread() {
    let (out, _) = thread_with_mcp("/nonexistent/gitea-mcp", Vec::new()).await;
    assert!(
        matches!(out, Err(codex_bridge::agent::AgentError::Refused(_))),
        "{out:?}"
    );
}

/// A Gitea MCP server that exits right after it started: Codex reports the
/// failed start, and the thread is refused (the task then ends `failed`,
/// not retried), never started without the tools its turn needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitea_mcp_server_that_exits_at_once_refuses_the_thread() {
    let (out, _) = thread_with_mcp_script("exit 3").await;
    assert!(
        matches!(out, Err(codex_bridge::agent::AgentError::Refused(_))),
        "{out:?}"
    );
}

/// A Gitea MCP server that never answers `initialize` (it writes a line
/// that is not JSON-RPC, then waits): Codex gives up on it after its
/// startup limit, which the bridge sets below its own wait, so the thread
/// is refused (the task ends `failed`, not retried): never a race between
/// the two limits, never a thread without its tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitea_mcp_server_that_never_finishes_its_handshake_refuses_the_thread() {
    let (out, took) = thread_with_mcp_script("echo not-json-rpc; exec sleep 600").await;
    match out {
        Err(codex_bridge::agent::AgentError::Refused(why)) => {
            assert!(why.contains("timed out"), "{why}");
        }
        other => panic!("{other:?} after {took:?}"),
    }
}

/// An app-server without an optional method: the probe fails, the client's
/// notice of it ends up in the audit log as `capability_downgrade`, and
/// threads still start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_capability_probe_is_an_audited_downgrade_not_a_failure() {
    use codex_bridge::config::DatabaseUrl;
    let dir = tempfile::tempdir().unwrap();
    let store = crate::support::open_store(DatabaseUrl::Sqlite(dir.path().join("audit.db")));
    let old = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/codex/old_app_server.py");
    // Wired as the server wires it: the client's notices, recorded by the app.
    let (notices, notice_rx) = notice_channel();
    tokio::spawn(codex_bridge::app::record_notices(store.clone(), notice_rx));
    let rt = CodexAgent::new(
        CodexSettings {
            codex_bin: old,
            codex_home: dir.path().join("home"),
            developer_instructions: developer_instructions("ccbot"),
            thread_config: serde_json::Map::new(),
            env: Vec::new(),
            request_timeout: Duration::from_secs(10),
            nice: 0,
            workflow_tools: false,
        },
        notices,
    );
    let thread = rt
        .ensure_thread(ThreadRequest {
            session_key: resource("default:acme/widgets:issue:1"),
            fork_from: None,
            thread_id: None,
            cwd: dir.path().into(),
            terms: crate::support::trusted_terms(ApprovalPolicy::Never, Sandbox::ReadOnly),
            history: Vec::new(),
            home: None,
        })
        .await
        .unwrap();
    assert_eq!(thread, "thread-old-1");
    assert_eq!(rt.downgrades().len(), 1, "{:?}", rt.downgrades());
    assert!(rt.downgrades()[0].starts_with("collaborationMode/list"));
    let audited = || async {
        store
            .read(|c| {
                codex_bridge::store::audit::list(
                    c,
                    &codex_bridge::store::audit::AuditFilter {
                        limit: 100,
                        ..Default::default()
                    },
                )
            })
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.action == "capability_downgrade")
    };
    wait_until_async(
        "the capability_downgrade audited",
        Duration::from_secs(5),
        || async { audited().await.is_some() },
    )
    .await;
    let meta = serde_json::to_value(audited().await.unwrap()).unwrap();
    assert!(
        meta.to_string().contains("collaborationMode/list"),
        "{meta}"
    );
    rt.kill_process().await;
}
