//! Migrations: both backends have the same migrations, and each runs up, down
//! and up again.

use crate::support::*;
use codex_bridge::domain::TaskId;
use codex_bridge::store::{revert_all_migrations, run_migrations, DbConn};

fn names(dir: &str) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
    v.sort();
    v
}

#[test]
fn both_backends_have_the_same_migrations() {
    assert_eq!(names("migrations/sqlite"), names("migrations/postgres"));
}

fn up_down_up(url: &str) {
    let mut c = connect(url);
    let applied = run_migrations(&mut c).unwrap();
    assert!(!applied.is_empty());
    assert_eq!(count(&mut c, "control"), 1);
    revert_all_migrations(&mut c).unwrap();
    assert!(
        exec(&mut c, "SELECT 1 FROM tasks").is_err(),
        "tables are gone after down"
    );
    let again = run_migrations(&mut c).unwrap();
    assert_eq!(applied, again);
    assert_eq!(count(&mut c, "tasks"), 0);
}

#[test]
fn migrations_go_up_down_up_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    up_down_up(&format!("sqlite://{}", dir.path().join("m.db").display()));
}

#[test]
fn migrations_go_up_down_up_postgres() {
    let db = PgDb::create();
    up_down_up(&db.url);
}

#[test]
fn sqlite_runs_in_wal_with_full_sync_and_foreign_keys() {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct V {
        #[diesel(sql_type = diesel::sql_types::Text)]
        v: String,
    }
    let dir = tempfile::tempdir().unwrap();
    let mut c = connect(&format!("sqlite://{}", dir.path().join("w.db").display()));
    let mut get = |pragma: &str| -> String {
        let column = if pragma == "busy_timeout" {
            "timeout"
        } else {
            pragma
        };
        codex_bridge::with_conn!(&mut c, |conn| diesel::sql_query(format!(
            "SELECT CAST({column} AS TEXT) AS v FROM pragma_{pragma}"
        ))
        .get_result::<V>(conn))
        .unwrap()
        .v
    };
    assert_eq!(get("journal_mode"), "wal");
    assert_eq!(get("synchronous"), "2", "2 = FULL");
    assert_eq!(get("foreign_keys"), "1");
    assert_eq!(get("busy_timeout"), "10000");
}

/// SQLite's plan for `query` (the `detail` column of EXPLAIN QUERY PLAN).
pub(crate) fn query_plan(c: &mut DbConn, query: &str) -> Vec<String> {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Plan {
        #[diesel(sql_type = diesel::sql_types::Text)]
        detail: String,
    }
    codex_bridge::with_conn!(c, |conn| diesel::sql_query(format!(
        "EXPLAIN QUERY PLAN {query}"
    ))
    .load::<Plan>(conn))
    .unwrap()
    .into_iter()
    .map(|p| p.detail)
    .collect()
}

/// A fresh SQLite store with every migration applied.
pub(crate) fn migrated_sqlite(dir: &tempfile::TempDir) -> DbConn {
    let mut c = connect(&format!("sqlite://{}", dir.path().join("p.db").display()));
    run_migrations(&mut c).unwrap();
    c
}

/// The session queries find a session's driven tasks through the partial index
/// `tasks_session_driven`, which SQLite uses only when the query holds its exact
/// condition (`SESSION_DRIVEN_STATES`): a change to either side alone would make
/// these lookups scan the tasks table.
#[test]
fn session_queries_use_the_partial_index_sqlite() {
    use codex_bridge::store::sessions::SESSION_DRIVEN_STATES;
    let dir = tempfile::tempdir().unwrap();
    let mut c = migrated_sqlite(&dir);
    let mut plan = |extra: &str| -> Vec<String> {
        query_plan(
            &mut c,
            &format!(
                "SELECT id FROM tasks WHERE session_key = 'default:acme/widgets:issue:1' \
                 AND {SESSION_DRIVEN_STATES}{extra} ORDER BY id"
            ),
        )
    };
    // driven_tasks_of_session
    let driven = plan("");
    assert!(
        driven
            .iter()
            .any(|d| d.contains("USING INDEX tasks_session_driven")),
        "{driven:?}"
    );
}

/// The scheduler finds a repository's tasks through the partial indexes
/// `tasks_queued` and `tasks_repo_active` (migration 000008), which SQLite uses
/// only when a query holds their exact conditions (`QUEUED`,
/// `REPO_ACTIVE_STATES`): a change to either side alone would make every
/// scheduling pass scan the tasks table.
#[test]
fn scheduling_queries_use_the_partial_indexes_sqlite() {
    use codex_bridge::store::queue::{QUEUED, REPO_ACTIVE_STATES};
    let dir = tempfile::tempdir().unwrap();
    let mut c = migrated_sqlite(&dir);
    let mut plan = |query: &str| query_plan(&mut c, query);
    let repo = "repo_key = 'default:acme/widgets'";
    let uses = |plan: &[String], index: &str| {
        plan.iter().any(|d| d.contains(&format!("INDEX {index}")))
            && !plan
                .iter()
                .any(|d| d.starts_with("SCAN tasks") && !d.contains("INDEX"))
    };
    // next_runnable, queued: the first of the repository in arrival order.
    let queued = plan(&format!(
        "SELECT id FROM tasks WHERE {QUEUED} AND {repo} ORDER BY id LIMIT 1"
    ));
    assert!(uses(&queued, "tasks_queued"), "{queued:?}");
    assert!(
        !queued.iter().any(|d| d.contains("TEMP B-TREE")),
        "{queued:?}"
    );
    // next_runnable, retry_wait; holding_tasks.
    for state in ["state = 'retry_wait'", "state IN ('leased', 'running')"] {
        let active = plan(&format!(
            "SELECT id FROM tasks WHERE {repo} AND {REPO_ACTIVE_STATES} AND {state} ORDER BY id LIMIT 1"
        ));
        assert!(uses(&active, "tasks_repo_active"), "{active:?}");
    }
    // repos_with_work: both passes read an index, never the whole table.
    let depths = plan(&format!(
        "SELECT repo_key, count(*) FROM tasks WHERE {QUEUED} GROUP BY repo_key"
    ));
    assert!(uses(&depths, "tasks_queued"), "{depths:?}");
    // (Through the partial index or the one on state: active tasks are few.)
    let active = plan(&format!(
        "SELECT repo_key, state FROM tasks WHERE {REPO_ACTIVE_STATES}"
    ));
    assert!(
        uses(&active, "tasks_repo_active") || uses(&active, "tasks_state"),
        "{active:?}"
    );
}

/// The receipts worker finds due receipts and the next retry through the
/// partial index `comments_open` (migration 000005), which SQLite uses only
/// when a query holds its exact condition (`comments::OPEN`): otherwise each
/// of the worker's passes, one per commit, reads every receipt ever written.
#[test]
fn receipt_queries_use_the_partial_index_sqlite() {
    use codex_bridge::store::comments::OPEN;
    let dir = tempfile::tempdir().unwrap();
    let mut c = migrated_sqlite(&dir);
    let mut plan = |query: &str| query_plan(&mut c, query);
    let uses_index = |plan: &[String]| {
        plan.iter().any(|d| d.contains("INDEX comments_open"))
            && !plan
                .iter()
                .any(|d| d.starts_with("SCAN comments") && !d.contains("INDEX"))
    };
    // due_receipts
    let due = plan(&format!(
        "SELECT comments.comment_key, tasks.state FROM comments \
         INNER JOIN tasks ON tasks.task_id = comments.task_id \
         WHERE comments.kind = 'receipt' AND {OPEN} \
         AND (comments.next_attempt_at IS NULL OR comments.next_attempt_at <= '2026-12-01') \
         ORDER BY comments.created_at LIMIT 32"
    ));
    assert!(uses_index(&due), "{due:?}");
    // next_receipt_due
    let next = plan(&format!(
        "SELECT min(comments.next_attempt_at) FROM comments WHERE comments.kind = 'receipt' \
         AND {OPEN} AND comments.next_attempt_at IS NOT NULL"
    ));
    assert!(uses_index(&next), "{next:?}");
}

/// The commit statuses worker reads its queue through the partial index
/// `commit_statuses_open`, as the receipts worker reads its own: each pass
/// reads the unfinished statuses only, not every status ever set.
#[test]
fn commit_status_queries_use_the_partial_index_sqlite() {
    use codex_bridge::store::statuses::OPEN;
    let dir = tempfile::tempdir().unwrap();
    let mut c = migrated_sqlite(&dir);
    let mut plan = |query: &str| query_plan(&mut c, query);
    let uses_index = |plan: &[String]| {
        plan.iter()
            .any(|d| d.contains("INDEX commit_statuses_open"))
            && !plan
                .iter()
                .any(|d| d.starts_with("SCAN commit_statuses") && !d.contains("INDEX"))
    };
    // due
    let due = plan(&format!(
        "SELECT commit_statuses.id FROM commit_statuses WHERE {OPEN} \
         AND (commit_statuses.next_attempt_at IS NULL OR commit_statuses.next_attempt_at <= '2026-12-01') \
         ORDER BY commit_statuses.id LIMIT 32"
    ));
    assert!(uses_index(&due), "{due:?}");
    // next_due
    let next = plan(&format!(
        "SELECT min(commit_statuses.next_attempt_at) FROM commit_statuses WHERE {OPEN} \
         AND commit_statuses.next_attempt_at > '2026-12-01'"
    ));
    assert!(uses_index(&next), "{next:?}");
}

/// Migration 000007 counts the unfinished outbox entries of the sessions that a
/// store already holds: applied again over rows written without it, each
/// session's `open_entries` is its entries whose task has not ended.
fn open_entries_are_backfilled(url: &str) {
    use codex_bridge::lifecycle::TaskState;
    use codex_bridge::store::ingest::{self, IngestOutcome};
    use codex_bridge::store::revert_last_migration;
    use codex_bridge::store::tasks::{self, TransitionRequest};
    let mut c = connect(url);
    run_migrations(&mut c).unwrap();
    let comment = |n: i64, issue: i64| crate::actors::request("widgets", issue, n, "@ccbot go");
    // Issue 1 gets three tasks, Issue 2 one; one of Issue 1's ends.
    let reqs = vec![comment(1, 1), comment(2, 1), comment(3, 1), comment(4, 2)];
    let outcomes = c
        .write_transaction(|c| ingest::ingest_batch(c, &reqs))
        .unwrap();
    let IngestOutcome::Accepted { task_id, .. } = &outcomes[0] else {
        panic!("{outcomes:?}")
    };
    c.write_transaction(|c| {
        tasks::transition(
            c,
            &TransitionRequest {
                task_id,
                to: TaskState::Cancelled,
                expected_version: None,
                actor: "test",
                reason: None,
                error_code: None,
            },
        )
    })
    .unwrap();
    // Back to just before 000007 (through any later migrations).
    let mut reverted = Vec::new();
    while exec(&mut c, "SELECT open_entries FROM sessions").is_ok() {
        reverted.push(revert_last_migration(&mut c).unwrap());
    }
    assert_eq!(reverted.last().map(String::as_str), Some("20261130000007"));
    run_migrations(&mut c).unwrap();
    let issue = |n: i64, open: i64| {
        format!("session_key = 'default:acme/widgets:issue:{n}' AND open_entries = {open}")
    };
    assert_eq!(count_where(&mut c, "sessions", &issue(1, 2)), 1);
    assert_eq!(count_where(&mut c, "sessions", &issue(2, 1)), 1);
}

#[test]
fn open_entries_are_backfilled_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    open_entries_are_backfilled(&format!("sqlite://{}", dir.path().join("b.db").display()));
}

#[test]
fn open_entries_are_backfilled_postgres() {
    let db = PgDb::create();
    open_entries_are_backfilled(&db.url);
}

/// Rows that an older build stored under two spellings of one repository
/// (`ACME/widgets` and `acme/widgets`) become one repository, one session per
/// Issue, and tasks, entries, comments and deliveries under the folded keys,
/// terminal tasks included; a disabled spelling keeps the merged one disabled.
fn keys_that_differ_only_in_case_are_merged(url: &str) {
    use codex_bridge::store::ingest::{self, IngestOutcome};
    use codex_bridge::store::revert_last_migration;
    let mut c = connect(url);
    run_migrations(&mut c).unwrap();
    // Issue 1 of acme/widgets gets two tasks and Issue 2 one, under the folded keys.
    let comment = |n: i64, issue: i64| crate::actors::request("widgets", issue, n, "@ccbot go");
    let outcomes = c
        .write_transaction(|c| {
            ingest::ingest_batch(c, &[comment(1, 1), comment(2, 1), comment(3, 2)])
        })
        .unwrap();
    let ids: Vec<TaskId> = outcomes
        .iter()
        .map(|o| match o {
            IngestOutcome::Accepted { task_id, .. } => task_id.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    // Back to just before 000009 (through any later migrations).
    let mut reverted = Vec::new();
    while reverted.last().map(String::as_str) != Some("20261202000009") {
        assert!(reverted.len() < 40, "000009 never reverted: {reverted:?}");
        reverted.push(revert_last_migration(&mut c).unwrap());
    }
    // What an older build wrote for `ACME/Widgets`: its own repository (disabled
    // by an operator), session and lease, holding the first task of Issue 1
    // and all of Issue 2, Issue 2's task ended.
    let old_repo = "default:ACME/Widgets";
    for sql in [
        format!("INSERT INTO repositories (repo_key, instance_id, owner, name, status, registered_at, updated_at, version) VALUES ('{old_repo}', 'default', 'ACME', 'Widgets', 'disabled', '2000-01-01T00:00:00Z', 't', 1)"),
        format!("INSERT INTO sessions (session_key, repo_key, kind, number, status, created_at, updated_at, version, open_entries) VALUES ('{old_repo}:issue:1', '{old_repo}', 'issue', 1, 'active', 't', 't', 1, 1)"),
        format!("INSERT INTO sessions (session_key, repo_key, kind, number, thread_id, status, created_at, updated_at, version, open_entries) VALUES ('{old_repo}:issue:2', '{old_repo}', 'issue', 2, 'thread-2', 'active', '2000-01-01T00:00:00Z', 't', 1, 1)"),
        format!("UPDATE tasks SET repo_key = '{old_repo}', session_key = '{old_repo}:issue:1', resource_key = '{old_repo}:issue:1' WHERE task_id = '{}'", ids[0]),
        format!("UPDATE tasks SET repo_key = '{old_repo}', session_key = '{old_repo}:issue:2', resource_key = '{old_repo}:issue:2' WHERE task_id = '{}'", ids[2]),
        format!("UPDATE outbox_entries SET session_key = '{old_repo}:issue:1' WHERE task_id = '{}'", ids[0]),
        format!("UPDATE outbox_entries SET session_key = '{old_repo}:issue:2' WHERE task_id = '{}'", ids[2]),
        format!("UPDATE comments SET resource_key = '{old_repo}:issue:2' WHERE task_id = '{}'", ids[2]),
        format!("UPDATE webhook_deliveries SET repo_key = '{old_repo}', resource_key = '{old_repo}:issue:2' WHERE task_id = '{}'", ids[2]),
        "UPDATE sessions SET open_entries = 1 WHERE session_key = 'default:acme/widgets:issue:1'".to_owned(),
        "DELETE FROM sessions WHERE session_key = 'default:acme/widgets:issue:2'".to_owned(),
        format!("UPDATE tasks SET state = 'cancelled' WHERE task_id = '{}'", ids[2]),
        format!("INSERT INTO leases (repo_key, lease_id, owner, acquired_at, renewed_at, expires_at) VALUES ('{old_repo}', 'lease-old', 'gone', 't', 't', 't')"),
    ] {
        exec(&mut c, &sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    run_migrations(&mut c).unwrap();

    assert_eq!(count(&mut c, "repositories"), 1);
    assert_eq!(
        count_where(
            &mut c,
            "repositories",
            "repo_key = 'default:acme/widgets' AND status = 'disabled'"
        ),
        1,
        "the disabled spelling keeps the merged repository disabled"
    );
    assert_eq!(count(&mut c, "sessions"), 2);
    assert_eq!(
        count_where(
            &mut c,
            "sessions",
            "session_key = 'default:acme/widgets:issue:1' AND open_entries = 2"
        ),
        1,
        "both of Issue 1's unfinished tasks count against its one session"
    );
    assert_eq!(
        count_where(&mut c, "sessions", "session_key = 'default:acme/widgets:issue:2' AND open_entries = 0 AND thread_id = 'thread-2'"),
        1,
        "a session that existed only under the old spelling keeps its thread"
    );
    for (table, column) in [
        ("tasks", "repo_key"),
        ("tasks", "session_key"),
        ("tasks", "resource_key"),
        ("outbox_entries", "session_key"),
        ("comments", "resource_key"),
        ("webhook_deliveries", "repo_key"),
        ("webhook_deliveries", "resource_key"),
    ] {
        assert_eq!(
            count_where(&mut c, table, &format!("{column} <> lower({column})")),
            0,
            "{table}.{column} still holds an unfolded key"
        );
    }
    assert_eq!(
        count_where(
            &mut c,
            "tasks",
            &format!(
                "task_id = '{}' AND state = 'cancelled' AND repo_key = 'default:acme/widgets'",
                ids[2]
            )
        ),
        1,
        "a terminal task's keys are folded and its state is untouched"
    );
    assert_eq!(count(&mut c, "leases"), 0);
    // The terminal-task guard is back in force.
    assert!(exec(
        &mut c,
        &format!("UPDATE tasks SET author = 'x' WHERE task_id = '{}'", ids[2])
    )
    .is_err());
}

#[test]
fn keys_that_differ_only_in_case_are_merged_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    keys_that_differ_only_in_case_are_merged(&format!(
        "sqlite://{}",
        dir.path().join("f.db").display()
    ));
}

#[test]
fn keys_that_differ_only_in_case_are_merged_postgres() {
    let db = PgDb::create();
    keys_that_differ_only_in_case_are_merged(&db.url);
}

/// Migration 000032 drops the foreign key from tasks to deliveries (and the
/// index enforcing it needed): every delivery a task was made from names its
/// task afterwards, an older row that did not is given it, foreign keys stay
/// enforced, and retention still keeps exactly the deliveries tasks came from.
fn task_delivery_link(url: &str) {
    use codex_bridge::store::ingest::{self, IngestOutcome};
    use codex_bridge::store::retention;
    let mut c = connect(url);
    run_migrations(&mut c).unwrap();
    let mut ignored = crate::actors::request("widgets", 3, 3, "no mention here");
    ignored.intent = codex_bridge::domain::Intent::Ignore {
        reason: "not mentioned",
    };
    let reqs = vec![
        crate::actors::request("widgets", 1, 1, "@ccbot go"),
        crate::actors::request("widgets", 2, 2, "@ccbot go"),
        ignored,
    ];
    let outcomes = c
        .write_transaction(|c| ingest::ingest_batch(c, &reqs))
        .unwrap();
    let IngestOutcome::Accepted { task_id, .. } = &outcomes[0] else {
        panic!("{outcomes:?}")
    };
    assert!(
        matches!(outcomes[2], IngestOutcome::Ignored { .. }),
        "{outcomes:?}"
    );
    revert_through(&mut c, "20261206000032");
    // A row as an older build might have left it: the task names the
    // delivery, the delivery not the task.
    let first = reqs[0].delivery_key.as_str();
    exec(
        &mut c,
        &format!("UPDATE webhook_deliveries SET task_id = NULL WHERE delivery_key = '{first}'"),
    )
    .unwrap();
    run_migrations(&mut c).unwrap();
    let named = format!(
        "delivery_key = '{first}' AND task_id = '{}'",
        task_id.as_str()
    );
    assert_eq!(count_where(&mut c, "webhook_deliveries", &named), 1);
    assert_eq!(count(&mut c, "tasks"), 2);
    // Still enforced: an attempt of a task that does not exist is refused.
    assert!(
        exec(&mut c, ORPHAN_ATTEMPT).is_err(),
        "foreign keys are off after the migration"
    );
    // Retention lets go of the ignored delivery only.
    let pruned = c
        .write_transaction(|c| retention::prune_deliveries(c, "9999-12-31T00:00:00Z", 100))
        .unwrap();
    assert_eq!(pruned, 1);
    assert_eq!(count(&mut c, "webhook_deliveries"), 2);
    assert_eq!(
        count_where(
            &mut c,
            "webhook_deliveries",
            &format!("delivery_key = '{first}'")
        ),
        1
    );
}

#[test]
fn tasks_keep_their_deliveries_without_a_foreign_key_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    task_delivery_link(&format!("sqlite://{}", dir.path().join("l.db").display()));
}

#[test]
fn tasks_keep_their_deliveries_without_a_foreign_key_postgres() {
    let db = PgDb::create();
    task_delivery_link(&db.url);
}

/// Reverts the newest migrations, down to and including `version`.
fn revert_through(c: &mut DbConn, version: &str) {
    use codex_bridge::store::revert_last_migration;
    for _ in 0..100 {
        if revert_last_migration(c).unwrap() == version {
            return;
        }
    }
    panic!("migration {version} was never reverted");
}

/// An attempt of a task that does not exist.
const ORPHAN_ATTEMPT: &str =
    "INSERT INTO attempts (attempt_id, task_id, number, status, started_at) \
     VALUES ('att-orphan', 'task-missing', 1, 'running', '2026-12-06T00:00:00Z')";

/// A task of a session and repository that do not exist.
const ORPHAN_TASK: &str =
    "INSERT INTO tasks (task_id, delivery_key, repo_key, session_key, resource_key, \
     trigger_key, author, state, state_version, created_at, updated_at) VALUES \
     ('t-orphan', 'd', 'default:acme/nowhere', 'default:acme/nowhere:issue:99', 'r', \
     'k-orphan', 'a', 'queued', 1, '2026-12-06T00:00:00Z', '2026-12-06T00:00:00Z')";

/// SQLite keeps the foreign keys of the rows an accepted webhook writes, so
/// the suite checks every write path against them, and checks them at commit:
/// an orphan row is written by its statement and fails its transaction, which
/// leaves nothing behind. Other tables' keys are still checked at once; the
/// down checks the ingest's at once again.
#[test]
fn sqlite_checks_the_ingests_foreign_keys_at_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = connect(&format!("sqlite://{}", dir.path().join("r.db").display()));
    run_migrations(&mut c).unwrap();
    let mut at_statement = None;
    let committed = c.transaction(|c| {
        at_statement = Some(exec(c, ORPHAN_TASK));
        Ok::<_, diesel::result::Error>(())
    });
    assert_eq!(
        at_statement.unwrap().unwrap(),
        1,
        "the statement checks nothing"
    );
    let e = committed.expect_err("an orphan task was committed");
    assert!(e.to_string().contains("FOREIGN KEY"), "{e}");
    assert_eq!(count(&mut c, "tasks"), 0);
    assert!(
        exec(&mut c, ORPHAN_ATTEMPT).is_err(),
        "attempts check theirs at once"
    );
    revert_through(&mut c, "20261206000034");
    assert!(
        exec(&mut c, ORPHAN_TASK).is_err(),
        "the down checks at once"
    );
    run_migrations(&mut c).unwrap();
}

/// PostgreSQL drops them (each check locks the parent row) and keeps the
/// others; reverting the migration puts them back.
#[test]
fn postgres_drops_the_ingests_foreign_keys_and_its_down_restores_them() {
    use codex_bridge::store::revert_last_migration;
    let db = PgDb::create();
    let mut c = connect(&db.url);
    run_migrations(&mut c).unwrap();
    assert!(
        exec(&mut c, ORPHAN_ATTEMPT).is_err(),
        "attempts keep theirs"
    );
    assert_eq!(exec(&mut c, ORPHAN_TASK).unwrap(), 1);
    exec(&mut c, "DELETE FROM tasks WHERE task_id = 't-orphan'").unwrap();
    revert_through(&mut c, "20261206000034");
    assert_eq!(revert_last_migration(&mut c).unwrap(), "20261206000033");
    assert!(exec(&mut c, ORPHAN_TASK).is_err(), "the down restores them");
    run_migrations(&mut c).unwrap();
}

/// The opcodes of the program SQLite compiles for `statement` (EXPLAIN).
fn opcodes(c: &mut DbConn, statement: &str) -> Vec<String> {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Op {
        #[diesel(sql_type = diesel::sql_types::Text)]
        opcode: String,
    }
    codex_bridge::with_conn!(c, |conn| diesel::sql_query(format!("EXPLAIN {statement}"))
        .load::<Op>(conn))
    .unwrap()
    .into_iter()
    .map(|o| o.opcode)
    .collect()
}

/// SQLite evaluates an IN list of constants in a CHECK constraint or a partial
/// index's condition by building a temporary index of its values, again for
/// every row written. The rows an accepted webhook writes name their values
/// in chains of `=` instead: their INSERTs build no temporary index, and a
/// value outside the chain is still refused.
#[test]
fn the_ingests_inserts_build_no_temporary_index_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = migrated_sqlite(&dir);
    let inserts = [
        "INSERT INTO webhook_deliveries (delivery_key, delivery_id, event_type, status, \
         payload_hash, received_at) VALUES (?, ?, ?, ?, ?, ?)",
        ORPHAN_TASK,
        "INSERT INTO outbox_entries (queue_id, session_key, task_id, operation_id, fingerprint, \
         mode, status, auto_drain, user_text, created_at, updated_at, handoff_phase) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    ];
    for insert in inserts {
        let program = opcodes(&mut c, insert);
        assert!(program.iter().any(|op| op == "IdxInsert"), "{program:?}");
        assert!(
            !program.iter().any(|op| op == "OpenEphemeral"),
            "{insert}: {program:?}"
        );
    }
    let bogus_state = ORPHAN_TASK.replace("'queued'", "'bogus'");
    let e = exec(&mut c, &bogus_state).expect_err("a task in no state was written");
    assert!(e.to_string().contains("CHECK"), "{e}");
    let e = exec(
        &mut c,
        "INSERT INTO webhook_deliveries (delivery_key, delivery_id, event_type, status, \
         payload_hash, received_at) VALUES ('k', 'd', 'issue_comment', 'bogus', 'h', 't')",
    )
    .expect_err("a delivery in no status was written");
    assert!(e.to_string().contains("CHECK"), "{e}");
}
