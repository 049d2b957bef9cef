//! What a turn did, as the bridge keeps it for the admin view: the prompt as
//! sent, then the runtime's items (messages, commands, file changes, MCP tool
//! calls, reasoning, approvals) and the thread's token totals.
//!
//! These are the bridge's own shapes, not the runtime's: a runtime turns its
//! items into [`TranscriptItem`]s, the session actor scrubs secrets from them,
//! and the store keeps them [`bounded`](TranscriptItem::bounded), so one
//! chatty turn cannot grow the database without limit.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How much of a command's output is kept: its last 8 KiB.
pub const OUTPUT_TAIL_BYTES: usize = 8 * 1024;
/// How much of an item's diffs is kept, all its files together.
pub const DIFF_BYTES_PER_ITEM: usize = 256 * 1024;
/// How much of a message, a reasoning summary or a tool result is kept.
pub const TEXT_BYTES: usize = 64 * 1024;
/// How much of a prompt is kept (a prompt carries the Issue's context).
pub const PROMPT_BYTES: usize = 256 * 1024;
/// How much of an MCP tool call's arguments (as JSON) is kept.
pub const ARGUMENTS_BYTES: usize = 16 * 1024;

/// Whether an item notification starts or ends the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemPhase {
    Started,
    Completed,
}

/// Where an item stands. The runtime's statuses, and the bridge's own for
/// the prompt (`sent`) and approvals (`pending`, then `accepted` or `declined`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ItemStatus {
    InProgress,
    Completed,
    Failed,
    Declined,
    Sent,
    Pending,
    Accepted,
    /// A status this bridge does not know.
    #[serde(other)]
    Unknown,
}

impl ItemStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ItemStatus::InProgress => "inProgress",
            ItemStatus::Completed => "completed",
            ItemStatus::Failed => "failed",
            ItemStatus::Declined => "declined",
            ItemStatus::Sent => "sent",
            ItemStatus::Pending => "pending",
            ItemStatus::Accepted => "accepted",
            ItemStatus::Unknown => "unknown",
        }
    }

    /// Reads a stored status; anything else is `unknown`.
    pub fn parse(text: &str) -> ItemStatus {
        serde_json::from_value(Value::String(text.to_owned())).unwrap_or(ItemStatus::Unknown)
    }
}

/// One item of a turn's transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptItem {
    /// The runtime's id of the item, unique in its turn (the bridge's own
    /// items: `prompt`, `approval:<key>`).
    pub item_id: String,
    pub status: ItemStatus,
    pub body: ItemBody,
}

/// A piece of the prompt; `untrusted` marks text someone else wrote (the
/// comment), which the prompt hands to the model as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptPart {
    pub text: String,
    #[serde(default)]
    pub untrusted: bool,
}

impl PromptPart {
    pub fn trusted(text: impl Into<String>) -> PromptPart {
        PromptPart {
            text: text.into(),
            untrusted: false,
        }
    }

    pub fn untrusted(text: impl Into<String>) -> PromptPart {
        PromptPart {
            text: text.into(),
            untrusted: true,
        }
    }
}

/// The prompt of a turn, in parts; [`Prompt::text`] is what is sent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Prompt {
    pub parts: Vec<PromptPart>,
}

impl Prompt {
    pub fn text(&self) -> String {
        self.parts.iter().map(|p| p.text.as_str()).collect()
    }

    /// The prompt as the first item of its turn's transcript.
    pub fn item(&self) -> TranscriptItem {
        TranscriptItem {
            item_id: "prompt".into(),
            status: ItemStatus::Sent,
            body: ItemBody::Prompt {
                parts: self.parts.clone(),
                truncated: false,
            },
        }
    }
}

/// What a file change did to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeKind {
    Add,
    Delete,
    Update,
    #[serde(other)]
    Unknown,
}

/// One file of a file change, with its diff stat (counted on the whole
/// diff, before any of it was cut).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileDiff {
    pub path: String,
    pub change: ChangeKind,
    /// Where an update moved the file, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub move_path: Option<String>,
    pub added: i64,
    pub removed: i64,
    /// A unified diff for an update; the whole content for an add or delete.
    pub diff: String,
    /// The diff was cut to the item's budget ([`DIFF_BYTES_PER_ITEM`]).
    #[serde(default)]
    pub truncated: bool,
}

impl FileDiff {
    /// A file's entry, its stat counted from `diff`.
    pub fn new(path: String, change: ChangeKind, move_path: Option<String>, diff: String) -> Self {
        let (added, removed) = diff_stat(change, &diff);
        FileDiff {
            path,
            change,
            move_path,
            added,
            removed,
            diff,
            truncated: false,
        }
    }
}

/// Lines added and removed. An add's or delete's diff is the file's content;
/// an update's is a unified diff, whose `+++`/`---` headers are not lines.
pub fn diff_stat(change: ChangeKind, diff: &str) -> (i64, i64) {
    let lines = diff.lines().count() as i64;
    match change {
        ChangeKind::Add => (lines, 0),
        ChangeKind::Delete => (0, lines),
        ChangeKind::Update | ChangeKind::Unknown => diff.lines().fold((0, 0), |(a, r), l| {
            if l.starts_with("+++") || l.starts_with("---") {
                (a, r)
            } else if l.starts_with('+') {
                (a + 1, r)
            } else if l.starts_with('-') {
                (a, r + 1)
            } else {
                (a, r)
            }
        }),
    }
}

/// What an item is, with what the transcript shows of it. Stored as JSON
/// (the `kind` names the variant) and served as is by the admin API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum ItemBody {
    /// The turn's input as the bridge sent it.
    Prompt {
        parts: Vec<PromptPart>,
        #[serde(default)]
        truncated: bool,
    },
    /// A user message the runtime recorded that is not the bridge's prompt.
    UserMessage {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_id: Option<String>,
        #[serde(default)]
        truncated: bool,
    },
    AgentMessage {
        text: String,
        #[serde(default)]
        truncated: bool,
    },
    Reasoning {
        summary: String,
        #[serde(default)]
        truncated: bool,
    },
    CommandExecution {
        command: String,
        cwd: String,
        exit_code: Option<i64>,
        duration_ms: Option<i64>,
        /// The output's tail ([`OUTPUT_TAIL_BYTES`]), stdout and stderr together.
        output: Option<String>,
        /// How long the whole output was, in bytes.
        #[serde(default)]
        output_bytes: i64,
        #[serde(default)]
        output_truncated: bool,
    },
    FileChange {
        changes: Vec<FileDiff>,
    },
    McpToolCall {
        server: String,
        tool: String,
        arguments: Value,
        error: Option<String>,
        /// The text the tool answered with.
        result: Option<String>,
        duration_ms: Option<i64>,
        #[serde(default)]
        truncated: bool,
    },
    /// An approval the agent asked for, and the decision.
    Approval {
        /// `command`, `file_change` or `mcp_tool`.
        request: String,
        detail: Value,
        decision: Option<String>,
    },
    /// An item the transcript only names.
    Other {
        item_type: String,
    },
}

impl ItemBody {
    /// The variant's name, as stored in the `kind` column.
    pub fn kind(&self) -> &'static str {
        match self {
            ItemBody::Prompt { .. } => "prompt",
            ItemBody::UserMessage { .. } => "userMessage",
            ItemBody::AgentMessage { .. } => "agentMessage",
            ItemBody::Reasoning { .. } => "reasoning",
            ItemBody::CommandExecution { .. } => "commandExecution",
            ItemBody::FileChange { .. } => "fileChange",
            ItemBody::McpToolCall { .. } => "mcpToolCall",
            ItemBody::Approval { .. } => "approval",
            ItemBody::Other { .. } => "other",
        }
    }

    /// Every text of the item that someone may have put a secret into, for
    /// the scrubber; JSON values are handed over whole.
    pub fn texts_mut(&mut self) -> (Vec<&mut String>, Vec<&mut Value>) {
        let mut texts: Vec<&mut String> = Vec::new();
        let mut values: Vec<&mut Value> = Vec::new();
        match self {
            ItemBody::Prompt { parts, .. } => texts.extend(parts.iter_mut().map(|p| &mut p.text)),
            ItemBody::UserMessage { text, .. }
            | ItemBody::AgentMessage { text, .. }
            | ItemBody::Reasoning { summary: text, .. } => texts.push(text),
            ItemBody::CommandExecution {
                command,
                cwd,
                output,
                ..
            } => {
                texts.push(command);
                texts.push(cwd);
                texts.extend(output.as_mut());
            }
            ItemBody::FileChange { changes } => {
                for c in changes {
                    texts.push(&mut c.path);
                    texts.extend(c.move_path.as_mut());
                    texts.push(&mut c.diff);
                }
            }
            ItemBody::McpToolCall {
                arguments,
                error,
                result,
                ..
            } => {
                values.push(arguments);
                texts.extend(error.as_mut());
                texts.extend(result.as_mut());
            }
            ItemBody::Approval { detail, .. } => values.push(detail),
            ItemBody::Other { .. } => {}
        }
        (texts, values)
    }
}

impl TranscriptItem {
    /// The item cut to what the store keeps: a command's output tail, an
    /// item's diffs up to their budget, texts and arguments up to theirs.
    /// Cut items say so (`truncated`, `outputTruncated`).
    pub fn bounded(mut self) -> TranscriptItem {
        match &mut self.body {
            ItemBody::Prompt { parts, truncated } => {
                let mut budget = PROMPT_BYTES;
                for p in parts.iter_mut() {
                    let cut = cut_head(&mut p.text, budget);
                    budget -= p.text.len();
                    *truncated |= cut;
                }
                parts.retain(|p| !p.text.is_empty());
            }
            ItemBody::UserMessage {
                text, truncated, ..
            }
            | ItemBody::AgentMessage { text, truncated }
            | ItemBody::Reasoning {
                summary: text,
                truncated,
            } => *truncated |= cut_head(text, TEXT_BYTES),
            ItemBody::CommandExecution {
                output,
                output_bytes,
                output_truncated,
                ..
            } => {
                if let Some(out) = output {
                    *output_bytes = (*output_bytes).max(out.len() as i64);
                    *output_truncated |= cut_tail(out, OUTPUT_TAIL_BYTES);
                }
            }
            ItemBody::FileChange { changes } => {
                let mut budget = DIFF_BYTES_PER_ITEM;
                for c in changes.iter_mut() {
                    c.truncated |= cut_head(&mut c.diff, budget);
                    budget -= c.diff.len();
                }
            }
            ItemBody::McpToolCall {
                arguments,
                error,
                result,
                truncated,
                ..
            } => {
                let mut json = arguments.to_string();
                if cut_head(&mut json, ARGUMENTS_BYTES) {
                    // Too long to keep as JSON: kept as its beginning, in words.
                    *arguments = Value::String(json);
                    *truncated = true;
                }
                for t in [error, result].into_iter().flatten() {
                    *truncated |= cut_head(t, TEXT_BYTES);
                }
            }
            ItemBody::Approval { detail, .. } => {
                let mut json = detail.to_string();
                if cut_head(&mut json, ARGUMENTS_BYTES) {
                    *detail = Value::String(json);
                }
            }
            ItemBody::Other { item_type } => {
                cut_head(item_type, 128);
            }
        }
        cut_head(&mut self.item_id, 256);
        self
    }
}

/// Keeps the first `max` bytes of `s` (at a character boundary); whether
/// anything was cut.
fn cut_head(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    true
}

/// Keeps the last `max` bytes of `s` (at a character boundary); whether
/// anything was cut.
fn cut_tail(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s.drain(..start);
    true
}

/// Token counts, as the runtime reports them for a thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenCounts {
    pub input: i64,
    pub cached_input: i64,
    pub output: i64,
    pub reasoning: i64,
    pub total: i64,
}

impl TokenCounts {
    /// `self - earlier`, each count.
    pub fn since(self, earlier: TokenCounts) -> TokenCounts {
        TokenCounts {
            input: self.input - earlier.input,
            cached_input: self.cached_input - earlier.cached_input,
            output: self.output - earlier.output,
            reasoning: self.reasoning - earlier.reasoning,
            total: self.total - earlier.total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(body: ItemBody) -> TranscriptItem {
        TranscriptItem {
            item_id: "i".into(),
            status: ItemStatus::Completed,
            body,
        }
    }

    #[test]
    fn a_commands_output_keeps_its_tail_and_says_how_long_it_was() {
        let long = format!("{}THE END\n", "x".repeat(OUTPUT_TAIL_BYTES * 3));
        let b = item(ItemBody::CommandExecution {
            command: "make".into(),
            cwd: "/w".into(),
            exit_code: Some(2),
            duration_ms: Some(5),
            output: Some(long.clone()),
            output_bytes: 0,
            output_truncated: false,
        })
        .bounded();
        let ItemBody::CommandExecution {
            output,
            output_bytes,
            output_truncated,
            ..
        } = b.body
        else {
            panic!("{b:?}")
        };
        let output = output.unwrap();
        assert_eq!(output.len(), OUTPUT_TAIL_BYTES);
        assert!(output.ends_with("THE END\n"));
        assert!(output_truncated);
        assert_eq!(output_bytes, long.len() as i64);

        // A short output is kept whole and not marked.
        let b = item(ItemBody::CommandExecution {
            command: "ls".into(),
            cwd: "/w".into(),
            exit_code: Some(0),
            duration_ms: None,
            output: Some("a\nb\n".into()),
            output_bytes: 0,
            output_truncated: false,
        })
        .bounded();
        assert!(
            matches!(b.body, ItemBody::CommandExecution { output: Some(o), output_truncated: false, output_bytes: 4, .. } if o == "a\nb\n")
        );
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        // Multi-byte characters straddle every cut.
        let mut s = "é".repeat(OUTPUT_TAIL_BYTES);
        assert!(cut_tail(&mut s, OUTPUT_TAIL_BYTES + 1));
        assert_eq!(s.len(), OUTPUT_TAIL_BYTES);
        let mut s = "é".repeat(10);
        assert!(cut_head(&mut s, 5));
        assert_eq!(s, "éé");
        let mut s = "abc".to_owned();
        assert!(!cut_head(&mut s, 3));
        assert!(!cut_tail(&mut s, 3));
    }

    #[test]
    fn an_items_diffs_share_one_budget_and_keep_their_full_stat() {
        let big = "+line\n".repeat(DIFF_BYTES_PER_ITEM / 6 + 10);
        let changes = vec![
            FileDiff::new("a.rs".into(), ChangeKind::Update, None, big.clone()),
            FileDiff::new("b.rs".into(), ChangeKind::Add, None, "one\ntwo\n".into()),
        ];
        assert_eq!(changes[0].added, (DIFF_BYTES_PER_ITEM / 6 + 10) as i64);
        let b = item(ItemBody::FileChange { changes }).bounded();
        let ItemBody::FileChange { changes } = b.body else {
            panic!()
        };
        assert_eq!(changes[0].diff.len(), DIFF_BYTES_PER_ITEM);
        assert!(changes[0].truncated);
        // The stat still counts the whole diff.
        assert_eq!(changes[0].added, (DIFF_BYTES_PER_ITEM / 6 + 10) as i64);
        // Nothing is left for the second file: cut, stat kept.
        assert_eq!(changes[1].diff, "");
        assert!(changes[1].truncated);
        assert_eq!((changes[1].added, changes[1].removed), (2, 0));
    }

    #[test]
    fn diff_stats_count_lines_by_kind() {
        let update = "@@ -1,2 +1,2 @@\n-old\n+new\n+more\n context\n";
        assert_eq!(diff_stat(ChangeKind::Update, update), (2, 1));
        let headers = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(diff_stat(ChangeKind::Update, headers), (1, 1));
        assert_eq!(diff_stat(ChangeKind::Add, "a\nb\nc\n"), (3, 0));
        assert_eq!(diff_stat(ChangeKind::Delete, "a\nb"), (0, 2));
    }

    #[test]
    fn long_texts_arguments_and_prompts_are_cut_and_marked() {
        let b = item(ItemBody::AgentMessage {
            text: "y".repeat(TEXT_BYTES + 1),
            truncated: false,
        })
        .bounded();
        assert!(
            matches!(&b.body, ItemBody::AgentMessage { text, truncated: true } if text.len() == TEXT_BYTES)
        );

        let b = item(ItemBody::McpToolCall {
            server: "gitea".into(),
            tool: "add_comment".into(),
            arguments: json!({"body": "z".repeat(ARGUMENTS_BYTES)}),
            error: None,
            result: Some("ok".into()),
            duration_ms: None,
            truncated: false,
        })
        .bounded();
        assert!(
            matches!(&b.body, ItemBody::McpToolCall { arguments: Value::String(s), truncated: true, .. } if s.len() == ARGUMENTS_BYTES && s.starts_with("{\"body\""))
        );

        let prompt = Prompt {
            parts: vec![
                PromptPart::trusted("a".repeat(PROMPT_BYTES - 2)),
                PromptPart::untrusted("bbbb"),
                PromptPart::trusted("tail"),
            ],
        };
        let b = prompt.item().bounded();
        let ItemBody::Prompt { parts, truncated } = b.body else {
            panic!()
        };
        assert!(truncated);
        assert_eq!(parts.len(), 2, "the part with nothing left is dropped");
        assert_eq!(parts[1], PromptPart::untrusted("bb"));
    }

    #[test]
    fn bodies_round_trip_through_their_stored_json_with_a_kind() {
        let bodies = [
            Prompt {
                parts: vec![PromptPart::trusted("do "), PromptPart::untrusted("<x>")],
            }
            .item()
            .body,
            ItemBody::CommandExecution {
                command: "ls".into(),
                cwd: "/w".into(),
                exit_code: Some(0),
                duration_ms: Some(3),
                output: Some("a".into()),
                output_bytes: 1,
                output_truncated: false,
            },
            ItemBody::FileChange {
                changes: vec![FileDiff::new(
                    "a".into(),
                    ChangeKind::Update,
                    Some("b".into()),
                    "+x\n".into(),
                )],
            },
            ItemBody::Approval {
                request: "command".into(),
                detail: json!({"command": "rm -rf /"}),
                decision: Some("decline".into()),
            },
            ItemBody::Other {
                item_type: "webSearch".into(),
            },
        ];
        for body in bodies {
            let json = serde_json::to_value(&body).unwrap();
            assert_eq!(json["kind"], body.kind(), "{json}");
            assert_eq!(serde_json::from_value::<ItemBody>(json).unwrap(), body);
        }
        let json = serde_json::to_value(ItemBody::CommandExecution {
            command: "ls".into(),
            cwd: "/w".into(),
            exit_code: Some(1),
            duration_ms: None,
            output: None,
            output_bytes: 0,
            output_truncated: false,
        })
        .unwrap();
        assert_eq!(json["exitCode"], 1, "fields are camelCase: {json}");
        assert_eq!(ItemStatus::parse("inProgress"), ItemStatus::InProgress);
        assert_eq!(ItemStatus::parse("weird"), ItemStatus::Unknown);
    }
}
