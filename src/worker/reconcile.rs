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
use crate::worker_api::ReconcileRequest;
use anyhow::bail;
use secrecy::SecretString;
use std::path::Path;

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

/// Settles `s` on the server, then in the journal at `journal_path` (the
/// worker's `journal_url`).
pub fn reconcile(
    journal_path: &Path,
    server: &str,
    token: SecretString,
    s: &Settle,
) -> anyhow::Result<Settled> {
    let journal = Journal::open(journal_path)?;
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
            journal_path.display(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Nothing listens here: a test that reaches the server fails to.
    const NO_SERVER: &str = "http://127.0.0.1:1";

    fn settle(task: &str, attempt: &str) -> Settle {
        Settle {
            task_id: task.into(),
            attempt_id: attempt.into(),
            verdict: "failed".into(),
            operator: "alice".into(),
            reason: "checked".into(),
        }
    }

    fn token() -> SecretString {
        SecretString::from("cbw_test".to_owned())
    }

    #[test]
    fn only_an_uncertain_attempt_of_this_journal_reaches_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        {
            let j = Journal::open(&path).unwrap();
            j.turn_attempt("s1", "task-a", "att-a").unwrap();
            j.turn_sent("s1", "acme/w", "t1", "op1").unwrap();
            j.turn_attempt("s2", "task-b", "att-b").unwrap();
            j.turn_sent("s2", "acme/w", "t2", "op2").unwrap();
            j.turn_ended("s2", TurnState::Completed, Some("done"))
                .unwrap();
        }
        let unknown = reconcile(&path, NO_SERVER, token(), &settle("task-a", "att-x"))
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains("holds no turn") && unknown.contains("task-a att-a"),
            "names the attempts it does hold: {unknown}"
        );
        let ended = reconcile(&path, NO_SERVER, token(), &settle("task-b", "att-b"))
            .unwrap_err()
            .to_string();
        assert!(ended.contains("not uncertain"), "{ended}");
        // The server is asked first: unreachable, the journal stays.
        let unreachable = reconcile(&path, NO_SERVER, token(), &settle("task-a", "att-a"))
            .unwrap_err()
            .to_string();
        assert!(
            unreachable.contains("journal is unchanged"),
            "{unreachable}"
        );
        let j = Journal::open(&path).unwrap();
        assert_eq!(j.uncertain().unwrap().len(), 1);
    }
}
