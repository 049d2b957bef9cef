//! A runtime that plays scripts instead of running a model: for the actor
//! tests (start, events, complete, fail, hang, and faults in the consumer). A
//! script is chosen by a word in the instruction text, so a test picks
//! behaviour from the comment it posts. Like Codex, a turn runs on its own
//! (here, a tokio task) whether or not its events are consumed, and its
//! outcome is kept as history for [`Agent::lookup_turn`].

use super::{
    Agent, AgentError, SteerRequest, ThreadRequest, TurnEvent, TurnLookup, TurnRequest, TurnStarted,
};
use crate::domain::policy::{ApprovalPolicy, Sandbox};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::mpsc;

mod history;
mod play;
mod script;

pub(crate) use script::directive_args;
pub use script::{instruction, script_from_directives, Script, StartBehaviour, Step};

/// A recorded `start_turn` call (`text`: the instruction, see [`instruction`]).
#[derive(Debug, Clone)]
pub struct Call {
    pub thread_id: String,
    pub operation_id: String,
    pub text: String,
    pub cwd: std::path::PathBuf,
    pub at: Instant,
    pub turn_id: String,
}

/// Messages from the turn task to the consumer stream.
enum Wire {
    Event(TurnEvent),
    Panic,
    Drop,
}

#[derive(Default)]
struct Inner {
    rules: Vec<(String, Script)>,
    calls: Vec<Call>,
    threads_started: usize,
    /// Every `ensure_thread` that started a thread: (cwd, approval policy, sandbox).
    thread_requests: Vec<(std::path::PathBuf, ApprovalPolicy, Sandbox)>,
    /// The terms of every `ensure_thread` and `start_turn`: (thread id, terms).
    terms: Vec<(Option<String>, super::ThreadTerms)>,
    interrupts: Vec<String>,
    /// Every steer a running turn took: (turn id, operation id, instruction).
    steers: Vec<(String, String, String)>,
    /// Every `revert_thread`: (thread id, the turn reverted before).
    reverts: Vec<(String, String)>,
    ends: Vec<(String, Instant)>,
    /// operation id → what the "thread history" says.
    history: HashMap<String, TurnLookup>,
    /// Turns still running, so `interrupt` can stop them.
    live: HashMap<String, tokio::sync::oneshot::Sender<()>>,
    /// Pending approval requests, by key.
    approvals: HashMap<String, tokio::sync::oneshot::Sender<bool>>,
    /// Decisions received: (key, accepted).
    decisions: Vec<(String, bool)>,
    /// Tool calls waiting for their answer, by key.
    tool_calls: HashMap<String, (String, tokio::sync::oneshot::Sender<()>)>,
    /// Answers given to tool calls: (tool, answer).
    tool_answers: Vec<(String, super::ToolAnswer)>,
    /// Where the history is kept across process restarts (directive mode).
    history_file: Option<std::path::PathBuf>,
    /// Choose scripts from `[directives]` in the text when no rule matches.
    directives: bool,
    /// Threads are offered the bridge's workflow tools, as Codex's are.
    workflow_tools: bool,
}

impl Inner {
    fn remember(&mut self, operation_id: &str, outcome: TurnLookup) {
        self.history.insert(operation_id.to_owned(), outcome);
        if let Some(file) = &self.history_file {
            history::save(file, &self.history);
        }
    }
}

/// The scripted runtime. Cloning shares the script book and the recordings.
#[derive(Clone, Default)]
pub struct ScriptedAgent {
    inner: Arc<Mutex<Inner>>,
}

impl ScriptedAgent {
    pub fn new() -> Self {
        Self::default()
    }

    /// Offers the bridge's workflow tools on new threads, as the Codex
    /// runtime does: their work joins workflows that continue after a final.
    pub fn offer_workflow_tools(&self) -> &Self {
        if let Ok(mut inner) = self.inner.lock() {
            inner.workflow_tools = true;
        }
        self
    }

    /// Turns whose text contains `word` play `script` (first matching rule wins;
    /// otherwise the turn completes with "done").
    /// Plays `script` for instructions containing `word`; a word given
    /// again gets its new script (a runtime that comes back, say).
    pub fn on(&self, word: &str, script: Script) -> &Self {
        if let Ok(mut inner) = self.inner.lock() {
            match inner.rules.iter_mut().find(|(w, _)| w == word) {
                Some(rule) => rule.1 = script,
                None => inner.rules.push((word.to_owned(), script)),
            }
        }
        self
    }

    pub fn calls(&self) -> Vec<Call> {
        self.inner
            .lock()
            .map(|i| i.calls.clone())
            .unwrap_or_default()
    }

    /// When each turn finished (completed, failed or interrupted).
    pub fn ends(&self) -> Vec<(String, Instant)> {
        self.inner
            .lock()
            .map(|i| i.ends.clone())
            .unwrap_or_default()
    }

    pub fn threads_started(&self) -> usize {
        self.inner.lock().map(|i| i.threads_started).unwrap_or(0)
    }

    /// Approval decisions the runtime received: (key, accepted).
    /// The threads started: (cwd, approval policy, sandbox) each.
    pub fn thread_requests(&self) -> Vec<(std::path::PathBuf, ApprovalPolicy, Sandbox)> {
        self.inner
            .lock()
            .map(|i| i.thread_requests.clone())
            .unwrap_or_default()
    }

    /// The terms every thread was opened and every turn started with, in
    /// order: (the thread id when the request named one, the terms).
    pub fn thread_terms(&self) -> Vec<(Option<String>, super::ThreadTerms)> {
        self.inner
            .lock()
            .map(|i| i.terms.clone())
            .unwrap_or_default()
    }

    pub fn decisions(&self) -> Vec<(String, bool)> {
        self.inner
            .lock()
            .map(|i| i.decisions.clone())
            .unwrap_or_default()
    }

    /// The answers the bridge gave to the script's tool calls: (tool, answer).
    pub fn tool_answers(&self) -> Vec<(String, super::ToolAnswer)> {
        self.inner
            .lock()
            .map(|i| i.tool_answers.clone())
            .unwrap_or_default()
    }

    /// The steers running turns took: (turn id, operation id, instruction).
    pub fn steers(&self) -> Vec<(String, String, String)> {
        self.inner
            .lock()
            .map(|i| i.steers.clone())
            .unwrap_or_default()
    }

    /// The reverts asked for: (thread id, the turn reverted before).
    pub fn reverts(&self) -> Vec<(String, String)> {
        self.inner
            .lock()
            .map(|i| i.reverts.clone())
            .unwrap_or_default()
    }

    pub fn interrupts(&self) -> Vec<String> {
        self.inner
            .lock()
            .map(|i| i.interrupts.clone())
            .unwrap_or_default()
    }

    /// The binary's scripted mode: scripts come from `[directives]` in the
    /// instruction, and the history survives a process restart in `history_file`
    /// (turns that were running then are found interrupted, as after an
    /// app-server restart).
    pub fn with_directives(history_file: std::path::PathBuf) -> Self {
        let mut inner = Inner {
            directives: true,
            ..Default::default()
        };
        inner.history = history::load(&history_file);
        inner.history_file = Some(history_file);
        ScriptedAgent {
            inner: Arc::new(Mutex::new(inner)),
        }
    }

    fn script_for(&self, prompt: &str) -> Script {
        let text = instruction(prompt);
        let Ok(inner) = self.inner.lock() else {
            return Script::complete("done");
        };
        if let Some((_, script)) = inner
            .rules
            .iter()
            .find(|(word, _)| text.contains(word.as_str()))
        {
            return script.clone();
        }
        if inner.directives {
            script_from_directives(text)
        } else {
            Script::complete("done")
        }
    }
}

impl Agent for ScriptedAgent {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn offers_workflow_tools(&self) -> bool {
        self.inner.lock().is_ok_and(|i| i.workflow_tools)
    }

    fn ensure_thread(&self, req: ThreadRequest) -> BoxFuture<'static, Result<String, AgentError>> {
        if let Ok(mut inner) = self.inner.lock() {
            inner.terms.push((req.thread_id.clone(), req.terms.clone()));
        }
        let id = match req.thread_id {
            Some(id) => id,
            None => {
                if let Ok(mut inner) = self.inner.lock() {
                    inner.threads_started += 1;
                    inner.thread_requests.push((
                        req.cwd.clone(),
                        req.terms.policy.approval_policy,
                        req.terms.policy.sandbox,
                    ));
                }
                format!("thread-{}", uuid::Uuid::new_v4().simple())
            }
        };
        async move { Ok(id) }.boxed()
    }

    fn start_turn(&self, req: TurnRequest) -> BoxFuture<'static, Result<TurnStarted, AgentError>> {
        if let Ok(mut inner) = self.inner.lock() {
            inner
                .terms
                .push((Some(req.thread_id.clone()), req.terms.clone()));
        }
        let script = self.script_for(&req.text);
        let inner = self.inner.clone();
        async move {
            match script.start {
                StartBehaviour::Accept => {}
                StartBehaviour::Unavailable => {
                    return Err(AgentError::Unavailable(
                        "scripted: refused before sending".into(),
                    ))
                }
                StartBehaviour::Uncertain => {
                    return Err(AgentError::Uncertain(
                        "scripted: pipe closed after sending".into(),
                    ))
                }
                StartBehaviour::Slow(d) => tokio::time::sleep(d).await,
            }
            let turn_id = format!("turn-{}", uuid::Uuid::new_v4().simple());
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
            if let Ok(mut i) = inner.lock() {
                i.calls.push(Call {
                    thread_id: req.thread_id.clone(),
                    operation_id: req.operation_id.to_string(),
                    text: instruction(&req.text).to_owned(),
                    cwd: req.cwd.clone(),
                    at: Instant::now(),
                    turn_id: turn_id.clone(),
                });
                i.remember(
                    req.operation_id.as_str(),
                    TurnLookup::Running {
                        turn_id: turn_id.clone(),
                    },
                );
                i.live.insert(turn_id.clone(), stop_tx);
            }
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(play::play(
                inner,
                script.steps,
                req.operation_id.to_string(),
                turn_id.clone(),
                tx,
                stop_rx,
            ));
            let events = futures_util::stream::unfold(rx, |mut rx| async move {
                match rx.recv().await {
                    Some(Wire::Event(e)) => Some((e, rx)),
                    Some(Wire::Panic) => {
                        panic!("scripted runtime: injected fault in the event consumer")
                    }
                    Some(Wire::Drop) | None => None,
                }
            })
            .boxed();
            Ok(TurnStarted {
                turn_id,
                events,
                runner: None,
            })
        }
        .boxed()
    }

    fn interrupt(
        &self,
        _thread_id: &str,
        turn_id: &str,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let live = match self.inner.lock() {
            Ok(mut i) => {
                i.interrupts.push(turn_id.to_owned());
                i.live.remove(turn_id)
            }
            Err(_) => None,
        };
        if let Some(stop) = live {
            let _ = stop.send(());
        }
        async { Ok(()) }.boxed()
    }

    fn revert_thread(
        &self,
        thread_id: &str,
        before_turn_id: &str,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        if let Ok(mut i) = self.inner.lock() {
            i.reverts
                .push((thread_id.to_owned(), before_turn_id.to_owned()));
        }
        async { Ok(()) }.boxed()
    }

    /// Joins the turn if it is still live. The steer's script (chosen by its
    /// text, as a turn's) says how the answer comes: `Unavailable` refuses it
    /// before sending, `Uncertain` takes it in but loses the answer, `Slow`
    /// answers late.
    fn steer_turn(&self, req: SteerRequest) -> BoxFuture<'static, Result<String, AgentError>> {
        let script = self.script_for(&req.text);
        let inner = self.inner.clone();
        async move {
            match script.start {
                StartBehaviour::Unavailable => {
                    return Err(AgentError::Unavailable(
                        "scripted: refused before sending".into(),
                    ))
                }
                StartBehaviour::Slow(d) => tokio::time::sleep(d).await,
                StartBehaviour::Accept | StartBehaviour::Uncertain => {}
            }
            let mut i = inner
                .lock()
                .map_err(|_| AgentError::Unavailable("scripted: poisoned".into()))?;
            if !i.live.contains_key(&req.expected_turn_id) {
                return Err(AgentError::Unavailable(format!(
                    "no active turn to steer (expected {})",
                    req.expected_turn_id
                )));
            }
            i.steers.push((
                req.expected_turn_id.clone(),
                req.operation_id.to_string(),
                instruction(&req.text).to_owned(),
            ));
            i.remember(
                req.operation_id.as_str(),
                TurnLookup::Running {
                    turn_id: req.expected_turn_id.clone(),
                },
            );
            match script.start {
                StartBehaviour::Uncertain => Err(AgentError::Uncertain(
                    "scripted: pipe closed after sending".into(),
                )),
                _ => Ok(req.expected_turn_id),
            }
        }
        .boxed()
    }

    fn answer_tool(
        &self,
        key: &str,
        answer: super::ToolAnswer,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let pending = match self.inner.lock() {
            Ok(mut i) => match i.tool_calls.remove(key) {
                Some((tool, tx)) => {
                    i.tool_answers.push((tool, answer));
                    Some(tx)
                }
                None => None,
            },
            Err(_) => None,
        };
        async move {
            match pending {
                Some(tx) => {
                    let _ = tx.send(());
                    Ok(())
                }
                None => Err(AgentError::Unavailable("no such pending tool call".into())),
            }
        }
        .boxed()
    }

    fn decide_approval(
        &self,
        key: &str,
        accept: bool,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let pending = match self.inner.lock() {
            Ok(mut i) => {
                i.decisions.push((key.to_owned(), accept));
                i.approvals.remove(key)
            }
            Err(_) => None,
        };
        async move {
            match pending {
                Some(tx) => {
                    let _ = tx.send(accept);
                    Ok(())
                }
                None => Err(AgentError::Unavailable("no such pending approval".into())),
            }
        }
        .boxed()
    }

    fn lookup_turn(
        &self,
        _thread_id: &str,
        operation_id: &str,
    ) -> BoxFuture<'static, Result<TurnLookup, AgentError>> {
        let found = self
            .inner
            .lock()
            .ok()
            .and_then(|i| i.history.get(operation_id).cloned())
            .unwrap_or(TurnLookup::Missing);
        async move { Ok(found) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::OperationId;
    use std::time::Duration;

    fn op(n: u8) -> OperationId {
        OperationId::parse(&format!("op-{n:032x}")).unwrap()
    }

    fn terms() -> crate::agent::ThreadTerms {
        crate::agent::ThreadTerms {
            policy: crate::domain::trust::ExecutionPolicy::untrusted(),
            base_instructions: None,
        }
    }

    #[tokio::test]
    async fn history_survives_a_restart_and_running_turns_become_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("h.json");
        let rt = ScriptedAgent::with_directives(file.clone());
        let done = rt
            .start_turn(TurnRequest {
                thread_id: "t".into(),
                operation_id: op(0xa),
                text: "x".into(),
                cwd: ".".into(),
                terms: terms(),
                attempt: None,
            })
            .await
            .unwrap();
        let _: Vec<_> = done.events.collect().await;
        let _hanging = rt
            .start_turn(TurnRequest {
                thread_id: "t".into(),
                operation_id: op(0xb),
                text: "[hang]".into(),
                cwd: ".".into(),
                terms: terms(),
                attempt: None,
            })
            .await
            .unwrap();
        let again = ScriptedAgent::with_directives(file);
        assert!(matches!(
            again.lookup_turn("t", op(0xa).as_str()).await,
            Ok(TurnLookup::Completed { .. })
        ));
        let b = again.lookup_turn("t", op(0xb).as_str()).await;
        assert!(
            matches!(b, Ok(TurnLookup::Interrupted { .. })),
            "{b:?} {}",
            std::fs::read_to_string(dir.path().join("h.json")).unwrap_or_default()
        );
        assert_eq!(
            again.lookup_turn("t", op(0xc).as_str()).await,
            Ok(TurnLookup::Missing)
        );
    }

    #[tokio::test]
    async fn a_turn_completes_and_is_found_in_history() {
        let rt = ScriptedAgent::new();
        let started = rt
            .start_turn(TurnRequest {
                thread_id: "t".into(),
                operation_id: op(0x1),
                text: "hello".into(),
                cwd: ".".into(),
                terms: terms(),
                attempt: None,
            })
            .await
            .unwrap();
        let events: Vec<TurnEvent> = started.events.collect().await;
        assert!(matches!(events.last(), Some(TurnEvent::Completed { .. })));
        assert!(matches!(
            rt.lookup_turn("t", op(0x1).as_str()).await,
            Ok(TurnLookup::Completed { .. })
        ));
        assert_eq!(
            rt.lookup_turn("t", op(0x2).as_str()).await,
            Ok(TurnLookup::Missing)
        );
    }

    #[tokio::test]
    async fn a_dropped_stream_leaves_the_turn_running_to_completion() {
        let rt = ScriptedAgent::new();
        rt.on(
            "drop",
            Script::steps(vec![
                Step::DropStream,
                Step::Sleep(Duration::from_millis(20)),
                Step::Complete("late".into()),
            ]),
        );
        let started = rt
            .start_turn(TurnRequest {
                thread_id: "t".into(),
                operation_id: op(0xd),
                text: "drop it".into(),
                cwd: ".".into(),
                terms: terms(),
                attempt: None,
            })
            .await
            .unwrap();
        let events: Vec<TurnEvent> = started.events.collect().await;
        // Only the delivery of the user message came through before the drop.
        assert!(
            matches!(events.as_slice(), [TurnEvent::Delivered { client_id: Some(id), .. }] if id == op(0xd).as_str()),
            "{events:?}"
        );
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(
            rt.lookup_turn("t", op(0xd).as_str()).await.unwrap(),
            TurnLookup::Completed {
                turn_id: started.turn_id,
                final_text: Some("late".into())
            }
        );
    }
}
