//! The notifications the bridge reads: a turn's items, token usage, errors
//! and end, the start-up status of a thread's MCP servers, and the account's
//! sign-in.

use super::{parse, AccountLoginCompletedNotification, ThreadItem, Turn, TurnError, Unreadable};
use serde::Deserialize;
use serde_json::Value;

/// A notification from the app-server, by method.
#[derive(Debug, Clone)]
pub enum ServerNotification {
    McpServerStatusUpdated(McpServerStatusUpdatedNotification),
    ItemStarted(ItemNotification),
    ItemCompleted(ItemNotification),
    TokenUsageUpdated(ThreadTokenUsageUpdatedNotification),
    Error(ErrorNotification),
    TurnCompleted(TurnCompletedNotification),
    /// A thread went idle or active (`thread/status/changed`).
    ThreadStatusChanged(ThreadStatusChangedNotification),
    /// A sign-in ended (`account/login/completed`).
    AccountLoginCompleted(AccountLoginCompletedNotification),
    /// The account changed (`account/updated`: signed in or out); the bridge
    /// reads it again rather than reading this.
    AccountUpdated,
    /// A method the bridge does not use (deltas, warnings, …).
    Unused {
        method: String,
        thread_id: Option<String>,
    },
}

impl ServerNotification {
    pub const MCP_SERVER_STATUS_UPDATED: &'static str = "mcpServer/startupStatus/updated";
    pub const ITEM_STARTED: &'static str = "item/started";
    pub const ITEM_COMPLETED: &'static str = "item/completed";
    pub const TOKEN_USAGE_UPDATED: &'static str = "thread/tokenUsage/updated";
    pub const ERROR: &'static str = "error";
    pub const TURN_COMPLETED: &'static str = "turn/completed";
    pub const THREAD_STATUS_CHANGED: &'static str = "thread/status/changed";
    pub const ACCOUNT_LOGIN_COMPLETED: &'static str = "account/login/completed";
    pub const ACCOUNT_UPDATED: &'static str = "account/updated";

    /// Reads a notification of `method`.
    pub fn parse(method: &str, params: Value) -> Result<ServerNotification, Unreadable> {
        Ok(match method {
            Self::MCP_SERVER_STATUS_UPDATED => {
                ServerNotification::McpServerStatusUpdated(parse(method, params)?)
            }
            Self::ITEM_STARTED => ServerNotification::ItemStarted(parse(method, params)?),
            Self::ITEM_COMPLETED => ServerNotification::ItemCompleted(parse(method, params)?),
            Self::TOKEN_USAGE_UPDATED => {
                ServerNotification::TokenUsageUpdated(parse(method, params)?)
            }
            Self::ERROR => ServerNotification::Error(parse(method, params)?),
            Self::TURN_COMPLETED => ServerNotification::TurnCompleted(parse(method, params)?),
            Self::THREAD_STATUS_CHANGED => {
                ServerNotification::ThreadStatusChanged(parse(method, params)?)
            }
            Self::ACCOUNT_LOGIN_COMPLETED => {
                ServerNotification::AccountLoginCompleted(parse(method, params)?)
            }
            Self::ACCOUNT_UPDATED => ServerNotification::AccountUpdated,
            _ => ServerNotification::Unused {
                method: method.to_owned(),
                thread_id: ThreadScoped::of(&params),
            },
        })
    }
}

/// The thread a message is about, for any method that names one.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadScoped {
    #[serde(default)]
    pub thread_id: Option<String>,
}

impl ThreadScoped {
    pub fn of(params: &Value) -> Option<String> {
        ThreadScoped::deserialize(params)
            .ok()
            .and_then(|t| t.thread_id)
    }
}

/// `mcpServer/startupStatus/updated` (`v2/McpServerStatusUpdatedNotification`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpServerStatusUpdatedNotification {
    #[serde(default)]
    pub thread_id: Option<String>,
    pub name: String,
    pub status: McpServerStartupState,
    /// What went wrong, in words.
    #[serde(default)]
    pub error: Option<String>,
    /// What went wrong, as a code (`reauthenticationRequired`).
    #[serde(default)]
    pub failure_reason: Option<String>,
}

/// `v2/McpServerStartupState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum McpServerStartupState {
    Starting,
    Ready,
    Failed,
    Cancelled,
    #[serde(other)]
    Unknown,
}

/// `item/started` and `item/completed` (`v2/ItemStartedNotification`,
/// `v2/ItemCompletedNotification`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemNotification {
    pub thread_id: String,
    pub item: ThreadItem,
}

/// `thread/tokenUsage/updated` (`v2/ThreadTokenUsageUpdatedNotification`):
/// the thread's cumulative usage, after each model request of a turn.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadTokenUsageUpdatedNotification {
    pub thread_id: String,
    pub token_usage: ThreadTokenUsage,
}

/// `v2/ThreadTokenUsage`: the thread's totals, and the last request's share.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct ThreadTokenUsage {
    pub total: TokenUsageBreakdown,
    pub last: TokenUsageBreakdown,
}

/// `v2/TokenUsageBreakdown`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsageBreakdown {
    #[serde(default)]
    pub input_tokens: i64,
    #[serde(default)]
    pub cached_input_tokens: i64,
    #[serde(default)]
    pub output_tokens: i64,
    #[serde(default)]
    pub reasoning_output_tokens: i64,
    #[serde(default)]
    pub total_tokens: i64,
}

/// `error` (`v2/ErrorNotification`): the turn's failure, before its
/// `turn/completed`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorNotification {
    pub thread_id: String,
    #[serde(default)]
    pub turn_id: Option<String>,
    pub error: TurnError,
    /// `false`: Codex gave up on the turn (a `turn/completed` that failed
    /// should follow); `true`: it retries the request itself. Absent: not
    /// said, and nothing is assumed.
    #[serde(default)]
    pub will_retry: Option<bool>,
}

/// `turn/completed` (`v2/TurnCompletedNotification`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnCompletedNotification {
    pub thread_id: String,
    pub turn: Turn,
}

/// `thread/status/changed`: the thread's loaded status.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStatusChangedNotification {
    pub thread_id: String,
    pub status: ThreadStatus,
}

/// A thread's status, by its `type`; flags and other kinds are not read.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ThreadStatus {
    NotLoaded,
    Idle,
    SystemError,
    Active,
    #[serde(other)]
    Other,
}
