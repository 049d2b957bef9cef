//! Which refused webhooks the audit log keeps. Anyone who can reach the
//! webhook URL can send unsigned or malformed requests, as fast as they
//! like; the audit log is append-only, so one row per refusal would let
//! them grow it without bound. Every refusal is counted; at most
//! `per_window` of each kind per window are audited, and each audited one
//! says how many went unaudited before it.

use serde::Serialize;

/// A kind of refused webhook, as its audit action names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Refused {
    /// The signature was missing or wrong.
    Signature,
    /// Signed, but not a payload the bridge can read.
    Payload,
}

impl Refused {
    pub const ALL: [Refused; 2] = [Refused::Signature, Refused::Payload];

    /// The audit action of an audited one.
    pub fn action(self) -> &'static str {
        match self {
            Refused::Signature => "webhook.signature_rejected",
            Refused::Payload => "webhook.invalid_payload",
        }
    }
}

/// How many of one kind are audited per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampling {
    pub per_window: u32,
    pub window_ms: u64,
}

impl Sampling {
    /// Ten a minute: enough to see who sends what, at most about 14,400
    /// rows a day per kind whatever the rate.
    pub const DEFAULT: Sampling = Sampling {
        per_window: 10,
        window_ms: 60_000,
    };
}

/// What one kind's refusals were, as far as the sampling needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// When the current window began (ms on the caller's clock); `None`
    /// before the first refusal.
    pub window_start: Option<u64>,
    /// Audited in the current window.
    pub audited: u32,
    /// Refused since the last audited one, not audited.
    pub unaudited: u64,
}

/// What to do with one refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Audit it, saying how many went unaudited since the previous one.
    Audit { unaudited_before: u64 },
    /// Count it only.
    Count,
}

/// One refusal at `now` (ms, never going back) against `tally`: the tally
/// after it, and whether it is audited.
pub fn take(tally: Tally, now: u64, s: Sampling) -> (Tally, Take) {
    let fresh = match tally.window_start {
        None => true,
        Some(start) => now.saturating_sub(start) >= s.window_ms,
    };
    let (start, audited) = if fresh {
        (now, 0)
    } else {
        (tally.window_start.unwrap_or(now), tally.audited)
    };
    if audited < s.per_window {
        (
            Tally {
                window_start: Some(start),
                audited: audited + 1,
                unaudited: 0,
            },
            Take::Audit {
                unaudited_before: tally.unaudited,
            },
        )
    } else {
        (
            Tally {
                window_start: Some(start),
                audited,
                unaudited: tally.unaudited + 1,
            },
            Take::Count,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sampling() -> impl Strategy<Value = Sampling> {
        (1u32..20, 1u64..10_000).prop_map(|(per_window, window_ms)| Sampling {
            per_window,
            window_ms,
        })
    }

    proptest! {
        #[test]
        fn every_refusal_is_audited_or_counted_and_audits_stay_bounded(
            s in sampling(),
            gaps in proptest::collection::vec(0u64..500, 1..400),
        ) {
            let (mut tally, mut now) = (Tally::default(), 0u64);
            let (mut audited, mut accounted) = (Vec::new(), 0u64);
            for gap in gaps.iter() {
                now += gap;
                let (next, took) = take(tally, now, s);
                if let Take::Audit { unaudited_before } = took {
                    // Each audited one accounts for itself and the silent
                    // ones before it.
                    accounted += 1 + unaudited_before;
                    audited.push(now);
                }
                tally = next;
            }
            accounted += tally.unaudited;
            prop_assert_eq!(accounted, gaps.len() as u64);
            // Never more than per_window audits within any window's span.
            for (i, t) in audited.iter().enumerate() {
                let within = audited[i..].iter().take_while(|u| **u < t + s.window_ms).count();
                prop_assert!(within <= 2 * s.per_window as usize, "{within} audits within one window");
            }
            let windows = now / s.window_ms + 1;
            prop_assert!(audited.len() as u64 <= windows * s.per_window as u64);
        }

        #[test]
        fn the_first_refusal_after_a_quiet_window_is_audited(
            s in sampling(),
            tally in (0u64..1000, 0u32..20, 0u64..1000).prop_map(|(w, a, u)| Tally {
                window_start: Some(w), audited: a, unaudited: u,
            }),
        ) {
            let later = tally.window_start.unwrap_or(0) + s.window_ms;
            let (after, took) = take(tally, later, s);
            prop_assert_eq!(took, Take::Audit { unaudited_before: tally.unaudited });
            prop_assert_eq!(after.unaudited, 0);
            prop_assert_eq!(after.audited, 1);
        }
    }

    #[test]
    fn a_flood_is_audited_ten_times_a_minute() {
        let mut tally = Tally::default();
        let mut audits = 0;
        for i in 0..2_000u64 {
            let (next, took) = take(tally, i / 5, Sampling::DEFAULT);
            if matches!(took, Take::Audit { .. }) {
                audits += 1;
            }
            tally = next;
        }
        assert_eq!(audits, 10);
        assert_eq!(tally.unaudited, 1_990);
    }
}
