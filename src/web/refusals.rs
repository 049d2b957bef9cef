//! Refused webhooks, carried out: each is counted (the webhook metric, and
//! the per-minute row of `refusal_counts`), and a bounded sample of them is
//! audited, as [`crate::domain::refusals`] decides. Nothing the caller
//! chose (its delivery id, its body) is stored. The request never waits
//! for any of it.

use crate::domain::refusals::{take, Refused, Sampling, Take, Tally};
use crate::store::audit::{self, Audit};
use crate::store::{refusals, Store};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often counted refusals are written when none is audited.
const FLUSH_EVERY: Duration = Duration::from_secs(10);

/// The refusals of this process: each kind's sampling tally and the
/// counts not written yet.
#[derive(Clone)]
pub struct Refusals {
    inner: Arc<Mutex<Inner>>,
    started: Instant,
    sampling: Sampling,
}

#[derive(Default)]
struct Inner {
    tallies: HashMap<Refused, Tally>,
    /// (kind, minute) → refusals not written yet.
    pending: HashMap<(Refused, String), i64>,
}

impl Default for Refusals {
    fn default() -> Self {
        Refusals::new(Sampling::DEFAULT)
    }
}

impl Refusals {
    pub fn new(sampling: Sampling) -> Self {
        Refusals {
            inner: Arc::default(),
            started: Instant::now(),
            sampling,
        }
    }

    /// One refused webhook of `kind` (`code`: why): counted, and audited
    /// if the sampling takes it, in the background.
    pub fn refused(&self, store: &Store, kind: Refused, code: &'static str) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let minute = minute_of(chrono::Utc::now());
        let took = {
            let Ok(mut inner) = self.inner.lock() else {
                return;
            };
            let tally = inner.tallies.get(&kind).copied().unwrap_or_default();
            let (tally, took) = take(tally, now, self.sampling);
            inner.tallies.insert(kind, tally);
            *inner.pending.entry((kind, minute)).or_default() += 1;
            took
        };
        if let Take::Audit { unaudited_before } = took {
            let (this, store) = (self.clone(), store.clone());
            actix_web::rt::spawn(async move {
                this.write(&store, Some((kind, code, unaudited_before)))
                    .await;
            });
        }
    }

    /// Writes the counts not written yet every few seconds, for as long as
    /// the server runs.
    pub fn keep_flushing(&self, store: Store) {
        let this = self.clone();
        actix_web::rt::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                this.write(&store, None).await;
            }
        });
    }

    /// Writes the counts not written yet, and `audited` (a sample) with
    /// them, in one transaction. Counts that could not be written are kept
    /// for the next try.
    async fn write(&self, store: &Store, audited: Option<(Refused, &'static str, u64)>) {
        let pending = match self.inner.lock() {
            Ok(mut inner) => std::mem::take(&mut inner.pending),
            Err(_) => return,
        };
        if pending.is_empty() && audited.is_none() {
            return;
        }
        let counts: Vec<(Refused, String, i64)> = pending
            .iter()
            .map(|((k, m), n)| (*k, m.clone(), *n))
            .collect();
        let result = store
            .write(move |c| {
                for (kind, minute, n) in &counts {
                    refusals::add(c, kind.action(), minute, *n)?;
                }
                if let Some((kind, code, unaudited_before)) = audited {
                    audit::record(
                        c,
                        &Audit::new(kind.action(), "system")
                            .error(code)
                            .meta(serde_json::json!({
                                "sampled": true,
                                "unauditedBefore": unaudited_before,
                            })),
                    )?;
                }
                Ok(())
            })
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "could not record refused webhooks; their counts are kept for the next try");
            if let Ok(mut inner) = self.inner.lock() {
                for (key, n) in pending {
                    *inner.pending.entry(key).or_default() += n;
                }
            }
        }
    }
}

/// The start of `t`'s minute, in the store's time format.
fn minute_of(t: chrono::DateTime<chrono::Utc>) -> String {
    use chrono::{DurationRound, TimeDelta};
    crate::store::format_time(t.duration_trunc(TimeDelta::minutes(1)).unwrap_or(t))
}
