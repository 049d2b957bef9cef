//! The live actor tree as the admin API shows it (`GET /api/gitea-workflow/actors`).
//! Each actor updates its own entry; the registry assembles the tree.

use crate::domain::TaskId;
use serde::Serialize;
use std::fmt;

/// What a repository actor is doing, as the admin API and the web UI show it
/// (the UI colours each by its snake_case name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepoActorStatus {
    /// Started by the registry, before its first scheduling pass ends.
    Starting,
    /// Nothing to run.
    Idle,
    /// A task of the repository runs in this process.
    Busy,
    /// A task runs, but another process holds the repository's lease.
    BusyElsewhere,
    /// A task waits in `blocked_workspace` for an operator; nothing else starts.
    Blocked,
    /// A task waits in `needs_reconciliation` for an operator; nothing else starts.
    Uncertain,
    /// Intake is paused for every repository.
    Paused,
    /// The repository is disabled.
    Disabled,
    /// The process may start no task (see [`RegistryHealth::held`]).
    Held,
    /// The agent runtime cannot run turns now (see [`RegistryHealth::held`]):
    /// tasks wait, and start once it can.
    AgentUnavailable,
    /// The repository took `repo_turns_per_day` turns today (UTC): its
    /// tasks wait `queued` until the next day.
    DayLimit,
    /// Restarted after a fault, before its next scheduling pass ends.
    Restarting,
    /// The server is stopping: nothing new starts here; queued tasks wait
    /// for the next start.
    Draining,
    /// The circuit breaker is open: tasks wait `queued` until it closes.
    CircuitOpen,
    /// No actor of this process reports on the repository (its sessions do),
    /// or its entry could not be read.
    #[default]
    Unknown,
}

impl RepoActorStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RepoActorStatus::Starting => "starting",
            RepoActorStatus::Idle => "idle",
            RepoActorStatus::Busy => "busy",
            RepoActorStatus::BusyElsewhere => "busy_elsewhere",
            RepoActorStatus::Blocked => "blocked",
            RepoActorStatus::Uncertain => "uncertain",
            RepoActorStatus::Paused => "paused",
            RepoActorStatus::Disabled => "disabled",
            RepoActorStatus::Held => "held",
            RepoActorStatus::AgentUnavailable => "agent_unavailable",
            RepoActorStatus::DayLimit => "day_limit",
            RepoActorStatus::Restarting => "restarting",
            RepoActorStatus::Draining => "draining",
            RepoActorStatus::CircuitOpen => "circuit_open",
            RepoActorStatus::Unknown => "unknown",
        }
    }
}

impl fmt::Display for RepoActorStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a session actor is doing, as the admin API and the web UI show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionActorStatus {
    /// Started by the registry, before it has looked at the store.
    Starting,
    /// No drive is running.
    Idle,
    /// A drive is running (a turn, its verification, its settling).
    Busy,
    /// The running turn waits for an operator's approval.
    AwaitingApproval,
    /// Restarted after a fault, before its next drive.
    Restarting,
    /// Its entry could not be read.
    #[default]
    Unknown,
}

impl SessionActorStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionActorStatus::Starting => "starting",
            SessionActorStatus::Idle => "idle",
            SessionActorStatus::Busy => "busy",
            SessionActorStatus::AwaitingApproval => "awaiting_approval",
            SessionActorStatus::Restarting => "restarting",
            SessionActorStatus::Unknown => "unknown",
        }
    }
}

impl fmt::Display for SessionActorStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    pub status: SessionActorStatus,
    pub thread_id: Option<String>,
    pub active_task: Option<TaskId>,
    pub active_turn: Option<String>,
    /// The drain lane that starts turns for queued work, one at a time.
    pub normal_lane: LaneHealth,
    /// The lane that sends a `/steer` into the running turn.
    pub steer_lane: LaneHealth,
    /// The lane that carries out turnless commands and comment changes.
    pub command_lane: LaneHealth,
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
    pub status: RepoActorStatus,
    pub lease_holder: Option<String>,
    pub lease_id: Option<String>,
    pub lease_expires_at: Option<String>,
    pub queue_depth: i64,
    pub running_task: Option<TaskId>,
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
    /// This process's `serverId`: the same name as `owner`, under the name
    /// the registry of server processes gives it.
    pub server_id: String,
    pub runtime: String,
    pub repositories: Vec<RepoHealth>,
    pub session_actors: usize,
    pub repo_actors: usize,
    /// Why no task may start in this process now (empty: tasks run): the
    /// configuration's blockers, then the agent runtime's.
    pub held: Vec<crate::readiness::Blocker>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The admin API and the web UI read the statuses by these names.
    #[test]
    fn statuses_serialise_as_their_snake_case_names() {
        for status in [
            RepoActorStatus::Starting,
            RepoActorStatus::Idle,
            RepoActorStatus::Busy,
            RepoActorStatus::BusyElsewhere,
            RepoActorStatus::Blocked,
            RepoActorStatus::Uncertain,
            RepoActorStatus::Paused,
            RepoActorStatus::Disabled,
            RepoActorStatus::Held,
            RepoActorStatus::AgentUnavailable,
            RepoActorStatus::Restarting,
            RepoActorStatus::Unknown,
        ] {
            assert_eq!(serde_json::json!(status), status.as_str());
        }
        for status in [
            SessionActorStatus::Starting,
            SessionActorStatus::Idle,
            SessionActorStatus::Busy,
            SessionActorStatus::AwaitingApproval,
            SessionActorStatus::Restarting,
            SessionActorStatus::Unknown,
        ] {
            assert_eq!(serde_json::json!(status), status.as_str());
        }
        assert_eq!(
            serde_json::json!(RepoActorStatus::BusyElsewhere),
            "busy_elsewhere"
        );
        assert_eq!(
            serde_json::json!(SessionActorStatus::AwaitingApproval),
            "awaiting_approval"
        );
    }
}
