//! `codex-bridge reconcile TASK_ID ATTEMPT_ID failed|succeeded
//! --confirm-no-active-turn --server URL --token-file FILE`, run on the
//! worker's machine with the worker's config: settles one attempt the
//! journal holds as uncertain. The server decides first (it moves the task
//! out of `needs_reconciliation`, audited); only then does the journal mark
//! the attempt's turns settled, so a refusal leaves both as they were. A
//! running worker holding for that turn takes leases again once the
//! journal has no uncertain turn left. Runs nothing again.

use super::client::{ClientError, ServerClient};
use super::journal::{is_uncertain, Journal, TurnState};
use crate::config::Config;
use crate::worker_api::ReconcileRequest;
use anyhow::bail;
use secrecy::SecretString;

/// What the operator decided, about which attempt.
#[derive(Debug, Clone)]
pub struct Settle {
    pub task_id: String,
    pub attempt_id: String,
    /// `failed` or `succeeded`.
    pub verdict: String,
    pub operator: String,
    pub reason: String,
}

/// What a reconciliation did.
#[derive(Debug)]
pub struct Settled {
    /// The server's audit event (`None`: the server had settled the
    /// attempt already, from its admin view or an earlier run).
    pub event: Option<serde_json::Value>,
    /// How many of the attempt's journalled turns were marked settled.
    pub turns: usize,
}

/// Settles `s` on the server, then in the journal.
pub fn reconcile(
    config: &Config,
    server: &str,
    token: SecretString,
    s: &Settle,
) -> anyhow::Result<Settled> {
    let journal = Journal::open(&config.journal_path)?;
    let turns = journal.attempt_turns(&s.task_id, &s.attempt_id)?;
    if turns.is_empty() {
        let held: Vec<String> = journal
            .uncertain()?
            .into_iter()
            .map(|u| match (u.task_id, u.attempt_id) {
                (Some(t), Some(a)) => format!("{t} {a}"),
                _ => format!("(operation {}, no attempt named)", u.operation_id),
            })
            .collect();
        bail!(
            "this worker's journal ({}) holds no turn of attempt {} of task {}: it did not run \
             here. Uncertain turns it holds: {}. An attempt run elsewhere is reconciled on the \
             server (codex-bridge reconcile without --server, or the admin view)",
            config.journal_path.display(),
            s.attempt_id,
            s.task_id,
            if held.is_empty() {
                "none".to_owned()
            } else {
                held.join(", ")
            }
        );
    }
    let uncertain = turns
        .iter()
        .any(|t| is_uncertain(&t.state) || t.state == TurnState::Settled.as_str());
    if !uncertain {
        let states: Vec<&str> = turns.iter().map(|t| t.state.as_str()).collect();
        bail!(
            "attempt {} of task {} is not uncertain on this worker: the journal holds its end \
             ({}), which the worker's outbox sends to the server; the server publishes it \
             without running the model again",
            s.attempt_id,
            s.task_id,
            states.join(", ")
        );
    }
    let req = ReconcileRequest {
        task_id: s.task_id.clone(),
        attempt_id: s.attempt_id.clone(),
        verdict: s.verdict.clone(),
        confirm_no_active_turn: true,
        operator: s.operator.clone(),
        reason: s.reason.clone(),
    };
    let event = match ServerClient::new(server, token).reconcile(&req) {
        Ok(event) => Some(event),
        Err(ClientError::Refused { code, .. }) if code == "already_reconciled" => None,
        Err(e) => bail!("{e}; the worker's journal is unchanged"),
    };
    let turns = journal.settle_attempt(&s.task_id, &s.attempt_id)?;
    tracing::warn!(
        task.id = %s.task_id,
        attempt.id = %s.attempt_id,
        verdict = %s.verdict,
        "an operator reconciled an uncertain attempt of this worker"
    );
    Ok(Settled { event, turns })
}
