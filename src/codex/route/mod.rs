//! What the app-server sends us: notifications routed to the turn running on
//! their thread (or to the MCP start-up status), and an explicit answer to
//! every request it makes of us, so no turn can hang on one. What the router
//! cannot read or will not grant is logged and reported as a [`CodexNotice`].

use super::account::AccountEvents;
use super::notice::{CodexNotice, NoticeSender};
use super::protocol::{
    McpServerStartupState, McpToolCallItem, RequestId, ServerNotification, ThreadItem,
    ThreadScoped, ThreadStatus, TurnError, TurnStatus, Unreadable,
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
    last_error: Option<TurnError>,
    /// The thread's token totals before the turn's first model request.
    tokens_before: Option<TokenCounts>,
}

/// How long a turn Codex gave up on (an `error` it will not retry) waits
/// for its `turn/completed` before it ends as failed without one.
const GIVEN_UP_SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

/// Start-up status of a thread's MCP server, and why it failed.
type StartupStatus = (McpServerStartupState, Option<String>);

/// The router's shared state: the turns by thread, the requests waiting
/// for their answer, the MCP servers' start-up status. Cloning shares it; it
/// outlives app-server processes (a new process gets a new routing task).
#[derive(Clone)]
pub(super) struct Router {
    sinks: Arc<Mutex<HashMap<String, Sink>>>,
    /// Requests waiting for the turn's driver to answer them (approvals,
    /// tool calls): key → (request id, what it is).
    waiting: Arc<Mutex<HashMap<String, (RequestId, Waiting)>>>,
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
            waiting: Arc::default(),
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
                            denial: None,
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
                tracing::warn!(
                    thread.id = %n.thread_id,
                    turn.id = n.turn_id.as_deref().unwrap_or("-"),
                    will_retry = ?n.will_retry,
                    error = %n.error.message,
                    "codex reported an error on a turn"
                );
                let mut given_up = None;
                self.on_turn(&n.thread_id, |_, sink| {
                    if n.will_retry == Some(false) {
                        given_up = Some(sink.tx.clone());
                    }
                    sink.last_error = Some(n.error);
                    Vec::new()
                });
                if let Some(turn) = given_up {
                    self.fail_unless_completed(n.thread_id, turn);
                }
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
                    status => failed(seq, turn.error.or_else(|| sink.last_error.clone()), || {
                        format!("turn ended {}", status.as_str())
                    }),
                });
            }
            // Only the thread's settling is read: an idle thread whose turn
            // sent no `turn/completed` may have ended all the same (the
            // session confirms it from the history), and activity after it
            // says it did not.
            ServerNotification::ThreadStatusChanged(n) => match n.status {
                ThreadStatus::Idle => {
                    self.on_turn(&n.thread_id, |seq, _| vec![TurnEvent::Idle { seq }])
                }
                ThreadStatus::Active => {
                    self.on_turn(&n.thread_id, |seq, _| vec![TurnEvent::Active { seq }])
                }
                _ => {}
            },
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

    /// Codex gave up on the turn routed to `turn` on `thread`: its failed
    /// `turn/completed` normally follows at once, but a `review/start` that
    /// fails before its review begins sends none, and the turn would wait
    /// for its deadline. Unless the turn ended meanwhile, it ends as failed
    /// with Codex's error after [`GIVEN_UP_SETTLE`].
    fn fail_unless_completed(&self, thread: String, turn: mpsc::UnboundedSender<TurnEvent>) {
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(GIVEN_UP_SETTLE).await;
            // Checked and ended under one lock: a turn opened on the thread
            // since is never ended by this one's timer.
            this.end_turn_if(
                &thread,
                |sink| sink.tx.same_channel(&turn),
                |seq, sink| {
                    tracing::warn!(thread.id = %thread, "codex gave up on the turn and never completed it: it ends as failed");
                    failed(seq, sink.last_error.clone(), || {
                        "codex gave up on the turn".into()
                    })
                },
            );
        });
    }

    /// Like [`Router::on_turn`], with the turn's last event: the thread's
    /// events stop being routed.
    fn end_turn(&self, thread: &str, f: impl FnOnce(i64, &mut Sink) -> TurnEvent) {
        self.end_turn_if(thread, |_| true, f);
    }

    /// [`Router::end_turn`] for the turn routed on `thread` only if `routed`
    /// says it is the one meant.
    fn end_turn_if(
        &self,
        thread: &str,
        routed: impl FnOnce(&Sink) -> bool,
        f: impl FnOnce(i64, &mut Sink) -> TurnEvent,
    ) {
        let Ok(mut sinks) = self.sinks.lock() else {
            return;
        };
        if !sinks.get(thread).is_some_and(routed) {
            return;
        }
        let Some(mut sink) = sinks.remove(thread) else {
            return;
        };
        sink.seq += 1;
        let event = f(sink.seq, &mut sink);
        let _ = sink.tx.send(event);
    }
}

/// A failed turn's event: Codex's error (and whether it was a capacity
/// denial), or `otherwise` when Codex gave none.
fn failed(seq: i64, error: Option<TurnError>, otherwise: impl FnOnce() -> String) -> TurnEvent {
    TurnEvent::Failed {
        seq,
        denial: error.as_ref().and_then(TurnError::denial),
        error: error.map(|e| e.message).unwrap_or_else(otherwise),
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

mod requests;
#[cfg(test)]
mod tests;

use requests::Waiting;
