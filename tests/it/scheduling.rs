//! What the repo actor asks of the store: a repository's next task in arrival
//! order (queued, or a retry whose time has come), the task holding it, and the
//! sweep's repositories with work and their queue depths (SQLite and
//! PostgreSQL).

use crate::support::*;
use codex_bridge::domain::TaskId;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::attempts;
use codex_bridge::store::ingest::{self, IngestOutcome};
use codex_bridge::store::queue::{self, RepoWork};
use codex_bridge::store::tasks::TransitionOutcome;
use codex_bridge::store::{run_migrations, DbConn};

fn next(c: &mut DbConn, repo: &str) -> Option<TaskId> {
    queue::next_runnable(
        c,
        &format!("default:acme/{repo}").parse().unwrap(),
        &Default::default(),
    )
    .unwrap()
    .map(|t| t.task_id)
}

/// The oldest task holding one of the repository's sessions.
fn holding(c: &mut DbConn, repo: &str) -> Option<TaskId> {
    queue::holding_tasks(c, &format!("default:acme/{repo}").parse().unwrap())
        .unwrap()
        .into_iter()
        .next()
        .map(|t| t.task_id)
}

fn work(c: &mut DbConn) -> Vec<(String, i64)> {
    queue::repos_with_work(c)
        .unwrap()
        .into_iter()
        .map(
            |RepoWork {
                 repo_key,
                 queue_depth,
             }| (repo_key.to_string(), queue_depth),
        )
        .collect()
}

/// Moves `task` as an actor does: by compare-and-swap on its version now.
fn to(c: &mut DbConn, task: &TaskId, state: TaskState, retry_at: Option<&str>) {
    let moved = c
        .write_transaction(|c| {
            let (_, version) = attempts::task_version(c, task)?.expect("the task exists");
            attempts::decide_move(c, task, version, state, "test", None, retry_at)
        })
        .unwrap();
    assert!(
        matches!(moved, TransitionOutcome::Applied { .. }),
        "{moved:?}"
    );
}

fn arrival_order(mut c: DbConn) {
    run_migrations(&mut c).unwrap();
    // Interleaved arrivals: gadgets, widgets, widgets, gadgets.
    let reqs = [
        ("gadgets", 1),
        ("widgets", 2),
        ("widgets", 3),
        ("gadgets", 4),
    ]
    .map(|(repo, n)| crate::actors::request(repo, n, n, "@ccbot go"));
    let ids: Vec<TaskId> = c
        .write_transaction(|c| ingest::ingest_batch(c, &reqs))
        .unwrap()
        .into_iter()
        .map(|o| match o {
            IngestOutcome::Accepted { task_id, .. } => task_id,
            other => panic!("{other:?}"),
        })
        .collect();
    let [g1, w1, w2, g2] = [&ids[0], &ids[1], &ids[2], &ids[3]];
    let (gadgets, widgets) = ("default:acme/gadgets", "default:acme/widgets");
    assert_eq!(next(&mut c, "widgets").as_ref(), Some(w1));
    assert_eq!(next(&mut c, "gadgets").as_ref(), Some(g1));
    assert_eq!(next(&mut c, "nothing"), None);
    assert_eq!(holding(&mut c, "widgets"), None);
    assert_eq!(
        work(&mut c),
        [(gadgets.to_owned(), 2), (widgets.to_owned(), 2)]
    );

    // w1 runs and waits to retry later: w2 is next, nothing holds widgets.
    to(&mut c, w1, TaskState::Leased, None);
    assert_eq!(holding(&mut c, "widgets").as_ref(), Some(w1));
    assert_eq!(
        work(&mut c),
        [(gadgets.to_owned(), 2), (widgets.to_owned(), 1)]
    );
    to(
        &mut c,
        w1,
        TaskState::RetryWait,
        Some("2999-01-01T00:00:00.000000Z"),
    );
    assert_eq!(holding(&mut c, "widgets"), None);
    assert_eq!(next(&mut c, "widgets").as_ref(), Some(w2));
    // Both wait: the queue counts the retry too.
    assert_eq!(
        work(&mut c),
        [(gadgets.to_owned(), 2), (widgets.to_owned(), 2)]
    );

    // Its time comes: w1 arrived first, so it goes before w2.
    exec(
        &mut c,
        &format!(
            "UPDATE tasks SET next_retry_at = '2000-01-01T00:00:00.000000Z' WHERE task_id = '{w1}'"
        ),
    )
    .unwrap();
    assert_eq!(next(&mut c, "widgets").as_ref(), Some(w1));

    // w2 is taken first all the same (an operator's order): it holds widgets,
    // and w1 is still the next to run once it ends.
    to(&mut c, w2, TaskState::Leased, None);
    assert_eq!(holding(&mut c, "widgets").as_ref(), Some(w2));
    assert_eq!(next(&mut c, "widgets").as_ref(), Some(w1));
    to(&mut c, w2, TaskState::Failed, None);
    assert_eq!(holding(&mut c, "widgets"), None);

    // gadgets: cancelling its first queued task moves its queue on.
    to(&mut c, g1, TaskState::Cancelled, None);
    assert_eq!(next(&mut c, "gadgets").as_ref(), Some(g2));
    assert_eq!(
        work(&mut c),
        [(gadgets.to_owned(), 1), (widgets.to_owned(), 1)]
    );
    to(&mut c, g2, TaskState::Cancelled, None);
    assert_eq!(next(&mut c, "gadgets"), None);
    assert_eq!(work(&mut c), [(widgets.to_owned(), 1)]);
}

#[test]
fn a_repository_runs_its_tasks_in_arrival_order_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    arrival_order(connect(&format!(
        "sqlite://{}",
        dir.path().join("s.db").display()
    )));
}

#[test]
fn a_repository_runs_its_tasks_in_arrival_order_postgres() {
    let db = PgDb::create();
    arrival_order(connect(&db.url));
}
