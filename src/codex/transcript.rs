//! Codex's items and token usage as the bridge's transcript shapes
//! ([`crate::agent::transcript`]): what a command printed, which files a
//! patch changed and how, what an MCP tool was asked and answered.

use super::protocol::{
    CommandExecutionStatus, McpToolCallStatus, PatchApplyStatus, PatchChangeKind, ThreadItem,
    TokenUsageBreakdown,
};
use crate::agent::transcript::{
    ChangeKind, FileDiff, ItemBody, ItemStatus, TokenCounts, TranscriptItem,
};

/// The transcript's view of a Codex item, as it stands in this notification.
pub(super) fn transcript_item(item: &ThreadItem) -> TranscriptItem {
    let (status, body) = match item {
        ThreadItem::UserMessage(m) => (
            ItemStatus::Completed,
            ItemBody::UserMessage {
                text: m.text(),
                client_id: m.client_id.clone(),
                truncated: false,
            },
        ),
        ThreadItem::AgentMessage(m) => (
            ItemStatus::Completed,
            ItemBody::AgentMessage {
                text: m.text.clone(),
                truncated: false,
            },
        ),
        // A review's result is what the turn answered: shown as its message.
        ThreadItem::ExitedReviewMode(r) => (
            ItemStatus::Completed,
            ItemBody::AgentMessage {
                text: r.review.clone(),
                truncated: false,
            },
        ),
        ThreadItem::Reasoning(r) => (
            ItemStatus::Completed,
            ItemBody::Reasoning {
                summary: r.summary.join("\n\n"),
                truncated: false,
            },
        ),
        ThreadItem::CommandExecution(c) => (
            match c.status {
                CommandExecutionStatus::InProgress => ItemStatus::InProgress,
                CommandExecutionStatus::Completed => ItemStatus::Completed,
                CommandExecutionStatus::Failed => ItemStatus::Failed,
                CommandExecutionStatus::Declined => ItemStatus::Declined,
                CommandExecutionStatus::Unknown => ItemStatus::Unknown,
            },
            ItemBody::CommandExecution {
                command: c.command.clone(),
                cwd: c.cwd.clone(),
                exit_code: c.exit_code,
                duration_ms: c.duration_ms,
                output_bytes: c.aggregated_output.as_ref().map_or(0, |o| o.len() as i64),
                output: c.aggregated_output.clone(),
                output_truncated: false,
            },
        ),
        ThreadItem::FileChange(f) => (
            match f.status {
                PatchApplyStatus::InProgress => ItemStatus::InProgress,
                PatchApplyStatus::Completed => ItemStatus::Completed,
                PatchApplyStatus::Failed => ItemStatus::Failed,
                PatchApplyStatus::Declined => ItemStatus::Declined,
                PatchApplyStatus::Unknown => ItemStatus::Unknown,
            },
            ItemBody::FileChange {
                changes: f
                    .changes
                    .iter()
                    .map(|c| {
                        let (change, move_path) = match &c.kind {
                            PatchChangeKind::Add => (ChangeKind::Add, None),
                            PatchChangeKind::Delete => (ChangeKind::Delete, None),
                            PatchChangeKind::Update { move_path } => {
                                (ChangeKind::Update, move_path.clone())
                            }
                            PatchChangeKind::Unknown => (ChangeKind::Unknown, None),
                        };
                        FileDiff::new(c.path.clone(), change, move_path, c.diff.clone())
                    })
                    .collect(),
            },
        ),
        ThreadItem::McpToolCall(call) => (
            match call.status {
                McpToolCallStatus::InProgress => ItemStatus::InProgress,
                McpToolCallStatus::Completed => ItemStatus::Completed,
                McpToolCallStatus::Failed => ItemStatus::Failed,
                McpToolCallStatus::Unknown => ItemStatus::Unknown,
            },
            ItemBody::McpToolCall {
                server: call.server.clone(),
                tool: call.tool.clone(),
                arguments: call.arguments.clone(),
                error: call.error.as_ref().map(|e| e.message.clone()),
                result: call.result_text(),
                duration_ms: call.duration_ms,
                truncated: false,
            },
        ),
        ThreadItem::Other { kind, .. } => (
            ItemStatus::Completed,
            ItemBody::Other {
                item_type: kind.clone(),
            },
        ),
    };
    TranscriptItem {
        item_id: item.id().to_owned(),
        status,
        body,
    }
}

/// Codex's breakdown in the bridge's words.
pub(super) fn token_counts(b: &TokenUsageBreakdown) -> TokenCounts {
    TokenCounts {
        input: b.input_tokens,
        cached_input: b.cached_input_tokens,
        output: b.output_tokens,
        reasoning: b.reasoning_output_tokens,
        total: b.total_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(v: serde_json::Value) -> TranscriptItem {
        transcript_item(&serde_json::from_value(v).unwrap())
    }

    #[test]
    fn a_command_keeps_its_command_exit_code_and_output() {
        let t = item(
            json!({"type": "commandExecution", "id": "call_1", "command": "cargo test",
            "cwd": "/w", "commandActions": [], "status": "failed", "exitCode": 101,
            "aggregatedOutput": "error: 1 test failed\n", "durationMs": 1200}),
        );
        assert_eq!(t.item_id, "call_1");
        assert_eq!(t.status, ItemStatus::Failed);
        assert_eq!(
            t.body,
            ItemBody::CommandExecution {
                command: "cargo test".into(),
                cwd: "/w".into(),
                exit_code: Some(101),
                duration_ms: Some(1200),
                output: Some("error: 1 test failed\n".into()),
                output_bytes: 21,
                output_truncated: false,
            }
        );
    }

    #[test]
    fn a_file_change_lists_its_files_with_their_stat() {
        // As codex 0.171.0 reports an added file and an update that moves one.
        let t = item(
            json!({"type": "fileChange", "id": "call_2", "status": "completed", "changes": [
            {"path": "/w/hello.txt", "kind": {"type": "add"}, "diff": "hello\nworld\n"},
            {"path": "/w/a.rs", "kind": {"type": "update", "move_path": "/w/b.rs"},
             "diff": "@@ -1 +1 @@\n-old\n+new\n"},
            {"path": "/w/gone.rs", "kind": {"type": "delete"}, "diff": "x\n"}]}),
        );
        let ItemBody::FileChange { changes } = t.body else {
            panic!("{t:?}")
        };
        let summary: Vec<_> = changes
            .iter()
            .map(|c| (c.path.as_str(), c.change, c.added, c.removed))
            .collect();
        assert_eq!(
            summary,
            [
                ("/w/hello.txt", ChangeKind::Add, 2, 0),
                ("/w/a.rs", ChangeKind::Update, 1, 1),
                ("/w/gone.rs", ChangeKind::Delete, 0, 1)
            ]
        );
        assert_eq!(changes[1].move_path.as_deref(), Some("/w/b.rs"));
    }

    #[test]
    fn messages_tool_calls_and_unknown_items_read_as_the_transcript_shows_them() {
        let t = item(
            json!({"type": "userMessage", "id": "u", "clientId": "op-1", "content": [
            {"type": "text", "text": "first", "text_elements": []},
            {"type": "image", "url": "http://x/y.png"},
            {"type": "text", "text": "second", "text_elements": []}]}),
        );
        assert!(
            matches!(&t.body, ItemBody::UserMessage { text, client_id: Some(c), .. } if text == "first\nsecond" && c == "op-1"),
            "{t:?}"
        );
        let t = item(
            json!({"type": "mcpToolCall", "id": "m", "server": "gitea", "tool": "add_comment",
            "status": "completed", "arguments": {"body": "hi"}, "durationMs": 30,
            "result": {"content": [{"type": "text", "text": "posted"}, {"type": "text", "text": "id 7"}]}}),
        );
        assert!(
            matches!(&t.body, ItemBody::McpToolCall { server, result: Some(r), duration_ms: Some(30), .. } if server == "gitea" && r == "posted\nid 7"),
            "{t:?}"
        );
        let t = item(json!({"type": "reasoning", "id": "r", "summary": ["a", "b"], "content": []}));
        assert!(matches!(&t.body, ItemBody::Reasoning { summary, .. } if summary == "a\n\nb"));
        // A transcript-only item that cannot be read is only named.
        let t = item(json!({"type": "commandExecution", "id": "c", "status": 7}));
        assert_eq!(
            (t.item_id.as_str(), t.body.clone()),
            (
                "c",
                ItemBody::Other {
                    item_type: "commandExecution".into()
                }
            )
        );
        let t = item(json!({"type": "webSearch", "id": "w", "query": "q"}));
        assert_eq!(t.item_id, "w");
        assert_eq!(
            t.body,
            ItemBody::Other {
                item_type: "webSearch".into()
            }
        );
    }
}
