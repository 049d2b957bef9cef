//! Stopping without dropping work. On SIGTERM the server keeps taking
//! webhooks (Gitea never sends one again), starts no new task or turn,
//! lets the turns under way finish and be verified for up to
//! `drain_timeout_secs`, then interrupts what is left — those tasks go
//! through `cancel_requested` like any abort — and only then stops. Queued
//! work stays queued for the next start.

use super::registry::{AbortTask, Registry};
use crate::store::control::{self, ControlRequest};
use crate::store::{queue, Store};
use actix::Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Whether the server is stopping, shared by every actor: once on, no new
/// task is leased and no new turn is started.
#[derive(Debug, Clone, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    pub fn begin(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_on(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Whether an operator asked this process to drain
/// (`POST /api/gitea-workflow/instances/{serverId}/drain`), as its last
/// heartbeat read it from the store. Unlike [`Draining`] the process keeps
/// running: it should take no new lease and hand its repositories over
/// once its turns settle. Cheap to read from any actor.
#[derive(Debug, Clone, Default)]
pub struct DrainRequested(Arc<AtomicBool>);

impl DrainRequested {
    pub fn set(&self, requested: bool) {
        self.0.store(requested, Ordering::SeqCst);
    }

    pub fn is_on(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What a drain came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    /// Tasks under way when it began.
    pub under_way: usize,
    /// Of those, interrupted when the time was up.
    pub interrupted: usize,
    /// Still driven here when the drain gave up waiting (an interrupt that
    /// was never confirmed: the next start reconciles them).
    pub left: usize,
}

/// How often the drain looks at what still runs.
const POLL: Duration = Duration::from_millis(250);

/// Drains this process (`owner`): waits up to `timeout` for its tasks to
/// settle, then aborts the rest and waits up to `settle` for the aborts.
pub async fn drain(
    store: &Store,
    registry: &Addr<Registry>,
    owner: &str,
    timeout: Duration,
    settle: Duration,
) -> Drained {
    let mut report = Drained {
        under_way: driven(store, owner).await.len(),
        ..Drained::default()
    };
    if report.under_way > 0 {
        tracing::info!(
            tasks = report.under_way,
            timeout_secs = timeout.as_secs(),
            "draining: no new turn starts; waiting for the turns under way"
        );
    }
    if wait_until_settled(store, owner, timeout).await {
        return report;
    }
    let left = driven(store, owner).await;
    for task in &left {
        let request = ControlRequest {
            request_id: format!("drain:{owner}:{}", task.task_id),
            actor: "system:drain".into(),
            reason: format!(
                "the server is stopping and drain_timeout_secs ({} s) passed",
                timeout.as_secs()
            ),
        };
        let id = task.task_id.clone();
        match store
            .write(move |c| control::abort_task(c, &request, &id))
            .await
        {
            Ok(_) => {
                report.interrupted += 1;
                registry.do_send(AbortTask {
                    session_key: task.session_key.clone(),
                    repo_key: task.repo_key.clone(),
                    task_id: task.task_id.clone(),
                });
            }
            // Verifying its reply, or already stopping: it settles itself.
            Err(e) => tracing::info!(task = %task.task_id, "draining: not interrupted ({e})"),
        }
    }
    tracing::warn!(
        interrupted = report.interrupted,
        "draining: drain_timeout_secs passed; interrupted the turns still running"
    );
    if !wait_until_settled(store, owner, settle).await {
        report.left = driven(store, owner).await.len();
    }
    report
}

/// Whether nothing is driven here any more before `within` passes.
async fn wait_until_settled(store: &Store, owner: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if driven(store, owner).await.is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

/// What this process drives now; an unreadable store counts as nothing
/// left to wait for (the next start recovers it from the store).
async fn driven(store: &Store, owner: &str) -> Vec<crate::store::models::Task> {
    let owner = owner.to_owned();
    store
        .read(move |c| queue::driven_by(c, &owner))
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "draining: cannot read the running tasks; stopping now");
            Vec::new()
        })
}
