//! Messages as the pinned codex's schema describes them (each sample
//! validated against it first) are read by the bridge as it expects.

use super::*;

/// Messages as the schema describes them (each validated against it) are
/// read as the bridge expects.
#[test]
fn messages_the_schema_accepts_are_read_as_the_bridge_expects() {
    let schema = Schema::generate();
    let notification = |method: &str, params: Value, definition: &str| {
        schema.validate(definition, &params);
        schema.validate(
            "ServerNotification",
            &json!({ "method": method, "params": params }),
        );
        ServerNotification::parse(method, params).unwrap()
    };

    let item = |item: Value| json!({"threadId": "thr-1", "turnId": "turn-1", "completedAtMs": 1, "item": item});
    match notification(
        ServerNotification::ITEM_COMPLETED,
        item(
            json!({"type": "userMessage", "id": "u1", "clientId": "op-1", "content": [{"type": "text", "text": "hi", "text_elements": []}]}),
        ),
        "v2/ItemCompletedNotification",
    ) {
        ServerNotification::ItemCompleted(ItemNotification {
            thread_id,
            item: ThreadItem::UserMessage(m),
        }) => {
            assert_eq!(thread_id, "thr-1");
            assert_eq!(m.client_id.as_deref(), Some("op-1"));
        }
        other => panic!("{other:?}"),
    }
    let failed_call = json!({"type": "mcpToolCall", "id": "c1", "server": "gitea", "tool": "create_issue_comment",
        "status": "failed", "arguments": {"index": 3}, "result": {"content": [{"type": "text", "text": "404 not found"}]}, "error": null});
    match notification(
        ServerNotification::ITEM_COMPLETED,
        item(failed_call),
        "v2/ItemCompletedNotification",
    ) {
        ServerNotification::ItemCompleted(ItemNotification {
            item: ThreadItem::McpToolCall(call),
            ..
        }) => {
            assert_eq!(call.status, McpToolCallStatus::Failed);
            assert_eq!(call.failure().as_deref(), Some("404 not found"));
            assert_eq!(call.arguments["index"], 3);
        }
        other => panic!("{other:?}"),
    }
    match notification(
        ServerNotification::ITEM_STARTED,
        json!({"threadId": "thr-1", "turnId": "turn-1", "startedAtMs": 1, "item": {"type": "commandExecution", "id": "x",
            "command": "ls", "cwd": "/w", "commandActions": [], "status": "inProgress"}}),
        "v2/ItemStartedNotification",
    ) {
        ServerNotification::ItemStarted(ItemNotification {
            item: ThreadItem::CommandExecution(c),
            ..
        }) => {
            assert_eq!((c.id.as_str(), c.command.as_str()), ("x", "ls"));
            assert_eq!(c.status, CommandExecutionStatus::InProgress);
            assert_eq!(c.exit_code, None);
        }
        other => panic!("{other:?}"),
    }
    // The items the transcript shows, as the schema describes them.
    match notification(
        ServerNotification::ITEM_COMPLETED,
        item(
            json!({"type": "commandExecution", "id": "x", "command": "cargo test", "cwd": "/w",
            "commandActions": [{"type": "unknown", "command": "cargo test"}], "status": "failed",
            "exitCode": 101, "aggregatedOutput": "1 failed\n", "durationMs": 900, "processId": null}),
        ),
        "v2/ItemCompletedNotification",
    ) {
        ServerNotification::ItemCompleted(ItemNotification {
            item: ThreadItem::CommandExecution(c),
            ..
        }) => {
            assert_eq!(c.status, CommandExecutionStatus::Failed);
            assert_eq!(c.exit_code, Some(101));
            assert_eq!(c.aggregated_output.as_deref(), Some("1 failed\n"));
            assert_eq!(c.duration_ms, Some(900));
        }
        other => panic!("{other:?}"),
    }
    match notification(
        ServerNotification::ITEM_COMPLETED,
        item(
            json!({"type": "fileChange", "id": "p", "status": "completed", "changes": [
            {"path": "/w/a.txt", "kind": {"type": "add"}, "diff": "hello\n"},
            {"path": "/w/b.rs", "kind": {"type": "update", "move_path": "/w/c.rs"}, "diff": "@@ -1 +1 @@\n-a\n+b\n"},
            {"path": "/w/d.rs", "kind": {"type": "delete"}, "diff": "gone\n"}]}),
        ),
        "v2/ItemCompletedNotification",
    ) {
        ServerNotification::ItemCompleted(ItemNotification {
            item: ThreadItem::FileChange(f),
            ..
        }) => {
            assert_eq!(f.status, PatchApplyStatus::Completed);
            let kinds: Vec<_> = f.changes.iter().map(|c| c.kind.clone()).collect();
            assert_eq!(
                kinds,
                [
                    PatchChangeKind::Add,
                    PatchChangeKind::Update {
                        move_path: Some("/w/c.rs".into())
                    },
                    PatchChangeKind::Delete
                ]
            );
            assert_eq!(f.changes[1].diff, "@@ -1 +1 @@\n-a\n+b\n");
        }
        other => panic!("{other:?}"),
    }
    match notification(
        ServerNotification::ITEM_COMPLETED,
        item(
            json!({"type": "reasoning", "id": "r", "summary": ["looked at the parser"], "content": []}),
        ),
        "v2/ItemCompletedNotification",
    ) {
        ServerNotification::ItemCompleted(ItemNotification {
            item: ThreadItem::Reasoning(r),
            ..
        }) => assert_eq!(r.summary, ["looked at the parser"]),
        other => panic!("{other:?}"),
    }
    match notification(
        ServerNotification::ITEM_COMPLETED,
        item(json!({"type": "agentMessage", "id": "m9", "text": "done"})),
        "v2/ItemCompletedNotification",
    ) {
        ServerNotification::ItemCompleted(ItemNotification {
            item: ThreadItem::AgentMessage(m),
            ..
        }) => assert_eq!((m.id.as_str(), m.text.as_str()), ("m9", "done")),
        other => panic!("{other:?}"),
    }
    match notification(
        ServerNotification::ITEM_COMPLETED,
        item(json!({"type": "contextCompaction", "id": "cc"})),
        "v2/ItemCompletedNotification",
    ) {
        ServerNotification::ItemCompleted(ItemNotification {
            item: ThreadItem::Other { kind, id },
            ..
        }) => assert_eq!((kind.as_str(), id.as_str()), ("contextCompaction", "cc")),
        other => panic!("{other:?}"),
    }
    let breakdown = |total: i64| {
        json!({"totalTokens": total, "inputTokens": total - 5, "cachedInputTokens": 2,
        "cacheWriteInputTokens": 0, "outputTokens": 5, "reasoningOutputTokens": 1})
    };
    match notification(
        ServerNotification::TOKEN_USAGE_UPDATED,
        json!({"threadId": "thr-1", "turnId": "turn-1",
            "tokenUsage": {"total": breakdown(30), "last": breakdown(15), "modelContextWindow": 258400}}),
        "v2/ThreadTokenUsageUpdatedNotification",
    ) {
        ServerNotification::TokenUsageUpdated(n) => {
            assert_eq!(n.thread_id, "thr-1");
            let t = n.token_usage.total;
            assert_eq!(
                (
                    t.total_tokens,
                    t.input_tokens,
                    t.cached_input_tokens,
                    t.output_tokens,
                    t.reasoning_output_tokens
                ),
                (30, 25, 2, 5, 1)
            );
            assert_eq!(n.token_usage.last.total_tokens, 15);
        }
        other => panic!("{other:?}"),
    }
    match notification(
        ServerNotification::ERROR,
        json!({"threadId": "thr-1", "turnId": "turn-1", "willRetry": false, "error": {"message": "high demand"}}),
        "v2/ErrorNotification",
    ) {
        ServerNotification::Error(e) => assert_eq!(e.error.message, "high demand"),
        other => panic!("{other:?}"),
    }
    let turn = json!({"id": "turn-1", "status": "completed", "items": [
        {"type": "userMessage", "id": "u1", "clientId": "op-1", "content": []},
        {"type": "agentMessage", "id": "m1", "text": "first"},
        {"type": "agentMessage", "id": "m2", "text": "The flaky test is a timer race."}]});
    match notification(
        ServerNotification::TURN_COMPLETED,
        json!({"threadId": "thr-1", "turn": turn}),
        "v2/TurnCompletedNotification",
    ) {
        ServerNotification::TurnCompleted(n) => {
            assert_eq!(n.turn.status, TurnStatus::Completed);
            assert_eq!(
                n.turn.last_agent_text().as_deref(),
                Some("The flaky test is a timer race.")
            );
        }
        other => panic!("{other:?}"),
    }
    match notification(
        ServerNotification::MCP_SERVER_STATUS_UPDATED,
        json!({"threadId": "thr-1", "name": "gitea", "status": "failed", "error": "spawn failed", "failureReason": null}),
        "v2/McpServerStatusUpdatedNotification",
    ) {
        ServerNotification::McpServerStatusUpdated(n) => {
            assert_eq!(n.status, McpServerStartupState::Failed);
            assert_eq!(n.error.as_deref(), Some("spawn failed"));
        }
        other => panic!("{other:?}"),
    }

    // History and the answers the bridge reads.
    let history = json!({"data": [
        {"id": "turn-2", "status": "failed", "items": [], "error": {"message": "boom"}},
        turn,
    ]});
    schema.validate("v2/ThreadTurnsListResponse", &history);
    let history: ThreadTurnsListResponse = serde_json::from_value(history).unwrap();
    assert_eq!(history.data[0].status, TurnStatus::Failed);
    assert_eq!(history.data[0].error.as_ref().unwrap().message, "boom");
    assert_eq!(history.data[0].error.as_ref().unwrap().denial(), None);
    // What codex says of a provider's capacity refusal, in its words (seen
    // from the pinned codex against the fake model's 429 and 503 answers),
    // and of failures that are not one.
    for (info, denial) in [
        (
            json!("usageLimitExceeded"),
            Some(CapacityDenial::UsageLimit),
        ),
        (
            json!("rateLimitExceeded"),
            Some(CapacityDenial::RateLimited),
        ),
        (json!("serverOverloaded"), Some(CapacityDenial::Overloaded)),
        (
            json!("policyCapacityUnavailable"),
            Some(CapacityDenial::PolicyCapacity),
        ),
        (
            json!({"responseTooManyFailedAttempts": {"httpStatusCode": 429}}),
            Some(CapacityDenial::RateLimited),
        ),
        (
            json!({"httpConnectionFailed": {"httpStatusCode": 503}}),
            Some(CapacityDenial::Overloaded),
        ),
        (
            json!({"responseStreamDisconnected": {"httpStatusCode": 500}}),
            None,
        ),
        (json!("contextWindowExceeded"), None),
        (json!("badRequest"), None),
    ] {
        let failed = json!({"data": [{"id": "turn-4", "status": "failed", "items": [],
            "error": {"message": "refused", "codexErrorInfo": info}}]});
        schema.validate("v2/ThreadTurnsListResponse", &failed);
        let failed: ThreadTurnsListResponse = serde_json::from_value(failed).unwrap();
        assert_eq!(
            failed.data[0].error.as_ref().unwrap().denial(),
            denial,
            "{info}"
        );
    }
    let started = json!({"turn": {"id": "turn-3", "status": "inProgress", "items": []}});
    schema.validate("v2/TurnStartResponse", &started);
    let started: TurnStartResponse = serde_json::from_value(started).unwrap();
    assert_eq!(started.turn.id, "turn-3");
    let steered = json!({"turnId": "turn-3"});
    schema.validate("v2/TurnSteerResponse", &steered);
    assert_eq!(
        serde_json::from_value::<TurnSteerResponse>(steered)
            .unwrap()
            .turn_id,
        "turn-3"
    );

    // The approvals, as the server asks for them.
    let request = |method: &str, params: Value, definition: &str| {
        schema.validate(definition, &params);
        schema.validate(
            "ServerRequest",
            &json!({ "id": 0, "method": method, "params": params }),
        );
        ApprovalRequest::parse(method, params).unwrap().unwrap()
    };
    let command = request(
        ApprovalKind::COMMAND,
        json!({"threadId": "thr-1", "turnId": "turn-1", "itemId": "call-1", "startedAtMs": 1,
            "command": "echo hi > f", "cwd": "/w", "reason": "writes a file"}),
        "CommandExecutionRequestApprovalParams",
    );
    assert_eq!(command.kind, ApprovalKind::Command);
    assert_eq!(command.thread_id, "thr-1");
    assert_eq!(command.detail.command.as_deref(), Some("echo hi > f"));
    assert_eq!(command.detail.item_id.as_deref(), Some("call-1"));
    let patch = request(
        ApprovalKind::FILE_CHANGE,
        json!({"threadId": "thr-1", "turnId": "turn-1", "itemId": "call-2", "startedAtMs": 1, "reason": null, "grantRoot": "/w"}),
        "FileChangeRequestApprovalParams",
    );
    assert_eq!(patch.detail.grant_root.as_deref(), Some("/w"));
    let tool = request(
        ApprovalKind::MCP_TOOL,
        json!({"threadId": "thr-1", "turnId": "turn-1", "serverName": "gitea", "mode": "form",
            "message": "Allow gitea to run create_issue_comment?", "requestedSchema": {"type": "object", "properties": {}},
            "_meta": {"codex_approval_kind": "mcp_tool_call", "tool_name": "create_issue_comment"}}),
        "McpServerElicitationRequestParams",
    );
    assert_eq!(tool.kind, ApprovalKind::McpTool);
    assert_eq!(tool.detail.server_name.as_deref(), Some("gitea"));
    assert_eq!(tool.detail.tool.as_deref(), Some("create_issue_comment"));
}
