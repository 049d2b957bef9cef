//! The session's steer lane: a `/steer` at the head of the session's queue
//! joins the turn that runs now, through `turn/steer` naming that turn, and
//! never starts one. Each pass reads the head (`store::steer`), asks the
//! forge whether its commenter may trigger work, decides with the pure
//! [`decide::decide`], commits the decision by compare-and-swap, and carries
//! out its one effect: the steer, or the history lookup that settles an
//! uncertain one. A steer with no run to join stays in the queue, where the
//! repository starts it as a turn of its own when its turn comes.

pub mod decide;

use super::prompt::steer_prompt;
use super::ActorDeps;
use crate::agent::{AgentError, SteerRequest, TurnLookup};
use crate::domain::states::OutboxStatus;
use crate::domain::ResourceKey;
use crate::domain::TaskId;
use crate::store::models::OutboxEntry;
use crate::store::steer::{self, SteerHead, STALE};
use crate::store::StoreError;
use decide::{
    Found, Idle, Permission, Run, SteerAnswer, SteerDecision, SteerEvent, SteerSnapshot, SteerStep,
};
use std::sync::Arc;

/// A decision found its facts moved this many times in a row: give up for
/// this pass (the next wake-up or sweep tries again).
const MAX_STALE_IN_A_ROW: u32 = 5;

/// What a pass did that the actor must follow up.
#[derive(Debug, Default)]
pub(super) struct SteerPass {
    /// A steer went back to the queue: the repository may start it.
    pub released: bool,
    /// A permission could not be checked: run again later.
    pub retry_later: bool,
}

/// Carries the session's queued `/steer`s as far as they go now.
pub(super) async fn run(
    deps: Arc<ActorDeps>,
    session_key: ResourceKey,
) -> Result<SteerPass, StoreError> {
    let mut pass = SteerPass::default();
    let mut stale_in_a_row = 0;
    loop {
        let key = session_key.clone();
        let Some(head) = deps.store.read(move |c| steer::next_steer(c, &key)).await? else {
            return Ok(pass);
        };
        let permission = super::command::permission(&deps, &head.task, "asked to steer").await;
        let mut snap = snapshot(&head, permission);
        let mut event = SteerEvent::Woken;
        let mut entry = head.entry.clone();
        // One steer, decision by decision, until it rests.
        let outcome = loop {
            let d = decide::decide(&snap, &event);
            tracing::debug!(task.id = %head.task.task_id, decided_on = d.expected_version, step = ?d.step, "steer decision");
            match commit(&deps, &head, &mut entry, &d).await {
                Ok(()) => {}
                Err(StoreError::Refused {
                    code: STALE,
                    message,
                }) => {
                    tracing::info!(task.id = %head.task.task_id, %message, "steer decision made on moved facts; deciding again");
                    break Rested::Stale;
                }
                Err(e) => return Err(e),
            }
            match &d.step {
                SteerStep::Admit(run) => {
                    snap.entry_status = OutboxStatus::Sending;
                    snap.sent_thread = Some(run.thread_id.clone());
                    event = SteerEvent::Answered(send(&deps, &head, &entry, run).await);
                }
                SteerStep::LookUp { thread_id } => {
                    event = SteerEvent::History(look_up(&deps, thread_id, &entry).await);
                }
                SteerStep::Nothing(Idle::PermissionUnknown) => break Rested::RetryLater,
                SteerStep::Nothing(_) => break Rested::Waiting,
                SteerStep::Release => break Rested::Released,
                SteerStep::Accept { .. } | SteerStep::Reject | SteerStep::Hold(_) => {
                    break Rested::Settled
                }
            }
        };
        match outcome {
            Rested::Stale => {
                stale_in_a_row += 1;
                if stale_in_a_row >= MAX_STALE_IN_A_ROW {
                    return Ok(pass);
                }
            }
            Rested::RetryLater => {
                pass.retry_later = true;
                return Ok(pass);
            }
            // The head waits for the queue or a run; the next wake-up looks again.
            Rested::Waiting => return Ok(pass),
            Rested::Released => {
                pass.released = true;
                return Ok(pass);
            }
            Rested::Settled => stale_in_a_row = 0,
        }
    }
}

/// Where a steer's decisions stopped for this pass.
enum Rested {
    Stale,
    RetryLater,
    Waiting,
    Released,
    Settled,
}

fn snapshot(head: &SteerHead, permission: Permission) -> SteerSnapshot {
    SteerSnapshot {
        state: head.task.state,
        state_version: head.task.state_version,
        entry_status: head.entry.status,
        auto_drain: head.entry.auto_drain,
        sent_thread: head.sent_thread.clone(),
        head: head.head,
        run: head.run.as_ref().and_then(|t| {
            Some(Run {
                task_id: t.task_id.clone(),
                thread_id: t.thread_id.clone()?,
                turn_id: t.turn_id.clone()?,
            })
        }),
        refused_turn: head.refused_turn.clone(),
        permission,
    }
}

/// Commits a decision's writes (those that write anything).
async fn commit(
    deps: &ActorDeps,
    head: &SteerHead,
    entry: &mut OutboxEntry,
    d: &SteerDecision,
) -> Result<(), StoreError> {
    let version = d.expected_version;
    let e = entry.clone();
    match &d.step {
        SteerStep::Nothing(_) | SteerStep::LookUp { .. } => Ok(()),
        SteerStep::Reject => {
            let task_id = head.task.task_id.clone();
            deps.store
                .write(move |c| steer::reject(c, &task_id, version))
                .await
        }
        SteerStep::Admit(run) => {
            let (thread, turn) = (run.thread_id.clone(), run.turn_id.clone());
            deps.store
                .write(move |c| steer::admit(c, &e, version, &thread, &turn))
                .await?;
            entry.status = OutboxStatus::Sending;
            entry.version += 1;
            entry.expected_turn_id = Some(run.turn_id.clone());
            Ok(())
        }
        SteerStep::Accept { turn_id } => {
            let turn = turn_id.clone();
            let into: Option<TaskId> = deps
                .store
                .write(move |c| {
                    steer::accept(c, &e, version, &turn, super::command::answer::steered)
                })
                .await?;
            tracing::info!(task.id = %head.task.task_id, turn.id = %turn_id, steered_into = ?into, "steer joined the running turn");
            Ok(())
        }
        SteerStep::Release => {
            deps.store
                .write(move |c| steer::release(c, &e, version, "turn/steer joined no turn"))
                .await
        }
        SteerStep::Hold(reason) => {
            tracing::warn!(task.id = %head.task.task_id, reason = reason.as_str(), "steer held for an operator: nothing shows whether the running turn took it");
            let reason = *reason;
            deps.store
                .write(move |c| steer::hold(c, &e, version, reason.as_str()))
                .await
        }
    }
}

/// `turn/steer` into the run, and what its answer means.
async fn send(deps: &ActorDeps, head: &SteerHead, entry: &OutboxEntry, run: &Run) -> SteerAnswer {
    let prompt = steer_prompt(&head.task, entry);
    let answer = deps
        .runtime
        .steer_turn(SteerRequest {
            thread_id: run.thread_id.clone(),
            expected_turn_id: run.turn_id.clone(),
            operation_id: entry.operation_id.clone(),
            text: prompt.text(),
        })
        .await;
    match answer {
        Ok(turn_id) => SteerAnswer::Accepted { turn_id },
        Err(AgentError::Uncertain(e)) => {
            tracing::warn!(task.id = %head.task.task_id, error = %e, "turn/steer answer uncertain; looking in the thread's history");
            SteerAnswer::Uncertain
        }
        // An error answer (the turn ended, another turn runs) or nothing
        // sent at all: it joined nothing.
        Err(e) => {
            tracing::info!(task.id = %head.task.task_id, error = %e, "turn/steer joined no turn; the steer waits for a turn of its own");
            SteerAnswer::NotAdmitted
        }
    }
}

/// The steer's operation id in the history of the thread the ledger names.
/// What the thread's history says of the entry's operation (the steer lane's
/// and the handoff's lookup).
pub(super) async fn look_up(deps: &ActorDeps, thread_id: &str, entry: &OutboxEntry) -> Found {
    match deps
        .runtime
        .lookup_turn(thread_id, entry.operation_id.as_str())
        .await
    {
        Ok(TurnLookup::Missing) => Found::Missing,
        Ok(
            TurnLookup::Running { turn_id }
            | TurnLookup::Completed { turn_id, .. }
            | TurnLookup::Failed { turn_id, .. }
            | TurnLookup::Interrupted { turn_id },
        ) => Found::Turn { turn_id },
        Err(e) => {
            tracing::warn!(task.id = %entry.task_id, error = %e, "cannot read the thread's history for a held or sent message");
            Found::Unreadable
        }
    }
}
