//! The circuit breaker over the agent runtime. When the provider or the
//! app-server fails turn after turn, starting more turns only uses up every
//! queued task's attempts and fails them all. After `breaker_failures`
//! failures in a row the circuit opens: no task starts (queued work waits,
//! no attempt is used) until a backoff passes; then turns start again, and
//! the first result decides — a success closes the circuit, a failure opens
//! it again for twice as long (up to a ceiling).

use serde::Serialize;

/// What the breaker is told of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The runtime ran the turn (it completed).
    Success,
    /// The provider or the app-server failed it (not the task's own fault:
    /// not a refusal of its configuration, not a capacity wait).
    Failure,
}

/// The breaker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// `breaker_failures`: failures in a row that open it; 0 turns it off.
    pub failures: u32,
    /// The first open spell, in ms.
    pub base_ms: u64,
    /// The longest open spell, in ms.
    pub max_ms: u64,
}

impl BreakerConfig {
    /// `breaker_failures` failures in a row open it for 30 s, then 60 s,
    /// 120 s, … at most 15 minutes.
    pub fn with_failures(failures: u32) -> BreakerConfig {
        BreakerConfig::new(failures, 30)
    }

    /// Open for `open_secs` first (`breaker_open_secs`), doubling up to 15
    /// minutes.
    pub fn new(failures: u32, open_secs: u64) -> BreakerConfig {
        let max_ms = 15 * 60_000;
        BreakerConfig {
            failures,
            base_ms: open_secs.saturating_mul(1000).min(max_ms),
            max_ms,
        }
    }
}

/// The breaker's state, as of some moment on the caller's clock (ms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Breaker {
    /// Failures in a row since the last success (or the last opening).
    pub failures: u32,
    /// Openings in a row without a success between them.
    pub trips: u32,
    /// Open until this moment; once it passed, turns start again on trial.
    pub open_until: Option<u64>,
}

impl Breaker {
    /// Whether starting a turn is refused at `now`.
    pub fn is_open(&self, now: u64) -> bool {
        self.open_until.is_some_and(|until| now < until)
    }

    /// Whether it opened and its spell has passed: the next result decides.
    pub fn on_trial(&self, now: u64) -> bool {
        self.open_until.is_some_and(|until| now >= until)
    }
}

/// How long the `trips`-th opening in a row lasts.
pub fn spell(trips: u32, c: BreakerConfig) -> u64 {
    let doublings = trips.saturating_sub(1).min(32);
    c.base_ms.saturating_mul(1u64 << doublings).min(c.max_ms)
}

/// The breaker after `outcome` at `now`.
pub fn observe(b: Breaker, outcome: Outcome, now: u64, c: BreakerConfig) -> Breaker {
    if c.failures == 0 {
        return Breaker::default();
    }
    match outcome {
        Outcome::Success => Breaker::default(),
        // A turn started before it opened may still fail meanwhile: the
        // spell is running already.
        Outcome::Failure if b.is_open(now) => b,
        Outcome::Failure => {
            let failures = b.failures + 1;
            // On trial one failure is enough to open again.
            if b.on_trial(now) || failures >= c.failures {
                let trips = b.trips + 1;
                Breaker {
                    failures: 0,
                    trips,
                    open_until: Some(now.saturating_add(spell(trips, c))),
                }
            } else {
                Breaker { failures, ..b }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config() -> impl Strategy<Value = BreakerConfig> {
        (1u32..8, 1u64..1_000, 1u64..20).prop_map(|(failures, base_ms, factor)| BreakerConfig {
            failures,
            base_ms,
            max_ms: base_ms * factor,
        })
    }

    fn outcomes() -> impl Strategy<Value = Vec<(bool, u64)>> {
        proptest::collection::vec((any::<bool>(), 0u64..2_000), 0..200)
    }

    proptest! {
        #[test]
        fn it_opens_only_after_enough_failures_in_a_row_and_a_success_closes_it(
            c in config(),
            steps in outcomes(),
        ) {
            let (mut b, mut now, mut in_a_row) = (Breaker::default(), 0u64, 0u32);
            for (ok, gap) in steps {
                now += gap;
                let was = b;
                b = observe(b, if ok { Outcome::Success } else { Outcome::Failure }, now, c);
                if ok {
                    prop_assert_eq!(b, Breaker::default());
                    in_a_row = 0;
                    continue;
                }
                in_a_row += 1;
                // Newly open: enough failures in a row, or a failed trial.
                if b.is_open(now) && !was.is_open(now) {
                    prop_assert!(in_a_row >= c.failures || was.on_trial(now));
                    let spell = b.open_until.unwrap() - now;
                    prop_assert!(spell >= c.base_ms.min(c.max_ms) && spell <= c.max_ms);
                    in_a_row = 0;
                }
            }
        }

        #[test]
        fn spells_grow_with_each_opening_in_a_row_up_to_the_ceiling(c in config(), trips in 1u32..40) {
            prop_assert!(spell(trips + 1, c) >= spell(trips, c));
            prop_assert!(spell(trips, c) <= c.max_ms);
        }
    }

    #[test]
    fn five_failures_open_it_for_thirty_seconds_and_a_failed_trial_for_a_minute() {
        let c = BreakerConfig::with_failures(5);
        let mut b = Breaker::default();
        for i in 0..4 {
            b = observe(b, Outcome::Failure, i, c);
            assert!(!b.is_open(i));
        }
        b = observe(b, Outcome::Failure, 10, c);
        assert_eq!(b.open_until, Some(30_010));
        assert!(b.is_open(30_009) && !b.is_open(30_010));
        // A failure of a turn that started before changes nothing.
        assert_eq!(observe(b, Outcome::Failure, 20, c), b);
        b = observe(b, Outcome::Failure, 30_010, c);
        assert_eq!(b.open_until, Some(90_010));
        assert_eq!(observe(b, Outcome::Success, 90_011, c), Breaker::default());
        // Off: never opens.
        let off = BreakerConfig::with_failures(0);
        let mut b = Breaker::default();
        for i in 0..100 {
            b = observe(b, Outcome::Failure, i, off);
        }
        assert!(!b.is_open(100));
    }
}
