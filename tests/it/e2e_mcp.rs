//! The Gitea MCP server fails, end to end: the real server and app-server,
//! a Gitea MCP command that is missing or exits at once. Codex reports the
//! failed start, the bridge refuses the thread, and the task ends `failed`
//! (`runtime_refused`) with one failure receipt: never retried, never a
//! turn without the tools its reply needs, the model never asked.

use crate::e2e::Loop;

fn refused(l: &Loop) {
    let task = l.comment("bob", l.issue, "@ccbot fix the parser");
    l.wait(&task, "failed");
    let d = l.detail(&task);
    assert_eq!(d["task"]["errorCode"], "runtime_refused", "{d}");
    assert_eq!(d["attempts"].as_array().unwrap().len(), 1, "not retried");
    assert!(d["turns"].as_array().unwrap().is_empty(), "no turn started");
    l.expect_one_receipt(&task, "failed");
    assert!(l.model().requests().is_empty(), "the model was asked");
}

#[test]
fn e2e_a_missing_gitea_mcp_command_fails_the_task_once_with_one_receipt() {
    let l = Loop::start_with(|b| b.env("CODEX_BRIDGE_GITEA_MCP_COMMAND", "/nonexistent/gitea-mcp"));
    refused(&l);
}

#[test]
fn e2e_a_gitea_mcp_server_that_exits_at_once_fails_the_task_once_with_one_receipt() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_GITEA_MCP_COMMAND", "/bin/sh")
            .env("CODEX_BRIDGE_GITEA_MCP_ARGS", r#"["-c", "exit 3"]"#)
    });
    refused(&l);
}
