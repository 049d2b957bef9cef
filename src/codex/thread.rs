//! What a thread runs under. A thread resumed in a new app-server process
//! keeps only what Codex stores with it (its history, and the approval policy
//! and sandbox it last ran under); its MCP servers come from the request that
//! loads it. So `thread/resume` carries the same setup as `thread/start`, and
//! both are built here.

use super::runtime::CodexSettings;
use crate::domain::policy::{ApprovalPolicy, Sandbox};
use serde_json::{json, Value};
use std::path::Path;

/// The repository's approval policy and sandbox for a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ThreadPolicy {
    pub(super) approval_policy: ApprovalPolicy,
    pub(super) sandbox: Sandbox,
}

/// The params of `thread/start` (no `thread_id`) or of `thread/resume`
/// (`thread_id`). Without a `policy` the thread keeps the approval policy and
/// sandbox it last ran under (a new one gets CODEX_HOME's defaults).
pub(super) fn thread_params(
    settings: &CodexSettings,
    thread_id: Option<&str>,
    cwd: &Path,
    policy: Option<&ThreadPolicy>,
) -> Value {
    let mut params = json!({
        "cwd": cwd,
        "developerInstructions": settings.developer_instructions,
    });
    if let Some(id) = thread_id {
        params["threadId"] = json!(id);
    }
    if let Some(policy) = policy {
        // The app-server takes the names the config uses (`on-request`,
        // `workspace-write`), which `as_str` gives.
        params["approvalPolicy"] = json!(policy.approval_policy.as_str());
        params["sandbox"] = json!(policy.sandbox.as_str());
    }
    if !settings.thread_config.is_empty() {
        params["config"] = Value::Object(settings.thread_config.clone());
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codex::runtime::GiteaMcp;
    use std::time::Duration;

    fn settings() -> CodexSettings {
        let mcp = GiteaMcp {
            command: "gitea-mcp".into(),
            args: vec!["-t".into(), "stdio".into()],
            url_env: "GITEA_HOST".into(),
            url: "https://git.example.com".into(),
            token_env: "GITEA_ACCESS_TOKEN".into(),
        };
        CodexSettings {
            codex_bin: "codex".into(),
            codex_home: "/tmp/h".into(),
            developer_instructions: "be careful".into(),
            thread_config: mcp.thread_config(),
            env: Vec::new(),
            request_timeout: Duration::from_secs(1),
            nice: 0,
        }
    }

    #[test]
    fn a_resume_carries_everything_a_start_does_plus_the_thread_id() {
        let s = settings();
        let policy = ThreadPolicy {
            approval_policy: ApprovalPolicy::Untrusted,
            sandbox: Sandbox::ReadOnly,
        };
        let cwd = Path::new("/srv/ws/acme/widgets");
        let start = thread_params(&s, None, cwd, Some(&policy));
        let mut resume = thread_params(&s, Some("thr-1"), cwd, Some(&policy));
        let id = resume.as_object_mut().unwrap().remove("threadId");
        assert_eq!(id, Some(json!("thr-1")));
        assert_eq!(start, resume);
        assert_eq!(start["approvalPolicy"], "untrusted");
        assert_eq!(start["sandbox"], "read-only");
        let policy = ThreadPolicy {
            approval_policy: ApprovalPolicy::OnRequest,
            sandbox: Sandbox::WorkspaceWrite,
        };
        let start = thread_params(&s, None, cwd, Some(&policy));
        assert_eq!(start["approvalPolicy"], "on-request");
        assert_eq!(start["sandbox"], "workspace-write");
        assert_eq!(start["developerInstructions"], "be careful");
        assert_eq!(start["config"]["mcp_servers.gitea.command"], "gitea-mcp");
    }

    #[test]
    fn without_a_policy_the_thread_keeps_its_own() {
        let params = thread_params(&settings(), Some("thr-1"), Path::new("/w"), None);
        assert!(params.get("approvalPolicy").is_none(), "{params}");
        assert!(params.get("sandbox").is_none(), "{params}");
        assert_eq!(params["config"]["mcp_servers.gitea.command"], "gitea-mcp");
        assert_eq!(params["developerInstructions"], "be careful");
    }
}
