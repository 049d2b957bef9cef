//! The rules the worker-call queries apply, pure: what a poll may take,
//! who may answer, where a batch of events goes, and what a waiting caller
//! learns.

use super::{CallState, Phase, Unmatched, WorkerCall};
use crate::agent::remote::hub::lost;
use crate::worker_api::{AttemptIdentity, CallBody, Event, Outcome};

/// The server attempt whose turn a call starts, if it starts one and names
/// it: once a worker is handed such a call the turn may run there, so the
/// attempt names that worker from delivery on, not only once its answer
/// arrives (an answer lost to a cut or a dying worker would otherwise
/// leave the attempt the server's, for any worker to reconcile).
pub fn starts_attempt(body: &CallBody) -> Option<&AttemptIdentity> {
    match body {
        CallBody::StartTurn { attempt, .. } | CallBody::StartReview { attempt, .. } => {
            attempt.as_ref()
        }
        _ => None,
    }
}

/// Whether a poll under a lease of the call's repository may take it: it
/// waits for a worker, its deadline (by the shared clock, `at`) is ahead,
/// and its caller still runs. A caller that died or gave up waits for
/// nothing: its session is recovered from the store, and the call must
/// not run.
pub fn claimable(call: &WorkerCall, repository: &str, at: &str, caller_alive: bool) -> bool {
    call.phase == Phase::Queued
        && call.repository == repository
        && call.deadline_at.as_str() > at
        && caller_alive
}

/// Whether the worker under `lease_id` may answer the call: only the lease
/// it was delivered under, and only once.
pub fn may_answer(call: &WorkerCall, lease_id: &str) -> bool {
    call.phase == Phase::Delivered && call.lease_id.as_deref() == Some(lease_id)
}

/// Whether the turn the call started still takes events from `lease_id`: a
/// stream of the lease it was delivered under, not failed, not lost.
pub fn stream_open(call: &WorkerCall, lease_id: &str) -> bool {
    call.stream
        && call.lease_id.as_deref() == Some(lease_id)
        && match call.phase {
            Phase::Delivered => true,
            Phase::Answered => matches!(call.outcome, Some(Outcome::Ok { .. })),
            Phase::Queued | Phase::Lost => false,
        }
}

/// Which events of a batch to add to a stream that holds `have` events
/// (`ended`: the last of them ended the turn), the batch's first event
/// being at place `first`: those past the ones held, up to the event that
/// ends the turn. A batch sent again adds nothing; one that leaves a gap is
/// refused (the worker sends in order, so a gap is a lost batch), and so is
/// anything new after the turn ended.
pub fn place(
    have: u64,
    ended: bool,
    first: u64,
    events: &[Event],
) -> Result<std::ops::Range<usize>, Unmatched> {
    if first > have {
        return Err(Unmatched::UnknownCall);
    }
    let skip = usize::try_from(have - first).unwrap_or(usize::MAX);
    if skip >= events.len() {
        return Ok(events.len()..events.len());
    }
    if ended {
        return Err(Unmatched::UnknownCall);
    }
    let end = events[skip..]
        .iter()
        .position(Event::ends_turn)
        .map_or(events.len(), |i| skip + i + 1);
    Ok(skip..end)
}

/// What a caller waiting for its call learns from it.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// No answer yet; wait on.
    Pending,
    /// Answered, or lost: the outcome.
    Settled(Outcome),
}

/// The caller's reading of its call, given whether the lease it was
/// delivered under is still held (`None`: the row is gone). A call
/// delivered under a lease that ended is uncertain at once: it may have
/// reached Codex, and no answer can come under that lease any more.
pub fn watch_verdict(call: Option<&WorkerCall>, lease_held: bool) -> Verdict {
    let Some(call) = call else {
        return Verdict::Settled(lost_outcome(
            &CallState::Delivered {
                lease_id: String::new(),
            },
            "the call is no longer in the store",
        ));
    };
    match (call.phase, &call.outcome) {
        (Phase::Answered | Phase::Lost, Some(o)) => Verdict::Settled(o.clone()),
        (Phase::Delivered, _) if !lease_held => Verdict::Settled(lost_outcome(
            &call.state(),
            "the worker's lease ended before it answered",
        )),
        (Phase::Answered | Phase::Lost, None) => Verdict::Settled(lost_outcome(
            &call.state(),
            "its answer was stored without an outcome",
        )),
        _ => Verdict::Pending,
    }
}

/// What a lost call means to its caller, as an answer.
pub fn lost_outcome(state: &CallState, why: &str) -> Outcome {
    crate::agent::remote::convert::error_to_wire(lost(state, why))
}
