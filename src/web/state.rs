//! What every HTTP handler can reach: built once by `app.rs` and shared by the
//! web view, the admin API and the webhook.

use crate::config::{Config, ServerSecrets};
use crate::store::Store;
use crate::webhook::event::Normalizer;
use std::sync::Arc;

/// What every handler can reach.
pub struct AppState {
    pub config: Arc<Config>,
    /// This process's `serverId`: the holder name of its leases and
    /// attempts, and its row in the registry of server processes.
    pub server_id: String,
    /// The actor tree; `None` when no agent runtime is configured (intake only).
    pub registry: Option<actix::Addr<crate::actors::registry::Registry>>,
    /// Whether the agent runtime can run turns now, as it last found
    /// (`/readyz`, the overview's blockers).
    pub agent: crate::agent::Availability,
    /// Signs the agent runtime in and out (`/api/gitea-workflow/codex`);
    /// `None` unless the runtime is Codex.
    pub account: Option<std::sync::Arc<dyn crate::agent::account::AccountControl>>,
    pub secrets: ServerSecrets,
    pub store: Store,
    pub normalizer: Normalizer,
    /// The web view's signed session cookies.
    pub sessions: crate::web::auth::Sessions,
    /// Live updates for `GET /api/gitea-workflow/events`.
    pub live: crate::web::live::Hub,
    /// Refused webhooks: counted, and a bounded sample audited.
    pub refusals: crate::web::refusals::Refusals,
    /// The circuit breaker the actors report to (closed for good without
    /// an agent runtime).
    pub circuit: crate::agent::circuit::Circuit,
    /// The agent calls waiting for remote workers (`agent_runtime =
    /// "remote"`; empty otherwise), shared with the runtime that makes them.
    pub worker_calls: crate::actors::worker_calls::WorkerCalls,
}

impl AppState {
    /// After a commit that gives a repository work to schedule (a task
    /// queued, enabled, resumed): this process's actor and every other
    /// process on the same database hear of it. The one that holds, or can
    /// take, the repository acts at once; the sweep is only the safety net.
    pub fn wake_repo(&self, repo_key: &crate::domain::RepoKey) {
        self.store.signal(crate::store::signals::Signal::Repo {
            repo_key: repo_key.clone(),
        });
        if let Some(registry) = &self.registry {
            registry.do_send(crate::actors::registry::Notify {
                repo_key: repo_key.clone(),
            });
        }
    }

    /// After a commit that may give every repository work (the deployment's
    /// pause lifted): every process sweeps the store at once.
    pub fn wake_everything(&self) {
        self.store.signal(crate::store::signals::Signal::Sweep);
        if let Some(registry) = &self.registry {
            registry.do_send(crate::actors::registry::Sweep);
        }
    }
}
