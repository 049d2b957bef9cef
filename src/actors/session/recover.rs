//! After the turn/start intent, what happened is read from the thread's
//! history, never guessed and never replayed: a restarted session, an
//! uncertain turn/start answer and a reply-retry turn in doubt all come here.

use super::decide::{Event, Finding};
use super::drive::{DriveError, TaskDrive};
use super::threads::{reach, Reach};
use crate::agent::TurnLookup;
use crate::domain::OperationId;
use crate::store::audit::{self, Audit};
use std::time::{Duration, Instant};

/// How often a turn that is still running is looked up again while we wait
/// for it to end (bounded by `history_wait`).
const RUNNING_RECHECK: Duration = Duration::from_millis(100);

impl TaskDrive {
    /// Looks the task's operation up in the thread's history. The lookup is
    /// audited before anything is decided on it; if that record cannot be
    /// written, the drive fails and nothing is decided.
    pub(super) async fn look_up_history(&mut self) -> Result<Event, DriveError> {
        let Some(thread) = self.turn.thread_id.clone().or(self.task.thread_id.clone()) else {
            self.audit_lookup("no_thread", None, None).await?;
            return Ok(Event::History(Finding::NoThread));
        };
        let here = self
            .deps
            .runtime
            .home_for(self.task.session_key.repo())
            .await;
        if let Reach::Elsewhere { home, .. } = reach(
            &thread,
            self.session_thread.as_deref(),
            self.thread_home.as_deref(),
            here.as_deref(),
        ) {
            // Its history is in another process's Codex home: what happened
            // cannot be read here, so it is not guessed either.
            let why = format!(
                "thread {thread} lives in Codex home {home} of another server process or worker, so its history cannot be read here; reconcile the task from what Gitea shows"
            );
            self.turn.thread_id = Some(thread);
            self.audit_lookup(finding_code(Finding::Unreadable), None, Some(why.clone()))
                .await?;
            tracing::warn!(task.id = %self.task.task_id, error = %why, "turn looked up in the thread's history");
            self.detail = Some(why);
            return Ok(Event::History(Finding::Unreadable));
        }
        let deadline = Instant::now() + self.deps.settings.history_wait;
        let lookup = loop {
            match self
                .deps
                .runtime
                // Without an operation nothing of this task can be in the
                // history: the empty id finds nothing.
                .lookup_turn(
                    &thread,
                    self.operation_id.as_ref().map_or("", OperationId::as_str),
                )
                .await
            {
                Ok(TurnLookup::Running { turn_id }) if Instant::now() < deadline => {
                    self.signals.turn(Some(&thread), &turn_id);
                    tokio::time::sleep(RUNNING_RECHECK).await;
                }
                other => break other,
            }
        };
        self.turn.thread_id = Some(thread);
        let (finding, turn_id, error) = match lookup {
            Ok(TurnLookup::Completed {
                turn_id,
                final_text,
            }) => {
                self.turn.final_text = final_text;
                (Finding::Completed, Some(turn_id), None)
            }
            Ok(TurnLookup::Failed {
                turn_id,
                error,
                denial,
            }) => {
                self.deny(denial);
                (Finding::Failed, Some(turn_id), Some(error))
            }
            Ok(TurnLookup::Interrupted { turn_id }) => (Finding::Interrupted, Some(turn_id), None),
            Ok(TurnLookup::Running { turn_id }) => (Finding::StillRunning, Some(turn_id), None),
            Ok(TurnLookup::Missing) => (Finding::Missing, None, None),
            Err(e) => (Finding::Unreadable, None, Some(e.to_string())),
        };
        if let Some(turn) = &turn_id {
            self.turn.turn_id = Some(turn.clone());
        }
        self.audit_lookup(finding_code(finding), turn_id, error.clone())
            .await?;
        if !matches!(finding, Finding::Completed) {
            tracing::warn!(task.id = %self.task.task_id, found = finding_code(finding), "turn looked up in the thread's history");
        }
        self.detail = error;
        Ok(Event::History(finding))
    }

    /// A candidate final: the thread settled idle and stayed so, with no
    /// `turn/completed`. One look at the history (no waiting: the thread is
    /// idle), audited, decides whether the turn ended; the candidate is
    /// cleared either way.
    pub(super) async fn confirm_idle(&mut self) -> Result<Event, DriveError> {
        let (Some(thread), Some(turn)) = (self.turn.thread_id.clone(), self.turn.turn_id.clone())
        else {
            return Ok(Event::IdleChecked(Finding::NoThread));
        };
        let lookup = self
            .deps
            .runtime
            .lookup_turn(
                &thread,
                self.operation_id.as_ref().map_or("", OperationId::as_str),
            )
            .await;
        let (finding, turn_id, error) = match lookup {
            Ok(TurnLookup::Completed {
                turn_id,
                final_text,
            }) if turn_id == turn => {
                self.turn.final_text = final_text;
                (Finding::Completed, Some(turn_id), None)
            }
            Ok(TurnLookup::Failed {
                turn_id,
                error,
                denial,
            }) if turn_id == turn => {
                self.deny(denial);
                (Finding::Failed, Some(turn_id), Some(error))
            }
            Ok(TurnLookup::Completed { turn_id, .. })
            | Ok(TurnLookup::Failed { turn_id, .. })
            | Ok(TurnLookup::Running { turn_id })
            | Ok(TurnLookup::Interrupted { turn_id }) => {
                (Finding::StillRunning, Some(turn_id), None)
            }
            Ok(TurnLookup::Missing) => (Finding::Missing, None, None),
            Err(e) => (Finding::Unreadable, None, Some(e.to_string())),
        };
        let (id, op, found, t, why) = (
            self.task.task_id.clone(),
            self.operation_id.clone(),
            finding_code(finding),
            turn.clone(),
            error.clone(),
        );
        self.deps
            .store
            .write(move |c| {
                crate::store::turns::set_idle_candidate(c, &t, false)?;
                audit::record(
                    c,
                    &Audit::new("turn.idle_checked", "system")
                        .task(&id)
                        .turn(&t)
                        .meta(serde_json::json!({
                            "operationId": op,
                            "found": found,
                            "historyTurnId": turn_id,
                            "error": why,
                        })),
                )
                .map(drop)
            })
            .await?;
        if finding == Finding::Failed {
            self.detail = error;
        }
        tracing::info!(task.id = %self.task.task_id, turn.id = %turn, found, "a candidate final looked up in the thread's history");
        Ok(Event::IdleChecked(finding))
    }

    async fn audit_lookup(
        &self,
        found: &'static str,
        turn_id: Option<String>,
        error: Option<String>,
    ) -> Result<(), DriveError> {
        let (id, op) = (self.task.task_id.clone(), self.operation_id.clone());
        self.deps
            .store
            .write(move |c| {
                audit::record(
                    c,
                    &Audit::new("turn.history_checked", "system").task(&id).meta(
                        serde_json::json!({
                            "operationId": op,
                            "found": found,
                            "turnId": turn_id,
                            "error": error,
                        }),
                    ),
                )
                .map(|_| ())
            })
            .await?;
        Ok(())
    }
}

/// The stable name of a history finding, for audit events and logs.
fn finding_code(f: Finding) -> &'static str {
    match f {
        Finding::Completed => "completed",
        Finding::Failed => "failed",
        Finding::Interrupted => "interrupted",
        Finding::Missing => "missing",
        Finding::StillRunning => "still_running",
        Finding::Unreadable => "unreadable",
        Finding::NoThread => "no_thread",
    }
}
