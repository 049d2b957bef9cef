//! Running one call on this worker: the agent runtime's calls on the local
//! Codex, the workspace calls on the worker's own workspaces. Folders cross
//! the wire relative to the workspace root and are checked to stay under it.

use super::journal::{Journal, TurnState};
use crate::agent::remote::convert;
use crate::agent::{Agent, AgentError, ReviewRequest, SteerRequest, ThreadRequest, TurnRequest};
use crate::agent::{ToolAnswer, TurnEvent, TurnStarted};
use crate::domain::worktree::{TreeState, WorktreeId};
use crate::domain::{OperationId, ResourceKey, ResourceKind};
use crate::worker_api::{self as wire, CallBody, Outcome, Value};
use crate::workspace::WorkspaceManager;
use crate::workspace::{Checkout, Disposition, RepoSpec, SessionTree, WorkspaceError};
use secrecy::SecretString;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

mod sessions;

/// What a call runs against.
#[derive(Clone)]
pub struct Runtime {
    pub agent: Arc<dyn Agent>,
    /// `workspace_root`, resolved.
    pub root: PathBuf,
    pub workspace_root: PathBuf,
    pub gitea_url: Option<String>,
    /// The worker's own Gitea token: reading (cloning) is all it needs.
    pub gitea_token: Option<SecretString>,
    pub journal: Journal,
}

/// A started turn whose events the caller pumps to the server.
pub struct Pump {
    pub stream: String,
    pub events: futures_util::stream::BoxStream<'static, TurnEvent>,
}

fn refused(message: impl Into<String>) -> Outcome {
    Outcome::Refused {
        message: message.into(),
    }
}

/// `rel` under the root, or why not.
pub fn under_root(root: &Path, rel: &str) -> Result<PathBuf, Outcome> {
    let path = Path::new(rel);
    let plain = !rel.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(refused(format!(
            "working folder {rel:?} is not a plain folder under this worker's workspace_root"
        )));
    }
    Ok(root.join(path))
}

fn relative(root: &Path, path: &Path) -> Result<String, Outcome> {
    crate::agent::remote::relative_cwd(root, path).ok_or_else(|| {
        refused(format!(
            "the prepared folder {} is not under workspace_root {}",
            path.display(),
            root.display()
        ))
    })
}

/// Why a thread meant for the Codex home `wanted` is not opened on this
/// worker, whose home is `mine` (`None`: it may be; either side unknown
/// cannot tell). Nothing reaches Codex, so the server may plan again.
fn other_home(wanted: Option<&str>, mine: Option<&str>) -> Option<Outcome> {
    match (wanted, mine) {
        (Some(wanted), Some(mine)) if wanted != mine => Some(Outcome::Unavailable {
            message: format!(
                "the thread is meant for Codex home {wanted}, and this worker runs Codex home \
                 {mine} (the repository's lease moved between workers); the server plans the \
                 session's thread again for this worker"
            ),
        }),
        _ => None,
    }
}

fn ok(value: Value) -> Outcome {
    Outcome::Ok { value }
}

fn workspace_failed(e: WorkspaceError) -> Outcome {
    let disposition = match e.disposition() {
        Disposition::CannotName => "cannot_name",
        Disposition::NeedsOperator => "needs_operator",
        Disposition::Transient => "transient",
        Disposition::Permanent => "permanent",
    };
    Outcome::WorkspaceFailed {
        disposition: disposition.into(),
        code: e.code().into(),
        message: e.to_string(),
    }
}

fn worktree(w: &wire::Worktree) -> Result<WorktreeId, Outcome> {
    let kind = ResourceKind::parse(&w.kind).map_err(|e| refused(e.to_string()))?;
    Ok(WorktreeId {
        kind,
        number: w.number,
        child: w.child,
    })
}

impl Runtime {
    fn workspaces(&self, instance: &str) -> Result<WorkspaceManager, Outcome> {
        let mut m = WorkspaceManager::new(
            self.workspace_root.clone(),
            instance.to_owned(),
            self.gitea_token.clone(),
        );
        if let Some(url) = &self.gitea_url {
            m = m.with_gitea_url(url).map_err(workspace_failed)?;
        }
        Ok(m)
    }

    /// Runs `body` (call `call_id` on `repository`); the outcome, and the
    /// turn it started, whose events are to be sent.
    pub async fn run(
        &self,
        call_id: &str,
        repository: &str,
        body: CallBody,
    ) -> (Outcome, Option<Pump>) {
        match self.run_inner(call_id, repository, body).await {
            Ok((value, pump)) => (ok(value), pump),
            Err(outcome) => (outcome, None),
        }
    }

    async fn run_inner(
        &self,
        call_id: &str,
        repository: &str,
        body: CallBody,
    ) -> Result<(Value, Option<Pump>), Outcome> {
        let agent = self.agent.clone();
        let err = convert::error_to_wire;
        let done = |r: Result<(), AgentError>| r.map(|()| (Value::Done, None)).map_err(err);
        match body {
            CallBody::EnsureThread {
                session_key,
                thread_id,
                fork_from,
                cwd,
                terms,
                history,
                home,
            } => {
                let key = ResourceKey::parse(&session_key).map_err(|e| refused(e.to_string()))?;
                if let Some(elsewhere) = other_home(home.as_deref(), agent.home().as_deref()) {
                    return Err(elsewhere);
                }
                let req = ThreadRequest {
                    session_key: key,
                    thread_id,
                    fork_from,
                    cwd: under_root(&self.root, &cwd)?,
                    terms: convert::terms_from_wire(terms),
                    history: convert::exchanges_from_wire(history),
                    home,
                };
                let thread_id = agent.ensure_thread(req).await.map_err(err)?;
                Ok((Value::Thread { thread_id }, None))
            }
            CallBody::StartTurn {
                thread_id,
                operation_id,
                text,
                cwd,
                terms,
                ..
            } => {
                let op = OperationId::parse(&operation_id).map_err(|e| refused(e.to_string()))?;
                let req = TurnRequest {
                    thread_id: thread_id.clone(),
                    operation_id: op,
                    text,
                    cwd: under_root(&self.root, &cwd)?,
                    terms: convert::terms_from_wire(terms),
                    attempt: None,
                };
                // Journalled before Codex hears of it: after a crash, a turn
                // that may have run is known, and never sent again.
                self.journal
                    .turn_sent(call_id, repository, &thread_id, &operation_id)
                    .map_err(|e| refused(e.to_string()))?;
                let started = agent.start_turn(req).await;
                self.turn_started(call_id, started)
            }
            CallBody::StartReview {
                thread_id,
                base_branch,
                cwd,
                terms,
                ..
            } => {
                let req = ReviewRequest {
                    thread_id: thread_id.clone(),
                    base_branch,
                    cwd: under_root(&self.root, &cwd)?,
                    terms: convert::terms_from_wire(terms),
                    attempt: None,
                };
                self.journal
                    .turn_sent(call_id, repository, &thread_id, "review")
                    .map_err(|e| refused(e.to_string()))?;
                let started = agent.start_review(req).await;
                self.turn_started(call_id, started)
            }
            CallBody::Interrupt { thread_id, turn_id } => {
                done(agent.interrupt(&thread_id, &turn_id).await)
            }
            CallBody::SteerTurn {
                thread_id,
                expected_turn_id,
                operation_id,
                text,
            } => {
                let op = OperationId::parse(&operation_id).map_err(|e| refused(e.to_string()))?;
                let turn_id = agent
                    .steer_turn(SteerRequest {
                        thread_id,
                        expected_turn_id,
                        operation_id: op,
                        text,
                    })
                    .await
                    .map_err(err)?;
                Ok((
                    Value::Turn {
                        turn_id,
                        worker_id: None,
                    },
                    None,
                ))
            }
            CallBody::RevertThread {
                thread_id,
                before_turn_id,
            } => done(agent.revert_thread(&thread_id, &before_turn_id).await),
            CallBody::DecideApproval { key, accept } => {
                done(agent.decide_approval(&key, accept).await)
            }
            CallBody::AnswerTool { key, success, text } => {
                done(agent.answer_tool(&key, ToolAnswer { success, text }).await)
            }
            CallBody::Reset => {
                agent.reset().await;
                Ok((Value::Done, None))
            }
            CallBody::LookupTurn {
                thread_id,
                operation_id,
            } => {
                let lookup = agent
                    .lookup_turn(&thread_id, &operation_id)
                    .await
                    .map_err(err)?;
                Ok((
                    Value::Lookup {
                        lookup: convert::lookup_to_wire(lookup),
                    },
                    None,
                ))
            }
            CallBody::PrepareSession {
                instance,
                owner,
                name,
                clone_url,
                checkout,
                worktree: w,
                recorded,
            } => {
                let workspaces = self.workspaces(&instance)?;
                let id = worktree(&w)?;
                let spec = RepoSpec {
                    owner,
                    name,
                    clone_url,
                };
                let checkout = match checkout {
                    wire::Checkout::DefaultBranch { name } => Checkout::DefaultBranch { name },
                    wire::Checkout::PullRequest { number, head_ref } => {
                        Checkout::PullRequest { number, head_ref }
                    }
                };
                let recorded = recorded.map(|t| TreeState {
                    head: t.head,
                    tree: t.tree,
                });
                let prepared = tokio::task::spawn_blocking(move || {
                    workspaces.prepare_session(
                        &spec,
                        &checkout,
                        SessionTree {
                            id,
                            recorded: recorded.as_ref(),
                        },
                    )
                })
                .await
                .map_err(|e| refused(format!("preparing the workspace stopped: {e}")))?
                .map_err(workspace_failed)?;
                Ok((
                    Value::Workspace {
                        cwd: relative(&self.root, &prepared.path)?,
                        head: Some(prepared.head),
                    },
                    None,
                ))
            }
            CallBody::Scratch {
                instance,
                owner,
                name,
                worktree: w,
            } => {
                let workspaces = self.workspaces(&instance)?;
                let id = worktree(&w)?;
                let path =
                    tokio::task::spawn_blocking(move || workspaces.scratch_for(&owner, &name, id))
                        .await
                        .map_err(|e| refused(format!("making the folder stopped: {e}")))?
                        .map_err(workspace_failed)?;
                Ok((
                    Value::Workspace {
                        cwd: relative(&self.root, &path)?,
                        head: None,
                    },
                    None,
                ))
            }
            body @ (CallBody::BaseInstructions { .. }
            | CallBody::TreeState { .. }
            | CallBody::RetireSession { .. }) => Ok((self.session_workspace(body).await?, None)),
        }
    }

    fn turn_started(
        &self,
        call_id: &str,
        started: Result<TurnStarted, AgentError>,
    ) -> Result<(Value, Option<Pump>), Outcome> {
        match started {
            Ok(t) => {
                if let Err(e) = self.journal.turn_answered(call_id, Some(&t.turn_id)) {
                    tracing::error!(error = %e, "the journal did not take a turn's id");
                }
                Ok((
                    Value::Turn {
                        turn_id: t.turn_id,
                        worker_id: None,
                    },
                    Some(Pump {
                        stream: call_id.to_owned(),
                        events: t.events,
                    }),
                ))
            }
            Err(e) => {
                // Nothing ran unless the answer is uncertain: then the
                // journal keeps the turn, as one to account for.
                if !matches!(e, AgentError::Uncertain(_)) {
                    if let Err(je) = self.journal.turn_answered(call_id, None) {
                        tracing::error!(error = %je, "the journal did not take a refused turn");
                    }
                }
                Err(convert::error_to_wire(e))
            }
        }
    }

    /// Records how a turn ended, from its last event.
    pub fn turn_ended(&self, stream: &str, event: &wire::Event) {
        let (state, text) = match event {
            wire::Event::Completed { final_text, .. } => {
                (TurnState::Completed, final_text.as_deref())
            }
            wire::Event::Failed { .. } => (TurnState::Failed, None),
            wire::Event::Interrupted { .. } => (TurnState::Interrupted, None),
            _ => return,
        };
        if let Err(e) = self.journal.turn_ended(stream, state, text) {
            tracing::error!(error = %e, "the journal did not take a turn's end");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_meant_for_another_home_is_not_opened_here() {
        assert!(matches!(
            other_home(Some("home-a"), Some("home-b")),
            Some(Outcome::Unavailable { .. })
        ));
        for (wanted, mine) in [
            (Some("home-a"), Some("home-a")),
            (None, Some("home-a")),
            (Some("home-a"), None),
            (None, None),
        ] {
            assert_eq!(other_home(wanted, mine), None, "{wanted:?} {mine:?}");
        }
    }

    #[test]
    fn only_plain_folders_under_the_root_are_taken() {
        let root = Path::new("/w");
        assert_eq!(
            under_root(root, "worktrees/default/acme/x/issue-1").unwrap(),
            PathBuf::from("/w/worktrees/default/acme/x/issue-1")
        );
        for bad in ["", "/etc", "../x", "a/../../x", "./a"] {
            assert!(under_root(root, bad).is_err(), "{bad}");
        }
    }
}
