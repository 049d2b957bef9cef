//! What a thread runs under. A thread resumed in a new app-server process
//! keeps only what Codex stores with it (its history, and the approval policy
//! and sandbox it last ran under); its MCP servers come from the request that
//! loads it. So `thread/resume` carries the same setup as `thread/start`, and
//! both are built here.

use super::protocol::{AskForApproval, SandboxMode, ThreadSetup};
use super::settings::{base_branch_instructions, reply_instructions, CodexSettings};
use crate::agent::{AgentError, ThreadTerms};
use crate::domain::trust::InstructionsSource;
use serde_json::json;
use std::path::Path;

/// The repository's approval policy and sandbox for a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ThreadPolicy {
    pub(super) approval_policy: AskForApproval,
    pub(super) sandbox: SandboxMode,
}

impl ThreadPolicy {
    /// The approval policy and sandbox of a thread's terms.
    pub(super) fn of(terms: &ThreadTerms) -> Result<Self, AgentError> {
        Self::parse(
            terms.policy.approval_policy.as_str(),
            terms.policy.sandbox.as_str(),
        )
    }

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
/// gets CODEX_HOME's defaults). What else the thread gets follows its terms:
/// the Gitea MCP server only with the Gitea write tool; with the base
/// branch's instructions, Codex's own loading of `AGENTS.md` from the working
/// directory is switched off and the base branch's copy is in the developer
/// instructions.
pub(super) fn thread_setup(
    settings: &CodexSettings,
    cwd: &Path,
    policy: Option<ThreadPolicy>,
    terms: &ThreadTerms,
) -> ThreadSetup {
    let mut config = if terms.policy.gitea_write_tool {
        settings.thread_config.clone()
    } else {
        serde_json::Map::new()
    };
    let mut developer_instructions = format!(
        "{}\n\n{}",
        settings.developer_instructions,
        reply_instructions(terms.policy.gitea_write_tool)
    );
    if terms.policy.instructions == InstructionsSource::BaseBranch {
        config.insert("project_doc_max_bytes".into(), json!(0));
        developer_instructions.push_str("\n\n");
        developer_instructions.push_str(&base_branch_instructions(
            terms.base_instructions.as_deref(),
        ));
    }
    ThreadSetup {
        cwd: cwd.to_owned(),
        developer_instructions,
        approval_policy: policy.map(|p| p.approval_policy),
        sandbox: policy.map(|p| p.sandbox),
        config: (!config.is_empty()).then_some(config),
    }
}

#[cfg(test)]
mod tests {
    use super::super::protocol::{ThreadResume, ThreadStart};
    use super::*;
    use crate::codex::GiteaMcp;
    use crate::domain::policy::{ApprovalPolicy, RepoPolicy, Sandbox};
    use crate::domain::trust::ExecutionPolicy;
    use serde_json::Value;
    use std::time::Duration;

    fn trusted() -> ThreadTerms {
        ThreadTerms {
            policy: ExecutionPolicy::trusted(&RepoPolicy {
                approval_policy: ApprovalPolicy::Untrusted,
                sandbox: Sandbox::ReadOnly,
                turn_timeout: Duration::from_secs(1),
            }),
            base_instructions: None,
        }
    }

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
            workflow_tools: false,
        }
    }

    #[test]
    fn a_resume_carries_everything_a_start_does_plus_the_thread_id() {
        let s = settings();
        let policy = ThreadPolicy::parse("untrusted", "read-only").unwrap();
        let cwd = Path::new("/srv/ws/acme/widgets");
        let start = serde_json::to_value(ThreadStart {
            setup: thread_setup(&s, cwd, Some(policy), &trusted()),
            dynamic_tools: Vec::new(),
        })
        .unwrap();
        let mut resume = serde_json::to_value(ThreadResume {
            thread_id: "thr-1".into(),
            setup: thread_setup(&s, cwd, Some(policy), &trusted()),
        })
        .unwrap();
        let id = resume.as_object_mut().unwrap().remove("threadId");
        assert_eq!(id, Some(json!("thr-1")));
        assert_eq!(start, resume);
        assert_eq!(start["approvalPolicy"], "untrusted");
        assert_eq!(start["sandbox"], "read-only");
        let instructions = start["developerInstructions"].as_str().unwrap();
        assert!(instructions.starts_with("be careful\n\n"), "{instructions}");
        assert!(
            instructions.contains("through the Gitea tools"),
            "{instructions}"
        );
        assert_eq!(start["config"]["mcp_servers.gitea.command"], "gitea-mcp");
    }

    #[test]
    fn without_a_policy_the_thread_keeps_its_own() {
        let params: Value = serde_json::to_value(ThreadResume {
            thread_id: "thr-1".into(),
            setup: thread_setup(&settings(), Path::new("/w"), None, &trusted()),
        })
        .unwrap();
        assert!(params.get("approvalPolicy").is_none(), "{params}");
        assert!(params.get("sandbox").is_none(), "{params}");
        assert_eq!(params["config"]["mcp_servers.gitea.command"], "gitea-mcp");
        assert!(params["developerInstructions"]
            .as_str()
            .unwrap()
            .starts_with("be careful"));
    }

    #[test]
    fn an_untrusted_thread_gets_no_gitea_server_and_only_the_base_branchs_instructions() {
        let terms = ThreadTerms {
            policy: ExecutionPolicy::untrusted(),
            base_instructions: Some("Run cargo test before answering.".into()),
        };
        let policy = ThreadPolicy::of(&terms).unwrap();
        let params = serde_json::to_value(ThreadStart {
            setup: thread_setup(&settings(), Path::new("/w"), Some(policy), &terms),
            dynamic_tools: Vec::new(),
        })
        .unwrap();
        assert_eq!(params["sandbox"], "read-only");
        assert_eq!(params["approvalPolicy"], "never");
        let config = params["config"].as_object().unwrap();
        assert!(
            config.keys().all(|k| !k.starts_with("mcp_servers")),
            "{config:?}"
        );
        assert_eq!(config["project_doc_max_bytes"], 0);
        let instructions = params["developerInstructions"].as_str().unwrap();
        assert!(instructions.starts_with("be careful"), "{instructions}");
        assert!(instructions.contains("Run cargo test before answering."));
        assert!(instructions.contains("no Gitea tools"), "{instructions}");
        assert!(
            !instructions.contains("through the Gitea tools"),
            "{instructions}"
        );
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
