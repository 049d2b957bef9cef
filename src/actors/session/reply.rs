//! The reply's proof: ask Gitea whether the agent's answer is there, the one
//! reply-retry turn that only re-posts it, and the one REST post of the
//! stored final text with the same marker. Each reports what it found; the
//! decisions say what it means.

use super::decide::{Event, FallbackOutcome, Start, Verdict};
use super::drive::{fallback_status, DriveError, TaskDrive};
use super::prompt::{reply_retry_prompt, strip_markers};
use super::threads::{reach, Reach};
use crate::agent::{AgentError, ThreadRequest, TurnRequest};
use crate::domain::command::Command;
use crate::domain::states::{CommentKind, CommentStatus};
use crate::domain::trust::ReplyPath;
use crate::forge::{ReplyCheck, ReplyForm, ReplyQuery};
use crate::gitea::reply::reply_marker;
use crate::store::audit::{self, Audit};
use crate::store::{comments, turns};

impl TaskDrive {
    /// Reads what is stored about the reply, then asks the verifier.
    pub(super) async fn verify_reply(&mut self) -> Result<Event, DriveError> {
        let id = self.task.task_id.clone();
        let (original, fallback, reply) = self
            .deps
            .store
            .read(move |c| {
                Ok((
                    turns::original_final_text(c, &id)?,
                    comments::find(c, &comments::reply_key(&id, CommentKind::RestFallback))?,
                    comments::find(c, &comments::reply_key(&id, CommentKind::Reply))?,
                ))
            })
            .await?;
        // What a reply publishes is the task's own turn's final text.
        let text = original.or(self.turn.final_text.clone());
        self.snap.final_text = text.is_some();
        self.snap.fallback = fallback.as_ref().and_then(|f| fallback_status(f.status));
        self.mcp_reason = reply
            .as_ref()
            .and_then(|r| r.last_error.clone())
            .unwrap_or_else(|| match reply.as_ref() {
                Some(r) => format!("the agent's comment call ended {}", r.status),
                None => "the agent made no comment call".to_owned(),
            });
        if let Some(why) = &self.retry_failure {
            self.mcp_reason = format!(
                "{}; the reply-retry turn could not start: {why}",
                self.mcp_reason
            );
        }
        let turn_id = self.reply_turn_id();
        let check = self
            .deps
            .verifier
            .verify(ReplyQuery {
                task_id: self.task.task_id.clone(),
                turn_id: turn_id.clone(),
                resource_key: self.task.resource_key.clone(),
                final_text: text.clone(),
                form: self.reply_form(),
            })
            .await;
        self.turn.final_text = text;
        let (verdict, error) = match check {
            ReplyCheck::Confirmed { comment_id } => {
                self.reply_comment = comment_id;
                (Verdict::Confirmed, None)
            }
            ReplyCheck::Missing => (Verdict::Missing, None),
            ReplyCheck::Unknown(e) => {
                tracing::warn!(task.id = %self.task.task_id, error = %e, "reply could not be verified");
                (Verdict::Unknown, Some(e))
            }
        };
        let outcome = match verdict {
            Verdict::Confirmed => "confirmed",
            Verdict::Missing => "missing",
            Verdict::Unknown => "unknown",
        };
        crate::metrics::reply_verification(outcome);
        let (id, ra) = (self.task.task_id.clone(), self.task.reply_attempt);
        let err = error.clone();
        self.deps
            .store
            .write(move |c| {
                audit::record(
                    c,
                    &Audit::new("reply.verification", "system")
                        .task(&id)
                        .meta(serde_json::json!({
                            "turnId": turn_id,
                            "outcome": outcome,
                            "error": err,
                            "replyAttempt": ra,
                        })),
                )
                .map(|_| ())
            })
            .await?;
        self.detail = match verdict {
            Verdict::Confirmed if self.snap.fallback.is_some() && !self.by_bridge() => {
                Some(self.mcp_reason.clone())
            }
            _ => error,
        };
        Ok(Event::Reply(verdict))
    }

    /// The turn a reply belongs to: the one this drive read, else the task's.
    fn reply_turn_id(&self) -> String {
        self.turn
            .turn_id
            .clone()
            .or(self.task.turn_id.clone())
            .unwrap_or_default()
    }

    /// The one reply-retry turn: same thread, a new operation (its intent
    /// was committed with the decision), a prompt that only asks to post the
    /// previous final text again.
    pub(super) async fn start_reply_retry(&mut self) -> Result<Event, DriveError> {
        let thread = self.turn.thread_id.clone().or(self.task.thread_id.clone());
        let (Some(thread), Some(cwd), Some(policy), Some(text), Some(entry)) = (
            thread,
            self.workspace.clone(),
            self.policy,
            self.turn.final_text.clone(),
            self.entry.clone(),
        ) else {
            self.detail = Some("the reply-retry turn has no thread or workspace to run in".into());
            return Ok(Event::Started(Start::NotAdmitted { retryable: false }));
        };
        let marker = reply_marker(&self.task.task_id, entry.operation_id.as_str());
        // The thread may not be loaded in this app-server (a restart since the
        // task's turn): it is opened with the repository's policy as it is now.
        // A thread in another process's Codex home cannot be opened here; the
        // retry asks only to post the text its prompt carries, so a new
        // thread does it as well.
        let here = self
            .deps
            .runtime
            .home_for(self.task.session_key.repo())
            .await;
        let on = reach(
            &thread,
            self.session_thread.as_deref(),
            self.thread_home.as_deref(),
            here.as_deref(),
        );
        // A worktree prepared by another process is not here; the retry
        // needs none of it, only a folder to run in.
        let cwd = match (&on, self.repo_names.clone()) {
            (Reach::Elsewhere { .. }, Some((owner, name))) if !cwd.is_dir() => {
                let workspaces = self.deps.workspaces.clone();
                let id = crate::workspace::WorktreeId::of(&self.task.session_key);
                match tokio::task::spawn_blocking(move || workspaces.scratch_for(&owner, &name, id))
                    .await
                {
                    Ok(Ok(scratch)) => scratch,
                    Ok(Err(e)) => {
                        self.retry_failure = Some(e.to_string());
                        return Ok(Event::Started(Start::NotAdmitted { retryable: false }));
                    }
                    Err(e) => {
                        self.retry_failure = Some(format!("the scratch folder was not made: {e}"));
                        return Ok(Event::Started(Start::NotAdmitted { retryable: false }));
                    }
                }
            }
            _ => cwd,
        };
        let resume = match &on {
            Reach::Here(id) => Some(id.clone()),
            Reach::Elsewhere { thread, home } => {
                tracing::info!(
                    task.id = %self.task.task_id,
                    thread.id = %thread,
                    thread.home = %home,
                    "the reply-retry turn runs on a new thread: the task's thread lives in another Codex home"
                );
                None
            }
        };
        let opened = self
            .deps
            .runtime
            .ensure_thread(ThreadRequest {
                session_key: self.task.session_key.clone(),
                thread_id: resume,
                fork_from: None,
                cwd: cwd.clone(),
                terms: self.stored_terms(&policy),
                history: Vec::new(),
                // The task's thread where it lives (the session's home when
                // it is the session's thread), or a new one here.
                home: match &on {
                    Reach::Here(t) if self.session_thread.as_deref() == Some(t.as_str()) => {
                        self.thread_home.clone().or_else(|| here.clone())
                    }
                    _ => here.clone(),
                },
            })
            .await;
        let thread = match opened {
            Ok(t) => t,
            Err(e) => {
                self.retry_failure = Some(e.to_string());
                return Ok(Event::Started(Start::NotAdmitted {
                    retryable: !matches!(e, AgentError::Refused(_)),
                }));
            }
        };
        self.turn.thread_id = Some(thread.clone());
        let prompt = reply_retry_prompt(&self.task, &text, &marker);
        self.sending(&prompt);
        let started = self
            .deps
            .runtime
            .start_turn(TurnRequest {
                thread_id: thread,
                operation_id: entry.operation_id.reply_retry(),
                text: prompt.text(),
                cwd,
                terms: self.stored_terms(&policy),
                attempt: self.attempt_ref(),
            })
            .await;
        let event = self.turn_started(started, policy.turn_timeout);
        if let Event::Started(Start::NotAdmitted { .. }) = event {
            let why = self.detail.take().unwrap_or_default();
            self.retry_failure = Some(why);
        }
        Ok(event)
    }

    /// A review's result is a review of the pull request; every other
    /// reply is a comment.
    fn reply_form(&self) -> ReplyForm {
        if self.task.command == Some(Command::Review) {
            ReplyForm::PullReview
        } else {
            ReplyForm::Comment
        }
    }

    /// Whether the bridge posts this task's reply itself (an untrusted
    /// thread, a review): its REST post is then the normal path, not a
    /// fallback.
    fn by_bridge(&self) -> bool {
        self.snap.reply_path == ReplyPath::BridgeViaRest
    }

    /// The audit actions of the REST post: (intent, posted, failed).
    fn post_actions(&self) -> [&'static str; 3] {
        if self.by_bridge() {
            [
                "reply.bridge.intent",
                "reply_posted_by_bridge",
                "reply.bridge.failed",
            ]
        } else {
            [
                "reply.rest_fallback.intent",
                "reply.rest_fallback.posted",
                "reply.rest_fallback.failed",
            ]
        }
    }

    /// The one REST post of the stored final text, with the same marker,
    /// then proof that it landed: the REST fallback of a missing agent
    /// reply, or the bridge's own reply for an untrusted thread.
    pub(super) async fn post_rest_fallback(&mut self) -> Result<Event, DriveError> {
        let [intent, posted, failed] = self.post_actions();
        // The verification that proved the reply missing just read the text
        // a reply publishes: the task's own turn's final text.
        let Some(text) = self.turn.final_text.clone() else {
            self.detail = Some("no final text to post".into());
            return Ok(Event::Fallback(FallbackOutcome::Failed));
        };
        let operation = self
            .entry
            .as_ref()
            .map(|e| e.operation_id.to_string())
            .unwrap_or_default();
        let body = format!(
            "{}\n\n{}",
            strip_markers(&text),
            reply_marker(&self.task.task_id, &operation)
        );
        self.record_fallback(CommentStatus::Posting, intent, None, None)
            .await?;
        self.snap.fallback = Some(super::decide::Fallback::Posting);
        let resource = self.task.resource_key.clone();
        let form = self.reply_form();
        let query = ReplyQuery {
            task_id: self.task.task_id.clone(),
            turn_id: self.reply_turn_id(),
            resource_key: resource.clone(),
            final_text: Some(text),
            form,
        };
        let answer = self.deps.verifier.post_reply(resource, body, form).await;
        // An error answer does not prove the post missing (a 500 after the
        // write, a lost answer): it is looked for before the task is told so,
        // and never posted a second time here.
        let check = self.deps.verifier.verify(query).await;
        match (answer, check) {
            (Ok(id), check)
            | (
                Err(_),
                check @ ReplyCheck::Confirmed {
                    comment_id: Some(id),
                },
            ) => {
                self.record_fallback(CommentStatus::Posted, posted, Some(id), None)
                    .await?;
                self.snap.fallback = Some(super::decide::Fallback::Posted);
                match check {
                    ReplyCheck::Confirmed { comment_id } => {
                        self.reply_comment = comment_id;
                        if !self.by_bridge() {
                            self.detail = Some(self.mcp_reason.clone());
                        }
                        Ok(Event::Fallback(FallbackOutcome::Confirmed))
                    }
                    ReplyCheck::Missing => Ok(Event::Fallback(FallbackOutcome::NotFound)),
                    ReplyCheck::Unknown(e) => {
                        self.detail = Some(e);
                        Ok(Event::Fallback(FallbackOutcome::NotFound))
                    }
                }
            }
            (Err(e), _) => {
                self.record_fallback(CommentStatus::Failed, failed, None, Some(e.clone()))
                    .await?;
                self.snap.fallback = Some(super::decide::Fallback::Failed);
                self.detail = Some(e);
                Ok(Event::Fallback(FallbackOutcome::Failed))
            }
        }
    }

    /// The fallback's comment row and its audit event, in one commit. The
    /// intent is written before the post: if it cannot be, nothing is posted.
    async fn record_fallback(
        &self,
        status: CommentStatus,
        action: &'static str,
        comment: Option<i64>,
        error: Option<String>,
    ) -> Result<(), DriveError> {
        // The bridge's own reply follows no failure of the agent's.
        let reason = (!self.by_bridge()).then(|| self.mcp_reason.clone());
        let (id, res) = (self.task.task_id.clone(), self.task.resource_key.clone());
        self.deps
            .store
            .write(move |c| {
                let detail = error.clone().or_else(|| reason.clone());
                comments::record_reply(
                    c,
                    &id,
                    CommentKind::RestFallback,
                    &res,
                    None,
                    status,
                    comment,
                    detail.as_deref(),
                )?;
                audit::record(
                    c,
                    &Audit::new(action, "system")
                        .task(&id)
                        .comment(comment)
                        .meta(serde_json::json!({ "mcpFailure": reason, "error": error })),
                )
                .map(|_| ())
            })
            .await?;
        Ok(())
    }
}
