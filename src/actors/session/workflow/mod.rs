//! The session's workflow: work that outlives a turn. Its decisions are
//! pure (`domain::workflow::decide`); the session commits them with the task
//! they are about:
//! the tools the agent calls inside a turn (`tools`), and the step a task's
//! end takes (`after_final`, in the transaction that ends the task).

mod children;
mod tools;

use crate::domain::limits::{Limit, LimitHit};
use crate::domain::states::CapacityDenial;
use crate::domain::workflow::decide::{
    capacity_wait, continuation_delay, decide, event_of_end, WorkflowEvent, WorkflowLimits,
    WorkflowStep,
};
use crate::domain::workflow::{GateKind, CONTINUATION_TEXT};
use crate::domain::{GateId, TaskId};
use crate::lifecycle::TaskState;
use crate::store::workflows::{self, ContinueWith};
use crate::store::{format_time, tasks, DbConn, StoreError};
use std::time::Duration;
use workflows::snapshot;

/// What a task's end needs to move its workflow on.
#[derive(Debug, Clone)]
pub struct WorkflowEnd {
    pub task_id: TaskId,
    pub limits: WorkflowLimits,
    /// The first continuation's wait (doubled per final without progress).
    pub backoff: Duration,
    pub instance_id: String,
    /// The bot's login, named in a gate's comment.
    pub bot_login: String,
    /// The limit the task reached, named in the gate's comment.
    pub budget: Option<crate::domain::limits::LimitHit>,
    /// Why the provider turned the task's turn away, if it did.
    pub denial: Option<CapacityDenial>,
    /// The first wait after a capacity refusal (`capacity_wait_secs`).
    pub capacity_wait: Duration,
    /// Turns a child without a result is asked again
    /// (`child_recovery_attempts`).
    pub child_recovery: i64,
}

/// A workflow's title, from the message that opens it: its first line.
pub(in crate::actors::session) fn title_of(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_owned()
}

/// `task` (a comment's, or a continuation) becomes its session's workflow's
/// next logical input, opening the workflow if none is live; a continuation
/// whose workflow is no longer open is refused (`workflows::NOT_OPEN`). A comment by
/// the owner (or by a holder of `gate_permission`: `as_owner`) resets the
/// count of finals without progress and supersedes a continuation that has
/// not started, for good.
pub(in crate::actors::session) fn join(
    c: &mut DbConn,
    task: &crate::store::models::Task,
    title: &str,
    limits: WorkflowLimits,
    as_owner: bool,
) -> Result<workflows::Workflow, StoreError> {
    let w = workflows::join(c, task, title)?;
    if task.continuation.is_some() {
        workflows::admit_continuation(&w)?;
        workflows::admitted(c, &w)?;
        return Ok(w);
    }
    workflows::admitted(c, &w)?;
    let snap = snapshot(c, &w, limits)?;
    let event = if as_owner || task.author.eq_ignore_ascii_case(&w.owner) {
        WorkflowEvent::OwnerInput
    } else {
        WorkflowEvent::OtherInput
    };
    let d = decide(&snap, event);
    match d.step {
        WorkflowStep::ResetIdle => workflows::reset_idle(c, &w, d.expected_version, &task.task_id)?,
        WorkflowStep::Resume => {
            workflows::resume(c, &w, d.expected_version, Some(&task.task_id), &task.author)?
        }
        _ => {}
    }
    Ok(workflows::find(c, &w.workflow_id)?.unwrap_or(w))
}

/// The task ended in `state` (for `code`): its workflow, if it joined one,
/// moves on as [`event_of_end`] says — a continuation, a count, a gate, or
/// its end — in the transaction that ends the task.
pub(super) fn after_end(
    c: &mut DbConn,
    end: &WorkflowEnd,
    state: TaskState,
    code: Option<&str>,
) -> Result<(), StoreError> {
    // Read here, not taken from the drive: the task joined its workflow
    // during this drive, after the drive read it.
    let Some(task) = tasks::find(c, &end.task_id)? else {
        return Ok(());
    };
    let Some(id) = task.workflow_id.clone() else {
        return Ok(());
    };
    // A continuation's final is progress only when it carried a child's
    // result to the workflow.
    let progress = task.continuation.is_none() || workflows::results::carried_by(c, &task.task_id)?;
    let Some(event) = event_of_end(state, code, progress) else {
        return Ok(());
    };
    let Some(w) = workflows::find(c, &id)? else {
        return Ok(());
    };
    if task.session_key.child().is_some()
        && children::child_ended(c, end, &task, event, &w)?.is_some()
    {
        return Ok(());
    }
    let snap = snapshot(c, &w, end.limits)?;
    let d = decide(&snap, event);
    tracing::debug!(task.id = %task.task_id, workflow.id = %id, decided_on = d.expected_version, event = ?event, step = ?d.step, "workflow decision");
    match d.step {
        WorkflowStep::Continue {
            seq,
            idle_finals,
            delay_steps,
        } => {
            workflows::continue_with(
                c,
                &w,
                &ContinueWith {
                    version: d.expected_version,
                    seq,
                    idle_finals,
                    due_at: due_after(continuation_delay(end.backoff, delay_steps)),
                    after: &task,
                    instance_id: &end.instance_id,
                    text: CONTINUATION_TEXT,
                    why: "the workflow continues after an ordinary final",
                },
            )?;
        }
        WorkflowStep::Wait { seq, denials } => {
            // Only a task whose turn was refused reaches here; a refusal
            // whose kind was lost still waits, as the least of them.
            let reason = end.denial.unwrap_or(CapacityDenial::RateLimited);
            workflows::wait(
                c,
                &w,
                &ContinueWith {
                    version: d.expected_version,
                    seq,
                    idle_finals: w.idle_finals,
                    due_at: due_after(capacity_wait(end.capacity_wait, denials)),
                    after: &task,
                    instance_id: &end.instance_id,
                    text: CONTINUATION_TEXT,
                    why: "the workflow continues after the provider's capacity refusal",
                },
                reason,
                denials,
            )?;
        }
        WorkflowStep::Count { idle_finals } => {
            workflows::count_final(c, &w, d.expected_version, idle_finals)?
        }
        WorkflowStep::Gate(kind) => {
            let question = match kind {
                GateKind::IdleFinals => format!(
                    "The agent ended {} turns in a row without progress on this workflow, so it \
                     stopped.",
                    w.idle_finals + 1
                ),
                GateKind::Budget => format!(
                    "Task `{}` reached a limit on what the agent may spend ({}), so the \
                     workflow stopped. {}",
                    task.task_id,
                    code.unwrap_or("timed_out"),
                    end.budget
                        .or_else(|| (snap.turns >= snap.max_turns).then_some(LimitHit {
                            limit: Limit::TurnsPerWorkflow,
                            value: snap.max_turns,
                            used: snap.turns,
                        }))
                        .map(|b| b.describe())
                        .unwrap_or_default()
                ),
                _ => format!(
                    "Task `{}` was stopped, so the workflow waits.",
                    task.task_id
                ),
            };
            open_gate(
                c,
                &w,
                d.expected_version,
                kind,
                &question,
                &task,
                &end.bot_login,
            )?;
        }
        WorkflowStep::End { state, code } => workflows::end(
            c,
            &w,
            d.expected_version,
            state,
            code,
            None,
            Some(&task.task_id),
        )?,
        _ => {}
    }
    Ok(())
}

/// The time `delay` from now, as the store writes times.
fn due_after(delay: Duration) -> String {
    format_time(
        chrono::Utc::now() + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::zero()),
    )
}

/// The workflow waits behind a gate that `task` opened: the gate's record
/// and its comment in the thread — what is asked, and who may answer — in
/// the caller's transaction. The gate's id.
pub(in crate::actors::session) fn open_gate(
    c: &mut DbConn,
    w: &workflows::Workflow,
    version: i64,
    kind: GateKind,
    question: &str,
    task: &crate::store::models::Task,
    bot_login: &str,
) -> Result<GateId, StoreError> {
    let gate = workflows::gate(c, w, version, kind, question, &task.task_id)?;
    let body = gate_comment(question, &w.owner, bot_login, &gate);
    crate::store::comments::enqueue_note(
        c,
        &format!("{}:gate:{gate}", task.task_id),
        &task.task_id,
        &task.resource_key,
        &body,
    )?;
    Ok(gate)
}

/// A gate's comment: the question, who may answer and how, and the marker
/// that names the gate.
pub fn gate_comment(question: &str, owner: &str, bot_login: &str, gate: &GateId) -> String {
    format!(
        "{question}\n\n@{owner}: say how to go on in a comment that mentions @{bot_login}; it \
         resumes the workflow.\n\n<!-- codex-bridge gate={gate} -->"
    )
}
