//! Who may do what: the commenter's permission, checked again when the task
//! starts, and the terms a task's thread runs under: its trust decided from facts
//! ([`ExecutionPolicy::decide`]: the pull request's head repository and head
//! commit author, never what a comment says), the base branch's `AGENTS.md`
//! when the thread may not read the head's, and the audit of the decision
//! with the `state_version` it was made on.

use super::decide::{Event, Permission};
use super::drive::{DriveError, TaskDrive};
use crate::agent::ThreadTerms;
use crate::domain::policy::RepoPolicy;
use crate::domain::trust::{ExecutionPolicy, InstructionsSource, Subject, ThreadTrust};
use crate::store::audit::{self, Audit};

impl TaskDrive {
    /// The commenter's permission, checked again now that the task starts.
    pub(super) async fn check_permission(&mut self) -> Event {
        use crate::forge::TriggerCheck;
        if self.out_of_turns() {
            self.detail = self.budget.map(|b| b.describe());
            return Event::Permission(Permission::OverBudget);
        }
        let check = self
            .deps
            .verifier
            .may_trigger(self.task.resource_key.clone(), self.task.author.clone())
            .await;
        Event::Permission(match check {
            TriggerCheck::Allowed => match self.gated_for_author().await {
                Ok(false) if self.task.continuation.is_some() => self.continuation_may_run().await,
                Ok(false) => Permission::Allowed,
                Ok(true) => {
                    self.detail = Some("the workflow waits for its owner".into());
                    Permission::OwnerGate
                }
                // Fails closed: the gate cannot be checked, so nothing runs yet.
                Err(e) => {
                    self.detail = Some(e);
                    Permission::Unknown
                }
            },
            TriggerCheck::Denied(why) => {
                self.detail = Some(why);
                Permission::Denied
            }
            TriggerCheck::Unknown(e) => {
                self.detail = Some(e);
                Permission::Unknown
            }
        })
    }

    /// A continuation runs only while its workflow is open (the intent's
    /// transaction checks again: see `workflows::admit_continuation`) and
    /// its Issue/PR is open: closed or merged, its workflow ends
    /// (`resource_closed`); unreadable, nothing runs yet.
    async fn continuation_may_run(&mut self) -> Permission {
        let id = self.task.workflow_id.clone();
        let workflow = self
            .deps
            .store
            .read(move |c| match &id {
                Some(id) => crate::store::workflows::find(c, id),
                None => Ok(None),
            })
            .await;
        match workflow {
            Ok(Some(w)) if w.state != crate::domain::workflow::WorkflowState::Open => {
                self.detail = Some(format!("its workflow is {}", w.state.as_str()));
                return Permission::WorkflowNotOpen;
            }
            Ok(_) => {}
            Err(e) => {
                self.detail = Some(format!(
                    "the continuation's workflow could not be read: {e}"
                ));
                return Permission::Unknown;
            }
        }
        match self
            .deps
            .verifier
            .resource_open(self.task.resource_key.clone())
            .await
        {
            Ok(true) => Permission::Allowed,
            Ok(false) => {
                self.detail = Some("the Issue or pull request is closed".into());
                Permission::ResourceClosed
            }
            Err(e) => {
                self.detail = Some(format!("whether the Issue or pull request is open: {e}"));
                Permission::Unknown
            }
        }
    }

    /// The session's workflow waits for its owner and this task's author is
    /// neither the owner nor a holder of `gate_permission` (`Err`: the
    /// workflow or the permission could not be read). A holder answers for
    /// the owner: the task then joins as the owner's input.
    async fn gated_for_author(&mut self) -> Result<bool, String> {
        if self.task.continuation.is_some() {
            return Ok(false);
        }
        let (key, author) = (self.task.session_key.clone(), self.task.author.clone());
        let live = self
            .deps
            .store
            .read(move |c| crate::store::workflows::live(c, &key))
            .await;
        let waits_for_another = match live {
            Ok(Some(w)) => {
                w.state == crate::domain::workflow::WorkflowState::WaitingOwner
                    && !w.owner.eq_ignore_ascii_case(&author)
            }
            Ok(None) => false,
            Err(e) => return Err(format!("the session's workflow could not be read: {e}")),
        };
        if !waits_for_another {
            return Ok(false);
        }
        match self
            .deps
            .verifier
            .may_answer_gate(self.task.resource_key.clone(), author)
            .await
        {
            Ok(true) => {
                self.answers_for_owner = true;
                Ok(false)
            }
            Ok(false) => Ok(true),
            Err(e) => Err(format!("whether the commenter holds gate_permission: {e}")),
        }
    }

    /// Decides the thread's terms for this task's turn and audits them.
    pub(super) async fn thread_terms(
        &mut self,
        repo: &RepoPolicy,
    ) -> Result<ThreadTerms, DriveError> {
        let trust_forks = self.deps.settings.trust_fork_prs;
        let mut facts_error = None;
        let subject = if !self.task.resource_key.is_pull() {
            Subject::Issue
        } else if trust_forks {
            // Trusted whatever the facts: no need to ask.
            Subject::PullRequest(None)
        } else {
            match self
                .deps
                .verifier
                .pr_facts(self.task.resource_key.clone())
                .await
            {
                Ok(facts) => Subject::PullRequest(Some(facts)),
                Err(e) => {
                    // Fails closed: a pull request whose facts cannot be read
                    // runs as untrusted.
                    tracing::warn!(task.id = %self.task.task_id, error = %e, "could not read the pull request's head; it runs untrusted");
                    facts_error = Some(e);
                    Subject::PullRequest(None)
                }
            }
        };
        let policy = self.as_delegated(ExecutionPolicy::decide(repo, trust_forks, &subject));
        let base_instructions = match policy.instructions {
            InstructionsSource::WorkingTree => None,
            InstructionsSource::BaseBranch => self.base_instructions().await,
        };
        // A continuation's answer (owed once it completes its workflow) is
        // always posted by the bridge: its prompt asks the agent to post
        // nothing.
        if self.task.continuation.is_none() {
            self.snap.reply_path = policy.reply_path;
        }
        let facts = match &subject {
            Subject::PullRequest(Some(f)) => serde_json::json!({
                "headInBaseRepo": f.head_in_base_repo,
                "headAuthorPermitted": f.head_author_permitted,
            }),
            _ => serde_json::Value::Null,
        };
        let meta = serde_json::json!({
            "stateVersion": self.snap.state_version,
            "policy": policy,
            "pullRequest": facts,
            "factsError": facts_error,
            "trustForkPrs": trust_forks,
            "baseInstructions": base_instructions.is_some(),
        });
        let task_id = self.task.task_id.clone();
        self.deps
            .store
            .write(move |c| {
                audit::record(
                    c,
                    &Audit::new("thread.trust", "system")
                        .task(&task_id)
                        .meta(meta.clone()),
                )
                .map(|_| ())
            })
            .await?;
        if policy.trust == ThreadTrust::Untrusted {
            tracing::info!(task.id = %self.task.task_id, "untrusted pull request: the thread runs read-only without Gitea tools");
        }
        Ok(ThreadTerms {
            policy,
            base_instructions,
        })
    }

    /// The terms of the session's thread as it was created (for a turn that
    /// follows the task's own, such as the reply-retry turn).
    pub(super) fn stored_terms(&self, repo: &RepoPolicy) -> ThreadTerms {
        ThreadTerms {
            policy: self.as_delegated(ExecutionPolicy::of(
                self.thread_trust.unwrap_or(ThreadTrust::Trusted),
                repo,
            )),
            base_instructions: None,
        }
    }

    /// `policy` as the task's thread may use it: a delegated child's never
    /// reaches past what its parent delegated.
    fn as_delegated(&self, policy: ExecutionPolicy) -> ExecutionPolicy {
        match self.delegated {
            Some(d) => policy.for_child(d),
            None => policy,
        }
    }

    /// The base branch's `AGENTS.md` from the workspace (`None` when it has
    /// none, or it cannot be read: the thread then has no repository
    /// instructions at all, never the head's).
    async fn base_instructions(&self) -> Option<String> {
        let (owner, name) = self.repo_names.clone()?;
        let base = self.task.base_ref.clone();
        let workspaces = self.deps.workspaces.clone();
        let read = tokio::task::spawn_blocking(move || {
            workspaces.base_instructions(&owner, &name, base.as_deref())
        })
        .await;
        match read {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => {
                tracing::warn!(task.id = %self.task.task_id, code = e.code(), "could not read the base branch's AGENTS.md: {e}");
                None
            }
            Err(e) => {
                tracing::warn!(task.id = %self.task.task_id, error = %e, "could not read the base branch's AGENTS.md");
                None
            }
        }
    }
}
