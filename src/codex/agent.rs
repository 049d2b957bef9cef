//! [`CodexAgent`]: the [`Agent`] the session actors drive, as threads and
//! turns on the one app-server [`Process`]. Threads are resumed in a new
//! process before their next turn, with the setup a new thread gets
//! (`thread.rs`); a turn's events come from the [`Router`].

use super::notice::NoticeSender;
use super::process::Process;
use super::protocol::{
    DynamicToolCallResponse, DynamicToolSpec, HistoryItem, Request, ReviewStart, ReviewTarget,
    ThreadFork, ThreadInjectItems, ThreadItem, ThreadResume, ThreadRevert, ThreadStart,
    ThreadTurnsList, TurnInterrupt, TurnItemsView, TurnStart, TurnStatus, TurnSteer, UserInput,
};
use super::route::Router;
use super::rpc::{RpcConnection, RpcError};
use super::settings::CodexSettings;
use super::thread::{thread_setup, ThreadPolicy};
use crate::agent::{
    Agent, AgentError, ReviewRequest, SteerRequest, ThreadRequest, ThreadTerms, ToolAnswer,
    TurnLookup, TurnRequest, TurnStarted,
};
use crate::domain::workflow::children::offered_tools;
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use std::path::Path;
use std::sync::Arc;

pub(super) struct Inner {
    pub(super) process: Process,
    pub(super) router: Router,
    /// The id of the Codex home the threads live in (`None`: it could not be
    /// read or written; stored threads are then taken to be resumable).
    home: Option<String>,
}

/// The Codex runtime. Cloning shares the process.
#[derive(Clone)]
pub struct CodexAgent {
    pub(super) inner: Arc<Inner>,
}

fn rpc_to_runtime(e: RpcError) -> AgentError {
    if e.is_ambiguous() {
        AgentError::Uncertain(e.to_string())
    } else {
        AgentError::Unavailable(e.to_string())
    }
}

impl CodexAgent {
    /// A runtime that starts its app-server on first use; what the audit log
    /// should hold about it goes to `notices` (see [`super::notice_channel`]).
    pub fn new(settings: CodexSettings, notices: NoticeSender) -> Self {
        let router = Router::new(notices);
        let home = match super::home_id::read_or_create(&settings.codex_home) {
            Ok(id) => Some(id),
            Err(e) => {
                tracing::warn!(
                    codex_home = %settings.codex_home.display(),
                    error = %e,
                    "cannot read or write the Codex home's id (check codex_home's permissions); \
                     a thread another process created will fail to resume here instead of being rebuilt"
                );
                None
            }
        };
        CodexAgent {
            inner: Arc::new(Inner {
                process: Process::new(settings, router.clone()),
                router,
                home,
            }),
        }
    }

    fn settings(&self) -> &CodexSettings {
        self.inner.process.settings()
    }

    async fn connection(&self) -> Result<Arc<RpcConnection>, AgentError> {
        Ok(self.inner.process.connection().await?)
    }

    /// Ends the app-server process (an interrupt that was never confirmed,
    /// or shutdown). The next call starts a new one and resumes threads.
    pub async fn kill_process(&self) {
        self.inner.process.kill().await
    }

    /// Capability probes that failed (each is a `capability_downgrade`).
    pub fn downgrades(&self) -> Vec<String> {
        self.inner.process.downgrades()
    }

    /// `turn/steer`: adds input to the active turn `expected_turn_id` (for the
    /// steer send mode). Fails if that turn is not the one running.
    pub async fn steer(
        &self,
        thread_id: &str,
        expected_turn_id: &str,
        text: &str,
        operation_id: &str,
    ) -> Result<String, AgentError> {
        let conn = self.connection().await?;
        let steer = TurnSteer {
            thread_id: thread_id.to_owned(),
            expected_turn_id: expected_turn_id.to_owned(),
            input: vec![UserInput::text(text)],
            client_user_message_id: operation_id.to_owned(),
        };
        let answer = conn
            .call(&steer, self.settings().request_timeout)
            .await
            .map_err(rpc_to_runtime)?;
        Ok(answer.turn_id)
    }

    /// Opens a thread in the current app-server process with the whole setup
    /// ([`thread_setup`]): `thread/start` without an id (`thread/fork` of
    /// `fork` when given), `thread/resume` for one this process has not
    /// loaded (a new process, or a new bridge), then waits for its Gitea MCP
    /// server. The connection and the thread's id.
    async fn open_thread(
        &self,
        thread_id: Option<&str>,
        fork: Option<&str>,
        cwd: &Path,
        policy: Option<ThreadPolicy>,
        terms: &ThreadTerms,
        offered: &[&str],
    ) -> Result<(Arc<RpcConnection>, String), AgentError> {
        let conn = self.connection().await?;
        let s = self.settings();
        let loaded = match thread_id {
            Some(id) => self.inner.process.has_loaded(id).await,
            None => false,
        };
        let id = match (thread_id, fork) {
            (Some(id), _) if loaded => id.to_owned(),
            (Some(id), _) => {
                self.inner.router.forget_mcp(id);
                let resume = ThreadResume {
                    thread_id: id.to_owned(),
                    setup: thread_setup(s, cwd, policy, terms),
                };
                conn.call(&resume, s.request_timeout)
                    .await
                    .map_err(|e| AgentError::Unavailable(format!("thread/resume failed: {e}")))?;
                id.to_owned()
            }
            (None, Some(source)) => {
                let fork = ThreadFork {
                    thread_id: source.to_owned(),
                    setup: thread_setup(s, cwd, policy, terms),
                };
                conn.call(&fork, s.request_timeout)
                    .await
                    .map_err(|e| AgentError::Unavailable(format!("thread/fork failed: {e}")))?
                    .thread
                    .id
            }
            (None, None) => {
                let start = ThreadStart {
                    setup: thread_setup(s, cwd, policy, terms),
                    // Only a new thread can get them: `thread/resume` cannot
                    // add tools to a thread.
                    dynamic_tools: if s.workflow_tools {
                        DynamicToolSpec::bridge_tools(offered)
                    } else {
                        Vec::new()
                    },
                };
                conn.call(&start, s.request_timeout)
                    .await
                    .map_err(|e| AgentError::Unavailable(format!("thread/start failed: {e}")))?
                    .thread
                    .id
            }
        };
        if !loaded {
            self.inner.process.mark_loaded(&id).await;
        }
        // Codex does not wait for a thread's MCP servers: a turn sent too
        // early reaches the model without the Gitea tools. On a thread loaded
        // before, this returns at once (or refuses again if the server failed).
        if terms.policy.gitea_write_tool
            && s.thread_config.contains_key("mcp_servers.gitea.command")
        {
            self.inner
                .router
                .wait_for_mcp(&id, "gitea", super::settings::MCP_READY_WAIT)
                .await?;
        }
        Ok((conn, id))
    }
}

impl CodexAgent {
    /// Sends `start` (a `turn/start` or `review/start`, whose answer names
    /// the turn) on the thread; the turn's events follow on the router. The
    /// session opens its thread through `ensure_thread` first; a thread not
    /// loaded here yet (the app-server restarted between the two) is resumed
    /// with the same terms, so a thread that may not have the Gitea tools
    /// never gets them back on a resume.
    async fn start_on_thread<R: Request>(
        &self,
        thread_id: &str,
        cwd: &Path,
        terms: &ThreadTerms,
        start: &R,
        turn_of: impl FnOnce(R::Response) -> String,
    ) -> Result<TurnStarted, AgentError> {
        let policy = ThreadPolicy::of(terms)?;
        let (conn, _) = self
            // Never a new thread here: a resume cannot add tools.
            .open_thread(Some(thread_id), None, cwd, Some(policy), terms, &[])
            .await?;
        let mut rx = self.inner.router.open_turn(thread_id);
        let answer = match conn.call(start, self.settings().request_timeout).await {
            Ok(answer) => answer,
            Err(e) => {
                // Never admitted: nothing will come for it. Admitted but
                // unreadable (no turn id): the session looks it up by history.
                self.inner.router.close_turn(thread_id);
                return Err(rpc_to_runtime(e));
            }
        };
        let events = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed();
        Ok(TurnStarted {
            turn_id: turn_of(answer),
            events,
            runner: None,
        })
    }
}

impl Agent for CodexAgent {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn offers_workflow_tools(&self) -> bool {
        self.settings().workflow_tools
    }

    fn home(&self) -> Option<String> {
        self.inner.home.clone()
    }

    fn ensure_thread(&self, req: ThreadRequest) -> BoxFuture<'static, Result<String, AgentError>> {
        let this = self.clone();
        async move {
            let policy = ThreadPolicy::of(&req.terms)?;
            let (conn, id) = this
                .open_thread(
                    req.thread_id.as_deref(),
                    req.fork_from.as_deref(),
                    &req.cwd,
                    Some(policy),
                    &req.terms,
                    // A child's thread records its result; a top-level one
                    // completes, gates and delegates.
                    offered_tools(req.session_key.child().is_some()),
                )
                .await?;
            if req.thread_id.is_none() && !req.history.is_empty() {
                // Before the first turn: the model reads the conversation
                // so far as this thread's own history. A failure leaves a
                // new thread nobody stored; the next attempt makes another.
                let inject = ThreadInjectItems {
                    thread_id: id.clone(),
                    items: req
                        .history
                        .iter()
                        .flat_map(|x| {
                            [
                                HistoryItem::user(x.asked.clone()),
                                HistoryItem::assistant(x.answered.clone()),
                            ]
                        })
                        .collect(),
                };
                conn.call(&inject, this.settings().request_timeout)
                    .await
                    .map_err(|e| {
                        AgentError::Unavailable(format!("thread/inject_items failed: {e}"))
                    })?;
            }
            Ok(id)
        }
        .boxed()
    }

    fn start_turn(&self, req: TurnRequest) -> BoxFuture<'static, Result<TurnStarted, AgentError>> {
        let this = self.clone();
        async move {
            let start = TurnStart {
                thread_id: req.thread_id.clone(),
                input: vec![UserInput::text(req.text)],
                client_user_message_id: req.operation_id.to_string(),
            };
            this.start_on_thread(&req.thread_id, &req.cwd, &req.terms, &start, |a| a.turn.id)
                .await
        }
        .boxed()
    }

    fn start_review(
        &self,
        req: ReviewRequest,
    ) -> BoxFuture<'static, Result<TurnStarted, AgentError>> {
        let this = self.clone();
        async move {
            let start = ReviewStart {
                thread_id: req.thread_id.clone(),
                target: ReviewTarget::BaseBranch {
                    branch: req.base_branch,
                },
            };
            this.start_on_thread(&req.thread_id, &req.cwd, &req.terms, &start, |a| a.turn.id)
                .await
        }
        .boxed()
    }

    fn interrupt(
        &self,
        thread_id: &str,
        turn_id: &str,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let (this, thread, turn) = (self.clone(), thread_id.to_owned(), turn_id.to_owned());
        async move {
            let conn = this.connection().await?;
            let interrupt = TurnInterrupt {
                thread_id: thread,
                turn_id: turn,
            };
            conn.call(&interrupt, this.settings().request_timeout)
                .await
                .map(|_| ())
                .map_err(rpc_to_runtime)
        }
        .boxed()
    }

    fn revert_thread(
        &self,
        thread_id: &str,
        before_turn_id: &str,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let (this, thread, turn) = (
            self.clone(),
            thread_id.to_owned(),
            before_turn_id.to_owned(),
        );
        async move {
            let conn = this.connection().await?;
            let revert = ThreadRevert {
                thread_id: thread,
                before_turn_id: turn,
            };
            conn.call(&revert, this.settings().request_timeout)
                .await
                .map(|_| ())
                .map_err(rpc_to_runtime)
        }
        .boxed()
    }

    fn steer_turn(&self, req: SteerRequest) -> BoxFuture<'static, Result<String, AgentError>> {
        let this = self.clone();
        async move {
            this.steer(
                &req.thread_id,
                &req.expected_turn_id,
                &req.text,
                req.operation_id.as_str(),
            )
            .await
        }
        .boxed()
    }

    fn decide_approval(
        &self,
        key: &str,
        accept: bool,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let (this, key) = (self.clone(), key.to_owned());
        async move {
            let Some((id, kind)) = this.inner.router.take_approval(&key) else {
                return Err(AgentError::Unavailable(format!(
                    "approval {key} is not pending (answered or expired)"
                )));
            };
            let conn = this.connection().await?;
            conn.respond(&id, &kind.answer(accept))
                .map_err(rpc_to_runtime)
        }
        .boxed()
    }

    fn answer_tool(
        &self,
        key: &str,
        answer: ToolAnswer,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let (this, key) = (self.clone(), key.to_owned());
        async move {
            let Some(id) = this.inner.router.take_tool_call(&key) else {
                return Err(AgentError::Unavailable(format!(
                    "tool call {key} is not pending (answered, or its process is gone)"
                )));
            };
            let conn = this.connection().await?;
            conn.respond(
                &id,
                &DynamicToolCallResponse::text(answer.success, answer.text),
            )
            .map_err(rpc_to_runtime)
        }
        .boxed()
    }

    fn reset(&self) -> BoxFuture<'static, ()> {
        let this = self.clone();
        async move { this.kill_process().await }.boxed()
    }

    fn lookup_turn(
        &self,
        thread_id: &str,
        operation_id: &str,
    ) -> BoxFuture<'static, Result<TurnLookup, AgentError>> {
        let (this, thread, op) = (self.clone(), thread_id.to_owned(), operation_id.to_owned());
        async move {
            let conn = this.connection().await?;
            let list = ThreadTurnsList {
                thread_id: thread,
                items_view: TurnItemsView::Full,
            };
            let history = conn
                .call(&list, this.settings().request_timeout)
                .await
                .map_err(|e| AgentError::Unavailable(format!("thread/turns/list failed: {e}")))?;
            let ours = history.data.into_iter().find(|turn| {
                turn.items.iter().any(|i| {
                    matches!(i, ThreadItem::UserMessage(m)
                        if m.client_id.as_deref() == Some(op.as_str()))
                })
            });
            let Some(turn) = ours else {
                return Ok(TurnLookup::Missing);
            };
            let turn_id = turn.id.clone();
            Ok(match turn.status {
                TurnStatus::Completed => TurnLookup::Completed {
                    final_text: turn.last_agent_text(),
                    turn_id,
                },
                TurnStatus::Interrupted => TurnLookup::Interrupted { turn_id },
                TurnStatus::InProgress => TurnLookup::Running { turn_id },
                TurnStatus::Failed | TurnStatus::Unknown => TurnLookup::Failed {
                    denial: turn.error.as_ref().and_then(|e| e.denial()),
                    error: turn
                        .error
                        .map(|e| e.message)
                        .unwrap_or_else(|| "failed".to_owned()),
                    turn_id,
                },
            })
        }
        .boxed()
    }
}
