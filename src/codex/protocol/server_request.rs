//! The server's requests of the bridge: the approvals it hands to a person,
//! their answers, and the explicit "no" to every request no turn waits for.

use super::{parse, ErrorBody, Unreadable, METHOD_NOT_FOUND};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The approval requests the bridge hands to a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalKind {
    /// `item/commandExecution/requestApproval`.
    Command,
    /// `item/fileChange/requestApproval`.
    FileChange,
    /// `mcpServer/elicitation/request` (an MCP tool call under `on-request`).
    McpTool,
}

impl ApprovalKind {
    pub const COMMAND: &'static str = "item/commandExecution/requestApproval";
    pub const FILE_CHANGE: &'static str = "item/fileChange/requestApproval";
    pub const MCP_TOOL: &'static str = "mcpServer/elicitation/request";

    pub fn of_method(method: &str) -> Option<ApprovalKind> {
        match method {
            Self::COMMAND => Some(ApprovalKind::Command),
            Self::FILE_CHANGE => Some(ApprovalKind::FileChange),
            Self::MCP_TOOL => Some(ApprovalKind::McpTool),
            _ => None,
        }
    }

    /// The kind's name in the bridge's turn events and audit.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalKind::Command => "command",
            ApprovalKind::FileChange => "file_change",
            ApprovalKind::McpTool => "mcp_tool",
        }
    }

    /// The answer to a request of this kind, in its own shape.
    pub fn answer(self, accept: bool) -> ApprovalAnswer {
        match self {
            ApprovalKind::Command => ApprovalAnswer::Command(CommandApprovalResponse {
                decision: if accept {
                    CommandApprovalDecision::Accept
                } else {
                    CommandApprovalDecision::Decline
                },
            }),
            ApprovalKind::FileChange => ApprovalAnswer::FileChange(FileChangeApprovalResponse {
                decision: if accept {
                    FileChangeApprovalDecision::Accept
                } else {
                    FileChangeApprovalDecision::Decline
                },
            }),
            ApprovalKind::McpTool => ApprovalAnswer::McpTool(ElicitationResponse {
                action: if accept {
                    ElicitationAction::Accept
                } else {
                    ElicitationAction::Decline
                },
                content: Value::Null,
            }),
        }
    }
}

/// An approval request of the server, as the bridge reads it.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub kind: ApprovalKind,
    pub thread_id: String,
    pub detail: ApprovalDetail,
}

impl ApprovalRequest {
    /// Reads the request if `method` is an approval (`None`: it is not).
    pub fn parse(method: &str, params: Value) -> Option<Result<ApprovalRequest, Unreadable>> {
        let kind = ApprovalKind::of_method(method)?;
        let read = match kind {
            ApprovalKind::Command => parse::<CommandApprovalParams>(method, params)
                .map(|p| (p.thread_id.clone(), p.detail())),
            ApprovalKind::FileChange => parse::<FileChangeApprovalParams>(method, params)
                .map(|p| (p.thread_id.clone(), p.detail())),
            ApprovalKind::McpTool => parse::<ElicitationParams>(method, params)
                .map(|p| (p.thread_id.clone(), p.detail())),
        };
        Some(read.map(|(thread_id, detail)| ApprovalRequest {
            kind,
            thread_id,
            detail,
        }))
    }
}

/// What, where and why, as Codex described it: what a person sees when
/// asked to decide.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalDetail {
    pub command: Option<String>,
    pub cwd: Option<String>,
    pub reason: Option<String>,
    pub grant_root: Option<String>,
    pub item_id: Option<String>,
    pub message: Option<String>,
    pub server_name: Option<String>,
    pub tool: Option<String>,
}

/// `CommandExecutionRequestApprovalParams`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandApprovalParams {
    pub thread_id: String,
    pub item_id: String,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

impl CommandApprovalParams {
    fn detail(self) -> ApprovalDetail {
        ApprovalDetail {
            command: self.command,
            cwd: self.cwd,
            reason: self.reason,
            item_id: Some(self.item_id),
            ..Default::default()
        }
    }
}

/// `FileChangeRequestApprovalParams`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileChangeApprovalParams {
    pub thread_id: String,
    pub item_id: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub grant_root: Option<String>,
}

impl FileChangeApprovalParams {
    fn detail(self) -> ApprovalDetail {
        ApprovalDetail {
            reason: self.reason,
            grant_root: self.grant_root,
            item_id: Some(self.item_id),
            ..Default::default()
        }
    }
}

/// `McpServerElicitationRequestParams`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitationParams {
    pub thread_id: String,
    pub server_name: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(rename = "_meta", default)]
    pub meta: Option<ElicitationMeta>,
}

/// Codex's `_meta` of a tool-call elicitation (free-form in the schema).
#[derive(Debug, Clone, Deserialize)]
pub struct ElicitationMeta {
    #[serde(default)]
    pub tool_name: Option<String>,
}

impl ElicitationParams {
    fn detail(self) -> ApprovalDetail {
        ApprovalDetail {
            message: self.message,
            server_name: Some(self.server_name),
            tool: self.meta.and_then(|m| m.tool_name),
            ..Default::default()
        }
    }
}

/// An answer to an approval request, in its kind's shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ApprovalAnswer {
    Command(CommandApprovalResponse),
    FileChange(FileChangeApprovalResponse),
    McpTool(ElicitationResponse),
}

/// `CommandExecutionRequestApprovalResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandApprovalResponse {
    pub decision: CommandApprovalDecision,
}

/// `CommandExecutionApprovalDecision` (the plain ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum CommandApprovalDecision {
    Accept,
    Decline,
}

/// `FileChangeRequestApprovalResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileChangeApprovalResponse {
    pub decision: FileChangeApprovalDecision,
}

/// `FileChangeApprovalDecision` (the plain ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FileChangeApprovalDecision {
    Accept,
    Decline,
}

/// `McpServerElicitationRequestResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ElicitationResponse {
    pub action: ElicitationAction,
    /// The form's content: none, for a tool-call approval.
    pub content: Value,
}

/// `McpServerElicitationAction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ElicitationAction {
    Accept,
    Decline,
}

/// The legacy (v1) approval requests, `execCommandApproval` and
/// `applyPatchApproval`: `ExecCommandApprovalResponse`,
/// `ApplyPatchApprovalResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LegacyApprovalResponse {
    pub decision: ReviewDecision,
}

/// `ReviewDecision` (the refusal).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ReviewDecision {
    Denied { rejection: String },
}

/// `PermissionsRequestApprovalResponse`: what is granted (nothing, here).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PermissionsApprovalResponse {
    pub permissions: GrantedPermissionProfile,
    pub scope: PermissionGrantScope,
}

/// `GrantedPermissionProfile`: empty grants nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GrantedPermissionProfile {}

/// `PermissionGrantScope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PermissionGrantScope {
    Turn,
}

/// `ToolRequestUserInputResponse`: answers by question id (none, here).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UserInputResponse {
    pub answers: BTreeMap<String, Value>,
}

/// `item/tool/call`: the model called one of the bridge's dynamic tools.
pub const DYNAMIC_TOOL_CALL: &str = "item/tool/call";

/// `DynamicToolCallParams`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicToolCallParams {
    pub thread_id: String,
    pub turn_id: String,
    pub call_id: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub tool: String,
    #[serde(default)]
    pub arguments: Value,
}

impl DynamicToolCallParams {
    pub fn parse(params: Value) -> Result<DynamicToolCallParams, Unreadable> {
        parse(DYNAMIC_TOOL_CALL, params)
    }
}

impl DynamicToolCallResponse {
    /// One text for the model, and whether the call did what it asked.
    pub fn text(success: bool, text: String) -> DynamicToolCallResponse {
        DynamicToolCallResponse {
            content_items: vec![DynamicToolOutput::InputText { text }],
            success,
        }
    }
}

/// `DynamicToolCallResponse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicToolCallResponse {
    pub content_items: Vec<DynamicToolOutput>,
    pub success: bool,
}

/// `v2/DynamicToolCallOutputContentItem` (text).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum DynamicToolOutput {
    InputText { text: String },
}

/// How codex-bridge says no to a request of the server that no turn waits
/// for: an answer in the request's own shape where the protocol has a "no",
/// else a JSON-RPC error; and why, for the log and the audit.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub answer: Result<RefusalAnswer, ErrorBody>,
    pub why: &'static str,
}

/// A "no" in the shape of the request it answers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RefusalAnswer {
    Approval(ApprovalAnswer),
    Legacy(LegacyApprovalResponse),
    Permissions(PermissionsApprovalResponse),
    UserInput(UserInputResponse),
    DynamicTool(DynamicToolCallResponse),
}

impl Refusal {
    /// The refusal of a request of `method`.
    pub fn of(method: &str) -> Refusal {
        let no_turn = "no turn of codex-bridge is waiting for it";
        if let Some(kind) = ApprovalKind::of_method(method) {
            return Refusal {
                answer: Ok(RefusalAnswer::Approval(kind.answer(false))),
                why: no_turn,
            };
        }
        let (answer, why) = match method {
            "execCommandApproval" | "applyPatchApproval" => (
                Ok(RefusalAnswer::Legacy(LegacyApprovalResponse {
                    decision: ReviewDecision::Denied {
                        rejection: "codex-bridge answers only the v2 approval requests".into(),
                    },
                })),
                "legacy approval request; codex-bridge answers the v2 ones",
            ),
            "item/permissions/requestApproval" => (
                Ok(RefusalAnswer::Permissions(PermissionsApprovalResponse {
                    permissions: GrantedPermissionProfile::default(),
                    scope: PermissionGrantScope::Turn,
                })),
                "extra permissions are not granted from a comment",
            ),
            "item/tool/requestUserInput" => (
                Ok(RefusalAnswer::UserInput(UserInputResponse::default())),
                "no person answers questions inside a turn; ask in the reply instead",
            ),
            "item/tool/call" => (
                Ok(RefusalAnswer::DynamicTool(DynamicToolCallResponse {
                    content_items: vec![DynamicToolOutput::InputText {
                        text: "no turn of codex-bridge is waiting for this call".into(),
                    }],
                    success: false,
                })),
                "a tool call for a thread no turn of codex-bridge drives",
            ),
            "account/chatgptAuthTokens/refresh" | "attestation/generate" => (
                Err(ErrorBody {
                    code: METHOD_NOT_FOUND,
                    message: "codex-bridge does not provide this".into(),
                }),
                "codex-bridge does not provide account tokens or attestations",
            ),
            _ => (
                Err(ErrorBody {
                    code: METHOD_NOT_FOUND,
                    message: "codex-bridge does not handle this request".into(),
                }),
                "unknown request type",
            ),
        };
        Refusal { answer, why }
    }
}
