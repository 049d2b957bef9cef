//! The Codex protocol types against the pinned codex's own schema, as
//! `codex app-server generate-json-schema --experimental` prints it: every
//! message the bridge sends validates against its definition (and, in its
//! envelope, against the union of its direction, which ties the method to its
//! params); every field the bridge reads is in the definition it mirrors; and
//! samples the schema accepts are read as the bridge expects (`reading`), as is the
//! recorded sign-in that `codex_login.rs` plays back (`recorded`).
//!
//! Without the codex binary this fails (see [`codex_bin`]); it never skips.

mod reading;
mod recorded;

use crate::codexhome::codex_bin;
use codex_bridge::codex::protocol::*;
use codex_bridge::domain::states::CapacityDenial;
use serde::de::{DeserializeOwned, Visitor};
use serde::Serialize;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::rc::Rc;

/// The schema of the pinned codex.
struct Schema {
    root: Value,
    /// Compiled definitions (the schema is large: compile each once).
    validators: RefCell<HashMap<String, Rc<jsonschema::Validator>>>,
}

impl Schema {
    fn generate() -> Schema {
        let dir = tempfile::tempdir().unwrap();
        let bin = codex_bin();
        let out = Command::new(&bin)
            .args([
                "app-server",
                "generate-json-schema",
                "--experimental",
                "--out",
            ])
            .arg(dir.path())
            .env("CODEX_HOME", dir.path().join("home"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        assert!(
            out.status.success(),
            "{} app-server generate-json-schema failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let file = dir.path().join("codex_app_server_protocol.schemas.json");
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("no {} from codex: {e}", file.display()));
        Schema {
            root: serde_json::from_str(&text).unwrap(),
            validators: RefCell::default(),
        }
    }

    /// A definition by its path under `definitions` (`v2/Turn`), or a branch
    /// of a tagged union (`v2/ThreadItem#userMessage`: the branch whose `type`
    /// is `userMessage`).
    fn definition(&self, path: &str) -> &Value {
        let (path, branch) = match path.split_once('#') {
            Some((p, b)) => (p, Some(b)),
            None => (path, None),
        };
        let mut def = &self.root["definitions"];
        for part in path.split('/') {
            def = def
                .get(part)
                .unwrap_or_else(|| panic!("codex's schema has no definition {path}"));
        }
        match branch {
            None => def,
            Some(tag) => def["oneOf"]
                .as_array()
                .and_then(|bs| {
                    bs.iter()
                        .find(|b| b["properties"]["type"]["enum"][0] == tag)
                })
                .unwrap_or_else(|| panic!("{path} has no branch of type {tag}")),
        }
    }

    /// Resolves a local `$ref`.
    fn resolve<'a>(&'a self, def: &'a Value) -> &'a Value {
        match def.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let path = r.trim_start_matches("#/definitions/");
                self.resolve(self.definition(path))
            }
            None => def,
        }
    }

    /// Whether `field` is a property of `def`, or of one of its branches.
    fn has_field(&self, def: &Value, field: &str) -> bool {
        let def = self.resolve(def);
        if def["properties"].get(field).is_some() {
            return true;
        }
        ["oneOf", "anyOf", "allOf"].iter().any(|k| {
            def[k]
                .as_array()
                .is_some_and(|bs| bs.iter().any(|b| self.has_field(b, field)))
        })
    }

    /// Whether `value` is one of the strings `def` allows.
    fn has_value(&self, def: &Value, value: &str) -> bool {
        let def = self.resolve(def);
        if def["enum"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v == value))
        {
            return true;
        }
        ["oneOf", "anyOf", "allOf"].iter().any(|k| {
            def[k]
                .as_array()
                .is_some_and(|bs| bs.iter().any(|b| self.has_value(b, value)))
        })
    }

    /// Panics, naming every error, unless `instance` is valid against the
    /// definition at `path`.
    fn validate(&self, path: &str, instance: &Value) {
        let validator = self.validator(path);
        let errors: Vec<String> = validator
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "not a valid {path}: {instance}\n{}",
            errors.join("\n")
        );
    }
}

impl Schema {
    fn validator(&self, path: &str) -> Rc<jsonschema::Validator> {
        if let Some(v) = self.validators.borrow().get(path) {
            return v.clone();
        }
        self.definition(path);
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": self.root["definitions"].clone(),
            "$ref": format!("#/definitions/{path}"),
        });
        let validator = Rc::new(
            jsonschema::validator_for(&schema)
                .unwrap_or_else(|e| panic!("cannot compile codex's {path}: {e}")),
        );
        self.validators
            .borrow_mut()
            .insert(path.to_owned(), validator.clone());
        validator
    }
}

/// The field names a derived `Deserialize` struct reads, as serde spells
/// them on the wire: serde hands them to `deserialize_struct`.
fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut names = None;
    let _ = T::deserialize(Probe(&mut names));
    names.unwrap_or_else(|| panic!("{} is not a plain struct", std::any::type_name::<T>()))
}

/// The variant names a derived `Deserialize` enum reads.
fn variants_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut names = None;
    let _ = T::deserialize(Probe(&mut names));
    names.unwrap_or_else(|| panic!("{} is not a plain enum", std::any::type_name::<T>()))
}

/// A deserializer that only notes the names serde asks it for.
struct Probe<'a>(&'a mut Option<&'static [&'static str]>);

impl<'de> serde::Deserializer<'de> for Probe<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("neither a struct nor an enum"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(fields);
        Err(serde::de::Error::custom("names noted"))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = Some(variants);
        Err(serde::de::Error::custom("names noted"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map identifier ignored_any
    }
}

fn value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap()
}

/// A request of ours: its params against their definition, and the whole
/// request against `ClientRequest` (the method names those params).
fn check_request<R: Request>(schema: &Schema, params_definition: &str, params: &R) {
    schema.validate(params_definition, &value(params));
    let envelope = value(&OutgoingRequest {
        id: 7,
        method: R::METHOD,
        params,
    });
    schema.validate("JSONRPCRequest", &envelope);
    schema.validate("ClientRequest", &envelope);
}

fn setup(policy: Option<(AskForApproval, SandboxMode)>) -> ThreadSetup {
    let mut config = serde_json::Map::new();
    config.insert("mcp_servers.gitea.command".into(), json!("gitea-mcp"));
    config.insert("mcp_servers.gitea.env_vars".into(), json!(["GITEA_TOKEN"]));
    ThreadSetup {
        cwd: PathBuf::from("/srv/ws/acme/widgets"),
        developer_instructions: "be careful".into(),
        approval_policy: policy.map(|p| p.0),
        sandbox: policy.map(|p| p.1),
        config: Some(config),
    }
}

#[test]
fn the_protocol_types_match_the_pinned_codex_schema() {
    let schema = Schema::generate();

    // --- What the bridge sends.
    check_request(
        &schema,
        "InitializeParams",
        &Initialize {
            client_info: ClientInfo {
                name: "codex-bridge".into(),
                title: "codex-bridge".into(),
                version: "0.1.0".into(),
            },
            capabilities: InitializeCapabilities {
                experimental_api: true,
            },
        },
    );
    let initialized = value(&OutgoingNotification {
        method: INITIALIZED,
    });
    schema.validate("JSONRPCNotification", &initialized);
    schema.validate("ClientNotification", &initialized);
    check_request(
        &schema,
        "v2/CollaborationModeListParams",
        &CollaborationModeList {},
    );
    check_request(
        &schema,
        "v2/GetAccountParams",
        &AccountRead {
            refresh_token: false,
        },
    );
    check_request(
        &schema,
        "v2/LoginAccountParams",
        &LoginStart::ApiKey {
            api_key: "sk-test-1".to_owned().into(),
        },
    );
    check_request(
        &schema,
        "v2/LoginAccountParams",
        &LoginStart::ChatgptDeviceCode,
    );
    check_request(
        &schema,
        "v2/GetAccountRateLimitsParams",
        &RateLimitsRead {
            exclude_reset_credit_details: true,
        },
    );
    // `account/logout` takes no params: the whole request against its union.
    let logout = value(&OutgoingRequest {
        id: 7,
        method: Logout::METHOD,
        params: &Logout,
    });
    schema.validate("JSONRPCRequest", &logout);
    schema.validate("ClientRequest", &logout);
    let policies = [
        AskForApproval::Untrusted,
        AskForApproval::OnRequest,
        AskForApproval::Never,
    ];
    let sandboxes = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ];
    let mut policy = vec![None];
    for p in policies {
        for s in sandboxes {
            policy.push(Some((p, s)));
        }
    }
    for policy in policy {
        check_request(
            &schema,
            "v2/ThreadStartParams",
            &ThreadStart {
                setup: setup(policy),
                dynamic_tools: Vec::new(),
            },
        );
        check_request(
            &schema,
            "v2/ThreadResumeParams",
            &ThreadResume {
                thread_id: "thr-1".into(),
                setup: setup(policy),
            },
        );
        check_request(
            &schema,
            "v2/ThreadForkParams",
            &ThreadFork {
                thread_id: "thr-parent".into(),
                setup: setup(policy),
            },
        );
    }
    // Every one of the bridge's tools, as `thread/start` offers them.
    let every_tool: Vec<&str> = codex_bridge::domain::workflow::TOOLS
        .iter()
        .map(|t| t.name)
        .collect();
    let offered = ThreadStart {
        setup: setup(None),
        dynamic_tools: DynamicToolSpec::bridge_tools(&every_tool),
    };
    assert_eq!(
        value(&offered)["dynamicTools"][0]["tools"]
            .as_array()
            .map(Vec::len),
        Some(every_tool.len())
    );
    check_request(&schema, "v2/ThreadStartParams", &offered);
    // The answer to a call, and the call as Codex sends it.
    schema.validate(
        "DynamicToolCallResponse",
        &value(&DynamicToolCallResponse::text(
            false,
            "`summary` is required".into(),
        )),
    );
    let call = json!({"threadId": "t", "turnId": "u", "callId": "c", "namespace": "codex_bridge",
        "tool": "complete_workflow", "arguments": {"summary": "done"}});
    schema.validate("DynamicToolCallParams", &call);
    let read = DynamicToolCallParams::parse(call).unwrap();
    assert_eq!(read.tool, "complete_workflow");
    check_request(
        &schema,
        "v2/TurnStartParams",
        &TurnStart {
            thread_id: "thr-1".into(),
            input: vec![UserInput::text("why does it flake?")],
            client_user_message_id: "op-1".into(),
        },
    );
    check_request(
        &schema,
        "v2/TurnSteerParams",
        &TurnSteer {
            thread_id: "thr-1".into(),
            expected_turn_id: "turn-1".into(),
            input: vec![UserInput::text("also this")],
            client_user_message_id: "op-2".into(),
        },
    );
    check_request(
        &schema,
        "v2/ThreadRevertParams",
        &ThreadRevert {
            thread_id: "thr-1".into(),
            before_turn_id: "turn-1".into(),
        },
    );
    let inject = ThreadInjectItems {
        thread_id: "thr-2".into(),
        items: vec![
            HistoryItem::user("why does it flake?"),
            HistoryItem::assistant("a shared temp dir"),
        ],
    };
    check_request(&schema, "v2/ThreadInjectItemsParams", &inject);
    // The items are typed loosely there; each is a message Codex reads.
    for item in &inject.items {
        schema.validate("v2/ResponseItem", &value(item));
    }
    check_request(
        &schema,
        "v2/TurnInterruptParams",
        &TurnInterrupt {
            thread_id: "thr-1".into(),
            turn_id: "turn-1".into(),
        },
    );
    check_request(
        &schema,
        "v2/ThreadTurnsListParams",
        &ThreadTurnsList {
            thread_id: "thr-1".into(),
            items_view: TurnItemsView::Full,
        },
    );

    // Our answers to approvals, both ways, in their kinds' shapes.
    for (kind, definition) in [
        (
            ApprovalKind::Command,
            "CommandExecutionRequestApprovalResponse",
        ),
        (
            ApprovalKind::FileChange,
            "FileChangeRequestApprovalResponse",
        ),
        (ApprovalKind::McpTool, "McpServerElicitationRequestResponse"),
    ] {
        for accept in [true, false] {
            let answer = kind.answer(accept);
            schema.validate(definition, &value(&answer));
            let id = RequestId::Integer(0);
            schema.validate(
                "JSONRPCResponse",
                &value(&OutgoingResponse {
                    id: &id,
                    result: &answer,
                }),
            );
        }
    }
    // And the "no" to every request the server can make: the answer in the
    // request's own shape where the bridge has one, else a JSON-RPC error.
    let requests = schema.definition("ServerRequest")["oneOf"]
        .as_array()
        .unwrap();
    assert!(requests.len() >= 3, "{requests:?}");
    for request in requests {
        let method = request["properties"]["method"]["enum"][0].as_str().unwrap();
        let params = request["properties"]["params"]["$ref"].as_str().unwrap();
        let response = params
            .trim_start_matches("#/definitions/")
            .replace("Params", "Response");
        let refusal = Refusal::of(method);
        match &refusal.answer {
            Ok(answer) => schema.validate(&response, &value(answer)),
            Err(error) => {
                assert_eq!(error.code, METHOD_NOT_FOUND, "{method}");
                let id = RequestId::String("req-1".into());
                schema.validate(
                    "JSONRPCError",
                    &value(&OutgoingError {
                        id: &id,
                        error: error.clone(),
                    }),
                );
            }
        }
    }
    // The approvals the bridge hands to a person are server requests.
    for method in [
        ApprovalKind::COMMAND,
        ApprovalKind::FILE_CHANGE,
        ApprovalKind::MCP_TOOL,
    ] {
        assert!(
            requests
                .iter()
                .any(|r| r["properties"]["method"]["enum"][0] == method),
            "{method} is not a request of this codex"
        );
    }

    // --- What the bridge reads: every field is in the definition it mirrors.
    // (type, wire field names, the definition it mirrors)
    macro_rules! reads {
        ($($t:ident => $def:literal),* $(,)?) => {
            vec![$((stringify!($t), fields_of::<$t>(), $def)),*]
        };
    }
    let reads: Vec<(&str, &[&str], &str)> = reads![
        IncomingMessage => "JSONRPCMessage",
        ErrorBody => "JSONRPCErrorError",
        AccountReadResponse => "v2/GetAccountResponse",
        AccountSummary => "v2/Account",
        DeviceCodeStarted => "v2/LoginAccountResponse#chatgptDeviceCode",
        RateLimitsReadResponse => "v2/GetAccountRateLimitsResponse",
        RateLimitSnapshot => "v2/RateLimitSnapshot",
        RateLimitWindow => "v2/RateLimitWindow",
        AccountLoginCompletedNotification => "v2/AccountLoginCompletedNotification",
        ThreadStartResponse => "v2/ThreadStartResponse",
        ThreadStartResponse => "v2/ThreadForkResponse",
        ThreadSummary => "v2/Thread",
        TurnStartResponse => "v2/TurnStartResponse",
        TurnSteerResponse => "v2/TurnSteerResponse",
        ThreadTurnsListResponse => "v2/ThreadTurnsListResponse",
        Turn => "v2/Turn",
        TurnError => "v2/TurnError",
        UserMessageItem => "v2/ThreadItem#userMessage",
        AgentMessageItem => "v2/ThreadItem#agentMessage",
        McpToolCallItem => "v2/ThreadItem#mcpToolCall",
        CommandExecutionItem => "v2/ThreadItem#commandExecution",
        FileChangeItem => "v2/ThreadItem#fileChange",
        FileUpdateChange => "v2/FileUpdateChange",
        ReasoningItem => "v2/ThreadItem#reasoning",
        ThreadTokenUsageUpdatedNotification => "v2/ThreadTokenUsageUpdatedNotification",
        ThreadTokenUsage => "v2/ThreadTokenUsage",
        TokenUsageBreakdown => "v2/TokenUsageBreakdown",
        McpToolCallError => "v2/McpToolCallError",
        McpToolCallResult => "v2/McpToolCallResult",
        McpServerStatusUpdatedNotification => "v2/McpServerStatusUpdatedNotification",
        ItemNotification => "v2/ItemStartedNotification",
        ItemNotification => "v2/ItemCompletedNotification",
        ErrorNotification => "v2/ErrorNotification",
        TurnCompletedNotification => "v2/TurnCompletedNotification",
        // The thread of a turn end that cannot be read, and of a refused request.
        ThreadScoped => "v2/TurnCompletedNotification",
        ThreadScoped => "ToolRequestUserInputParams",
        CommandApprovalParams => "CommandExecutionRequestApprovalParams",
        FileChangeApprovalParams => "FileChangeRequestApprovalParams",
        ElicitationParams => "McpServerElicitationRequestParams",
        // Not checkable here: `McpContentBlock` (MCP's own content blocks)
        // and `ElicitationMeta` (`_meta`), which the schema leaves free-form;
        // `UserInputPart` and `PatchChangeKind` (tagged by `type`: the
        // samples below read each of their tags).
    ];
    let mut missing = Vec::new();
    for (name, fields, definition) in &reads {
        let def = schema.definition(definition);
        for field in *fields {
            if !schema.has_field(def, field) {
                missing.push(format!("{name}.{field} (codex's {definition})"));
            }
        }
    }
    // The kinds of account and sign-in answer the bridge tells apart.
    for branch in [
        "v2/Account#apiKey",
        "v2/Account#chatgpt",
        "v2/LoginAccountResponse#apiKey",
        "v2/LoginAccountResponse#chatgptDeviceCode",
    ] {
        schema.definition(branch);
    }
    // And every status the bridge tells apart.
    let statuses: Vec<(&str, &[&str], &str)> = vec![
        ("TurnStatus", variants_of::<TurnStatus>(), "v2/TurnStatus"),
        (
            "McpToolCallStatus",
            variants_of::<McpToolCallStatus>(),
            "v2/McpToolCallStatus",
        ),
        (
            "McpServerStartupState",
            variants_of::<McpServerStartupState>(),
            "v2/McpServerStartupState",
        ),
        (
            "CommandExecutionStatus",
            variants_of::<CommandExecutionStatus>(),
            "v2/CommandExecutionStatus",
        ),
        (
            "PatchApplyStatus",
            variants_of::<PatchApplyStatus>(),
            "v2/PatchApplyStatus",
        ),
        (
            "CodexErrorKind",
            variants_of::<CodexErrorKind>(),
            "v2/CodexErrorInfo",
        ),
    ];
    for (name, variants, definition) in &statuses {
        let def = schema.definition(definition);
        // `unknown` is the bridge's own catch-all for values it does not know.
        for v in variants.iter().filter(|v| **v != "unknown") {
            if !schema.has_value(def, v) {
                missing.push(format!("{name}::{v} (codex's {definition})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the bridge reads what codex does not send:\n{}",
        missing.join("\n")
    );
}
