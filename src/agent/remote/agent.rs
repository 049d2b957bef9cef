//! [`RemoteAgent`]: the agent runtime whose calls run on remote workers.
//!
//! Routing needs no table that a restart would lose: the thread ids (and the
//! approval and tool keys) it hands the session carry the repository they
//! belong to (`remote:<owner>/<name>:<id>`), so any later call on them goes
//! to whichever worker holds that repository's lease then. Working folders
//! travel relative to the workspace root: the server names them as its own
//! workspaces would, and the worker finds the same layout under its own
//! `workspace_root`.

use super::convert;
use super::hub::CallRoute;
use super::reference::RemoteRef;
use crate::agent::{
    Agent, AgentError, ReviewRequest, SteerRequest, ThreadRequest, ToolAnswer, TurnEvent,
    TurnLookup, TurnRequest, TurnStarted,
};
use crate::domain::worker::RepoName;
use crate::domain::worker::WorkerId;
use crate::domain::{RepoKey, ResourceKey};
use crate::worker_api::{AttemptIdentity, CallBody, Event, Value};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// `cwd` relative to the workspace root (`None`: it is not under it, and
/// the worker could not find it).
pub fn relative_cwd(root: &Path, cwd: &Path) -> Option<String> {
    let rel = cwd.strip_prefix(root).ok()?;
    let plain = rel.components().count() > 0
        && rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    plain.then(|| rel.to_string_lossy().into_owned())
}

/// The reference a session handed back, read (refused if this runtime
/// did not make it).
fn reference(what: &str, text: &str) -> Result<RemoteRef, AgentError> {
    text.parse::<RemoteRef>()
        .map_err(|e| AgentError::Refused(format!("{what}: {e}")))
}

/// The repository whose lease routes the calls of `session`'s threads.
fn repository_of(session: &ResourceKey) -> Result<RepoName, AgentError> {
    let repo = session.repo();
    RepoName::parse(&format!("{}/{}", repo.owner(), repo.name())).map_err(|e| {
        AgentError::Refused(format!(
            "session {session} names no repository a worker can lease: {}",
            e.message
        ))
    })
}

/// The runtime; cheap to clone.
#[derive(Clone)]
pub struct RemoteAgent {
    calls: Arc<dyn CallRoute>,
    /// The server's `workspace_root`, resolved: working folders are sent
    /// relative to it.
    root: PathBuf,
    /// How long a call waits for a worker's answer before it is given up
    /// (unavailable if no worker took it, uncertain if one did).
    timeout: Duration,
}

impl RemoteAgent {
    pub fn new(calls: Arc<dyn CallRoute>, root: PathBuf, timeout: Duration) -> RemoteAgent {
        RemoteAgent {
            calls,
            root,
            timeout,
        }
    }

    fn cwd(&self, cwd: &Path) -> Result<String, AgentError> {
        relative_cwd(&self.root, cwd).ok_or_else(|| {
            AgentError::Refused(format!(
                "working folder {} is not under workspace_root {}; a remote worker cannot find it",
                cwd.display(),
                self.root.display()
            ))
        })
    }

    /// The repository whose worker runs calls on the reference `text` (a
    /// thread, approval or tool key this runtime handed out), with `body`
    /// built from the worker's own id in it.
    fn route(
        &self,
        what: &str,
        text: &str,
        body: impl FnOnce(&str) -> Result<CallBody, AgentError>,
    ) -> Result<(RepoName, CallBody), AgentError> {
        let r = reference(what, text)?;
        let body = body(r.id())?;
        Ok((r.repository().clone(), body))
    }

    /// [`Self::call`] on `reference` (see [`Self::route`]).
    fn call_on(
        &self,
        what: &str,
        reference: &str,
        body: impl FnOnce(&str) -> Result<CallBody, AgentError>,
    ) -> BoxFuture<'static, Result<Value, AgentError>> {
        match self.route(what, reference, body) {
            Ok((repository, body)) => self.call(&repository, body),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }

    /// [`Self::start`] on the thread `reference` (see [`Self::route`]).
    fn start_on(
        &self,
        reference: &str,
        body: impl FnOnce(&str) -> Result<CallBody, AgentError>,
    ) -> BoxFuture<'static, Result<TurnStarted, AgentError>> {
        match self.route("thread", reference, body) {
            Ok((repository, body)) => self.start(repository, body),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }

    /// Sends a call and waits for its answer (or gives it up).
    fn call(
        &self,
        repository: &RepoName,
        body: CallBody,
    ) -> BoxFuture<'static, Result<Value, AgentError>> {
        let answered = self
            .calls
            .call(repository.as_str(), body, false, self.timeout);
        Box::pin(async move { convert::outcome_to_result(answered.await?.outcome) })
    }

    /// Sends a call that starts a turn, and follows its events.
    fn start(
        &self,
        repository: RepoName,
        body: CallBody,
    ) -> BoxFuture<'static, Result<TurnStarted, AgentError>> {
        let kind = body.kind();
        let answered = self
            .calls
            .call(repository.as_str(), body, true, self.timeout);
        Box::pin(async move {
            let answered = answered.await?;
            let value = convert::outcome_to_result(answered.outcome)?;
            let Value::Turn { turn_id, worker_id } = value else {
                return Err(convert::unexpected(kind, &value));
            };
            let events = answered
                .events
                .unwrap_or_else(|| Box::pin(futures_util::stream::empty()));
            Ok(TurnStarted {
                turn_id,
                events: event_stream(repository, events),
                runner: worker_id.as_deref().and_then(WorkerId::parse),
            })
        })
    }
}

/// A turn's events, with the keys of its requests made routable.
fn event_stream(
    repository: RepoName,
    events: BoxStream<'static, Event>,
) -> BoxStream<'static, TurnEvent> {
    use futures_util::StreamExt;
    // An empty key (no worker makes one) stays empty, and its answer is
    // refused as naming nothing of this runtime's.
    let routable = move |key: String| {
        RemoteRef::new(repository.clone(), key).map_or_else(String::new, |r| r.to_string())
    };
    events
        .filter_map(|e| futures_util::future::ready(convert::from_wire(e)))
        .map(move |e| match e {
            TurnEvent::ApprovalRequested {
                seq,
                key,
                kind,
                detail,
            } => TurnEvent::ApprovalRequested {
                seq,
                key: routable(key),
                kind,
                detail,
            },
            TurnEvent::ToolRequested {
                seq,
                key,
                tool,
                arguments,
            } => TurnEvent::ToolRequested {
                seq,
                key: routable(key),
                tool,
                arguments,
            },
            other => other,
        })
        .boxed()
}

fn attempt_to_wire(a: Option<&crate::agent::AttemptRef>) -> Option<AttemptIdentity> {
    a.map(|a| AttemptIdentity {
        task_id: a.task_id.to_string(),
        attempt_id: a.attempt_id.clone(),
    })
}

fn done(v: Value, kind: &str) -> Result<(), AgentError> {
    match v {
        Value::Done => Ok(()),
        other => Err(convert::unexpected(kind, &other)),
    }
}

impl Agent for RemoteAgent {
    fn name(&self) -> &'static str {
        "remote"
    }

    /// The home of the worker that holds `repo`'s lease now: the one a
    /// call queued now goes to (unless the lease moves meanwhile, which
    /// [`ThreadRequest::home`] guards).
    fn home_for(&self, repo: &RepoKey) -> BoxFuture<'static, Option<String>> {
        match RepoName::parse(&format!("{}/{}", repo.owner(), repo.name())) {
            Ok(repository) => self.calls.holder_home(repository.as_str()),
            Err(_) => Box::pin(async { None }),
        }
    }

    fn ensure_thread(&self, req: ThreadRequest) -> BoxFuture<'static, Result<String, AgentError>> {
        let prepared = (|| {
            let repository = repository_of(&req.session_key)?;
            let own = |t: &Option<String>| {
                t.as_deref()
                    .map(|t| reference("thread", t).map(|r| r.id().to_owned()))
                    .transpose()
            };
            let body = CallBody::EnsureThread {
                session_key: req.session_key.to_string(),
                thread_id: own(&req.thread_id)?,
                fork_from: own(&req.fork_from)?,
                cwd: self.cwd(&req.cwd)?,
                terms: convert::terms_to_wire(&req.terms),
                history: convert::exchanges_to_wire(&req.history),
                home: req.home.clone(),
            };
            Ok::<_, AgentError>((repository, body))
        })();
        let (repository, body) = match prepared {
            Ok(p) => p,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let call = self.call(&repository, body);
        Box::pin(async move {
            match call.await? {
                Value::Thread { thread_id } => RemoteRef::new(repository, thread_id)
                    .map(|r| r.to_string())
                    .ok_or_else(|| {
                        AgentError::Uncertain(
                            "the remote worker answered ensure_thread with an empty thread id; \
                             check that the worker runs the server's version"
                                .into(),
                        )
                    }),
                other => Err(convert::unexpected("ensure_thread", &other)),
            }
        })
    }

    fn start_turn(&self, req: TurnRequest) -> BoxFuture<'static, Result<TurnStarted, AgentError>> {
        self.start_on(&req.thread_id, |thread| {
            Ok(CallBody::StartTurn {
                thread_id: thread.to_owned(),
                operation_id: req.operation_id.to_string(),
                text: req.text.clone(),
                cwd: self.cwd(&req.cwd)?,
                terms: convert::terms_to_wire(&req.terms),
                attempt: attempt_to_wire(req.attempt.as_ref()),
            })
        })
    }

    fn start_review(
        &self,
        req: ReviewRequest,
    ) -> BoxFuture<'static, Result<TurnStarted, AgentError>> {
        self.start_on(&req.thread_id, |thread| {
            Ok(CallBody::StartReview {
                thread_id: thread.to_owned(),
                base_branch: req.base_branch.clone(),
                cwd: self.cwd(&req.cwd)?,
                terms: convert::terms_to_wire(&req.terms),
                attempt: attempt_to_wire(req.attempt.as_ref()),
            })
        })
    }

    fn interrupt(
        &self,
        thread_id: &str,
        turn_id: &str,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let call = self.call_on("thread", thread_id, |thread| {
            Ok(CallBody::Interrupt {
                thread_id: thread.to_owned(),
                turn_id: turn_id.to_owned(),
            })
        });
        Box::pin(async move { done(call.await?, "interrupt") })
    }

    fn steer_turn(&self, req: SteerRequest) -> BoxFuture<'static, Result<String, AgentError>> {
        let call = self.call_on("thread", &req.thread_id, |thread| {
            Ok(CallBody::SteerTurn {
                thread_id: thread.to_owned(),
                expected_turn_id: req.expected_turn_id.clone(),
                operation_id: req.operation_id.to_string(),
                text: req.text.clone(),
            })
        });
        Box::pin(async move {
            match call.await? {
                Value::Turn { turn_id, .. } => Ok(turn_id),
                other => Err(convert::unexpected("steer_turn", &other)),
            }
        })
    }

    fn revert_thread(
        &self,
        thread_id: &str,
        before_turn_id: &str,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let call = self.call_on("thread", thread_id, |thread| {
            Ok(CallBody::RevertThread {
                thread_id: thread.to_owned(),
                before_turn_id: before_turn_id.to_owned(),
            })
        });
        Box::pin(async move { done(call.await?, "revert_thread") })
    }

    fn decide_approval(
        &self,
        key: &str,
        accept: bool,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let call = self.call_on("approval", key, |key| {
            Ok(CallBody::DecideApproval {
                key: key.to_owned(),
                accept,
            })
        });
        Box::pin(async move { done(call.await?, "decide_approval") })
    }

    fn answer_tool(
        &self,
        key: &str,
        answer: ToolAnswer,
    ) -> BoxFuture<'static, Result<(), AgentError>> {
        let call = self.call_on("tool call", key, |key| {
            Ok(convert::tool_answer_body(key, &answer))
        });
        Box::pin(async move { done(call.await?, "answer_tool") })
    }

    /// An interrupt that was never confirmed ends the app-server that runs
    /// the turn: every worker leasing a repository is told to reset its
    /// Codex, as a local runtime resets its one process. Best effort: a
    /// worker that does not answer is left to its own lease.
    fn reset(&self) -> BoxFuture<'static, ()> {
        let this = self.clone();
        Box::pin(async move {
            let calls: Vec<_> = this
                .calls
                .leased_repositories()
                .await
                .into_iter()
                // The store keeps only names a worker could lease.
                .filter_map(|repo| RepoName::parse(&repo).ok())
                .map(|repo| (repo.clone(), this.call(&repo, CallBody::Reset)))
                .collect();
            for (repo, call) in calls {
                if let Err(e) = call.await {
                    tracing::warn!(repository = %repo.as_str(), error = %e, "a remote worker did not confirm its reset");
                }
            }
        })
    }

    fn lookup_turn(
        &self,
        thread_id: &str,
        operation_id: &str,
    ) -> BoxFuture<'static, Result<TurnLookup, AgentError>> {
        let call = self.call_on("thread", thread_id, |thread| {
            Ok(CallBody::LookupTurn {
                thread_id: thread.to_owned(),
                operation_id: operation_id.to_owned(),
            })
        });
        Box::pin(async move {
            match call.await? {
                Value::Lookup { lookup } => Ok(convert::lookup_from_wire(lookup)),
                other => Err(convert::unexpected("lookup_turn", &other)),
            }
        })
    }
}

#[cfg(test)]
mod tests;
