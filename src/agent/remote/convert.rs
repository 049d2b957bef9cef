//! Between the agent runtime's types and the worker protocol's: the server
//! turns calls into [`CallBody`]s and answers back into results; the worker
//! does the reverse. Pure.

use crate::agent::transcript::{ItemBody, ItemPhase, TranscriptItem};
use crate::agent::{AgentError, Exchange, ThreadTerms, ToolAnswer, TurnEvent, TurnLookup};
use crate::worker_api::{self as wire, CallBody, Event, Lookup, Outcome, Value};

pub fn terms_to_wire(t: &ThreadTerms) -> wire::Terms {
    wire::Terms {
        policy: t.policy,
        base_instructions: t.base_instructions.clone(),
    }
}

pub fn terms_from_wire(t: wire::Terms) -> ThreadTerms {
    ThreadTerms {
        policy: t.policy,
        base_instructions: t.base_instructions,
    }
}

pub fn exchanges_to_wire(h: &[Exchange]) -> Vec<wire::Exchange> {
    h.iter()
        .map(|e| wire::Exchange {
            asked: e.asked.clone(),
            answered: e.answered.clone(),
        })
        .collect()
}

pub fn exchanges_from_wire(h: Vec<wire::Exchange>) -> Vec<Exchange> {
    h.into_iter()
        .map(|e| Exchange {
            asked: e.asked,
            answered: e.answered,
        })
        .collect()
}

pub fn tool_answer_body(key: &str, answer: &ToolAnswer) -> CallBody {
    CallBody::AnswerTool {
        key: key.to_owned(),
        success: answer.success,
        text: answer.text.clone(),
    }
}

/// An error as the wire carries it.
pub fn error_to_wire(e: AgentError) -> Outcome {
    match e {
        AgentError::Unavailable(message) => Outcome::Unavailable { message },
        AgentError::Uncertain(message) => Outcome::Uncertain { message },
        AgentError::Refused(message) => Outcome::Refused { message },
    }
}

/// An outcome as the runtime's result: the value, or the error on the same
/// side of the admission boundary.
pub fn outcome_to_result(o: Outcome) -> Result<Value, AgentError> {
    match o {
        Outcome::Ok { value } => Ok(value),
        Outcome::Unavailable { message } => Err(AgentError::Unavailable(message)),
        Outcome::Uncertain { message } => Err(AgentError::Uncertain(message)),
        Outcome::Refused { message } | Outcome::WorkspaceFailed { message, .. } => {
            Err(AgentError::Refused(message))
        }
    }
}

/// A value of the wrong kind for its call: the worker misbehaves, and the
/// call may have run, so the answer is uncertain.
pub fn unexpected(call: &str, value: &Value) -> AgentError {
    AgentError::Uncertain(format!(
        "the remote worker answered {call} with {value:?}; check that the worker runs the \
         server's version"
    ))
}

pub fn lookup_to_wire(l: TurnLookup) -> Lookup {
    match l {
        TurnLookup::Missing => Lookup::Missing,
        TurnLookup::Running { turn_id } => Lookup::Running { turn_id },
        TurnLookup::Completed {
            turn_id,
            final_text,
        } => Lookup::Completed {
            turn_id,
            final_text,
        },
        TurnLookup::Failed {
            turn_id,
            error,
            denial,
        } => Lookup::Failed {
            turn_id,
            error,
            denial,
        },
        TurnLookup::Interrupted { turn_id } => Lookup::Interrupted { turn_id },
    }
}

pub fn lookup_from_wire(l: Lookup) -> TurnLookup {
    match l {
        Lookup::Missing => TurnLookup::Missing,
        Lookup::Running { turn_id } => TurnLookup::Running { turn_id },
        Lookup::Completed {
            turn_id,
            final_text,
        } => TurnLookup::Completed {
            turn_id,
            final_text,
        },
        Lookup::Failed {
            turn_id,
            error,
            denial,
        } => TurnLookup::Failed {
            turn_id,
            error,
            denial,
        },
        Lookup::Interrupted { turn_id } => TurnLookup::Interrupted { turn_id },
    }
}

fn phase_to_wire(p: ItemPhase) -> wire::ItemPhase {
    match p {
        ItemPhase::Started => wire::ItemPhase::Started,
        ItemPhase::Completed => wire::ItemPhase::Completed,
    }
}

fn phase_from_wire(p: wire::ItemPhase) -> ItemPhase {
    match p {
        wire::ItemPhase::Started => ItemPhase::Started,
        wire::ItemPhase::Completed => ItemPhase::Completed,
    }
}

/// A transcript item as the wire carries it: cut first to what the
/// transcript keeps, so nothing the server would drop crosses the wire;
/// a body whose JSON is still above [`wire::MAX_ITEM_BYTES`] crosses as
/// its kind only, so the batch always fits the events route.
fn item_to_wire(seq: i64, phase: ItemPhase, item: TranscriptItem) -> Event {
    let item = item.bounded();
    let body = serde_json::to_string(&item.body)
        .ok()
        .filter(|json| json.len() <= wire::MAX_ITEM_BYTES)
        .and_then(|json| serde_json::from_str(&json).ok())
        .unwrap_or_else(|| serde_json::json!({"kind": "other", "itemType": item.body.kind()}));
    Event::Item {
        seq,
        phase: phase_to_wire(phase),
        item_id: item.item_id,
        status: item.status,
        body,
    }
}

/// An item body read back; one of a kind this server does not know (a
/// newer worker's) is kept by its kind only.
fn body_from_wire(body: serde_json::Value) -> ItemBody {
    match <ItemBody as serde::Deserialize>::deserialize(&body) {
        Ok(b) => b,
        Err(_) => ItemBody::Other {
            item_type: body
                .get("kind")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("unknown")
                .chars()
                .take(100)
                .collect(),
        },
    }
}

/// A turn's event as the worker sends it.
pub fn to_wire(e: TurnEvent) -> Event {
    match e {
        TurnEvent::Progress { seq, kind } => Event::Progress { seq, kind },
        TurnEvent::Delivered { seq, client_id } => Event::Delivered { seq, client_id },
        TurnEvent::Completed { seq, final_text } => Event::Completed { seq, final_text },
        TurnEvent::ToolCall {
            seq,
            phase,
            server,
            tool,
            arguments,
            status,
            error,
        } => Event::ToolCall {
            seq,
            phase,
            server,
            tool,
            arguments,
            status,
            error,
        },
        TurnEvent::Failed { seq, error, denial } => Event::Failed { seq, error, denial },
        TurnEvent::Interrupted { seq } => Event::Interrupted { seq },
        TurnEvent::Idle { seq } => Event::Idle { seq },
        TurnEvent::Active { seq } => Event::Active { seq },
        TurnEvent::ToolRequested {
            seq,
            key,
            tool,
            arguments,
        } => Event::ToolRequested {
            seq,
            key,
            tool,
            arguments,
        },
        TurnEvent::ApprovalRequested {
            seq,
            key,
            kind,
            detail,
        } => Event::ApprovalRequested {
            seq,
            key,
            kind,
            detail,
        },
        TurnEvent::Item { seq, phase, item } => item_to_wire(seq, phase, item),
        TurnEvent::TokenUsage { seq, start, end } => Event::TokenUsage { seq, start, end },
    }
}

/// A wire event as the session sees it (`None`: one it does not take).
pub fn from_wire(e: Event) -> Option<TurnEvent> {
    Some(match e {
        Event::Progress { seq, kind } => TurnEvent::Progress { seq, kind },
        Event::Delivered { seq, client_id } => TurnEvent::Delivered { seq, client_id },
        Event::Completed { seq, final_text } => TurnEvent::Completed { seq, final_text },
        Event::ToolCall {
            seq,
            phase,
            server,
            tool,
            arguments,
            status,
            error,
        } => TurnEvent::ToolCall {
            seq,
            phase,
            server,
            tool,
            arguments,
            status,
            error,
        },
        Event::Failed { seq, error, denial } => TurnEvent::Failed { seq, error, denial },
        Event::Interrupted { seq } => TurnEvent::Interrupted { seq },
        Event::Idle { seq } => TurnEvent::Idle { seq },
        Event::Active { seq } => TurnEvent::Active { seq },
        Event::ToolRequested {
            seq,
            key,
            tool,
            arguments,
        } => TurnEvent::ToolRequested {
            seq,
            key,
            tool,
            arguments,
        },
        Event::ApprovalRequested {
            seq,
            key,
            kind,
            detail,
        } => TurnEvent::ApprovalRequested {
            seq,
            key,
            kind,
            detail,
        },
        Event::Item {
            seq,
            phase,
            item_id,
            status,
            body,
        } => TurnEvent::Item {
            seq,
            phase: phase_from_wire(phase),
            item: TranscriptItem {
                item_id,
                status,
                body: body_from_wire(body),
            },
        },
        Event::TokenUsage { seq, start, end } => TurnEvent::TokenUsage { seq, start, end },
        Event::Other { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::transcript::{ItemStatus, TokenCounts};

    #[test]
    fn events_cross_the_wire_unchanged_and_errors_keep_their_side() {
        let events = vec![
            TurnEvent::Delivered {
                seq: 1,
                client_id: Some("op".into()),
            },
            TurnEvent::ApprovalRequested {
                seq: 2,
                key: "k".into(),
                kind: "command".into(),
                detail: serde_json::json!({"command": "ls"}),
            },
            TurnEvent::Item {
                seq: 3,
                phase: ItemPhase::Completed,
                item: TranscriptItem {
                    item_id: "cmd-1".into(),
                    status: ItemStatus::Failed,
                    body: ItemBody::CommandExecution {
                        command: "make".into(),
                        cwd: "/w".into(),
                        exit_code: Some(3),
                        duration_ms: Some(12),
                        output: Some("boom\n".into()),
                        output_bytes: 5,
                        output_truncated: false,
                    },
                },
            },
            TurnEvent::TokenUsage {
                seq: 4,
                start: TokenCounts {
                    total: 10,
                    ..TokenCounts::default()
                },
                end: TokenCounts {
                    input: 20,
                    cached_input: 1,
                    output: 5,
                    reasoning: 2,
                    total: 25,
                },
            },
            TurnEvent::Completed {
                seq: 5,
                final_text: Some("done".into()),
            },
        ];
        for e in events {
            assert_eq!(from_wire(to_wire(e.clone())), Some(e));
        }
        for e in [
            AgentError::Unavailable("a".into()),
            AgentError::Uncertain("b".into()),
            AgentError::Refused("c".into()),
        ] {
            assert_eq!(outcome_to_result(error_to_wire(e.clone())), Err(e));
        }
        let l = TurnLookup::Completed {
            turn_id: "u".into(),
            final_text: None,
        };
        assert_eq!(lookup_from_wire(lookup_to_wire(l.clone())), l);
    }

    #[test]
    fn an_item_crosses_cut_to_what_the_transcript_keeps_and_an_unknown_kind_by_its_kind() {
        let long = "x".repeat(crate::agent::transcript::TEXT_BYTES * 2);
        let item = TranscriptItem {
            item_id: "m".into(),
            status: ItemStatus::Completed,
            body: ItemBody::AgentMessage {
                text: long,
                truncated: false,
            },
        };
        let Some(TurnEvent::Item { item: back, .. }) = from_wire(to_wire(TurnEvent::Item {
            seq: 1,
            phase: ItemPhase::Completed,
            item: item.clone(),
        })) else {
            panic!("the item did not come back")
        };
        assert_eq!(back, item.bounded());
        let newer = Event::Item {
            seq: 2,
            phase: wire::ItemPhase::Started,
            item_id: "n".into(),
            status: ItemStatus::InProgress,
            body: serde_json::json!({"kind": "hologram", "beams": 3}),
        };
        let Some(TurnEvent::Item { item, .. }) = from_wire(newer) else {
            panic!("the item did not come back")
        };
        assert_eq!(
            item.body,
            ItemBody::Other {
                item_type: "hologram".into()
            }
        );
        // A diff of escapes, within the transcript's budget, is still
        // too much JSON for the wire: it crosses as its kind.
        let escapes = TranscriptItem {
            item_id: "f".into(),
            status: ItemStatus::Completed,
            body: ItemBody::FileChange {
                changes: vec![crate::agent::transcript::FileDiff::new(
                    "bin".into(),
                    crate::agent::transcript::ChangeKind::Add,
                    None,
                    "\u{1}".repeat(200_000),
                )],
            },
        };
        let Event::Item { body, .. } = to_wire(TurnEvent::Item {
            seq: 3,
            phase: ItemPhase::Completed,
            item: escapes,
        }) else {
            panic!("not an item")
        };
        assert_eq!(
            body_from_wire(body),
            ItemBody::Other {
                item_type: "fileChange".into()
            }
        );
        // An older worker's stand-in keeps its place and is not taken.
        assert_eq!(from_wire(Event::Other { seq: 4 }), None);
    }
}
