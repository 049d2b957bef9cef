//! What a thread runs under. A thread resumed in a new app-server process
//! keeps only what Codex stores with it (its history, and the approval policy
//! and sandbox it last ran under); its MCP servers come from the request that
//! loads it. So `thread/resume` carries the same setup as `thread/start`, and
//! both are built here.

use super::protocol::{AskForApproval, SandboxMode, ThreadSetup};
use super::settings::CodexSettings;
use crate::agent::AgentError;
use std::path::Path;

/// The repository's approval policy and sandbox for a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ThreadPolicy {
    pub(super) approval_policy: AskForApproval,
    pub(super) sandbox: SandboxMode,
}

impl ThreadPolicy {
    /// Reads the repository's policy. A value this codex does not accept is
    /// refused before anything is sent: retrying cannot fix the configuration.
    pub(super) fn parse(approval_policy: &str, sandbox: &str) -> Result<Self, AgentError> {
        Ok(ThreadPolicy {
            approval_policy: approval_policy.parse().map_err(|e| {
                AgentError::Refused(format!("{e} (check the config key approval_policy)"))
            })?,
            sandbox: sandbox
                .parse()
                .map_err(|e| AgentError::Refused(format!("{e} (check the config key sandbox)")))?,
        })
    }
}

/// The setup of `thread/start` and of `thread/resume`. Without a `policy` the
/// thread keeps the approval policy and sandbox it last ran under (a new one
/// gets CODEX_HOME's defaults).
pub(super) fn thread_setup(
    settings: &CodexSettings,
    cwd: &Path,
    policy: Option<ThreadPolicy>,
) -> ThreadSetup {
    ThreadSetup {
        cwd: cwd.to_owned(),
        developer_instructions: settings.developer_instructions.clone(),
        approval_policy: policy.map(|p| p.approval_policy),
        sandbox: policy.map(|p| p.sandbox),
        config: (!settings.thread_config.is_empty()).then(|| settings.thread_config.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::protocol::{ThreadResume, ThreadStart};
    use super::*;
    use crate::codex::GiteaMcp;
    use serde_json::{json, Value};
    use std::time::Duration;

    fn settings() -> CodexSettings {
        let mcp = GiteaMcp::example();
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
        let policy = ThreadPolicy::parse("untrusted", "read-only").unwrap();
        let cwd = Path::new("/srv/ws/acme/widgets");
        let start = serde_json::to_value(ThreadStart {
            setup: thread_setup(&s, cwd, Some(policy)),
        })
        .unwrap();
        let mut resume = serde_json::to_value(ThreadResume {
            thread_id: "thr-1".into(),
            setup: thread_setup(&s, cwd, Some(policy)),
        })
        .unwrap();
        let id = resume.as_object_mut().unwrap().remove("threadId");
        assert_eq!(id, Some(json!("thr-1")));
        assert_eq!(start, resume);
        assert_eq!(start["approvalPolicy"], "untrusted");
        assert_eq!(start["sandbox"], "read-only");
        assert_eq!(start["developerInstructions"], "be careful");
        assert_eq!(start["config"]["mcp_servers.gitea.command"], "gitea-mcp");
    }

    #[test]
    fn without_a_policy_the_thread_keeps_its_own() {
        let params: Value = serde_json::to_value(ThreadResume {
            thread_id: "thr-1".into(),
            setup: thread_setup(&settings(), Path::new("/w"), None),
        })
        .unwrap();
        assert!(params.get("approvalPolicy").is_none(), "{params}");
        assert!(params.get("sandbox").is_none(), "{params}");
        assert_eq!(params["config"]["mcp_servers.gitea.command"], "gitea-mcp");
        assert_eq!(params["developerInstructions"], "be careful");
    }

    #[test]
    fn a_policy_this_codex_does_not_accept_is_refused_before_sending() {
        for (policy, sandbox) in [("on-failure", "read-only"), ("never", "full")] {
            let err = ThreadPolicy::parse(policy, sandbox).unwrap_err();
            assert!(matches!(err, AgentError::Refused(_)), "{err:?}");
        }
        assert!(ThreadPolicy::parse("on-request", "danger-full-access").is_ok());
    }
}
