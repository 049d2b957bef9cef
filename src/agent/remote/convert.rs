//! Between the agent runtime's types and the worker protocol's: the server
//! turns calls into [`CallBody`]s and answers back into results; the worker
//! does the reverse. Pure.

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

/// A turn's event as the worker sends it. Transcript items and token counts
/// are not carried yet: they keep their place in the order as `other`.
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
        TurnEvent::Item { seq, .. } | TurnEvent::TokenUsage { seq, .. } => Event::Other { seq },
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
        Event::Other { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            TurnEvent::Completed {
                seq: 3,
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
}
