//! What the app-server sends us: notifications routed to the turn running on
//! their thread (or to the MCP start-up status), and an explicit answer to
//! every request it makes of us, so no turn can hang on one.

use super::rpc::{Incoming, RpcConnection, RpcError};
use crate::agent::TurnEvent;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// The turn running on a thread, and what its events need.
pub(super) struct Sink {
    pub(super) tx: mpsc::UnboundedSender<TurnEvent>,
    pub(super) seq: i64,
    pub(super) last_agent_text: Option<String>,
    pub(super) last_error: Option<String>,
}

/// Approval requests waiting for a decision: key → (JSON-RPC id, method).
pub(super) type Pending = Arc<Mutex<HashMap<String, (Value, String)>>>;

/// Start-up status of each thread's MCP servers: (thread, server) → (status,
/// failure reason), and a signal when it changes.
pub(super) type StartupStatus = HashMap<(String, String), (String, Option<String>)>;

#[derive(Default)]
pub(super) struct McpStatus {
    pub(super) status: Mutex<StartupStatus>,
    pub(super) changed: tokio::sync::Notify,
}
/// Routes what the app-server sends: notifications to the turn on their
/// thread, and an explicit answer to every request it makes of us.
pub(super) async fn route(
    conn: Arc<RpcConnection>,
    mut incoming: mpsc::UnboundedReceiver<Incoming>,
    sinks: Arc<Mutex<HashMap<String, Sink>>>,
    approvals: Pending,
    mcp: Arc<McpStatus>,
    audit: Arc<std::sync::OnceLock<crate::store::Store>>,
) {
    while let Some(msg) = incoming.recv().await {
        match msg {
            Incoming::Notification { method, params }
                if method == "mcpServer/startupStatus/updated" =>
            {
                let field = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_owned);
                if let (Some(thread), Some(name), Some(status)) =
                    (field("threadId"), field("name"), field("status"))
                {
                    let reason = field("failureReason").or_else(|| {
                        params
                            .get("error")
                            .filter(|e| !e.is_null())
                            .map(|e| e.to_string())
                    });
                    if let Ok(mut m) = mcp.status.lock() {
                        m.insert((thread, name), (status, reason));
                    }
                    mcp.changed.notify_waiters();
                }
            }
            Incoming::Notification { method, params } => {
                let Some(thread) = params
                    .get("threadId")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                else {
                    continue;
                };
                let Ok(mut sinks) = sinks.lock() else {
                    continue;
                };
                let Some(sink) = sinks.get_mut(&thread) else {
                    continue;
                };
                sink.seq += 1;
                let seq = sink.seq;
                let done = match method.as_str() {
                    "item/started" | "item/completed"
                        if params.pointer("/item/type").and_then(Value::as_str)
                            == Some("mcpToolCall") =>
                    {
                        let item = params.get("item").cloned().unwrap_or(Value::Null);
                        let text = |k: &str| {
                            item.get(k)
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned()
                        };
                        let error =
                            item.get("error")
                                .filter(|e| !e.is_null())
                                .map(|e| {
                                    e.get("message")
                                        .and_then(Value::as_str)
                                        .map(str::to_owned)
                                        .unwrap_or_else(|| e.to_string())
                                })
                                .or_else(|| {
                                    // A tool that answered with isError failed too.
                                    (item.pointer("/result/isError") == Some(&Value::Bool(true)))
                                        .then(|| {
                                            item.pointer("/result/content/0/text")
                                                .and_then(Value::as_str)
                                                .unwrap_or("the tool reported an error")
                                                .to_owned()
                                        })
                                });
                        let _ = sink.tx.send(TurnEvent::ToolCall {
                            seq,
                            phase: if method == "item/started" {
                                "started".into()
                            } else {
                                "completed".into()
                            },
                            server: text("server"),
                            tool: text("tool"),
                            arguments: item.get("arguments").cloned().unwrap_or(Value::Null),
                            status: text("status"),
                            error,
                        });
                        false
                    }
                    "item/completed" => {
                        let item = params.get("item").cloned().unwrap_or(Value::Null);
                        let kind = item
                            .get("type")
                            .and_then(Value::as_str)
                            .unwrap_or("item")
                            .to_owned();
                        if kind == "agentMessage" {
                            sink.last_agent_text =
                                item.get("text").and_then(Value::as_str).map(str::to_owned);
                        }
                        let event = if kind == "userMessage" {
                            TurnEvent::Delivered {
                                seq,
                                client_id: item
                                    .get("clientId")
                                    .and_then(Value::as_str)
                                    .map(str::to_owned),
                            }
                        } else {
                            TurnEvent::Progress { seq, kind }
                        };
                        let _ = sink.tx.send(event);
                        false
                    }
                    "error" => {
                        sink.last_error = params
                            .pointer("/error/message")
                            .and_then(Value::as_str)
                            .map(str::to_owned);
                        false
                    }
                    "turn/completed" => {
                        let turn = params.get("turn").cloned().unwrap_or(Value::Null);
                        let status = turn.get("status").and_then(Value::as_str).unwrap_or("");
                        let event = match status {
                            "completed" => TurnEvent::Completed {
                                seq,
                                final_text: last_agent_text(&turn)
                                    .or_else(|| sink.last_agent_text.clone()),
                            },
                            "interrupted" => TurnEvent::Interrupted { seq },
                            _ => TurnEvent::Failed {
                                seq,
                                error: turn
                                    .pointer("/error/message")
                                    .and_then(Value::as_str)
                                    .map(str::to_owned)
                                    .or_else(|| sink.last_error.clone())
                                    .unwrap_or_else(|| format!("turn ended {status}")),
                            },
                        };
                        let _ = sink.tx.send(event);
                        true
                    }
                    _ => false,
                };
                if done {
                    sinks.remove(&thread);
                }
            }
            Incoming::Request { id, method, params } => {
                let kind = match method.as_str() {
                    "item/commandExecution/requestApproval" => Some("command"),
                    "item/fileChange/requestApproval" => Some("file_change"),
                    "mcpServer/elicitation/request" => Some("mcp_tool"),
                    _ => None,
                };
                let thread = params
                    .get("threadId")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                // An approval for a turn someone is driving waits for an
                // operator's decision; anything else gets an explicit answer
                // now, so no turn can hang on it.
                let routed = match (kind, &thread) {
                    (Some(kind), Some(thread)) => sinks.lock().ok().and_then(|mut sinks| {
                        let sink = sinks.get_mut(thread)?;
                        sink.seq += 1;
                        let key = format!("approval-{}", uuid::Uuid::now_v7().simple());
                        let detail = json!({
                            "command": params.get("command"),
                            "cwd": params.get("cwd"),
                            "reason": params.get("reason"),
                            "grantRoot": params.get("grantRoot"),
                            "itemId": params.get("itemId"),
                            "message": params.get("message"),
                            "serverName": params.get("serverName"),
                            "tool": params.pointer("/_meta/tool_name"),
                        });
                        let event = TurnEvent::ApprovalRequested {
                            seq: sink.seq,
                            key: key.clone(),
                            kind: kind.to_owned(),
                            detail,
                        };
                        // Pending before the turn hears of it: the decision may
                        // come back at once.
                        if let Ok(mut pending) = approvals.lock() {
                            pending.insert(key.clone(), (id.clone(), method.clone()));
                        }
                        if sink.tx.send(event).is_ok() {
                            Some(key)
                        } else {
                            approvals.lock().ok().and_then(|mut p| p.remove(&key));
                            None
                        }
                    }),
                    _ => None,
                };
                if routed.is_none() {
                    let (answer, why) = decline(&conn, &id, &method, kind.is_some());
                    tracing::warn!(method = %method, why, "declined a request from the app-server");
                    if let Err(e) = answer {
                        tracing::warn!(error = %e, "could not answer the app-server");
                    }
                    audit_event(
                        &audit,
                        "codex.server_request_declined",
                        json!({ "method": method, "threadId": thread, "why": why }),
                    );
                }
            }
            Incoming::Closed => {
                // The streams end without an end event: the session actors see
                // it and recover by history against the next process.
                if let Ok(mut sinks) = sinks.lock() {
                    sinks.clear();
                }
                break;
            }
        }
    }
}

/// Answers a server request codex-bridge will not grant, explicitly, so no
/// turn waits on it: each known type gets its own "no" in its own shape, and
/// anything else a JSON-RPC error. Returns the send result and why.
fn decline(
    conn: &RpcConnection,
    id: &Value,
    method: &str,
    approval: bool,
) -> (Result<(), RpcError>, &'static str) {
    let no_turn = "no turn of codex-bridge is waiting for it";
    match method {
        "mcpServer/elicitation/request" => (
            conn.respond(id, json!({ "action": "decline", "content": null })),
            no_turn,
        ),
        _ if approval => (conn.respond(id, json!({ "decision": "decline" })), no_turn),
        // Legacy approval shapes (v1): the review decision is `denied`.
        "execCommandApproval" | "applyPatchApproval" => (
            conn.respond(id, json!({ "decision": "denied" })),
            "legacy approval request; codex-bridge answers the v2 ones",
        ),
        "item/permissions/requestApproval" => (
            conn.respond(id, json!({ "permissions": {}, "scope": "turn" })),
            "extra permissions are not granted from a comment",
        ),
        "item/tool/requestUserInput" => (
            conn.respond(id, json!({ "answers": {} })),
            "no person answers questions inside a turn; ask in the reply instead",
        ),
        "item/tool/call" => (
            conn.respond(
                id,
                json!({
                    "contentItems": [{ "type": "inputText", "text": "codex-bridge offers no dynamic tools" }],
                    "success": false,
                }),
            ),
            "codex-bridge registers no dynamic tools",
        ),
        "account/chatgptAuthTokens/refresh" | "attestation/generate" => (
            conn.respond_error(id, -32601, "codex-bridge does not provide this"),
            "codex-bridge does not provide account tokens or attestations",
        ),
        _ => (
            conn.respond_error(id, -32601, "codex-bridge does not handle this request"),
            "unknown request type",
        ),
    }
}

/// Appends one of the runtime's own events to the audit log, if one is set,
/// without holding up the caller.
pub(super) fn audit_event(
    audit: &std::sync::OnceLock<crate::store::Store>,
    action: &'static str,
    meta: Value,
) {
    let Some(store) = audit.get().cloned() else {
        return;
    };
    tokio::spawn(async move {
        let written = store
            .write(move |c| {
                crate::store::audit::record(
                    c,
                    &crate::store::audit::Audit::new(action, "codex").meta(meta.clone()),
                )
                .map(|_| ())
            })
            .await;
        if let Err(e) = written {
            tracing::warn!(action, error = %e, "could not audit a codex runtime event");
        }
    });
}

/// The last agent message among a turn's items.
pub(super) fn last_agent_text(turn: &Value) -> Option<String> {
    turn.get("items")?
        .as_array()?
        .iter()
        .rev()
        .find(|i| i.get("type").and_then(Value::as_str) == Some("agentMessage"))
        .and_then(|i| i.get("text").and_then(Value::as_str))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Every server request codex-bridge does not route to a turn gets an
    /// answer in its own shape (or a JSON-RPC error), and an audit event.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_unrouted_server_request_is_answered_and_audited() {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(&crate::store::StoreSettings {
            url: crate::store::DbUrl::Sqlite(dir.path().join("a.db")),
            read_pool_size: 2,
            sqlite_busy_timeout: Duration::from_secs(5),
            writer: crate::store::WriterSettings {
                batch_max: 8,
                threads: 1,
                queue_capacity: 64,
            },
        })
        .unwrap();
        // The "app-server" side of two pipes.
        let (ours_w, mut theirs_r) = tokio::io::duplex(1 << 16);
        let (mut theirs_w, ours_r) = tokio::io::duplex(1 << 16);
        let (conn, incoming) = RpcConnection::start(ours_w, ours_r);
        let audit = Arc::new(std::sync::OnceLock::new());
        audit.set(store.clone()).ok().unwrap();
        tokio::spawn(route(
            conn,
            incoming,
            Arc::new(Mutex::new(HashMap::new())),
            Arc::new(Mutex::new(HashMap::new())),
            Arc::new(McpStatus::default()),
            audit,
        ));
        let cases = [
            (
                "item/commandExecution/requestApproval",
                json!({"decision": "decline"}),
            ),
            (
                "item/fileChange/requestApproval",
                json!({"decision": "decline"}),
            ),
            (
                "mcpServer/elicitation/request",
                json!({"action": "decline", "content": null}),
            ),
            ("execCommandApproval", json!({"decision": "denied"})),
            ("applyPatchApproval", json!({"decision": "denied"})),
            (
                "item/permissions/requestApproval",
                json!({"permissions": {}, "scope": "turn"}),
            ),
            ("item/tool/requestUserInput", json!({"answers": {}})),
            (
                "item/tool/call",
                json!({"contentItems": [{"type": "inputText", "text": "codex-bridge offers no dynamic tools"}], "success": false}),
            ),
            ("account/chatgptAuthTokens/refresh", Value::Null),
            ("attestation/generate", Value::Null),
            ("something/new", Value::Null),
        ];
        let mut lines = BufReader::new(&mut theirs_r).lines();
        for (i, (method, want)) in cases.iter().enumerate() {
            let req = json!({"jsonrpc": "2.0", "id": 100 + i, "method": method, "params": {"threadId": "t-none"}});
            theirs_w
                .write_all(format!("{req}\n").as_bytes())
                .await
                .unwrap();
            let line = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let answer: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(answer["id"], json!(100 + i), "{method}: {answer}");
            if want.is_null() {
                assert_eq!(answer["error"]["code"], json!(-32601), "{method}: {answer}");
            } else {
                assert_eq!(&answer["result"], want, "{method}: {answer}");
            }
        }
        // One audit event per declined request, naming the method.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let events = store
                .read(|c| {
                    crate::store::audit::list(
                        c,
                        &crate::store::audit::AuditFilter {
                            limit: 1000,
                            ..Default::default()
                        },
                    )
                })
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.action == "codex.server_request_declined")
                .collect::<Vec<_>>();
            if events.len() == cases.len() {
                let text = serde_json::to_string(&events).unwrap();
                for (method, _) in &cases {
                    assert!(text.contains(method), "{method} not audited: {text}");
                }
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "audited {} of {}",
                events.len(),
                cases.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
