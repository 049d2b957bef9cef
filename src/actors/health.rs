//! The live actor tree as the admin API shows it (`GET /api/gitea-workflow/actors`).
//! Each actor updates its own entry; the registry assembles the tree.

use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaneHealth {
    pub busy: bool,
    pub followup: bool,
    pub passes: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionHealth {
    pub session_key: String,
    /// idle, busy, restarting, uncertain
    pub status: String,
    pub thread_id: Option<String>,
    pub active_task: Option<String>,
    pub active_turn: Option<String>,
    /// The drain lane that starts turns for queued work, one at a time
    /// (`normal`: steering, when it comes, gets a lane of its own).
    pub normal_lane: LaneHealth,
    pub outbox_depth: i64,
    pub mailbox_backlog: i64,
    pub starts: u64,
    pub restarts: u64,
    pub last_event_at: Option<String>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RepoHealth {
    pub repo_key: String,
    /// idle, busy, blocked, uncertain, paused, disabled, restarting, held
    /// (the process may start no task: see [`RegistryHealth::held`])
    pub status: String,
    pub lease_holder: Option<String>,
    pub lease_id: Option<String>,
    pub lease_expires_at: Option<String>,
    pub queue_depth: i64,
    pub running_task: Option<String>,
    /// Scheduling passes finished since this process started the actor. The
    /// second one to finish after a change began after it and so saw it:
    /// waiting for two tells a reader what the scheduler made of the change,
    /// including that it started nothing it must not.
    pub passes: u64,
    pub mailbox_backlog: i64,
    pub starts: u64,
    pub restarts: u64,
    pub last_event_at: Option<String>,
    pub last_error: Option<String>,
    pub sessions: Vec<SessionHealth>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryHealth {
    pub owner: String,
    pub runtime: String,
    pub repositories: Vec<RepoHealth>,
    pub session_actors: usize,
    pub repo_actors: usize,
    /// Why no task may start in this process (empty: tasks run).
    pub held: Vec<crate::readiness::Blocker>,
}
