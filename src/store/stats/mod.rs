//! The overview's charts, from what the store already holds: webhooks
//! received and tasks finished per minute, the queue's depth over time,
//! turn duration percentiles per hour, and tokens per repository per day.
//!
//! Every query is a range scan of an index on a time column
//! (`webhook_deliveries_received`, `task_transitions_at`, `turns_completed`,
//! `turn_token_usage_updated`), and the per-minute series are counted by the
//! database (`substr` of the stored RFC 3339 text down to the minute, the same
//! on SQLite and PostgreSQL), so a busy day costs at most a row per minute
//! and kind, not one per delivery. Turns and token reports are read a row
//! each: there are few of them (a turn takes seconds to minutes).
//!
//! The queue's depth is derived from the task history, not sampled: the
//! count of `queued` tasks now, worked back through every transition into and
//! out of `queued` since the window's start (see [`series::depth_series`]),
//! so it covers the whole window whatever this process's uptime, and work of
//! every instance on a shared database. Both are read in one snapshot.

pub mod series;

use super::queue::{literal, QUEUED};
use super::schema::{task_transitions, tasks, turn_token_usage, turns, webhook_deliveries};
use super::{format_time, DbConn, StoreError};
use crate::agent::transcript::TokenCounts;
use crate::lifecycle::TaskState;
use crate::with_conn;
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use diesel::connection::SimpleConnection;
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use serde::Serialize;
use series::Window;
use std::collections::BTreeMap;

/// The longest range the charts cover: a week.
pub const MAX_HOURS: u32 = 168;
/// Days of token usage per repository.
pub const TOKEN_DAYS: i64 = 14;

/// How far back the per-minute and per-hour charts look, in hours (1 to
/// [`MAX_HOURS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hours(u32);

impl Hours {
    pub const DAY: Hours = Hours(24);

    pub fn new(hours: u32) -> Option<Hours> {
        (1..=MAX_HOURS).contains(&hours).then_some(Hours(hours))
    }

    pub fn get(self) -> u32 {
        self.0
    }

    /// The per-minute charts' bucket: a minute up to a day, longer beyond,
    /// so that no chart has more than 1440 points.
    pub fn bucket_secs(self) -> i64 {
        match self.0 {
            0..=24 => 60,
            25..=48 => 120,
            49..=120 => 300,
            _ => 600,
        }
    }
}

/// Everything the overview's charts show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Start of the first bucket of the per-minute charts.
    pub from: String,
    /// End of their last bucket (the one that holds the time asked about).
    pub to: String,
    pub bucket_secs: i64,
    /// Deliveries received per bucket; buckets without any are left out.
    pub webhooks: Vec<WebhookCount>,
    /// Tasks that reached an end per bucket; buckets without any are left out.
    pub tasks_finished: Vec<FinishedCount>,
    /// `queued` tasks at the end of a bucket, given where it changes (and for
    /// the first bucket): it holds until the next point.
    pub queue_depth: Vec<DepthPoint>,
    /// Durations of the turns that ended in each hour (by their start and
    /// end); hours without any are left out.
    pub turn_duration: Vec<DurationPercentiles>,
    /// Tokens the turns of each repository used per UTC day, over the last
    /// [`TOKEN_DAYS`] days (by the turn's latest usage report), by day then
    /// repository.
    pub tokens_by_repo_day: Vec<RepoDayTokens>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WebhookCount {
    pub t: String,
    /// Status `accepted`: a task was made.
    pub accepted: i64,
    /// Every other status (duplicate, ignored, recorded, rejected, …).
    pub other: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FinishedCount {
    pub t: String,
    /// `succeeded` and `succeeded_with_rest_fallback`.
    pub succeeded: i64,
    /// `failed`, `failed_reply`, `timed_out` and `aborted`.
    pub failed: i64,
    /// Ends without a run of their own: `cancelled`, `ignored`, `duplicate`, `rejected`.
    pub other: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DepthPoint {
    pub t: String,
    pub depth: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DurationPercentiles {
    /// Start of the hour.
    pub t: String,
    pub p50_ms: i64,
    pub p90_ms: i64,
    pub p99_ms: i64,
    pub count: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RepoDayTokens {
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub repo: String,
    #[serde(flatten)]
    pub tokens: TokenCounts,
}

/// How [`FinishedCount`] counts a task's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    Succeeded,
    Failed,
    Other,
}

impl Finish {
    /// The end `state` is, if it is one.
    fn of(state: TaskState) -> Option<Finish> {
        use TaskState::*;
        match state {
            Succeeded | SucceededWithRestFallback => Some(Finish::Succeeded),
            Failed | FailedReply | TimedOut | Aborted => Some(Finish::Failed),
            Cancelled | Ignored | Duplicate | Rejected => Some(Finish::Other),
            _ => None,
        }
    }

    /// `n` of this kind as counts in [`FinishedCount`]'s order.
    fn counts(self, n: i64) -> [i64; 3] {
        match self {
            Finish::Succeeded => [n, 0, 0],
            Finish::Failed => [0, n, 0],
            Finish::Other => [0, 0, n],
        }
    }
}

/// The charts for the `hours` up to `now`.
pub fn stats(conn: &mut DbConn, now: DateTime<Utc>, hours: Hours) -> Result<Stats, StoreError> {
    conn.transaction(|c| {
        // One snapshot for the queue's count and its history (SQLite's read
        // transaction is one already).
        if let DbConn::Pg(pg) = c {
            pg.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
        }
        read_stats(c, now, hours)
    })
}

fn read_stats(c: &mut DbConn, now: DateTime<Utc>, hours: Hours) -> Result<Stats, StoreError> {
    let minutes = Window::ending_at(now.timestamp(), i64::from(hours.get()), hours.bucket_secs());
    let hourly = Window::ending_at(now.timestamp(), i64::from(hours.get()), 3600);
    let days = Window::ending_at(now.timestamp(), TOKEN_DAYS * 24, 86_400);

    let webhooks = series::sum_by_bucket(
        &minutes,
        webhooks_per_minute(c, &minutes)?
            .into_iter()
            .filter_map(|(minute, status, n)| {
                let accepted = status == "accepted";
                Some((
                    minute_secs(&minute)?,
                    [if accepted { n } else { 0 }, if accepted { 0 } else { n }],
                ))
            }),
    )
    .into_iter()
    .map(|(t, [accepted, other])| WebhookCount {
        t: time_text(t),
        accepted,
        other,
    })
    .collect();

    let (depth_now, moves) = queue_history(c, &minutes)?;
    let mut finished = Vec::new();
    let mut queue_moves = Vec::new();
    for m in moves {
        let Some(t) = minute_secs(&m.minute) else {
            continue;
        };
        if let Some(finish) = Finish::of(m.to) {
            finished.push((t, finish.counts(m.count)));
        }
        let delta =
            i64::from(m.to == TaskState::Queued) - i64::from(m.from == Some(TaskState::Queued));
        if delta != 0 {
            queue_moves.push((t, delta * m.count));
        }
    }
    let tasks_finished = series::sum_by_bucket(&minutes, finished)
        .into_iter()
        .map(|(t, [succeeded, failed, other])| FinishedCount {
            t: time_text(t),
            succeeded,
            failed,
            other,
        })
        .collect();
    let queue_depth = series::depth_series(&minutes, depth_now, &queue_moves)
        .into_iter()
        .map(|(t, depth)| DepthPoint {
            t: time_text(t),
            depth,
        })
        .collect();

    let turn_duration = series::percentiles_by_bucket(&hourly, turn_durations(c, &hourly)?)
        .into_iter()
        .map(|(t, p)| DurationPercentiles {
            t: time_text(t),
            p50_ms: p.p50,
            p90_ms: p.p90,
            p99_ms: p.p99,
            count: p.count,
        })
        .collect();

    Ok(Stats {
        from: time_text(minutes.from),
        to: time_text(minutes.to),
        bucket_secs: minutes.bucket,
        webhooks,
        tasks_finished,
        queue_depth,
        turn_duration,
        tokens_by_repo_day: tokens_by_repo_day(c, &days)?,
    })
}

/// A stored time's minute (`YYYY-MM-DDTHH:MM`, UTC) in unix seconds.
fn minute_secs(minute: &str) -> Option<i64> {
    NaiveDateTime::parse_from_str(minute, "%Y-%m-%dT%H:%M")
        .ok()
        .map(|t| t.and_utc().timestamp())
}

/// A stored time in unix milliseconds.
fn time_millis(t: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(t)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Unix seconds as the API writes a bucket's start.
fn time_text(secs: i64) -> String {
    DateTime::from_timestamp(secs, 0)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Where a window starts, as stored times compare.
fn stored(secs: i64) -> String {
    format_time(DateTime::from_timestamp(secs, 0).unwrap_or_default())
}

/// Deliveries received in the window: (minute, status, how many).
fn webhooks_per_minute(
    conn: &mut DbConn,
    window: &Window,
) -> Result<Vec<(String, String, i64)>, StoreError> {
    use webhook_deliveries as d;
    let (from, to) = (stored(window.from), stored(window.to));
    Ok(with_conn!(conn, |c| d::table
        .filter(d::received_at.ge(&from))
        .filter(d::received_at.lt(&to))
        .group_by(sql::<Text>("substr(received_at, 1, 16), status"))
        .select(sql::<(Text, Text, BigInt)>(
            "substr(received_at, 1, 16), status, COUNT(*)"
        ))
        .load(c))?)
}

/// Transitions of one kind in one minute.
struct Moves {
    minute: String,
    from: Option<TaskState>,
    to: TaskState,
    count: i64,
}

/// The number of `queued` tasks now, and the transitions since the window's
/// start (to its end and beyond) that end a task or move it into or out of
/// the queue, counted per minute and kind.
fn queue_history(conn: &mut DbConn, window: &Window) -> Result<(i64, Vec<Moves>), StoreError> {
    use task_transitions as t;
    let from = stored(window.from);
    let ends: Vec<&str> = TaskState::TERMINAL.iter().map(|s| s.as_str()).collect();
    let queued = TaskState::Queued.as_str();
    let (depth, rows) = with_conn!(conn, |c| {
        let depth: i64 = tasks::table.filter(literal(QUEUED)).count().get_result(c)?;
        let rows: Vec<(String, Option<TaskState>, TaskState, i64)> = t::table
            .filter(t::at.ge(&from))
            .filter(
                t::to_state
                    .eq_any(&ends)
                    .or(t::to_state.eq(queued))
                    .or(t::from_state.eq(queued)),
            )
            .group_by(sql::<Text>("substr(at, 1, 16), from_state, to_state"))
            .select(sql::<(Text, Nullable<Text>, Text, BigInt)>(
                "substr(at, 1, 16), from_state, to_state, COUNT(*)",
            ))
            .load(c)?;
        Ok::<_, diesel::result::Error>((depth, rows))
    })?;
    Ok((
        depth,
        rows.into_iter()
            .map(|(minute, from, to, count)| Moves {
                minute,
                from,
                to,
                count,
            })
            .collect(),
    ))
}

/// Turns that ended in the window: (end, duration in ms).
fn turn_durations(conn: &mut DbConn, window: &Window) -> Result<Vec<(i64, i64)>, StoreError> {
    let (from, to) = (stored(window.from), stored(window.to));
    let rows: Vec<(String, Option<String>)> = with_conn!(conn, |c| turns::table
        .filter(turns::completed_at.ge(&from))
        .filter(turns::completed_at.lt(&to))
        .select((turns::started_at, turns::completed_at))
        .load(c))?;
    Ok(rows
        .into_iter()
        .filter_map(|(start, end)| {
            let (start, end) = (time_millis(&start)?, time_millis(end.as_deref()?)?);
            Some((end.div_euclid(1000), (end - start).max(0)))
        })
        .collect())
}

/// A token report: when, the task's repository, the thread's totals before
/// and after the turn.
type UsageRow = (String, String, Counts, Counts);
type Counts = (i64, i64, i64, i64, i64);

/// Tokens per repository and UTC day, from the turns whose latest usage
/// report lies in the window.
fn tokens_by_repo_day(
    conn: &mut DbConn,
    window: &Window,
) -> Result<Vec<RepoDayTokens>, StoreError> {
    use turn_token_usage as u;
    let (from, to) = (stored(window.from), stored(window.to));
    let rows: Vec<UsageRow> = with_conn!(conn, |c| u::table
        .inner_join(turns::table.on(turns::turn_id.eq(u::turn_id)))
        .inner_join(tasks::table.on(tasks::task_id.eq(turns::task_id)))
        .filter(u::updated_at.ge(&from))
        .filter(u::updated_at.lt(&to))
        .select((
            u::updated_at,
            tasks::repo_key,
            (
                u::start_input_tokens,
                u::start_cached_input_tokens,
                u::start_output_tokens,
                u::start_reasoning_tokens,
                u::start_total_tokens,
            ),
            (
                u::end_input_tokens,
                u::end_cached_input_tokens,
                u::end_output_tokens,
                u::end_reasoning_tokens,
                u::end_total_tokens,
            ),
        ))
        .load(c))?;
    let mut by: BTreeMap<(NaiveDate, String), TokenCounts> = BTreeMap::new();
    for (at, repo, start, end) in rows {
        let Ok(at) = DateTime::parse_from_rfc3339(&at) else {
            continue;
        };
        let sum = by.entry((at.to_utc().date_naive(), repo)).or_default();
        let used = counts(end).since(counts(start));
        sum.input += used.input;
        sum.cached_input += used.cached_input;
        sum.output += used.output;
        sum.reasoning += used.reasoning;
        sum.total += used.total;
    }
    Ok(by
        .into_iter()
        .map(|((day, repo), tokens)| RepoDayTokens {
            day: day.format("%Y-%m-%d").to_string(),
            repo,
            tokens,
        })
        .collect())
}

fn counts((input, cached_input, output, reasoning, total): Counts) -> TokenCounts {
    TokenCounts {
        input,
        cached_input,
        output,
        reasoning,
        total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_end_is_counted_and_nothing_else() {
        for state in TaskState::ALL {
            assert_eq!(Finish::of(state).is_some(), state.is_terminal(), "{state}");
        }
        assert_eq!(Finish::of(TaskState::Duplicate), Some(Finish::Other));
    }

    #[test]
    fn hours_are_bounded_and_no_chart_has_more_than_1440_buckets() {
        assert_eq!(Hours::new(0), None);
        assert_eq!(Hours::new(MAX_HOURS + 1), None);
        for h in 1..=MAX_HOURS {
            let hours = Hours::new(h).unwrap();
            let w = Window::ending_at(1_000_000, i64::from(h), hours.bucket_secs());
            assert!(w.len() <= 1440, "{h} h: {}", w.len());
            assert_eq!(w.to - w.from, i64::from(h) * 3600, "{h} h");
        }
    }
}
