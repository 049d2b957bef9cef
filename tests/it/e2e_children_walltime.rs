//! The wall time of delegated children on real parts, side by side against
//! one at a time: the real `codex app-server`, the fake model and the Gitea
//! simulator run a parent that assigns an implementation child and a
//! reviewer at once, acknowledges both results and completes its workflow,
//! with `max_parallel_turns_per_repo` at 2 and at 1.
//!
//! Each run prints its wall time, from the mention's webhook accepted to the
//! workflow completed (and to both results recorded, the in-process bench's
//! end point); `CODEX_BRIDGE_TEST_WALLTIME_RUNS` (default 1) repeats each
//! mode, and the median per mode is printed last. The times are reported,
//! never asserted: what is asserted is what the modes promise — both
//! complete, each result acknowledged once, and the children's turns
//! overlapping with two places and never with one.

use crate::e2e::Loop;
use crate::e2e_children::{call, child_turn, wait_workflow, with_children, COMMIT};
use crate::fakemodel::Step;
use crate::support::*;
use codex_bridge::domain::workflow::results::DeliveryState;
use codex_bridge::domain::workflow::WorkflowState;
use codex_bridge::store::tasks;
use codex_bridge::store::workflows::{self, children, results};
use serde_json::json;
use std::time::Duration;

/// What a parent's turn is told when it carries children's results: the
/// parent's script for those turns is keyed by it, since which turn carries
/// which result depends on when each child finishes.
const RESULTS_ARRIVED: &str = "result(s) of your children arrived";

/// How long each child's shell work takes: long enough that two children
/// side by side overlap even though the second one starts only once the
/// parent's first turn has given up its place.
const CHILD_WORK: &str = "sleep 1";

/// What one run measured.
struct Run {
    /// Mention accepted → the workflow completed.
    completed: Duration,
    /// Mention accepted → both children's results recorded.
    results: Duration,
    /// The parent's continuations (each result-carrying turn is one, and so
    /// is the one that completes).
    continuations: i64,
    /// How long the children's turns ran at the same time, in ms; negative:
    /// the gap between the first's end and the second's start.
    overlap_ms: i64,
}

fn at(stored: &str) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(stored).unwrap()
}

fn between(from: &str, to: &str) -> Duration {
    (at(to) - at(from)).to_std().unwrap()
}

/// The first start and the last end of the turns of the tasks of the child
/// workflow `child`, as stored (text order is time order).
fn turn_span(l: &Loop, child: &workflows::Workflow) -> (String, String) {
    use codex_bridge::store::schema::{tasks as t, turns as u};
    use diesel::prelude::*;
    let mut c = connect(&l.app.db_url);
    let tasks: Vec<String> = codex_bridge::with_conn!(&mut c, |x| t::table
        .filter(t::workflow_id.eq(child.workflow_id.to_string()))
        .select(t::task_id)
        .load::<String>(x))
    .unwrap();
    let turns: Vec<(String, Option<String>)> = codex_bridge::with_conn!(&mut c, |x| u::table
        .filter(u::task_id.eq_any(&tasks))
        .select((u::started_at, u::completed_at))
        .load::<(String, Option<String>)>(x))
    .unwrap();
    assert!(!turns.is_empty(), "child {} ran no turn", child.workflow_id);
    let start = turns.iter().map(|(s, _)| s.clone()).min().unwrap();
    let end = turns
        .iter()
        .map(|(_, e)| e.clone().expect("the child's turn ended"))
        .max()
        .unwrap();
    (start, end)
}

/// The workflow `task` joins once its turn starts (the measured run goes
/// on meanwhile).
fn joined(l: &Loop, task: &str) -> codex_bridge::domain::WorkflowId {
    let mut found = None;
    wait_until(
        "the mention's task joined its workflow",
        Duration::from_secs(90),
        || {
            let mut c = connect(&l.app.db_url);
            found = tasks::find(&mut c, &task.parse().unwrap())
                .unwrap()
                .and_then(|t| t.workflow_id);
            found.is_some()
        },
    );
    found.unwrap()
}

/// One run of the example with `parallel` places, on a server of its own.
fn run_once(parallel: usize) -> Run {
    let l = with_children(parallel);
    let n = l.issue;

    // The comment's turn: assign both children at once, answer, end.
    l.model().push(call(
        "assign_child",
        json!({"title": "Implement the fix", "instructions": "TASK-IMPL: fix the parser and commit it"}),
    ));
    l.model().push(call(
        "assign_child",
        json!({"title": "Review the parser", "instructions": "TASK-REVIEW: review the parser's tests"}),
    ));
    l.script_reply(n, "An implementer and a reviewer are on it.");
    child_turn(
        &l,
        "TASK-IMPL",
        &format!(
            "{CHILD_WORK} && printf 'fixed\\n' > parser.txt && git add parser.txt && {COMMIT} 'parser: fix'"
        ),
        json!({"summary": "IMPL-DONE: parser fixed", "filesChanged": ["parser.txt"], "checksRun": ["cargo test parser"]}),
    );
    child_turn(
        &l,
        "TASK-REVIEW",
        &format!("{CHILD_WORK} && git log --oneline -1 && echo REVIEWED"),
        json!({"summary": "REVIEW-DONE: no blocking regression", "checksRun": ["cargo test parser::empty"]}),
    );
    // Each turn that carries results acknowledges the oldest one it has not
    // yet (a turn may carry one or both); two such turns acknowledge both.
    for _ in 0..2 {
        l.model().push_for_newest(
            RESULTS_ARRIVED,
            call("ack_result", json!({"resultId": "{{result}}"})),
        );
        l.model()
            .push_for_newest(RESULTS_ARRIVED, Step::message("Acknowledged."));
    }
    // The continuation after both: complete the workflow.
    l.model().push(call(
        "complete_workflow",
        json!({"summary": "Parser fixed and reviewed."}),
    ));
    l.model()
        .push(Step::message("All done: the parser is fixed and reviewed."));

    let task = l.comment(
        "bob",
        n,
        "@ccbot fix the flaky parser, and have it reviewed",
    );
    let id = joined(&l, &task);
    let w = wait_workflow(&l, &id, WorkflowState::Completed);

    let mut c = connect(&l.app.db_url);
    let accepted: String = {
        use codex_bridge::store::schema::webhook_deliveries as d;
        use diesel::prelude::*;
        codex_bridge::with_conn!(&mut c, |x| d::table
            .filter(d::task_id.eq(&task))
            .select(d::received_at)
            .first::<String>(x))
        .unwrap()
    };

    // Both results recorded, each acknowledged by the parent exactly once.
    let listed = results::list(&mut c, &id).unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    for r in &listed {
        assert!(!r.incomplete, "{r:?}");
        assert_eq!(r.delivery.state, DeliveryState::Acknowledged, "{r:?}");
        assert_eq!(
            count_where(
                &mut c,
                "audit_events",
                &format!(
                    "action = 'workflow.result_acknowledged' AND metadata LIKE '%{}%'",
                    r.result_id
                ),
            ),
            1,
            "{r:?}"
        );
    }
    let kids = children::of(&mut c, &id).unwrap();
    assert_eq!(kids.len(), 2, "{kids:?}");
    assert!(
        kids.iter().all(|k| k.state == WorkflowState::Completed),
        "{kids:?}"
    );

    // With two places the children's turns ran at the same time; with one,
    // one after the other.
    let (a, b) = (turn_span(&l, &kids[0]), turn_span(&l, &kids[1]));
    let overlapped = a.0 < b.1 && b.0 < a.1;
    let overlap_ms = (at(a.1.as_str().min(b.1.as_str())) - at(a.0.as_str().max(b.0.as_str())))
        .num_milliseconds();
    assert_eq!(
        overlapped,
        parallel > 1,
        "{parallel} place(s): the children's turns ran {a:?} and {b:?}"
    );

    // The answer of the completing continuation, so the run ends settled.
    let last = workflows::last_input(&mut c, &id).unwrap();
    l.wait(last.task_id.as_str(), "succeeded");

    let recorded = listed.iter().map(|r| r.recorded_at.clone()).max().unwrap();
    Run {
        completed: between(&accepted, &w.updated_at),
        results: between(&accepted, &recorded),
        continuations: w.continuations,
        overlap_ms,
    }
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 0 {
        (sorted[mid - 1] + sorted[mid]) / 2
    } else {
        sorted[mid]
    }
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// Two children side by side against one at a time. The modes
/// alternate run by run, so a change in the machine's load falls on both.
#[test]
fn e2e_children_walltime_two_children_side_by_side_against_one_at_a_time() {
    let runs: usize = std::env::var("CODEX_BRIDGE_TEST_WALLTIME_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let modes = [2, 1];
    let mut measured: Vec<Vec<Run>> = modes.iter().map(|_| Vec::new()).collect();
    for i in 1..=runs {
        for (m, parallel) in modes.iter().enumerate() {
            let r = run_once(*parallel);
            eprintln!(
                "children wall time, max_parallel_turns_per_repo = {parallel}, run {i}/{runs}: \
mention → workflow completed {}, → both results recorded {} (children's turns overlapped {} ms; the parent's continuations: {})",
                ms(r.completed),
                ms(r.results),
                r.overlap_ms,
                r.continuations
            );
            measured[m].push(r);
        }
    }
    for (m, parallel) in modes.iter().enumerate() {
        let completed: Vec<Duration> = measured[m].iter().map(|r| r.completed).collect();
        let results: Vec<Duration> = measured[m].iter().map(|r| r.results).collect();
        eprintln!(
            "children wall time, max_parallel_turns_per_repo = {parallel}, median of {runs}: \
mention → workflow completed {} (runs: {}), → both results recorded {}",
            ms(median(&completed)),
            completed
                .iter()
                .map(|d| ms(*d))
                .collect::<Vec<_>>()
                .join(", "),
            ms(median(&results))
        );
    }
}
