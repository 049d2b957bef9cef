//! The agent runtime as the session actor sees it: a thread per Issue/PR and
//! turns on it. The Codex app-server client implements this; tests use the
//! [`scripted`] runtime. A runtime speaks its protocol and returns typed events;
//! it knows nothing of the store or the actors. Whether it can run turns at
//! all (its process, its account) it publishes as an [`Availability`]; how
//! an operator signs it in is [`account`].

pub mod account;
mod availability;
pub mod circuit;
pub mod remote;
pub mod scripted;
pub mod transcript;

pub use availability::{
    AccountState, Availability, ProcessState, RuntimeStatus, StartProblem, StatusSender,
};

use crate::domain::states::CapacityDenial;
use crate::domain::trust::ExecutionPolicy;
use crate::domain::worker::WorkerId;
use crate::domain::{OperationId, RepoKey, ResourceKey, TaskId};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use std::path::PathBuf;

/// What a thread runs under, sent with every request that may open it (a
/// thread resumed in a new runtime process gets it again): the policy its
/// trust was decided with, and the repository instructions to hand over
/// when the thread must not load the working tree's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadTerms {
    pub policy: ExecutionPolicy,
    /// The base branch's `AGENTS.md`, for a policy whose instructions come
    /// from the base branch (`None`: it has none).
    pub base_instructions: Option<String>,
}

/// Open (or resume) the session's thread.
#[derive(Debug, Clone)]
pub struct ThreadRequest {
    pub session_key: ResourceKey,
    /// The stored thread id, if the session already has one (resume it).
    pub thread_id: Option<String>,
    /// Without a thread of its own: the thread whose conversation a new one
    /// starts from (a delegated child forked from its parent's).
    pub fork_from: Option<String>,
    pub cwd: PathBuf,
    pub terms: ThreadTerms,
    /// For a new thread that goes on with a conversation begun in a thread
    /// this runtime cannot open (it lives in another process's Codex
    /// home): the earlier exchanges, oldest first, added to the new
    /// thread's history before its first turn. Empty otherwise.
    pub history: Vec<Exchange>,
    /// The Codex home the thread is to be opened in: for a resume, the one
    /// it lives in; for a new thread, the one the session planned it in
    /// ([`Agent::home_for`]) and records with it (`None`: not known). A
    /// runtime whose calls may reach another home (a remote worker that
    /// took the repository's lease meanwhile) refuses there, as
    /// unavailable, so the session plans again rather than resume a thread
    /// that is not there or record a home that is not the thread's.
    pub home: Option<String>,
}

/// One earlier exchange of a conversation: what was asked, and the agent's
/// final answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub asked: String,
    pub answered: String,
}

/// One turn: only this turn's input and its correlation id, and the
/// thread's terms in case the runtime must open it again first.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    pub thread_id: String,
    /// The outbox entry's operation id, sent as the user message's client id.
    pub operation_id: OperationId,
    pub text: String,
    pub cwd: PathBuf,
    pub terms: ThreadTerms,
    /// The task's attempt the turn belongs to (`None`: no attempt, as in a
    /// runtime's own tests): a remote worker keeps it with the turn.
    pub attempt: Option<AttemptRef>,
}

/// One execution attempt of a task: the identity an operator reconciles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRef {
    pub task_id: TaskId,
    pub attempt_id: String,
}

/// Codex's own review of the checked-out head (`review/start`), run as a
/// turn of a thread the bridge opened for it alone.
#[derive(Debug, Clone)]
pub struct ReviewRequest {
    pub thread_id: String,
    /// What the head is compared with: its merge base with this branch.
    pub base_branch: String,
    pub cwd: PathBuf,
    pub terms: ThreadTerms,
    pub attempt: Option<AttemptRef>,
}

/// More input for a turn that is running (`turn/steer`): it joins that turn
/// only if it is still the thread's active one.
#[derive(Debug, Clone)]
pub struct SteerRequest {
    pub thread_id: String,
    /// The turn the input must join; any other active turn (or none) refuses it.
    pub expected_turn_id: String,
    /// The steer's operation id, echoed as the user message's client id.
    pub operation_id: OperationId,
    pub text: String,
}

/// What happens during a turn, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    /// Progress (an item started or completed); `seq` orders events.
    Progress { seq: i64, kind: String },
    /// The runtime recorded the user message; `client_id` is the operation id
    /// it carries (the proof of delivery).
    Delivered { seq: i64, client_id: Option<String> },
    /// The turn finished; `final_text` is the agent's last message.
    Completed {
        seq: i64,
        final_text: Option<String>,
    },
    /// The agent called an MCP tool (`phase` `started` or `completed`): the
    /// bridge recognises the reply among these calls and audits it.
    ToolCall {
        seq: i64,
        phase: String,
        server: String,
        tool: String,
        arguments: serde_json::Value,
        /// `inProgress`, `completed` or `failed`.
        status: String,
        error: Option<String>,
    },
    /// An item of the turn started or completed: what the transcript shows.
    /// Sent before the event the same notification makes (same `seq`).
    Item {
        seq: i64,
        phase: transcript::ItemPhase,
        item: transcript::TranscriptItem,
    },
    /// The thread's token totals before the turn's first model request
    /// (`start`) and now (`end`): the turn used `end - start`.
    TokenUsage {
        seq: i64,
        start: transcript::TokenCounts,
        end: transcript::TokenCounts,
    },
    /// The turn ended in failure; `denial`: the provider turned it away for
    /// capacity, which is waited out rather than failing the work.
    Failed {
        seq: i64,
        error: String,
        denial: Option<CapacityDenial>,
    },
    /// The turn was interrupted (abort or deadline).
    Interrupted { seq: i64 },
    /// The thread settled to idle. Its turn may have ended without a
    /// `turn/completed` the bridge saw: a candidate final, confirmed from
    /// the thread's history unless activity follows.
    Idle { seq: i64 },
    /// The thread is active again (or still): any idle candidate is void.
    Active { seq: i64 },
    /// The agent called one of the bridge's own tools; the turn waits until
    /// [`Agent::answer_tool`] answers `key`.
    ToolRequested {
        seq: i64,
        key: String,
        /// The tool's name as the model called it (without its namespace).
        tool: String,
        arguments: serde_json::Value,
    },
    /// The agent asks to do something that needs a person's approval; the
    /// turn waits until [`Agent::decide_approval`] answers `key`.
    ApprovalRequested {
        seq: i64,
        key: String,
        /// `command`, `file_change` or `mcp_tool`.
        kind: String,
        /// What, where and why, as the runtime described it.
        detail: serde_json::Value,
    },
}

/// The bridge's answer to a call of one of its tools: what the model reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolAnswer {
    /// The call did what it asked.
    pub success: bool,
    pub text: String,
}

/// A turn the runtime accepted. The turn runs in the runtime whether or not
/// anyone consumes `events`: an actor that restarts finds it again through
/// [`Agent::lookup_turn`].
pub struct TurnStarted {
    pub turn_id: String,
    pub events: BoxStream<'static, TurnEvent>,
    /// The remote worker that took the turn (`None`: this process's own
    /// runtime runs it).
    pub runner: Option<WorkerId>,
}

/// What the thread's history says about one operation (our client message id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnLookup {
    /// No turn carries this operation: it was never admitted.
    Missing,
    Running {
        turn_id: String,
    },
    Completed {
        turn_id: String,
        final_text: Option<String>,
    },
    Failed {
        turn_id: String,
        error: String,
        denial: Option<CapacityDenial>,
    },
    Interrupted {
        turn_id: String,
    },
}

/// Why a runtime call failed, split at the admission boundary.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum AgentError {
    /// Nothing reached the agent: safe to retry.
    #[error("the agent runtime is unavailable: {0}")]
    Unavailable(String),
    /// The request may have been admitted (an error after sending, a closed
    /// pipe, a deadline): never send it again blindly.
    #[error("the agent runtime's answer is uncertain: {0}")]
    Uncertain(String),
    /// Nothing was sent, and retrying cannot help until an operator fixes the
    /// setup (say an MCP server that does not start): fail the task.
    #[error("the agent runtime refused: {0}")]
    Refused(String),
}

/// The agent runtime behind the session actors.
pub trait Agent: Send + Sync + 'static {
    /// A short name for logs and the health view (`codex`, `scripted`).
    fn name(&self) -> &'static str;
    /// Where this runtime's threads live: an id that stays the same across
    /// restarts on one Codex home, so that a session can tell a thread it
    /// can resume from one it must rebuild. `None`: the runtime cannot say,
    /// and a stored thread is taken to be resumable here.
    fn home(&self) -> Option<String> {
        None
    }
    /// Where a thread of `repo`'s sessions opens now: [`Agent::home`] for a
    /// runtime with one home; a runtime that hands a repository's calls to
    /// whoever holds it (the remote workers) names the home of the one
    /// that holds `repo` now. `None`: it cannot say.
    fn home_for(&self, repo: &RepoKey) -> BoxFuture<'static, Option<String>> {
        let _ = repo;
        let home = self.home();
        Box::pin(async move { home })
    }
    /// Starts or resumes the session's thread with the repository's setup;
    /// returns its id.
    fn ensure_thread(&self, req: ThreadRequest) -> BoxFuture<'static, Result<String, AgentError>>;
    /// Starts a turn; resolves once the runtime accepted it.
    fn start_turn(&self, req: TurnRequest) -> BoxFuture<'static, Result<TurnStarted, AgentError>>;
    /// Asks the runtime to stop a turn; `Interrupted` follows on its events.
    fn interrupt(
        &self,
        thread_id: &str,
        turn_id: &str,
    ) -> BoxFuture<'static, Result<(), AgentError>>;
    /// Adds input to the running turn `req.expected_turn_id`; resolves with
    /// the turn that took it. `Refused` or `Unavailable`: it joined nothing.
    fn steer_turn(&self, req: SteerRequest) -> BoxFuture<'static, Result<String, AgentError>> {
        let _ = req;
        Box::pin(async {
            Err(AgentError::Refused(
                "this runtime cannot add input to a running turn".into(),
            ))
        })
    }
    /// Starts a review turn; resolves once the runtime accepted it. Its
    /// result is the final text of `Completed`.
    fn start_review(
        &self,
        req: ReviewRequest,
    ) -> BoxFuture<'static, Result<TurnStarted, AgentError>> {
        let _ = req;
        Box::pin(async {
            Err(AgentError::Refused(
                "this runtime cannot run a code review".into(),
            ))
        })
    }
    /// Drops `before_turn_id` and every later turn from the thread's
    /// history (`/replace`). Files those turns changed stay as they are.
    fn revert_thread(
        &self,
        thread_id: &str,
        before_turn_id: &str,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let _ = (thread_id, before_turn_id);
        Box::pin(async {
            Err(AgentError::Refused(
                "this runtime cannot revert a thread's turns".into(),
            ))
        })
    }
    /// Answers a pending approval request.
    fn decide_approval(
        &self,
        key: &str,
        accept: bool,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let _ = (key, accept);
        Box::pin(async {
            Err(AgentError::Unavailable(
                "this runtime asks for no approvals".into(),
            ))
        })
    }
    /// Whether a thread this runtime starts is given the bridge's tools (a
    /// resumed thread keeps what it was started with).
    fn offers_workflow_tools(&self) -> bool {
        false
    }
    /// Answers a call of one of the bridge's tools.
    fn answer_tool(
        &self,
        key: &str,
        answer: ToolAnswer,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let _ = (key, answer);
        Box::pin(async {
            Err(AgentError::Unavailable(
                "this runtime offers no tools of the bridge".into(),
            ))
        })
    }
    /// Ends whatever the runtime runs (an interrupt that was never confirmed):
    /// for Codex, the app-server process; the next call starts a new one.
    fn reset(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
    /// Looks an operation up in the thread's history (reconciliation by history).
    fn lookup_turn(
        &self,
        thread_id: &str,
        operation_id: &str,
    ) -> BoxFuture<'static, Result<TurnLookup, AgentError>>;
}
