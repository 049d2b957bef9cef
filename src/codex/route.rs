//! What the app-server sends us: notifications routed to the turn running on
//! their thread (or to the MCP start-up status), and an explicit answer to
//! every request it makes of us, so no turn can hang on one. What the router
//! cannot read or will not grant is logged and reported as a [`CodexNotice`].

use super::account::AccountEvents;
use super::notice::{CodexNotice, NoticeSender};
use super::protocol::{
    ApprovalKind, ApprovalRequest, DynamicToolCallParams, McpServerStartupState, McpToolCallItem,
    Refusal, RequestId, ServerNotification, ThreadItem, ThreadScoped, TurnStatus, Unreadable,
    DYNAMIC_TOOL_CALL,
};
use super::rpc::{Incoming, RpcConnection};
use super::transcript::{token_counts, transcript_item};
use crate::agent::transcript::{ItemPhase, TokenCounts};
use crate::agent::{AgentError, TurnEvent};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The turn running on a thread, and what its events need.
struct Sink {
    tx: mpsc::UnboundedSender<TurnEvent>,
    seq: i64,
    last_agent_text: Option<String>,
    last_error: Option<String>,
    /// The thread's token totals before the turn's first model request.
    tokens_before: Option<TokenCounts>,
}

/// Start-up status of a thread's MCP server, and why it failed.
type StartupStatus = (McpServerStartupState, Option<String>);

/// The router's shared state: the turns by thread, the approvals waiting for
/// a decision, the MCP servers' start-up status. Cloning shares it; it
/// outlives app-server processes (a new process gets a new routing task).
#[derive(Clone)]
pub(super) struct Router {
    sinks: Arc<Mutex<HashMap<String, Sink>>>,
    /// Approval requests waiting for a decision: key → (request id, kind).
    approvals: Arc<Mutex<HashMap<String, (RequestId, ApprovalKind)>>>,
    /// Calls of the bridge's tools waiting for their answer: key → request id.
    tool_calls: Arc<Mutex<HashMap<String, RequestId>>>,
    /// (thread, server) → start-up status.
    mcp: Arc<Mutex<HashMap<(String, String), StartupStatus>>>,
    mcp_changed: Arc<tokio::sync::Notify>,
    /// Sign-ins and account changes (`account.rs`).
    account: Arc<AccountEvents>,
    notices: NoticeSender,
}

impl Router {
    pub(super) fn new(notices: NoticeSender) -> Router {
        Router {
            sinks: Arc::default(),
            approvals: Arc::default(),
            tool_calls: Arc::default(),
            mcp: Arc::default(),
            mcp_changed: Arc::default(),
            account: Arc::default(),
            notices,
        }
    }

    pub(super) fn account(&self) -> &AccountEvents {
        &self.account
    }

    pub(super) fn notices(&self) -> &NoticeSender {
        &self.notices
    }

    /// Routes what `conn` receives until its connection closes.
    pub(super) fn start(
        &self,
        conn: Arc<RpcConnection>,
        incoming: mpsc::UnboundedReceiver<Incoming>,
    ) {
        tokio::spawn(self.clone().run(conn, incoming));
    }

    /// The events of the turn about to start on `thread`, from now on.
    pub(super) fn open_turn(&self, thread: &str) -> mpsc::UnboundedReceiver<TurnEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut sinks) = self.sinks.lock() {
            sinks.insert(
                thread.to_owned(),
                Sink {
                    tx,
                    seq: 0,
                    last_agent_text: None,
                    last_error: None,
                    tokens_before: None,
                },
            );
        }
        rx
    }

    /// Stops routing to `thread`'s turn (it was never admitted).
    pub(super) fn close_turn(&self, thread: &str) {
        if let Ok(mut sinks) = self.sinks.lock() {
            sinks.remove(thread);
        }
    }

    /// Takes the approval `key` out of the waiting ones.
    pub(super) fn take_approval(&self, key: &str) -> Option<(RequestId, ApprovalKind)> {
        self.approvals.lock().ok().and_then(|mut p| p.remove(key))
    }

    /// Takes the tool call `key` out of the waiting ones.
    pub(super) fn take_tool_call(&self, key: &str) -> Option<RequestId> {
        self.tool_calls.lock().ok().and_then(|mut p| p.remove(key))
    }

    /// Forgets what an earlier process reported of `thread`'s MCP servers:
    /// it says nothing about the ones a resume starts.
    pub(super) fn forget_mcp(&self, thread: &str) {
        if let Ok(mut m) = self.mcp.lock() {
            m.retain(|(t, _), _| t != thread);
        }
    }

    /// Waits until `thread`'s MCP server `name` is ready. A server that
    /// fails to start is refused (retrying cannot fix a wrong command).
    pub(super) async fn wait_for_mcp(
        &self,
        thread: &str,
        name: &str,
        within: Duration,
    ) -> Result<(), AgentError> {
        let key = (thread.to_owned(), name.to_owned());
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let changed = self.mcp_changed.notified();
            let current = self.mcp.lock().ok().and_then(|m| m.get(&key).cloned());
            match current {
                Some((McpServerStartupState::Ready, _)) => return Ok(()),
                Some((McpServerStartupState::Failed, reason)) => {
                    return Err(AgentError::Refused(format!(
                        "the {name} MCP server failed to start: {} (check gitea_mcp_command and gitea_mcp_args)",
                        reason.unwrap_or_else(|| "no reason given".into())
                    )))
                }
                _ => {}
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(AgentError::Unavailable(format!(
                    "the {name} MCP server did not report ready within {} s",
                    within.as_secs()
                )));
            }
        }
    }

    async fn run(self, conn: Arc<RpcConnection>, mut incoming: mpsc::UnboundedReceiver<Incoming>) {
        while let Some(msg) = incoming.recv().await {
            match msg {
                Incoming::Notification { method, params } => self.notification(&method, params),
                Incoming::Request { id, method, params } => {
                    self.request(&conn, id, &method, params)
                }
                Incoming::Closed => {
                    // The streams end without an end event: the session actors
                    // see it and recover by history against the next process.
                    if let Ok(mut sinks) = self.sinks.lock() {
                        sinks.clear();
                    }
                    self.account.connection_closed();
                    break;
                }
            }
        }
    }

    fn unreadable(&self, e: Unreadable) {
        tracing::warn!(method = %e.method, error = %e.error, "could not read a message of the app-server; skipped");
        self.notices.send(CodexNotice::UnreadableMessage {
            method: e.method,
            error: e.error,
        });
    }

    fn notification(&self, method: &str, params: Value) {
        let thread_id = ThreadScoped::of(&params);
        let notification = match ServerNotification::parse(method, params) {
            Ok(n) => n,
            Err(e) => {
                // A turn whose end cannot be read still ends, or it would
                // wait forever for an event already sent.
                if method == ServerNotification::TURN_COMPLETED {
                    if let Some(thread) = &thread_id {
                        self.end_turn(thread, |seq, _| TurnEvent::Failed {
                            seq,
                            error: e.to_string(),
                        });
                    }
                }
                self.unreadable(e);
                return;
            }
        };
        match notification {
            ServerNotification::McpServerStatusUpdated(n) => {
                let Some(thread) = n.thread_id else {
                    return;
                };
                let reason = n.error.or(n.failure_reason);
                if let Ok(mut m) = self.mcp.lock() {
                    m.insert((thread, n.name), (n.status, reason));
                }
                self.mcp_changed.notify_waiters();
            }
            ServerNotification::ItemStarted(n) => {
                self.on_turn(&n.thread_id, |seq, _| {
                    let mut events = vec![TurnEvent::Item {
                        seq,
                        phase: ItemPhase::Started,
                        item: transcript_item(&n.item),
                    }];
                    if let ThreadItem::McpToolCall(call) = n.item {
                        events.push(tool_call(seq, "started", call));
                    }
                    events
                });
            }
            ServerNotification::ItemCompleted(n) => {
                self.on_turn(&n.thread_id, |seq, sink| {
                    let item = TurnEvent::Item {
                        seq,
                        phase: ItemPhase::Completed,
                        item: transcript_item(&n.item),
                    };
                    let event = match n.item {
                        ThreadItem::McpToolCall(call) => tool_call(seq, "completed", call),
                        ThreadItem::UserMessage(m) => TurnEvent::Delivered {
                            seq,
                            client_id: m.client_id,
                        },
                        ThreadItem::AgentMessage(m) => {
                            sink.last_agent_text = Some(m.text);
                            TurnEvent::Progress {
                                seq,
                                kind: "agentMessage".into(),
                            }
                        }
                        ThreadItem::ExitedReviewMode(r) => {
                            sink.last_agent_text = Some(r.review);
                            TurnEvent::Progress {
                                seq,
                                kind: "exitedReviewMode".into(),
                            }
                        }
                        other => TurnEvent::Progress {
                            seq,
                            kind: other.kind().to_owned(),
                        },
                    };
                    vec![item, event]
                });
            }
            ServerNotification::TokenUsageUpdated(n) => {
                self.on_turn(&n.thread_id, |seq, sink| {
                    let usage = n.token_usage;
                    let end = token_counts(&usage.total);
                    // Before the first request of this turn: its total less
                    // that request's share. Kept, so later updates agree.
                    let start = *sink
                        .tokens_before
                        .get_or_insert_with(|| end.since(token_counts(&usage.last)));
                    vec![TurnEvent::TokenUsage { seq, start, end }]
                });
            }
            ServerNotification::Error(n) => {
                self.on_turn(&n.thread_id, |_, sink| {
                    sink.last_error = Some(n.error.message);
                    Vec::new()
                });
            }
            ServerNotification::TurnCompleted(n) => {
                let turn = n.turn;
                self.end_turn(&n.thread_id, |seq, sink| match turn.status {
                    TurnStatus::Completed => TurnEvent::Completed {
                        seq,
                        final_text: turn
                            .last_agent_text()
                            .or_else(|| sink.last_agent_text.clone()),
                    },
                    TurnStatus::Interrupted => TurnEvent::Interrupted { seq },
                    status => TurnEvent::Failed {
                        seq,
                        error: turn
                            .error
                            .map(|e| e.message)
                            .or_else(|| sink.last_error.clone())
                            .unwrap_or_else(|| format!("turn ended {}", status.as_str())),
                    },
                });
            }
            ServerNotification::AccountLoginCompleted(n) => {
                if n.success {
                    tracing::info!(login.id = ?n.login_id, "codex sign-in completed");
                } else {
                    tracing::warn!(login.id = ?n.login_id, error = ?n.error, "codex sign-in failed");
                }
                self.account.completed(&n);
                self.notices.send(CodexNotice::LoginCompleted {
                    login_id: n.login_id,
                    success: n.success,
                    error: n.error,
                });
            }
            ServerNotification::AccountUpdated => self.account.updated(),
            ServerNotification::Unused { method, thread_id } => {
                tracing::trace!(%method, "app-server notification codex-bridge does not use");
                // Counted all the same: `seq` orders everything seen on the turn.
                if let Some(thread) = thread_id {
                    self.on_turn(&thread, |_, _| Vec::new());
                }
            }
        }
    }

    /// Gives the turn on `thread` (if one is routed) its next sequence
    /// number, and sends the events `f` makes of it.
    fn on_turn(&self, thread: &str, f: impl FnOnce(i64, &mut Sink) -> Vec<TurnEvent>) {
        let Ok(mut sinks) = self.sinks.lock() else {
            return;
        };
        let Some(sink) = sinks.get_mut(thread) else {
            return;
        };
        sink.seq += 1;
        for event in f(sink.seq, sink) {
            let _ = sink.tx.send(event);
        }
    }

    /// Like [`Router::on_turn`], with the turn's last event: the thread's
    /// events stop being routed.
    fn end_turn(&self, thread: &str, f: impl FnOnce(i64, &mut Sink) -> TurnEvent) {
        let Ok(mut sinks) = self.sinks.lock() else {
            return;
        };
        let Some(mut sink) = sinks.remove(thread) else {
            return;
        };
        sink.seq += 1;
        let event = f(sink.seq, &mut sink);
        let _ = sink.tx.send(event);
    }

    /// An approval for a turn someone is driving waits for an operator's
    /// decision; anything else gets an explicit answer now, so no turn can
    /// hang on it.
    fn request(&self, conn: &RpcConnection, id: RequestId, method: &str, params: Value) {
        let thread_id = ThreadScoped::of(&params);
        if method == DYNAMIC_TOOL_CALL {
            match DynamicToolCallParams::parse(params.clone()) {
                Ok(call) => {
                    if self.route_tool_call(&id, call) {
                        return;
                    }
                }
                Err(e) => self.unreadable(e),
            }
        }
        let routed = match ApprovalRequest::parse(method, params) {
            Some(Ok(approval)) => self.route_approval(&id, approval),
            Some(Err(e)) => {
                self.unreadable(e);
                false
            }
            None => false,
        };
        if routed {
            return;
        }
        let refusal = Refusal::of(method);
        let answer = match &refusal.answer {
            Ok(answer) => conn.respond(&id, answer),
            Err(error) => conn.respond_error(&id, error.clone()),
        };
        tracing::warn!(%method, why = refusal.why, "declined a request from the app-server");
        if let Err(e) = answer {
            tracing::warn!(error = %e, "could not answer the app-server");
        }
        self.notices.send(CodexNotice::ServerRequestDeclined {
            method: method.to_owned(),
            thread_id,
            why: refusal.why.to_owned(),
        });
    }

    /// Hands an approval to the turn on its thread; false if none is routed.
    fn route_approval(&self, id: &RequestId, approval: ApprovalRequest) -> bool {
        let Ok(mut sinks) = self.sinks.lock() else {
            return false;
        };
        let Some(sink) = sinks.get_mut(&approval.thread_id) else {
            return false;
        };
        sink.seq += 1;
        let key = format!("approval-{}", uuid::Uuid::now_v7().simple());
        // Pending before the turn hears of it: the decision may come back at once.
        if let Ok(mut pending) = self.approvals.lock() {
            pending.insert(key.clone(), (id.clone(), approval.kind));
        }
        let event = TurnEvent::ApprovalRequested {
            seq: sink.seq,
            key: key.clone(),
            kind: approval.kind.as_str().to_owned(),
            detail: serde_json::to_value(&approval.detail).unwrap_or(Value::Null),
        };
        if sink.tx.send(event).is_ok() {
            true
        } else {
            self.take_approval(&key);
            false
        }
    }
}

impl Router {
    /// Hands a call of the bridge's tools to the turn on its thread; false
    /// if none is routed (then it is refused like any unexpected request).
    fn route_tool_call(&self, id: &RequestId, call: DynamicToolCallParams) -> bool {
        let Ok(mut sinks) = self.sinks.lock() else {
            return false;
        };
        let Some(sink) = sinks.get_mut(&call.thread_id) else {
            return false;
        };
        sink.seq += 1;
        let key = format!("tool-{}", uuid::Uuid::now_v7().simple());
        // Pending before the turn hears of it: the answer may come back at once.
        if let Ok(mut pending) = self.tool_calls.lock() {
            pending.insert(key.clone(), id.clone());
        }
        let event = TurnEvent::ToolRequested {
            seq: sink.seq,
            key: key.clone(),
            tool: call.tool,
            arguments: call.arguments,
        };
        if sink.tx.send(event).is_ok() {
            true
        } else {
            self.take_tool_call(&key);
            false
        }
    }
}

/// The turn event of an MCP tool call.
fn tool_call(seq: i64, phase: &str, call: McpToolCallItem) -> TurnEvent {
    TurnEvent::ToolCall {
        seq,
        phase: phase.to_owned(),
        error: call.failure(),
        status: call.status.as_str().to_owned(),
        server: call.server,
        tool: call.tool,
        arguments: call.arguments,
    }
}

#[cfg(test)]
mod tests {
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
        let approval =
            json!({"threadId": "t-none", "turnId": "u", "itemId": "i", "startedAtMs": 1});
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
            matches!(&seen[4], TurnEvent::Failed { seq: 6, error } if error.contains("turn/completed")),
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
}
