//! Process-wide metrics and their Prometheus text encoding (`GET /metrics`,
//! served by `web/metrics.rs`).
//!
//! Counters and histograms live in one global registry because they are
//! incremented where things happen (the webhook handler, the store's writer
//! thread, the actors), far from any shared state; gauges (queue depth, running
//! turns) are read from the store and the actor tree at scrape time instead.
//! Everything is plain atomics and short mutexes: a scrape or an increment never
//! waits on I/O. This module imports nothing of the crate, so every floor may
//! call it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Webhook outcomes, pre-registered at 0 so a dashboard sees every series
/// before the first event of its kind.
pub const WEBHOOK_OUTCOMES: &[&str] = &[
    "accepted",
    "duplicate",
    "ignored",
    "bad_signature",
    "bad_request",
    "too_large",
    "unsupported_media_type",
    "disabled",
    "outbox_full",
    "unavailable",
];

/// Reply verification outcomes.
pub const VERIFICATION_OUTCOMES: &[&str] = &["confirmed", "missing", "unknown"];

/// Buckets of the webhook accept time: the hot path answers in milliseconds.
const ACCEPT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
/// Buckets of the bridge's own completion-to-commit time per turn.
const SETTLE_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];
/// Buckets of a turn's duration: seconds to the 30-minute default timeout and beyond.
const TURN_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
];

/// A counter with one label.
struct LabelledCounter {
    values: Mutex<BTreeMap<String, u64>>,
}

impl LabelledCounter {
    fn new(known: &[&str]) -> Self {
        LabelledCounter {
            values: Mutex::new(known.iter().map(|k| ((*k).to_owned(), 0)).collect()),
        }
    }

    fn add(&self, label: &str, n: u64) {
        if let Ok(mut v) = self.values.lock() {
            match v.get_mut(label) {
                Some(c) => *c += n,
                None => {
                    v.insert(label.to_owned(), n);
                }
            }
        }
    }

    fn snapshot(&self) -> Vec<(String, u64)> {
        self.values
            .lock()
            .map(|v| v.iter().map(|(k, n)| (k.clone(), *n)).collect())
            .unwrap_or_default()
    }
}

/// A histogram with fixed upper bounds (seconds).
struct Histogram {
    bounds: &'static [f64],
    state: Mutex<HistogramState>,
}

#[derive(Clone, Default)]
struct HistogramState {
    /// Per bucket, not cumulative; the encoder accumulates.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            state: Mutex::new(HistogramState {
                counts: vec![0; bounds.len()],
                ..Default::default()
            }),
        }
    }

    fn observe(&self, seconds: f64) {
        if let Ok(mut s) = self.state.lock() {
            if let Some(i) = self.bounds.iter().position(|b| seconds <= *b) {
                s.counts[i] += 1;
            }
            s.sum += seconds;
            s.count += 1;
        }
    }

    fn snapshot(&self) -> HistogramState {
        self.state.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

struct Registry {
    webhooks: LabelledCounter,
    transitions: LabelledCounter,
    restarts: LabelledCounter,
    verifications: LabelledCounter,
    accept: Histogram,
    turn: Histogram,
    settle: Histogram,
    turns_in_progress: AtomicU64,
    started_at: f64,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry {
        webhooks: LabelledCounter::new(WEBHOOK_OUTCOMES),
        transitions: LabelledCounter::new(TASK_STATES),
        restarts: LabelledCounter::new(&["repo", "session"]),
        verifications: LabelledCounter::new(VERIFICATION_OUTCOMES),
        accept: Histogram::new(ACCEPT_BUCKETS),
        turn: Histogram::new(TURN_BUCKETS),
        settle: Histogram::new(SETTLE_BUCKETS),
        turns_in_progress: AtomicU64::new(0),
        started_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
    })
}

/// The task states of the lifecycle (kept here as names so this module stays a leaf;
/// a unit test checks them against `lifecycle`).
const TASK_STATES: &[&str] = &[
    "received",
    "queued",
    "leased",
    "running",
    "awaiting_approval",
    "waiting_user",
    "verifying_reply",
    "retry_wait",
    "blocked_workspace",
    "cancel_requested",
    "needs_reconciliation",
    "succeeded",
    "succeeded_with_rest_fallback",
    "failed",
    "failed_reply",
    "cancelled",
    "aborted",
    "timed_out",
    "ignored",
    "duplicate",
    "rejected",
];

/// One webhook answered, with its outcome (one of [`WEBHOOK_OUTCOMES`]) and
/// the time the handler took.
pub fn webhook(outcome: &str, took: Duration) {
    let r = registry();
    r.webhooks.add(outcome, 1);
    r.accept.observe(took.as_secs_f64());
}

/// An actor was restarted by its supervisor (`kind`: `repo` or `session`).
pub fn actor_restart(kind: &str) {
    registry().restarts.add(kind, 1);
}

/// A reply was verified in Gitea (`outcome`: one of [`VERIFICATION_OUTCOMES`]).
pub fn reply_verification(outcome: &str) {
    registry().verifications.add(outcome, 1);
}

/// The bridge's own cost of one finished turn: from the runtime's completion
/// reaching the session actor to the result being committed.
pub fn turn_settle(took: Duration) {
    registry().settle.observe(took.as_secs_f64());
}

/// Times one turn from its start until it settles (or its pass ends): drop it
/// where the turn is over. Also counts the turns in progress in this process.
pub struct TurnTimer {
    started: std::time::Instant,
}

impl TurnTimer {
    pub fn start() -> TurnTimer {
        registry().turns_in_progress.fetch_add(1, Ordering::Relaxed);
        TurnTimer {
            started: std::time::Instant::now(),
        }
    }
}

impl Drop for TurnTimer {
    fn drop(&mut self) {
        let r = registry();
        r.turns_in_progress.fetch_sub(1, Ordering::Relaxed);
        r.turn.observe(self.started.elapsed().as_secs_f64());
    }
}

// Transitions are counted only once their transaction committed. The store's
// writer threads collect them per thread while a transaction runs and publish
// or drop them when it ends; on any other thread (the CLI's direct
// connections, tests) nothing is collected.
thread_local! {
    static PENDING: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// Store side: a history row to `to_state` was written in the current transaction.
pub fn transition_written(to_state: &str) {
    PENDING.with(|p| {
        if let Some(v) = p.borrow_mut().as_mut() {
            v.push(to_state.to_owned());
        }
    });
}

/// Writer side: collect transitions on this thread from now on.
pub fn collect_transitions_on_this_thread() {
    PENDING.with(|p| *p.borrow_mut() = Some(Vec::new()));
}

/// Writer side: how many transitions are pending (a savepoint's mark).
pub fn pending_mark() -> usize {
    PENDING.with(|p| p.borrow().as_ref().map_or(0, Vec::len))
}

/// Writer side: a savepoint rolled back; forget what it wrote.
pub fn rollback_to(mark: usize) {
    PENDING.with(|p| {
        if let Some(v) = p.borrow_mut().as_mut() {
            v.truncate(mark);
        }
    });
}

/// Writer side: the transaction ended; count its transitions if it committed.
pub fn transaction_finished(committed: bool) {
    let done = PENDING.with(|p| p.borrow_mut().as_mut().map(std::mem::take));
    if let (true, Some(done)) = (committed, done) {
        let r = registry();
        for to in done {
            r.transitions.add(&to, 1);
        }
    }
}

/// Gauges read at scrape time by the caller (from the store and the actors).
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// Whether the store answered the scrape's queries.
    pub store_up: bool,
    /// Tasks per state, across every instance that shares the database.
    pub tasks_by_state: Vec<(String, i64)>,
    /// `queued` tasks.
    pub queue_depth: i64,
    /// Tasks whose turn is open (`running`, `awaiting_approval`, `cancel_requested`).
    pub running_turns: i64,
    /// Live actors of this process by kind (`repo`, `session`); empty without an agent runtime.
    pub actors: Vec<(&'static str, i64)>,
}

/// The Prometheus text exposition (format 0.0.4) of every metric.
pub fn render(g: &Gauges) -> String {
    let r = registry();
    let mut out = String::with_capacity(8192);
    let mut e = Encoder { out: &mut out };

    e.head(
        "codex_bridge_webhooks_total",
        "counter",
        "Webhook requests answered, by outcome.",
    );
    for (label, n) in r.webhooks.snapshot() {
        e.sample(
            "codex_bridge_webhooks_total",
            &[("outcome", &label)],
            n as f64,
        );
    }
    e.histogram(
        "codex_bridge_webhook_accept_duration_seconds",
        "Time the webhook handler took, from request to answer, whatever the outcome.",
        ACCEPT_BUCKETS,
        &r.accept.snapshot(),
    );
    e.head(
        "codex_bridge_task_transitions_total",
        "counter",
        "Task state changes committed by this process, by target state.",
    );
    for (label, n) in r.transitions.snapshot() {
        e.sample(
            "codex_bridge_task_transitions_total",
            &[("state", &label)],
            n as f64,
        );
    }
    e.head(
        "codex_bridge_actor_restarts_total",
        "counter",
        "Actors restarted by their supervisor after a fault, by kind.",
    );
    for (label, n) in r.restarts.snapshot() {
        e.sample(
            "codex_bridge_actor_restarts_total",
            &[("kind", &label)],
            n as f64,
        );
    }
    e.head(
        "codex_bridge_reply_verifications_total",
        "counter",
        "Replies checked in Gitea, by outcome.",
    );
    for (label, n) in r.verifications.snapshot() {
        e.sample(
            "codex_bridge_reply_verifications_total",
            &[("outcome", &label)],
            n as f64,
        );
    }
    e.histogram(
        "codex_bridge_turn_duration_seconds",
        "Time from a turn's start until its task settled.",
        TURN_BUCKETS,
        &r.turn.snapshot(),
    );
    e.histogram(
        "codex_bridge_turn_settle_seconds",
        "The bridge's own time from a turn's completion event to its result being committed.",
        SETTLE_BUCKETS,
        &r.settle.snapshot(),
    );
    e.head(
        "codex_bridge_turns_in_progress",
        "gauge",
        "Turns this process is running now.",
    );
    e.sample(
        "codex_bridge_turns_in_progress",
        &[],
        r.turns_in_progress.load(Ordering::Relaxed) as f64,
    );

    e.head(
        "codex_bridge_store_up",
        "gauge",
        "1 when the store answered this scrape's queries, else 0 (and the task gauges are missing).",
    );
    e.sample(
        "codex_bridge_store_up",
        &[],
        if g.store_up { 1.0 } else { 0.0 },
    );
    if g.store_up {
        e.head(
            "codex_bridge_queue_depth",
            "gauge",
            "Tasks waiting in state queued (all instances sharing the database).",
        );
        e.sample("codex_bridge_queue_depth", &[], g.queue_depth as f64);
        e.head(
            "codex_bridge_running_turns",
            "gauge",
            "Tasks with an open turn: running, awaiting_approval or cancel_requested (all instances).",
        );
        e.sample("codex_bridge_running_turns", &[], g.running_turns as f64);
        e.head(
            "codex_bridge_tasks",
            "gauge",
            "Tasks per state (all instances sharing the database).",
        );
        let by_state: BTreeMap<&str, i64> = g
            .tasks_by_state
            .iter()
            .map(|(s, n)| (s.as_str(), *n))
            .collect();
        for state in TASK_STATES {
            let n = by_state.get(state).copied().unwrap_or(0);
            e.sample("codex_bridge_tasks", &[("state", state)], n as f64);
        }
    }
    if !g.actors.is_empty() {
        e.head(
            "codex_bridge_actors",
            "gauge",
            "Live actors of this process, by kind.",
        );
        for (kind, n) in &g.actors {
            e.sample("codex_bridge_actors", &[("kind", kind)], *n as f64);
        }
    }
    e.head(
        "codex_bridge_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch, in seconds.",
    );
    e.sample("codex_bridge_start_time_seconds", &[], r.started_at);
    e.head(
        "codex_bridge_build_info",
        "gauge",
        "Always 1; the version is in the label.",
    );
    e.sample(
        "codex_bridge_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    out
}

/// The media type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

struct Encoder<'a> {
    out: &'a mut String,
}

impl Encoder<'_> {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        // HELP text escapes backslash and newline; label values also escape quotes.
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let v = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.out, "{k}=\"{v}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }

    fn histogram(&mut self, name: &str, help: &str, bounds: &[f64], s: &HistogramState) {
        self.head(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, b) in bounds.iter().enumerate() {
            cumulative += s.counts.get(i).copied().unwrap_or(0);
            self.sample(&bucket, &[("le", &number(*b))], cumulative as f64);
        }
        self.sample(&bucket, &[("le", "+Inf")], s.count as f64);
        self.sample(&format!("{name}_sum"), &[], s.sum);
        self.sample(&format!("{name}_count"), &[], s.count as f64);
    }
}

/// A sample value as Prometheus writes it (`+Inf`, `NaN`, shortest decimal).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_states_match_the_lifecycle() {
        let names: Vec<&str> = crate::lifecycle::TaskState::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        assert_eq!(names, TASK_STATES);
    }

    #[test]
    fn histograms_are_cumulative_and_end_in_inf() {
        let h = Histogram::new(&[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(7.0);
        let mut out = String::new();
        Encoder { out: &mut out }.histogram("x_seconds", "help", &[0.1, 1.0], &h.snapshot());
        assert!(out.contains("# TYPE x_seconds histogram\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"0.1\"} 1\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"1\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_sum 7.55\n"), "{out}");
        assert!(out.contains("x_seconds_count 3\n"), "{out}");
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        Encoder { out: &mut out }.sample("m", &[("l", "a\"b\\c\nd")], 1.0);
        assert_eq!(out, "m{l=\"a\\\"b\\\\c\\nd\"} 1\n");
    }

    #[test]
    fn transitions_count_only_after_commit_and_not_after_a_rollback() {
        let before = |s: &str| {
            registry()
                .transitions
                .snapshot()
                .into_iter()
                .find(|(k, _)| k == s)
                .map_or(0, |(_, n)| n)
        };
        // Not collecting on this thread: nothing is counted.
        transition_written("test_only_state");
        transaction_finished(true);
        let start = before("test_only_state");
        collect_transitions_on_this_thread();
        transition_written("test_only_state");
        let mark = pending_mark();
        transition_written("test_only_state");
        rollback_to(mark);
        transaction_finished(true);
        transition_written("test_only_state");
        transaction_finished(false);
        assert_eq!(before("test_only_state"), start + 1);
        PENDING.with(|p| *p.borrow_mut() = None);
    }
}
