//! Threads and turns: the requests that open threads, start, steer and stop
//! turns and read a thread's history, and the turns and items they answer with.

use super::Request;
use super::ThreadItem;
use crate::domain::states::CapacityDenial;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

/// When Codex asks before acting (`AskForApproval`, the plain values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AskForApproval {
    Untrusted,
    OnRequest,
    Never,
}

impl std::str::FromStr for AskForApproval {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value(Value::String(s.to_owned())).map_err(|_| {
            format!(
                "`{s}` is not an approval policy this codex accepts (untrusted, on-request, never)"
            )
        })
    }
}

/// What a thread's commands may touch (`SandboxMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    ReadOnly,
    WorkspaceWrite,
    DangerFullAccess,
}

impl std::str::FromStr for SandboxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value(Value::String(s.to_owned())).map_err(|_| {
            format!(
                "`{s}` is not a sandbox mode this codex accepts \
                 (read-only, workspace-write, danger-full-access)"
            )
        })
    }
}

/// What `thread/start` and `thread/resume` share: a thread resumed in a new
/// process gets its MCP servers from the request that loads it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadSetup {
    pub cwd: PathBuf,
    pub developer_instructions: String,
    /// `None`: the thread keeps the policy it last ran under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<AskForApproval>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxMode>,
    /// Dotted config keys (`mcp_servers.gitea.command`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Map<String, Value>>,
}

/// `thread/start` (`v2/ThreadStartParams`). Dynamic tools are given only
/// here: `thread/resume` cannot add them to a thread.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStart {
    #[serde(flatten)]
    pub setup: ThreadSetup,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dynamic_tools: Vec<DynamicToolSpec>,
}

/// `v2/DynamicToolSpec`: the bridge offers its tools as one namespace.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum DynamicToolSpec {
    Namespace {
        name: String,
        description: String,
        tools: Vec<DynamicToolFunction>,
    },
}

/// `v2/DynamicToolNamespaceTool` (a function).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename = "function", rename_all = "camelCase")]
pub struct DynamicToolFunction {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

impl DynamicToolSpec {
    /// The bridge's tools named in `offered`, as one `codex_bridge` namespace
    /// (none offered: nothing).
    pub fn bridge_tools(offered: &[&str]) -> Vec<DynamicToolSpec> {
        use crate::domain::workflow::{TOOLS, TOOL_NAMESPACE};
        let tools: Vec<DynamicToolFunction> = TOOLS
            .iter()
            .filter(|t| offered.contains(&t.name))
            .map(|t| DynamicToolFunction {
                name: t.name.to_owned(),
                description: t.description.to_owned(),
                input_schema: t.input_schema(),
            })
            .collect();
        if tools.is_empty() {
            return Vec::new();
        }
        vec![DynamicToolSpec::Namespace {
            name: TOOL_NAMESPACE.to_owned(),
            description: "codex-bridge's tools for the workflow of this Issue or pull request"
                .to_owned(),
            tools,
        }]
    }
}

impl Request for ThreadStart {
    const METHOD: &'static str = "thread/start";
    type Response = ThreadStartResponse;
}

/// The answer to `thread/start` (`v2/ThreadStartResponse`).
#[derive(Debug, Clone, Deserialize)]
pub struct ThreadStartResponse {
    pub thread: ThreadSummary,
}

/// A thread (`v2/Thread`): its id.
#[derive(Debug, Clone, Deserialize)]
pub struct ThreadSummary {
    pub id: String,
}

/// `thread/resume` (`v2/ThreadResumeParams`); its answer (the thread's
/// turns) is not read: history is looked up with [`ThreadTurnsList`].
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadResume {
    pub thread_id: String,
    #[serde(flatten)]
    pub setup: ThreadSetup,
}

impl Request for ThreadResume {
    const METHOD: &'static str = "thread/resume";
    type Response = IgnoredAny;
}

/// `thread/fork` (`v2/ThreadForkParams`): a new thread whose history is a
/// copy of `thread_id`'s, run under this request's setup (its own working
/// directory, policy and MCP servers). Its answer names the new thread.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadFork {
    pub thread_id: String,
    #[serde(flatten)]
    pub setup: ThreadSetup,
}

impl Request for ThreadFork {
    const METHOD: &'static str = "thread/fork";
    type Response = ThreadStartResponse;
}

/// How much of each turn's items a history page carries (`v2/TurnItemsView`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TurnItemsView {
    /// Every item: the user message carries our client id.
    Full,
}

/// `thread/turns/list` (`v2/ThreadTurnsListParams`): a thread's history,
/// newest turn first.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadTurnsList {
    pub thread_id: String,
    pub items_view: TurnItemsView,
}

impl Request for ThreadTurnsList {
    const METHOD: &'static str = "thread/turns/list";
    type Response = ThreadTurnsListResponse;
}

/// The answer to `thread/turns/list` (`v2/ThreadTurnsListResponse`).
#[derive(Debug, Clone, Deserialize)]
pub struct ThreadTurnsListResponse {
    pub data: Vec<Turn>,
}

/// One piece of user input (`v2/UserInput`); the bridge sends plain text.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum UserInput {
    Text {
        text: String,
        /// Rich-text spans inside `text`; plain text has none.
        text_elements: Vec<Value>,
    },
}

impl UserInput {
    pub fn text(text: impl Into<String>) -> UserInput {
        UserInput::Text {
            text: text.into(),
            text_elements: Vec::new(),
        }
    }
}

/// `turn/start` (`v2/TurnStartParams`): only this turn's input and our id of
/// the user message, which Codex keeps in the thread's history.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStart {
    pub thread_id: String,
    pub input: Vec<UserInput>,
    pub client_user_message_id: String,
}

impl Request for TurnStart {
    const METHOD: &'static str = "turn/start";
    type Response = TurnStartResponse;
}

/// The answer to `turn/start` (`v2/TurnStartResponse`).
#[derive(Debug, Clone, Deserialize)]
pub struct TurnStartResponse {
    pub turn: Turn,
}

/// `turn/steer` (`v2/TurnSteerParams`): more input for the active turn,
/// refused unless it is `expected_turn_id`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSteer {
    pub thread_id: String,
    pub expected_turn_id: String,
    pub input: Vec<UserInput>,
    pub client_user_message_id: String,
}

impl Request for TurnSteer {
    const METHOD: &'static str = "turn/steer";
    type Response = TurnSteerResponse;
}

/// The answer to `turn/steer` (`v2/TurnSteerResponse`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSteerResponse {
    pub turn_id: String,
}

/// `turn/interrupt` (`v2/TurnInterruptParams`); `turn/completed` with
/// `interrupted` follows.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnInterrupt {
    pub thread_id: String,
    pub turn_id: String,
}

impl Request for TurnInterrupt {
    const METHOD: &'static str = "turn/interrupt";
    type Response = IgnoredAny;
}

/// `thread/revert` (`v2/ThreadRevertParams`): the thread's history keeps
/// only what came before `before_turn_id` (that turn and every later one are
/// dropped). Files the turns changed stay as they are.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadRevert {
    pub thread_id: String,
    pub before_turn_id: String,
}

impl Request for ThreadRevert {
    const METHOD: &'static str = "thread/revert";
    type Response = IgnoredAny;
}

/// `thread/inject_items` (`v2/ThreadInjectItemsParams`): items appended to
/// the thread's model-visible history without a turn; how a new thread is
/// given a conversation begun in a thread it cannot open.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadInjectItems {
    pub thread_id: String,
    pub items: Vec<HistoryItem>,
}

impl Request for ThreadInjectItems {
    const METHOD: &'static str = "thread/inject_items";
    type Response = IgnoredAny;
}

/// `v2/ResponseItem`, the one form the bridge injects: a message of the
/// conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HistoryItem {
    Message {
        role: HistoryRole,
        content: Vec<HistoryContent>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryRole {
    User,
    Assistant,
}

/// `v2/ContentItem`: what the user said, or what the agent answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HistoryContent {
    InputText { text: String },
    OutputText { text: String },
}

impl HistoryItem {
    pub fn user(text: impl Into<String>) -> HistoryItem {
        HistoryItem::Message {
            role: HistoryRole::User,
            content: vec![HistoryContent::InputText { text: text.into() }],
        }
    }

    pub fn assistant(text: impl Into<String>) -> HistoryItem {
        HistoryItem::Message {
            role: HistoryRole::Assistant,
            content: vec![HistoryContent::OutputText { text: text.into() }],
        }
    }
}

/// `review/start` (`v2/ReviewStartParams`): Codex's own review, run inline
/// on the given thread as a turn of it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewStart {
    pub thread_id: String,
    pub target: ReviewTarget,
}

/// `v2/ReviewTarget`: what the review compares. Only the form the bridge
/// uses is here.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ReviewTarget {
    /// The checked-out head against the merge base with `branch`.
    BaseBranch { branch: String },
}

impl Request for ReviewStart {
    const METHOD: &'static str = "review/start";
    type Response = ReviewStartResponse;
}

/// The answer to `review/start` (`v2/ReviewStartResponse`): the review's turn.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewStartResponse {
    pub review_thread_id: String,
    pub turn: Turn,
}

/// A turn (`v2/Turn`), live or from history.
#[derive(Debug, Clone, Deserialize)]
pub struct Turn {
    pub id: String,
    pub status: TurnStatus,
    #[serde(default)]
    pub items: Vec<ThreadItem>,
    #[serde(default)]
    pub error: Option<TurnError>,
}

impl Turn {
    /// What the turn answered: a review's result, else the last agent
    /// message among its items.
    pub fn last_agent_text(&self) -> Option<String> {
        let review = self.items.iter().rev().find_map(|i| match i {
            ThreadItem::ExitedReviewMode(r) => Some(r.review.clone()),
            _ => None,
        });
        review.or_else(|| {
            self.items.iter().rev().find_map(|i| match i {
                ThreadItem::AgentMessage(m) => Some(m.text.clone()),
                _ => None,
            })
        })
    }
}

/// `v2/TurnStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TurnStatus {
    Completed,
    Interrupted,
    Failed,
    InProgress,
    /// A status this bridge does not know: treated as a failure.
    #[serde(other)]
    Unknown,
}

impl TurnStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Completed => "completed",
            TurnStatus::Interrupted => "interrupted",
            TurnStatus::Failed => "failed",
            TurnStatus::InProgress => "inProgress",
            TurnStatus::Unknown => "unknown",
        }
    }
}

/// Why a turn failed (`v2/TurnError`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnError {
    pub message: String,
    #[serde(default)]
    pub codex_error_info: Option<CodexErrorInfo>,
}

impl TurnError {
    /// Whether the provider turned the turn away for capacity (or a policy
    /// on resources) rather than failing the work: codex's own word for it,
    /// or the HTTP status it gave up on (429, 503).
    pub fn denial(&self) -> Option<CapacityDenial> {
        match self.codex_error_info.as_ref()? {
            CodexErrorInfo::Kind(kind) => match kind {
                CodexErrorKind::UsageLimitExceeded => Some(CapacityDenial::UsageLimit),
                CodexErrorKind::RateLimitExceeded => Some(CapacityDenial::RateLimited),
                CodexErrorKind::ServerOverloaded | CodexErrorKind::FlexUnavailable => {
                    Some(CapacityDenial::Overloaded)
                }
                CodexErrorKind::PolicyCapacityUnavailable => Some(CapacityDenial::PolicyCapacity),
                CodexErrorKind::Unknown => None,
            },
            CodexErrorInfo::Http(detail) => {
                match detail.values().find_map(|d| d.http_status_code)? {
                    429 => Some(CapacityDenial::RateLimited),
                    503 => Some(CapacityDenial::Overloaded),
                    _ => None,
                }
            }
            CodexErrorInfo::Other(_) => None,
        }
    }
}

/// `v2/CodexErrorInfo`: what kind of failure codex saw, a bare kind or a
/// kind with the HTTP status it came with.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum CodexErrorInfo {
    Kind(CodexErrorKind),
    /// `{"responseTooManyFailedAttempts": {"httpStatusCode": 429}}` and its kin.
    Http(std::collections::BTreeMap<String, HttpErrorDetail>),
    /// A shape this bridge does not read.
    Other(Value),
}

/// The bare kinds of `v2/CodexErrorInfo` the bridge tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CodexErrorKind {
    UsageLimitExceeded,
    RateLimitExceeded,
    ServerOverloaded,
    FlexUnavailable,
    PolicyCapacityUnavailable,
    /// Any other kind: a failure of the turn.
    #[serde(other)]
    Unknown,
}

/// The detail of a `v2/CodexErrorInfo` kind that came from an HTTP answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpErrorDetail {
    #[serde(default)]
    pub http_status_code: Option<u16>,
}
