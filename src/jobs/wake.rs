//! The wake loop of the workers that drain rows the store queues (receipts,
//! commit statuses): a pass over everything due, then sleep until the next
//! commit of this process, the earliest retry the pass reported, or the
//! safety interval, whichever comes first. Commits during a pass coalesce
//! into one more pass, so a store that changes constantly costs one read per
//! wake-up, never a spin.

use crate::store::StoreError;
use std::time::Duration;
use tokio::sync::watch;

/// After a store error a worker waits this long before it looks again,
/// whatever commits meanwhile: a store that fails every read must not be
/// asked again at the rate of the commits.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// A worker the loop drives.
pub(crate) trait Drain {
    /// Names the worker in its log lines.
    const NAME: &'static str;

    /// Handles every row due now; then how long until the earliest row
    /// waiting falls due (`None`: none waits). It marks `changes` seen
    /// before each read, so that what commits after the read wakes the next
    /// pass and its own writes before it do not.
    async fn pass(
        &self,
        changes: &mut watch::Receiver<u64>,
    ) -> Result<Option<Duration>, StoreError>;
}

/// Runs `worker` until the process ends, woken by `changes` (the store's
/// commit signal) and looking at least every `safety_interval`: rows queued
/// by another instance on a shared PostgreSQL, whose commits this process
/// does not see, or a wake-up missed.
pub(crate) async fn run<W: Drain>(
    worker: &W,
    mut changes: watch::Receiver<u64>,
    safety_interval: Duration,
) {
    loop {
        let wait = match worker.pass(&mut changes).await {
            Ok(Some(next)) => next.min(safety_interval),
            Ok(None) => safety_interval,
            Err(e) => {
                tracing::warn!(error = %e, "{}: store error; trying again in a second", W::NAME);
                tokio::time::sleep(ERROR_PAUSE).await;
                continue;
            }
        };
        tokio::select! {
            changed = changes.changed() => {
                // Only if the store is gone, which the worker's own handle
                // prevents; fall back to the timer rather than spin on the error.
                if changed.is_err() {
                    tokio::time::sleep(wait).await;
                }
            }
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// How long from now until the stored time `t`, when a worker's next row
/// falls due: zero if it is past (the next pass finds that row due), `None`
/// if it cannot be read (left to the safety interval, rather than a wake-up
/// that finds nothing, again and again).
pub(crate) fn until(t: &str) -> Option<Duration> {
    let t = chrono::DateTime::parse_from_rfc3339(t).ok()?;
    Some(
        (t.with_timezone(&chrono::Utc) - chrono::Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

/// A wait as a time span to add to a timestamp (a minute if it is too long
/// to be one, which no wait here is).
pub(super) fn chrono_of(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or_else(|_| chrono::Duration::seconds(60))
}
