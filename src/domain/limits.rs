//! Limits that both the store enforces and the bridge's comments name.

/// Most entries a session's outbox holds for unfinished tasks; a comment
/// past it is refused with one receipt that names the limit.
pub const OUTBOX_CAPACITY: i64 = 256;

/// What the agent may spend, since an open workflow runs on its own. Each
/// hit ends a task `failed` (`budget_exceeded`) or refuses one `rejected`
/// (`rate_limited`), with one receipt that names the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Turns one task may take, its reply retry included.
    pub max_turns_per_task: i64,
    /// Turns of all the tasks of one workflow.
    pub max_turns_per_workflow: i64,
    /// Wall time of one task from its first lease.
    pub max_task_secs: u64,
    /// Tokens of one task's turns (0: no limit).
    pub max_tokens_per_task: i64,
    /// Tasks one commenter may start per hour (0: no limit).
    pub user_triggers_per_hour: i64,
    /// Turns per repository per UTC day (0: no limit).
    pub repo_turns_per_day: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_turns_per_task: 20,
            max_turns_per_workflow: 200,
            max_task_secs: 7200,
            max_tokens_per_task: 0,
            user_triggers_per_hour: 30,
            repo_turns_per_day: 0,
        }
    }
}

/// A limit by its configuration key: what a receipt names and how to lift it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    TurnsPerTask,
    TurnsPerWorkflow,
    TaskSecs,
    TokensPerTask,
    UserTriggersPerHour,
    RepoTurnsPerDay,
}

impl Limit {
    /// Its configuration key.
    pub fn key(self) -> &'static str {
        match self {
            Limit::TurnsPerTask => "max_turns_per_task",
            Limit::TurnsPerWorkflow => "max_turns_per_workflow",
            Limit::TaskSecs => "max_task_secs",
            Limit::TokensPerTask => "max_tokens_per_task",
            Limit::UserTriggersPerHour => "user_triggers_per_hour",
            Limit::RepoTurnsPerDay => "repo_turns_per_day",
        }
    }

    pub fn parse(key: &str) -> Option<Limit> {
        [
            Limit::TurnsPerTask,
            Limit::TurnsPerWorkflow,
            Limit::TaskSecs,
            Limit::TokensPerTask,
            Limit::UserTriggersPerHour,
            Limit::RepoTurnsPerDay,
        ]
        .into_iter()
        .find(|l| l.key() == key)
    }

    /// The value configured for it.
    pub fn of(self, limits: &Limits) -> i64 {
        match self {
            Limit::TurnsPerTask => limits.max_turns_per_task,
            Limit::TurnsPerWorkflow => limits.max_turns_per_workflow,
            Limit::TaskSecs => i64::try_from(limits.max_task_secs).unwrap_or(i64::MAX),
            Limit::TokensPerTask => limits.max_tokens_per_task,
            Limit::UserTriggersPerHour => limits.user_triggers_per_hour,
            Limit::RepoTurnsPerDay => limits.repo_turns_per_day,
        }
    }
}

/// A limit a task reached: what its receipt and its workflow's gate say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitHit {
    pub limit: Limit,
    /// The configured value.
    pub value: i64,
    /// What was used when it was reached.
    pub used: i64,
}

impl LimitHit {
    /// One line for a person: which limit, its value, and how to lift it.
    pub fn describe(&self) -> String {
        let unit = match self.limit {
            Limit::TaskSecs => " seconds",
            Limit::TokensPerTask => " tokens",
            Limit::TurnsPerTask | Limit::TurnsPerWorkflow | Limit::RepoTurnsPerDay => " turns",
            Limit::UserTriggersPerHour => " tasks",
        };
        format!(
            "The limit reached is `{key}` = {value}{unit} (used: {used}). An operator can raise \
             `{key}` in the configuration.",
            key = self.limit.key(),
            value = self.value,
            used = self.used,
        )
    }
}
