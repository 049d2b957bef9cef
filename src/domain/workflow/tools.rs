//! The bridge's tools for the agent: their names, what the model is told
//! of each, and the one reading of a call's arguments (a bad call is an
//! error the model can read, never a crash).

use super::{GateKind, MAX_TOOL_TEXT};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A call of one of the bridge's tools, its arguments read and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCall {
    CompleteWorkflow { summary: String },
    RequestOwnerGate { question: String, kind: GateKind },
    AssignChild(Delegation),
    HandoffChild(Delegation),
    RecordResult(ResultReport),
    AckResult { result_id: String },
    ListResults,
}

/// What `assign_child` and `handoff_child` ask of a child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegation {
    pub title: String,
    pub instructions: String,
    /// The child's thread starts from a copy of the parent's conversation
    /// (`thread/fork`) instead of from nothing.
    pub fork: bool,
}

/// A child's structured result, as `record_result` takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultReport {
    pub summary: String,
    pub files_changed: Vec<String>,
    pub checks_run: Vec<String>,
    pub risks: Vec<String>,
    pub blockers: Vec<String>,
}

impl ResultReport {
    /// A result the bridge writes for a child whose work did not end in one
    /// of its own: `summary` says why; nothing is claimed done or checked.
    pub fn incomplete(summary: String, risk: &str, blocker: &str) -> ResultReport {
        ResultReport {
            summary,
            files_changed: Vec::new(),
            checks_run: Vec::new(),
            risks: vec![risk.to_owned()],
            blockers: vec![blocker.to_owned()],
        }
    }
}

/// Why a call was not taken: said to the model as the tool's result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolCallError {
    #[error("codex-bridge has no tool named {0:?}")]
    UnknownTool(String),
    #[error("{tool}: {problem}")]
    BadArguments { tool: &'static str, problem: String },
}

impl ToolCall {
    /// The tool's name as the model calls it.
    pub fn name(&self) -> &'static str {
        match self {
            ToolCall::CompleteWorkflow { .. } => "complete_workflow",
            ToolCall::RequestOwnerGate { .. } => "request_owner_gate",
            ToolCall::AssignChild(_) => "assign_child",
            ToolCall::HandoffChild(_) => "handoff_child",
            ToolCall::RecordResult(_) => "record_result",
            ToolCall::AckResult { .. } => "ack_result",
            ToolCall::ListResults => "list_results",
        }
    }

    /// Reads a call of `tool` (its bare name; a namespaced or prefixed name
    /// that ends in it counts, as the model may see either).
    pub fn parse(tool: &str, arguments: &Value) -> Result<ToolCall, ToolCallError> {
        let bare = tool
            .rsplit(['.', '/'])
            .next()
            .unwrap_or(tool)
            .trim_start_matches("codex_bridge__");
        let args = Args::of(bare, arguments)?;
        Ok(match args.tool {
            "complete_workflow" => ToolCall::CompleteWorkflow {
                summary: args.text("summary")?,
            },
            "request_owner_gate" => {
                let kind_text = args.text("kind")?;
                let kind = GateKind::parse(&kind_text)
                    .ok()
                    .filter(|k| k.agent_may_ask())
                    .ok_or_else(|| {
                        args.bad(format!(
                            "`kind` must be one of publish, network_service, spend_money, \
                             product_semantics (not {kind_text:?}); a failing test or a slow \
                             task is no reason for a gate"
                        ))
                    })?;
                ToolCall::RequestOwnerGate {
                    question: args.text("question")?,
                    kind,
                }
            }
            "assign_child" => ToolCall::AssignChild(args.delegation()?),
            "handoff_child" => ToolCall::HandoffChild(args.delegation()?),
            "record_result" => ToolCall::RecordResult(ResultReport {
                summary: args.text("summary")?,
                files_changed: args.list("filesChanged")?,
                checks_run: args.list("checksRun")?,
                risks: args.list("risks")?,
                blockers: args.list("blockers")?,
            }),
            "ack_result" => ToolCall::AckResult {
                result_id: args.text("resultId")?,
            },
            "list_results" => ToolCall::ListResults,
            other => return Err(ToolCallError::UnknownTool(other.to_owned())),
        })
    }
}

/// A call's arguments, with the checks every tool shares.
struct Args<'a> {
    tool: &'static str,
    object: &'a serde_json::Map<String, Value>,
}

impl<'a> Args<'a> {
    fn of(bare: &str, arguments: &'a Value) -> Result<Args<'a>, ToolCallError> {
        let tool = TOOLS
            .iter()
            .map(|t| t.name)
            .find(|n| *n == bare)
            .ok_or_else(|| ToolCallError::UnknownTool(bare.chars().take(100).collect()))?;
        let object = arguments
            .as_object()
            .ok_or_else(|| ToolCallError::BadArguments {
                tool,
                problem: "the arguments must be a JSON object".into(),
            })?;
        Ok(Args { tool, object })
    }

    fn bad(&self, problem: String) -> ToolCallError {
        ToolCallError::BadArguments {
            tool: self.tool,
            problem,
        }
    }

    /// A required, non-blank text within [`MAX_TOOL_TEXT`].
    fn text(&self, key: &str) -> Result<String, ToolCallError> {
        let text = match self.object.get(key) {
            Some(Value::String(s)) => s.trim(),
            Some(_) => return Err(self.bad(format!("`{key}` must be a string"))),
            None => return Err(self.bad(format!("`{key}` is required"))),
        };
        if text.is_empty() {
            return Err(self.bad(format!("`{key}` must not be empty")));
        }
        if text.len() > MAX_TOOL_TEXT {
            return Err(self.bad(format!(
                "`{key}` is {} bytes; at most {MAX_TOOL_TEXT} are taken",
                text.len()
            )));
        }
        Ok(text.to_owned())
    }

    /// What a delegation tool asks: its title, its instructions and
    /// whether the child starts from the parent's conversation.
    fn delegation(&self) -> Result<Delegation, ToolCallError> {
        Ok(Delegation {
            title: self.text("title")?,
            instructions: self.text("instructions")?,
            fork: self.flag("fork")?,
        })
    }

    /// An optional yes or no (missing = no).
    fn flag(&self, key: &str) -> Result<bool, ToolCallError> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(self.bad(format!("`{key}` must be true or false"))),
        }
    }

    /// An optional list of texts (missing = empty), within [`MAX_TOOL_TEXT`]
    /// in all.
    fn list(&self, key: &str) -> Result<Vec<String>, ToolCallError> {
        let items = match self.object.get(key) {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Array(items)) => items,
            Some(_) => return Err(self.bad(format!("`{key}` must be a list of strings"))),
        };
        let mut out = Vec::with_capacity(items.len());
        let mut total = 0;
        for item in items {
            let Value::String(s) = item else {
                return Err(self.bad(format!("`{key}` must be a list of strings")));
            };
            total += s.len();
            out.push(s.trim().to_owned());
        }
        if total > MAX_TOOL_TEXT {
            return Err(self.bad(format!(
                "`{key}` holds {total} bytes; at most {MAX_TOOL_TEXT} are taken"
            )));
        }
        Ok(out)
    }
}

/// One tool as it is offered to the model.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// Builds the JSON Schema of its arguments.
    schema: fn() -> Value,
}

impl ToolSpec {
    pub fn input_schema(&self) -> Value {
        (self.schema)()
    }
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn texts() -> Value {
    json!({"type": "array", "items": {"type": "string"}})
}

fn delegation_schema() -> Value {
    object(
        json!({
            "title": {"type": "string"},
            "instructions": {"type": "string"},
            "fork": {
                "type": "boolean",
                "description": "true: the child starts from a copy of this conversation so \
                    far, for work that needs what you have read and decided; false (the \
                    default): it starts from the instructions alone.",
            },
        }),
        &["title", "instructions"],
    )
}

/// Every tool the bridge offers a thread, in the order the model sees them.
pub const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "complete_workflow",
        description: "Close this Issue's or pull request's workflow: call it only when the whole \
            mission the owner asked for is done and checked. Ending your turn does not end the \
            workflow; without this call the bridge continues it.",
        schema: || {
            object(
                json!({"summary": {"type": "string", "description": "What was done, for the owner."}}),
                &["summary"],
            )
        },
    },
    ToolSpec {
        name: "request_owner_gate",
        description: "Ask the owner for authority the mission did not grant: publishing, \
            exposing a network service, spending money, or choosing between materially \
            different product semantics. Never for a failing test, a slow task or the end of \
            a turn: keep working on anything else that is eligible first. The workflow waits \
            until the owner answers in the thread.",
        schema: || {
            object(
                json!({
                    "question": {"type": "string", "description": "What the owner must decide, and the options."},
                    "kind": {"type": "string", "enum": ["publish", "network_service", "spend_money", "product_semantics"]},
                }),
                &["question", "kind"],
            )
        },
    },
    ToolSpec {
        name: "assign_child",
        description: "Start a bounded piece of work in a child workflow with its own thread and \
            worktree; you continue meanwhile and its result is delivered later.",
        schema: delegation_schema,
    },
    ToolSpec {
        name: "handoff_child",
        description: "Hand a bounded piece of work to a child workflow and wait for its result \
            before continuing: for a next step that depends directly on the answer.",
        schema: delegation_schema,
    },
    ToolSpec {
        name: "record_result",
        description: "Only in a delegated child's thread (one started by assign_child or \
            handoff_child): record your structured result for the parent (once; it cannot be \
            changed afterwards). A top-level workflow ends with complete_workflow instead.",
        schema: || {
            object(
                json!({
                    "summary": {"type": "string"},
                    "filesChanged": texts(),
                    "checksRun": texts(),
                    "risks": texts(),
                    "blockers": texts(),
                }),
                &["summary"],
            )
        },
    },
    ToolSpec {
        name: "ack_result",
        description: "Say that you read and incorporated a child's result (by its resultId); \
            acknowledge each result once, after using it.",
        schema: || object(json!({"resultId": {"type": "string"}}), &["resultId"]),
    },
    ToolSpec {
        name: "list_results",
        description: "The results delivered to this workflow, acknowledged or not.",
        schema: || object(json!({}), &[]),
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_offered_tool_is_read_back_by_its_name() {
        let args = json!({
            "summary": "done", "question": "publish?", "kind": "publish",
            "title": "t", "instructions": "i", "resultId": "r-1",
        });
        for spec in TOOLS {
            let call = ToolCall::parse(spec.name, &args).expect(spec.name);
            assert_eq!(call.name(), spec.name);
            assert_eq!(spec.input_schema()["type"], "object");
        }
    }

    #[test]
    fn a_gate_is_for_authority_only() {
        let call = ToolCall::parse(
            "request_owner_gate",
            &json!({"question": "tests fail", "kind": "idle_finals"}),
        );
        assert!(
            matches!(&call, Err(ToolCallError::BadArguments { tool: "request_owner_gate", problem }) if problem.contains("failing test")),
            "{call:?}"
        );
        for kind in GateKind::ALL {
            let asked = ToolCall::parse(
                "request_owner_gate",
                &json!({"question": "q", "kind": kind.as_str()}),
            );
            assert_eq!(asked.is_ok(), kind.agent_may_ask(), "{kind}");
        }
    }

    #[test]
    fn names_with_a_namespace_count() {
        let args = json!({"summary": "ok"});
        for name in [
            "complete_workflow",
            "codex_bridge.complete_workflow",
            "codex_bridge/complete_workflow",
            "codex_bridge__complete_workflow",
        ] {
            assert!(ToolCall::parse(name, &args).is_ok(), "{name}");
        }
        assert!(matches!(
            ToolCall::parse("complete_workflow_now", &args),
            Err(ToolCallError::UnknownTool(_))
        ));
    }

    #[test]
    fn missing_empty_oversize_and_mistyped_arguments_are_said_plainly() {
        let bad = |args: Value| match ToolCall::parse("complete_workflow", &args) {
            Err(ToolCallError::BadArguments { problem, .. }) => problem,
            other => panic!("{other:?}"),
        };
        assert!(bad(json!({})).contains("required"));
        assert!(bad(json!({"summary": "  "})).contains("empty"));
        assert!(bad(json!({"summary": 3})).contains("string"));
        assert!(bad(json!({"summary": "x".repeat(MAX_TOOL_TEXT + 1)})).contains("at most"));
        assert!(bad(json!("done")).contains("object"));
        let list = ToolCall::parse("record_result", &json!({"summary": "s", "risks": ["a", 1]}));
        assert!(matches!(list, Err(ToolCallError::BadArguments { .. })));
    }

    #[test]
    fn a_delegation_forks_only_when_asked_with_a_boolean() {
        let asked = |args: Value| ToolCall::parse("handoff_child", &args);
        let base = json!({"title": "t", "instructions": "i"});
        assert!(matches!(asked(base.clone()), Ok(ToolCall::HandoffChild(d)) if !d.fork));
        let mut forked = base.clone();
        forked["fork"] = json!(true);
        assert!(matches!(asked(forked), Ok(ToolCall::HandoffChild(d)) if d.fork));
        let mut said = base;
        said["fork"] = json!("yes");
        assert!(
            matches!(asked(said), Err(ToolCallError::BadArguments { problem, .. }) if problem.contains("true or false"))
        );
    }

    fn arbitrary_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            ".{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("summary".to_owned()),
                        Just("kind".to_owned()),
                        Just("question".to_owned()),
                        Just("risks".to_owned()),
                        "[a-z]{1,8}"
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever the model sends, the answer is a call or an error that
        /// names the tool; reading never panics, and a call's texts are
        /// never blank or oversize.
        #[test]
        fn any_call_is_read_or_refused_with_a_reason(
            tool in prop_oneof![
                proptest::sample::select(TOOLS.iter().map(|t| t.name).collect::<Vec<_>>())
                    .prop_map(str::to_owned),
                ".{0,30}",
            ],
            args in arbitrary_json(),
        ) {
            match ToolCall::parse(&tool, &args) {
                Ok(ToolCall::CompleteWorkflow { summary }) => {
                    prop_assert!(!summary.is_empty() && summary.len() <= MAX_TOOL_TEXT);
                }
                Ok(ToolCall::RequestOwnerGate { question, kind }) => {
                    prop_assert!(!question.is_empty());
                    prop_assert!(kind.agent_may_ask());
                }
                Ok(_) => {}
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}
