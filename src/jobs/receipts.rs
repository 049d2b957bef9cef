//! The receipts worker: one receipt per task when it is
//! queued — a comment, or a reaction on the triggering comment by config — and
//! one per abnormal end, each exactly once.
//!
//! Rows are queued in the store by the commit that causes them (the accept,
//! the transition), and that commit wakes the worker through the store's
//! change signal; a receipt waiting for a retry wakes it with a timer. The
//! worker marks a row `posting` before it writes (the intent) and claims it
//! for [`CLAIM`], so that of several workers (several processes on one
//! PostgreSQL) only one writes it; it looks for the receipt's marker in the
//! thread before posting (a crash between the POST and its record never
//! yields a second receipt), and records the result only while the attempt
//! is still its own. Transient failures retry with backoff; Gitea's
//! refusals end the row `failed` with Gitea's message.
//!
//! Before the "received" receipt it asks whether the commenter may trigger
//! work at all: if not, the task is `rejected` and only the rejection receipt
//! is written.

use super::wake::{self, chrono_of, Drain};
use crate::domain::command::Command;
use crate::domain::states::{CommentKind, CommentStatus};
use crate::domain::TaskId;
use crate::forge::{Forge, TriggerCheck};
use crate::gitea::receipts::{add_reaction, post_once, receipt_text, ReceiptMode};
use crate::gitea::reply::{receipt_marker, status_marker};
use crate::gitea::{GiteaClient, GiteaError};
use crate::lifecycle::TaskState;
use crate::store::audit::{self, Audit};
use crate::store::comments::{self, DueReceipt, Outcome};
use crate::store::tasks::TransitionOutcome;
use crate::store::{attempts, format_time, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Gives up on a receipt after this many failed attempts.
const MAX_ATTEMPTS: i64 = 12;

/// Receipts read at a time; a pass reads again until nothing is due.
const BATCH: i64 = 32;

/// How long a receipt marked `posting` is left to the worker that marked
/// it: no other worker (another process's) writes it before then; after a
/// crash it is due again then. The comment's POST is sent only while at
/// least [`SEND_WINDOW`] of the claim is left.
pub const CLAIM: Duration = Duration::from_secs(60);

/// The client's whole request time-out (20 s) and a margin: a POST sent
/// with this much of its claim left has its answer, or has failed, before
/// the claim runs out.
const SEND_WINDOW: Duration = Duration::from_secs(25);

pub struct ReceiptWorker {
    pub store: Store,
    pub client: GiteaClient,
    pub forge: Arc<dyn Forge>,
    pub bot_login: String,
    pub mode: ReceiptMode,
    /// The longest the worker sleeps without looking at the store (normally
    /// [`ReceiptWorker::SAFETY_INTERVAL`]).
    pub safety_interval: Duration,
}

impl ReceiptWorker {
    /// The worker is woken by every commit of this process and by the
    /// earliest retry falling due; it also looks this often in case neither
    /// happens: receipts queued by another instance on a shared PostgreSQL,
    /// whose commits this process does not see, or a wake-up missed.
    pub const SAFETY_INTERVAL: Duration = Duration::from_secs(30);

    /// Runs until the process ends: a pass over every receipt due, then sleep
    /// until the next commit, the next retry or the safety interval (the
    /// loop of `wake::run`).
    pub async fn run(self) {
        wake::run(&self, self.store.changes(), self.safety_interval).await;
    }

    async fn handle(&self, r: DueReceipt) -> Result<(), crate::store::StoreError> {
        let key = r.row.comment_key.clone();
        let wanted_state = comments::receipt_state(&key);
        let wanted = wanted_state
            .map(TaskState::as_str)
            .unwrap_or_default()
            .to_owned();
        let task_id = r.row.task_id.clone();
        if wanted_state == Some(TaskState::Received) {
            if r.state.is_terminal() {
                return self
                    .finish(
                        &key,
                        &task_id,
                        None,
                        CommentStatus::Skipped,
                        None,
                        Some("the task ended before its receipt"),
                    )
                    .await;
            }
            match self
                .forge
                .may_trigger(r.row.resource_key.clone(), r.author.clone())
                .await
            {
                TriggerCheck::Denied(why) => return self.reject(&r, &key, why).await,
                TriggerCheck::Unknown(e) => {
                    // The session checks again before the turn starts.
                    tracing::info!(task.id = %task_id, error = %e, "permission unknown at accept; checked again at start");
                }
                TriggerCheck::Allowed => {}
            }
        }
        // The intent, before anything is written into Gitea, and the claim:
        // of all the workers that read this row as due (another process's
        // too), only the one whose mark lands writes it.
        let (k, t, w, seen) = (key.clone(), task_id.clone(), wanted.clone(), r.row.attempts);
        let claim_until = format_time(chrono::Utc::now() + chrono_of(CLAIM));
        let send_by = Instant::now() + CLAIM.saturating_sub(SEND_WINDOW);
        let claimed = self
            .store
            .write(move |c| {
                if !comments::begin_post(c, &k, seen, &claim_until)? {
                    return Ok(false);
                }
                audit::record(
                    c,
                    &Audit::new("receipt.intent", "system")
                        .task(&t)
                        .meta(serde_json::json!({ "commentKey": k, "receipt": w })),
                )?;
                Ok(true)
            })
            .await?;
        if !claimed {
            tracing::debug!(task.id = %task_id, comment_key = %key, "receipt taken by another worker");
            return Ok(());
        }
        let attempt = Some(seen + 1);
        let resource = &r.row.resource_key;
        let (owner, repo, number) = (
            resource.repo().owner().to_owned(),
            resource.repo().name().to_owned(),
            resource.number(),
        );
        let result =
            if wanted_state == Some(TaskState::Received) && self.mode == ReceiptMode::Reaction {
                match r.trigger_comment_id {
                    Some(cid) => add_reaction(&self.client, owner, repo, cid, "eyes")
                        .await
                        .map(|()| None),
                    None => {
                        self.post_comment(&r, &wanted, owner, repo, number, send_by)
                            .await
                    }
                }
            } else {
                self.post_comment(&r, &wanted, owner, repo, number, send_by)
                    .await
            };
        match result {
            Ok(comment_id) => {
                self.finish(
                    &key,
                    &task_id,
                    attempt,
                    CommentStatus::Posted,
                    comment_id,
                    None,
                )
                .await
            }
            Err(e) if e.is_transient() && r.row.attempts + 1 < MAX_ATTEMPTS => {
                let wait = Duration::from_secs(2u64.pow(r.row.attempts.clamp(0, 9) as u32));
                let retry_at = format_time(
                    chrono::Utc::now()
                        + chrono::Duration::from_std(wait)
                            .unwrap_or_else(|_| chrono::Duration::seconds(60)),
                );
                let (k, t, msg) = (key.clone(), task_id.clone(), e.to_string());
                tracing::warn!(task.id = %task_id, error = %msg, "receipt not written yet; will try again");
                self.store
                    .write(move |c| {
                        let outcome = Outcome {
                            status: CommentStatus::Pending,
                            error: Some(&msg),
                            retry_at: Some(&retry_at),
                            ..Default::default()
                        };
                        if !comments::finish_post(c, &k, seen + 1, &outcome)? {
                            return Ok(());
                        }
                        audit::record(
                            c,
                            &Audit::new("receipt.retry", "system")
                                .task(&t)
                                .error("gitea_unavailable")
                                .meta(serde_json::json!({ "commentKey": k, "error": msg })),
                        )
                        .map(|_| ())
                    })
                    .await
            }
            Err(e) => {
                self.finish(
                    &key,
                    &task_id,
                    attempt,
                    CommentStatus::Failed,
                    None,
                    Some(&e.to_string()),
                )
                .await
            }
        }
    }

    /// Posts the receipt comment unless its marker is already in the thread.
    async fn post_comment(
        &self,
        r: &DueReceipt,
        wanted: &str,
        owner: String,
        repo: String,
        number: i64,
        send_by: Instant,
    ) -> Result<Option<i64>, GiteaError> {
        let (marker, text) = match (r.row.kind, &r.row.body) {
            // A command's answer: its text was decided with the command.
            (CommentKind::Answer, Some(body)) => {
                let marker = if r.command == Some(Command::Status) {
                    status_marker(&r.row.task_id)
                } else {
                    receipt_marker(&r.row.comment_key)
                };
                (marker, body.clone())
            }
            // A receipt with a detail decided when it was queued (the
            // limit a task reached): the usual text, then the detail.
            (_, Some(detail)) => (
                receipt_marker(&r.row.comment_key),
                format!(
                    "{}\n\n{detail}",
                    receipt_text(wanted, &r.row.task_id, r.error_code.as_deref())
                ),
            ),
            _ => (
                receipt_marker(&r.row.comment_key),
                receipt_text(wanted, &r.row.task_id, r.error_code.as_deref()),
            ),
        };
        let body = format!("{text}\n\n{marker}");
        post_once(
            &self.client,
            owner,
            repo,
            number,
            &self.bot_login,
            marker,
            body,
            send_by,
        )
        .await
        .map(Some)
    }

    /// Records how a receipt ended: after the claimed attempt `attempt`
    /// (left alone if the claim ran out and another worker took the row), or
    /// before any (`None`: skipped, nothing was written into Gitea).
    async fn finish(
        &self,
        key: &str,
        task_id: &TaskId,
        attempt: Option<i64>,
        status: CommentStatus,
        comment_id: Option<i64>,
        error: Option<&str>,
    ) -> Result<(), crate::store::StoreError> {
        let (k, t, e) = (key.to_owned(), task_id.clone(), error.map(str::to_owned));
        if status == CommentStatus::Failed {
            tracing::error!(task.id = %task_id, comment_key = %key, error = ?error, "receipt could not be written");
        }
        self.store
            .write(move |c| {
                let outcome = Outcome {
                    status,
                    comment_id,
                    error: e.as_deref(),
                    ..Default::default()
                };
                match attempt {
                    Some(n) => {
                        if !comments::finish_post(c, &k, n, &outcome)? {
                            return Ok(());
                        }
                    }
                    None => comments::mark(c, &k, &outcome)?,
                }
                audit::record(
                    c,
                    &Audit::new(&format!("receipt.{status}"), "system")
                        .task(&t)
                        .comment(comment_id)
                        .meta(serde_json::json!({ "commentKey": k, "error": e })),
                )
                .map(|_| ())
            })
            .await
    }

    /// The commenter may not trigger work: the task is rejected (its own
    /// receipt says why) and the "received" receipt is not written.
    async fn reject(
        &self,
        r: &DueReceipt,
        key: &str,
        why: String,
    ) -> Result<(), crate::store::StoreError> {
        let (k, t, version) = (key.to_owned(), r.row.task_id.clone(), r.state_version);
        tracing::info!(task.id = %t, why = %why, "commenter may not trigger work; rejecting");
        self.store
            .write(move |c| {
                // Decided on the version this row was read with. If the task
                // moved since (a scheduler leased it), its session checks the
                // permission again before any turn and rejects it there.
                let moved = attempts::decide_move(
                    c,
                    &t,
                    version,
                    TaskState::Rejected,
                    &why,
                    Some("permission_denied"),
                    None,
                )?;
                comments::mark(
                    c,
                    &k,
                    &Outcome {
                        status: CommentStatus::Skipped,
                        error: Some(&why),
                        ..Default::default()
                    },
                )?;
                let outcome = match moved {
                    TransitionOutcome::Applied { .. } => "rejected",
                    TransitionOutcome::Stale { .. } => "stale",
                    TransitionOutcome::Refused { .. } => "refused",
                };
                audit::record(
                    c,
                    &Audit::new("trigger.rejected", "system")
                        .task(&t)
                        .error("permission_denied")
                        .meta(serde_json::json!({
                            "why": why,
                            "outcome": outcome,
                            "decidedOnVersion": version,
                        })),
                )
                .map(|_| ())
            })
            .await
    }
}

impl Drain for ReceiptWorker {
    const NAME: &'static str = "receipt worker";

    /// Writes every receipt due now; then how long until the earliest one
    /// waiting for a retry falls due (`None`: none waits).
    async fn pass(
        &self,
        changes: &mut watch::Receiver<u64>,
    ) -> Result<Option<Duration>, crate::store::StoreError> {
        loop {
            // Seen before the read: whatever commits after it wakes the next
            // pass, and the worker's own writes before it do not.
            changes.borrow_and_update();
            let at = crate::store::now();
            let (rows, next) = self
                .store
                .read(move |c| {
                    let rows = comments::due_receipts(c, &at, BATCH)?;
                    let next = if rows.is_empty() {
                        comments::next_receipt_due(c)?
                    } else {
                        None
                    };
                    Ok((rows, next))
                })
                .await?;
            if rows.is_empty() {
                return Ok(next.as_deref().and_then(wake::until));
            }
            // Every way through `handle` that succeeds takes its row out of
            // the due ones (posted, skipped, failed, or pending with a later
            // retry), so this loop ends.
            for r in rows {
                self.handle(r).await?;
            }
        }
    }
}
