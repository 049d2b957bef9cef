//! Tasks and their lifecycle: the compare-and-swap transition that every state
//! change goes through, the queries the admin API and CLI read, and operator
//! reconciliation.

use super::audit::{self, Audit, AuditView};
use super::models::*;
use super::schema::{
    approvals, attempts, comments, outbox_entries, sessions, task_transitions, tasks, turns,
};
use super::{now, DbConn, StoreError};
use crate::domain::TaskId;
use crate::lifecycle::{self, Refusal, TaskState};
use crate::with_conn;
use diesel::prelude::*;

pub(super) const TERMINAL_NAMES: [&str; 10] = [
    "succeeded",
    "succeeded_with_rest_fallback",
    "failed",
    "failed_reply",
    "cancelled",
    "aborted",
    "timed_out",
    "ignored",
    "duplicate",
    "rejected",
];

/// A requested state change.
#[derive(Debug, Clone)]
pub struct TransitionRequest<'a> {
    pub task_id: &'a TaskId,
    pub to: TaskState,
    /// The `state_version` the caller saw; `None` takes the current one (still a CAS).
    pub expected_version: Option<i64>,
    pub actor: &'a str,
    pub reason: Option<&'a str>,
    pub error_code: Option<&'a str>,
}

/// What happened to a requested transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransitionOutcome {
    /// Written: the task is now in `to` at `version`, with one history row and one audit event.
    Applied {
        from: TaskState,
        to: TaskState,
        version: i64,
    },
    /// Not in the lifecycle's transition table (or the task is terminal): nothing changed, a refusal was audited.
    Refused {
        from: TaskState,
        to: TaskState,
        refusal: Refusal,
    },
    /// Someone else changed the task first: nothing changed.
    Stale { state: TaskState, version: i64 },
}

impl std::fmt::Display for TransitionOutcome {
    /// For operators: what the store found, in words and stable names.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransitionOutcome::Applied { to, version, .. } => {
                write!(f, "moved to `{to}` at version {version}")
            }
            TransitionOutcome::Refused { from, to, refusal } => {
                write!(f, "`{from}` -> `{to}` refused ({})", refusal.code())
            }
            TransitionOutcome::Stale { state, version } => {
                write!(f, "it is `{state}` at version {version} now")
            }
        }
    }
}

fn parse_state(s: &str) -> Result<TaskState, StoreError> {
    s.parse()
        .map_err(|e: lifecycle::UnknownState| StoreError::Query(e.to_string()))
}

/// Moves a task to another state if the lifecycle allows it, by compare-and-swap on
/// `state_version`. The UPDATE itself also refuses terminal rows, so no code path
/// that forgets to call `lifecycle::check` can change a finished task.
pub fn transition(
    conn: &mut DbConn,
    req: &TransitionRequest<'_>,
) -> Result<TransitionOutcome, StoreError> {
    let current: Option<(String, i64)> = with_conn!(conn, |c| tasks::table
        .filter(tasks::task_id.eq(req.task_id))
        .select((tasks::state, tasks::state_version))
        .first(c)
        .optional())?;
    let Some((state_name, version)) = current else {
        return Err(StoreError::NotFound(format!("task {}", req.task_id)));
    };
    let from = parse_state(&state_name)?;
    if req.expected_version.is_some_and(|v| v != version) {
        return Ok(TransitionOutcome::Stale {
            state: from,
            version,
        });
    }
    if let Err(refusal) = lifecycle::check(from, req.to) {
        audit::record(
            conn,
            &Audit::new("task.transition_refused", req.actor)
                .task(req.task_id)
                .states(Some(from), Some(req.to))
                .error(refusal.code())
                .meta(serde_json::json!({
                    "stateVersion": version,
                    "reason": req.reason,
                })),
        )?;
        tracing::warn!(
            task.id = %req.task_id,
            from = from.as_str(),
            to = req.to.as_str(),
            refusal = refusal.code(),
            "refused a task transition that the lifecycle table does not allow"
        );
        return Ok(TransitionOutcome::Refused {
            from,
            to: req.to,
            refusal,
        });
    }
    let at = now();
    let next = version + 1;
    let updated = with_conn!(conn, |c| {
        let target = tasks::table
            .filter(tasks::task_id.eq(req.task_id))
            .filter(tasks::state_version.eq(version))
            .filter(tasks::state.eq(from.as_str()))
            .filter(tasks::state.ne_all(TERMINAL_NAMES));
        match req.error_code {
            Some(code) => diesel::update(target)
                .set((
                    tasks::state.eq(req.to.as_str()),
                    tasks::state_version.eq(next),
                    tasks::updated_at.eq(&at),
                    tasks::error_code.eq(code),
                ))
                .execute(c),
            None => diesel::update(target)
                .set((
                    tasks::state.eq(req.to.as_str()),
                    tasks::state_version.eq(next),
                    tasks::updated_at.eq(&at),
                ))
                .execute(c),
        }
    })?;
    if updated == 0 {
        // Lost the race between our read and our write.
        let (state_name, version): (String, i64) = with_conn!(conn, |c| tasks::table
            .filter(tasks::task_id.eq(req.task_id))
            .select((tasks::state, tasks::state_version))
            .first(c))?;
        return Ok(TransitionOutcome::Stale {
            state: parse_state(&state_name)?,
            version,
        });
    }
    if req.to.is_terminal() {
        close_outbox_entry(conn, req.task_id)?;
    }
    append_history(
        conn,
        &NewTransition {
            task_id: req.task_id,
            from_state: Some(from),
            to_state: req.to,
            state_version: next,
            actor: req.actor,
            reason: req.reason,
            error_code: req.error_code,
            at: &at,
        },
    )?;
    Ok(TransitionOutcome::Applied {
        from,
        to: req.to,
        version: next,
    })
}

/// A task ended: its outbox entry no longer counts against its session's
/// capacity. Runs once per task, in the transaction of the transition that ended
/// it (a terminal task never moves again).
fn close_outbox_entry(conn: &mut DbConn, task_id: &TaskId) -> Result<(), StoreError> {
    with_conn!(conn, |c| {
        let session: Option<String> = outbox_entries::table
            .filter(outbox_entries::task_id.eq(task_id))
            .select(outbox_entries::session_key)
            .first(c)
            .optional()?;
        match session {
            Some(session) => diesel::update(sessions::table.find(session))
                .filter(sessions::open_entries.gt(0))
                .set(sessions::open_entries.eq(sessions::open_entries - 1))
                .execute(c)
                .map(drop),
            None => Ok(()),
        }
    })?;
    Ok(())
}

/// Writes one history row and its audit event (`task.transition`). A task's
/// first row, `received` → `queued`, is written by the accept (store/ingest/).
pub(crate) fn append_history(conn: &mut DbConn, row: &NewTransition<'_>) -> Result<(), StoreError> {
    with_conn!(conn, |c| diesel::insert_into(task_transitions::table)
        .values(row)
        .execute(c))?;
    let mut event = Audit::new("task.transition", row.actor)
        .task(row.task_id)
        .states(row.from_state, Some(row.to_state))
        .meta(serde_json::json!({ "stateVersion": row.state_version, "reason": row.reason }));
    event.error_code = row.error_code;
    audit::record(conn, &event)?;
    super::comments::on_transition(conn, row.task_id, row.to_state)?;
    super::statuses::on_transition(conn, row.task_id, row.to_state, row.error_code)?;
    crate::metrics::transition_written(row.to_state.as_str());
    Ok(())
}

pub fn find(conn: &mut DbConn, task_id: &TaskId) -> Result<Option<Task>, StoreError> {
    Ok(with_conn!(conn, |c| tasks::table
        .filter(tasks::task_id.eq(task_id))
        .select(Task::as_select())
        .first(c)
        .optional())?)
}

/// Filters of the task list; `cursor` is the opaque `nextCursor` of the previous page.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub repo_key: Option<String>,
    pub resource_key: Option<String>,
    pub state: Option<TaskState>,
    pub cursor: Option<i64>,
    pub limit: i64,
}

/// The largest page [`list`] returns.
pub const MAX_PAGE: i64 = 500;

/// Newest first. Returns the page (at most [`MAX_PAGE`]) and the cursor of
/// the next one, if any.
pub fn list(
    conn: &mut DbConn,
    filter: &TaskFilter,
) -> Result<(Vec<Task>, Option<i64>), StoreError> {
    let limit = filter.limit.clamp(1, MAX_PAGE);
    // One more than the page: a next cursor only when a next page exists.
    let mut rows: Vec<Task> = with_conn!(conn, |c| {
        let mut q = tasks::table
            .select(Task::as_select())
            .order(tasks::id.desc())
            .limit(limit + 1)
            .into_boxed();
        if let Some(repo) = &filter.repo_key {
            q = q.filter(tasks::repo_key.eq(repo));
        }
        if let Some(resource) = &filter.resource_key {
            q = q.filter(tasks::resource_key.eq(resource));
        }
        if let Some(state) = filter.state {
            q = q.filter(tasks::state.eq(state.as_str()));
        }
        if let Some(cursor) = filter.cursor {
            q = q.filter(tasks::id.lt(cursor));
        }
        q.load(c)
    })?;
    let next = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|t| t.id)
    } else {
        None
    };
    Ok((rows, next))
}

/// Tasks per state, for the overview.
pub fn count_by_state(conn: &mut DbConn) -> Result<Vec<(String, i64)>, StoreError> {
    Ok(with_conn!(conn, |c| tasks::table
        .group_by(tasks::state)
        .select((tasks::state, diesel::dsl::count_star()))
        .load::<(String, i64)>(c))?)
}

/// Everything the task page shows (the admin API's and `tasks show`'s JSON).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TaskDetail {
    pub task: Task,
    pub transitions: Vec<Transition>,
    pub outbox: Option<OutboxEntry>,
    pub attempts: Vec<Attempt>,
    pub turns: Vec<Turn>,
    pub comments: Vec<Comment>,
    pub approvals: Vec<Approval>,
    /// How far each message got (sending → accepted → sent).
    pub ledger: Vec<super::ledger::LedgerEntry>,
    pub audit: Vec<AuditView>,
}

pub fn detail(conn: &mut DbConn, task_id: &TaskId) -> Result<Option<TaskDetail>, StoreError> {
    let Some(task) = find(conn, task_id)? else {
        return Ok(None);
    };
    let transitions = history(conn, task_id)?;
    let (outbox, attempts, turns, comments, approvals) = with_conn!(conn, |c| {
        let outbox = outbox_entries::table
            .filter(outbox_entries::task_id.eq(task_id))
            .select(OutboxEntry::as_select())
            .first(c)
            .optional()?;
        let attempts = attempts::table
            .filter(attempts::task_id.eq(task_id))
            .order(attempts::number.asc())
            .select(Attempt::as_select())
            .load(c)?;
        let turns = turns::table
            .filter(turns::task_id.eq(task_id))
            .order(turns::started_at.asc())
            .select(Turn::as_select())
            .load(c)?;
        let comments = comments::table
            .filter(comments::task_id.eq(task_id))
            .order(comments::created_at.asc())
            .select(Comment::as_select())
            .load(c)?;
        let approvals = approvals::table
            .filter(approvals::task_id.eq(task_id))
            .order(approvals::created_at.asc())
            .select(Approval::as_select())
            .load(c)?;
        Ok::<_, diesel::result::Error>((outbox, attempts, turns, comments, approvals))
    })?;
    let audit = audit::list(
        conn,
        &audit::AuditFilter {
            task_id: Some(task_id.clone()),
            limit: 1000,
            ..Default::default()
        },
    )?;
    let ledger = super::ledger::of_task(conn, task_id)?;
    Ok(Some(TaskDetail {
        ledger,
        task,
        transitions,
        outbox,
        attempts,
        turns,
        comments,
        approvals,
        audit,
    }))
}

/// The task's transitions, oldest first.
pub fn history(conn: &mut DbConn, task_id: &TaskId) -> Result<Vec<Transition>, StoreError> {
    Ok(with_conn!(conn, |c| task_transitions::table
        .filter(task_transitions::task_id.eq(task_id))
        .order(task_transitions::state_version.asc())
        .select(Transition::as_select())
        .load(c))?)
}

/// The operator's verdict on an uncertain task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Failed,
    Succeeded,
}

impl Verdict {
    pub fn state(self) -> TaskState {
        match self {
            Verdict::Failed => TaskState::Failed,
            Verdict::Succeeded => TaskState::Succeeded,
        }
    }
}

/// Settles a `needs_reconciliation` task by the operator's explicit decision
/// about one named attempt. Never re-runs anything: it only records the verdict.
pub fn reconcile(
    conn: &mut DbConn,
    task_id: &TaskId,
    attempt_id: &str,
    verdict: Verdict,
    actor: &str,
    reason: &str,
) -> Result<AuditView, StoreError> {
    let task =
        find(conn, task_id)?.ok_or_else(|| StoreError::NotFound(format!("task {task_id}")))?;
    if task.state != TaskState::NeedsReconciliation {
        return Err(StoreError::Refused {
            code: "not_uncertain",
            message: format!(
                "task {task_id} is `{}`, not `needs_reconciliation`: only an uncertain task can be reconciled",
                task.state
            ),
        });
    }
    let latest: Option<Attempt> = with_conn!(conn, |c| attempts::table
        .filter(attempts::task_id.eq(task_id))
        .order(attempts::number.desc())
        .select(Attempt::as_select())
        .first(c)
        .optional())?;
    match &latest {
        Some(a) if a.attempt_id == attempt_id => {}
        Some(a) => {
            return Err(StoreError::Refused {
                code: "attempt_mismatch",
                message: format!(
                    "attempt {attempt_id} is not the uncertain attempt of task {task_id}; its latest attempt is {} (see `codex-bridge tasks show {task_id}`)",
                    a.attempt_id
                ),
            })
        }
        None => {
            return Err(StoreError::Refused {
                code: "attempt_mismatch",
                message: format!("task {task_id} has no recorded attempt {attempt_id}"),
            })
        }
    }
    let outcome = transition(
        conn,
        &TransitionRequest {
            task_id,
            to: verdict.state(),
            expected_version: Some(task.state_version),
            actor,
            reason: Some(reason),
            error_code: match verdict {
                Verdict::Failed => Some("reconciled_failed"),
                Verdict::Succeeded => None,
            },
        },
    )?;
    if !matches!(outcome, TransitionOutcome::Applied { .. }) {
        return Err(StoreError::Refused {
            code: "state_changed",
            message: format!(
                "task {task_id} changed while being reconciled ({outcome}); look again and retry"
            ),
        });
    }
    let ended = now();
    let outcome_name = match verdict {
        Verdict::Failed => "reconciled_failed",
        Verdict::Succeeded => "reconciled_succeeded",
    };
    with_conn!(conn, |c| diesel::update(
        attempts::table.filter(attempts::attempt_id.eq(attempt_id))
    )
    .set((
        attempts::status.eq("ended"),
        attempts::outcome.eq(outcome_name),
        attempts::ended_at.eq(&ended),
    ))
    .execute(c))?;
    audit::record(
        conn,
        &Audit::new("task.reconciled", actor)
            .task(task_id)
            .states(Some(TaskState::NeedsReconciliation), Some(verdict.state()))
            .meta(serde_json::json!({
                "attemptId": attempt_id,
                "verdict": outcome_name,
                "confirmNoActiveTurn": true,
                "reason": reason,
            })),
    )
}
