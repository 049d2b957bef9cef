//! The router against a fake app-server peer on an in-memory pipe.

use super::super::notice::notice_channel;
use super::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The "app-server" side of a connection whose client end is routed.
struct Peer {
    router: Router,
    conn: Arc<RpcConnection>,
    notices: mpsc::Receiver<CodexNotice>,
    write: tokio::io::DuplexStream,
    lines: tokio::io::Lines<BufReader<tokio::io::DuplexStream>>,
}

impl Peer {
    fn start() -> Peer {
        let (ours_w, theirs_r) = tokio::io::duplex(1 << 16);
        let (theirs_w, ours_r) = tokio::io::duplex(1 << 16);
        let (conn, incoming) = RpcConnection::start(ours_w, ours_r);
        let (tx, notices) = notice_channel();
        let router = Router::new(tx);
        router.start(conn.clone(), incoming);
        Peer {
            router,
            conn,
            notices,
            write: theirs_w,
            lines: BufReader::new(theirs_r).lines(),
        }
    }

    async fn send(&mut self, msg: Value) {
        self.write
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn answer(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(5), self.lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        serde_json::from_str(&line).unwrap()
    }

    async fn notice(&mut self) -> CodexNotice {
        tokio::time::timeout(Duration::from_secs(5), self.notices.recv())
            .await
            .unwrap()
            .unwrap()
    }
}

/// Every server request codex-bridge does not route to a turn gets an
/// answer in its own shape (or a JSON-RPC error), and a notice.
#[tokio::test]
async fn every_unrouted_server_request_is_answered_and_noticed() {
    let mut peer = Peer::start();
    let approval = json!({"threadId": "t-none", "turnId": "u", "itemId": "i", "startedAtMs": 1});
    let elicitation = json!({"threadId": "t-none", "serverName": "gitea", "mode": "form", "message": "ok?", "requestedSchema": {"type": "object", "properties": {}}});
    let other = json!({"threadId": "t-none"});
    let tool_call = json!({"threadId": "t-none", "turnId": "u", "callId": "c", "tool": "complete_workflow", "arguments": {}});
    let cases = [
        (
            "item/commandExecution/requestApproval",
            &approval,
            json!({"decision": "decline"}),
        ),
        (
            "item/fileChange/requestApproval",
            &approval,
            json!({"decision": "decline"}),
        ),
        (
            "mcpServer/elicitation/request",
            &elicitation,
            json!({"action": "decline", "content": null}),
        ),
        (
            "execCommandApproval",
            &other,
            json!({"decision": {"denied": {"rejection": "codex-bridge answers only the v2 approval requests"}}}),
        ),
        (
            "applyPatchApproval",
            &other,
            json!({"decision": {"denied": {"rejection": "codex-bridge answers only the v2 approval requests"}}}),
        ),
        (
            "item/permissions/requestApproval",
            &other,
            json!({"permissions": {}, "scope": "turn"}),
        ),
        ("item/tool/requestUserInput", &other, json!({"answers": {}})),
        (
            "item/tool/call",
            &tool_call,
            json!({"contentItems": [{"type": "inputText", "text": "no turn of codex-bridge is waiting for this call"}], "success": false}),
        ),
        ("account/chatgptAuthTokens/refresh", &other, Value::Null),
        ("attestation/generate", &other, Value::Null),
        ("something/new", &other, Value::Null),
    ];
    for (i, (method, params, want)) in cases.iter().enumerate() {
        let id = 100 + i;
        peer.send(json!({"id": id, "method": method, "params": params}))
            .await;
        let answer = peer.answer().await;
        assert_eq!(answer["id"], json!(id), "{method}: {answer}");
        if want.is_null() {
            assert_eq!(answer["error"]["code"], json!(-32601), "{method}: {answer}");
        } else {
            assert_eq!(&answer["result"], want, "{method}: {answer}");
        }
        match peer.notice().await {
            CodexNotice::ServerRequestDeclined {
                method: m,
                thread_id,
                ..
            } => {
                assert_eq!(&m, method);
                assert_eq!(thread_id.as_deref(), Some("t-none"));
            }
            other => panic!("{method}: {other:?}"),
        }
    }
}

/// A call of the bridge's tools on a driven thread becomes the turn's
/// event; the answer goes back to that request, in the schema's shape.
#[tokio::test]
async fn a_tool_call_reaches_its_turn_and_is_answered_in_its_shape() {
    let mut peer = Peer::start();
    let mut events = peer.router.open_turn("t1");
    peer.send(json!({"id": 9, "method": "item/tool/call", "params": {
        "threadId": "t1", "turnId": "u1", "callId": "call-1", "namespace": "codex_bridge",
        "tool": "complete_workflow", "arguments": {"summary": "done"}}}))
        .await;
    let Some(TurnEvent::ToolRequested {
        key,
        tool,
        arguments,
        ..
    }) = events.recv().await
    else {
        panic!("no tool event");
    };
    assert_eq!(tool, "complete_workflow");
    assert_eq!(arguments, json!({"summary": "done"}));
    let id = peer.router.take_tool_call(&key).expect("pending");
    assert!(peer.router.take_tool_call(&key).is_none(), "taken once");
    let answer = crate::codex::protocol::DynamicToolCallResponse::text(true, "ok".into());
    peer.conn.respond(&id, &answer).unwrap();
    let sent = peer.answer().await;
    assert_eq!(sent["id"], json!(9), "{sent}");
    assert_eq!(
        sent["result"],
        json!({"contentItems": [{"type": "inputText", "text": "ok"}], "success": true})
    );
}

/// An approval that cannot be read is declined all the same, and both
/// the unreadable message and the refusal are noticed.
#[tokio::test]
async fn an_unreadable_approval_is_declined_and_noticed() {
    let mut peer = Peer::start();
    let _events = peer.router.open_turn("t1");
    peer.send(json!({"id": 7, "method": "item/commandExecution/requestApproval", "params": {"threadId": "t1"}}))
        .await;
    let answer = peer.answer().await;
    assert_eq!(answer["result"], json!({"decision": "decline"}));
    assert!(matches!(
        peer.notice().await,
        CodexNotice::UnreadableMessage { method, .. } if method == "item/commandExecution/requestApproval"
    ));
    assert!(matches!(
        peer.notice().await,
        CodexNotice::ServerRequestDeclined { .. }
    ));
}

/// A turn's notifications become its events in order; an unreadable
/// `turn/completed` still ends the turn (as failed) and is noticed.
#[tokio::test]
async fn notifications_become_turn_events_and_an_unreadable_end_still_ends_the_turn() {
    let mut peer = Peer::start();
    let mut events = peer.router.open_turn("t1");
    for msg in [
        json!({"method": "turn/started", "params": {"threadId": "t1", "turn": {}}}),
        json!({"method": "item/completed", "params": {"threadId": "t1", "item": {"type": "userMessage", "id": "u", "clientId": "op-1", "content": []}}}),
        json!({"method": "item/started", "params": {"threadId": "t1", "item": {"type": "mcpToolCall", "id": "c", "server": "gitea", "tool": "add_comment", "status": "inProgress", "arguments": {"issue_number": 3}}}}),
        json!({"method": "item/completed", "params": {"threadId": "t1", "item": {"type": "mcpToolCall", "id": "c", "server": "gitea", "tool": "add_comment", "status": "failed", "arguments": {}, "result": {"content": [{"type": "text", "text": "404 not found"}]}}}}),
        json!({"method": "item/completed", "params": {"threadId": "t1", "item": {"type": "reasoning", "id": "r"}}}),
        json!({"method": "turn/completed", "params": {"threadId": "t1", "turn": {"id": "turn-1"}}}),
    ] {
        peer.send(msg).await;
    }
    let mut seen = Vec::new();
    let mut items = Vec::new();
    while let Some(e) = events.recv().await {
        match e {
            TurnEvent::Item { seq, phase, item } => items.push((seq, phase, item)),
            e => seen.push(e),
        }
    }
    assert_eq!(seen.len(), 5, "{seen:?}");
    // Each item notification also reports the item, first, with its seq.
    let items: Vec<_> = items
        .iter()
        .map(|(seq, phase, i)| (*seq, *phase, i.item_id.as_str(), i.body.kind()))
        .collect();
    assert_eq!(
        items,
        [
            (2, ItemPhase::Completed, "u", "userMessage"),
            (3, ItemPhase::Started, "c", "mcpToolCall"),
            (4, ItemPhase::Completed, "c", "mcpToolCall"),
            (5, ItemPhase::Completed, "r", "reasoning"),
        ]
    );
    assert_eq!(
        seen[0],
        TurnEvent::Delivered {
            seq: 2,
            client_id: Some("op-1".into())
        }
    );
    assert!(
        matches!(&seen[1], TurnEvent::ToolCall { phase, error: None, .. } if phase == "started")
    );
    assert!(
        matches!(&seen[2], TurnEvent::ToolCall { status, error: Some(e), .. } if status == "failed" && e == "404 not found"),
        "{:?}",
        seen[2]
    );
    assert_eq!(
        seen[3],
        TurnEvent::Progress {
            seq: 5,
            kind: "reasoning".into()
        }
    );
    assert!(
        matches!(&seen[4], TurnEvent::Failed { seq: 6, error, .. } if error.contains("turn/completed")),
        "{:?}",
        seen[4]
    );
    assert!(matches!(
        peer.notice().await,
        CodexNotice::UnreadableMessage { method, .. } if method == "turn/completed"
    ));
}

/// A turn's token usage: the thread's totals before its first model
/// request (total less that request's share) and after each one.
#[tokio::test]
async fn token_usage_reports_the_threads_totals_before_the_turn_and_now() {
    let mut peer = Peer::start();
    let mut events = peer.router.open_turn("t1");
    let usage = |total: i64, last: i64| {
        let b = |n: i64| {
            json!({"totalTokens": n, "inputTokens": n - n / 3, "cachedInputTokens": 0,
            "outputTokens": n / 3, "reasoningOutputTokens": 0})
        };
        json!({"method": "thread/tokenUsage/updated", "params": {"threadId": "t1", "turnId": "u1",
            "tokenUsage": {"total": b(total), "last": b(last), "modelContextWindow": null}}})
    };
    // The thread had used 30 tokens before this turn; its two requests use 15 and 6.
    peer.send(usage(45, 15)).await;
    peer.send(usage(51, 6)).await;
    peer.send(json!({"method": "turn/completed", "params": {"threadId": "t1", "turn": {"id": "u1", "status": "interrupted"}}}))
        .await;
    let mut seen = Vec::new();
    while let Some(e) = events.recv().await {
        seen.push(e);
    }
    let totals: Vec<_> = seen
        .iter()
        .filter_map(|e| match e {
            TurnEvent::TokenUsage { seq, start, end } => Some((*seq, start.total, end.total)),
            _ => None,
        })
        .collect();
    assert_eq!(totals, [(1, 30, 45), (2, 30, 51)]);
    assert!(matches!(
        seen.last(),
        Some(TurnEvent::Interrupted { seq: 3 })
    ));
}

fn error(thread: &str, will_retry: bool, message: &str) -> Value {
    json!({"method": "error", "params": {"threadId": thread, "turnId": "u1",
        "willRetry": will_retry, "error": {"message": message}}})
}

/// Codex gave up on a turn (an `error` it will not retry) and sent no
/// `turn/completed`, as a `review/start` that fails before its review begins
/// does: the turn ends as failed with Codex's error instead of waiting for
/// its deadline.
#[tokio::test(start_paused = true)]
async fn a_turn_codex_gave_up_on_without_completing_it_ends_failed() {
    let mut peer = Peer::start();
    let mut events = peer.router.open_turn("t1");
    peer.send(error("t1", false, "the review could not start"))
        .await;
    // Time is paused: this waits out the settle, not a minute.
    let ended = tokio::time::timeout(Duration::from_secs(60), events.recv())
        .await
        .ok()
        .flatten();
    assert!(
        matches!(&ended, Some(TurnEvent::Failed { error, .. }) if error == "the review could not start"),
        "{ended:?}"
    );
    assert!(events.recv().await.is_none(), "the turn's events end");
}

/// An error Codex retries ends nothing; one it gave up on whose
/// `turn/completed` follows ends that turn once, and its timer leaves the
/// thread's next turn alone.
#[tokio::test(start_paused = true)]
async fn errors_codex_retries_or_completes_end_the_turn_only_through_turn_completed() {
    let mut peer = Peer::start();
    let mut first = peer.router.open_turn("t1");
    peer.send(error("t1", true, "reconnecting")).await;
    // Nor does one that does not say whether Codex retries.
    peer.send(
        json!({"method": "error", "params": {"threadId": "t1", "turnId": "u1",
        "error": {"message": "unsaid"}}}),
    )
    .await;
    tokio::time::sleep(GIVEN_UP_SETTLE * 3).await;
    assert!(first.try_recv().is_err(), "a retried error ends nothing");
    peer.send(error("t1", false, "the stream broke")).await;
    peer.send(
        json!({"method": "turn/completed", "params": {"threadId": "t1",
        "turn": {"id": "u1", "status": "failed"}}}),
    )
    .await;
    let ended = first.recv().await;
    assert!(
        matches!(&ended, Some(TurnEvent::Failed { error, .. }) if error == "the stream broke"),
        "{ended:?}"
    );
    assert!(first.recv().await.is_none());
    let mut next = peer.router.open_turn("t1");
    tokio::time::sleep(GIVEN_UP_SETTLE * 3).await;
    assert!(
        next.try_recv().is_err(),
        "the next turn is not ended by the last one's error"
    );
}
