//! A turn's final the server no longer follows: the lease it ran under
//! ended (a cut or a stop past the lease), so its event batch is refused.
//! The journal still holds the turn's durable end and the attempt it
//! belongs to; the worker offers that final to the server, which takes it
//! only if the task waits on that very attempt (`needs_reconciliation`),
//! and never runs the turn again.
//!
//! The task may not wait yet when the batch is refused (the server is
//! still looking the turn up in its history: `not_uncertain`), so the
//! final stays owed in the journal and is offered again on the worker's
//! heartbeat, at most once a heartbeat, until the server takes it or
//! refuses it for a reason that does not pass ([`after_offer`]). Each
//! answer is journalled and logged; the journal keeps the turn either way.

use super::client::ClientError;
use super::journal::{DurableFinal, Kind, OwedFinal, Standing};
use super::Worker;
use crate::worker_api::{EventBatch, LateFinalRequest};
use std::time::Duration;

/// Refusals that never pass: the attempt was settled otherwise, is not the
/// one the task waits on, is not this worker's to speak for, the task
/// ended, or the server has no such task or attempt.
const REFUSED_FOR_GOOD: &[&str] = &[
    "already_reconciled",
    "attempt_mismatch",
    "attempt_of_another_worker",
    "repository_not_allowed",
    "task_ended",
    "not_found",
    "invalid_task",
];

/// Whether a refused delivery leaves a final to offer: an event batch whose
/// stream the server no longer follows, because the lease it was sent
/// under ended or the call is gone. Other refusals (a revoked worker, a
/// batch out of order) are not the late final's to answer.
pub fn offers_final(kind: Kind, refused: &ClientError) -> bool {
    kind == Kind::Events
        && match refused {
            ClientError::LeaseLost => true,
            ClientError::Refused { code, .. } => code == "not_found",
            _ => false,
        }
}

/// How many refused streams the worker remembers, to say each once.
const REMEMBERED_STREAMS: usize = 64;

/// Whether `stream`'s refusal is news: `true` the first time a stream the
/// server no longer follows refuses a batch (its later batches are refused
/// for the same reason, and an operator needs the warning once, not once
/// per batch). Remembers the last [`REMEMBERED_STREAMS`] streams.
pub fn first_refusal(seen: &mut std::collections::VecDeque<String>, stream: &str) -> bool {
    if seen.iter().any(|s| s == stream) {
        return false;
    }
    if seen.len() == REMEMBERED_STREAMS {
        seen.pop_front();
    }
    seen.push_back(stream.to_owned());
    true
}

/// What the server's answer to one offer makes of the final: taken,
/// refused for good, or still open (not uncertain yet, the task changed
/// meanwhile, the server out of reach, a refusal this version does not
/// know): offered again.
pub fn after_offer(answer: &Result<(), ClientError>) -> Standing {
    match answer {
        Ok(()) => Standing::Taken,
        Err(ClientError::Refused { code, .. }) if REFUSED_FOR_GOOD.contains(&code.as_str()) => {
            Standing::Refused
        }
        Err(_) => Standing::Open,
    }
}

/// Whether an owed final is offered at `now`: only while open, and at most
/// once every `every` (a clock that went back offers at once rather than
/// wait for it to catch up).
pub fn offer_now(
    standing: Standing,
    offered_at: Option<chrono::DateTime<chrono::Utc>>,
    now: chrono::DateTime<chrono::Utc>,
    every: Duration,
) -> bool {
    if standing != Standing::Open {
        return false;
    }
    match offered_at {
        None => true,
        Some(at) => match (now - at).to_std() {
            Ok(since) => since >= every,
            Err(_) => true,
        },
    }
}

fn request(f: DurableFinal) -> LateFinalRequest {
    LateFinalRequest {
        task_id: f.task_id,
        attempt_id: f.attempt_id,
        turn_id: f.turn_id,
        final_text: f.final_text,
    }
}

impl Worker {
    /// An event batch of `body` was refused as no longer followed: said
    /// once per stream (a warning for its first refused batch, the rest at
    /// debug level), and the final of its turn, if the journal holds one,
    /// is owed from now on and offered at once.
    pub(super) async fn stream_refused(&self, body: &str, e: &ClientError) {
        let Ok(batch) = serde_json::from_str::<EventBatch>(body) else {
            tracing::warn!(error = %e, "the server no longer waits for this; it stays in the journal");
            return;
        };
        let stream = batch.stream;
        let first = match self.refused_streams.lock() {
            Ok(mut seen) => first_refusal(&mut seen, &stream),
            Err(_) => true,
        };
        if first {
            tracing::warn!(stream, error = %e, "the server no longer follows this turn's events; they stay in the journal, and its final is offered on its own");
        } else {
            tracing::debug!(stream, error = %e, "another event batch of a turn the server no longer follows");
        }
        self.final_owed(&stream).await;
    }

    /// `stream`'s final, if the journal holds one, is owed from now on and
    /// offered at once.
    async fn final_owed(&self, stream: &str) {
        match self.journal.durable_final(stream) {
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(stream, error = %e, "cannot read the turn's end from the journal");
                return;
            }
        }
        if let Err(e) = self.journal.final_owed(stream) {
            tracing::error!(stream, error = %e, "the journal did not take an owed final; it is not offered");
            return;
        }
        self.offer_final(stream).await;
    }

    /// Offers every owed final still open whose turn is due (see
    /// [`offer_now`]); run on each heartbeat.
    pub(super) async fn offer_open_finals(&self) {
        let open = match self.journal.open_finals() {
            Ok(open) => open,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the owed finals from the journal");
                return;
            }
        };
        for owed in open {
            if self.stopping() {
                return;
            }
            self.offer_final(&owed.stream).await;
        }
    }

    /// Offers the owed final of `stream` once, if it is due, and journals
    /// the answer. One offer at a time: the check and the offer it allows
    /// are not split by another.
    async fn offer_final(&self, stream: &str) {
        let _one = self.offering.lock().await;
        let owed: OwedFinal = match self.journal.owed_final(stream) {
            Ok(Some(o)) => o,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(stream, error = %e, "cannot read an owed final from the journal");
                return;
            }
        };
        if !offer_now(
            owed.standing,
            owed.offered_at,
            chrono::Utc::now(),
            super::HEARTBEAT,
        ) {
            return;
        }
        let found = match self.journal.durable_final(stream) {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(stream, error = %e, "cannot read the turn's end from the journal");
                return;
            }
        };
        if let Err(e) = self.journal.final_offered(stream) {
            tracing::error!(stream, error = %e, "the journal did not take an offer; it is not sent");
            return;
        }
        let req = request(found);
        let r = req.clone();
        let answer = self.blocking(move |c| c.late_final(&r).map(|_| ())).await;
        if let Err(e) = &answer {
            self.fail(e);
        }
        let standing = after_offer(&answer);
        let code = match &answer {
            Err(ClientError::Refused { code, .. }) => Some(code.as_str()),
            _ => None,
        };
        if let Err(e) = self.journal.final_answered(stream, standing, code) {
            tracing::error!(stream, error = %e, "the journal did not take the server's answer to an offered final");
        }
        let (task, attempt, offers) = (&req.task_id, &req.attempt_id, owed.offers + 1);
        match (&answer, standing) {
            (Ok(()), _) => {
                tracing::info!(task.id = %task, attempt.id = %attempt, offers, "the server took the turn's late final");
            }
            (Err(e), Standing::Refused) => {
                tracing::warn!(task.id = %task, attempt.id = %attempt, offers, error = %e, "the server refused the turn's late final for good; it is not offered again, and the journal keeps the turn");
            }
            (Err(e), _) => {
                tracing::info!(task.id = %task, attempt.id = %attempt, offers, error = %e, "the server did not take the turn's late final yet; it is offered again on a later heartbeat");
            }
        }
    }
}

#[cfg(test)]
mod tests;
