//! What the Codex client reports about itself for the audit log: a capability
//! it goes without, a request of the app-server it refused, a message it
//! could not read, a sign-in that ended. The client only sends [`CodexNotice`]s; whoever owns the
//! audit log (the app's wiring) records them, so the client knows nothing
//! of the store.

use serde_json::{json, Value};
use tokio::sync::mpsc;

/// Notices waiting to be recorded before new ones are dropped (each is
/// logged as well): a flood from a misbehaving app-server must not grow
/// memory without bound.
pub const NOTICE_BACKLOG: usize = 256;

/// Something the audit log should hold about the Codex client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodexNotice {
    /// An optional method the app-server refused at start-up: codex-bridge
    /// goes on without it.
    CapabilityDowngrade { probe: String, error: String },
    /// A request of the app-server that no turn waits for, answered "no".
    ServerRequestDeclined {
        method: String,
        thread_id: Option<String>,
        why: String,
    },
    /// A message of a known method that codex-bridge could not read (the
    /// app-server speaks a protocol this version does not know).
    UnreadableMessage { method: String, error: String },
    /// A sign-in ended (`account/login/completed`); `login_id` is `None`
    /// for an API key, which is done when its request is answered.
    LoginCompleted {
        login_id: Option<String>,
        success: bool,
        error: Option<String>,
    },
}

impl CodexNotice {
    /// The audit event's action.
    pub fn action(&self) -> &'static str {
        match self {
            CodexNotice::CapabilityDowngrade { .. } => "capability_downgrade",
            CodexNotice::ServerRequestDeclined { .. } => "codex.server_request_declined",
            CodexNotice::UnreadableMessage { .. } => "codex.message_unreadable",
            CodexNotice::LoginCompleted { .. } => "codex.login_completed",
        }
    }

    /// The audit event's meta.
    pub fn meta(&self) -> Value {
        match self {
            CodexNotice::CapabilityDowngrade { probe, error } => {
                json!({ "probe": probe, "error": error })
            }
            CodexNotice::ServerRequestDeclined {
                method,
                thread_id,
                why,
            } => json!({ "method": method, "threadId": thread_id, "why": why }),
            CodexNotice::UnreadableMessage { method, error } => {
                json!({ "method": method, "error": error })
            }
            CodexNotice::LoginCompleted {
                login_id,
                success,
                error,
            } => json!({ "loginId": login_id, "success": success, "error": error }),
        }
    }
}

/// The client's end of the notice channel.
#[derive(Debug, Clone)]
pub struct NoticeSender(mpsc::Sender<CodexNotice>);

/// A notice channel: the client gets the sender, the audit writer the receiver.
pub fn notice_channel() -> (NoticeSender, mpsc::Receiver<CodexNotice>) {
    let (tx, rx) = mpsc::channel(NOTICE_BACKLOG);
    (NoticeSender(tx), rx)
}

impl NoticeSender {
    /// Hands `notice` over without waiting. Every notice is logged where it
    /// arises, so one dropped here (a full backlog, or nobody recording) is
    /// still in the log.
    pub(super) fn send(&self, notice: CodexNotice) {
        match self.0.try_send(notice) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(n)) => {
                tracing::warn!(
                    action = n.action(),
                    "too many codex notices waiting for the audit log; this one is only logged"
                );
            }
            Err(mpsc::error::TrySendError::Closed(n)) => {
                tracing::debug!(action = n.action(), "no audit log records codex notices");
            }
        }
    }
}
