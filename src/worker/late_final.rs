//! A turn's final the server no longer follows: the lease it ran under
//! ended (a cut or a stop past the lease), so its event batch is refused.
//! The journal still holds the turn's durable end and the attempt it
//! belongs to; the worker offers that final to the server, which takes it
//! only if the task waits on that very attempt (`needs_reconciliation`),
//! and never runs the turn again. Anything else the server refuses, with
//! its reason logged here; the journal keeps the turn either way.

use super::client::ClientError;
use super::journal::{DurableFinal, Kind};
use super::Worker;
use crate::worker_api::{EventBatch, LateFinalRequest};

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

fn request(f: DurableFinal) -> LateFinalRequest {
    LateFinalRequest {
        task_id: f.task_id,
        attempt_id: f.attempt_id,
        turn_id: f.turn_id,
        final_text: f.final_text,
    }
}

impl Worker {
    /// Offers the durable final of the refused batch's turn, if the journal
    /// holds one; retried while the server cannot be reached.
    pub(super) async fn offer_final(&self, body: &str) {
        let Ok(batch) = serde_json::from_str::<EventBatch>(body) else {
            return;
        };
        let found = match self.journal.durable_final(&batch.stream) {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(stream = %batch.stream, error = %e, "cannot read the turn's end from the journal");
                return;
            }
        };
        let req = request(found);
        loop {
            let r = req.clone();
            match self.blocking(move |c| c.late_final(&r)).await {
                Ok(_) => {
                    tracing::info!(task.id = %req.task_id, attempt.id = %req.attempt_id, "the server took the turn's late final");
                    return;
                }
                Err(ClientError::Transport(e)) if !self.stopping() => {
                    tracing::warn!(error = %e, "cannot offer the turn's late final yet; trying again");
                    tokio::time::sleep(super::BACKOFF).await;
                }
                Err(e) => {
                    self.fail(&e);
                    tracing::warn!(task.id = %req.task_id, attempt.id = %req.attempt_id, error = %e, "the server did not take the turn's late final; the journal keeps it");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refused_event_batch_of_a_stream_no_longer_followed_offers_its_final() {
        let not_found = ClientError::Refused {
            code: "not_found".into(),
            message: String::new(),
        };
        let other = ClientError::Refused {
            code: "bad_request".into(),
            message: String::new(),
        };
        assert!(offers_final(Kind::Events, &ClientError::LeaseLost));
        assert!(offers_final(Kind::Events, &not_found));
        assert!(!offers_final(Kind::Answer, &ClientError::LeaseLost));
        assert!(!offers_final(Kind::Events, &other));
        assert!(!offers_final(Kind::Events, &ClientError::Revoked));
        assert!(!offers_final(
            Kind::Events,
            &ClientError::Transport(String::new())
        ));
    }
}
