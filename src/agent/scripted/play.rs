//! A scripted turn, played on its own like a Codex turn: its steps become
//! the turn's events, and its outcome is kept as the thread's history.

use super::{Inner, Step, Wire};
use crate::agent::{TurnEvent, TurnLookup};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc;

fn finish(inner: &Arc<Mutex<Inner>>, operation_id: &str, turn_id: &str, outcome: TurnLookup) {
    if let Ok(mut i) = inner.lock() {
        i.ends.push((turn_id.to_owned(), Instant::now()));
        i.remember(operation_id, outcome);
        i.live.remove(turn_id);
    }
}

/// Plays the script; runs on its own like a Codex turn.
pub(super) async fn play(
    inner: Arc<Mutex<Inner>>,
    steps: Vec<Step>,
    operation_id: String,
    turn_id: String,
    tx: mpsc::UnboundedSender<Wire>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    // Like Codex: the user message (with our operation id) is recorded first.
    let _ = tx.send(Wire::Event(TurnEvent::Delivered {
        seq: 0,
        client_id: Some(operation_id.clone()),
    }));
    let mut seq = 0;
    for step in steps {
        seq += 1;
        if stop.try_recv().is_ok() {
            break;
        }
        match step {
            Step::Progress(kind) => {
                let _ = tx.send(Wire::Event(TurnEvent::Progress {
                    seq,
                    kind: kind.to_owned(),
                }));
            }
            Step::Idle => {
                let _ = tx.send(Wire::Event(TurnEvent::Idle { seq }));
            }
            Step::Sleep(d) => {
                tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = &mut stop => break,
                }
            }
            Step::Complete(text) => {
                finish(
                    &inner,
                    &operation_id,
                    &turn_id,
                    TurnLookup::Completed {
                        turn_id: turn_id.clone(),
                        final_text: Some(text.clone()),
                    },
                );
                let _ = tx.send(Wire::Event(TurnEvent::Completed {
                    seq,
                    final_text: Some(text),
                }));
                return;
            }
            Step::Fail(error) => {
                finish(
                    &inner,
                    &operation_id,
                    &turn_id,
                    TurnLookup::Failed {
                        turn_id: turn_id.clone(),
                        error: error.clone(),
                        denial: None,
                    },
                );
                let _ = tx.send(Wire::Event(TurnEvent::Failed {
                    seq,
                    error,
                    denial: None,
                }));
                return;
            }
            Step::Hang => {
                let _ = (&mut stop).await;
                break;
            }
            Step::Stubborn => std::future::pending::<()>().await,
            Step::AskApproval(kind) => {
                let key = format!("approval-{}", uuid::Uuid::new_v4().simple());
                let (decided_tx, decided_rx) = tokio::sync::oneshot::channel();
                if let Ok(mut i) = inner.lock() {
                    i.approvals.insert(key.clone(), decided_tx);
                }
                let _ = tx.send(Wire::Event(TurnEvent::ApprovalRequested {
                    seq,
                    key,
                    kind: kind.to_owned(),
                    detail: serde_json::json!({ "command": "touch approved.txt", "cwd": ".", "reason": "scripted" }),
                }));
                tokio::select! {
                    _ = decided_rx => {}
                    _ = &mut stop => break,
                }
            }
            Step::CallTool(tool, arguments) => {
                let key = format!("tool-{}", uuid::Uuid::new_v4().simple());
                let (answered_tx, answered_rx) = tokio::sync::oneshot::channel();
                if let Ok(mut i) = inner.lock() {
                    i.tool_calls
                        .insert(key.clone(), ((*tool).to_owned(), answered_tx));
                }
                let _ = tx.send(Wire::Event(TurnEvent::ToolRequested {
                    seq,
                    key,
                    tool: tool.to_owned(),
                    arguments: arguments.clone(),
                }));
                tokio::select! {
                    _ = answered_rx => {}
                    _ = &mut stop => break,
                }
            }
            Step::PanicConsumer => {
                let _ = tx.send(Wire::Panic);
            }
            Step::DropStream => {
                let _ = tx.send(Wire::Drop);
            }
        }
    }
    // Stopped by `interrupt` (or the script ran out without an end).
    finish(
        &inner,
        &operation_id,
        &turn_id,
        TurnLookup::Interrupted {
            turn_id: turn_id.clone(),
        },
    );
    let _ = tx.send(Wire::Event(TurnEvent::Interrupted { seq: seq + 1 }));
}
