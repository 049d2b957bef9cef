//! A thread resumed in a new app-server process gets the setup of a new one:
//! the Gitea MCP server (its tools in the model's request), the developer
//! instructions, and the repository's approval policy and sandbox. On the real
//! `codex app-server` and the fake model; the app-server is ended between the
//! turns as a crash or a bridge restart would end it. The client is driven
//! directly, below any server, as in `codex_runtime.rs`.

use crate::codex_runtime::with_mcp;
use crate::codexhome::CodexHome;
use crate::fakemodel::{tool_names, FakeModel, Step};
use crate::support::{op_id, resource, trusted_terms};
use codex_bridge::agent::{Agent, ThreadRequest, ThreadTerms, TurnEvent, TurnRequest};
use codex_bridge::codex::CodexAgent;
use codex_bridge::domain::policy::{ApprovalPolicy, Sandbox};
use futures_util::StreamExt;
use std::path::Path;
use std::time::Duration;

/// The runtime with the stub Gitea MCP server (tool `create_issue_comment`),
/// one second slow to start, as a real one can be on a busy machine: Codex
/// does not wait for it, so a turn started before it is ready reaches the
/// model without its tools.
fn runtime(home: &CodexHome, work: &Path) -> CodexAgent {
    let stub = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/gitea_stub.py");
    with_mcp(
        home,
        "sh",
        vec![
            "-c".into(),
            format!("sleep 1; exec python3 '{}'", stub.display()),
        ],
        &work.join("mcp-calls.jsonl"),
    )
}

fn thread_request(
    thread_id: Option<String>,
    cwd: &Path,
    policy: ApprovalPolicy,
    sandbox: Sandbox,
) -> ThreadRequest {
    ThreadRequest {
        session_key: resource("default:acme/widgets:issue:1"),
        fork_from: None,
        thread_id,
        cwd: cwd.into(),
        terms: trusted_terms(policy, sandbox),
        history: Vec::new(),
        home: None,
    }
}

/// Runs one turn to its end, declining every approval it asks for; its events.
async fn run_turn(
    rt: &CodexAgent,
    thread: &str,
    op: &str,
    cwd: &Path,
    terms: ThreadTerms,
) -> Vec<TurnEvent> {
    let mut started = rt
        .start_turn(TurnRequest {
            thread_id: thread.into(),
            operation_id: op_id(op),
            text: "touch the file, then answer".into(),
            cwd: cwd.into(),
            terms,
            attempt: None,
        })
        .await
        .unwrap();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Some(ev) = tokio::time::timeout_at(deadline, started.events.next())
        .await
        .unwrap_or_else(|_| panic!("turn {op} did not end; events so far {seen:?}"))
    {
        if let TurnEvent::ApprovalRequested { key, .. } = &ev {
            rt.decide_approval(key, false).await.unwrap();
        }
        seen.push(ev);
    }
    seen
}

fn asked_for_approval(events: &[TurnEvent]) -> bool {
    events
        .iter()
        .any(|e| matches!(e, TurnEvent::ApprovalRequested { kind, .. } if kind == "command"))
}

/// The first model request of the turn started after `before` requests: it
/// must already offer the Gitea tool (Codex does not wait for MCP servers).
fn first_request_after(model: &FakeModel, before: usize) -> serde_json::Value {
    model.wait_for_requests(before + 1, Duration::from_secs(30))[before].clone()
}

/// The app-server restarts between two turns, and the repository's policy was
/// tightened meanwhile (from `never` + `danger-full-access` to `untrusted` +
/// `read-only`): `ensure_thread` with the stored id resumes the thread with
/// the whole setup, so the next turn has the Gitea tools and runs under the
/// policy configured now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_resumed_after_a_restart_gets_the_gitea_tools_and_the_current_policy() {
    let model = FakeModel::start();
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let rt = runtime(&home, work.path());
    let thread = rt
        .ensure_thread(thread_request(
            None,
            work.path(),
            ApprovalPolicy::Never,
            Sandbox::DangerFullAccess,
        ))
        .await
        .unwrap();
    model.push(Step::message("first answer"));
    let first = run_turn(
        &rt,
        &thread,
        "op-1",
        work.path(),
        trusted_terms(ApprovalPolicy::Never, Sandbox::DangerFullAccess),
    )
    .await;
    assert!(
        matches!(first.last(), Some(TurnEvent::Completed { .. })),
        "{first:?}"
    );

    rt.kill_process().await;
    let again = rt
        .ensure_thread(thread_request(
            Some(thread.clone()),
            work.path(),
            ApprovalPolicy::Untrusted,
            Sandbox::ReadOnly,
        ))
        .await
        .unwrap();
    assert_eq!(again, thread, "the stored thread id is used again");
    let before = model.requests().len();
    model.push(Step::shell("touch resumed.txt"));
    model.push(Step::message("I left the file alone."));
    let second = run_turn(
        &rt,
        &thread,
        "op-2",
        work.path(),
        trusted_terms(ApprovalPolicy::Untrusted, Sandbox::ReadOnly),
    )
    .await;

    let tools = tool_names(&first_request_after(&model, before));
    assert!(
        tools.iter().any(|t| t.contains("create_issue_comment")),
        "the resumed thread's turn reached the model without the Gitea tools: {tools:?}"
    );
    assert!(
        asked_for_approval(&second),
        "under `untrusted` the command needs an approval: {second:?}"
    );
    assert!(
        !work.path().join("resumed.txt").exists(),
        "the declined command ran: the resumed thread kept the old policy"
    );
    assert!(
        matches!(second.last(), Some(TurnEvent::Completed { .. })),
        "{second:?}"
    );
}

/// A turn started on a thread this process never opened (the app-server
/// restarted between the thread and the turn): the thread is resumed with the
/// Gitea MCP server and the terms the turn carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_on_a_thread_not_loaded_resumes_it_with_the_gitea_tools() {
    let model = FakeModel::start();
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let rt = runtime(&home, work.path());
    let thread = rt
        .ensure_thread(thread_request(
            None,
            work.path(),
            ApprovalPolicy::Untrusted,
            Sandbox::WorkspaceWrite,
        ))
        .await
        .unwrap();
    model.push(Step::message("first answer"));
    let first = run_turn(
        &rt,
        &thread,
        "op-1",
        work.path(),
        trusted_terms(ApprovalPolicy::Untrusted, Sandbox::WorkspaceWrite),
    )
    .await;
    assert!(
        matches!(first.last(), Some(TurnEvent::Completed { .. })),
        "{first:?}"
    );

    // A new runtime, as after a bridge restart: nothing of the thread in memory.
    rt.kill_process().await;
    let rt = runtime(&home, work.path());
    let before = model.requests().len();
    model.push(Step::shell("touch retried.txt"));
    model.push(Step::message("I left the file alone."));
    let second = run_turn(
        &rt,
        &thread,
        "op-2",
        work.path(),
        trusted_terms(ApprovalPolicy::Untrusted, Sandbox::WorkspaceWrite),
    )
    .await;

    let tools = tool_names(&first_request_after(&model, before));
    assert!(
        tools.iter().any(|t| t.contains("create_issue_comment")),
        "the resumed thread's turn reached the model without the Gitea tools: {tools:?}"
    );
    assert!(
        asked_for_approval(&second),
        "the thread's `untrusted` policy was lost: {second:?}"
    );
    assert!(!work.path().join("retried.txt").exists());
}
