//! A session's workflow in the store: the one that has not ended, a task
//! joining it, and the writes of the workflow's decisions — each a
//! compare-and-swap on the version it was made on, in the caller's
//! transaction (the one that ends the task the decision is about). A
//! continuation is a task of its own, created here with its delivery and
//! outbox entry under an operation derived from the workflow and its
//! number: written again after a crash, it is the same operation.

use super::audit::{self, Audit};

pub mod admin;
pub mod children;
pub mod results;

use super::models::Task;
use super::schema::{
    outbox_entries, sessions, task_transitions, tasks, webhook_deliveries, workflow_gates,
    workflows,
};
use super::steer::stale;
use super::{now, DbConn, StoreError};
use crate::domain::fingerprint::Fingerprint;
use crate::domain::policy::{ApprovalPolicy, Sandbox};
use crate::domain::states::{CapacityDenial, OutboxStatus, SendMode};
use crate::domain::workflow::children::ChildMode;
use crate::domain::workflow::decide::{WorkflowLimits, WorkflowSnapshot};
use crate::domain::workflow::{GateKind, WorkflowState};
use crate::domain::{GateId, OperationId, ResourceKey, TaskId, WorkflowId};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;

/// The literal condition of the partial index `workflows_session_live`.
const LIVE: &str = "workflows.parent_workflow_id IS NULL \
     AND workflows.state IN ('open', 'waiting_owner', 'waiting_child')";

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = workflows)]
#[serde(rename_all = "camelCase")]
pub struct Workflow {
    #[serde(skip)]
    pub id: i64,
    pub workflow_id: WorkflowId,
    pub session_key: ResourceKey,
    pub parent_workflow_id: Option<WorkflowId>,
    pub state: WorkflowState,
    pub title: String,
    pub owner: String,
    pub idle_finals: i64,
    pub continuations: i64,
    pub end_code: Option<String>,
    pub summary: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub version: i64,
    /// The task whose turn ended it (the agent completed it there).
    pub ended_by_task: Option<TaskId>,
    /// Why it waits to continue: the provider turned its last turn away
    /// for capacity. Cleared once its next turn is admitted.
    pub wait_reason: Option<CapacityDenial>,
    /// When its next continuation is due, while it waits so.
    pub wait_until: Option<String>,
    /// Capacity refusals in a row (each doubles the wait).
    #[serde(skip)]
    pub denials: i64,
    /// How its parent handed it work, for a delegated child.
    pub child_mode: Option<ChildMode>,
    /// The parent's request it answers: asked again, the same child.
    #[serde(skip)]
    pub assignment_key: Option<String>,
    /// The `<n>` of a child's session key.
    pub child_number: Option<i64>,
    /// What its parent asked of a child.
    pub instructions: Option<String>,
    /// The parent's task that asked for a child: its result is bound to
    /// that workflow and that turn.
    pub created_by_task: Option<TaskId>,
    /// The most a child was delegated: its parent's sandbox and approval
    /// policy.
    pub sandbox: Option<Sandbox>,
    pub approval_policy: Option<ApprovalPolicy>,
    /// Turns a child was asked again for the result it did not record.
    pub recovered: i64,
    /// The parent's thread a child's thread starts from, when its parent
    /// asked for a fork.
    pub forked_from_thread: Option<String>,
}

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = workflow_gates)]
#[serde(rename_all = "camelCase")]
pub struct Gate {
    #[serde(skip)]
    pub id: i64,
    pub gate_id: GateId,
    pub workflow_id: WorkflowId,
    pub kind: GateKind,
    pub question: String,
    pub status: String,
    pub opened_by_task: Option<TaskId>,
    pub resumed_by_task: Option<TaskId>,
    pub resumed_by: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// The workflow as its decision sees it, read in the caller's transaction.
pub fn snapshot(
    c: &mut DbConn,
    w: &Workflow,
    limits: WorkflowLimits,
) -> Result<WorkflowSnapshot, StoreError> {
    Ok(WorkflowSnapshot {
        state: w.state,
        version: w.version,
        idle_finals: w.idle_finals,
        continuations: w.continuations,
        continuation_pending: continuation_pending(c, &w.workflow_id)?,
        max_idle_finals: limits.max_idle_finals,
        turns: turns_of(c, &w.workflow_id)?,
        max_turns: limits.max_turns,
        denials: w.denials,
        children_running: children::running(c, &w.workflow_id)? > 0,
        results_waiting: results::waiting(c, &w.workflow_id)? > 0,
    })
}

/// Turns all the workflow's tasks took.
pub fn turns_of(conn: &mut DbConn, id: &WorkflowId) -> Result<i64, StoreError> {
    use super::schema::turns;
    Ok(with_conn!(conn, |c| turns::table
        .inner_join(tasks::table.on(tasks::task_id.eq(turns::task_id)))
        .filter(tasks::workflow_id.eq(id))
        .count()
        .get_result(c))?)
}

/// The session's top-level workflow that has not ended, if any.
pub fn live(conn: &mut DbConn, session_key: &ResourceKey) -> Result<Option<Workflow>, StoreError> {
    Ok(with_conn!(conn, |c| workflows::table
        .filter(workflows::session_key.eq(session_key))
        .filter(diesel::dsl::sql::<diesel::sql_types::Bool>(LIVE))
        .select(Workflow::as_select())
        .first(c)
        .optional())?)
}

pub fn find(conn: &mut DbConn, id: &WorkflowId) -> Result<Option<Workflow>, StoreError> {
    Ok(with_conn!(conn, |c| workflows::table
        .filter(workflows::workflow_id.eq(id))
        .select(Workflow::as_select())
        .first(c)
        .optional())?)
}

/// The workflow's open gate, if it waits behind one.
pub fn open_gate(conn: &mut DbConn, id: &WorkflowId) -> Result<Option<Gate>, StoreError> {
    Ok(with_conn!(conn, |c| workflow_gates::table
        .filter(workflow_gates::workflow_id.eq(id))
        .filter(workflow_gates::status.eq("open"))
        .select(Gate::as_select())
        .first(c)
        .optional())?)
}

/// Whether a continuation of the workflow has not ended.
pub fn continuation_pending(conn: &mut DbConn, id: &WorkflowId) -> Result<bool, StoreError> {
    let n: i64 = with_conn!(conn, |c| tasks::table
        .filter(tasks::workflow_id.eq(id))
        .filter(tasks::continuation.is_not_null())
        .filter(tasks::state.eq_any(live_states()))
        .count()
        .get_result(c))?;
    Ok(n > 0)
}

/// The names of the task states that are not terminal.
pub(in crate::store) fn live_states() -> Vec<&'static str> {
    TaskState::ALL
        .iter()
        .filter(|s| !s.is_terminal())
        .map(|s| s.as_str())
        .collect()
}

/// The session's live workflow, opened for `task` (its author the owner)
/// when there is none; the task joins it. Idempotent for a task that joined
/// already.
pub fn join(conn: &mut DbConn, task: &Task, title: &str) -> Result<Workflow, StoreError> {
    if let Some(id) = &task.workflow_id {
        if let Some(w) = find(conn, id)? {
            return Ok(w);
        }
    }
    let workflow = match live(conn, &task.session_key)? {
        Some(w) => w,
        None => {
            let at = now();
            let id = WorkflowId::mint();
            with_conn!(conn, |c| diesel::insert_into(workflows::table)
                .values((
                    workflows::workflow_id.eq(&id),
                    workflows::session_key.eq(&task.session_key),
                    workflows::state.eq(WorkflowState::Open),
                    workflows::title.eq(title.chars().take(200).collect::<String>()),
                    workflows::owner.eq(&task.author),
                    workflows::created_at.eq(&at),
                    workflows::updated_at.eq(&at),
                ))
                .execute(c))?;
            audit::record(
                conn,
                &Audit::new("workflow.opened", "system")
                    .task(&task.task_id)
                    .meta(serde_json::json!({"workflowId": id, "owner": task.author})),
            )?;
            find(conn, &id)?.ok_or_else(|| StoreError::Refused {
                code: "workflow_missing",
                message: format!("workflow {id} vanished right after it was written"),
            })?
        }
    };
    with_conn!(conn, |c| diesel::update(
        tasks::table.filter(tasks::task_id.eq(&task.task_id))
    )
    .set(tasks::workflow_id.eq(&workflow.workflow_id))
    .execute(c))?;
    Ok(workflow)
}

/// The provider turned the workflow's turn away for capacity: continuation
/// `seq` (its wait in `c.due_at`) carries the work on, and until it is
/// admitted the workflow shows why it waits. `denials`: refusals in a row,
/// this one included. The count of finals without progress is untouched: a
/// refusal is neither progress nor a final.
pub fn wait(
    conn: &mut DbConn,
    w: &Workflow,
    c: &ContinueWith<'_>,
    reason: CapacityDenial,
    denials: i64,
) -> Result<TaskId, StoreError> {
    let task = continue_with(conn, w, c)?;
    with_conn!(conn, |x| diesel::update(row(w))
        .set((
            workflows::wait_reason.eq(reason),
            workflows::wait_until.eq(&c.due_at),
            workflows::denials.eq(denials),
        ))
        .execute(x))?;
    audit::record(
        conn,
        &Audit::new("workflow.waiting", "system")
            .task(&task)
            .meta(serde_json::json!({
                "workflowId": w.workflow_id, "waitReason": reason, "until": c.due_at,
                "denials": denials, "decidedOnVersion": c.version,
            })),
    )?;
    Ok(task)
}

/// A turn of the workflow was admitted: it no longer waits for capacity
/// (the count of refusals stays until a step other than a refusal).
pub fn admitted(conn: &mut DbConn, w: &Workflow) -> Result<(), StoreError> {
    if w.wait_reason.is_none() {
        return Ok(());
    }
    with_conn!(conn, |x| diesel::update(row(w))
        .set((
            workflows::wait_reason.eq(None::<CapacityDenial>),
            workflows::wait_until.eq(None::<String>),
        ))
        .execute(x))?;
    Ok(())
}

/// Moves the workflow from `version` to `version + 1`; `Refused { STALE }`
/// if it is no longer at `version` (nothing written). The caller then sets
/// what the decision changes, in the same transaction.
fn bump(conn: &mut DbConn, w: &Workflow, version: i64) -> Result<(), StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        workflows::table
            .filter(workflows::workflow_id.eq(&w.workflow_id))
            .filter(workflows::version.eq(version))
    )
    .set((
        workflows::updated_at.eq(&at),
        workflows::version.eq(version + 1),
        // Any step but a capacity wait (which sets them again after) ends
        // the wait and its run of refusals.
        workflows::wait_reason.eq(None::<CapacityDenial>),
        workflows::wait_until.eq(None::<String>),
        workflows::denials.eq(0),
    ))
    .execute(c))?;
    if n == 0 {
        return Err(stale(format!(
            "workflow {} moved on from version {version}",
            w.workflow_id
        )));
    }
    Ok(())
}

/// The workflow's row, for the columns a decision changes.
fn row(
    w: &Workflow,
) -> diesel::dsl::Filter<workflows::table, diesel::dsl::Eq<workflows::workflow_id, &WorkflowId>> {
    workflows::table.filter(workflows::workflow_id.eq(&w.workflow_id))
}

/// What a new continuation needs besides its workflow.
#[derive(Debug, Clone)]
pub struct ContinueWith<'a> {
    pub version: i64,
    pub seq: i64,
    pub idle_finals: i64,
    /// When it may start (the backoff ends).
    pub due_at: String,
    /// The task whose final it continues (its repository, resource and
    /// refs; the continuation runs in the workflow's own session).
    pub after: &'a Task,
    pub instance_id: &'a str,
    /// What the continuation's turn is told.
    pub text: &'a str,
    /// Why it continues, for the continuation's first history row.
    pub why: &'a str,
}

/// Counts the final and creates continuation `seq`: its delivery, its task
/// (`queued`, not before `due_at`) and its outbox entry. Its task id.
pub fn continue_with(
    conn: &mut DbConn,
    w: &Workflow,
    c: &ContinueWith<'_>,
) -> Result<TaskId, StoreError> {
    bump(conn, w, c.version)?;
    with_conn!(conn, |x| diesel::update(row(w))
        .set((
            workflows::idle_finals.eq(c.idle_finals),
            workflows::continuations.eq(c.seq),
        ))
        .execute(x))?;
    let at = now();
    let delivery_key = format!("{}:continuation:{}:{}", c.instance_id, w.workflow_id, c.seq);
    let task_id = TaskId::mint();
    let queue_id = crate::domain::keys::mint_with_prefix("q-");
    let operation_id = OperationId::of_continuation(&w.workflow_id, c.seq);
    let after = c.after;
    with_conn!(conn, |x| {
        diesel::insert_into(webhook_deliveries::table)
            .values((
                webhook_deliveries::delivery_key.eq(&delivery_key),
                webhook_deliveries::delivery_id.eq(&delivery_key),
                webhook_deliveries::event_type.eq("continuation"),
                webhook_deliveries::status.eq("accepted"),
                webhook_deliveries::repo_key.eq(&after.repo_key),
                webhook_deliveries::resource_key.eq(&after.resource_key),
                webhook_deliveries::task_id.eq(&task_id),
                webhook_deliveries::payload_hash.eq("continuation"),
                webhook_deliveries::received_at.eq(&at),
            ))
            .execute(x)?;
        diesel::insert_into(tasks::table)
            .values((
                tasks::task_id.eq(&task_id),
                tasks::delivery_key.eq(&delivery_key),
                tasks::repo_key.eq(&after.repo_key),
                tasks::session_key.eq(&w.session_key),
                tasks::resource_key.eq(&after.resource_key),
                tasks::trigger_key.eq(&delivery_key),
                tasks::author.eq(&w.owner),
                tasks::state.eq(TaskState::Queued),
                tasks::state_version.eq(1),
                tasks::next_retry_at.eq(&c.due_at),
                tasks::head_ref.eq(&after.head_ref),
                tasks::base_ref.eq(&after.base_ref),
                tasks::created_at.eq(&at),
                tasks::updated_at.eq(&at),
                tasks::workflow_id.eq(&w.workflow_id),
                tasks::continuation.eq(c.seq),
            ))
            .execute(x)?;
        diesel::insert_into(task_transitions::table)
            .values((
                task_transitions::task_id.eq(&task_id),
                task_transitions::to_state.eq(TaskState::Queued),
                task_transitions::state_version.eq(1),
                task_transitions::actor.eq("system"),
                task_transitions::reason.eq(c.why),
                task_transitions::at.eq(&at),
            ))
            .execute(x)?;
        let fingerprint = Fingerprint {
            session_key: w.session_key.as_str(),
            queue_id: &queue_id,
            user_text: c.text,
            prompt_text: c.text,
            attachments: &[],
            thread_id: after
                .thread_id
                .as_deref()
                .filter(|_| after.session_key == w.session_key),
            thread_generation: 0,
            access_mode: None,
            rollback_before_send: false,
            created_at: &at,
        }
        .hash();
        diesel::insert_into(outbox_entries::table)
            .values((
                outbox_entries::queue_id.eq(&queue_id),
                outbox_entries::session_key.eq(&w.session_key),
                outbox_entries::task_id.eq(&task_id),
                outbox_entries::operation_id.eq(&operation_id),
                outbox_entries::fingerprint.eq(&fingerprint),
                outbox_entries::mode.eq(SendMode::Enqueue),
                outbox_entries::status.eq(OutboxStatus::Queued),
                outbox_entries::auto_drain.eq(true),
                outbox_entries::user_text.eq(c.text),
                outbox_entries::created_at.eq(&at),
                outbox_entries::updated_at.eq(&at),
                outbox_entries::version.eq(1),
            ))
            .execute(x)?;
        diesel::update(sessions::table.filter(sessions::session_key.eq(&w.session_key)))
            .set(sessions::open_entries.eq(sessions::open_entries + 1))
            .execute(x)
    })?;
    audit::record(
        conn,
        &Audit::new("workflow.continued", "system")
            .task(&task_id)
            .meta(serde_json::json!({
                "workflowId": w.workflow_id,
                "seq": c.seq,
                "after": after.task_id,
                "dueAt": c.due_at,
                "idleFinals": c.idle_finals,
                "decidedOnVersion": c.version,
            })),
    )?;
    Ok(task_id)
}

/// Counts a final while a continuation is pending already.
pub fn count_final(
    conn: &mut DbConn,
    w: &Workflow,
    version: i64,
    idle_finals: i64,
) -> Result<(), StoreError> {
    bump(conn, w, version)?;
    with_conn!(conn, |c| diesel::update(row(w))
        .set(workflows::idle_finals.eq(idle_finals))
        .execute(c))?;
    Ok(())
}

/// The workflow waits for its owner behind a new gate; its id.
pub fn gate(
    conn: &mut DbConn,
    w: &Workflow,
    version: i64,
    kind: GateKind,
    question: &str,
    task: &TaskId,
) -> Result<GateId, StoreError> {
    bump(conn, w, version)?;
    with_conn!(conn, |c| diesel::update(row(w))
        .set(workflows::state.eq(WorkflowState::WaitingOwner))
        .execute(c))?;
    supersede_continuation(conn, w, "the workflow waits for its owner")?;
    let at = now();
    let gate_id = GateId::mint();
    with_conn!(conn, |c| diesel::insert_into(workflow_gates::table)
        .values((
            workflow_gates::gate_id.eq(&gate_id),
            workflow_gates::workflow_id.eq(&w.workflow_id),
            workflow_gates::kind.eq(kind),
            workflow_gates::question.eq(question),
            workflow_gates::status.eq("open"),
            workflow_gates::opened_by_task.eq(task),
            workflow_gates::created_at.eq(&at),
            workflow_gates::updated_at.eq(&at),
        ))
        .execute(c))?;
    audit::record(
        conn,
        &Audit::new("workflow.gate_opened", "system")
            .task(task)
            .meta(serde_json::json!({
                "workflowId": w.workflow_id, "gateId": gate_id, "kind": kind,
                "decidedOnVersion": version,
            })),
    )?;
    Ok(gate_id)
}

/// The owner answered the gate with `task`: the workflow is open again and
/// its count of finals without progress starts over.
pub fn resume(
    conn: &mut DbConn,
    w: &Workflow,
    version: i64,
    task: Option<&TaskId>,
    by: &str,
) -> Result<(), StoreError> {
    bump(conn, w, version)?;
    with_conn!(conn, |c| diesel::update(row(w))
        .set((
            workflows::state.eq(WorkflowState::Open),
            workflows::idle_finals.eq(0),
        ))
        .execute(c))?;
    let at = now();
    with_conn!(conn, |c| diesel::update(
        workflow_gates::table
            .filter(workflow_gates::workflow_id.eq(&w.workflow_id))
            .filter(workflow_gates::status.eq("open"))
    )
    .set((
        workflow_gates::status.eq("resumed"),
        workflow_gates::resumed_by_task.eq(task),
        workflow_gates::resumed_by.eq(by),
        workflow_gates::updated_at.eq(&at),
    ))
    .execute(c))?;
    audit::record(
        conn,
        &match task {
            Some(task) => Audit::new("workflow.resumed", by).task(task),
            None => Audit::new("workflow.resumed", by),
        }
        .meta(serde_json::json!({"workflowId": w.workflow_id, "decidedOnVersion": version})),
    )?;
    Ok(())
}

/// Owner input while open: the count starts over, and a continuation not
/// started yet is superseded for good (the input is the next step).
pub fn reset_idle(
    conn: &mut DbConn,
    w: &Workflow,
    version: i64,
    task: &TaskId,
) -> Result<(), StoreError> {
    bump(conn, w, version)?;
    with_conn!(conn, |c| diesel::update(row(w))
        .set(workflows::idle_finals.eq(0))
        .execute(c))?;
    supersede_continuation(conn, w, &format!("superseded by task {task}"))
}

/// The workflow ends: `state` for `code`; a continuation not started yet is
/// cancelled, an open gate closed, its live children cancelled and the
/// deliveries bound to it terminalised, in this transaction.
pub fn end(
    conn: &mut DbConn,
    w: &Workflow,
    version: i64,
    state: WorkflowState,
    code: &str,
    summary: Option<&str>,
    by_task: Option<&TaskId>,
) -> Result<(), StoreError> {
    bump(conn, w, version)?;
    with_conn!(conn, |c| diesel::update(row(w))
        .set((
            workflows::state.eq(state),
            workflows::end_code.eq(code),
            workflows::summary.eq(summary),
            workflows::ended_by_task.eq(by_task),
        ))
        .execute(c))?;
    supersede_continuation(conn, w, &format!("the workflow ended ({code})"))?;
    // Nothing goes on for a workflow that ended: its children stop, and
    // what they delivered to it goes nowhere else.
    children::end_live(conn, w)?;
    results::terminalise(conn, &w.workflow_id)?;
    let at = now();
    with_conn!(conn, |c| diesel::update(
        workflow_gates::table
            .filter(workflow_gates::workflow_id.eq(&w.workflow_id))
            .filter(workflow_gates::status.eq("open"))
    )
    .set((
        workflow_gates::status.eq("closed"),
        workflow_gates::updated_at.eq(&at),
    ))
    .execute(c))?;
    audit::record(
        conn,
        &Audit::new("workflow.ended", "system").meta(serde_json::json!({
            "workflowId": w.workflow_id, "state": state, "code": code,
            "decidedOnVersion": version,
        })),
    )?;
    Ok(())
}

/// `Refused { code: NOT_OPEN }`: a continuation's workflow is no longer
/// open, so its turn must not start.
pub const NOT_OPEN: &str = "workflow_not_open";

/// The fence a continuation passes in the transaction that records its
/// turn's intent: its workflow is still open. A workflow that ended or
/// waits for its owner since the continuation was leased refuses it here,
/// atomically with the intent, so no turn starts for it.
pub fn admit_continuation(w: &Workflow) -> Result<(), StoreError> {
    if w.state == WorkflowState::Open {
        return Ok(());
    }
    Err(StoreError::Refused {
        code: NOT_OPEN,
        message: format!(
            "workflow {} is {}: its continuation does not run",
            w.workflow_id,
            w.state.as_str()
        ),
    })
}

/// Whether `task`'s turn completed its workflow: such a task owes the owner
/// its answer, even as a continuation.
pub fn completed_by(conn: &mut DbConn, task: &TaskId) -> Result<bool, StoreError> {
    let n: i64 = with_conn!(conn, |c| workflows::table
        .filter(workflows::ended_by_task.eq(task))
        .filter(workflows::parent_workflow_id.is_null())
        .filter(workflows::state.eq(WorkflowState::Completed))
        .count()
        .get_result(c))?;
    Ok(n > 0)
}

/// Cancels the workflow's continuation that has not started (`queued`, or
/// `retry_wait` after a failure before admission): it can never run later,
/// and its entry no longer holds its session. One that runs already is left
/// to end; one being started is stopped by the fence of [`admit_continuation`].
fn supersede_continuation(conn: &mut DbConn, w: &Workflow, why: &str) -> Result<(), StoreError> {
    let waiting: Option<Task> = with_conn!(conn, |c| tasks::table
        .filter(tasks::workflow_id.eq(&w.workflow_id))
        .filter(tasks::continuation.is_not_null())
        .filter(tasks::state.eq_any([TaskState::Queued.as_str(), TaskState::RetryWait.as_str()]))
        .select(Task::as_select())
        .first(c)
        .optional())?;
    let Some(t) = waiting else {
        return Ok(());
    };
    let moved = super::tasks::transition(
        conn,
        &super::tasks::TransitionRequest {
            task_id: &t.task_id,
            expected_version: Some(t.state_version),
            to: TaskState::Cancelled,
            actor: "system",
            reason: Some(why),
            error_code: Some("superseded"),
        },
    )?;
    super::steer::moved(moved, &t.task_id)
}

/// The workflow's latest logical input: a continuation takes its
/// repository, session and refs from it.
pub fn last_input(conn: &mut DbConn, id: &WorkflowId) -> Result<Task, StoreError> {
    with_conn!(conn, |c| tasks::table
        .filter(tasks::workflow_id.eq(id))
        .order(tasks::id.desc())
        .select(Task::as_select())
        .first(c)
        .optional())?
    .ok_or_else(|| StoreError::Refused {
        code: "workflow_without_input",
        message: format!("workflow {id} has no task to continue from"),
    })
}

/// The workflow's queued continuation is due now: a child's result waits
/// for it.
pub fn hasten(conn: &mut DbConn, w: &Workflow) -> Result<(), StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(
        tasks::table
            .filter(tasks::workflow_id.eq(&w.workflow_id))
            .filter(tasks::continuation.is_not_null())
            .filter(tasks::state.eq(TaskState::Queued))
    )
    .set(tasks::next_retry_at.eq(&at))
    .execute(c))?;
    Ok(())
}
