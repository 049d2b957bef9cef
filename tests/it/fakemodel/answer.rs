//! How the fake model answers one request: the step's holes filled with
//! what the bridge put into the prompt, then the step as Server-Sent Events
//! in the shape Codex parses.

use super::*;

/// Replaces `hole` (`{{marker}}`, `{{result}}`) in a step's texts and call
/// arguments with what the bridge put into the prompt (as a real model would
/// copy it).
pub(super) fn fill(step: Step, hole: &str, marker: &str) -> Step {
    fn fill_value(v: Value, hole: &str, marker: &str) -> Value {
        match v {
            Value::String(s) => Value::String(s.replace(hole, marker)),
            Value::Array(a) => {
                Value::Array(a.into_iter().map(|x| fill_value(x, hole, marker)).collect())
            }
            Value::Object(o) => Value::Object(
                o.into_iter()
                    .map(|(k, x)| (k, fill_value(x, hole, marker)))
                    .collect(),
            ),
            other => other,
        }
    }
    match step {
        Step::Reply(items) => Step::Reply(
            items
                .into_iter()
                .map(|item| match item {
                    Item::Message { text, chunks } => Item::Message {
                        text: text.replace(hole, marker),
                        chunks,
                    },
                    Item::FunctionCall {
                        namespace,
                        name,
                        arguments,
                    } => Item::FunctionCall {
                        namespace,
                        name,
                        arguments: fill_value(arguments, hole, marker),
                    },
                    other => other,
                })
                .collect(),
        ),
        Step::Delayed(d, step) => Step::Delayed(d, Box::new(fill(*step, hole, marker))),
        Step::Gated(g, step) => Step::Gated(g, Box::new(fill(*step, hole, marker))),
        other => other,
    }
}

/// What a step waits for before its content: a delay, then gates.
#[derive(Default)]
pub(super) struct Pause {
    delay: Duration,
    gates: Vec<Gate>,
}

pub(super) async fn answer(
    state: &State,
    step: Step,
    tools: &[String],
    mut pause: Pause,
) -> HttpResponse {
    match step {
        Step::Delayed(more, step) => {
            pause.delay += more;
            Box::pin(answer(state, *step, tools, pause)).await
        }
        Step::Gated(gate, step) => {
            pause.gates.push(gate);
            Box::pin(answer(state, *step, tools, pause)).await
        }
        Step::HttpError { status, body } => {
            // The scripted delay is the slow model the test asked for.
            tokio::time::sleep(pause.delay).await;
            for gate in &pause.gates {
                gate.passed().await;
            }
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            HttpResponse::build(status).json(body)
        }
        step => sse(stream_of(state, step, tools, pause)),
    }
}

/// What an SSE body is made of.
enum Emit {
    Event(Bytes),
    Sleep(Duration),
    /// Wait until the gate is open.
    Wait(Gate),
    /// Stay open and silent for good.
    Hang,
}

fn event(name: &str, data: Value) -> Emit {
    Emit::Event(Bytes::from(format!("event: {name}\ndata: {data}\n\n")))
}

/// The events of a streamed step (anything but an HTTP error).
fn stream_of(state: &State, step: Step, tools: &[String], pause: Pause) -> Vec<Emit> {
    let resp_id = state.next_id("resp");
    let mut out = vec![event(
        "response.created",
        json!({"type": "response.created",
               "response": {"id": resp_id, "status": "in_progress"}}),
    )];
    if !pause.delay.is_zero() {
        out.push(Emit::Sleep(pause.delay));
    }
    out.extend(pause.gates.into_iter().map(Emit::Wait));
    match step {
        Step::Reply(items) => {
            for item in items {
                item_events(state, item, tools, &mut out);
            }
            out.push(event(
                "response.completed",
                json!({"type": "response.completed", "response": {
                    "id": resp_id,
                    "status": "completed",
                    "usage": {
                        "input_tokens": 10,
                        "input_tokens_details": {"cached_tokens": 0},
                        "output_tokens": 5,
                        "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": 15,
                    },
                }}),
            ));
        }
        Step::Failed { code, message } => out.push(event(
            "response.failed",
            json!({"type": "response.failed", "response": {
                "id": resp_id,
                "status": "failed",
                "error": {"code": code, "message": message},
            }}),
        )),
        Step::Hang => out.push(Emit::Hang),
        // Unwrapped by `answer` before a stream is built.
        Step::HttpError { .. } | Step::Delayed(..) | Step::Gated(..) => {
            unreachable!("fakemodel: {step:?} is not a stream")
        }
    }
    out
}

fn item_events(state: &State, item: Item, tools: &[String], out: &mut Vec<Emit>) {
    let done = match item {
        Item::Message { text, chunks } => {
            let id = state.next_id("msg");
            let skeleton = json!({"type": "message", "role": "assistant", "id": id, "content": []});
            out.push(event(
                "response.output_item.added",
                json!({"type": "response.output_item.added", "item": skeleton}),
            ));
            for delta in split_in(&text, chunks) {
                out.push(event(
                    "response.output_text.delta",
                    json!({"type": "response.output_text.delta", "item_id": id,
                           "output_index": 0, "content_index": 0, "delta": delta}),
                ));
            }
            let mut done = skeleton;
            done["content"] = json!([{"type": "output_text", "text": text, "annotations": []}]);
            out.push(event(
                "response.output_item.done",
                json!({"type": "response.output_item.done", "item": done}),
            ));
            return;
        }
        Item::Shell { cmd } => {
            let (name, arguments) = shell_call(&cmd, tools);
            function_call(state, None, &name, &arguments)
        }
        Item::FunctionCall {
            namespace,
            name,
            arguments,
        } => function_call(state, namespace.as_deref(), &name, &arguments),
        Item::ApplyPatch { patch } => json!({
            "type": "custom_tool_call",
            "id": state.next_id("ctc"),
            "call_id": state.next_id("call"),
            "name": "apply_patch",
            "status": "completed",
            "input": patch,
        }),
    };
    out.push(event(
        "response.output_item.added",
        json!({"type": "response.output_item.added", "item": done}),
    ));
    out.push(event(
        "response.output_item.done",
        json!({"type": "response.output_item.done", "item": done}),
    ));
}

fn function_call(state: &State, namespace: Option<&str>, name: &str, arguments: &Value) -> Value {
    let mut item = json!({
        "type": "function_call",
        "id": state.next_id("fc"),
        "call_id": state.next_id("call"),
        "name": name,
        "status": "completed",
        // The Responses API sends arguments as a JSON string.
        "arguments": match arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
    });
    if let Some(ns) = namespace {
        item["namespace"] = ns.into();
    }
    item
}

/// The shell tool Codex advertised and its arguments for `cmd`.
fn shell_call(cmd: &str, tools: &[String]) -> (String, Value) {
    let offered = |name: &str| tools.iter().any(|t| t == name);
    if offered("exec_command") {
        ("exec_command".into(), json!({"cmd": cmd}))
    } else if offered("shell_command") {
        ("shell_command".into(), json!({"command": cmd}))
    } else if offered("shell") {
        ("shell".into(), json!({"command": ["bash", "-lc", cmd]}))
    } else {
        panic!("fakemodel: Codex offered no shell tool; tools: {tools:?}")
    }
}

/// `text` in `n` nearly equal pieces (by characters); at least one piece.
fn split_in(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n.max(1)).max(1);
    let pieces: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
    if pieces.is_empty() {
        vec![String::new()]
    } else {
        pieces
    }
}

fn sse(emits: Vec<Emit>) -> HttpResponse {
    let body = futures_util::stream::unfold(emits.into_iter(), |mut emits| async move {
        loop {
            match emits.next()? {
                Emit::Event(bytes) => return Some((Ok::<_, Infallible>(bytes), emits)),
                // The script's pause between events: a slow stream on purpose.
                Emit::Sleep(d) => tokio::time::sleep(d).await,
                Emit::Wait(gate) => gate.passed().await,
                Emit::Hang => std::future::pending::<()>().await,
            }
        }
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(body)
}

/// `GET /v1/models`: no models (Codex falls back to built-in metadata).
pub(super) async fn models() -> HttpResponse {
    HttpResponse::Ok().json(json!({"object": "list", "data": [], "models": []}))
}

pub(super) async fn not_found(req: HttpRequest) -> HttpResponse {
    HttpResponse::NotFound().json(json!({"error": {
        "message": format!("fakemodel: no route {} {}", req.method(), req.path()),
        "type": "not_found",
    }}))
}
