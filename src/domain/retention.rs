//! Retention: what the store lets go of, and what it keeps for ever.
//!
//! - A webhook delivery no task was made from (an ignored event, a replay
//!   found to be a duplicate, a refusal) is deleted once it is older than
//!   `delivery_retention_days`. What a replay of Gitea's is found by stays:
//!   a delivery a task was made from stays with its task (its trigger key is
//!   on the task, for ever), and so does every delivery that claimed a
//!   comment's content key (id + action + `updated_at`). Gitea can replay a
//!   delivery only while its hook task exists: its cron
//!   `cleanup_hook_task_table` deletes them 168 hours after delivery by
//!   default, once a day at midnight, so at most eight days; the key's
//!   floor is those eight days.
//! - The catch-up's own deliveries stay: a quiet repository's newest comment
//!   is listed again by every pass, and a refused catch-up delivery is what
//!   keeps that comment from being taken up a second time. They are few (one
//!   per comment whose webhook was lost).
//! - The events of a turn (one row per notification Codex sent) are
//!   compacted once the turn completed `turn_event_retention_days` ago and
//!   its task ended: the turn keeps its `event_seq`, its final text and its
//!   transcript.
//! - Refusal counts go with the deliveries' retention.
//! - Audit events are never deleted; `codex-bridge audit export` writes
//!   them out for archiving.
//!
//! [`cutoffs`] decides, without I/O; `store::retention` deletes.

use chrono::{DateTime, Duration, Utc};

/// The least `delivery_retention_days` other than 0: Gitea replays a
/// delivery for up to 168 hours, plus up to a day until its nightly cleanup.
pub const MIN_DELIVERY_RETENTION_DAYS: u64 = 8;

/// The most days a retention key takes (a hundred years).
pub const MAX_RETENTION_DAYS: u64 = 36_500;

/// How long ended work's records are kept (days; 0: for ever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub delivery_days: u64,
    pub turn_event_days: u64,
}

/// What one pass may delete: rows older than these times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cutoffs {
    /// Deliveries received before this, and refusal counts of minutes
    /// before it (`None`: kept).
    pub deliveries: Option<DateTime<Utc>>,
    /// Events of turns completed before this (`None`: kept).
    pub turn_events: Option<DateTime<Utc>>,
}

/// The cut-offs of a pass at `now`.
pub fn cutoffs(now: DateTime<Utc>, policy: Policy) -> Cutoffs {
    let days_before = |days: u64| {
        (days > 0).then(|| {
            let days = i64::try_from(days.min(MAX_RETENTION_DAYS)).unwrap_or(36_500);
            now - Duration::days(days)
        })
    };
    Cutoffs {
        deliveries: days_before(policy.delivery_days),
        turn_events: days_before(policy.turn_event_days),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn policy(delivery_days: u64, turn_event_days: u64) -> Policy {
        Policy {
            delivery_days,
            turn_event_days,
        }
    }

    #[test]
    fn zero_days_keep_everything() {
        let c = cutoffs(at("2026-12-04T00:00:00Z"), policy(0, 0));
        assert_eq!(c, Cutoffs::default());
    }

    #[test]
    fn the_cut_off_is_the_policy_s_days_before_now() {
        let c = cutoffs(at("2026-12-04T10:00:00Z"), policy(30, 7));
        assert_eq!(c.deliveries, Some(at("2026-11-04T10:00:00Z")));
        assert_eq!(c.turn_events, Some(at("2026-11-27T10:00:00Z")));
    }

    proptest! {
        /// Whatever the policy, nothing younger than its days is ever cut,
        /// and 0 days keeps everything.
        #[test]
        fn nothing_younger_than_the_policy_is_cut(
            now_secs in 1_600_000_000i64..2_000_000_000,
            delivery_days in 0u64..=MAX_RETENTION_DAYS,
            turn_event_days in 0u64..=MAX_RETENTION_DAYS,
        ) {
            let now = DateTime::from_timestamp(now_secs, 0).unwrap();
            let c = cutoffs(now, policy(delivery_days, turn_event_days));
            prop_assert_eq!(c.deliveries.is_some(), delivery_days > 0);
            prop_assert_eq!(c.turn_events.is_some(), turn_event_days > 0);
            for (cut, days) in [(c.deliveries, delivery_days), (c.turn_events, turn_event_days)] {
                if let Some(cut) = cut {
                    prop_assert_eq!(cut, now - Duration::days(days as i64));
                    prop_assert!(cut < now);
                }
            }
        }
    }
}
