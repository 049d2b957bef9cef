//! Smoke tests of the test ground itself: the real `codex app-server` (pinned
//! by `scripts/ensure-codex`) against [`FakeModel`], driven by a tiny
//! JSON-lines client written here, so that what the production client relies
//! on is checked against the binary itself: handshake, thread, turn events,
//! `clientUserMessageId` echoed as `clientId` live and in history, model
//! faults failing a turn (and the thread going on), shell and `apply_patch`
//! items, and `turn/interrupt` ending a turn whose model stream hangs.
//!
//! Observed with 0.171.0: under `approvalPolicy: "never"` and a read-only
//! sandbox, a command the sandbox refuses (a write) sends no
//! `commandExecution` item at all; only the model sees its output. A command
//! that merely fails (exit 1) does get an item, with `status: "failed"`.

use crate::codexhome::CodexHome;
use crate::fakemodel::{self, FakeModel, Step};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long any one exchange may take; a trivial turn takes ~0.2 s.
const DEADLINE: Duration = Duration::from_secs(30);

/// One `codex app-server` over stdio. Requests get ids from 1; server
/// requests nobody expects are answered with an error at once, so nothing
/// waits forever; every notification is kept in `notifications`.
struct AppServer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    next_id: u64,
    notifications: Vec<Value>,
    /// Everything codex wrote to stderr, for failure messages.
    stderr: Arc<Mutex<String>>,
}

impl AppServer {
    fn spawn(home: &CodexHome) -> AppServer {
        let mut child = home.app_server().spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let msg = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("codex wrote a line that is not JSON ({e}): {line}")
                });
                if tx.send(msg).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let stdin = child.stdin.take();
        AppServer {
            child,
            stdin,
            lines,
            next_id: 1,
            notifications: Vec::new(),
            stderr,
        }
    }

    fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message that is not a server request (those are refused here).
    fn next(&mut self, deadline: Instant, waiting_for: &str) -> Value {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = match self.lines.recv_timeout(left) {
                Ok(msg) => msg,
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("timed out waiting for {waiting_for}"))
                }
                Err(RecvTimeoutError::Disconnected) => self.fail(&format!(
                    "codex closed stdout while waiting for {waiting_for}"
                )),
            };
            if msg.get("method").is_some() && msg.get("id").is_some() {
                let id = msg["id"].clone();
                self.send(&json!({"id": id, "error": {
                    "code": -32601,
                    "message": format!("the smoke test does not answer {}", msg["method"]),
                }}));
                self.notifications.push(msg);
                continue;
            }
            return msg;
        }
    }

    /// Send a request and wait for its answer: `Ok(result)` or `Err(error)`.
    fn request(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"id": id, "method": method, "params": params}));
        let deadline = Instant::now() + DEADLINE;
        loop {
            let msg = self.next(deadline, &format!("the answer to {method}"));
            if msg.get("id") == Some(&json!(id)) {
                return match msg.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(msg["result"].clone()),
                };
            }
            self.notifications.push(msg);
        }
    }

    fn notify(&mut self, method: &str) {
        self.send(&json!({"method": method}));
    }

    /// The first notification (kept or new) for which `pred` holds.
    fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(found) = self.notifications.iter().find(|n| pred(n)) {
            return found.clone();
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            let msg = self.next(deadline, what);
            self.notifications.push(msg.clone());
            if pred(&msg) {
                return msg;
            }
        }
    }

    /// `params.item` of every `item/completed` of `turn_id` so far.
    fn completed_items(&self, turn_id: &str) -> Vec<Value> {
        self.notifications
            .iter()
            .filter(|n| n["method"] == "item/completed" && n["params"]["turnId"] == turn_id)
            .map(|n| n["params"]["item"].clone())
            .collect()
    }

    /// `initialize` and `initialized`.
    fn handshake(&mut self) -> Value {
        let init = self
            .request(
                "initialize",
                json!({"clientInfo": {"name": "codex_bridge_smoke", "title": "codex-bridge smoke test", "version": "0.1.0"}}),
            )
            .unwrap_or_else(|e| self.fail(&format!("initialize failed: {e}")));
        self.notify("initialized");
        init
    }

    /// `thread/start` in `cwd` without approvals, read-only; the thread id.
    fn start_thread(&mut self, cwd: &std::path::Path) -> String {
        let started = self
            .request(
                "thread/start",
                json!({"cwd": cwd, "approvalPolicy": "never", "sandbox": "read-only"}),
            )
            .unwrap_or_else(|e| self.fail(&format!("thread/start failed: {e}")));
        started["thread"]["id"].as_str().unwrap().to_owned()
    }

    /// `turn/start` with one text input; the turn id.
    fn start_turn(&mut self, thread_id: &str, text: &str, client_id: &str) -> String {
        let started = self
            .request(
                "turn/start",
                json!({
                    "threadId": thread_id,
                    "input": [{"type": "text", "text": text, "text_elements": []}],
                    "clientUserMessageId": client_id,
                }),
            )
            .unwrap_or_else(|e| self.fail(&format!("turn/start failed: {e}")));
        assert_eq!(started["turn"]["status"], "inProgress", "{started}");
        started["turn"]["id"].as_str().unwrap().to_owned()
    }

    /// `params.turn` of the `turn/completed` of `turn_id`.
    fn wait_turn_completed(&mut self, turn_id: &str) -> Value {
        let done = self.wait_for(&format!("turn/completed of {turn_id}"), |n| {
            n["method"] == "turn/completed" && n["params"]["turn"]["id"] == turn_id
        });
        done["params"]["turn"].clone()
    }

    fn fail(&self, why: &str) -> ! {
        let methods: Vec<&str> = self
            .notifications
            .iter()
            .filter_map(|n| n["method"].as_str())
            .collect();
        panic!(
            "codex app-server: {why}\nnotifications so far: {methods:?}\nstderr:\n{}",
            self.stderr.lock().unwrap()
        )
    }
}

impl Drop for AppServer {
    /// Closing stdin ends the app-server (~0.1 s); kill it if it lingers.
    fn drop(&mut self) {
        drop(self.stdin.take());
        // Closed stdin ends the app-server; a kill only if it does not.
        if crate::support::poll_until(Duration::from_secs(5), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        }) {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn codex_smoke_turn_echoes_the_client_message_id_live_and_in_history() {
    let model = FakeModel::start();
    model.push(Step::message_in_chunks(
        "Hello from the Rust fake model.",
        3,
    ));
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut codex = AppServer::spawn(&home);

    let init = codex.handshake();
    assert!(
        init["userAgent"].as_str().unwrap().contains("0.171.0"),
        "{init}"
    );
    let thread_id = codex.start_thread(work.path());
    let turn_id = codex.start_turn(&thread_id, "hello", "op-smoke-1");
    let turn = codex.wait_turn_completed(&turn_id);
    let turn_time = started.elapsed();
    assert_eq!(turn["status"], "completed", "{turn}");

    let items = codex.completed_items(&turn_id);
    let user = items
        .iter()
        .find(|i| i["type"] == "userMessage")
        .unwrap_or_else(|| panic!("no userMessage item: {items:?}"));
    assert_eq!(user["clientId"], "op-smoke-1", "{user}");
    assert_eq!(user["content"][0]["text"], "hello", "{user}");
    let agent = items
        .iter()
        .find(|i| i["type"] == "agentMessage")
        .unwrap_or_else(|| panic!("no agentMessage item: {items:?}"));
    assert_eq!(agent["text"], "Hello from the Rust fake model.", "{agent}");
    // The three text deltas arrive as streaming notifications.
    let deltas: String = codex
        .notifications
        .iter()
        .filter(|n| n["method"] == "item/agentMessage/delta")
        .filter_map(|n| n["params"]["delta"].as_str())
        .collect();
    assert_eq!(deltas, "Hello from the Rust fake model.");

    // What Codex sent the model: the user's text last, and its shell tool.
    let requests = model.requests();
    assert_eq!(requests.len(), 1, "one turn, one model request");
    let texts = fakemodel::user_texts(&requests[0]);
    assert_eq!(texts.last().map(String::as_str), Some("hello"), "{texts:?}");
    assert_eq!(requests[0]["model"], "fake-model");
    let tools = fakemodel::tool_names(&requests[0]);
    assert!(tools.iter().any(|t| t == "exec_command"), "{tools:?}");

    let read = codex
        .request(
            "thread/read",
            json!({"threadId": thread_id, "includeTurns": true}),
        )
        .unwrap();
    let turns = read["thread"]["turns"].as_array().unwrap();
    let stored = turns
        .iter()
        .find(|t| t["id"] == turn_id)
        .unwrap_or_else(|| panic!("turn {turn_id} not in history: {read}"));
    assert_eq!(stored["status"], "completed");
    let stored_items = stored["items"].as_array().unwrap();
    assert!(
        stored_items
            .iter()
            .any(|i| i["type"] == "userMessage" && i["clientId"] == "op-smoke-1"),
        "{stored}"
    );
    assert!(
        stored_items
            .iter()
            .any(|i| i["type"] == "agentMessage" && i["text"] == "Hello from the Rust fake model."),
        "{stored}"
    );
    eprintln!("codex smoke: spawn to turn/completed in {turn_time:?}");
}

#[test]
fn codex_smoke_model_faults_fail_the_turn_and_the_thread_goes_on() {
    let model = FakeModel::start();
    model.push(Step::http_error(500));
    model.push(Step::failed("fake stream failure"));
    model.set_default(Step::message("recovered"));
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let mut codex = AppServer::spawn(&home);
    codex.handshake();
    let thread_id = codex.start_thread(work.path());

    // HTTP 500: no retries are configured, so one request and a failed turn.
    let turn_id = codex.start_turn(&thread_id, "this will get HTTP 500", "op-smoke-500");
    let turn = codex.wait_turn_completed(&turn_id);
    assert_eq!(turn["status"], "failed", "{turn}");
    assert_eq!(
        turn["error"]["codexErrorInfo"], "internalServerError",
        "{turn}"
    );
    let error = codex.wait_for("the error notification", |n| {
        n["method"] == "error" && n["params"]["turnId"] == turn_id.as_str()
    });
    assert_eq!(error["params"]["willRetry"], false, "{error}");
    assert_eq!(model.requests().len(), 1);

    // response.failed: the turn fails with the model's message.
    let turn_id = codex.start_turn(
        &thread_id,
        "this will get response.failed",
        "op-smoke-failed",
    );
    let turn = codex.wait_turn_completed(&turn_id);
    assert_eq!(turn["status"], "failed", "{turn}");
    let message = turn["error"]["message"].as_str().unwrap();
    assert!(message.contains("fake stream failure"), "{turn}");

    // The thread is still usable.
    let turn_id = codex.start_turn(&thread_id, "this one works", "op-smoke-ok");
    let turn = codex.wait_turn_completed(&turn_id);
    assert_eq!(turn["status"], "completed", "{turn}");
    let items = codex.completed_items(&turn_id);
    assert!(
        items
            .iter()
            .any(|i| i["type"] == "agentMessage" && i["text"] == "recovered"),
        "{items:?}"
    );
    assert_eq!(model.requests().len(), 3);
}

#[test]
fn codex_smoke_shell_and_apply_patch_run_in_the_workspace() {
    let model = FakeModel::start();
    model.push(Step::shell("echo hi-from-shell"));
    model.push(Step::apply_patch(
        "*** Begin Patch\n*** Add File: patched.txt\n+patched by the fake model\n*** End Patch\n",
    ));
    model.push(Step::message("done"));
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let mut codex = AppServer::spawn(&home);
    codex.handshake();
    // Codex offers the freeform apply_patch tool only to model slugs it
    // knows; the provider still is the fake one.
    let started = codex
        .request(
            "thread/start",
            json!({"cwd": work.path(), "approvalPolicy": "never",
                   "sandbox": "workspace-write", "model": "gpt-5.5"}),
        )
        .unwrap();
    let thread_id = started["thread"]["id"].as_str().unwrap().to_owned();
    let turn_id = codex.start_turn(&thread_id, "run and patch", "op-smoke-tools");
    let turn = codex.wait_turn_completed(&turn_id);
    assert_eq!(turn["status"], "completed", "{turn}");

    let items = codex.completed_items(&turn_id);
    let command = items
        .iter()
        .find(|i| i["type"] == "commandExecution")
        .unwrap_or_else(|| panic!("no commandExecution item: {items:?}"));
    assert_eq!(command["status"], "completed", "{command}");
    assert_eq!(command["exitCode"], 0, "{command}");
    assert_eq!(command["aggregatedOutput"], "hi-from-shell\n", "{command}");
    let change = items
        .iter()
        .find(|i| i["type"] == "fileChange")
        .unwrap_or_else(|| panic!("no fileChange item: {items:?}"));
    assert_eq!(change["status"], "completed", "{change}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("patched.txt")).unwrap(),
        "patched by the fake model\n"
    );

    // Each tool's result went back to the model in the next request.
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert!(fakemodel::tool_names(&requests[0])
        .iter()
        .any(|t| t == "apply_patch"));
    let shell_out = fakemodel::tool_outputs(&requests[1]);
    assert_eq!(shell_out.len(), 1, "{shell_out:?}");
    assert_eq!(shell_out[0].0, command["id"].as_str().unwrap());
    assert!(
        shell_out[0].1.as_str().unwrap().contains("hi-from-shell"),
        "{shell_out:?}"
    );
    let patch_out = fakemodel::tool_outputs(&requests[2]);
    assert_eq!(patch_out.len(), 2, "{patch_out:?}");
    assert!(
        patch_out[1].1.as_str().unwrap().contains("A patched.txt"),
        "{patch_out:?}"
    );
}

#[test]
fn codex_smoke_interrupt_ends_a_turn_whose_model_hangs() {
    let model = FakeModel::start();
    model.set_default(Step::hang());
    let home = CodexHome::new(&model);
    let work = tempfile::tempdir().unwrap();
    let mut codex = AppServer::spawn(&home);
    codex.handshake();
    let thread_id = codex.start_thread(work.path());
    let turn_id = codex.start_turn(&thread_id, "wait for it", "op-smoke-hang");
    model.wait_for_requests(1, DEADLINE);
    let answer = codex
        .request(
            "turn/interrupt",
            json!({"threadId": thread_id, "turnId": turn_id}),
        )
        .unwrap();
    assert_eq!(answer, json!({}));
    let turn = codex.wait_turn_completed(&turn_id);
    assert_eq!(turn["status"], "interrupted", "{turn}");
}
