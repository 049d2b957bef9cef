//! The app-server's requests of the bridge. Those a turn's driver answers
//! (an approval, a call of the bridge's tools) wait, by key, in one map
//! until that answer comes; every other one — and any for a thread no turn
//! of ours drives — gets an explicit "no" at once, so no turn can hang on it.

use super::{Router, Sink};
use crate::agent::TurnEvent;
use crate::codex::notice::CodexNotice;
use crate::codex::protocol::{
    ApprovalKind, ApprovalRequest, DynamicToolCallParams, Refusal, RequestId, ThreadScoped,
    DYNAMIC_TOOL_CALL,
};
use crate::codex::rpc::RpcConnection;
use serde_json::Value;

/// What a request waiting for the turn's driver is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::codex) enum Waiting {
    Approval(ApprovalKind),
    ToolCall,
}

impl Waiting {
    /// How its key starts (`approval-…`, `tool-…`).
    fn prefix(self) -> &'static str {
        match self {
            Waiting::Approval(_) => "approval",
            Waiting::ToolCall => "tool",
        }
    }
}

impl Router {
    /// Takes the approval `key` out of the waiting requests.
    pub(in crate::codex) fn take_approval(&self, key: &str) -> Option<(RequestId, ApprovalKind)> {
        self.take(key, |w| match w {
            Waiting::Approval(kind) => Some(kind),
            Waiting::ToolCall => None,
        })
    }

    /// Takes the tool call `key` out of the waiting requests.
    pub(in crate::codex) fn take_tool_call(&self, key: &str) -> Option<RequestId> {
        self.take(key, |w| (w == Waiting::ToolCall).then_some(()))
            .map(|(id, ())| id)
    }

    /// The waiting request `key`, taken out if `of` says it is the kind
    /// asked for.
    fn take<T>(&self, key: &str, of: impl Fn(Waiting) -> Option<T>) -> Option<(RequestId, T)> {
        let mut waiting = self.waiting.lock().ok()?;
        let (id, w) = waiting.get(key)?.clone();
        let found = of(w)?;
        waiting.remove(key);
        Some((id, found))
    }

    /// A request of the server: handed to the turn on its thread when a
    /// driver answers it, else refused in its own shape.
    pub(super) fn request(&self, conn: &RpcConnection, id: RequestId, method: &str, params: Value) {
        let thread_id = ThreadScoped::of(&params);
        if method == DYNAMIC_TOOL_CALL {
            match DynamicToolCallParams::parse(params.clone()) {
                Ok(call) => {
                    let routed = self.route(&call.thread_id, &id, Waiting::ToolCall, |seq, key| {
                        TurnEvent::ToolRequested {
                            seq,
                            key,
                            tool: call.tool.clone(),
                            arguments: call.arguments.clone(),
                        }
                    });
                    if routed {
                        return;
                    }
                }
                Err(e) => self.unreadable(e),
            }
        }
        let routed = match ApprovalRequest::parse(method, params) {
            Some(Ok(approval)) => {
                let waiting = Waiting::Approval(approval.kind);
                self.route(&approval.thread_id, &id, waiting, |seq, key| {
                    TurnEvent::ApprovalRequested {
                        seq,
                        key,
                        kind: approval.kind.as_str().to_owned(),
                        detail: serde_json::to_value(&approval.detail).unwrap_or(Value::Null),
                    }
                })
            }
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

    /// Hands request `id` to the turn on `thread` as the event `event`
    /// makes of its sequence number and key; false if no turn is routed
    /// there (or it is gone), and then nothing waits.
    fn route(
        &self,
        thread: &str,
        id: &RequestId,
        waiting: Waiting,
        event: impl FnOnce(i64, String) -> TurnEvent,
    ) -> bool {
        let Ok(mut sinks) = self.sinks.lock() else {
            return false;
        };
        let Some(sink): Option<&mut Sink> = sinks.get_mut(thread) else {
            return false;
        };
        sink.seq += 1;
        let key = format!("{}-{}", waiting.prefix(), uuid::Uuid::now_v7().simple());
        // Waiting before the turn hears of it: the answer may come back at once.
        if let Ok(mut w) = self.waiting.lock() {
            w.insert(key.clone(), (id.clone(), waiting));
        }
        if sink.tx.send(event(sink.seq, key.clone())).is_ok() {
            true
        } else {
            if let Ok(mut w) = self.waiting.lock() {
                w.remove(&key);
            }
            false
        }
    }
}
