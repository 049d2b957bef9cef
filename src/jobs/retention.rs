//! The retention worker: once at start and then every [`INTERVAL`], deletes
//! what `domain::retention` says the store may let go of (webhook
//! deliveries no task was made from, the events of ended turns, old refusal
//! counts, the rows of server processes long gone), a bounded batch per write so that webhooks and turns are never
//! held up behind it, and audits each pass that removed anything
//! (`retention.pruned`, with the counts and the cut-offs). Audit events are
//! never removed.
//!
//! Several processes on one PostgreSQL may run passes at once: each
//! deletion re-checks its conditions, so they only share the work.

use crate::domain::retention::{cutoffs, Cutoffs, Policy};
use crate::store::audit::{self, Audit};
use crate::store::retention;
use crate::store::{format_time, DbConn, Store, StoreError};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Time between two passes.
pub const INTERVAL: Duration = Duration::from_secs(3600);

/// Deliveries deleted per write.
const DELIVERY_BATCH: i64 = 2000;

/// Turns whose events are deleted per write (each has tens to hundreds).
const TURN_BATCH: i64 = 50;

/// What one pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    pub deliveries: u64,
    pub turn_events: u64,
    pub refusal_counts: u64,
    pub instances: u64,
}

impl Removed {
    fn any(&self) -> bool {
        self.deliveries + self.turn_events + self.refusal_counts + self.instances > 0
    }
}

pub struct RetentionWorker {
    pub store: Store,
    pub policy: Policy,
}

impl RetentionWorker {
    /// Runs until the process ends; a pass that fails is logged and tried
    /// again at the next interval (nothing is lost by waiting).
    pub async fn run(self) {
        if self.policy.delivery_days == 0 && self.policy.turn_event_days == 0 {
            tracing::info!("delivery_retention_days and turn_event_retention_days are 0: the store keeps everything");
            return;
        }
        loop {
            match self.pass(Utc::now()).await {
                Ok(removed) if removed.any() => {
                    tracing::info!(
                        deliveries = removed.deliveries,
                        turn_events = removed.turn_events,
                        refusal_counts = removed.refusal_counts,
                        instances = removed.instances,
                        "retention pass removed rows"
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "retention pass failed; trying again in an hour")
                }
            }
            tokio::time::sleep(INTERVAL).await;
        }
    }

    /// One pass as of `now`: every batch until nothing more is due.
    pub async fn pass(&self, now: DateTime<Utc>) -> Result<Removed, StoreError> {
        let cut = cutoffs(now, self.policy);
        let mut removed = Removed::default();
        if let Some(before) = cut.deliveries.map(format_time) {
            removed.deliveries = self
                .batches("deliveries", {
                    let before = before.clone();
                    move |c| retention::prune_deliveries(c, &before, DELIVERY_BATCH)
                })
                .await?;
            removed.refusal_counts = self
                .batches("refusal_counts", {
                    let before = before.clone();
                    move |c| retention::prune_refusal_counts(c, &before)
                })
                .await?;
            // Processes gone for as long as a delivery is kept.
            removed.instances = self
                .batches("instances", move |c| retention::prune_instances(c, &before))
                .await?;
        }
        if let Some(before) = cut.turn_events.map(format_time) {
            removed.turn_events = self
                .batches("turn_events", move |c| {
                    retention::compact_turn_events(c, &before, TURN_BATCH)
                })
                .await?;
        }
        if removed.any() {
            self.audit(&cut, removed).await?;
        }
        Ok(removed)
    }

    /// Runs `delete` in writes of its own until one removes nothing; the
    /// rows removed.
    async fn batches<F>(&self, kind: &str, delete: F) -> Result<u64, StoreError>
    where
        F: FnMut(&mut DbConn) -> Result<usize, StoreError> + Send + Clone + 'static,
    {
        let mut total = 0u64;
        loop {
            let n = self.store.write(delete.clone()).await?;
            let n = u64::try_from(n).unwrap_or(u64::MAX);
            total = total.saturating_add(n);
            crate::metrics::retention_removed(kind, n);
            if n == 0 {
                return Ok(total);
            }
            // Let the writes waiting behind this one go first.
            tokio::task::yield_now().await;
        }
    }

    async fn audit(&self, cut: &Cutoffs, removed: Removed) -> Result<(), StoreError> {
        let meta = serde_json::json!({
            "deliveries": removed.deliveries,
            "turnEvents": removed.turn_events,
            "refusalCounts": removed.refusal_counts,
            "instances": removed.instances,
            "deliveriesBefore": cut.deliveries.map(format_time),
            "turnEventsBefore": cut.turn_events.map(format_time),
        });
        self.store
            .write(move |c| {
                audit::record(
                    c,
                    &Audit::new("retention.pruned", "system").meta(meta.clone()),
                )
                .map(|_| ())
            })
            .await
    }
}
