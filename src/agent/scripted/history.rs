//! The scripted runtime's thread history kept in a file across process
//! restarts (directive mode, for the restart-recovery tests): what a lookup
//! by operation id answers, written whole after each change.

use super::TurnLookup;
use std::collections::HashMap;
use std::path::Path;

/// Writes the history to `file` (through a temporary file and a rename, so a
/// kill leaves the old or the new one, never half of one).
pub(super) fn save(file: &Path, history: &HashMap<String, TurnLookup>) {
    let entries: Vec<serde_json::Value> = history
        .iter()
        .map(|(op, h)| serde_json::json!({ "operationId": op, "lookup": lookup_to_json(h) }))
        .collect();
    let tmp = file.with_extension("tmp");
    let written = std::fs::write(&tmp, serde_json::Value::Array(entries).to_string())
        .and_then(|_| std::fs::rename(&tmp, file));
    if let Err(e) = written {
        tracing::warn!(error = %e, "scripted runtime could not persist its history");
    }
}

/// The history `file` holds (empty when there is none, or it is unreadable).
pub(super) fn load(file: &Path) -> HashMap<String, TurnLookup> {
    let mut history = HashMap::new();
    let Ok(text) = std::fs::read_to_string(file) else {
        return history;
    };
    if let Ok(serde_json::Value::Array(entries)) = serde_json::from_str(&text) {
        for e in entries {
            if let (Some(op), Some(h)) = (
                e.get("operationId").and_then(|o| o.as_str()),
                e.get("lookup").and_then(lookup_from_json),
            ) {
                history.insert(op.to_owned(), h);
            }
        }
    }
    history
}

fn lookup_to_json(h: &TurnLookup) -> serde_json::Value {
    match h {
        TurnLookup::Missing => serde_json::json!({ "kind": "missing" }),
        TurnLookup::Running { turn_id } => {
            serde_json::json!({ "kind": "running", "turnId": turn_id })
        }
        TurnLookup::Completed {
            turn_id,
            final_text,
        } => {
            serde_json::json!({ "kind": "completed", "turnId": turn_id, "finalText": final_text })
        }
        TurnLookup::Failed {
            turn_id,
            error,
            denial,
        } => {
            serde_json::json!({ "kind": "failed", "turnId": turn_id, "error": error, "denial": denial })
        }
        TurnLookup::Interrupted { turn_id } => {
            serde_json::json!({ "kind": "interrupted", "turnId": turn_id })
        }
    }
}

fn lookup_from_json(v: &serde_json::Value) -> Option<TurnLookup> {
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    Some(match v.get("kind")?.as_str()? {
        "missing" => TurnLookup::Missing,
        // A turn that was running when its process died is over: interrupted.
        "running" | "interrupted" => TurnLookup::Interrupted {
            turn_id: s("turnId")?,
        },
        "completed" => TurnLookup::Completed {
            turn_id: s("turnId")?,
            final_text: s("finalText"),
        },
        "failed" => TurnLookup::Failed {
            turn_id: s("turnId")?,
            error: s("error").unwrap_or_default(),
            denial: s("denial").and_then(|d| d.parse().ok()),
        },
        _ => return None,
    })
}
