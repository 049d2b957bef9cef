//! Process-wide metrics and their Prometheus text exposition (`GET /metrics`,
//! served by `web/metrics.rs`), kept and encoded by the `prometheus` crate.
//!
//! Counters, histograms and the turns-in-progress gauge live in one registry
//! per process because they are incremented where things happen (the webhook
//! handler, the store's writer threads, the actors), far from any shared state.
//! Gauges read from the store and the actor tree at scrape time go into a
//! registry made for that one scrape: two scrapes never share them, and a gauge
//! the scrape could not read is absent instead of stale. An increment or a
//! scrape never waits on I/O. This module imports nothing of the crate, so
//! every floor may call it.

mod memory;
pub mod writer;

pub use memory::{purge_in_background, Memory};

use prometheus::proto::MetricFamily;
use prometheus::{
    Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::OnceLock;
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
    "delivery_conflict",
    "rejected",
    "request_timeout",
    "forbidden",
    "unavailable",
];

/// Reply verification outcomes.
pub const VERIFICATION_OUTCOMES: &[&str] = &["confirmed", "missing", "unknown"];

/// How a catch-up pass ended: every repository read, or some failed (their
/// errors are in the log and the audit log).
pub const CATCHUP_OUTCOMES: &[&str] = &["complete", "incomplete"];

/// Commit statuses the bridge sets, by state.
pub const COMMIT_STATUS_STATES: &[&str] = &["pending", "success", "failure", "error"];

/// What became of one commit status: posted; a failed POST to be tried
/// again; given up (refused, or retries exhausted); not posted because a
/// newer status of the same commit came first.
pub const COMMIT_STATUS_OUTCOMES: &[&str] = &["posted", "retry", "failed", "superseded"];

/// What retention lets go of: webhook deliveries no task was made from, the
/// events of ended turns, refusal counts.
pub const RETENTION_KINDS: &[&str] = &["deliveries", "turn_events", "refusal_counts"];

/// Actor kinds whose restarts are counted.
const ACTOR_KINDS: &[&str] = &["repo", "session"];

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

/// Buckets of a catch-up pass: one listing per repository, hundreds of them.
const CATCHUP_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

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

/// The metrics this process keeps between scrapes, and the registry that
/// gathers them.
struct Process {
    registry: Registry,
    webhooks: IntCounterVec,
    accept: Histogram,
    transitions: IntCounterVec,
    restarts: IntCounterVec,
    verifications: IntCounterVec,
    commit_statuses: IntCounterVec,
    turn: Histogram,
    settle: Histogram,
    turns_in_progress: IntGauge,
    catchup_passes: IntCounterVec,
    catchup_tasks: IntCounter,
    catchup_pass: Histogram,
    circuit_trips: IntCounter,
    retention: IntCounterVec,
}

impl Process {
    fn new() -> prometheus::Result<Process> {
        let registry = Registry::new();
        let r = &registry;
        let process = Process {
            webhooks: counter(
                r,
                "codex_bridge_webhooks_total",
                "Webhook requests answered, by outcome.",
                "outcome",
                WEBHOOK_OUTCOMES,
            )?,
            accept: histogram(
                r,
                "codex_bridge_webhook_accept_duration_seconds",
                "Time the webhook handler took, from request to answer, whatever the outcome.",
                ACCEPT_BUCKETS,
            )?,
            transitions: counter(
                r,
                "codex_bridge_task_transitions_total",
                "Task state changes committed by this process, by target state.",
                "state",
                TASK_STATES,
            )?,
            restarts: counter(
                r,
                "codex_bridge_actor_restarts_total",
                "Actors restarted by their supervisor after a fault, by kind.",
                "kind",
                ACTOR_KINDS,
            )?,
            verifications: counter(
                r,
                "codex_bridge_reply_verifications_total",
                "Replies checked in Gitea, by outcome.",
                "outcome",
                VERIFICATION_OUTCOMES,
            )?,
            commit_statuses: counter2(
                r,
                "codex_bridge_commit_statuses_total",
                "Commit statuses of pull request tasks written to Gitea by this process, by state and outcome.",
                ("state", COMMIT_STATUS_STATES),
                ("outcome", COMMIT_STATUS_OUTCOMES),
            )?,
            turn: histogram(
                r,
                "codex_bridge_turn_duration_seconds",
                "Time from a turn's start until its task settled.",
                TURN_BUCKETS,
            )?,
            settle: histogram(
                r,
                "codex_bridge_turn_settle_seconds",
                "The bridge's own time from a turn's completion event to its result being committed.",
                SETTLE_BUCKETS,
            )?,
            turns_in_progress: int_gauge(
                r,
                "codex_bridge_turns_in_progress",
                "Turns this process is running now.",
            )?,
            catchup_passes: counter(
                r,
                "codex_bridge_catchup_passes_total",
                "Catch-up passes over the known repositories' comments, by outcome.",
                "outcome",
                CATCHUP_OUTCOMES,
            )?,
            catchup_tasks: int_counter(
                r,
                "codex_bridge_catchup_tasks_total",
                "Tasks created by the catch-up for comments whose webhook never arrived.",
            )?,
            circuit_trips: int_counter(
                r,
                "codex_bridge_circuit_trips_total",
                "Times the circuit breaker opened after the agent runtime failed turn after turn.",
            )?,
            catchup_pass: histogram(
                r,
                "codex_bridge_catchup_pass_duration_seconds",
                "Time one catch-up pass took over every known repository.",
                CATCHUP_BUCKETS,
            )?,
            retention: counter(
                r,
                "codex_bridge_retention_removed_total",
                "Rows removed by retention passes, by kind (audit events are never removed).",
                "kind",
                RETENTION_KINDS,
            )?,
            registry: registry.clone(),
        };
        let started_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let start_time = Gauge::with_opts(Opts::new(
            "codex_bridge_start_time_seconds",
            "Start time of the process since the Unix epoch, in seconds.",
        ))?;
        start_time.set(started_at);
        registry.register(Box::new(start_time))?;
        int_gauge_vec(
            r,
            "codex_bridge_build_info",
            "Always 1; the version is in the label.",
            "version",
        )?
        .with_label_values(&[env!("CARGO_PKG_VERSION")])
        .set(1);
        Ok(process)
    }
}

/// The process's metrics, built on first use; the error if they could not be
/// (a unit test builds them, so that would be a bug of this module).
fn process() -> Result<&'static Process, &'static prometheus::Error> {
    static PROCESS: OnceLock<prometheus::Result<Process>> = OnceLock::new();
    PROCESS.get_or_init(Process::new).as_ref()
}

/// A counter with one label, its `known` values pre-registered at 0.
fn counter(
    r: &Registry,
    name: &str,
    help: &str,
    label: &str,
    known: &[&str],
) -> prometheus::Result<IntCounterVec> {
    let c = IntCounterVec::new(Opts::new(name, help), &[label])?;
    for value in known {
        c.get_metric_with_label_values(&[value])?;
    }
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

/// A counter with two labels, every pair of their `known` values
/// pre-registered at 0.
fn counter2(
    r: &Registry,
    name: &str,
    help: &str,
    (first, first_known): (&str, &[&str]),
    (second, second_known): (&str, &[&str]),
) -> prometheus::Result<IntCounterVec> {
    let c = IntCounterVec::new(Opts::new(name, help), &[first, second])?;
    for a in first_known {
        for b in second_known {
            c.get_metric_with_label_values(&[a, b])?;
        }
    }
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

/// A histogram with fixed upper bounds (seconds).
fn histogram(
    r: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
) -> prometheus::Result<Histogram> {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))?;
    r.register(Box::new(h.clone()))?;
    Ok(h)
}

fn int_counter(r: &Registry, name: &str, help: &str) -> prometheus::Result<IntCounter> {
    let c = IntCounter::with_opts(Opts::new(name, help))?;
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

pub(super) fn int_gauge(r: &Registry, name: &str, help: &str) -> prometheus::Result<IntGauge> {
    let g = IntGauge::with_opts(Opts::new(name, help))?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

fn int_gauge_vec(
    r: &Registry,
    name: &str,
    help: &str,
    label: &str,
) -> prometheus::Result<IntGaugeVec> {
    let g = IntGaugeVec::new(Opts::new(name, help), &[label])?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

/// One webhook answered, with its outcome (one of [`WEBHOOK_OUTCOMES`]) and
/// the time the handler took.
pub fn webhook(outcome: &str, took: Duration) {
    if let Ok(p) = process() {
        p.webhooks.with_label_values(&[outcome]).inc();
        p.accept.observe(took.as_secs_f64());
    }
}

/// The circuit breaker opened.
pub fn circuit_tripped() {
    if let Ok(p) = process() {
        p.circuit_trips.inc();
    }
}

/// A retention pass removed `n` rows of `kind` (one of [`RETENTION_KINDS`]).
pub fn retention_removed(kind: &str, n: u64) {
    if let Ok(p) = process() {
        p.retention.with_label_values(&[kind]).inc_by(n);
    }
}

/// A catch-up pass ended (`outcome`: one of [`CATCHUP_OUTCOMES`]) after `took`.
pub fn catchup_pass(outcome: &str, took: Duration) {
    if let Ok(p) = process() {
        p.catchup_passes.with_label_values(&[outcome]).inc();
        p.catchup_pass.observe(took.as_secs_f64());
    }
}

/// The catch-up created a task.
pub fn catchup_task() {
    if let Ok(p) = process() {
        p.catchup_tasks.inc();
    }
}

/// An actor was restarted by its supervisor (`kind`: `repo` or `session`).
pub fn actor_restart(kind: &str) {
    if let Ok(p) = process() {
        p.restarts.with_label_values(&[kind]).inc();
    }
}

/// A reply was verified in Gitea (`outcome`: one of [`VERIFICATION_OUTCOMES`]).
pub fn reply_verification(outcome: &str) {
    if let Ok(p) = process() {
        p.verifications.with_label_values(&[outcome]).inc();
    }
}

/// One commit status handled (`state`: one of [`COMMIT_STATUS_STATES`],
/// `outcome`: one of [`COMMIT_STATUS_OUTCOMES`]).
pub fn commit_status(state: &str, outcome: &str) {
    if let Ok(p) = process() {
        p.commit_statuses.with_label_values(&[state, outcome]).inc();
    }
}

/// The bridge's own cost of one finished turn: from the runtime's completion
/// reaching the session actor to the result being committed.
pub fn turn_settle(took: Duration) {
    if let Ok(p) = process() {
        p.settle.observe(took.as_secs_f64());
    }
}

/// Times one turn from its start until it settles (or its pass ends): drop it
/// where the turn is over. Also counts the turns in progress in this process.
pub struct TurnTimer {
    started: std::time::Instant,
}

impl TurnTimer {
    pub fn start() -> TurnTimer {
        if let Ok(p) = process() {
            p.turns_in_progress.inc();
        }
        TurnTimer {
            started: std::time::Instant::now(),
        }
    }
}

impl Drop for TurnTimer {
    fn drop(&mut self) {
        if let Ok(p) = process() {
            p.turns_in_progress.dec();
            p.turn.observe(self.started.elapsed().as_secs_f64());
        }
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
    if let (true, Some(done), Ok(p)) = (committed, done, process()) {
        for to in done {
            p.transitions.with_label_values(&[&to]).inc();
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
    /// The circuit breaker keeps turns from starting.
    pub circuit_open: bool,
    /// What the process holds (resident memory, descriptors, heaps).
    pub memory: Memory,
}

/// The scrape-time gauges as metric families of their own registry.
fn scrape_families(g: &Gauges) -> prometheus::Result<Vec<MetricFamily>> {
    let r = Registry::new();
    int_gauge(
        &r,
        "codex_bridge_store_up",
        "1 when the store answered this scrape's queries, else 0 (and the task gauges are missing).",
    )?
    .set(i64::from(g.store_up));
    int_gauge(
        &r,
        "codex_bridge_circuit_open",
        "1 while the circuit breaker keeps turns from starting (the agent runtime failed turn after turn), else 0.",
    )?
    .set(i64::from(g.circuit_open));
    if g.store_up {
        int_gauge(
            &r,
            "codex_bridge_queue_depth",
            "Tasks waiting in state queued (all instances sharing the database).",
        )?
        .set(g.queue_depth);
        int_gauge(
            &r,
            "codex_bridge_running_turns",
            "Tasks with an open turn: running, awaiting_approval or cancel_requested (all instances).",
        )?
        .set(g.running_turns);
        let tasks = int_gauge_vec(
            &r,
            "codex_bridge_tasks",
            "Tasks per state (all instances sharing the database).",
            "state",
        )?;
        let by_state: BTreeMap<&str, i64> = g
            .tasks_by_state
            .iter()
            .map(|(s, n)| (s.as_str(), *n))
            .collect();
        for state in TASK_STATES {
            let n = by_state.get(state).copied().unwrap_or(0);
            tasks.with_label_values(&[state]).set(n);
        }
    }
    memory::gauges(&r, &g.memory)?;
    if !g.actors.is_empty() {
        let actors = int_gauge_vec(
            &r,
            "codex_bridge_actors",
            "Live actors of this process, by kind.",
            "kind",
        )?;
        for (kind, n) in &g.actors {
            actors.with_label_values(&[kind]).set(*n);
        }
    }
    Ok(r.gather())
}

/// The Prometheus text exposition (format 0.0.4) of every metric: this
/// process's and the scrape-time gauges `g`, families sorted by name.
pub fn render(g: &Gauges) -> prometheus::Result<String> {
    let process = process().map_err(|e| {
        prometheus::Error::Msg(format!("the process metrics could not be registered: {e}"))
    })?;
    let mut families = process.registry.gather();
    families.extend(writer::families());
    families.extend(scrape_families(g)?);
    families.sort_by(|a, b| a.name().cmp(b.name()));
    TextEncoder::new().encode_to_string(&families)
}

/// The media type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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

    /// Operators' dashboards and alerts name these series: the set of families,
    /// their types and labels must not change by accident.
    #[test]
    fn the_exposition_keeps_its_families_types_and_labels() {
        let everything = Gauges {
            store_up: true,
            tasks_by_state: vec![("queued".into(), 2)],
            queue_depth: 2,
            running_turns: 0,
            actors: vec![("repo", 1), ("session", 0)],
            circuit_open: false,
            memory: Memory {
                resident_bytes: Some(80 << 20),
                open_fds: Some(51),
                heap_allocated_bytes: Some(30 << 20),
                heap_resident_bytes: Some(40 << 20),
                sqlite_heap_bytes: Some(9 << 20),
            },
        };
        let text = render(&everything).unwrap();
        let types: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(
            types,
            [
                "codex_bridge_actor_restarts_total counter",
                "codex_bridge_actors gauge",
                "codex_bridge_build_info gauge",
                "codex_bridge_catchup_pass_duration_seconds histogram",
                "codex_bridge_catchup_passes_total counter",
                "codex_bridge_catchup_tasks_total counter",
                "codex_bridge_circuit_open gauge",
                "codex_bridge_circuit_trips_total counter",
                "codex_bridge_commit_statuses_total counter",
                "codex_bridge_heap_allocated_bytes gauge",
                "codex_bridge_heap_resident_bytes gauge",
                "codex_bridge_queue_depth gauge",
                "codex_bridge_reply_verifications_total counter",
                "codex_bridge_retention_removed_total counter",
                "codex_bridge_running_turns gauge",
                "codex_bridge_sqlite_heap_bytes gauge",
                "codex_bridge_start_time_seconds gauge",
                "codex_bridge_store_commit_operations histogram",
                "codex_bridge_store_transaction_seconds histogram",
                "codex_bridge_store_up gauge",
                "codex_bridge_store_wal_bytes_total counter",
                "codex_bridge_store_wal_sync_seconds histogram",
                "codex_bridge_store_writer_cpu_microseconds_total counter",
                "codex_bridge_task_transitions_total counter",
                "codex_bridge_tasks gauge",
                "codex_bridge_turn_duration_seconds histogram",
                "codex_bridge_turn_settle_seconds histogram",
                "codex_bridge_turns_in_progress gauge",
                "codex_bridge_webhook_accept_duration_seconds histogram",
                "codex_bridge_webhooks_total counter",
                "process_open_fds gauge",
                "process_resident_memory_bytes gauge",
            ]
        );
        for line in [
            "codex_bridge_webhooks_total{outcome=\"outbox_full\"} ",
            "codex_bridge_task_transitions_total{state=\"rejected\"} ",
            "codex_bridge_actor_restarts_total{kind=\"session\"} ",
            "codex_bridge_reply_verifications_total{outcome=\"unknown\"} ",
            "codex_bridge_catchup_passes_total{outcome=\"incomplete\"} ",
            "codex_bridge_catchup_tasks_total ",
            "codex_bridge_retention_removed_total{kind=\"turn_events\"} ",
            "codex_bridge_catchup_pass_duration_seconds_bucket{le=\"300\"} ",
            "codex_bridge_commit_statuses_total{outcome=\"superseded\",state=\"error\"} ",
            "codex_bridge_webhook_accept_duration_seconds_bucket{le=\"0.0025\"} ",
            "codex_bridge_turn_settle_seconds_bucket{le=\"0.0005\"} ",
            "codex_bridge_turn_duration_seconds_bucket{le=\"3600\"} ",
            "codex_bridge_turn_duration_seconds_bucket{le=\"+Inf\"} ",
            "codex_bridge_tasks{state=\"queued\"} 2\n",
            "codex_bridge_tasks{state=\"running\"} 0\n",
            "codex_bridge_actors{kind=\"repo\"} 1\n",
            "codex_bridge_store_up 1\n",
            "process_resident_memory_bytes 83886080\n",
            "codex_bridge_sqlite_heap_bytes 9437184\n",
            "codex_bridge_build_info{version=\"",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }

        // Without the store and the actors those gauges are missing, not zero.
        let text = render(&Gauges::default()).unwrap();
        assert!(text.contains("codex_bridge_store_up 0\n"), "{text}");
        for absent in [
            "codex_bridge_queue_depth",
            "codex_bridge_tasks",
            "codex_bridge_actors",
            "process_resident_memory_bytes",
            "codex_bridge_heap_allocated_bytes",
        ] {
            assert!(!text.contains(&format!("# TYPE {absent} ")), "{absent}");
        }
    }

    #[test]
    fn transitions_count_only_after_commit_and_not_after_a_rollback() {
        let count = || {
            process()
                .unwrap()
                .transitions
                .with_label_values(&["test_only_state"])
                .get()
        };
        // Not collecting on this thread: nothing is counted.
        transition_written("test_only_state");
        transaction_finished(true);
        let start = count();
        collect_transitions_on_this_thread();
        transition_written("test_only_state");
        let mark = pending_mark();
        transition_written("test_only_state");
        rollback_to(mark);
        transaction_finished(true);
        transition_written("test_only_state");
        transaction_finished(false);
        assert_eq!(count(), start + 1);
        PENDING.with(|p| *p.borrow_mut() = None);
    }
}
