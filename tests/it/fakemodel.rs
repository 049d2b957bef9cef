//! A fake OpenAI Responses API for the real `codex app-server`: `POST
//! /v1/responses` on 127.0.0.1:0, answered with Server-Sent Events in the
//! shape Codex parses, from a script of [`Step`]s (one per request; the
//! default step once the script runs out).
//!
//! - The stream: `response.created` (with a `response` object), then per
//!   output item `response.output_item.added` and `response.output_item.done`
//!   (a message also streams `response.output_text.delta` chunks in between),
//!   then `response.completed` with `{response: {id, usage}}`.
//! - Every request body is recorded as JSON ([`FakeModel::requests`]), so a
//!   test can assert what Codex sent: [`user_texts`], [`tool_names`] and
//!   [`tool_outputs`] dig out the usual parts.
//! - Faults: an HTTP error, `response.failed`, a delay, a gate the test
//!   opens, a hang.
//!
//! Codex points at it through `model_providers.<name>.base_url =
//! `[`FakeModel::base_url`] (see `codexhome.rs`). The server is actix-web in
//! its own thread with its own `System`, like `gitsim.rs`.

use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::convert::Infallible;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the model does for one request.
#[derive(Debug, Clone)]
pub enum Step {
    /// A normal response with these output items, in order.
    Reply(Vec<Item>),
    /// A plain HTTP error with this status and JSON body; no stream.
    HttpError { status: u16, body: Value },
    /// `response.created`, then `response.failed` with this error.
    Failed { code: String, message: String },
    /// The step, after a pause: for a stream the pause comes right after
    /// `response.created` (so Codex is mid-turn while it lasts), for an HTTP
    /// error before the answer.
    Delayed(Duration, Box<Step>),
    /// The step once the test opened the gate: `response.created` comes
    /// first, so Codex is mid-turn until then.
    Gated(Gate, Box<Step>),
    /// `response.created`, then silence with the stream open until the server
    /// stops. Codex gives up after `stream_idle_timeout_ms`.
    Hang,
}

/// A gate a [`Step::Gated`] waits at until the test opens it (once open it
/// stays open).
#[derive(Debug, Clone)]
pub struct Gate(Arc<tokio::sync::watch::Sender<bool>>);

impl Gate {
    pub fn new() -> Gate {
        Gate(Arc::new(tokio::sync::watch::channel(false).0))
    }

    pub fn open(&self) {
        self.0.send_replace(true);
    }

    async fn passed(&self) {
        let mut open = self.0.subscribe();
        // The sender lives in `self`: the wait ends only when it is opened.
        let _ = open.wait_for(|o| *o).await;
    }
}

/// One output item of a [`Step::Reply`].
#[derive(Debug, Clone)]
pub enum Item {
    /// An assistant message, streamed as `chunks` text deltas first.
    Message { text: String, chunks: usize },
    /// A shell command, as a call of whichever shell tool Codex advertised in
    /// the request (`exec_command {cmd}`, `shell_command {command}` or
    /// `shell {command: [argv]}`).
    Shell { cmd: String },
    /// A `function_call` verbatim. MCP tools are grouped by Codex in the
    /// namespace `mcp__<server>`.
    FunctionCall {
        namespace: Option<String>,
        name: String,
        arguments: Value,
    },
    /// A `custom_tool_call` of the freeform `apply_patch` tool (Codex offers
    /// it only for model slugs it knows).
    ApplyPatch { patch: String },
}

impl Step {
    /// An assistant message.
    pub fn message(text: &str) -> Step {
        Step::Reply(vec![Item::message(text)])
    }

    /// An assistant message streamed in `chunks` deltas.
    pub fn message_in_chunks(text: &str, chunks: usize) -> Step {
        Step::Reply(vec![Item::Message {
            text: text.to_owned(),
            chunks: chunks.max(1),
        }])
    }

    /// A shell command through Codex's shell tool.
    pub fn shell(cmd: &str) -> Step {
        Step::Reply(vec![Item::shell(cmd)])
    }

    /// A call of any function tool, `arguments` as JSON.
    pub fn function_call(name: &str, arguments: Value) -> Step {
        Step::Reply(vec![Item::FunctionCall {
            namespace: None,
            name: name.to_owned(),
            arguments,
        }])
    }

    /// A call of the tool `tool` of the MCP server configured as `server`.
    pub fn mcp(server: &str, tool: &str, arguments: Value) -> Step {
        Step::Reply(vec![Item::mcp(server, tool, arguments)])
    }

    /// An `apply_patch` call with a patch in Codex's format
    /// (`*** Begin Patch` … `*** End Patch`).
    pub fn apply_patch(patch: &str) -> Step {
        Step::Reply(vec![Item::ApplyPatch {
            patch: patch.to_owned(),
        }])
    }

    /// An HTTP error with an OpenAI-shaped error body.
    pub fn http_error(status: u16) -> Step {
        Step::HttpError {
            status,
            body: json!({"error": {
                "message": format!("fake model error {status}"),
                "type": "server_error",
                "code": null,
            }}),
        }
    }

    /// `response.failed` with `server_error` and this message.
    pub fn failed(message: &str) -> Step {
        Step::Failed {
            code: "server_error".into(),
            message: message.to_owned(),
        }
    }

    /// A stream that never completes.
    pub fn hang() -> Step {
        Step::Hang
    }

    /// This step after `delay`.
    pub fn delayed(self, delay: Duration) -> Step {
        Step::Delayed(delay, Box::new(self))
    }

    /// This step once `gate` is open.
    pub fn gated(self, gate: &Gate) -> Step {
        Step::Gated(gate.clone(), Box::new(self))
    }
}

impl Item {
    pub fn message(text: &str) -> Item {
        Item::Message {
            text: text.to_owned(),
            chunks: 1,
        }
    }

    pub fn shell(cmd: &str) -> Item {
        Item::Shell {
            cmd: cmd.to_owned(),
        }
    }

    pub fn mcp(server: &str, tool: &str, arguments: Value) -> Item {
        Item::FunctionCall {
            namespace: Some(format!("mcp__{server}")),
            name: tool.to_owned(),
            arguments,
        }
    }
}

/// One request as the counts of turns read it, kept when it arrives so
/// that counting never parses the bodies again.
#[derive(Debug, Clone)]
pub struct Asked {
    /// The comment its newest user input asks about (see [`newest_comment`]).
    pub newest: Option<String>,
    /// Its `x-codex-turn-metadata` header (JSON naming the Codex turn the
    /// request belongs to), if it had one.
    pub turn: Option<Value>,
}

impl Asked {
    /// The Codex turn it belongs to; a request without turn metadata is a
    /// turn of its own (`request-<i>`), so a missing header can only make a
    /// count larger.
    pub fn turn_id(&self, i: usize) -> String {
        self.turn
            .as_ref()
            .and_then(|m| m["turn_id"].as_str())
            .map_or_else(|| format!("request-{i}"), str::to_owned)
    }
}

struct State {
    script: Mutex<Script>,
    requests: Mutex<Vec<Value>>,
    /// Each request as a turn of Codex's, in the order of `requests`.
    asked: Mutex<Vec<Asked>>,
    /// Numbers the ids of responses, items and calls (`resp_1`, `call_2`, …).
    ids: AtomicU64,
}

struct Script {
    steps: VecDeque<Step>,
    default: Step,
    /// Scripts of their own for the requests whose user input holds a
    /// needle (one thread's, when threads run at once), first match first.
    routes: Vec<(String, VecDeque<Step>)>,
    /// The same, matched against the newest user input only (a thread's
    /// later requests repeat older inputs, which must not pick the script).
    newest_routes: Vec<(String, VecDeque<Step>)>,
}

impl Script {
    /// The step for a request with these user inputs: a script keyed by its
    /// newest input, else one keyed by any input, else the main script,
    /// else the default.
    fn next_step(&mut self, texts: &[String]) -> Step {
        let newest = texts.last().and_then(|last| {
            self.newest_routes
                .iter_mut()
                .find(|(needle, steps)| !steps.is_empty() && last.contains(needle.as_str()))
                .and_then(|(_, steps)| steps.pop_front())
        });
        if let Some(step) = newest {
            return step;
        }
        let routed = self
            .routes
            .iter_mut()
            .find(|(needle, _)| texts.iter().any(|t| t.contains(needle.as_str())));
        let next = match routed {
            Some((_, steps)) => steps.pop_front(),
            None => self.steps.pop_front(),
        };
        next.unwrap_or_else(|| self.default.clone())
    }
}

impl State {
    fn next_id(&self, prefix: &str) -> String {
        format!("{prefix}_{}", self.ids.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

/// A running fake model; stopped on drop (open streams are cut).
pub struct FakeModel {
    state: Arc<State>,
    server: crate::support::TestHttpServer,
}

impl FakeModel {
    /// Start a server with an empty script and the default step
    /// `Step::message("ok")`.
    pub fn start() -> FakeModel {
        let state = Arc::new(State {
            script: Mutex::new(Script {
                steps: VecDeque::new(),
                default: Step::message("ok"),
                routes: Vec::new(),
                newest_routes: Vec::new(),
            }),
            requests: Mutex::new(Vec::new()),
            asked: Mutex::new(Vec::new()),
            ids: AtomicU64::new(0),
        });
        let data = web::Data::from(state.clone());
        let server = crate::support::TestHttpServer::start("fakemodel", move |cfg| {
            cfg.app_data(data.clone())
                .app_data(web::PayloadConfig::new(64 << 20))
                .route("/v1/responses", web::post().to(responses))
                .route("/v1/models", web::get().to(models))
                .default_service(web::to(not_found));
        });
        FakeModel { state, server }
    }

    /// `http://127.0.0.1:PORT/v1`, the provider's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr)
    }

    /// Append a step to the script.
    pub fn push(&self, step: Step) {
        self.state.script.lock().unwrap().steps.push_back(step);
    }

    /// Append a step to the script of the requests whose user input holds
    /// `needle`: such a request takes its steps from there (the default
    /// once they are used up), never from the main script, so threads that
    /// run at once each follow their own.
    pub fn push_for(&self, needle: &str, step: Step) {
        let mut script = self.state.script.lock().unwrap();
        match script.routes.iter_mut().find(|(n, _)| n == needle) {
            Some((_, steps)) => steps.push_back(step),
            None => script
                .routes
                .push((needle.to_owned(), VecDeque::from([step]))),
        }
    }

    /// Append a step to the script of the requests whose newest user input
    /// holds `needle`; once those steps are used up such a request falls
    /// back to the other scripts.
    pub fn push_for_newest(&self, needle: &str, step: Step) {
        let mut script = self.state.script.lock().unwrap();
        match script.newest_routes.iter_mut().find(|(n, _)| n == needle) {
            Some((_, steps)) => steps.push_back(step),
            None => script
                .newest_routes
                .push((needle.to_owned(), VecDeque::from([step]))),
        }
    }

    /// The step for every request once the script is used up.
    pub fn set_default(&self, step: Step) {
        self.state.script.lock().unwrap().default = step;
    }

    /// The body of every `POST /v1/responses` so far, oldest first (a body
    /// that is not JSON is recorded as a string).
    pub fn requests(&self) -> Vec<Value> {
        self.state.requests.lock().unwrap().clone()
    }

    /// How many requests carry `needle` in their newest user input: how
    /// often a message was sent as new input (a thread's history repeats
    /// older inputs in later requests, so only the newest counts).
    pub fn asked(&self, needle: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| user_texts(r).last().is_some_and(|t| t.contains(needle)))
            .count()
    }

    /// Every request so far as a turn of Codex's, oldest first: to count
    /// the distinct turns a message was sent to as new input (one turn asks
    /// the model several times; later turns repeat the message in older
    /// input, or quote it among the thread's comments), over many messages
    /// at once and outside the model's lock.
    pub fn all_asked(&self) -> Vec<Asked> {
        self.state.asked.lock().unwrap().clone()
    }

    /// Wait until at least `n` requests arrived; their bodies. Panics after
    /// `timeout`.
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<Value> {
        let arrived = crate::support::poll_until(timeout, || self.requests().len() >= n);
        let seen = self.requests();
        assert!(
            arrived,
            "fakemodel: {} of {n} requests after {timeout:?}",
            seen.len()
        );
        seen
    }
}

/// The text of every user message in a request's `input`, oldest first
/// (Codex's own context messages, e.g. `<environment_context>`, included).
/// The comment the newest user input asks about: the text of its last
/// `<comment author="…">` element (the thread's other comments come as
/// `<thread-comment>` context).
fn newest_comment(body: &Value) -> Option<String> {
    let newest = user_texts(body).pop()?;
    let start = newest.rfind("<comment author=")?;
    let rest = &newest[start..];
    let end = rest.find("</comment>").unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

pub fn user_texts(body: &Value) -> Vec<String> {
    input_items(body)
        .filter(|i| i["type"] == "message" && i["role"] == "user")
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(str::to_owned))
        .collect()
}

/// The texts of the assistant's messages a request carries as history.
pub fn assistant_texts(body: &Value) -> Vec<String> {
    input_items(body)
        .filter(|i| i["type"] == "message" && i["role"] == "assistant")
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(str::to_owned))
        .collect()
}

/// The names of the tools a request offers the model; a tool inside a
/// namespace (MCP) as `namespace/name`.
pub fn tool_names(body: &Value) -> Vec<String> {
    let mut names = Vec::new();
    for tool in body["tools"].as_array().into_iter().flatten() {
        if let Some(inner) = tool["tools"].as_array() {
            let ns = tool["name"].as_str().unwrap_or_default();
            for t in inner {
                names.push(format!("{ns}/{}", t["name"].as_str().unwrap_or_default()));
            }
        } else if let Some(name) = tool["name"].as_str() {
            names.push(name.to_owned());
        }
    }
    names
}

/// `(call_id, output)` of every tool result a request sends back
/// (`function_call_output`, `custom_tool_call_output`); `output` as Codex
/// sent it (a string or a list of content parts).
pub fn tool_outputs(body: &Value) -> Vec<(String, Value)> {
    input_items(body)
        .filter(|i| {
            matches!(
                i["type"].as_str(),
                Some("function_call_output" | "custom_tool_call_output")
            )
        })
        .map(|i| {
            (
                i["call_id"].as_str().unwrap_or_default().to_owned(),
                i["output"].clone(),
            )
        })
        .collect()
}

fn input_items(body: &Value) -> impl Iterator<Item = &Value> {
    body["input"].as_array().into_iter().flatten()
}

/// `POST /v1/responses`: record the body, take the next step, answer it.
async fn responses(
    http: actix_web::HttpRequest,
    body: Bytes,
    state: web::Data<State>,
) -> HttpResponse {
    let request: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let tools = tool_names(&request);
    let texts = user_texts(&request);
    let metadata = http
        .headers()
        .get("x-codex-turn-metadata")
        .and_then(|v| serde_json::from_slice(v.as_bytes()).ok());
    {
        let asked = Asked {
            newest: newest_comment(&request),
            turn: metadata,
        };
        // One lock order for both lists, so their indexes stay paired.
        let mut requests = state.requests.lock().unwrap();
        state.asked.lock().unwrap().push(asked);
        requests.push(request);
    }
    let step = state.script.lock().unwrap().next_step(&texts);
    let marker = state
        .requests
        .lock()
        .unwrap()
        .last()
        .and_then(|r| {
            user_texts(r)
                .iter()
                .rev()
                .find_map(|t| find_marker(t).map(str::to_owned))
        })
        .unwrap_or_default();
    // A child's result id, as the model reads it from the bridge's newest
    // prompt that names one.
    let result = texts
        .iter()
        .rev()
        .find_map(|t| find_result_id(t))
        .unwrap_or_default();
    let step = fill(step, "{{result}}", &result);
    answer(
        &state,
        fill(step, "{{marker}}", &marker),
        &tools,
        Pause::default(),
    )
    .await
}

/// The first result id (`result-<32 hex>`) in a text.
fn find_result_id(text: &str) -> Option<String> {
    let at = text.find("\"result-")? + 1;
    let id = text.get(at..at + 39)?;
    id["result-".len()..]
        .bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then(|| id.to_owned())
}

/// The codex-bridge reply marker in a prompt, if any.
pub fn find_marker(text: &str) -> Option<&str> {
    let start = text.rfind("<!-- codex-bridge task=")?;
    let end = text[start..].find("-->")? + start + 3;
    Some(&text[start..end])
}

/// Replaces `hole` (`{{marker}}`, `{{result}}`) in a step's texts and call
/// arguments with what the bridge put into the prompt (as a real model would
/// copy it).
fn fill(step: Step, hole: &str, marker: &str) -> Step {
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
struct Pause {
    delay: Duration,
    gates: Vec<Gate>,
}

async fn answer(state: &State, step: Step, tools: &[String], mut pause: Pause) -> HttpResponse {
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
async fn models() -> HttpResponse {
    HttpResponse::Ok().json(json!({"object": "list", "data": [], "models": []}))
}

async fn not_found(req: HttpRequest) -> HttpResponse {
    HttpResponse::NotFound().json(json!({"error": {
        "message": format!("fakemodel: no route {} {}", req.method(), req.path()),
        "type": "not_found",
    }}))
}

/// `(event, data)` of every event in an SSE body.
#[cfg(test)]
fn parse_sse(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                }
            }
            assert_eq!(data["type"], name.as_str(), "{block}");
            (name, data)
        })
        .collect()
}

#[test]
fn fakemodel_plays_its_script_then_the_default() {
    let model = FakeModel::start();
    let url = format!("{}/responses", model.base_url());
    // (status, content type, body) of one request offering `tools`.
    let post = |tools: Value| {
        let body = json!({"model": "m", "tools": tools, "input": [
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call_output", "call_id": "call_0", "output": "out"},
        ]});
        let resp = match ureq::post(&url).send_json(body) {
            Ok(resp) => resp,
            Err(ureq::Error::Status(_, resp)) => resp,
            Err(e) => panic!("fakemodel: {e}"),
        };
        let status = resp.status();
        let content_type = resp.content_type().to_owned();
        (status, content_type, resp.into_string().unwrap())
    };
    let events_of = |tools: Value| {
        let (status, content_type, body) = post(tools);
        assert_eq!((status, content_type.as_str()), (200, "text/event-stream"));
        parse_sse(&body)
    };
    model.push(Step::Reply(vec![
        Item::Message {
            text: "héllo wörld".into(),
            chunks: 3,
        },
        Item::shell("echo hi"),
        Item::mcp("gitea", "create_comment", json!({"body": "x"})),
    ]));
    model.push(Step::function_call("update_plan", json!({"plan": []})));
    model.push(Step::mcp("gitea", "get_issue", json!({"index": 1})));
    model.push(Step::apply_patch("*** Begin Patch\n*** End Patch\n"));
    model.push(Step::http_error(503).delayed(Duration::from_millis(50)));
    model.push(Step::failed("boom"));
    model.push(Step::message("slow").delayed(Duration::from_millis(200)));
    model.set_default(Step::message("default"));

    let events = events_of(json!([{"type": "function", "name": "shell_command"}]));
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"response.created"));
    assert_eq!(names.last(), Some(&"response.completed"));
    let resp_id = &events[0].1["response"]["id"];
    assert_eq!(&events.last().unwrap().1["response"]["id"], resp_id);
    assert!(events.last().unwrap().1["response"]["usage"]["total_tokens"].is_u64());
    let deltas: Vec<&str> = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas.len(), 3);
    assert_eq!(deltas.concat(), "héllo wörld");
    let done: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "response.output_item.done")
        .map(|(_, d)| &d["item"])
        .collect();
    assert_eq!(done.len(), 3);
    assert_eq!(done[0]["content"][0]["text"], "héllo wörld");
    assert_eq!(done[1]["name"], "shell_command");
    assert_eq!(done[1]["arguments"], r#"{"command":"echo hi"}"#);
    assert_eq!(done[2]["namespace"], "mcp__gitea");
    assert_eq!(done[2]["name"], "create_comment");

    let events = events_of(json!([]));
    assert_eq!(events[1].1["item"]["name"], "update_plan");
    assert!(events[1].1["item"].get("namespace").is_none());

    let events = events_of(json!([]));
    assert_eq!(events[1].1["item"]["namespace"], "mcp__gitea");
    assert_eq!(events[1].1["item"]["arguments"], r#"{"index":1}"#);

    let events = events_of(json!([]));
    assert_eq!(events[1].1["item"]["type"], "custom_tool_call");
    assert_eq!(
        events[1].1["item"]["input"],
        "*** Begin Patch\n*** End Patch\n"
    );

    let started = std::time::Instant::now();
    let (status, _, body) = post(json!([]));
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(status, 503);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["type"], "server_error");

    let events = events_of(json!([]));
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["response.created", "response.failed"]);
    assert_eq!(events[1].1["response"]["error"]["message"], "boom");

    let started = std::time::Instant::now();
    let events = events_of(json!([]));
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(events.len(), 5);

    let events = events_of(json!([]));
    assert_eq!(events[3].1["item"]["content"][0]["text"], "default");

    let requests = model.wait_for_requests(8, Duration::from_secs(1));
    assert_eq!(requests.len(), 8);
    assert_eq!(user_texts(&requests[0]), ["hi"]);
    assert_eq!(tool_names(&requests[0]), ["shell_command"]);
    assert_eq!(
        tool_outputs(&requests[0]),
        [("call_0".to_owned(), json!("out"))]
    );
}

#[test]
fn fakemodel_hang_sends_created_then_nothing() {
    let model = FakeModel::start();
    model.set_default(Step::hang());
    let agent = ureq::AgentBuilder::new()
        .timeout_read(Duration::from_millis(300))
        .build();
    let resp = agent
        .post(&format!("{}/responses", model.base_url()))
        .send_json(json!({"input": []}))
        .unwrap();
    let mut reader = std::io::BufReader::new(resp.into_reader());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut reader, &mut first).unwrap();
    assert_eq!(first, "event: response.created\n");
    let mut rest = String::new();
    let err = std::io::Read::read_to_string(&mut reader, &mut rest).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    assert!(!rest.contains("response.completed"), "{rest}");
}
