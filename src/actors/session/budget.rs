//! What a task may spend: `max_turns_per_task` before a turn starts,
//! `max_task_secs` from its first lease and `max_tokens_per_task` as Codex
//! reports them while a turn runs. A limit reached stops the turn
//! (`Stop::Budget`), and the task's receipt and its workflow's gate name the
//! limit.

use super::drive::TaskDrive;
use crate::agent::transcript::TokenCounts;
use crate::domain::limits::{Limit, LimitHit};

impl TaskDrive {
    /// The task took every turn it may: it may not start another.
    pub(super) fn out_of_turns(&mut self) -> bool {
        let max = self.deps.settings.limits.max_turns_per_task;
        if self.usage.turns >= max {
            self.budget = Some(LimitHit {
                limit: Limit::TurnsPerTask,
                value: max,
                used: self.usage.turns,
            });
            return true;
        }
        false
    }

    /// When the task's wall time ends: `max_task_secs` after its first
    /// lease (`None`: no lease recorded, so nothing to count from).
    pub(super) fn task_deadline(&self) -> Option<tokio::time::Instant> {
        let leased = self.usage.first_lease_at.as_deref()?;
        let leased = chrono::DateTime::parse_from_rfc3339(leased).ok()?;
        let max = self.deps.settings.limits.max_task_secs;
        let ends = leased + chrono::Duration::seconds(i64::try_from(max).ok()?);
        let left = (ends.with_timezone(&chrono::Utc) - chrono::Utc::now())
            .to_std()
            .unwrap_or_default();
        Some(tokio::time::Instant::now() + left)
    }

    /// The task's wall time ran out.
    pub(super) fn out_of_time(&mut self) {
        let max = self.deps.settings.limits.max_task_secs;
        let used = self
            .usage
            .first_lease_at
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds())
            .unwrap_or_default();
        self.budget = Some(LimitHit {
            limit: Limit::TaskSecs,
            value: i64::try_from(max).unwrap_or(i64::MAX),
            used,
        });
    }

    /// The running turn's token totals moved: whether the task is now over
    /// `max_tokens_per_task` (0: no limit), counting its earlier turns.
    pub(super) fn out_of_tokens(&mut self, start: TokenCounts, end: TokenCounts) -> bool {
        let max = self.deps.settings.limits.max_tokens_per_task;
        if max <= 0 {
            return false;
        }
        let used = self.usage.tokens + (end.total - start.total).max(0);
        if used > max {
            self.budget = Some(LimitHit {
                limit: Limit::TokensPerTask,
                value: max,
                used,
            });
            return true;
        }
        false
    }
}
