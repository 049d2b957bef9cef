//! `/interrupt` and `/replace`: stop the session's run, wait for it to
//! settle, then let the message start as a turn of its own before the queue.
//! The lane stops nothing itself: it commits the decision (the run to
//! `cancel_requested` with `superseded`, the message marked to go first) and
//! hands the stop to the running drive, as an operator's abort. It then waits
//! on the session's settle signal (sent when a drive ends), not a timer,
//! for at most the settle limit. The repository starts the message once it
//! is free (`store::queue` looks at such messages first); `/replace` drops
//! the stopped turn from the thread before its own turn starts
//! (`session::turn`).

pub mod decide;

use super::{ActorDeps, Signals};
use crate::domain::command::Command;
use crate::domain::states::SendMode;
use crate::domain::ResourceKey;
use crate::store::interrupt::{self, InterruptHead, Supersede};
use crate::store::steer::{self as steer_store, STALE};
use crate::store::StoreError;
use decide::{InterruptDecision, InterruptEvent, InterruptSnapshot, InterruptStep, RunFact};
use std::sync::Arc;

/// A decision found its facts moved this many times in a row: give up for
/// this pass (the next wake-up or sweep tries again).
const MAX_STALE_IN_A_ROW: u32 = 5;

/// What a pass did that the actor must follow up.
#[derive(Debug, Default)]
pub(super) struct InterruptPass {
    /// A message may start now, or is back in the queue: the repository
    /// looks again.
    pub wake_repo: bool,
    /// A permission could not be checked: run again later.
    pub retry_later: bool,
}

/// Carries the session's queued `/interrupt` and `/replace` as far as they
/// go now; waits for a stopped run to settle.
pub(super) async fn run(
    deps: Arc<ActorDeps>,
    session_key: ResourceKey,
    signals: Signals,
) -> Result<InterruptPass, StoreError> {
    let mut pass = InterruptPass::default();
    let mut stale_in_a_row = 0;
    let mut settled = signals.settled.subscribe();
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut event = InterruptEvent::Woken;
    loop {
        let key = session_key.clone();
        let Some(head) = deps
            .store
            .read(move |c| interrupt::next_interrupt(c, &key))
            .await?
        else {
            return Ok(pass);
        };
        let snap = snapshot(&deps, &head).await;
        let d = decide::decide(&snap, event);
        tracing::debug!(task.id = %head.task.task_id, decided_on = d.expected_version, step = ?d.step, "interrupt decision");
        event = InterruptEvent::Woken;
        match commit(&deps, &head, &snap, &d).await {
            Ok(()) => stale_in_a_row = 0,
            Err(StoreError::Refused {
                code: STALE,
                message,
            }) => {
                tracing::info!(task.id = %head.task.task_id, %message, "interrupt decision made on moved facts; deciding again");
                stale_in_a_row += 1;
                if stale_in_a_row >= MAX_STALE_IN_A_ROW {
                    return Ok(pass);
                }
                continue;
            }
            Err(e) => return Err(e),
        }
        match &d.step {
            InterruptStep::Supersede { run, .. } => {
                signals.stop_run(run);
                deadline = Some(tokio::time::Instant::now() + deps.settings.interrupt_settle);
            }
            InterruptStep::AwaitSettle => {
                // Also after a restart, which forgot when the stop was asked:
                // the limit counts from now then.
                let until = *deadline.get_or_insert_with(|| {
                    tokio::time::Instant::now() + deps.settings.interrupt_settle
                });
                if tokio::time::timeout_at(until, settled.changed())
                    .await
                    .is_err()
                {
                    event = InterruptEvent::SettleTimedOut;
                }
            }
            InterruptStep::Ready => {
                // Its turn is the repository's to start; nothing more to do here.
                pass.wake_repo = true;
                return Ok(pass);
            }
            InterruptStep::Demote(_) => {
                pass.wake_repo = true;
                deadline = None;
            }
            InterruptStep::Reject => deadline = None,
            InterruptStep::Nothing(decide::Idle::PermissionUnknown) => {
                pass.retry_later = true;
                return Ok(pass);
            }
            // An ordinary message now: the queue starts it in its order.
            InterruptStep::Nothing(_) => return Ok(pass),
        }
    }
}

async fn snapshot(deps: &ActorDeps, head: &InterruptHead) -> InterruptSnapshot {
    let permission = super::command::permission(deps, &head.task, "asked to interrupt").await;
    InterruptSnapshot {
        wants: match head.task.command {
            Some(Command::Replace) => SendMode::Replace,
            _ => SendMode::Interrupt,
        },
        state: head.task.state,
        state_version: head.task.state_version,
        entry_mode: head.entry.mode,
        entry_status: head.entry.status,
        auto_drain: head.entry.auto_drain,
        supersedes: head.entry.supersedes.clone(),
        permission,
        ready: deps.settings.agent.now().can_run(),
        run: head.run.as_ref().map(|t| RunFact {
            task_id: t.task_id.clone(),
            state: t.state,
            state_version: t.state_version,
            // The reply retry's turn only posts an answer again: not a run
            // a message may stop.
            turn_id: t.turn_id.clone().filter(|_| t.reply_attempt == 0),
            in_session_thread: t.command != Some(Command::Review),
        }),
    }
}

async fn commit(
    deps: &ActorDeps,
    head: &InterruptHead,
    snap: &InterruptSnapshot,
    d: &InterruptDecision,
) -> Result<(), StoreError> {
    let version = d.expected_version;
    let entry = head.entry.clone();
    match &d.step {
        InterruptStep::Nothing(_) | InterruptStep::AwaitSettle | InterruptStep::Ready => Ok(()),
        InterruptStep::Reject => {
            let task_id = head.task.task_id.clone();
            deps.store
                .write(move |c| steer_store::reject(c, &task_id, version))
                .await
        }
        InterruptStep::Supersede {
            run,
            run_version,
            revert_turn,
        } => {
            let w = Supersede {
                entry,
                version,
                mode: snap.wants,
                run: run.clone(),
                run_version: *run_version,
                revert_turn: revert_turn.clone(),
            };
            deps.store.write(move |c| interrupt::supersede(c, &w)).await
        }
        InterruptStep::Demote(why) => {
            tracing::info!(task.id = %head.task.task_id, why = why.as_str(), "the interrupting message goes back to the queue's order");
            let why = *why;
            deps.store
                .write(move |c| interrupt::demote(c, &entry, version, why.as_str()))
                .await
        }
    }
}
