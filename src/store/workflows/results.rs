//! Children's results in the store: a result is written once and never
//! changed; its delivery is bound to the parent workflow (and the parent's
//! turn) that asked for the child, and moves as
//! `domain::workflow::results::decide` says, by compare-and-swap on its
//! version, in the caller's transaction.

use super::{
    continue_with, end, find, hasten, last_input, resume, snapshot, ContinueWith, Workflow,
};
use crate::domain::workflow::decide::{self as flow, WorkflowEvent, WorkflowLimits, WorkflowStep};
use crate::domain::workflow::results::{
    decide, AckRefusal, DeliveryEvent, DeliverySnapshot, DeliveryState, DeliveryStep, ResultStatus,
};
use crate::domain::workflow::CONTINUATION_TEXT;
use crate::domain::workflow::{ResultReport, WorkflowState};
use crate::domain::{ResultId, TaskId, WorkflowId};
use crate::store::audit::{self, Audit};
use crate::store::schema::{result_deliveries, workflow_results};
use crate::store::steer::stale;
use crate::store::{now, DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;

/// `Refused { code: NOT_OPEN }`: the child has ended (its result, or its
/// `incomplete` one, was recorded): a late result is refused.
pub const CHILD_NOT_OPEN: &str = "child_not_open";

/// `Refused { code: ACK_REFUSED }`: the acknowledgement names a result that
/// is not this workflow's, or one never delivered to it.
pub const ACK_REFUSED: &str = "ack_refused";

#[derive(Queryable, Selectable, Debug, Clone, PartialEq)]
#[diesel(table_name = workflow_results)]
pub struct StoredResult {
    pub id: i64,
    pub result_id: ResultId,
    /// The child's workflow.
    pub workflow_id: WorkflowId,
    pub summary: String,
    files_changed: String,
    checks_run: String,
    risks: String,
    blockers: String,
    /// Written by the bridge for a child that never recorded one.
    pub incomplete: bool,
    /// The child's branch, where its commits are.
    pub branch: Option<String>,
    pub recorded_by_task: Option<TaskId>,
    pub created_at: String,
}

impl StoredResult {
    /// The result as the child reported it.
    pub fn report(&self) -> ResultReport {
        let list = |text: &str| serde_json::from_str::<Vec<String>>(text).unwrap_or_default();
        ResultReport {
            summary: self.summary.clone(),
            files_changed: list(&self.files_changed),
            checks_run: list(&self.checks_run),
            risks: list(&self.risks),
            blockers: list(&self.blockers),
        }
    }
}

#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq)]
#[diesel(table_name = result_deliveries)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    #[serde(skip)]
    pub id: i64,
    pub result_id: ResultId,
    /// The parent workflow it is bound to, for good.
    pub workflow_id: WorkflowId,
    /// The parent's task whose turn asked for the child.
    pub created_by_task: Option<TaskId>,
    pub state: DeliveryState,
    pub version: i64,
    /// Turns of the parent that carried it so far.
    pub deliveries: i64,
    pub carried_by_task: Option<TaskId>,
    pub acked_by_task: Option<TaskId>,
    pub created_at: String,
    pub updated_at: String,
    /// When a turn of the parent first carried it.
    pub delivered_at: Option<String>,
    pub acknowledged_at: Option<String>,
}

/// A result with its delivery, as the parent (and the admin view) sees it.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResultView {
    pub result_id: ResultId,
    /// The parent workflow its delivery is bound to.
    pub workflow_id: WorkflowId,
    pub child_workflow_id: WorkflowId,
    pub status: ResultStatus,
    pub delivered_at: Option<String>,
    pub acknowledged_at: Option<String>,
    pub incomplete: bool,
    pub branch: Option<String>,
    #[serde(flatten)]
    pub report: ResultReport,
    pub recorded_at: String,
    pub delivery: Delivery,
}

impl ResultView {
    fn of(r: StoredResult, d: Delivery) -> ResultView {
        ResultView {
            report: r.report(),
            result_id: r.result_id,
            workflow_id: d.workflow_id.clone(),
            child_workflow_id: r.workflow_id,
            status: ResultStatus::of(r.incomplete, d.state, d.delivered_at.is_some()),
            delivered_at: d.delivered_at.clone(),
            acknowledged_at: d.acknowledged_at.clone(),
            incomplete: r.incomplete,
            branch: r.branch,
            recorded_at: r.created_at,
            delivery: d,
        }
    }
}

/// What a child's result is recorded as.
#[derive(Debug, Clone)]
pub struct NewResult<'a> {
    pub report: &'a ResultReport,
    /// The bridge writes it for a child that exited without one.
    pub incomplete: bool,
    /// An operator cancelled the child: it ends `cancelled` (its result is
    /// incomplete).
    pub cancelled: bool,
    pub branch: Option<&'a str>,
    pub by_task: Option<&'a TaskId>,
}

/// Records the child's one result and ends the child (`completed`, or
/// `failed` for an `incomplete` one), queues its delivery to the parent
/// that asked for it (terminalised at once if that parent is no longer
/// open), and moves the parent as the result's arrival does ([`arrived`],
/// with the parent's `limits`; `instance_id` names its continuation), all in
/// the caller's transaction. A child that has ended refuses
/// (`CHILD_NOT_OPEN`): a result comes once.
pub fn record(
    conn: &mut DbConn,
    child: &Workflow,
    new: &NewResult<'_>,
    limits: WorkflowLimits,
    instance_id: &str,
) -> Result<ResultId, StoreError> {
    let Some(parent_id) = &child.parent_workflow_id else {
        return Err(StoreError::Refused {
            code: CHILD_NOT_OPEN,
            message: format!("workflow {} is not a child", child.workflow_id),
        });
    };
    if child.state.is_end() {
        return Err(StoreError::Refused {
            code: CHILD_NOT_OPEN,
            message: format!(
                "child workflow {} has ended ({}): its result was recorded already",
                child.workflow_id,
                child.state.as_str()
            ),
        });
    }
    let (state, code) = match (new.cancelled, new.incomplete) {
        (true, _) => (WorkflowState::Cancelled, "cancelled"),
        (false, true) => (WorkflowState::Failed, "incomplete"),
        (false, false) => (WorkflowState::Completed, "result_recorded"),
    };
    end(
        conn,
        child,
        child.version,
        state,
        code,
        Some(&new.report.summary),
        None,
    )?;
    let id = ResultId::mint();
    let at = now();
    let json = |v: &Vec<String>| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
    let r = new.report;
    with_conn!(conn, |c| diesel::insert_into(workflow_results::table)
        .values((
            workflow_results::result_id.eq(&id),
            workflow_results::workflow_id.eq(&child.workflow_id),
            workflow_results::summary.eq(&r.summary),
            workflow_results::files_changed.eq(json(&r.files_changed)),
            workflow_results::checks_run.eq(json(&r.checks_run)),
            workflow_results::risks.eq(json(&r.risks)),
            workflow_results::blockers.eq(json(&r.blockers)),
            workflow_results::incomplete.eq(new.incomplete || new.cancelled),
            workflow_results::branch.eq(new.branch),
            workflow_results::recorded_by_task.eq(new.by_task),
            workflow_results::created_at.eq(&at),
        ))
        .execute(c))?;
    let parent = find(conn, parent_id)?;
    let open = parent.as_ref().is_some_and(|p| !p.state.is_end());
    let delivery_state = match open {
        true => DeliveryState::Pending,
        false => DeliveryState::Terminalised,
    };
    with_conn!(conn, |c| diesel::insert_into(result_deliveries::table)
        .values((
            result_deliveries::result_id.eq(&id),
            result_deliveries::workflow_id.eq(parent_id),
            result_deliveries::created_by_task.eq(&child.created_by_task),
            result_deliveries::state.eq(delivery_state),
            result_deliveries::created_at.eq(&at),
            result_deliveries::updated_at.eq(&at),
        ))
        .execute(c))?;
    let mut event = Audit::new("workflow.result_recorded", "agent").meta(serde_json::json!({
        "resultId": id, "workflowId": child.workflow_id, "parent": parent_id,
        "incomplete": new.incomplete, "delivery": delivery_state,
    }));
    if let Some(t) = new.by_task {
        event = event.task(t);
    }
    audit::record(conn, &event)?;
    if open {
        arrived(conn, parent_id, limits, instance_id)?;
    }
    Ok(id)
}

/// A result of a child of workflow `parent` waits for it: the parent moves
/// as its decision on `ResultArrived` says — a continuation due now, a
/// pending one made due, a handoff's wait ended — in the caller's
/// transaction. A parent that waits for its owner or has ended does not
/// move (the result waits, or was terminalised).
pub fn arrived(
    conn: &mut DbConn,
    parent: &WorkflowId,
    limits: WorkflowLimits,
    instance_id: &str,
) -> Result<(), StoreError> {
    let Some(w) = find(conn, parent)? else {
        return Ok(());
    };
    let snap = snapshot(conn, &w, limits)?;
    let d = flow::decide(&snap, WorkflowEvent::ResultArrived);
    tracing::debug!(workflow.id = %w.workflow_id, decided_on = d.expected_version, step = ?d.step, "a child's result arrived");
    let (version, seq, idle_finals) = match d.step {
        WorkflowStep::Continue {
            seq, idle_finals, ..
        } => (d.expected_version, seq, idle_finals),
        WorkflowStep::ResumeWith { seq } => {
            resume(conn, &w, d.expected_version, None, "system")?;
            (d.expected_version + 1, seq, 0)
        }
        WorkflowStep::Resume => {
            return resume(conn, &w, d.expected_version, None, "system");
        }
        WorkflowStep::Hasten => return hasten(conn, &w),
        _ => return Ok(()),
    };
    let after = last_input(conn, &w.workflow_id)?;
    continue_with(
        conn,
        &w,
        &ContinueWith {
            version,
            seq,
            idle_finals,
            due_at: now(),
            after: &after,
            instance_id,
            text: CONTINUATION_TEXT,
            why: "a child's result arrived",
        },
    )?;
    Ok(())
}

/// The results bound to the workflow that it has not acknowledged, oldest
/// first, each moved to `delivered` by `task`'s turn, which carries them
/// (one carried before and not acknowledged is carried again: delivery is
/// at least once). In the transaction that records the turn's intent.
pub fn carry(
    conn: &mut DbConn,
    workflow: &Workflow,
    task: &TaskId,
) -> Result<Vec<ResultView>, StoreError> {
    let mut out = Vec::new();
    for (r, d) in unacknowledged(conn, &workflow.workflow_id)? {
        let step = decide(
            &DeliverySnapshot {
                state: d.state,
                version: d.version,
                parent: workflow.state,
            },
            DeliveryEvent::Carried,
        );
        let to = match step.step {
            DeliveryStep::To(to) => to,
            _ => d.state,
        };
        let at = move_to(conn, &d, step.expected_version, to)?;
        with_conn!(conn, |c| diesel::update(
            result_deliveries::table.filter(result_deliveries::id.eq(d.id))
        )
        .set((
            result_deliveries::deliveries.eq(d.deliveries + 1),
            result_deliveries::carried_by_task.eq(task),
            result_deliveries::delivered_at.eq(first_delivered(&d, &at, to)),
        ))
        .execute(c))?;
        if to == DeliveryState::Delivered {
            let d = Delivery {
                state: to,
                version: d.version + 1,
                deliveries: d.deliveries + 1,
                carried_by_task: Some(task.clone()),
                delivered_at: first_delivered(&d, &at, to),
                updated_at: at,
                ..d
            };
            out.push(ResultView::of(r, d));
        }
    }
    Ok(out)
}

/// What an acknowledgement came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acked {
    /// Acknowledged now.
    Now,
    /// It was already: nothing changed.
    Already,
}

/// `ack_result` of `result` by the workflow's `task`: acknowledged once; a
/// second time changes nothing; one not this workflow's, never delivered to
/// it or terminalised is refused (`ACK_REFUSED`).
pub fn ack(
    conn: &mut DbConn,
    workflow: &Workflow,
    result: &ResultId,
    task: &TaskId,
) -> Result<Acked, StoreError> {
    let d: Option<Delivery> = with_conn!(conn, |c| result_deliveries::table
        .filter(result_deliveries::result_id.eq(result))
        .select(Delivery::as_select())
        .first(c)
        .optional())?;
    let refuse = |why: AckRefusal| StoreError::Refused {
        code: ACK_REFUSED,
        message: match why {
            AckRefusal::NotYours => format!(
                "result {result} is not a result of workflow {}'s children",
                workflow.workflow_id
            ),
            AckRefusal::NotDelivered => format!(
                "result {result} was never delivered to workflow {}: read it first",
                workflow.workflow_id
            ),
            AckRefusal::Terminalised => {
                format!("result {result}'s delivery ended with the workflow it was bound to")
            }
        },
    };
    let Some(d) = d else {
        return Err(refuse(AckRefusal::NotYours));
    };
    let step = decide(
        &DeliverySnapshot {
            state: d.state,
            version: d.version,
            parent: workflow.state,
        },
        DeliveryEvent::Ack {
            bound: d.workflow_id == workflow.workflow_id,
        },
    );
    match step.step {
        DeliveryStep::To(to) => {
            let at = move_to(conn, &d, step.expected_version, to)?;
            with_conn!(conn, |c| diesel::update(
                result_deliveries::table.filter(result_deliveries::id.eq(d.id))
            )
            .set((
                result_deliveries::acked_by_task.eq(task),
                result_deliveries::acknowledged_at.eq(&at),
            ))
            .execute(c))?;
            audit::record(
                conn,
                &Audit::new("workflow.result_acknowledged", "agent")
                    .task(task)
                    .meta(serde_json::json!({
                        "resultId": result, "workflowId": workflow.workflow_id,
                        "decidedOnVersion": step.expected_version,
                    })),
            )?;
            Ok(Acked::Now)
        }
        DeliveryStep::AlreadyAcknowledged => Ok(Acked::Already),
        DeliveryStep::RefuseAck(why) => Err(refuse(why)),
        DeliveryStep::Nothing => Err(refuse(AckRefusal::NotDelivered)),
    }
}

/// When the delivery was first carried: kept once set, else now if this
/// carry delivered it.
fn first_delivered(d: &Delivery, at: &str, to: DeliveryState) -> Option<String> {
    d.delivered_at
        .clone()
        .or_else(|| (to == DeliveryState::Delivered).then(|| at.to_owned()))
}

/// Results of the workflow's children, with their deliveries, oldest first.
pub fn list(conn: &mut DbConn, workflow: &WorkflowId) -> Result<Vec<ResultView>, StoreError> {
    Ok(bound(conn, workflow, None)?
        .into_iter()
        .map(|(r, d)| ResultView::of(r, d))
        .collect())
}

/// Whether `task`'s turn brought its workflow a child's result it had not
/// been given before: the durable progress a continuation's final counts
/// as. A result carried again (not acknowledged yet, or after a restart) is
/// not news; a parent that keeps ignoring one is idle, and its count of
/// finals without progress goes on to the owner's gate instead of turning
/// the same result over at every continuation.
pub fn carried_by(conn: &mut DbConn, task: &TaskId) -> Result<bool, StoreError> {
    let n: i64 = with_conn!(conn, |c| result_deliveries::table
        .filter(result_deliveries::carried_by_task.eq(task))
        .filter(result_deliveries::deliveries.eq(1))
        .count()
        .get_result(c))?;
    Ok(n > 0)
}

/// Deliveries bound to the workflow that wait for a turn of it.
pub fn waiting(conn: &mut DbConn, workflow: &WorkflowId) -> Result<i64, StoreError> {
    Ok(with_conn!(conn, |c| result_deliveries::table
        .filter(result_deliveries::workflow_id.eq(workflow))
        .filter(result_deliveries::state.eq(DeliveryState::Pending))
        .count()
        .get_result(c))?)
}

/// The workflow ended, so nothing its children deliver goes anywhere: every
/// delivery bound to it that has not ended is terminalised (never moved to
/// another workflow), in the caller's transaction.
pub fn terminalise(conn: &mut DbConn, workflow: &WorkflowId) -> Result<(), StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        result_deliveries::table
            .filter(result_deliveries::workflow_id.eq(workflow))
            .filter(
                result_deliveries::state.eq_any([DeliveryState::Pending, DeliveryState::Delivered])
            )
    )
    .set((
        result_deliveries::state.eq(DeliveryState::Terminalised),
        result_deliveries::version.eq(result_deliveries::version + 1),
        result_deliveries::updated_at.eq(&at),
    ))
    .execute(c))?;
    if n > 0 {
        audit::record(
            conn,
            &Audit::new("workflow.deliveries_terminalised", "system")
                .meta(serde_json::json!({"workflowId": workflow, "deliveries": n})),
        )?;
    }
    Ok(())
}

/// What the reconciliation after a restart did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Delivered, not acknowledged: pending again.
    pub redelivered: usize,
    /// Bound to a workflow that ended.
    pub terminalised: usize,
    /// Workflows that have not ended with results pending: each open one
    /// (or waiting for a child) must have a turn coming that carries them;
    /// one waiting for its owner carries them after the answer.
    pub waiting: Vec<WorkflowId>,
}

/// After a restart, every delivery that has not ended is decided again
/// (`Restarted`): what was carried but not acknowledged may not have been
/// read, so it is pending again; one whose workflow ended is terminalised
/// (one waiting for its owner has not ended: its results wait with it). Idempotent: a second run finds nothing to change.
pub fn reconcile(conn: &mut DbConn) -> Result<Reconciled, StoreError> {
    let live: Vec<Delivery> =
        with_conn!(conn, |c| result_deliveries::table
            .filter(
                result_deliveries::state.eq_any([DeliveryState::Pending, DeliveryState::Delivered]),
            )
            .order(result_deliveries::id.asc())
            .select(Delivery::as_select())
            .load(c))?;
    let mut out = Reconciled::default();
    for d in live {
        let parent = find(conn, &d.workflow_id)?.map(|w| w.state);
        let step = decide(
            &DeliverySnapshot {
                state: d.state,
                version: d.version,
                // A workflow that is gone is as closed as one that ended.
                parent: parent.unwrap_or(WorkflowState::Cancelled),
            },
            DeliveryEvent::Restarted,
        );
        let to = match step.step {
            DeliveryStep::To(to) => to,
            _ => d.state,
        };
        if to != d.state {
            move_to(conn, &d, step.expected_version, to)?;
            match to {
                DeliveryState::Pending => out.redelivered += 1,
                DeliveryState::Terminalised => out.terminalised += 1,
                _ => {}
            }
        }
        if to == DeliveryState::Pending && !out.waiting.contains(&d.workflow_id) {
            out.waiting.push(d.workflow_id.clone());
        }
    }
    if out.redelivered + out.terminalised > 0 {
        audit::record(
            conn,
            &Audit::new("workflow.deliveries_reconciled", "system").meta(serde_json::json!({
                "redelivered": out.redelivered, "terminalised": out.terminalised,
            })),
        )?;
    }
    Ok(out)
}

/// The reconciliation after a restart, and each workflow it found with
/// results pending moved on as their arrival does (a continuation coming to
/// carry them). Idempotent.
pub fn after_restart(
    conn: &mut DbConn,
    limits: WorkflowLimits,
    instance_id: &str,
) -> Result<Reconciled, StoreError> {
    let out = reconcile(conn)?;
    for w in &out.waiting {
        arrived(conn, w, limits, instance_id)?;
    }
    Ok(out)
}

/// Moves the delivery to `to` by compare-and-swap on the version its
/// decision was made on (`Refused { STALE }` if it moved on, nothing
/// written); when it moved.
fn move_to(
    conn: &mut DbConn,
    d: &Delivery,
    version: i64,
    to: DeliveryState,
) -> Result<String, StoreError> {
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        result_deliveries::table
            .filter(result_deliveries::id.eq(d.id))
            .filter(result_deliveries::version.eq(version))
    )
    .set((
        result_deliveries::state.eq(to),
        result_deliveries::version.eq(version + 1),
        result_deliveries::updated_at.eq(&at),
    ))
    .execute(c))?;
    if n == 0 {
        return Err(stale(format!("the delivery of {} moved on", d.result_id)));
    }
    Ok(at)
}

/// The results bound to the workflow that are not acknowledged and not
/// terminalised, oldest first.
fn unacknowledged(
    conn: &mut DbConn,
    workflow: &WorkflowId,
) -> Result<Vec<(StoredResult, Delivery)>, StoreError> {
    bound(
        conn,
        workflow,
        Some(&[DeliveryState::Pending, DeliveryState::Delivered]),
    )
}

fn bound(
    conn: &mut DbConn,
    workflow: &WorkflowId,
    states: Option<&[DeliveryState]>,
) -> Result<Vec<(StoredResult, Delivery)>, StoreError> {
    let all: Vec<(StoredResult, Delivery)> = with_conn!(conn, |c| workflow_results::table
        .inner_join(
            result_deliveries::table
                .on(result_deliveries::result_id.eq(workflow_results::result_id)),
        )
        .filter(result_deliveries::workflow_id.eq(workflow))
        .order(result_deliveries::id.asc())
        .select((StoredResult::as_select(), Delivery::as_select()))
        .load(c))?;
    // A workflow has a handful of children: filtering here keeps one query
    // for both backends.
    Ok(all
        .into_iter()
        .filter(|(_, d)| states.is_none_or(|s| s.contains(&d.state)))
        .collect())
}
