//! The commit statuses worker: posts the statuses of pull request tasks
//! (context `codex-bridge` on the commit the task's turn ran on) that the
//! store queued with the transitions asking for them.
//!
//! Per commit, in queue order: only a commit's newest status is posted, and
//! only once no POST for that commit is in flight; an older one still
//! waiting is superseded, so a stale `pending` never lands after the end.
//! Each POST follows the audit rule: the intent (`commit_status.intent`,
//! with the row marked `posting` and claimed) is committed before it, the
//! result (`commit_status.posted`, `.retry`, `.failed`) after it. A
//! transient failure is tried again with a doubling backoff (capped), and
//! given up after [`MAX_ATTEMPTS`]. Nothing here changes a task's state: a
//! status Gitea never gets costs the status, never the task.
//!
//! Setting the same status twice is harmless in Gitea (it keeps both). A
//! status whose result is recorded is never posted again; a crash between the
//! POST and its record leaves the row `posting`, and once its claim runs out
//! ([`CLAIM`]) it is posted once more, so a commit gets at most one extra,
//! identical status per crash.

use super::wake::{self, chrono_of, Drain};
use crate::domain::statuses::{settle, Settle, CONTEXT};
use crate::domain::{RepoKey, TaskId};
use crate::gitea::statuses::{CommitState, NewStatus};
use crate::gitea::{GiteaClient, GiteaError};
use crate::store::audit::{self, Audit};
use crate::store::statuses::{self, CommitStatusRow, Outcome};
use crate::store::{format_time, Store, StoreError};
use std::time::Duration;
use tokio::sync::watch;

/// Gives up on a status after this many failed attempts (about 20 minutes
/// of backoff).
pub const MAX_ATTEMPTS: i64 = 10;

/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How long a row marked `posting` is left to the worker that marked it:
/// longer than the client's whole request time-out (20 s), so no other
/// worker posts it while its POST may still arrive; after a crash, the row
/// is due again when it runs out.
pub const CLAIM: Duration = Duration::from_secs(30);

/// Rows read at a time; a pass reads again until nothing is due.
const BATCH: i64 = 32;

pub struct StatusWorker {
    pub store: Store,
    pub client: GiteaClient,
    /// The server's external base URL (`public_url`): statuses link to the
    /// task's page in the admin view under it; `None`: no link.
    pub public_url: Option<String>,
    /// The longest the worker sleeps without looking at the store (normally
    /// [`StatusWorker::SAFETY_INTERVAL`]).
    pub safety_interval: Duration,
}

impl StatusWorker {
    /// The worker is woken by every commit of this process, by the earliest
    /// retry or claim running out, and at least this often: statuses queued
    /// by another instance on a shared PostgreSQL, whose commits this process
    /// does not see.
    pub const SAFETY_INTERVAL: Duration = Duration::from_secs(30);

    /// Runs until the process ends: a pass over every status due now, then
    /// sleep until the next commit, the next retry or the safety interval
    /// (the loop of `wake::run`).
    pub async fn run(self) {
        wake::run(&self, self.store.changes(), self.safety_interval).await;
    }

    /// Supersedes and posts what [`settle`] says for one commit; whether
    /// any row moved.
    async fn settle_commit(
        &self,
        due: &[CommitStatusRow],
        repo_key: &RepoKey,
        sha: &str,
        from_id: i64,
    ) -> Result<bool, StoreError> {
        let (k, s, at) = (repo_key.clone(), sha.to_owned(), crate::store::now());
        let queue = self
            .store
            .read(move |c| statuses::of_commit(c, &k, &s, from_id, &at))
            .await?;
        let mut moved = false;
        for (id, action) in settle(&queue) {
            match action {
                Settle::Wait => {}
                Settle::Supersede => moved |= self.supersede(id).await?,
                Settle::Post => {
                    // The newest row may not be due yet (waiting for its
                    // retry): then it waits, and nothing is posted.
                    if let Some(row) = due.iter().find(|r| r.id == id) {
                        self.post(row).await?;
                        moved = true;
                    }
                }
            }
        }
        Ok(moved)
    }

    async fn supersede(&self, id: i64) -> Result<bool, StoreError> {
        let superseded = self
            .store
            .write(move |c| {
                let Some(row) = statuses::find(c, id)? else {
                    return Ok(None);
                };
                if !statuses::supersede(c, id)? {
                    return Ok(None);
                }
                audit::record(
                    c,
                    &Audit::new("commit_status.superseded", "system")
                        .task(&row.task_id)
                        .meta(meta(&row, serde_json::json!({}))),
                )?;
                Ok(Some(row.state))
            })
            .await?;
        if let Some(state) = superseded {
            crate::metrics::commit_status(state.as_str(), "superseded");
        }
        Ok(superseded.is_some())
    }

    /// One attempt at posting `row`: the intent, the POST, the result.
    async fn post(&self, row: &CommitStatusRow) -> Result<(), StoreError> {
        let (id, seen) = (row.id, row.attempts);
        let attempt = seen + 1;
        let claim_until = format_time(chrono::Utc::now() + chrono_of(CLAIM));
        let task_id = row.task_id.clone();
        let intent = meta(row, serde_json::json!({ "attempt": attempt }));
        let claimed = self
            .store
            .write(move |c| {
                if !statuses::begin_post(c, id, seen, &claim_until)? {
                    return Ok(false);
                }
                audit::record(
                    c,
                    &Audit::new("commit_status.intent", "system")
                        .task(&task_id)
                        .meta(intent.clone()),
                )?;
                Ok(true)
            })
            .await?;
        if !claimed {
            // Another worker took it (or it was finished) since it was read.
            return Ok(());
        }
        let ended = match self.send(row).await {
            Ok(()) => Ended::Posted,
            Err(e) if e.is_transient() && attempt < MAX_ATTEMPTS => Ended::Retry {
                error: e.to_string(),
                at: format_time(chrono::Utc::now() + chrono_of(backoff(attempt))),
            },
            Err(e) => Ended::Failed {
                code: if e.is_transient() {
                    "retries_exhausted"
                } else {
                    "gitea_refused"
                },
                error: e.to_string(),
            },
        };
        crate::metrics::commit_status(row.state.as_str(), ended.metric());
        let mut extra = serde_json::json!({ "attempt": attempt });
        match &ended {
            Ended::Posted => {}
            Ended::Retry { error, at } => {
                tracing::warn!(task.id = %row.task_id, status.id = id, error, retry_at = at, "commit status not set yet; will try again");
                extra["error"] = error.as_str().into();
                extra["retryAt"] = at.as_str().into();
            }
            Ended::Failed { code, error } => {
                tracing::error!(task.id = %row.task_id, status.id = id, code, error, "commit status could not be set; given up (the task is not affected)");
                extra["error"] = error.as_str().into();
            }
        }
        let (task_id, result) = (row.task_id.clone(), meta(row, extra));
        self.store
            .write(move |c| {
                // A claim that ran out before this result (a POST slower than
                // the client allows) leaves the row to whoever took it; the
                // audit still says what this attempt did.
                statuses::finish(c, id, attempt, ended.outcome())?;
                let mut event = Audit::new(ended.action(), "system")
                    .task(&task_id)
                    .meta(result.clone());
                event.error_code = ended.code();
                audit::record(c, &event).map(|_| ())
            })
            .await
    }

    /// The POST itself, on the blocking pool.
    async fn send(&self, row: &CommitStatusRow) -> Result<(), GiteaError> {
        let client = self.client.clone();
        let repo = row.resource_key.repo();
        let (owner, name) = (repo.owner().to_owned(), repo.name().to_owned());
        let (sha, description) = (row.sha.clone(), row.description.clone());
        let state = CommitState::from(row.state.as_str().to_owned());
        let target_url = target_url(self.public_url.as_deref(), &row.task_id);
        tokio::task::spawn_blocking(move || {
            client
                .create_status(
                    &owner,
                    &name,
                    &sha,
                    &NewStatus {
                        state,
                        target_url: &target_url,
                        description: &description,
                        context: CONTEXT,
                    },
                )
                .map(|_| ())
        })
        .await
        .unwrap_or_else(|e| {
            Err(GiteaError::Transport {
                what: "a commit status".into(),
                detail: format!("the call did not finish: {e}"),
            })
        })
    }
}

impl Drain for StatusWorker {
    const NAME: &'static str = "commit status worker";

    /// Settles every commit with a status due now; then how long until the
    /// earliest retry or claim runs out (`None`: none does).
    async fn pass(
        &self,
        changes: &mut watch::Receiver<u64>,
    ) -> Result<Option<Duration>, StoreError> {
        loop {
            // Seen before the read: whatever commits after it wakes the next
            // pass, and the worker's own writes before it do not.
            changes.borrow_and_update();
            let at = crate::store::now();
            let (rows, next) = self
                .store
                .read(move |c| {
                    let rows = statuses::due(c, &at, BATCH)?;
                    let next = statuses::next_due(c, &at)?;
                    Ok((rows, next))
                })
                .await?;
            let mut moved = false;
            for (repo_key, sha, from_id) in commits(&rows) {
                moved |= self.settle_commit(&rows, &repo_key, &sha, from_id).await?;
            }
            // A pass that moved nothing waits: what is due is behind a POST
            // in flight elsewhere, whose claim runs out by `next`.
            if !moved {
                return Ok(next.as_deref().and_then(wake::until));
            }
        }
    }
}

/// What one attempt at a POST came to.
enum Ended {
    Posted,
    /// A transient failure: tried again at `at`.
    Retry {
        error: String,
        at: String,
    },
    /// Refused by Gitea, or still failing after [`MAX_ATTEMPTS`].
    Failed {
        code: &'static str,
        error: String,
    },
}

impl Ended {
    fn outcome(&self) -> Outcome<'_> {
        match self {
            Ended::Posted => Outcome::Posted,
            Ended::Retry { error, at } => Outcome::Retry { error, at },
            Ended::Failed { error, .. } => Outcome::Failed { error },
        }
    }

    /// The result's audit action.
    fn action(&self) -> &'static str {
        match self {
            Ended::Posted => "commit_status.posted",
            Ended::Retry { .. } => "commit_status.retry",
            Ended::Failed { .. } => "commit_status.failed",
        }
    }

    /// The result's stable error code.
    fn code(&self) -> Option<&'static str> {
        match self {
            Ended::Posted => None,
            Ended::Retry { .. } => Some("gitea_unavailable"),
            Ended::Failed { code, .. } => Some(code),
        }
    }

    /// Its `outcome` label in `codex_bridge_commit_statuses_total`.
    fn metric(&self) -> &'static str {
        match self {
            Ended::Posted => "posted",
            Ended::Retry { .. } => "retry",
            Ended::Failed { .. } => "failed",
        }
    }
}

/// The link of a task's status: its page in the admin view under
/// `public_url` (empty: no link).
pub fn target_url(public_url: Option<&str>, task_id: &TaskId) -> String {
    match public_url {
        Some(base) => format!("{}/admin#task/{task_id}", base.trim_end_matches('/')),
        None => String::new(),
    }
}

/// Each commit with a due row, in queue order of its oldest due row, with
/// that row's id.
fn commits(rows: &[CommitStatusRow]) -> Vec<(RepoKey, String, i64)> {
    let mut out: Vec<(RepoKey, String, i64)> = Vec::new();
    for r in rows {
        if !out.iter().any(|(k, s, _)| *k == r.repo_key && *s == r.sha) {
            out.push((r.repo_key.clone(), r.sha.clone(), r.id));
        }
    }
    out
}

/// The wait before attempt `attempt + 1`: 2 s, doubling, at most
/// [`MAX_BACKOFF`].
fn backoff(attempt: i64) -> Duration {
    let doubled = 1u64 << attempt.clamp(1, 16);
    Duration::from_secs(doubled).min(MAX_BACKOFF)
}

/// What every audit event of a status says about it.
fn meta(row: &CommitStatusRow, mut extra: serde_json::Value) -> serde_json::Value {
    let base = serde_json::json!({
        "statusId": row.id,
        "sha": row.sha,
        "state": row.state,
        "context": CONTEXT,
        "taskState": row.task_state,
    });
    if let (Some(extra), serde_json::Value::Object(base)) = (extra.as_object_mut(), base) {
        for (k, v) in base {
            extra.entry(k).or_insert(v);
        }
    }
    extra
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_links_to_the_task_page_only_with_a_public_url() {
        let t = TaskId::parse("task-0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(target_url(None, &t), "");
        assert_eq!(
            target_url(Some("https://bridge.example.com/base"), &t),
            "https://bridge.example.com/base/admin#task/task-0123456789abcdef0123456789abcdef"
        );
    }

    #[test]
    fn retries_back_off_doubling_up_to_the_cap() {
        let waits: Vec<u64> = (1..=MAX_ATTEMPTS).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
    }
}
