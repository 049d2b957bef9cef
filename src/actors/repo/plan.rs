//! The repo actor's scheduling decision: what one pass does, from what it
//! saw in the store, the configuration and the agent runtime, with no I/O.

use crate::actors::health::RepoActorStatus;
use crate::domain::states::RepoStatus;
use crate::lifecycle::TaskState;

/// What one scheduling pass decides on, read together: the store's rows,
/// the configuration's hold and whether the agent runtime can run a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Snapshot {
    /// The configuration keeps this process from starting any task.
    pub(super) held: bool,
    /// The server is stopping: it starts no new task, and lets the ones
    /// under way finish.
    pub(super) draining: bool,
    /// The agent runtime can run a turn now.
    pub(super) agent_ready: bool,
    /// The circuit breaker is open: the runtime failed turn after turn.
    pub(super) circuit_open: bool,
    pub(super) paused: bool,
    /// The repository's status; `None` while the store has no row for it.
    pub(super) repo: Option<RepoStatus>,
    /// Tasks its sessions drive now (leased to a turn's end): each takes
    /// one of the repository's places.
    pub(super) running: usize,
    /// `max_parallel_turns_per_repo`.
    pub(super) places: usize,
    /// The oldest task waiting for an operator (it holds only its session).
    pub(super) awaiting: Option<TaskState>,
    /// A queued task of a session nothing holds is due.
    pub(super) next: bool,
    /// That task's session started `session_turns_per_minute` turns from
    /// comments in the last minute already.
    pub(super) next_storming: bool,
    /// The repository took `repo_turns_per_day` turns today (UTC).
    pub(super) day_spent: bool,
    /// A session's worktree outlived `worktree_retention_hours`.
    pub(super) retire: bool,
    /// Another process that still serves is where the next task's session
    /// goes on best ([`affinity`]), and the task is younger than
    /// [`AFFINITY_GRACE`]: that process gets the first go.
    pub(super) yield_to_previous: bool,
}

/// Which other process, if any, the next task's session is better off in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Affinity {
    /// None: its thread lives in this process's Codex home.
    Here,
    /// The one whose Codex home holds its thread: there the thread is
    /// resumed, anywhere else it is rebuilt from what the bridge stored.
    Home(String),
    /// It has no thread (or none whose home is known): the one that held
    /// the repository last, whose clone and worktrees are warm.
    PreviousHolder,
}

/// Where the next task's session goes on best, from the home its thread
/// lives in (as the session stored it) and this process's home.
pub(super) fn affinity(session_home: Option<&str>, here: Option<&str>) -> Affinity {
    match session_home {
        Some(home) if Some(home) == here => Affinity::Here,
        Some(home) => Affinity::Home(home.to_owned()),
        None => Affinity::PreviousHolder,
    }
}

/// How long a new task waits for the process that held its repository last,
/// which the same signal woke, before any other process may take it: long
/// enough for a wake-up across processes, short enough that a process that
/// serves but does not come costs little.
pub(super) const AFFINITY_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// What a scheduling pass does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    /// Start nothing, and give back the lease this process holds.
    Release(RepoActorStatus),
    /// Start nothing, and keep whatever lease this process holds.
    Keep(RepoActorStatus),
    /// Hold the lease, hand each running task to its session (which drives
    /// it, or recovers it by history), and when `claim`, claim the next task
    /// and prepare its worktree.
    Run { claim: bool },
    /// Lease the repository and remove the worktrees past their retention
    /// (the lease guards the shared `.git`), then give the lease back.
    Retire,
    /// Pause the next task's session (storm guard) instead of starting it,
    /// then look again.
    PauseNext,
}

/// The scheduling decision, from what the pass saw alone.
pub(super) fn decide(s: &Snapshot) -> Plan {
    if s.held {
        // Nothing may start here, not even a task an earlier run left leased
        // or running: its session would start or verify a turn this process
        // cannot vouch for. Every task stays where it is, for a process that can.
        return Plan::Release(RepoActorStatus::Held);
    }
    let Some(repo) = s.repo else {
        return Plan::Keep(RepoActorStatus::Idle);
    };
    if s.running > 0 && !s.agent_ready {
        // Their sessions cannot reach the agent to drive or recover them
        // now. The lease held for them stays held (a session may be mid-turn
        // on a process that is coming back); none is taken.
        return Plan::Keep(RepoActorStatus::AgentUnavailable);
    }
    // The limit of the day gates new turns, never one under way; a task
    // leased while the agent cannot run would only use up an attempt.
    let claim = s.next
        && !s.draining
        && !s.circuit_open
        && !s.paused
        && repo == RepoStatus::Active
        && !s.day_spent
        && s.agent_ready
        && s.running < s.places;
    if claim && s.running == 0 && s.yield_to_previous {
        // Nothing runs here: the lease is not ours to keep; the pass looks
        // again when the grace ends.
        return Plan::Keep(RepoActorStatus::BusyElsewhere);
    }
    if claim && s.next_storming {
        return Plan::PauseNext;
    }
    if s.running > 0 || claim {
        return Plan::Run { claim };
    }
    if s.draining {
        Plan::Release(RepoActorStatus::Draining)
    } else if s.paused {
        Plan::Release(RepoActorStatus::Paused)
    } else if repo != RepoStatus::Active {
        Plan::Release(RepoActorStatus::Disabled)
    } else if s.next && s.circuit_open {
        // Its tasks wait `queued`, using no attempt; the sweep looks again.
        Plan::Release(RepoActorStatus::CircuitOpen)
    } else if s.next && s.day_spent {
        // Its tasks wait `queued` (the actor's status says why); the sweep
        // looks again, and the next UTC day lets them start.
        Plan::Release(RepoActorStatus::DayLimit)
    } else if s.next {
        // The registry wakes us when the agent can run a turn.
        Plan::Release(RepoActorStatus::AgentUnavailable)
    } else if s.retire {
        Plan::Retire
    } else {
        // An operator decides on a blocked or uncertain task; only its
        // session waits for that.
        Plan::Release(match s.awaiting {
            Some(TaskState::BlockedWorkspace) => RepoActorStatus::Blocked,
            Some(_) => RepoActorStatus::Uncertain,
            None => RepoActorStatus::Idle,
        })
    }
}

#[cfg(test)]
mod tests;
