//! Workflows as operators see and steer them: the list and one workflow's
//! page (`GET /workflows`, `/workflows/{id}`), cancelling one, and answering
//! its gate on the owner's behalf. Each control is decided by the same pure
//! [`decide`] the session uses, on the version it read, and is idempotent
//! by its `requestId`.

use super::{continue_with, end, find, last_input, resume, snapshot, ContinueWith, Gate, Workflow};
use crate::domain::workflow::decide::{decide, WorkflowEvent, WorkflowLimits, WorkflowStep};
use crate::domain::workflow::CONTINUATION_TEXT;
use crate::domain::{GateId, ResourceKey, TaskId, WorkflowId};
use crate::lifecycle::TaskState;
use crate::store::audit::{self, Audit, AuditView};
use crate::store::control::{idempotent, ControlRequest};
use crate::store::models::Task;
use crate::store::schema::{tasks, workflow_gates, workflows};
use crate::store::{format_time, DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;

/// Filters of the workflow list; `cursor` is the previous page's `nextCursor`.
#[derive(Debug, Clone)]
pub struct WorkflowFilter {
    pub session_key: Option<ResourceKey>,
    pub cursor: Option<i64>,
    pub limit: i64,
}

/// Workflows, newest first, and the cursor of the next page.
pub fn list(
    conn: &mut DbConn,
    filter: &WorkflowFilter,
) -> Result<(Vec<Workflow>, Option<i64>), StoreError> {
    let limit = filter.limit.clamp(1, 500);
    let rows: Vec<Workflow> = with_conn!(conn, |c| {
        let mut q = workflows::table
            .select(Workflow::as_select())
            .order(workflows::id.desc())
            .limit(limit)
            .into_boxed();
        if let Some(key) = &filter.session_key {
            q = q.filter(workflows::session_key.eq(key));
        }
        if let Some(cursor) = filter.cursor {
            q = q.filter(workflows::id.lt(cursor));
        }
        q.load(c)
    })?;
    let next = if rows.len() as i64 == limit {
        rows.last().map(|w| w.id)
    } else {
        None
    };
    Ok((rows, next))
}

/// One logical input of a workflow and the turn it took.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowTurn {
    pub task_id: TaskId,
    /// Its number as a continuation (`null`: a comment's task).
    pub continuation: Option<i64>,
    pub author: String,
    pub state: TaskState,
    pub error_code: Option<String>,
    pub thread_id: Option<String>,
    pub turn_id: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A delegated child as its parent's page shows it: its workflow, its own
/// thread and worktree, and its turns.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChildView {
    #[serde(flatten)]
    pub workflow: Workflow,
    /// How it was delegated: `assign` (the parent went on) or `handoff`
    /// (the parent waited); the same as its `childMode`.
    pub kind: Option<crate::domain::workflow::children::ChildMode>,
    pub thread_id: Option<String>,
    /// Its worktree's folder under the repository's worktrees, and its branch.
    pub worktree: String,
    pub branch: String,
    pub turns: Vec<WorkflowTurn>,
}

/// A workflow's page.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowDetail {
    pub workflow: Workflow,
    pub children: Vec<ChildView>,
    /// Its gates, oldest first: what was asked, and who resumed it.
    pub gates: Vec<Gate>,
    /// Its children's results, each with its delivery to it and whether it
    /// was acknowledged, oldest first.
    pub results: Vec<super::results::ResultView>,
    /// Its logical inputs, oldest first.
    pub turns: Vec<WorkflowTurn>,
}

pub fn detail(conn: &mut DbConn, id: &WorkflowId) -> Result<Option<WorkflowDetail>, StoreError> {
    let Some(workflow) = find(conn, id)? else {
        return Ok(None);
    };
    let mut children = Vec::new();
    for child in super::children::of(conn, id)? {
        let thread_id =
            crate::store::sessions::session(conn, &child.session_key)?.and_then(|s| s.thread_id);
        let tree = crate::domain::worktree::WorktreeId::of(&child.session_key);
        children.push(ChildView {
            kind: child.child_mode,
            thread_id,
            worktree: tree.dir_name(),
            branch: tree.branch(),
            turns: turns_of_workflow(conn, &child.workflow_id)?,
            workflow: child,
        });
    }
    let gates: Vec<Gate> = with_conn!(conn, |c| workflow_gates::table
        .filter(workflow_gates::workflow_id.eq(id))
        .order(workflow_gates::id.asc())
        .select(Gate::as_select())
        .load(c))?;
    let turns = turns_of_workflow(conn, id)?;
    Ok(Some(WorkflowDetail {
        workflow,
        children,
        gates,
        results: super::results::list(conn, id)?,
        turns,
    }))
}

/// The workflow's logical inputs and their turns, oldest first.
fn turns_of_workflow(conn: &mut DbConn, id: &WorkflowId) -> Result<Vec<WorkflowTurn>, StoreError> {
    let inputs: Vec<Task> = with_conn!(conn, |c| tasks::table
        .filter(tasks::workflow_id.eq(id))
        .order(tasks::id.asc())
        .select(Task::as_select())
        .load(c))?;
    Ok(inputs
        .into_iter()
        .map(|t| WorkflowTurn {
            task_id: t.task_id,
            continuation: t.continuation,
            author: t.author,
            state: t.state,
            error_code: t.error_code,
            thread_id: t.thread_id,
            turn_id: t.turn_id,
            created_at: t.created_at,
            updated_at: t.updated_at,
        })
        .collect())
}

fn workflow_or_404(conn: &mut DbConn, id: &WorkflowId) -> Result<Workflow, StoreError> {
    find(conn, id)?.ok_or_else(|| StoreError::NotFound(format!("workflow {id}")))
}

fn not_applicable(w: &Workflow, what: &str) -> StoreError {
    StoreError::Refused {
        code: "workflow_not_open",
        message: format!("workflow {} is `{}`: {what}", w.workflow_id, w.state),
    }
}

/// `POST /workflows/{id}/cancel`: the workflow ends `cancelled`; a
/// continuation not started yet is cancelled with it, an open gate closed,
/// its children cancelled. A turn already running is left to end (abort its
/// task to stop it); its end continues nothing. A cancelled child gives its
/// parent one incomplete result saying so (its parent never waits on it).
pub fn cancel(
    conn: &mut DbConn,
    req: &ControlRequest,
    id: &WorkflowId,
    limits: WorkflowLimits,
    instance_id: &str,
) -> Result<AuditView, StoreError> {
    idempotent(conn, req, "workflow.cancel", id, |conn| {
        let w = workflow_or_404(conn, id)?;
        let snap = snapshot(conn, &w, limits)?;
        let d = decide(&snap, WorkflowEvent::Cancel);
        let WorkflowStep::End { state, code } = d.step else {
            return Err(not_applicable(&w, "it has ended already"));
        };
        if w.parent_workflow_id.is_some() {
            let report = crate::domain::workflow::ResultReport::incomplete(
                format!("An operator cancelled this child: {}", req.reason),
                "the work was stopped before it was finished",
                "cancelled by an operator",
            );
            let branch = crate::domain::worktree::WorktreeId::of(&w.session_key).branch();
            let new = super::results::NewResult {
                report: &report,
                incomplete: true,
                cancelled: true,
                branch: Some(&branch),
                by_task: None,
            };
            super::results::record(conn, &w, &new, limits, instance_id)?;
        } else {
            end(conn, &w, d.expected_version, state, code, None, None)?;
        }
        audit::record(
            conn,
            &Audit::new("workflow.cancel", &req.actor).meta(serde_json::json!({
                "workflowId": id, "reason": req.reason, "requestId": req.request_id,
                "decidedOnVersion": d.expected_version,
            })),
        )
    })
}

/// What answering a gate for the owner needs besides the request.
#[derive(Debug, Clone)]
pub struct GateAnswer<'a> {
    pub workflow_id: &'a WorkflowId,
    pub gate_id: &'a GateId,
    /// The Gitea namespace the continuation's delivery key is made in.
    pub instance_id: &'a str,
    pub limits: WorkflowLimits,
}

/// `POST /workflows/{id}/gates/{gateId}/resume`: an operator answers the
/// workflow's open gate on the owner's behalf, with the request's reason.
/// The workflow opens again, and a continuation due now carries the
/// reason to the agent (unless a continuation still runs: it carries the
/// work on when it ends).
pub fn resume_gate(
    conn: &mut DbConn,
    req: &ControlRequest,
    a: &GateAnswer<'_>,
) -> Result<AuditView, StoreError> {
    let target = format!("{}/{}", a.workflow_id, a.gate_id);
    idempotent(conn, req, "workflow.gate_resume", &target, |conn| {
        let w = workflow_or_404(conn, a.workflow_id)?;
        let gate = super::open_gate(conn, a.workflow_id)?;
        match gate {
            Some(g) if &g.gate_id == a.gate_id => {}
            _ => {
                let known: i64 = with_conn!(conn, |c| workflow_gates::table
                    .filter(workflow_gates::gate_id.eq(a.gate_id))
                    .filter(workflow_gates::workflow_id.eq(a.workflow_id))
                    .count()
                    .get_result(c))?;
                return Err(if known == 0 {
                    StoreError::NotFound(format!(
                        "gate {} of workflow {}",
                        a.gate_id, a.workflow_id
                    ))
                } else {
                    StoreError::Refused {
                        code: "gate_not_open",
                        message: format!(
                            "gate {} was answered or closed already; the workflow is `{}`",
                            a.gate_id, w.state
                        ),
                    }
                });
            }
        }
        let snap = snapshot(conn, &w, a.limits)?;
        let d = decide(&snap, WorkflowEvent::OperatorResume);
        match d.step {
            WorkflowStep::Resume => resume(conn, &w, d.expected_version, None, &req.actor)?,
            WorkflowStep::ResumeWith { seq } => {
                resume(conn, &w, d.expected_version, None, &req.actor)?;
                let after = last_input(conn, a.workflow_id)?;
                let text = format!(
                    "An operator answered the owner gate on the owner's behalf: {}\n\n\
                     {CONTINUATION_TEXT}",
                    req.reason
                );
                continue_with(
                    conn,
                    &w,
                    &ContinueWith {
                        version: d.expected_version + 1,
                        seq,
                        idle_finals: 0,
                        due_at: format_time(chrono::Utc::now()),
                        after: &after,
                        instance_id: a.instance_id,
                        text: &text,
                        why: "an operator answered the owner gate",
                    },
                )?;
            }
            _ => {
                return Err(not_applicable(
                    &w,
                    "only a workflow that waits for its owner resumes",
                ))
            }
        }
        audit::record(
            conn,
            &Audit::new("workflow.gate_resume", &req.actor).meta(serde_json::json!({
                "workflowId": a.workflow_id, "gateId": a.gate_id, "reason": req.reason,
                "requestId": req.request_id, "decidedOnVersion": d.expected_version,
            })),
        )
    })
}
