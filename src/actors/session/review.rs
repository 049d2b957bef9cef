//! `/review`: Codex's own review of a pull request (`review/start`), as the
//! one turn of a thread opened for it alone. The session's thread is left as
//! it is: a review is no step of the session's work, and its next turn's
//! context is not moved past the comments it has not seen.
//!
//! A review carries no client id, so its turn cannot be found in a history
//! by our operation id; what makes it happen once is its result: the bridge
//! posts it as one pull-request review carrying the task's marker, and looks
//! for that marker before any post (the verification every reply decision
//! follows), so a second attempt never makes a second review.

use super::decide::{Admission, Event, Start};
use super::drive::{DriveError, TaskDrive};
use crate::agent::transcript::{Prompt, PromptPart};
use crate::agent::{AgentError, ReviewRequest, ThreadRequest, ThreadTerms};
use crate::domain::trust::ExecutionPolicy;
use crate::store::turns;

impl TaskDrive {
    /// Opens the review's thread, records the intent (one commit), then
    /// `review/start` against the base branch as the workspace fetched it.
    pub(super) async fn start_review(&mut self) -> Result<Event, DriveError> {
        let (Some(cwd), Some(policy), Some(entry)) =
            (self.workspace.clone(), self.policy, self.entry.clone())
        else {
            return Ok(Event::Started(Start::NotAdmitted { retryable: false }));
        };
        let Some(base) = self
            .task
            .base_ref
            .clone()
            .filter(|_| self.task.resource_key.is_pull())
        else {
            self.detail =
                Some("a review needs a pull request whose base branch the webhook named".into());
            return Ok(Event::Started(Start::NotAdmitted { retryable: false }));
        };
        // A review reads and answers; the bridge posts its result. It needs
        // neither the Gitea tools nor write access, whoever wrote the head.
        let terms = ThreadTerms {
            policy: ExecutionPolicy::untrusted(),
            base_instructions: None,
        };
        let opened = self
            .deps
            .runtime
            .ensure_thread(ThreadRequest {
                session_key: self.task.session_key.clone(),
                thread_id: None,
                fork_from: None,
                cwd: cwd.clone(),
                terms: terms.clone(),
                history: Vec::new(),
                // A thread of this one review, never resumed: wherever it opens.
                home: None,
            })
            .await;
        let thread = match opened {
            Ok(t) => t,
            Err(e) => {
                let retryable = !matches!(e, AgentError::Refused(_));
                self.detail = Some(e.to_string());
                return Ok(Event::Started(Start::NotAdmitted { retryable }));
            }
        };
        let (task, e, th, attempt_id) = (
            self.task.clone(),
            entry,
            thread.clone(),
            self.attempt_id.clone(),
        );
        self.deps
            .store
            .write(move |c| turns::record_turn_intent(c, &task, &e, &th, &attempt_id))
            .await?;
        self.snap.admission = Admission::Intended;
        self.turn.thread_id = Some(thread.clone());
        // The workspace fetched the base branch with the pull request's
        // head: its remote-tracking copy is the one that is current.
        let base_branch = format!("origin/{base}");
        self.sending(&Prompt {
            parts: vec![PromptPart::trusted(format!(
                "Codex's code review of the checked-out head against {base_branch}."
            ))],
        });
        let started = self
            .deps
            .runtime
            .start_review(ReviewRequest {
                thread_id: thread,
                base_branch,
                cwd,
                terms,
                attempt: self.attempt_ref(),
            })
            .await;
        Ok(self.turn_started(started, policy.turn_timeout))
    }
}
