//! The effects that drive a turn: open the thread, record the turn/start
//! intent, start it, read its events up to the next one that matters, wait
//! for approvals. Each reports what it saw as a decision [`Event`]; none of
//! them moves the task.

use super::decide::{Event, Permission, Start, Stop, TurnEnd};
use super::drive::{DriveError, PendingApproval, TaskDrive, Turn};
use super::prompt::{child_prompt, continuation_prompt, results_part, turn_prompt};
use super::threads::{plan, ThreadPlan};
use crate::actors::health::SessionActorStatus;
use crate::agent::{AgentError, ThreadRequest, TurnEvent, TurnRequest};
use crate::domain::states::SendMode;
use crate::domain::states::{CommentKind, CommentStatus};
use crate::gitea::reply::{comment_call, has_reply_marker};
use crate::store::audit::{self, Audit};
use crate::store::models::OutboxEntry;
use crate::store::sessions::ThreadRecord;
use crate::store::{interrupt, ledger, sessions, turns, workflows, StoreError};
use futures_util::StreamExt;

impl TaskDrive {
    /// Before admission: the thread, the intent (one commit), turn/start.
    pub(super) async fn start_turn(&mut self) -> Result<Event, DriveError> {
        if self.task.command == Some(crate::domain::command::Command::Review) {
            return self.start_review().await;
        }
        let (Some(cwd), Some(policy), Some(entry)) =
            (self.workspace.clone(), self.policy, self.entry.clone())
        else {
            // The decision checked both; a snapshot without them starts nothing.
            return Ok(Event::Started(Start::NotAdmitted { retryable: false }));
        };
        let terms = self.thread_terms(&policy).await?;
        let trust = terms.policy.trust;
        // The home the turn runs in: for a remote runtime, that of the
        // worker holding the repository now.
        let here = self
            .deps
            .runtime
            .home_for(self.task.session_key.repo())
            .await;
        let plan = plan(
            self.session_thread.as_deref(),
            self.thread_trust,
            self.thread_home.as_deref(),
            trust,
            here.as_deref(),
        );
        let (history, since) = match &plan {
            ThreadPlan::Rebuild { old, .. } => self.conversation_of(old).await?,
            _ => (Vec::new(), None),
        };
        let carried_over = history.len();
        let thread = self
            .deps
            .runtime
            .ensure_thread(ThreadRequest {
                session_key: self.task.session_key.clone(),
                thread_id: match &plan {
                    ThreadPlan::Resume(id) => Some(id.clone()),
                    _ => None,
                },
                // Only a child's first thread forks: a replacement starts
                // clean, a rebuild from the stored conversation.
                fork_from: match &plan {
                    ThreadPlan::Start => self.fork_from.clone(),
                    _ => None,
                },
                cwd: cwd.clone(),
                terms: terms.clone(),
                history,
                // A resumed thread must be found where it lives; a new one
                // where it is recorded to live.
                home: match &plan {
                    ThreadPlan::Resume(_) => self.thread_home.clone().or_else(|| here.clone()),
                    _ => here.clone(),
                },
            })
            .await;
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                let retryable = !matches!(e, AgentError::Refused(_));
                self.detail = Some(e.to_string());
                return Ok(Event::Started(Start::NotAdmitted { retryable }));
            }
        };
        if plan.replaces().is_none() {
            if let Err(event) = self.revert_for_replace(&entry, &thread).await? {
                return Ok(event);
            }
        }
        // Read before the intent: a slow Gitea never widens the window
        // between the intent and turn/start.
        let context = self
            .thread_context(&thread, terms.policy.reply_path)
            .await?;
        // The thread id (stored once; an ordinary retry never replaces it),
        // its trust, and the turn/start intent, in one commit before the
        // request leaves.
        let (task, e, th, attempt_id, p) = (
            self.task.clone(),
            entry.clone(),
            thread.clone(),
            self.attempt_id.clone(),
            plan.clone(),
        );
        // A thread started now got the bridge's tools if the runtime offers
        // them; a resumed one keeps what it was started with.
        let new_thread = !matches!(plan, ThreadPlan::Resume(_));
        let tools =
            new_thread && self.deps.settings.workflows && self.deps.runtime.offers_workflow_tools();
        let title = super::workflow::title_of(&entry.user_text);
        let limits = self.deps.settings.workflow_limits();
        let as_owner = self.answers_for_owner;
        let version = self.snap.state_version;
        let written = self
            .deps
            .store
            .write(move |c| {
                let record = ThreadRecord {
                    thread_id: &th,
                    trust,
                    tools,
                    home: here.as_deref(),
                    since: since.as_deref(),
                };
                let stored = match &p {
                    ThreadPlan::Replace { old } => {
                        let stored = sessions::replace_thread(c, &task.session_key, old, &record)?;
                        audit::record(
                            c,
                            &Audit::new("thread.replaced", "system")
                                .task(&task.task_id)
                                .meta(serde_json::json!({
                                    "oldThreadId": old,
                                    "threadId": stored,
                                    "trust": trust,
                                    "stateVersion": version,
                                })),
                        )?;
                        stored
                    }
                    ThreadPlan::Rebuild { old, from_home } => {
                        let stored = sessions::replace_thread(c, &task.session_key, old, &record)?;
                        audit::record(
                            c,
                            &Audit::new("thread.rebuilt", "system")
                                .task(&task.task_id)
                                .meta(serde_json::json!({
                                    "oldThreadId": old,
                                    "threadId": stored,
                                    "fromHome": from_home,
                                    "home": record.home,
                                    "exchanges": carried_over,
                                    "stateVersion": version,
                                })),
                        )?;
                        stored
                    }
                    ThreadPlan::Start | ThreadPlan::Resume(_) => {
                        sessions::set_thread_once(c, &task.session_key, &record)?
                    }
                };
                // A thread that can complete its workflow takes part in one:
                // the task is the workflow's next logical input, and its turn
                // carries the results its children delivered to it.
                let mut carried = Vec::new();
                if sessions::session(c, &task.session_key)?.is_some_and(|s| s.thread_tools) {
                    let w = super::workflow::join(c, &task, &title, limits, as_owner)?;
                    if w.parent_workflow_id.is_none() {
                        carried = workflows::results::carry(c, &w, &task.task_id)?;
                    }
                }
                turns::record_turn_intent(c, &task, &e, &stored, &attempt_id)?;
                Ok((stored, carried))
            })
            .await;
        let (thread, carried) = match written {
            Err(StoreError::Refused { code, message }) if code == workflows::NOT_OPEN => {
                // Its workflow ended or gated after the permission check:
                // nothing was written, nothing is sent.
                self.detail = Some(message);
                return Ok(Event::Permission(Permission::WorkflowNotOpen));
            }
            other => other?,
        };
        self.thread_trust = Some(trust);
        self.session_thread = Some(thread.clone());
        self.snap.admission = super::decide::Admission::Intended;
        self.turn.thread_id = Some(thread.clone());
        self.signals.thread(&thread);
        let mut context = context;
        context.extend(results_part(&carried));
        let prompt = if self.task.session_key.child().is_some() {
            child_prompt(&self.task, &entry)
        } else if self.task.continuation.is_some() {
            continuation_prompt(&self.task, &entry, context)
        } else {
            turn_prompt(
                &self.task,
                &entry,
                &self.deps.settings.bot_login,
                terms.policy.reply_path,
                context,
            )
        };
        self.sending(&prompt);
        let started = self
            .deps
            .runtime
            .start_turn(TurnRequest {
                thread_id: thread,
                operation_id: entry.operation_id.clone(),
                text: prompt.text(),
                cwd,
                terms,
                attempt: self.attempt_ref(),
            })
            .await;
        Ok(self.turn_started(started, policy.turn_timeout))
    }

    /// `/replace`: drops the turn it stopped from the thread's history before
    /// its own turn, once (recorded before the intent; files stay as they
    /// are, and its answer says so). `Err(event)`: the revert failed, and the
    /// turn must not start.
    async fn revert_for_replace(
        &mut self,
        entry: &OutboxEntry,
        thread: &str,
    ) -> Result<Result<(), Event>, DriveError> {
        let Some(before) = entry
            .revert_turn_id
            .clone()
            .filter(|_| entry.mode == SendMode::Replace && entry.reverted_at.is_none())
        else {
            return Ok(Ok(()));
        };
        if let Err(e) = self.deps.runtime.revert_thread(thread, &before).await {
            let retryable = !matches!(e, AgentError::Refused(_));
            self.detail = Some(format!("thread/revert: {e}"));
            return Ok(Err(Event::Started(Start::NotAdmitted { retryable })));
        }
        let (e, th) = (entry.clone(), thread.to_owned());
        let answer = super::command::answer::reverted(entry.supersedes.as_ref());
        self.deps
            .store
            .write(move |c| interrupt::record_reverted(c, &e, &th, &before, &answer))
            .await?;
        if let Some(own) = self.entry.as_mut() {
            own.reverted_at = Some(crate::store::now());
        }
        Ok(Ok(()))
    }

    /// What a turn/start answer means, and the turn it opened.
    pub(super) fn turn_started(
        &mut self,
        started: Result<crate::agent::TurnStarted, AgentError>,
        timeout: std::time::Duration,
    ) -> Event {
        match started {
            Ok(turn) => {
                self.turn = Turn {
                    thread_id: self.turn.thread_id.take(),
                    turn_id: Some(turn.turn_id),
                    events: Some(turn.events),
                    runner: turn.runner,
                    deadline: Some(tokio::time::Instant::now() + timeout),
                    ..Turn::default()
                };
                Event::Started(Start::Admitted)
            }
            Err(AgentError::Uncertain(e)) => {
                tracing::warn!(task.id = %self.task.task_id, error = %e, "turn/start answer uncertain; looking in the thread's history");
                self.detail = Some(e);
                Event::Started(Start::Uncertain)
            }
            Err(e) => {
                let retryable = matches!(e, AgentError::Unavailable(_));
                self.detail = Some(e.to_string());
                Event::Started(Start::NotAdmitted { retryable })
            }
        }
    }

    /// Reads the turn's events, recording the ones that only inform, up to
    /// the next one a decision is needed for.
    pub(super) async fn read_turn(&mut self) -> Result<Event, DriveError> {
        let (Some(turn_id), Some(mut events)) =
            (self.turn.turn_id.clone(), self.turn.events.take())
        else {
            return Err(DriveError::Fault(format!(
                "task {}: no turn to read",
                self.task.task_id
            )));
        };
        if self.turn.timer.is_none() {
            self.turn.timer = Some(crate::metrics::TurnTimer::start());
            self.signals.turn(self.turn.thread_id.as_deref(), &turn_id);
            self.signals.turn_running();
        }
        let result = self.next_turn_event(&turn_id, &mut events).await;
        self.turn.events = Some(events);
        result
    }

    async fn next_turn_event(
        &mut self,
        turn_id: &str,
        events: &mut futures_util::stream::BoxStream<'static, TurnEvent>,
    ) -> Result<Event, DriveError> {
        let far = tokio::time::Instant::now() + std::time::Duration::from_secs(86_400 * 365);
        loop {
            let next = match self.turn.grace {
                Some(grace) => match tokio::time::timeout_at(grace, events.next()).await {
                    Ok(ev) => ev,
                    Err(_) => return Ok(Event::InterruptUnconfirmed),
                },
                None => {
                    let deadline = self.turn.deadline.unwrap_or(far);
                    let budget = self.task_deadline().unwrap_or(far);
                    let settle = self.turn.idle_deadline.unwrap_or(far);
                    tokio::select! {
                        ev = events.next() => ev,
                        _ = tokio::time::sleep_until(settle) => {
                            self.turn.idle_deadline = None;
                            return Ok(Event::IdleSettled);
                        }
                        _ = self.signals.abort.notified() => return Ok(Event::StopRequested(Stop::Abort)),
                        _ = tokio::time::sleep_until(deadline) => return Ok(Event::StopRequested(Stop::Deadline)),
                        _ = tokio::time::sleep_until(budget) => {
                            self.out_of_time();
                            return Ok(Event::StopRequested(Stop::Budget));
                        }
                    }
                }
            };
            let Some(ev) = next else {
                return Err(DriveError::Fault(format!(
                    "the event stream of turn {turn_id} ended without an end event"
                )));
            };
            // Anything happening on the turn voids a candidate final (its
            // own end makes it moot).
            let ends = matches!(
                ev,
                TurnEvent::Completed { .. }
                    | TurnEvent::Failed { .. }
                    | TurnEvent::Interrupted { .. }
            );
            if !matches!(ev, TurnEvent::Idle { .. }) && !ends && self.turn.idle_deadline.is_some() {
                self.turn.idle_deadline = None;
                self.idle_candidate(turn_id, false).await?;
            }
            match ev {
                TurnEvent::Idle { seq } => {
                    self.turn.last_seq = seq.max(self.turn.last_seq);
                    if self.turn.idle_deadline.is_none() {
                        self.turn.idle_deadline =
                            Some(tokio::time::Instant::now() + self.deps.settings.idle_settle);
                        self.idle_candidate(turn_id, true).await?;
                    }
                }
                TurnEvent::Active { seq } => self.turn.last_seq = seq.max(self.turn.last_seq),
                TurnEvent::ApprovalRequested {
                    seq,
                    key,
                    kind,
                    detail,
                } => {
                    self.turn.last_seq = seq.max(self.turn.last_seq);
                    self.record_approval_asked(turn_id, seq, &key, &kind, &detail)
                        .await?;
                    self.approval = Some(PendingApproval {
                        key,
                        kind,
                        detail,
                        approval_id: None,
                    });
                    return Ok(Event::ApprovalRequested);
                }
                TurnEvent::ToolRequested {
                    seq,
                    key,
                    tool,
                    arguments,
                } => {
                    self.turn.last_seq = seq.max(self.turn.last_seq);
                    self.answer_tool_call(turn_id, &key, &tool, &arguments)
                        .await?;
                }
                TurnEvent::Item { seq, phase, item } => {
                    self.turn.last_seq = seq.max(self.turn.last_seq);
                    self.record_item(turn_id, seq, phase, item).await?;
                }
                TurnEvent::TokenUsage { seq, start, end } => {
                    self.turn.last_seq = seq.max(self.turn.last_seq);
                    self.record_tokens(turn_id, start, end).await?;
                    if self.snap.stopping.is_none() && self.out_of_tokens(start, end) {
                        return Ok(Event::StopRequested(Stop::Budget));
                    }
                }
                call @ TurnEvent::ToolCall { seq, .. } => {
                    self.turn.last_seq = seq.max(self.turn.last_seq);
                    self.observe_tool_call(turn_id, call).await?;
                }
                TurnEvent::Progress { seq, kind } => {
                    self.turn.last_seq = seq;
                    let tu = turn_id.to_owned();
                    self.deps
                        .store
                        .write(move |c| ledger::record_event(c, &tu, seq, &kind))
                        .await?;
                }
                TurnEvent::Delivered { seq, client_id } => {
                    self.turn.last_seq = seq.max(self.turn.last_seq);
                    let tu = turn_id.to_owned();
                    // The turn's own operation, or a steer this turn took in:
                    // either way, Codex recorded it here.
                    let ours = client_id
                        .as_deref()
                        .and_then(|id| crate::domain::OperationId::parse(id).ok());
                    self.deps
                        .store
                        .write(move |c| {
                            ledger::record_event(c, &tu, seq, "userMessage")?;
                            if let Some(op) = &ours {
                                ledger::sent(c, op, Some(&tu))?;
                            }
                            Ok(())
                        })
                        .await?;
                }
                TurnEvent::Completed { seq, final_text } => {
                    self.turn.ended_at = Some(std::time::Instant::now());
                    self.turn.last_seq = seq;
                    self.turn.final_text = final_text;
                    return Ok(Event::TurnEnded(TurnEnd::Completed));
                }
                TurnEvent::Failed { seq, error, denial } => {
                    tracing::warn!(task.id = %self.task.task_id, error = %error, denial = ?denial, "turn failed");
                    self.turn.last_seq = seq;
                    self.detail = Some(error);
                    self.deny(denial);
                    return Ok(Event::TurnEnded(TurnEnd::Failed));
                }
                TurnEvent::Interrupted { .. } => return Ok(Event::TurnEnded(TurnEnd::Interrupted)),
            }
        }
    }

    /// Records (or clears) the turn's candidate final durably: the thread
    /// settled idle with no `turn/completed` seen.
    async fn idle_candidate(&self, turn_id: &str, idle: bool) -> Result<(), DriveError> {
        let t = turn_id.to_owned();
        self.deps
            .store
            .write(move |c| crate::store::turns::set_idle_candidate(c, &t, idle))
            .await?;
        if idle {
            tracing::info!(task.id = %self.task.task_id, turn.id = %turn_id, "the thread settled idle without turn/completed; a candidate final");
        }
        Ok(())
    }

    /// `awaiting_approval`: waits for an operator's decision, woken by the
    /// actor when one is made through this process, or declines once
    /// `approval_timeout` passes. Decisions written by another process (the
    /// CLI, another instance) are found by reading the store again every
    /// sweep interval. An abort ends the wait.
    pub(super) async fn await_approval(&mut self) -> Result<Event, DriveError> {
        use crate::store::approvals;
        let Some(approval_id) = self.approval.as_ref().and_then(|a| a.approval_id.clone()) else {
            return Err(DriveError::Fault(format!(
                "task {}: awaiting an approval that was not recorded",
                self.task.task_id
            )));
        };
        self.signals.status(SessionActorStatus::AwaitingApproval);
        tracing::info!(task.id = %self.task.task_id, approval.id = %approval_id, "waiting for an approval");
        let deadline = tokio::time::Instant::now() + self.deps.settings.approval_timeout;
        let recheck = self.deps.settings.sweep;
        let accept = loop {
            let a_id = approval_id.clone();
            let current = self
                .deps
                .store
                .read(move |c| approvals::find(c, &a_id))
                .await?;
            if let Some(decision) = current.and_then(|a| a.decision) {
                break decision == "accept";
            }
            if tokio::time::Instant::now() >= deadline {
                let a_id = approval_id.clone();
                let expired = self
                    .deps
                    .store
                    .write(move |c| approvals::expire(c, &a_id))
                    .await?;
                if expired.is_some() {
                    break false;
                }
                // Decided in the meantime: read it again.
                continue;
            }
            let wake = deadline.min(tokio::time::Instant::now() + recheck);
            tokio::select! {
                _ = self.signals.abort.notified() => return Ok(Event::StopRequested(Stop::Abort)),
                _ = self.signals.approval.notified() => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        };
        self.signals.status(SessionActorStatus::Busy);
        Ok(Event::ApprovalDecided { accept })
    }

    pub(super) async fn answer_approval(&mut self, accept: bool) {
        let Some(a) = self.approval.take() else {
            return;
        };
        // Only the transcript's view of it: the decision itself is stored.
        if let Err(e) = self
            .record_approval_decided(&a.key, &a.kind, &a.detail, accept)
            .await
        {
            tracing::warn!(task.id = %self.task.task_id, error = %e, "could not record the approval's decision in the transcript");
        }
        if let Err(e) = self.deps.runtime.decide_approval(&a.key, accept).await {
            tracing::warn!(task.id = %self.task.task_id, error = %e, "could not hand the approval decision to the runtime");
        }
    }

    /// An MCP tool call seen in the turn: stored as a turn event, and when it
    /// is the agent's comment (any gitea-mcp generation), recorded as the
    /// reply's observed intent (`started`) and result (`completed`).
    async fn observe_tool_call(
        &mut self,
        turn_id: &str,
        call: TurnEvent,
    ) -> Result<(), StoreError> {
        let TurnEvent::ToolCall {
            seq,
            phase,
            server,
            tool,
            arguments,
            status,
            error,
        } = call
        else {
            return Ok(());
        };
        let comment = comment_call(&tool, &arguments);
        let (tu, task_id, resource) = (
            turn_id.to_owned(),
            self.task.task_id.clone(),
            self.task.resource_key.clone(),
        );
        let event = format!("mcpToolCall:{phase}");
        let meta = comment.as_ref().map(|c| {
            let here = resource.repo().owner().eq_ignore_ascii_case(&c.owner)
                && resource.repo().name().eq_ignore_ascii_case(&c.repo)
                && resource.number() == c.number;
            serde_json::json!({
                "server": server,
                "tool": tool,
                "owner": c.owner,
                "repo": c.repo,
                "number": c.number,
                "onResource": here,
                "hasMarker": has_reply_marker(&c.body, &task_id),
                "status": status,
                "error": error,
                "turnId": tu,
            })
        });
        let failed = error.is_some() || status == "failed";
        self.deps
            .store
            .write(move |c| {
                ledger::record_event(c, &tu, seq, &event)?;
                let Some(meta) = &meta else {
                    return Ok(());
                };
                let reply_status = match (phase.as_str(), failed) {
                    ("started", _) => CommentStatus::McpStarted,
                    (_, true) => CommentStatus::McpFailed,
                    _ => CommentStatus::McpCompleted,
                };
                crate::store::comments::record_reply(
                    c,
                    &task_id,
                    CommentKind::Reply,
                    &resource,
                    Some(&tu),
                    reply_status,
                    None,
                    error.as_deref(),
                )?;
                let action = if phase == "started" {
                    "reply.mcp_call.started"
                } else {
                    "reply.mcp_call.completed"
                };
                audit::record(
                    c,
                    &Audit::new(action, "agent")
                        .task(&task_id)
                        .meta(meta.clone()),
                )
                .map(|_| ())
            })
            .await
    }
}

impl TaskDrive {
    /// Requests the interrupt; its confirmation arrives on the turn's events
    /// until the grace period ends.
    pub(super) async fn interrupt(&mut self, stop: Stop) {
        self.snap.stopping = Some(stop);
        let grace = tokio::time::Instant::now() + self.deps.settings.interrupt_grace;
        self.turn.grace = Some(grace);
        let (Some(thread), Some(turn)) = (self.turn.thread_id.clone(), self.turn.turn_id.clone())
        else {
            return;
        };
        // An interrupt Codex never answers (lost on the way, a wedged
        // process) must not outlast the grace period: the asking ends with
        // it, and the drive then resets the runtime as for any unconfirmed
        // stop.
        let asked = tokio::time::timeout_at(grace, self.ask_interrupt(&thread, &turn)).await;
        if asked.is_err() {
            tracing::warn!(task.id = %self.task.task_id, "turn/interrupt got no answer within the grace period");
        }
    }

    async fn ask_interrupt(&self, thread: &str, turn: &str) {
        // Codex answers turn/start before the turn is its active one, and
        // refuses an interrupt in between ("no active turn"): asked again for
        // a short while, the stop lands instead of waiting out the grace
        // period and leaving the task uncertain. A turn that had already
        // ended is refused every time; its end is on the events read next.
        for attempt in 1..=INTERRUPT_ATTEMPTS {
            match self.deps.runtime.interrupt(thread, turn).await {
                Ok(()) => return,
                Err(e) if attempt < INTERRUPT_ATTEMPTS => {
                    tracing::debug!(task.id = %self.task.task_id, error = %e, attempt, "turn/interrupt refused; asking again");
                    tokio::time::sleep(INTERRUPT_RETRY).await;
                }
                Err(e) => {
                    tracing::warn!(task.id = %self.task.task_id, error = %e, "turn/interrupt failed; waiting for the grace period");
                }
            }
        }
    }
}

/// How often, and how far apart, a refused interrupt is asked again: for
/// about two seconds, close enough together that a stop asked in the
/// moment before the turn became active waits tens of milliseconds, not a
/// quarter of a second.
const INTERRUPT_ATTEMPTS: u32 = 40;
const INTERRUPT_RETRY: std::time::Duration = std::time::Duration::from_millis(50);
