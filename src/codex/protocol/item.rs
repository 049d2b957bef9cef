//! A turn's items (`v2/ThreadItem`), live in `item/started` and
//! `item/completed` and in a thread's history: the ones the bridge acts on
//! (the user message, the agent's messages, MCP tool calls) and the ones its
//! transcript shows (commands, file changes, reasoning). Their fields default
//! where Codex may leave them out, and an item only the transcript reads that
//! cannot be read is only named: a history page never fails on it.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// An item of a turn (`v2/ThreadItem`), by its `type`; any other type only
/// by its name and id.
#[derive(Debug, Clone)]
pub enum ThreadItem {
    UserMessage(UserMessageItem),
    AgentMessage(AgentMessageItem),
    McpToolCall(McpToolCallItem),
    CommandExecution(CommandExecutionItem),
    FileChange(FileChangeItem),
    Reasoning(ReasoningItem),
    /// The end of a review (`review/start`): `review` is its result.
    ExitedReviewMode(ReviewItem),
    Other {
        kind: String,
        id: String,
    },
}

impl ThreadItem {
    /// The item's `type`.
    pub fn kind(&self) -> &str {
        match self {
            ThreadItem::UserMessage(_) => "userMessage",
            ThreadItem::AgentMessage(_) => "agentMessage",
            ThreadItem::McpToolCall(_) => "mcpToolCall",
            ThreadItem::CommandExecution(_) => "commandExecution",
            ThreadItem::FileChange(_) => "fileChange",
            ThreadItem::Reasoning(_) => "reasoning",
            ThreadItem::ExitedReviewMode(_) => "exitedReviewMode",
            ThreadItem::Other { kind, .. } => kind,
        }
    }

    /// The item's id, unique in its turn.
    pub fn id(&self) -> &str {
        match self {
            ThreadItem::UserMessage(i) => &i.id,
            ThreadItem::AgentMessage(i) => &i.id,
            ThreadItem::McpToolCall(i) => &i.id,
            ThreadItem::CommandExecution(i) => &i.id,
            ThreadItem::FileChange(i) => &i.id,
            ThreadItem::Reasoning(i) => &i.id,
            ThreadItem::ExitedReviewMode(i) => &i.id,
            ThreadItem::Other { id, .. } => id,
        }
    }
}

impl<'de> Deserialize<'de> for ThreadItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        struct Kind {
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            id: String,
        }
        fn read<'a, T: Deserialize<'a>, E: Error>(value: &'a Value) -> Result<T, E> {
            T::deserialize(value).map_err(E::custom)
        }
        let value = Value::deserialize(d)?;
        let Kind { kind, id } = read(&value)?;
        let item = match kind.as_str() {
            "userMessage" => ThreadItem::UserMessage(read(&value)?),
            "agentMessage" => ThreadItem::AgentMessage(read(&value)?),
            "mcpToolCall" => ThreadItem::McpToolCall(read(&value)?),
            "exitedReviewMode" => ThreadItem::ExitedReviewMode(read(&value)?),
            // Only the transcript reads these: one it cannot read is only
            // named, and never fails the message (or history page) it is in.
            "commandExecution" => read::<_, D::Error>(&value)
                .map(ThreadItem::CommandExecution)
                .unwrap_or(ThreadItem::Other { kind, id }),
            "fileChange" => read::<_, D::Error>(&value)
                .map(ThreadItem::FileChange)
                .unwrap_or(ThreadItem::Other { kind, id }),
            "reasoning" => read::<_, D::Error>(&value)
                .map(ThreadItem::Reasoning)
                .unwrap_or(ThreadItem::Other { kind, id }),
            _ => ThreadItem::Other { kind, id },
        };
        Ok(item)
    }
}

/// `v2/ThreadItem` `userMessage`: `clientId` is our operation id, the proof
/// that Codex recorded our message.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserMessageItem {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(default)]
    pub content: Vec<UserInputPart>,
}

impl UserMessageItem {
    /// The message's text parts, one after the other.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|c| match c {
                UserInputPart::Text { text } => Some(text.as_str()),
                UserInputPart::Other => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// One part of a user message (`v2/UserInput`): its text, if it is text.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum UserInputPart {
    Text {
        text: String,
    },
    /// An image, a file, a mention: not text.
    #[serde(other)]
    Other,
}

/// `v2/ThreadItem` `agentMessage`.
#[derive(Debug, Clone, Deserialize)]
pub struct AgentMessageItem {
    #[serde(default)]
    pub id: String,
    pub text: String,
}

/// `v2/ThreadItem` `exitedReviewMode`: the review's result, as Codex
/// rendered it for a reader.
#[derive(Debug, Clone, Deserialize)]
pub struct ReviewItem {
    #[serde(default)]
    pub id: String,
    pub review: String,
}

/// `v2/ThreadItem` `reasoning`: the summary (the raw content is not kept).
#[derive(Debug, Clone, Deserialize)]
pub struct ReasoningItem {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub summary: Vec<String>,
}

/// `v2/ThreadItem` `commandExecution`: a shell command the agent ran.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandExecutionItem {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub cwd: String,
    pub status: CommandExecutionStatus,
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// stdout and stderr together.
    #[serde(default)]
    pub aggregated_output: Option<String>,
    #[serde(default)]
    pub duration_ms: Option<i64>,
}

/// `v2/CommandExecutionStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CommandExecutionStatus {
    InProgress,
    Completed,
    Failed,
    Declined,
    #[serde(other)]
    Unknown,
}

/// `v2/ThreadItem` `fileChange`: files an `apply_patch` changed.
#[derive(Debug, Clone, Deserialize)]
pub struct FileChangeItem {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub changes: Vec<FileUpdateChange>,
    pub status: PatchApplyStatus,
}

/// `v2/FileUpdateChange`: one file; `diff` is a unified diff for an update
/// and the file's content for an add or a delete.
#[derive(Debug, Clone, Deserialize)]
pub struct FileUpdateChange {
    pub path: String,
    pub kind: PatchChangeKind,
    #[serde(default)]
    pub diff: String,
}

/// `v2/PatchChangeKind`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum PatchChangeKind {
    Add,
    Delete,
    Update {
        #[serde(default)]
        move_path: Option<String>,
    },
    #[serde(other)]
    Unknown,
}

/// `v2/PatchApplyStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PatchApplyStatus {
    InProgress,
    Completed,
    Failed,
    Declined,
    #[serde(other)]
    Unknown,
}

/// `v2/ThreadItem` `mcpToolCall`: how the agent posts its answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpToolCallItem {
    #[serde(default)]
    pub id: String,
    pub server: String,
    pub tool: String,
    #[serde(default)]
    pub arguments: Value,
    pub status: McpToolCallStatus,
    #[serde(default)]
    pub error: Option<McpToolCallError>,
    #[serde(default)]
    pub result: Option<McpToolCallResult>,
    #[serde(default)]
    pub duration_ms: Option<i64>,
}

impl McpToolCallItem {
    /// Why the call failed, if it did: the call's error, or for a tool that
    /// answered with an error result (Codex marks that `failed` and keeps
    /// the tool's own words in the result), the result's first text.
    pub fn failure(&self) -> Option<String> {
        if let Some(e) = &self.error {
            return Some(e.message.clone());
        }
        (self.status == McpToolCallStatus::Failed).then(|| {
            self.result
                .as_ref()
                .and_then(|r| r.content.iter().find_map(|c| c.text.clone()))
                .unwrap_or_else(|| "the tool reported an error".to_owned())
        })
    }

    /// The text blocks of the tool's answer, one after the other.
    pub fn result_text(&self) -> Option<String> {
        let texts: Vec<&str> = self
            .result
            .as_ref()?
            .content
            .iter()
            .filter_map(|c| c.text.as_deref())
            .collect();
        (!texts.is_empty()).then(|| texts.join("\n"))
    }
}

/// `v2/McpToolCallStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum McpToolCallStatus {
    InProgress,
    Completed,
    Failed,
    #[serde(other)]
    Unknown,
}

impl McpToolCallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            McpToolCallStatus::InProgress => "inProgress",
            McpToolCallStatus::Completed => "completed",
            McpToolCallStatus::Failed => "failed",
            McpToolCallStatus::Unknown => "unknown",
        }
    }
}

/// `v2/McpToolCallError`.
#[derive(Debug, Clone, Deserialize)]
pub struct McpToolCallError {
    pub message: String,
}

/// `v2/McpToolCallResult`: the tool's MCP content blocks.
#[derive(Debug, Clone, Deserialize)]
pub struct McpToolCallResult {
    #[serde(default)]
    pub content: Vec<McpContentBlock>,
}

/// An MCP content block (Codex passes them through untyped): its text, if
/// it is a text block.
#[derive(Debug, Clone, Deserialize)]
pub struct McpContentBlock {
    #[serde(default)]
    pub text: Option<String>,
}
