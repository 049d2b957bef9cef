//! "Stop and send now" of a held entry, carried out by its session: the
//! operator's request (`store::handoff::request`) pinned what the message
//! may have reached; this lane takes it through the durable phases: stop
//! the pinned run and wait for it to settle (on the drive's end, not a
//! timer), read the pinned thread's history, withdraw the ledger's claim
//! when the message is proven missing, and queue the entry again to start a
//! turn of its own. A restart continues from the phase last written (the
//! registry's sweep wakes sessions with a handoff under way).

pub mod decide;

use super::{ActorDeps, Signals};
use crate::domain::states::HandoffPhase;
use crate::domain::ResourceKey;
use crate::store::handoff::{self, HandoffHead};
use crate::store::steer::STALE;
use crate::store::StoreError;
use decide::{Claim, HandoffEvent, HandoffSnapshot, HandoffStep, Idle, RunFact};
use std::sync::Arc;

/// A decision found its facts moved this many times in a row: give up for
/// this pass (the next wake-up or sweep tries again).
const MAX_STALE_IN_A_ROW: u32 = 5;

/// What a pass did that the actor must follow up.
#[derive(Debug, Default)]
pub(super) struct HandoffPass {
    /// An entry is queued again: the repository looks.
    pub wake_repo: bool,
    /// A run did not settle or a history could not be read: later.
    pub retry_later: bool,
}

pub(super) async fn run(
    deps: Arc<ActorDeps>,
    session_key: ResourceKey,
    signals: Signals,
) -> Result<HandoffPass, StoreError> {
    let mut pass = HandoffPass::default();
    let mut stale_in_a_row = 0;
    let mut settled = signals.settled.subscribe();
    let mut event = HandoffEvent::Woken;
    loop {
        let key = session_key.clone();
        let Some(head) = deps
            .store
            .read(move |c| handoff::next_handoff(c, &key))
            .await?
        else {
            return Ok(pass);
        };
        let Some(phase) = head.entry.handoff_phase else {
            return Ok(pass);
        };
        let snap = snapshot(&head, phase, deps.settings.agent.now().can_run());
        let d = decide::decide(&snap, &event);
        tracing::debug!(task.id = %head.task.task_id, decided_on = d.expected_version, step = ?d.step, "handoff decision");
        event = HandoffEvent::Woken;
        match commit(&deps, &head, phase, &d.step).await {
            Ok(()) => stale_in_a_row = 0,
            Err(StoreError::Refused { code, message }) if code == STALE => {
                tracing::info!(task.id = %head.task.task_id, %message, "handoff decision made on moved facts; deciding again");
                stale_in_a_row += 1;
                if stale_in_a_row >= MAX_STALE_IN_A_ROW {
                    pass.retry_later = true;
                    return Ok(pass);
                }
                continue;
            }
            Err(e) => return Err(e),
        }
        match d.step {
            HandoffStep::Interrupt { stop, turn } => {
                if let Some((run, _)) = &stop {
                    signals.stop_run(run);
                }
                if let Some((thread, turn)) = turn {
                    // Best effort: a turn no drive of ours follows (its task
                    // waits for reconciliation) may still run in Codex.
                    // An interrupt Codex never answers waits no longer than
                    // the settle limit the phase waits next anyway.
                    let asked = tokio::time::timeout(
                        deps.settings.interrupt_settle,
                        deps.runtime.interrupt(&thread, &turn),
                    )
                    .await;
                    match asked {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::info!(task.id = %head.task.task_id, error = %e, "the pinned turn could not be interrupted (it may have ended)");
                        }
                        Err(_) => {
                            tracing::info!(task.id = %head.task.task_id, "the pinned turn's interrupt got no answer in time");
                        }
                    }
                }
            }
            HandoffStep::AwaitSettle => {
                let until = tokio::time::Instant::now() + deps.settings.interrupt_settle;
                if tokio::time::timeout_at(until, settled.changed())
                    .await
                    .is_err()
                {
                    event = HandoffEvent::SettleTimedOut;
                }
            }
            HandoffStep::LookUp { thread_id } => {
                let found = super::steer::look_up(&deps, &thread_id, &head.entry).await;
                event = HandoffEvent::History(found);
            }
            HandoffStep::Revoke | HandoffStep::KeepHeld { .. } => {}
            HandoffStep::Dedicate => pass.wake_repo = true,
            HandoffStep::Nothing(Idle::RetryLater) => {
                pass.retry_later = true;
                return Ok(pass);
            }
            HandoffStep::Nothing(Idle::Done) => return Ok(pass),
        }
    }
}

fn snapshot(head: &HandoffHead, phase: HandoffPhase, ready: bool) -> HandoffSnapshot {
    HandoffSnapshot {
        ready,
        phase,
        entry_version: head.entry.version,
        claim: match head.ledger.as_ref().map(|l| l.status.as_str()) {
            None => Claim::None,
            Some("sent") => Claim::Sent,
            Some(_) => Claim::Open,
        },
        pinned_thread: head.entry.handoff_thread_id.clone(),
        pinned_turn: head.entry.handoff_turn_id.clone(),
        run: head.run.as_ref().map(|t| RunFact {
            task_id: t.task_id.clone(),
            state: t.state,
            state_version: t.state_version,
        }),
    }
}

async fn commit(
    deps: &ActorDeps,
    head: &HandoffHead,
    phase: HandoffPhase,
    step: &HandoffStep,
) -> Result<(), StoreError> {
    let (entry, task) = (head.entry.clone(), head.task.clone());
    match step {
        HandoffStep::Interrupt { stop, .. } => {
            let stop = stop.clone();
            deps.store
                .write(move |c| {
                    handoff::interrupting(c, &entry, stop.as_ref().map(|(t, v)| (t, *v)))
                })
                .await
        }
        HandoffStep::Revoke => {
            let r = deps.store.write(move |c| handoff::revoke(c, &entry)).await;
            match r {
                // Sent meanwhile (a late echo): the next decision keeps it held.
                Err(StoreError::Refused {
                    code: "already_sent",
                    message,
                }) => Err(StoreError::Refused {
                    code: STALE,
                    message,
                }),
                other => other,
            }
        }
        HandoffStep::Dedicate => {
            deps.store
                .write(move |c| handoff::dedicate(c, &entry, &task))
                .await
        }
        HandoffStep::KeepHeld { reason, sent_in } => {
            let (reason, sent_in) = (reason.as_str(), sent_in.clone());
            deps.store
                .write(move |c| handoff::keep_held(c, &entry, phase, reason, sent_in.as_deref()))
                .await
        }
        HandoffStep::AwaitSettle | HandoffStep::LookUp { .. } | HandoffStep::Nothing(_) => Ok(()),
    }
}
