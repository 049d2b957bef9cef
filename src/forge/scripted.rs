//! A forge stand-in for tests and the scripted agent: confirms every reply,
//! or reports what the test sets.

use super::{Forge, ReplyCheck, ReplyQuery, ThreadContext, TriggerCheck};
use crate::agent::scripted::directive_args;
use crate::domain::ResourceKey;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A verifier that confirms every reply (for actor tests before the Gitea
/// verifier exists), or reports what the test sets.
#[derive(Clone)]
pub struct ScriptedForge {
    pub answer: Arc<Mutex<ReplyCheck>>,
    /// Commenters who may not trigger work (everyone else may).
    pub denied: Arc<Mutex<Vec<String>>>,
    /// Commenters whose permission cannot be checked (Gitea unreachable).
    pub unknown: Arc<Mutex<Vec<String>>>,
    /// What `thread_context` answers (an empty Issue unless a test sets it).
    pub context: Arc<Mutex<Result<ThreadContext, String>>>,
    /// Issues and pull requests that are closed (every other one is open).
    pub closed: Arc<Mutex<Vec<ResourceKey>>>,
}

impl Default for ScriptedForge {
    fn default() -> Self {
        ScriptedForge {
            answer: Arc::new(Mutex::new(ReplyCheck::Confirmed { comment_id: None })),
            denied: Arc::default(),
            unknown: Arc::default(),
            context: Arc::new(Mutex::new(Ok(ThreadContext::default()))),
            closed: Arc::default(),
        }
    }
}

impl Forge for ScriptedForge {
    /// Answers what the test set, unless the final text carries a
    /// `[verify:slow:MS]`, `[verify:missing]` or `[verify:unknown]` directive.
    fn verify(&self, query: ReplyQuery) -> BoxFuture<'static, ReplyCheck> {
        let answer = self
            .answer
            .lock()
            .map(|a| a.clone())
            .unwrap_or_else(|_| ReplyCheck::Unknown("verifier poisoned".into()));
        let text = query.final_text.unwrap_or_default();
        let directive: Option<Vec<String>> =
            directive_args(&text, "verify").map(|a| a.iter().map(|s| (*s).to_owned()).collect());
        async move {
            match directive.as_deref() {
                Some([slow, ms, ..]) if slow == "slow" => {
                    tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(1000))).await;
                    answer
                }
                Some([missing, ..]) if missing == "missing" => ReplyCheck::Missing,
                Some([unknown, ..]) if unknown == "unknown" => {
                    ReplyCheck::Unknown("scripted: query failed".into())
                }
                _ => answer,
            }
        }
        .boxed()
    }

    fn thread_context(
        &self,
        resource_key: ResourceKey,
    ) -> BoxFuture<'static, Result<ThreadContext, String>> {
        let _ = resource_key;
        let context = self
            .context
            .lock()
            .map(|c| c.clone())
            .unwrap_or_else(|_| Err("scripted forge poisoned".into()));
        async move { context }.boxed()
    }

    fn resource_open(&self, resource_key: ResourceKey) -> BoxFuture<'static, Result<bool, String>> {
        let open = self
            .closed
            .lock()
            .map(|c| !c.contains(&resource_key))
            .map_err(|_| "scripted forge poisoned".to_owned());
        async move { open }.boxed()
    }

    /// Everyone may trigger: the scripted runtime is the test mode, where no
    /// Gitea is asked and the tests drive permissions through the real forge.
    fn may_trigger(
        &self,
        resource_key: ResourceKey,
        author: String,
    ) -> BoxFuture<'static, TriggerCheck> {
        let _ = resource_key;
        let denied = self
            .denied
            .lock()
            .map(|d| d.contains(&author))
            .unwrap_or(true);
        let unknown = self
            .unknown
            .lock()
            .map(|d| d.contains(&author))
            .unwrap_or(true);
        async move {
            if unknown {
                TriggerCheck::Unknown("Gitea did not answer".into())
            } else if denied {
                TriggerCheck::Denied(format!("{author} may not trigger work here"))
            } else {
                TriggerCheck::Allowed
            }
        }
        .boxed()
    }
}
