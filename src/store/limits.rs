//! Usage against the limits on what the agent may spend, for the overview:
//! for each limit, the live task, workflow, commenter or repository nearest
//! to it now. Counted the way the limits are enforced: turns and tokens of
//! tasks that have not ended, turns of workflows that have not ended, wall
//! time from a driven task's first lease, tasks a commenter started in the
//! last hour, turns a repository started today (UTC).

use super::schema::{attempts, tasks, turn_token_usage, turns, workflows};
use super::{format_time, DbConn, StoreError};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;
use std::collections::HashMap;

/// The one nearest a limit: who, and how much it used.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Highest {
    /// A task id, a workflow id, a login or a repository key.
    pub who: String,
    pub used: i64,
}

/// Per limit (by its configuration key), the highest usage now.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitUsage {
    pub max_turns_per_task: Option<Highest>,
    pub max_turns_per_workflow: Option<Highest>,
    pub max_task_secs: Option<Highest>,
    pub max_tokens_per_task: Option<Highest>,
    pub user_triggers_per_hour: Option<Highest>,
    pub repo_turns_per_day: Option<Highest>,
}

fn highest(counts: HashMap<String, i64>) -> Option<Highest> {
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
        .map(|(who, used)| Highest { who, used })
}

pub fn usage(conn: &mut DbConn) -> Result<LimitUsage, StoreError> {
    let live = super::workflows::live_states();
    // Turns (and their tokens) of tasks that have not ended.
    let live_turns: Vec<(String, String)> = with_conn!(conn, |c| turns::table
        .inner_join(tasks::table.on(tasks::task_id.eq(turns::task_id)))
        .filter(tasks::state.eq_any(&live))
        .select((turns::task_id, turns::turn_id))
        .load(c))?;
    let mut per_task: HashMap<String, i64> = HashMap::new();
    for (task, _) in &live_turns {
        *per_task.entry(task.clone()).or_default() += 1;
    }
    let turn_ids: Vec<&String> = live_turns.iter().map(|(_, t)| t).collect();
    let tokens: Vec<(String, i64, i64)> = with_conn!(conn, |c| turn_token_usage::table
        .filter(turn_token_usage::turn_id.eq_any(&turn_ids))
        .select((
            turn_token_usage::turn_id,
            turn_token_usage::start_total_tokens,
            turn_token_usage::end_total_tokens,
        ))
        .load(c))?;
    let task_of: HashMap<&String, &String> = live_turns.iter().map(|(a, t)| (t, a)).collect();
    let mut tokens_per_task: HashMap<String, i64> = HashMap::new();
    for (turn, start, end) in &tokens {
        if let Some(task) = task_of.get(turn) {
            *tokens_per_task.entry((*task).clone()).or_default() += (end - start).max(0);
        }
    }
    // Turns of workflows that have not ended.
    let workflow_turns: Vec<String> = with_conn!(conn, |c| turns::table
        .inner_join(tasks::table.on(tasks::task_id.eq(turns::task_id)))
        .inner_join(workflows::table.on(tasks::workflow_id.eq(workflows::workflow_id.nullable())),)
        .filter(workflows::state.eq_any(["open", "waiting_owner", "waiting_child"]))
        .select(workflows::workflow_id)
        .load(c))?;
    let mut per_workflow: HashMap<String, i64> = HashMap::new();
    for w in workflow_turns {
        *per_workflow.entry(w).or_default() += 1;
    }
    // Wall time of driven tasks, from their first lease.
    let driven = [
        TaskState::Leased,
        TaskState::Running,
        TaskState::AwaitingApproval,
        TaskState::VerifyingReply,
        TaskState::CancelRequested,
    ]
    .map(TaskState::as_str);
    let leases: Vec<(String, String)> = with_conn!(conn, |c| attempts::table
        .inner_join(tasks::table.on(tasks::task_id.eq(attempts::task_id)))
        .filter(tasks::state.eq_any(driven))
        .select((attempts::task_id, attempts::started_at))
        .load(c))?;
    let now = chrono::Utc::now();
    let mut secs: HashMap<String, i64> = HashMap::new();
    for (task, started) in leases {
        let Ok(at) = chrono::DateTime::parse_from_rfc3339(&started) else {
            continue;
        };
        let used = (now - at.with_timezone(&chrono::Utc)).num_seconds();
        let e = secs.entry(task).or_default();
        *e = (*e).max(used);
    }
    // Tasks each commenter started in the last hour (as intake counts them).
    let hour_ago = format_time(now - chrono::Duration::hours(1));
    let turnless = super::commands::turnless_names();
    let authors: Vec<String> = with_conn!(conn, |c| tasks::table
        .filter(tasks::created_at.ge(&hour_ago))
        .filter(tasks::continuation.is_null())
        .filter(tasks::state.ne_all(["rejected", "ignored", "duplicate"]))
        .filter(
            tasks::command
                .is_null()
                .or(tasks::command.ne_all(&turnless))
        )
        .select(tasks::author)
        .load(c))?;
    let mut per_author: HashMap<String, i64> = HashMap::new();
    for a in authors {
        *per_author.entry(a).or_default() += 1;
    }
    // Turns each repository started today (UTC).
    let midnight = format_time(
        now.date_naive()
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc())
            .unwrap_or(now),
    );
    let repos: Vec<String> = with_conn!(conn, |c| turns::table
        .inner_join(tasks::table.on(tasks::task_id.eq(turns::task_id)))
        .filter(turns::started_at.ge(&midnight))
        .select(tasks::repo_key)
        .load(c))?;
    let mut per_repo: HashMap<String, i64> = HashMap::new();
    for r in repos {
        *per_repo.entry(r).or_default() += 1;
    }
    Ok(LimitUsage {
        max_turns_per_task: highest(per_task),
        max_turns_per_workflow: highest(per_workflow),
        max_task_secs: highest(secs),
        max_tokens_per_task: highest(tokens_per_task),
        user_triggers_per_hour: highest(per_author),
        repo_turns_per_day: highest(per_repo),
    })
}
