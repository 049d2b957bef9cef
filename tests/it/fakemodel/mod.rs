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

mod answer;
#[cfg(test)]
mod tests;

use answer::{answer, fill, models, not_found, Pause};
