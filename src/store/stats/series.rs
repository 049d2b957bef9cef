//! The pure part of the overview's charts: cutting a time range into
//! buckets, summing counts per bucket, percentiles, and the queue's depth
//! from the moves into and out of it. Times are unix seconds.

use std::collections::BTreeMap;

/// A time range cut into equal buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Start of the first bucket.
    pub from: i64,
    /// End of the last bucket (exclusive).
    pub to: i64,
    /// Length of a bucket; `to - from` is a multiple of it.
    pub bucket: i64,
}

impl Window {
    /// `hours` up to `now` in buckets of `bucket` seconds, aligned to whole
    /// buckets: the last bucket is the one `now` is in. `bucket` divides an
    /// hour or is a multiple of one.
    pub fn ending_at(now: i64, hours: i64, bucket: i64) -> Window {
        let bucket = bucket.max(1);
        let to = (now.div_euclid(bucket) + 1) * bucket;
        let span = (hours.max(1) * 3600 + bucket - 1) / bucket * bucket;
        Window {
            from: to - span,
            to,
            bucket,
        }
    }

    /// How many buckets it has.
    pub fn len(&self) -> usize {
        usize::try_from((self.to - self.from) / self.bucket).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bucket `t` falls in, if inside.
    pub fn index(&self, t: i64) -> Option<usize> {
        if t < self.from || t >= self.to {
            return None;
        }
        usize::try_from((t - self.from) / self.bucket).ok()
    }

    /// Where bucket `i` starts.
    pub fn start_of(&self, i: usize) -> i64 {
        self.from + i64::try_from(i).unwrap_or(i64::MAX / 2) * self.bucket
    }
}

/// Sums `rows` (a time and `N` counts) per bucket. Buckets with no row are
/// left out; rows outside the window are dropped. Each result is the
/// bucket's start and its sums, in time order.
pub fn sum_by_bucket<const N: usize>(
    window: &Window,
    rows: impl IntoIterator<Item = (i64, [i64; N])>,
) -> Vec<(i64, [i64; N])> {
    let mut sums: BTreeMap<usize, [i64; N]> = BTreeMap::new();
    for (t, counts) in rows {
        let Some(i) = window.index(t) else { continue };
        let sum = sums.entry(i).or_insert([0; N]);
        for (s, c) in sum.iter_mut().zip(counts) {
            *s += c;
        }
    }
    sums.into_iter()
        .map(|(i, sum)| (window.start_of(i), sum))
        .collect()
}

/// The 50th, 90th and 99th percentile of some samples, and how many there were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    pub p50: i64,
    pub p90: i64,
    pub p99: i64,
    pub count: usize,
}

/// Percentiles by the nearest-rank method (each is one of the samples: the
/// smallest that at least p % of them do not exceed); `None` without samples.
pub fn percentiles(mut samples: Vec<i64>) -> Option<Percentiles> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let n = samples.len();
    let rank = |p: usize| samples[(p * n).div_ceil(100).clamp(1, n) - 1];
    Some(Percentiles {
        p50: rank(50),
        p90: rank(90),
        p99: rank(99),
        count: n,
    })
}

/// [`percentiles`] of the samples (a time and a value) in each bucket;
/// buckets without samples are left out.
pub fn percentiles_by_bucket(
    window: &Window,
    samples: impl IntoIterator<Item = (i64, i64)>,
) -> Vec<(i64, Percentiles)> {
    let mut by: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    for (t, v) in samples {
        if let Some(i) = window.index(t) {
            by.entry(i).or_default().push(v);
        }
    }
    by.into_iter()
        .filter_map(|(i, v)| Some((window.start_of(i), percentiles(v)?)))
        .collect()
}

/// The queue's depth at the end of each bucket, worked back from its depth
/// now: `depth(e) = depth_now - Σ moves at or after e`, where a move is +n
/// for tasks entering the queue and -n for tasks leaving it, at any time from
/// the window's start on (those after its end included). A result is given
/// for the first bucket and for each bucket whose depth differs from the one
/// before (the chart draws steps). A depth the history cannot account for
/// (moves read apart from the count) shows as 0, never below.
pub fn depth_series(window: &Window, depth_now: i64, moves: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut moves: Vec<(i64, i64)> = moves.to_vec();
    // Latest first: walking back from now, each bucket end takes off what
    // happened at or after it.
    moves.sort_unstable_by_key(|m| std::cmp::Reverse(m.0));
    let mut later = moves.into_iter().peekable();
    let mut depth = depth_now;
    let mut ends = vec![0; window.len()];
    for i in (0..window.len()).rev() {
        let end = window.start_of(i) + window.bucket;
        while let Some(&(t, delta)) = later.peek() {
            if t < end {
                break;
            }
            depth -= delta;
            later.next();
        }
        ends[i] = depth.max(0);
    }
    let mut out = Vec::new();
    for (i, d) in ends.into_iter().enumerate() {
        if out.last().is_none_or(|&(_, last)| last != d) {
            out.push((window.start_of(i), d));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIN: i64 = 60;

    #[test]
    fn a_window_ends_with_the_bucket_of_now() {
        let w = Window::ending_at(10 * 3600 + 30, 24, MIN);
        assert_eq!(w.to, 10 * 3600 + MIN);
        assert_eq!(w.len(), 24 * 60);
        assert_eq!(w.index(10 * 3600 + 30), Some(24 * 60 - 1));
        assert_eq!(w.index(w.from), Some(0));
        assert_eq!(w.index(w.from - 1), None);
        assert_eq!(w.index(w.to), None);
        assert_eq!(Window::ending_at(0, 168, 600).len(), 1008);
    }

    #[test]
    fn counts_are_summed_per_bucket_and_empty_buckets_left_out() {
        let w = Window {
            from: 0,
            to: 5 * MIN,
            bucket: MIN,
        };
        let sums = sum_by_bucket(
            &w,
            [
                (5, [1, 0]),
                (59, [1, 2]),
                (120, [0, 1]),
                (300, [9, 9]),
                (-1, [9, 9]),
            ],
        );
        assert_eq!(sums, vec![(0, [2, 2]), (120, [0, 1])]);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let p = percentiles((1..=100).collect()).unwrap();
        assert_eq!((p.p50, p.p90, p.p99, p.count), (50, 90, 99, 100));
        let p = percentiles(vec![7]).unwrap();
        assert_eq!((p.p50, p.p90, p.p99, p.count), (7, 7, 7, 1));
        let p = percentiles(vec![30, 10, 20]).unwrap();
        assert_eq!((p.p50, p.p90, p.p99), (20, 30, 30));
        assert_eq!(percentiles(Vec::new()), None);
    }

    #[test]
    fn queue_depth_is_worked_back_from_now() {
        let w = Window {
            from: 0,
            to: 4 * MIN,
            bucket: MIN,
        };
        // Two enter in minute 0, one leaves in minute 2, one enters after
        // the window: three queued now.
        let moves = [(0, 2), (130, -1), (500, 1)];
        assert_eq!(depth_series(&w, 2, &moves), vec![(0, 2), (120, 1)]);
        // Nothing moved: the depth now all along.
        assert_eq!(depth_series(&w, 3, &[]), vec![(0, 3)]);
    }

    /// Tasks queued over `[enter, leave)` (a leave of `None`: still queued),
    /// at whole minutes as the store reports them.
    fn stays() -> impl Strategy<Value = Vec<(i64, Option<i64>)>> {
        prop::collection::vec(
            (0i64..40, prop::option::of(0i64..40))
                .prop_map(|(a, len)| (a * MIN, len.map(|l| (a + l) * MIN))),
            0..30,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            failure_persistence: Some(Box::new(
                proptest::test_runner::FileFailurePersistence::Direct(
                    "tests/proptest-regressions/store-stats.txt"
                )
            )),
            ..ProptestConfig::default()
        })]

        /// Whatever the history, the depth at each bucket's end is the number
        /// of tasks queued then, and never negative.
        #[test]
        fn queue_depth_matches_the_tasks_queued_at_each_bucket_end(
            stays in stays(),
            from in 0i64..20,
            len in 1i64..25,
            bucket in prop::sample::select(vec![1i64, 2, 5]),
        ) {
            let w = Window { from: from * MIN, to: (from + len * bucket) * MIN, bucket: bucket * MIN };
            let mut moves = Vec::new();
            for (enter, leave) in &stays {
                if *enter >= w.from { moves.push((*enter, 1)); }
                if let Some(l) = leave { if *l >= w.from { moves.push((*l, -1)); } }
            }
            let now = stays.iter().filter(|(_, l)| l.is_none()).count() as i64;
            let series = depth_series(&w, now, &moves);
            // Dense again: each bucket takes the last point at or before it.
            let mut dense = Vec::new();
            let mut at = series.iter().peekable();
            let mut d = -1;
            for i in 0..w.len() {
                while let Some(&&(t, v)) = at.peek() {
                    if t > w.start_of(i) { break; }
                    d = v;
                    at.next();
                }
                dense.push(d);
            }
            for (i, d) in dense.iter().enumerate() {
                let end = w.start_of(i) + w.bucket;
                let queued = stays
                    .iter()
                    .filter(|(e, l)| *e < end && l.is_none_or(|l| l >= end))
                    .count() as i64;
                prop_assert!(*d >= 0);
                prop_assert_eq!(*d, queued, "bucket {} of {:?}", i, series);
            }
        }

        /// However the depth now disagrees with the moves, no point is negative.
        #[test]
        fn queue_depth_is_never_negative(
            now in 0i64..5,
            moves in prop::collection::vec((0i64..3000, -3i64..4), 0..40),
        ) {
            let w = Window { from: 0, to: 40 * MIN, bucket: MIN };
            for (_, d) in depth_series(&w, now, &moves) {
                prop_assert!(d >= 0);
            }
        }

        /// Per-bucket sums add up to the total of the rows inside the window,
        /// and each lies in the window.
        #[test]
        fn bucket_sums_add_up_to_the_total_in_range(
            rows in prop::collection::vec((-200i64..4000, 0i64..50, 0i64..50), 0..200),
            bucket in prop::sample::select(vec![60i64, 120, 300]),
        ) {
            let w = Window::ending_at(3500, 1, bucket);
            let sums = sum_by_bucket(&w, rows.iter().map(|&(t, a, b)| (t, [a, b])));
            let inside: Vec<_> = rows.iter().filter(|(t, _, _)| w.index(*t).is_some()).collect();
            let total: i64 = sums.iter().map(|(_, [a, b])| a + b).sum();
            prop_assert_eq!(total, inside.iter().map(|(_, a, b)| a + b).sum::<i64>());
            for (t, _) in &sums {
                prop_assert!(w.index(*t).is_some());
                prop_assert_eq!(t.rem_euclid(bucket), 0);
            }
        }

        /// p50 <= p90 <= p99, each one of the samples, and at least that share
        /// of samples at or below it.
        #[test]
        fn percentiles_are_ordered_samples(samples in prop::collection::vec(0i64..100_000, 1..300)) {
            let p = percentiles(samples.clone()).unwrap();
            prop_assert!(p.p50 <= p.p90 && p.p90 <= p.p99);
            prop_assert_eq!(p.count, samples.len());
            for (v, share) in [(p.p50, 50), (p.p90, 90), (p.p99, 99)] {
                prop_assert!(samples.contains(&v));
                let at_most = samples.iter().filter(|s| **s <= v).count();
                prop_assert!(at_most * 100 >= share * samples.len());
            }
        }
    }
}
