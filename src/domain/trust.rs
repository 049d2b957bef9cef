//! What a thread may do, decided once from facts and never from what anyone
//! wrote: [`ExecutionPolicy::decide`] turns the repository's policy, the
//! pull request's facts (where its head lives, whether its head commit's
//! author holds `trigger_permission`) and `trust_fork_prs` into the thread's
//! sandbox, approval policy, Gitea write tool, reply path and the source of
//! its repository instructions. No I/O: the session gathers the facts and
//! carries the policy out.
//!
//! A pull request is untrusted when its head is in another repository (a
//! fork), when its head commit's author lacks the permission to trigger work,
//! or when either cannot be established (Gitea did not say, the author maps to
//! no Gitea user): it fails closed. Its thread runs read-only under `never`
//! (so nothing can ask its way out), gets no Gitea MCP server, loads no
//! `AGENTS.md` from the checked-out head (the base branch's copy comes in the
//! developer instructions), and the bridge posts its final answer itself.
//! Comments and issue bodies never enter the decision.

use super::policy::{ApprovalPolicy, RepoPolicy, Sandbox};
pub use super::states::ThreadTrust;
use crate::domain::workflow::children::Authority;
use serde::{Deserialize, Serialize};

/// What Gitea says about a pull request, as far as trust goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrFacts {
    /// The head branch lives in the base repository itself (not a fork).
    pub head_in_base_repo: bool,
    /// The head commit's author is a Gitea user holding `trigger_permission`
    /// on the base repository. `false` when the author maps to no user.
    pub head_author_permitted: bool,
}

/// What the thread works on, for the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// An issue: nothing of it is checked out but the default branch, and
    /// the commenter's own permission was checked before the task started.
    Issue,
    /// A pull request with its facts, or `None` when they could not be read.
    PullRequest(Option<PrFacts>),
}

/// Who posts the task's final answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyPath {
    /// The agent, through the Gitea MCP server; the bridge verifies it.
    AgentViaMcp,
    /// The bridge, through the REST API with the reply marker.
    BridgeViaRest,
}

impl ReplyPath {
    /// Who posts the answer of a thread created with `trust`.
    pub fn of(trust: ThreadTrust) -> ReplyPath {
        match trust {
            ThreadTrust::Trusted => ReplyPath::AgentViaMcp,
            ThreadTrust::Untrusted => ReplyPath::BridgeViaRest,
        }
    }
}

/// Where the repository's instructions to the agent (`AGENTS.md`) come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstructionsSource {
    /// Codex loads them from its working directory, the checked-out tree.
    WorkingTree,
    /// The base branch's copy, in the developer instructions; Codex's own
    /// loading is off (`project_doc_max_bytes = 0`).
    BaseBranch,
}

/// What a thread runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionPolicy {
    pub trust: ThreadTrust,
    pub approval_policy: ApprovalPolicy,
    pub sandbox: Sandbox,
    /// Whether the thread gets the Gitea MCP server (which can write).
    pub gitea_write_tool: bool,
    pub reply_path: ReplyPath,
    pub instructions: InstructionsSource,
}

impl ExecutionPolicy {
    /// The policy of a thread on `subject` in a repository with `repo`'s policy.
    pub fn decide(repo: &RepoPolicy, trust_fork_prs: bool, subject: &Subject) -> ExecutionPolicy {
        let trusted = match subject {
            Subject::Issue => true,
            Subject::PullRequest(_) if trust_fork_prs => true,
            Subject::PullRequest(Some(f)) => f.head_in_base_repo && f.head_author_permitted,
            Subject::PullRequest(None) => false,
        };
        if trusted {
            ExecutionPolicy::trusted(repo)
        } else {
            ExecutionPolicy::untrusted()
        }
    }

    /// The repository's policy with every tool.
    pub fn trusted(repo: &RepoPolicy) -> ExecutionPolicy {
        ExecutionPolicy {
            trust: ThreadTrust::Trusted,
            approval_policy: repo.approval_policy,
            sandbox: repo.sandbox,
            gitea_write_tool: true,
            reply_path: ReplyPath::AgentViaMcp,
            instructions: InstructionsSource::WorkingTree,
        }
    }

    /// Read-only, never asking, no Gitea write tool, the base branch's
    /// instructions, and the bridge's reply.
    pub fn untrusted() -> ExecutionPolicy {
        ExecutionPolicy {
            trust: ThreadTrust::Untrusted,
            approval_policy: ApprovalPolicy::Never,
            sandbox: Sandbox::ReadOnly,
            gitea_write_tool: false,
            reply_path: ReplyPath::BridgeViaRest,
            instructions: InstructionsSource::BaseBranch,
        }
    }

    /// A delegated child's policy: no more than it was `delegated` (its
    /// parent's sandbox and approval policy at most), no Gitea write tool,
    /// and no voice in the thread (its result goes to its parent).
    pub fn for_child(self, delegated: Authority) -> ExecutionPolicy {
        let own = Authority {
            sandbox: self.sandbox,
            approval: self.approval_policy,
            gitea_write: self.gitea_write_tool,
        };
        let a = own.meet(delegated.for_child());
        ExecutionPolicy {
            approval_policy: a.approval,
            sandbox: a.sandbox,
            gitea_write_tool: a.gitea_write,
            reply_path: ReplyPath::BridgeViaRest,
            ..self
        }
    }

    /// What the policy lets a thread do, as delegation compares it.
    pub fn authority(&self) -> Authority {
        Authority {
            sandbox: self.sandbox,
            approval: self.approval_policy,
            gitea_write: self.gitea_write_tool,
        }
    }

    /// The policy a thread created with `trust` runs under again (a later
    /// turn, a resume in a new app-server process).
    pub fn of(trust: ThreadTrust, repo: &RepoPolicy) -> ExecutionPolicy {
        match trust {
            ThreadTrust::Trusted => ExecutionPolicy::trusted(repo),
            ThreadTrust::Untrusted => ExecutionPolicy::untrusted(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn repo(approval_policy: ApprovalPolicy, sandbox: Sandbox) -> RepoPolicy {
        RepoPolicy {
            approval_policy,
            sandbox,
            turn_timeout: Duration::from_secs(60),
        }
    }

    fn any_repo() -> impl Strategy<Value = RepoPolicy> {
        (
            prop::sample::select(ApprovalPolicy::ALL.to_vec()),
            prop::sample::select(Sandbox::ALL.to_vec()),
        )
            .prop_map(|(a, s)| repo(a, s))
    }

    fn any_facts() -> impl Strategy<Value = Option<PrFacts>> {
        prop::option::of(
            (any::<bool>(), any::<bool>()).prop_map(|(same, permitted)| PrFacts {
                head_in_base_repo: same,
                head_author_permitted: permitted,
            }),
        )
    }

    use crate::domain::workflow::children::tests::authority;

    proptest! {
        /// A child's thread never runs with more than it was delegated, never
        /// writes to Gitea and never posts its answer itself, whatever the
        /// repository's policy and the thread's trust.
        #[test]
        fn a_childs_policy_stays_within_its_delegation(
            sandbox in proptest::sample::select(Sandbox::ALL.to_vec()),
            approval in proptest::sample::select(ApprovalPolicy::ALL.to_vec()),
            trusted in any::<bool>(),
            delegated in authority(),
        ) {
            let repo = RepoPolicy {
                approval_policy: approval,
                sandbox,
                turn_timeout: std::time::Duration::from_secs(60),
            };
            let own = if trusted { ExecutionPolicy::trusted(&repo) } else { ExecutionPolicy::untrusted() };
            let child = own.for_child(delegated);
            prop_assert!(child.authority().within(&delegated));
            prop_assert!(child.authority().within(&own.authority()));
            prop_assert!(!child.gitea_write_tool);
            prop_assert_eq!(child.reply_path, ReplyPath::BridgeViaRest);
            prop_assert_eq!(child.trust, own.trust);
        }
    }

    proptest! {

        // Failing cases are kept beside the integration tests' and replayed first.
        #![proptest_config(ProptestConfig {
            failure_persistence: Some(Box::new(
                proptest::test_runner::FileFailurePersistence::Direct(
                    "tests/proptest-regressions/domain-trust.txt"
                )
            )),
            ..ProptestConfig::default()
        })]

        /// Whatever the repository allows, a pull request that is not
        /// provably from the base repository and a permitted author gets no
        /// more than read-only, never, no write tool, the bridge's reply and
        /// the base branch's instructions, unless the operator trusts forks.
        #[test]
        fn an_untrusted_pull_request_never_gets_more_than_read_only(
            repo in any_repo(),
            facts in any_facts(),
            trust_fork_prs in any::<bool>(),
        ) {
            let p = ExecutionPolicy::decide(&repo, trust_fork_prs, &Subject::PullRequest(facts.clone()));
            let provably_ours = facts.is_some_and(|f| f.head_in_base_repo && f.head_author_permitted);
            if !trust_fork_prs && !provably_ours {
                prop_assert_eq!(p.trust, ThreadTrust::Untrusted);
                prop_assert_eq!(p.sandbox, Sandbox::ReadOnly);
                prop_assert_eq!(p.approval_policy, ApprovalPolicy::Never);
                prop_assert!(!p.gitea_write_tool);
                prop_assert_eq!(p.reply_path, ReplyPath::BridgeViaRest);
                prop_assert_eq!(p.instructions, InstructionsSource::BaseBranch);
            } else {
                prop_assert_eq!(p, ExecutionPolicy::trusted(&repo));
            }
            // Whatever the decision, a thread created with it runs under it again.
            prop_assert_eq!(ExecutionPolicy::of(p.trust, &repo), p);
            prop_assert_eq!(ReplyPath::of(p.trust), p.reply_path);
        }
    }

    #[test]
    fn issues_and_same_repository_pull_requests_by_writers_keep_the_repositorys_policy() {
        let r = repo(ApprovalPolicy::OnRequest, Sandbox::WorkspaceWrite);
        for subject in [
            Subject::Issue,
            Subject::PullRequest(Some(PrFacts {
                head_in_base_repo: true,
                head_author_permitted: true,
            })),
        ] {
            let p = ExecutionPolicy::decide(&r, false, &subject);
            assert_eq!(p.sandbox, Sandbox::WorkspaceWrite);
            assert_eq!(p.approval_policy, ApprovalPolicy::OnRequest);
            assert!(p.gitea_write_tool);
            assert_eq!(p.reply_path, ReplyPath::AgentViaMcp);
        }
    }
}
