//! Delegated children in the store: a child is a workflow of its own, in a
//! session of its own (`<resource>:child:<n>`: its own thread and worktree),
//! launched in the parent's transaction by compare-and-swap on the parent's
//! version, with its first turn queued as the child's continuation 1. Its
//! identity, parent, delegated authority and the parent's turn that asked
//! for it are durable from that transaction on.

use super::{bump, continue_with, end, find, supersede_continuation, ContinueWith, Workflow};
use crate::domain::policy::{ApprovalPolicy, Sandbox};
use crate::domain::workflow::children::{
    admit, assignment_key, Admission, AdmissionSnapshot, ChildMode, Launch, Refusal,
};
use crate::domain::workflow::WorkflowState;
use crate::domain::{ResourceKey, WorkflowId};
use crate::store::audit::{self, Audit};
use crate::store::models::Task;
use crate::store::schema::{sessions, workflows};
use crate::store::{now, DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;

/// What a parent's `assign_child` or `handoff_child` asks.
#[derive(Debug, Clone)]
pub struct Assignment<'a> {
    pub parent: &'a Workflow,
    /// The parent's task whose turn asks: its logical turn.
    pub by: &'a Task,
    pub mode: ChildMode,
    pub title: &'a str,
    pub instructions: &'a str,
    /// The parent's thread's sandbox and approval policy: the most the
    /// child is given.
    pub sandbox: Sandbox,
    pub approval: ApprovalPolicy,
    /// The parent's thread, when the child's thread starts from a copy of
    /// its conversation.
    pub fork_from: Option<&'a str>,
    /// `max_children_per_workflow`.
    pub max_children: i64,
    pub instance_id: &'a str,
}

/// What came of an assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launched {
    /// A new child, its first turn queued.
    New { child: Child },
    /// The same assignment had its child already: that one.
    Existing { child: Child },
    /// Refused before launch (`running` children work): nothing ran; the
    /// same assignment may launch once one of them has ended.
    NotAdmitted { running: i64 },
    /// The parent is not open: it cannot delegate now.
    ParentNotOpen { state: WorkflowState },
}

/// A child, as its parent's agent is told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    pub workflow_id: WorkflowId,
    pub session_key: ResourceKey,
    pub state: WorkflowState,
}

impl Child {
    fn of(w: &Workflow) -> Child {
        Child {
            workflow_id: w.workflow_id.clone(),
            session_key: w.session_key.clone(),
            state: w.state,
        }
    }
}

/// Decides the assignment on the parent as it is now and writes what was
/// decided, in the caller's transaction: a launch (the child's session,
/// workflow and first turn; a handoff's parent waits), or the record that
/// it was not admitted.
pub fn launch(conn: &mut DbConn, a: &Assignment<'_>) -> Result<Launched, StoreError> {
    let key = assignment_key(&a.parent.workflow_id, a.mode, a.title, a.instructions);
    let earlier = by_assignment(conn, &a.parent.workflow_id, &key)?;
    let running = running(conn, &a.parent.workflow_id)?;
    let snap = AdmissionSnapshot {
        parent: a.parent.state,
        parent_version: a.parent.version,
        live_children: running,
        max_children: a.max_children,
        earlier: earlier.as_ref().map(|_| Launch::Admitted),
    };
    let d = admit(&snap, a.mode);
    match d.admission {
        Admission::Existing => match earlier {
            Some(w) => Ok(Launched::Existing {
                child: Child::of(&w),
            }),
            None => Err(StoreError::Refused {
                code: "child_missing",
                message: format!(
                    "the assignment of workflow {} had a child that is gone",
                    a.parent.workflow_id
                ),
            }),
        },
        Admission::NotAdmitted(_) => {
            audit::record(
                conn,
                &Audit::new("workflow.child_not_admitted", "system")
                    .task(&a.by.task_id)
                    .meta(serde_json::json!({
                        "workflowId": a.parent.workflow_id, "assignment": key,
                        "mode": a.mode, "running": running, "max": a.max_children,
                        "decidedOnVersion": d.expected_version,
                    })),
            )?;
            Ok(Launched::NotAdmitted { running })
        }
        Admission::Refused(Refusal::ParentNotOpen) => Ok(Launched::ParentNotOpen {
            state: a.parent.state,
        }),
        Admission::Launch { parent_waits } => {
            bump(conn, a.parent, d.expected_version)?;
            if parent_waits {
                with_conn!(conn, |c| diesel::update(super::row(a.parent))
                    .set(workflows::state.eq(WorkflowState::WaitingChild))
                    .execute(c))?;
                supersede_continuation(conn, a.parent, "the workflow waits for its child")?;
            }
            let child = insert_child(conn, a, &key)?;
            let task = continue_with(
                conn,
                &child,
                &ContinueWith {
                    version: child.version,
                    seq: 1,
                    idle_finals: 0,
                    due_at: now(),
                    after: a.by,
                    instance_id: a.instance_id,
                    text: a.instructions,
                    why: "a child's first turn",
                },
            )?;
            audit::record(
                conn,
                &Audit::new("workflow.child_launched", "system")
                    .task(&task)
                    .meta(serde_json::json!({
                        "workflowId": child.workflow_id, "parent": a.parent.workflow_id,
                        "mode": a.mode, "session": child.session_key, "byTask": a.by.task_id,
                        "sandbox": a.sandbox, "approvalPolicy": a.approval,
                        "forkedFromThread": a.fork_from,
                        "decidedOnVersion": d.expected_version,
                    })),
            )?;
            let child = find(conn, &child.workflow_id)?.unwrap_or(child);
            Ok(Launched::New {
                child: Child::of(&child),
            })
        }
    }
}

/// The child's session and workflow rows: number `n` of its resource.
fn insert_child(conn: &mut DbConn, a: &Assignment<'_>, key: &str) -> Result<Workflow, StoreError> {
    let number = next_number(conn, &a.parent.session_key)?;
    let session = a.parent.session_key.child_session(number);
    let at = now();
    let id = WorkflowId::mint();
    let repo = session.repo().clone();
    with_conn!(conn, |c| {
        diesel::insert_into(sessions::table)
            .values((
                sessions::session_key.eq(&session),
                sessions::repo_key.eq(&repo),
                sessions::kind.eq(session.kind()),
                sessions::number.eq(session.number()),
                sessions::status.eq("active"),
                sessions::created_at.eq(&at),
                sessions::updated_at.eq(&at),
                sessions::version.eq(1),
            ))
            .execute(c)?;
        diesel::insert_into(workflows::table)
            .values((
                workflows::workflow_id.eq(&id),
                workflows::session_key.eq(&session),
                workflows::parent_workflow_id.eq(&a.parent.workflow_id),
                workflows::state.eq(WorkflowState::Open),
                workflows::title.eq(a.title.chars().take(200).collect::<String>()),
                workflows::owner.eq(&a.parent.owner),
                workflows::created_at.eq(&at),
                workflows::updated_at.eq(&at),
                workflows::child_mode.eq(a.mode),
                workflows::assignment_key.eq(key),
                workflows::child_number.eq(number),
                workflows::instructions.eq(a.instructions),
                workflows::created_by_task.eq(&a.by.task_id),
                workflows::sandbox.eq(a.sandbox),
                workflows::approval_policy.eq(a.approval),
                workflows::forked_from_thread.eq(a.fork_from),
            ))
            .execute(c)
    })?;
    find(conn, &id)?.ok_or_else(|| StoreError::Refused {
        code: "workflow_missing",
        message: format!("child workflow {id} vanished right after it was written"),
    })
}

/// The next child number of the resource whose session is `session`: one
/// past the highest of any of its workflows' children.
fn next_number(conn: &mut DbConn, session: &ResourceKey) -> Result<i64, StoreError> {
    let parents: Vec<WorkflowId> = with_conn!(conn, |c| workflows::table
        .filter(workflows::session_key.eq(session))
        .select(workflows::workflow_id)
        .load(c))?;
    let max: Option<i64> = with_conn!(conn, |c| workflows::table
        .filter(workflows::parent_workflow_id.eq_any(&parents))
        .select(diesel::dsl::max(workflows::child_number))
        .first(c))?;
    Ok(max.unwrap_or(0) + 1)
}

/// The child an assignment launched, if it did.
fn by_assignment(
    conn: &mut DbConn,
    parent: &WorkflowId,
    key: &str,
) -> Result<Option<Workflow>, StoreError> {
    Ok(with_conn!(conn, |c| workflows::table
        .filter(workflows::parent_workflow_id.eq(parent))
        .filter(workflows::assignment_key.eq(key))
        .select(Workflow::as_select())
        .first(c)
        .optional())?)
}

/// The workflow's children, oldest first.
pub fn of(conn: &mut DbConn, parent: &WorkflowId) -> Result<Vec<Workflow>, StoreError> {
    Ok(with_conn!(conn, |c| workflows::table
        .filter(workflows::parent_workflow_id.eq(parent))
        .order(workflows::id.asc())
        .select(Workflow::as_select())
        .load(c))?)
}

/// The workflow's children that have not ended.
pub fn running(conn: &mut DbConn, parent: &WorkflowId) -> Result<i64, StoreError> {
    let ends = [
        WorkflowState::Completed,
        WorkflowState::Cancelled,
        WorkflowState::Failed,
    ];
    Ok(with_conn!(conn, |c| workflows::table
        .filter(workflows::parent_workflow_id.eq(parent))
        .filter(workflows::state.ne_all(ends))
        .count()
        .get_result(c))?)
}

/// The parent ended: its children that have not end as cancelled (their
/// pending turns with them), in the caller's transaction.
pub(super) fn end_live(conn: &mut DbConn, parent: &Workflow) -> Result<(), StoreError> {
    for child in of(conn, &parent.workflow_id)? {
        if !child.state.is_end() {
            end(
                conn,
                &child,
                child.version,
                WorkflowState::Cancelled,
                "parent_ended",
                None,
                None,
            )?;
        }
    }
    Ok(())
}

/// Counts one more recovery turn of the child (asked again for the result
/// it did not record).
pub fn count_recovery(conn: &mut DbConn, child: &Workflow, attempt: i64) -> Result<(), StoreError> {
    with_conn!(conn, |c| diesel::update(super::row(child))
        .set(workflows::recovered.eq(attempt))
        .execute(c))?;
    Ok(())
}

/// The workflow a child's task belongs to, if `task` is a child's.
pub fn of_task(conn: &mut DbConn, task: &Task) -> Result<Option<Workflow>, StoreError> {
    if task.session_key.child().is_none() {
        return Ok(None);
    }
    match &task.workflow_id {
        Some(id) => find(conn, id),
        None => Ok(None),
    }
}
