//! The actor tree: one [`registry::Registry`] per process, one
//! [`repo::RepoActor`] per repository (it holds the repository's lease and runs
//! its FIFO), one [`session::SessionActor`] per Issue/PR (it owns the agent
//! thread and the outbox's two drain lanes).
//!
//! Actor memory is a cache; the store is the truth. Every actor rebuilds what
//! it needs from the store when it (re)starts, so a restart after a fault loses
//! nothing but the message in flight.

pub mod drain;
pub mod gate;
pub mod health;
pub mod redact;
pub mod registry;
pub mod remote_workspaces;
pub mod repo;
pub mod session;
pub mod timing;
pub mod worker_calls;

use crate::agent::Agent;
use crate::config::Config;
use crate::domain::policy::{ApprovalPolicy, RepoPolicy, Sandbox};
use crate::forge::Forge;
use crate::store::Store;
use crate::workspace::{
    Checkout, RepoSpec, Retired, SessionTree, TreeState, WorkspaceError, WorkspaceManager,
    WorktreeId,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Timings and identity of this process's actors.
#[derive(Debug, Clone)]
pub struct ActorSettings {
    /// Lease owner id of this process, its `serverId`
    /// (`<instance>:<host>:<pid>:<random>`).
    pub owner: String,
    pub lease_ttl: Duration,
    pub heartbeat: Duration,
    /// How often the registry looks for work in the store (recovery, other instances).
    pub sweep: Duration,
    /// An idle session actor is stopped after this long (revived on demand).
    pub session_idle: Duration,
    /// Wait before a `retry_wait` task runs again.
    pub retry_backoff: Duration,
    /// Attempts a task gets before a transient failure becomes `failed`.
    pub max_attempts: i64,
    /// How long a restarted session waits for a turn it lost sight of to end.
    pub history_wait: Duration,
    /// A turn running longer is interrupted (`timed_out`).
    pub turn_timeout: Duration,
    /// How long an interrupt may take to be confirmed before the runtime is
    /// reset and the task marked `needs_reconciliation` (15 s by default).
    pub interrupt_grace: Duration,
    /// How long an `/interrupt` waits for the run it stopped to settle
    /// before it goes back to the queue's order (10 s by default).
    pub interrupt_settle: Duration,
    /// How much of the Issue/PR and its comments a turn's prompt carries.
    pub prompt_context_bytes: usize,
    /// Finals in a row without durable progress before a workflow waits
    /// for its owner (`workflow_max_idle_finals`).
    pub workflow_max_idle_finals: i64,
    /// Children one workflow may have working at once
    /// (`max_children_per_workflow`).
    pub max_children: i64,
    /// Turns a child without a result is asked again
    /// (`child_recovery_attempts`).
    pub child_recovery_attempts: i64,
    /// What the agent may spend (the limits a task or workflow stops at).
    pub limits: crate::domain::limits::Limits,
    /// The first continuation's wait after an ordinary final
    /// (`continuation_backoff_secs`).
    pub continuation_backoff: Duration,
    /// The first wait after the provider turned a turn away for capacity
    /// (`capacity_wait_secs`).
    pub capacity_wait: Duration,
    /// How long a thread that settled idle without `turn/completed` must
    /// stay quiet before its history is asked whether the turn ended.
    pub idle_settle: Duration,
    /// Turns of one repository that may run at once, each in its session's
    /// worktree (`max_parallel_turns_per_repo`).
    pub max_parallel_turns: usize,
    /// How long a session's worktree stays once its work ended
    /// (`worktree_retention_hours`); `None`: kept.
    pub worktree_retention: Option<Duration>,
    /// Work outlives a turn (`workflows`): threads get the bridge's tools and
    /// an open workflow continues after an ordinary final.
    pub workflows: bool,
    /// The Gitea namespace of this instance (`instance_id`): continuations'
    /// delivery keys are under it.
    pub instance_id: String,
    /// An approval nobody decides within this is declined.
    pub approval_timeout: Duration,
    /// The thread's approval policy where no repository override says otherwise.
    pub approval_policy: ApprovalPolicy,
    /// The thread's sandbox where no repository override says otherwise.
    pub sandbox: Sandbox,
    /// Per-repository policies by lower-case `owner/name` (config `repositories`).
    pub repositories: Arc<BTreeMap<String, RepoPolicy>>,
    /// The bot's Gitea login (named in the turn's prompt).
    pub bot_login: String,
    /// Whether untrusted pull requests (from a fork, or whose head commit's
    /// author lacks `trigger_permission`) run like any other (config
    /// `trust_fork_prs`).
    pub trust_fork_prs: bool,
    /// Scrubs this server's secrets out of what a turn's transcript stores.
    pub redactor: redact::Redactor,
    /// Why this process must start no task (say, no Gitea client to check a
    /// commenter's permission and verify the reply); empty: schedule normally.
    /// While it is not empty the repo actors lease nothing, so tasks wait
    /// `queued` for a process that can run them safely.
    pub hold: Vec<crate::readiness::Blocker>,
    /// Whether the agent runtime can run turns now (its process, its
    /// account), as the runtime publishes it. While it cannot, the repo
    /// actors lease nothing new: a task leased then would only use up an
    /// attempt. The registry wakes them when it changes.
    pub agent: crate::agent::Availability,
    /// Test seam: runs at the end of every session lane's pass (`None` in a
    /// server).
    pub pass_end: Option<gate::PassEndProbe>,
    /// Set when the server begins to stop: no new task or turn starts.
    pub draining: drain::Draining,
    /// Set while an operator asks this process to drain (read back by the
    /// heartbeat job).
    pub drain_requested: drain::DrainRequested,
    /// Open after `breaker_failures` provider or app-server failures in a
    /// row: no task starts until it closes.
    pub circuit: crate::agent::circuit::Circuit,
    /// `session_turns_per_minute` (0: no limit).
    pub session_turns_per_minute: i64,
}

impl ActorSettings {
    /// The limits a workflow's decisions apply.
    pub fn workflow_limits(&self) -> crate::domain::workflow::decide::WorkflowLimits {
        crate::domain::workflow::decide::WorkflowLimits {
            max_idle_finals: self.workflow_max_idle_finals,
            max_turns: self.limits.max_turns_per_workflow,
        }
    }

    /// A fresh `serverId` for a process of `instance_id`:
    /// `<instance_id>:<host>:<pid>:<random>`. The random part tells a
    /// restarted process from the one before it, even with the same pid.
    pub fn new_server_id(instance_id: &str) -> String {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into());
        format!(
            "{instance_id}:{host}:{}:{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        )
    }

    pub fn new(instance_id: &str) -> Self {
        ActorSettings {
            owner: Self::new_server_id(instance_id),
            lease_ttl: Duration::from_secs(60),
            heartbeat: Duration::from_secs(15),
            sweep: Duration::from_secs(5),
            session_idle: Duration::from_secs(600),
            retry_backoff: Duration::from_secs(30),
            max_attempts: 2,
            history_wait: Duration::from_secs(600),
            turn_timeout: Duration::from_secs(1800),
            interrupt_grace: Duration::from_secs(15),
            interrupt_settle: Duration::from_secs(10),
            prompt_context_bytes: 65_536,
            workflow_max_idle_finals: 65,
            max_children: 2,
            child_recovery_attempts: 2,
            limits: crate::domain::limits::Limits::default(),
            continuation_backoff: Duration::from_secs(5),
            capacity_wait: Duration::from_secs(60),
            worktree_retention: Some(Duration::from_secs(168 * 3600)),
            max_parallel_turns: 1,
            idle_settle: Duration::from_secs(3),
            workflows: true,
            instance_id: instance_id.to_owned(),
            approval_timeout: Duration::from_secs(600),
            approval_policy: ApprovalPolicy::Never,
            sandbox: Sandbox::DangerFullAccess,
            repositories: Arc::new(BTreeMap::new()),
            bot_login: "codex-bot".into(),
            trust_fork_prs: false,
            redactor: redact::Redactor::default(),
            hold: Vec::new(),
            agent: crate::agent::Availability::always(),
            pass_end: None,
            draining: drain::Draining::default(),
            drain_requested: drain::DrainRequested::default(),
            circuit: crate::agent::circuit::Circuit::default(),
            session_turns_per_minute: 0,
        }
    }

    /// How Codex works in `owner/name`: its override, else the defaults.
    pub fn policy_for(&self, owner: &str, name: &str) -> RepoPolicy {
        let key = format!("{owner}/{name}").to_ascii_lowercase();
        self.repositories.get(&key).cloned().unwrap_or(RepoPolicy {
            approval_policy: self.approval_policy,
            sandbox: self.sandbox,
            turn_timeout: self.turn_timeout,
        })
    }

    /// The configured timings, identity and thread policies (`hold` is left
    /// empty: readiness decides it; `agent` always available: the app gives
    /// the runtime's own).
    pub fn from_config(config: &Config) -> Self {
        let mut s = ActorSettings::new(&config.instance_id);
        s.lease_ttl = Duration::from_secs(config.lease_ttl_secs);
        s.heartbeat = Duration::from_secs(config.lease_heartbeat_secs);
        s.session_idle = Duration::from_secs(config.session_idle_secs);
        s.retry_backoff = Duration::from_secs(config.retry_backoff_secs);
        s.max_attempts = config.max_attempts;
        s.prompt_context_bytes = config.prompt_context_bytes as usize;
        s.workflows = config.workflows;
        s.continuation_backoff = Duration::from_secs(config.continuation_backoff_secs);
        s.capacity_wait = Duration::from_secs(config.capacity_wait_secs);
        s.workflow_max_idle_finals = config.workflow_max_idle_finals;
        s.max_children = config.max_children_per_workflow;
        s.child_recovery_attempts = config.child_recovery_attempts;
        s.session_turns_per_minute = config.session_turns_per_minute;
        s.circuit =
            crate::agent::circuit::Circuit::new(crate::domain::breaker::BreakerConfig::new(
                config.breaker_failures,
                config.breaker_open_secs,
            ));
        s.max_parallel_turns = usize::try_from(config.max_parallel_turns_per_repo).unwrap_or(1);
        s.worktree_retention = (config.worktree_retention_hours > 0)
            .then(|| Duration::from_secs(config.worktree_retention_hours * 3600));
        s.limits = config.limits;
        s.sweep = Duration::from_millis(config.scheduler_sweep_ms);
        s.approval_timeout = Duration::from_secs(config.approval_timeout_secs);
        s.turn_timeout = config.default_policy.turn_timeout;
        s.approval_policy = config.default_policy.approval_policy;
        s.sandbox = config.default_policy.sandbox;
        s.repositories = Arc::new(config.repositories.clone());
        s.bot_login = config.bot_login.clone();
        s.trust_fork_prs = config.trust_fork_prs;
        // Generated secrets are not in the configuration: the app adds them.
        s.redactor = redact::Redactor::new(
            [
                &config.gitea_token,
                &config.gitea_mcp_token,
                &config.webhook_secret,
                &config.admin_token,
            ]
            .into_iter()
            .flatten()
            .cloned(),
        );
        s
    }
}

/// Where repositories are cloned: the workspace manager, or a stand-in in
/// tests. A failure is the workspace's one error; the repo actor moves the
/// task by its disposition and code.
pub trait Workspaces: Send + Sync + 'static {
    /// Blocking: clone or fetch, then check out what the task needs; the
    /// work tree.
    fn prepare(&self, repo: &RepoSpec, checkout: &Checkout) -> Result<PathBuf, WorkspaceError>;
    /// Blocking: the session's own work tree made ready for its next turn
    /// (the repository fetched, the worktree created or checked against what
    /// its last turn left), with the commit checked out when the workspaces
    /// know it: a pull request task's commit statuses go on it.
    fn ready(
        &self,
        repo: &RepoSpec,
        checkout: &Checkout,
        session: SessionTree<'_>,
    ) -> Result<Ready, WorkspaceError> {
        let _ = session;
        self.prepare(repo, checkout)
            .map(|path| Ready { path, head: None })
    }
    /// The workspace folder of a repository (validated, under the root).
    fn path_for(&self, owner: &str, name: &str) -> Result<PathBuf, WorkspaceError>;
    /// The folder a session's turns run in (validated, under the root).
    fn worktree_for(
        &self,
        owner: &str,
        name: &str,
        id: WorktreeId,
    ) -> Result<PathBuf, WorkspaceError> {
        let _ = id;
        self.path_for(owner, name)
    }
    /// Blocking: an empty folder of the session's own, made if missing, for
    /// a turn that needs nothing of the repository (see
    /// [`WorkspaceManager::scratch_for`]).
    fn scratch_for(
        &self,
        owner: &str,
        name: &str,
        id: WorktreeId,
    ) -> Result<PathBuf, WorkspaceError> {
        let _ = id;
        self.path_for(owner, name)
    }
    /// Blocking: what the session's worktree holds now (`None`: it has
    /// none), recorded when a turn ends.
    fn tree_state(
        &self,
        owner: &str,
        name: &str,
        id: WorktreeId,
    ) -> Result<Option<TreeState>, WorkspaceError> {
        let _ = (owner, name, id);
        Ok(None)
    }
    /// Blocking: removes the session's worktree, keeping uncommitted work
    /// under a ref.
    fn retire(&self, owner: &str, name: &str, id: WorktreeId) -> Result<Retired, WorkspaceError> {
        let _ = (owner, name, id);
        Ok(Retired {
            removed: false,
            kept: None,
        })
    }
    /// Blocking: the base branch's `AGENTS.md` (the default branch's when
    /// `base` is `None`), bounded; `None` when there is none. A thread that
    /// must not follow the checked-out head's gets this copy instead.
    fn base_instructions(
        &self,
        owner: &str,
        name: &str,
        base: Option<&str>,
    ) -> Result<Option<String>, WorkspaceError> {
        let _ = (owner, name, base);
        Ok(None)
    }
}

impl Workspaces for WorkspaceManager {
    fn prepare(&self, repo: &RepoSpec, checkout: &Checkout) -> Result<PathBuf, WorkspaceError> {
        WorkspaceManager::prepare(self, repo, checkout).map(|p| p.path)
    }

    fn ready(
        &self,
        repo: &RepoSpec,
        checkout: &Checkout,
        session: SessionTree<'_>,
    ) -> Result<Ready, WorkspaceError> {
        WorkspaceManager::prepare_session(self, repo, checkout, session).map(|p| Ready {
            path: p.path,
            head: Some(p.head),
        })
    }

    fn path_for(&self, owner: &str, name: &str) -> Result<PathBuf, WorkspaceError> {
        WorkspaceManager::path_for(self, owner, name)
    }

    fn worktree_for(
        &self,
        owner: &str,
        name: &str,
        id: WorktreeId,
    ) -> Result<PathBuf, WorkspaceError> {
        WorkspaceManager::worktree_path(self, owner, name, id)
    }

    fn tree_state(
        &self,
        owner: &str,
        name: &str,
        id: WorktreeId,
    ) -> Result<Option<TreeState>, WorkspaceError> {
        WorkspaceManager::tree_state(self, owner, name, id)
    }

    fn retire(&self, owner: &str, name: &str, id: WorktreeId) -> Result<Retired, WorkspaceError> {
        WorkspaceManager::retire_session(self, owner, name, id)
    }

    fn base_instructions(
        &self,
        owner: &str,
        name: &str,
        base: Option<&str>,
    ) -> Result<Option<String>, WorkspaceError> {
        WorkspaceManager::base_instructions(self, owner, name, base)
    }

    fn scratch_for(
        &self,
        owner: &str,
        name: &str,
        id: WorktreeId,
    ) -> Result<PathBuf, WorkspaceError> {
        WorkspaceManager::scratch_for(self, owner, name, id)
    }
}

/// A workspace ready for a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// The work tree.
    pub path: PathBuf,
    /// The commit checked out (full sha), when the workspaces say.
    pub head: Option<String>,
}

/// What the actors are given when the process starts: the store, the agent
/// runtime, the forge that checks permissions and replies, the workspaces,
/// and the settings. Shared by every actor the registry starts.
pub struct ActorDeps {
    pub store: Store,
    pub runtime: Arc<dyn Agent>,
    pub verifier: Arc<dyn Forge>,
    pub workspaces: Arc<dyn Workspaces>,
    pub settings: ActorSettings,
}

/// Runs `fut`, turning a panic into an `Err` so the actor can stop and be
/// restarted by its supervisor instead of taking the process down.
pub(crate) async fn catch_panic<T>(fut: impl std::future::Future<Output = T>) -> Result<T, String> {
    use futures_util::FutureExt;
    std::panic::AssertUnwindSafe(fut)
        .catch_unwind()
        .await
        .map_err(|p| {
            p.downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_get_their_override_and_the_rest_the_configured_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "sandbox = \"workspace-write\"\nturn_timeout_secs = 100\napproval_timeout_secs = 9\n\
             scheduler_sweep_ms = 150\n[repositories.\"Acme/Payments\"]\n\
             approval_policy = \"untrusted\"\nturn_timeout_secs = 7\n",
        )
        .unwrap();
        let config = Config::from_sources(Some(&path), &Default::default()).unwrap();
        let s = ActorSettings::from_config(&config);
        assert_eq!(s.sweep, Duration::from_millis(150));
        assert_eq!(s.approval_timeout, Duration::from_secs(9));
        // Matched case-insensitively, as Gitea matches names.
        let strict = s.policy_for("ACME", "payments");
        assert_eq!(strict.approval_policy, ApprovalPolicy::Untrusted);
        assert_eq!(strict.sandbox, Sandbox::WorkspaceWrite);
        assert_eq!(strict.turn_timeout, Duration::from_secs(7));
        let other = s.policy_for("acme", "web");
        assert_eq!(other.approval_policy, ApprovalPolicy::Never);
        assert_eq!(other.sandbox, Sandbox::WorkspaceWrite);
        assert_eq!(other.turn_timeout, Duration::from_secs(100));
    }

    #[test]
    fn the_agents_gitea_token_is_scrubbed_like_the_bots() {
        let env = [
            ("CODEX_BRIDGE_GITEA_TOKEN", "bot-admin-token-123"),
            ("CODEX_BRIDGE_GITEA_MCP_TOKEN", "agent-comment-token-456"),
            ("CODEX_BRIDGE_TRUST_FORK_PRS", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let config = Config::from_sources(None, &env).unwrap();
        let s = ActorSettings::from_config(&config);
        assert!(s.trust_fork_prs);
        let mut text = "env: GITEA_ACCESS_TOKEN=agent-comment-token-456".to_owned();
        s.redactor.text(&mut text);
        assert_eq!(text, "env: GITEA_ACCESS_TOKEN=[redacted]");
    }
}
