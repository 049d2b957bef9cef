//! The messages themselves. JSON, camelCase fields, tagged enums with
//! snake_case tags, so a message names what it is.

use crate::agent::transcript::{ItemStatus, TokenCounts};
use crate::domain::states::CapacityDenial;
use crate::domain::trust::ExecutionPolicy;
use serde::{Deserialize, Serialize};

/// `POST /leases`: the worker asks for a repository's work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRequest {
    /// The [`PROTOCOL_VERSION`](super::PROTOCOL_VERSION) the worker speaks.
    pub protocol: u32,
    /// `owner/name`, one of the repositories the worker was given.
    pub repository: String,
    /// The id of the Codex home the worker runs its threads in (kept in
    /// the home itself, so it stays the same across restarts): a thread
    /// opened under this lease lives there, and a session whose thread
    /// lives in another home rebuilds it. Absent: the worker cannot say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codex_home: Option<String>,
}

/// A lease the server granted (or renewed): the worker runs the
/// repository's calls until `expiresAt`, and renews it before then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseGrant {
    pub lease_id: String,
    pub repository: String,
    /// Grows with every new holder of the repository's worker lease.
    pub fence: i64,
    /// RFC 3339, by the server's clock.
    pub expires_at: String,
    /// How long a renewal extends it, so the worker renews well before.
    pub ttl_secs: u64,
}

/// One call of the agent runtime, handed to the worker holding the lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Call {
    /// Unique per server process; the answer names it.
    pub call_id: String,
    pub lease_id: String,
    pub body: CallBody,
}

/// `GET /leases/{leaseId}/calls?waitMs=`: what is waiting (empty when the
/// wait ran out with nothing to do).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallBatch {
    pub calls: Vec<Call>,
}

/// What the thread runs under (see `agent::ThreadTerms`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Terms {
    pub policy: ExecutionPolicy,
    pub base_instructions: Option<String>,
}

/// One earlier exchange of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exchange {
    pub asked: String,
    pub answered: String,
}

/// The calls, one per method of the agent runtime. A `cwd` is a folder on
/// the worker's disk: the worker prepares its workspaces under its own
/// `workspace_root`, and the server only hands back what it was told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallBody {
    #[serde(rename_all = "camelCase")]
    EnsureThread {
        session_key: String,
        thread_id: Option<String>,
        fork_from: Option<String>,
        cwd: String,
        terms: Terms,
        #[serde(default)]
        history: Vec<Exchange>,
        /// The Codex home the thread is to be opened in (see
        /// `agent::ThreadRequest::home`): a worker whose home is another
        /// answers `unavailable` and opens nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        home: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    StartTurn {
        thread_id: String,
        operation_id: String,
        text: String,
        cwd: String,
        terms: Terms,
        /// The server's attempt the turn belongs to: the worker journals it
        /// with the turn, so an operator can reconcile that attempt there.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<AttemptIdentity>,
    },
    #[serde(rename_all = "camelCase")]
    StartReview {
        thread_id: String,
        base_branch: String,
        cwd: String,
        terms: Terms,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<AttemptIdentity>,
    },
    #[serde(rename_all = "camelCase")]
    Interrupt {
        thread_id: String,
        turn_id: String,
    },
    #[serde(rename_all = "camelCase")]
    SteerTurn {
        thread_id: String,
        expected_turn_id: String,
        operation_id: String,
        text: String,
    },
    #[serde(rename_all = "camelCase")]
    RevertThread {
        thread_id: String,
        before_turn_id: String,
    },
    #[serde(rename_all = "camelCase")]
    DecideApproval {
        key: String,
        accept: bool,
    },
    #[serde(rename_all = "camelCase")]
    AnswerTool {
        key: String,
        success: bool,
        text: String,
    },
    Reset,
    /// The session's worktree made ready for its next turn, under the
    /// worker's own `workspace_root`, cloned with the worker's own token.
    #[serde(rename_all = "camelCase")]
    PrepareSession {
        /// The server's `instance_id`: the first folder under the root, so
        /// both ends name one layout.
        instance: String,
        owner: String,
        name: String,
        clone_url: Option<String>,
        checkout: Checkout,
        worktree: Worktree,
        /// What the session's last turn left, to check the worktree against.
        recorded: Option<Tree>,
    },
    /// An empty folder of the session's own, for a turn that needs nothing
    /// of the repository.
    #[serde(rename_all = "camelCase")]
    Scratch {
        instance: String,
        owner: String,
        name: String,
        worktree: Worktree,
    },
    #[serde(rename_all = "camelCase")]
    LookupTurn {
        thread_id: String,
        operation_id: String,
    },
    /// The base branch's `AGENTS.md` (the default branch's when `base` is
    /// `None`), from the worker's clone of the repository, for a thread
    /// that must not follow the checked-out head's.
    #[serde(rename_all = "camelCase")]
    BaseInstructions {
        instance: String,
        owner: String,
        name: String,
        base: Option<String>,
    },
    /// What the session's worktree holds now, recorded as its turn ends.
    #[serde(rename_all = "camelCase")]
    TreeState {
        instance: String,
        owner: String,
        name: String,
        worktree: Worktree,
    },
    /// The session's worktree removed from the worker's disk, its
    /// uncommitted work kept under a ref of the worker's clone.
    #[serde(rename_all = "camelCase")]
    RetireSession {
        instance: String,
        owner: String,
        name: String,
        worktree: Worktree,
    },
}

impl CallBody {
    /// The call's kind as its tag names it, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            CallBody::EnsureThread { .. } => "ensure_thread",
            CallBody::StartTurn { .. } => "start_turn",
            CallBody::StartReview { .. } => "start_review",
            CallBody::Interrupt { .. } => "interrupt",
            CallBody::SteerTurn { .. } => "steer_turn",
            CallBody::RevertThread { .. } => "revert_thread",
            CallBody::DecideApproval { .. } => "decide_approval",
            CallBody::AnswerTool { .. } => "answer_tool",
            CallBody::Reset => "reset",
            CallBody::PrepareSession { .. } => "prepare_session",
            CallBody::Scratch { .. } => "scratch",
            CallBody::LookupTurn { .. } => "lookup_turn",
            CallBody::BaseInstructions { .. } => "base_instructions",
            CallBody::TreeState { .. } => "tree_state",
            CallBody::RetireSession { .. } => "retire_session",
        }
    }
}

/// One execution attempt of a server task, as reconciliation names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptIdentity {
    pub task_id: String,
    pub attempt_id: String,
}

/// What a task needs checked out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Checkout {
    DefaultBranch {
        name: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    PullRequest {
        number: i64,
        head_ref: String,
    },
}

/// Which session's worktree: the resource's kind (`issue`, `pull`) and
/// number, and a delegated child's number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    pub kind: String,
    pub number: i64,
    pub child: Option<i64>,
}

/// A worktree's state: its head commit and its tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree {
    pub head: String,
    pub tree: String,
}

/// `POST /leases/{leaseId}/answers`: how a call went on the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub call_id: String,
    pub outcome: Outcome,
}

/// A call's result, split at the admission boundary as the runtime's
/// errors are: `unavailable` (nothing reached Codex: safe to retry),
/// `uncertain` (it may have), `refused` (nothing was sent, and retrying
/// cannot help).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Outcome {
    Ok {
        value: Value,
    },
    Unavailable {
        message: String,
    },
    Uncertain {
        message: String,
    },
    Refused {
        message: String,
    },
    /// A workspace call failed: `disposition` (`cannot_name`,
    /// `needs_operator`, `transient`, `permanent`) says where the task
    /// goes, `code` is the worker's error code.
    WorkspaceFailed {
        disposition: String,
        code: String,
        message: String,
    },
}

/// What a call that succeeded gives back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Value {
    /// `ensure_thread`.
    #[serde(rename_all = "camelCase")]
    Thread { thread_id: String },
    /// `start_turn`, `start_review`, `steer_turn`: the turn that took it.
    /// A started turn's events follow as batches on the call's id.
    #[serde(rename_all = "camelCase")]
    Turn {
        turn_id: String,
        /// The worker that took the call, as the server authenticated it
        /// (set by the server on the answer it received; what a worker
        /// writes here is replaced).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker_id: Option<String>,
    },
    /// `interrupt`, `revert_thread`, `decide_approval`, `answer_tool`, `reset`.
    Done,
    /// `lookup_turn`.
    Lookup { lookup: Lookup },
    /// `prepare_session`, `scratch`: the folder relative to the workspace
    /// root, and the commit checked out.
    Workspace { cwd: String, head: Option<String> },
    /// `base_instructions`: the text (cut at the workspaces' bound), or
    /// `None` when the branch has none.
    Instructions { text: Option<String> },
    /// `tree_state`: `None` when the session has no worktree there.
    TreeState { state: Option<Tree> },
    /// `retire_session`: whether a worktree was removed, and the ref that
    /// keeps its uncommitted work, if it held any.
    Retired { removed: bool, kept: Option<String> },
}

/// What the thread's history says about one operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Lookup {
    Missing,
    #[serde(rename_all = "camelCase")]
    Running {
        turn_id: String,
    },
    #[serde(rename_all = "camelCase")]
    Completed {
        turn_id: String,
        final_text: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Failed {
        turn_id: String,
        error: String,
        denial: Option<CapacityDenial>,
    },
    #[serde(rename_all = "camelCase")]
    Interrupted {
        turn_id: String,
    },
}

impl Outcome {
    /// Names `worker_id` as the worker that took a turn this outcome
    /// answers; any other outcome stays as it is.
    pub fn taken_by(&mut self, worker_id: &str) {
        if let Outcome::Ok {
            value: Value::Turn { worker_id: w, .. },
        } = self
        {
            *w = Some(worker_id.to_owned());
        }
    }
}

/// `POST /leases/{leaseId}/events`: events of the turn the `start_turn` (or
/// `start_review`) call `stream` started, in order. `first` is the place of
/// the batch's first event in the stream (from 0): a batch sent again
/// (after a lost answer or a restart) is harmless, as the server keeps
/// only the events past those it has. Places, not `seq`s: one
/// notification may make several events with the same `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventBatch {
    pub stream: String,
    pub first: u64,
    pub events: Vec<Event>,
}

/// One event of a turn (see `agent::TurnEvent`). Transcript items travel
/// as JSON the server reads with its own transcript code.
///
/// The events a worker sends are journalled and posted one at a time; an
/// item is cut to what the transcript keeps before it is sent, which the
/// events route's body limit leaves room for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Progress {
        seq: i64,
        kind: String,
    },
    #[serde(rename_all = "camelCase")]
    Delivered {
        seq: i64,
        client_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Completed {
        seq: i64,
        final_text: Option<String>,
    },
    ToolCall {
        seq: i64,
        phase: String,
        server: String,
        tool: String,
        arguments: serde_json::Value,
        status: String,
        error: Option<String>,
    },
    Failed {
        seq: i64,
        error: String,
        denial: Option<CapacityDenial>,
    },
    Interrupted {
        seq: i64,
    },
    Idle {
        seq: i64,
    },
    Active {
        seq: i64,
    },
    ToolRequested {
        seq: i64,
        key: String,
        tool: String,
        arguments: serde_json::Value,
    },
    ApprovalRequested {
        seq: i64,
        key: String,
        kind: String,
        detail: serde_json::Value,
    },
    /// An item of the turn started or completed (see
    /// `agent::transcript::TranscriptItem`): what the transcript shows.
    /// `body` is the item's JSON as the transcript stores it (`kind` names
    /// it), read by the server's own transcript code, so a body of a kind
    /// the server does not know yet is kept by its kind only.
    #[serde(rename_all = "camelCase")]
    Item {
        seq: i64,
        phase: ItemPhase,
        item_id: String,
        status: ItemStatus,
        body: serde_json::Value,
    },
    /// The thread's token totals before the turn's first model request
    /// (`start`) and now (`end`).
    TokenUsage {
        seq: i64,
        start: TokenCounts,
        end: TokenCounts,
    },
    /// An event of a kind this end does not carry over the wire: it keeps
    /// its place in the order. A worker of this version sends none; the
    /// variant stays so that batches of older workers still parse.
    Other {
        seq: i64,
    },
}

/// Whether an item event starts or ends its item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemPhase {
    Started,
    Completed,
}

impl Event {
    pub fn seq(&self) -> i64 {
        match self {
            Event::Progress { seq, .. }
            | Event::Delivered { seq, .. }
            | Event::Completed { seq, .. }
            | Event::ToolCall { seq, .. }
            | Event::Failed { seq, .. }
            | Event::Interrupted { seq }
            | Event::Idle { seq }
            | Event::Active { seq }
            | Event::ToolRequested { seq, .. }
            | Event::ApprovalRequested { seq, .. }
            | Event::Item { seq, .. }
            | Event::TokenUsage { seq, .. }
            | Event::Other { seq } => *seq,
        }
    }

    /// Whether the turn ends with it: nothing of the stream follows.
    pub fn ends_turn(&self) -> bool {
        matches!(
            self,
            Event::Completed { .. } | Event::Failed { .. } | Event::Interrupted { .. }
        )
    }
}

/// `POST /reconcile`: an operator on the worker's machine settles one
/// attempt the worker's journal holds as uncertain (sent to Codex, no end
/// recorded), having checked that no turn of it still runs there. The
/// server moves the task out of `needs_reconciliation` as its own
/// reconcile control does, and answers with the audit event. Never runs
/// anything again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileRequest {
    pub task_id: String,
    pub attempt_id: String,
    /// `failed` or `succeeded`.
    pub verdict: String,
    /// Must be `true`: refused otherwise.
    #[serde(default)]
    pub confirm_no_active_turn: bool,
    /// Who decided, on the worker's machine (audited).
    pub operator: String,
    pub reason: String,
}

/// `POST /finals`: the durable final of one attempt's turn, from the
/// worker's journal, offered after the server stopped following that turn
/// (the lease it ran under ended, so its events are refused with
/// `lease_lost` or `unknown_call`). The server takes it only for the
/// attempt a task in `needs_reconciliation` waits on, once; it never runs
/// the turn again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LateFinalRequest {
    pub task_id: String,
    pub attempt_id: String,
    /// Codex's id of the turn, when the journal learnt it.
    #[serde(default)]
    pub turn_id: Option<String>,
    /// The agent's final message.
    #[serde(default)]
    pub final_text: Option<String>,
}

/// The error body of every refusal: a stable snake_case `code` the worker
/// acts on (`worker_revoked`: stop; `lease_lost`: lease again) and a message
/// for the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub code: String,
    pub message: String,
}

#[cfg(test)]
mod tests;
