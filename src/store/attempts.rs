//! A task's attempts and the decisions that move it: claiming it for a lease
//! opens an attempt, the actor that runs it moves it by compare-and-swap on
//! the version it decided on, and ends the attempt with an outcome. Every
//! state change still goes through `tasks::transition`.

use super::models::{Attempt, Task};
use super::schema::{attempts, tasks};
use super::tasks::{transition, TransitionOutcome, TransitionRequest};
use super::{now, DbConn, StoreError};
use crate::domain::TaskId;
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;

/// Records a new execution attempt of a task (the identity reconciliation names).
pub fn start_attempt(
    conn: &mut DbConn,
    task_id: &TaskId,
    lease_id: Option<&str>,
    owner: Option<&str>,
) -> Result<Attempt, StoreError> {
    let number: Option<i64> = with_conn!(conn, |c| attempts::table
        .filter(attempts::task_id.eq(task_id))
        .select(diesel::dsl::max(attempts::number))
        .first(c))?;
    let attempt = Attempt {
        attempt_id: format!("att-{}", uuid::Uuid::now_v7().simple()),
        task_id: task_id.clone(),
        number: number.unwrap_or(0) + 1,
        lease_id: lease_id.map(str::to_owned),
        owner: owner.map(str::to_owned),
        status: "active".into(),
        outcome: None,
        started_at: now(),
        ended_at: None,
    };
    with_conn!(conn, |c| {
        diesel::insert_into(attempts::table)
            .values(&attempt)
            .execute(c)?;
        diesel::update(tasks::table.filter(tasks::task_id.eq(task_id)))
            .set(tasks::attempt.eq(attempt.number))
            .execute(c)
    })?;
    Ok(attempt)
}

/// Claims `task` for this lease (`queued`/`retry_wait` → `leased`) and opens a
/// new attempt. `None` when someone changed the task first.
pub fn claim(
    conn: &mut DbConn,
    task: &Task,
    lease_id: &str,
    owner: &str,
) -> Result<Option<Attempt>, StoreError> {
    if super::steer::held_or_sending(conn, &task.task_id)? {
        // Being sent into the running turn, or held for an operator.
        return Ok(None);
    }
    let out = transition(
        conn,
        &TransitionRequest {
            task_id: &task.task_id,
            to: TaskState::Leased,
            expected_version: Some(task.state_version),
            actor: owner,
            reason: Some("won the repository lease"),
            error_code: None,
        },
    )?;
    if !matches!(out, TransitionOutcome::Applied { .. }) {
        return Ok(None);
    }
    with_conn!(conn, |c| diesel::update(
        tasks::table.filter(tasks::task_id.eq(&task.task_id))
    )
    .set(tasks::lease_id.eq(lease_id))
    .execute(c))?;
    let attempt = start_attempt(conn, &task.task_id, Some(lease_id), Some(owner))?;
    Ok(Some(attempt))
}

/// Moves a task by compare-and-swap on the version the caller decided on,
/// setting `next_retry_at` when it goes to `retry_wait`.
pub fn decide_move(
    conn: &mut DbConn,
    task_id: &TaskId,
    expected_version: i64,
    to: TaskState,
    reason: &str,
    error_code: Option<&str>,
    next_retry_at: Option<&str>,
) -> Result<TransitionOutcome, StoreError> {
    let out = transition(
        conn,
        &TransitionRequest {
            task_id,
            to,
            expected_version: Some(expected_version),
            actor: "system",
            reason: Some(reason),
            error_code,
        },
    )?;
    if let (TransitionOutcome::Applied { .. }, Some(at)) = (&out, next_retry_at) {
        with_conn!(conn, |c| diesel::update(
            tasks::table.filter(tasks::task_id.eq(task_id))
        )
        .set(tasks::next_retry_at.eq(at))
        .execute(c))?;
    }
    Ok(out)
}

/// The task's state and version now, for a decision that writes without
/// moving it: `None` when the task does not exist.
pub fn task_version(
    conn: &mut DbConn,
    task_id: &TaskId,
) -> Result<Option<(TaskState, i64)>, StoreError> {
    let row: Option<(String, i64)> = with_conn!(conn, |c| tasks::table
        .filter(tasks::task_id.eq(task_id))
        .select((tasks::state, tasks::state_version))
        .first(c)
        .optional())?;
    row.map(|(state, version)| {
        state
            .parse::<TaskState>()
            .map(|s| (s, version))
            .map_err(|e| StoreError::Query(e.to_string()))
    })
    .transpose()
}

/// Ends the task's current attempt with an outcome.
pub fn end_attempt(conn: &mut DbConn, task_id: &TaskId, outcome: &str) -> Result<(), StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(
        attempts::table
            .filter(attempts::task_id.eq(task_id))
            .filter(attempts::status.eq("active"))
    )
    .set((
        attempts::status.eq("ended"),
        attempts::outcome.eq(outcome),
        attempts::ended_at.eq(&at),
    ))
    .execute(c))?;
    Ok(())
}

/// The task's active attempt.
pub fn active_attempt(conn: &mut DbConn, task_id: &TaskId) -> Result<Option<Attempt>, StoreError> {
    Ok(with_conn!(conn, |c| attempts::table
        .filter(attempts::task_id.eq(task_id))
        .filter(attempts::status.eq("active"))
        .order(attempts::number.desc())
        .select(Attempt::as_select())
        .first(c)
        .optional())?)
}
