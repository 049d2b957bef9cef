//! The ingest on PostgreSQL: its batches write the rows SQLite's write (each
//! table in one statement there, row by row or by multi-row lists here), and
//! its lookups stay prepared statements whose generic plans use the tables'
//! indexes, although they are made while the tables are nearly empty (where a
//! sequential scan looks cheapest and would be kept as the tables grow).

use crate::support::*;
use codex_bridge::domain::IngestRequest;
use codex_bridge::store::ingest;
use codex_bridge::store::{run_migrations, DbConn};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};

#[derive(QueryableByName, Debug)]
struct Kept {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    statement: String,
    #[diesel(sql_type = BigInt)]
    generic_plans: i64,
    #[diesel(sql_type = BigInt)]
    params: i64,
}

#[derive(QueryableByName)]
struct PlanLine {
    #[diesel(sql_type = Text)]
    #[diesel(column_name = "QUERY PLAN")]
    line: String,
}

fn comment(n: i64) -> IngestRequest {
    // Four Issues, so that batches find sessions they created before.
    crate::actors::request("r0", n % 4 + 1, 20_000 + n, &format!("@ccbot {n}"))
}

/// The lookups a batch makes, by the text that tells them apart.
const LOOKUPS: [&str; 5] = [
    r#"WHERE "webhook_deliveries"."delivery_key" IN ("#,
    r#"WHERE "webhook_deliveries"."content_key" IN ("#,
    r#"WHERE "repositories"."repo_key" IN ("#,
    r#"WHERE "tasks"."trigger_key" IN ("#,
    r#"WHERE "sessions"."session_key" IN ("#,
];

#[test]
fn the_ingest_lookups_keep_index_plans_on_postgres() {
    let db = PgDb::create();
    let mut c = connect(&db.url);
    run_migrations(&mut c).unwrap();
    // The worst case: each kept statement's generic plan made at its first
    // run, on empty tables, and used from then on. (Left to itself,
    // PostgreSQL settles on a generic plan at a statement's sixth run or
    // later, with the statistics of that moment.)
    exec(&mut c, "SET plan_cache_mode = force_generic_plan").unwrap();
    for batch in 0..10 {
        let reqs: Vec<IngestRequest> = (batch * 3..batch * 3 + 3).map(comment).collect();
        c.write_transaction(|c| ingest::ingest_batch(c, &reqs))
            .unwrap();
    }
    let DbConn::Pg(pg) = &mut c else {
        panic!("a PostgreSQL url gave another connection")
    };
    let kept: Vec<Kept> = diesel::sql_query(
        "SELECT name, statement, generic_plans, cardinality(parameter_types)::int8 AS params \
         FROM pg_prepared_statements",
    )
    .load(pg)
    .unwrap();
    for lookup in LOOKUPS {
        let found: Vec<&Kept> = kept
            .iter()
            .filter(|k| k.statement.contains(lookup))
            .collect();
        assert!(
            !found.is_empty(),
            "the lookup `{lookup}` is not kept as a prepared statement; kept: {:#?}",
            kept.iter().map(|k| &k.statement).collect::<Vec<_>>()
        );
        for found in found {
            assert!(found.generic_plans > 0, "{found:?} was never run");
            // The plan the connection keeps, whatever this session's
            // settings would choose now.
            let args = vec!["'none'"; found.params as usize].join(", ");
            let plan: Vec<String> =
                diesel::sql_query(format!("EXPLAIN EXECUTE {}({args})", found.name))
                    .load::<PlanLine>(pg)
                    .unwrap()
                    .into_iter()
                    .map(|l| l.line)
                    .collect();
            assert!(
                !plan.iter().any(|l| l.contains("Seq Scan")),
                "the kept plan of `{lookup}` scans its table:\n{}",
                plan.join("\n")
            );
            assert!(
                plan.iter().any(|l| l.contains("Index")),
                "the kept plan of `{lookup}` uses no index:\n{}",
                plan.join("\n")
            );
        }
    }
}

/// The columns the ingest writes, by table, and the key its rows are
/// listed by.
const WRITTEN: [(&str, &[&str]); 7] = [
    (
        "webhook_deliveries",
        &[
            "delivery_key",
            "delivery_id",
            "event_type",
            "action",
            "status",
            "reason",
            "repo_key",
            "resource_key",
            "comment_id",
            "content_key",
            "duplicate_of",
            "task_id",
            "sender",
            "payload_hash",
            "received_at",
        ],
    ),
    (
        "tasks",
        &[
            "task_id",
            "delivery_key",
            "repo_key",
            "session_key",
            "resource_key",
            "trigger_key",
            "comment_id",
            "author",
            "state",
            "state_version",
            "head_ref",
            "base_ref",
            "created_at",
            "updated_at",
            "command",
            "error_code",
            "attempt",
            "thread_id",
        ],
    ),
    (
        "task_transitions",
        &[
            "task_id",
            "from_state",
            "to_state",
            "state_version",
            "actor",
            "reason",
            "error_code",
            "at",
        ],
    ),
    (
        "outbox_entries",
        &[
            "queue_id",
            "session_key",
            "task_id",
            "operation_id",
            "fingerprint",
            "mode",
            "status",
            "auto_drain",
            "user_text",
            "created_at",
            "updated_at",
            "version",
            "command",
            "command_argument",
            "hold_reason",
        ],
    ),
    (
        "comments",
        &[
            "comment_key",
            "task_id",
            "kind",
            "resource_key",
            "status",
            "created_at",
            "updated_at",
            "attempts",
        ],
    ),
    (
        "audit_events",
        &[
            "event_id",
            "task_id",
            "action",
            "actor",
            "from_state",
            "to_state",
            "delivery_id",
            "turn_id",
            "comment_id",
            "error_code",
            "metadata",
            "at",
        ],
    ),
    (
        "sessions",
        &[
            "session_key",
            "repo_key",
            "kind",
            "number",
            "status",
            "open_entries",
        ],
    ),
];

/// Every row of `table` as text, with what each run makes anew (ids,
/// times, the fingerprints that hash them) blanked, sorted.
fn dump(c: &mut DbConn, table: &str, columns: &[&str]) -> Vec<String> {
    #[derive(QueryableByName)]
    struct Line {
        #[diesel(sql_type = Text)]
        line: String,
    }
    let cells: Vec<String> = columns
        .iter()
        .map(|col| format!("COALESCE(CAST({col} AS TEXT), 'NULL')"))
        .collect();
    let sql = format!("SELECT {} AS line FROM {table}", cells.join(" || '|' || "));
    let lines: Vec<Line> =
        codex_bridge::with_conn!(c, |c| diesel::sql_query(&sql).load(c)).unwrap();
    let mut out: Vec<String> = lines.into_iter().map(|l| blank(&l.line)).collect();
    out.sort();
    out
}

/// `s` with every word of 32 or more hex digits (ids, hashes) as `#`, every
/// time of day as `@`, and booleans spelled one way.
fn blank(s: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let hexes = |w: &str| w.len() >= 32 && w.chars().all(|c| c.is_ascii_hexdigit());
        if word.contains('T') && word.contains(':') && word.ends_with('Z') {
            out.push('@');
        } else {
            let parts: Vec<&str> = word
                .split(':')
                .map(|w| match w {
                    _ if hexes(w) => "#",
                    "true" => "1",
                    "false" => "0",
                    w => w,
                })
                .collect();
            out.push_str(&parts.join(":"));
        }
        word.clear();
    };
    for ch in s.chars() {
        if ch.is_ascii_alphanumeric() || matches!(ch, ':' | '.') {
            word.push(ch);
        } else {
            flush(&mut word, &mut out);
            out.push(ch);
        }
    }
    flush(&mut word, &mut out);
    out
}

#[test]
fn postgres_batches_write_the_rows_sqlite_writes() {
    use crate::ingest::{request, Event};
    // A fixed stream of repeats, replays, edits, deletions, ignored events
    // and a disabled repository.
    let mut seed: u32 = 0x2545_f491;
    let mut next = |n: u32| {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        (seed % n) as u8
    };
    let reqs: Vec<IngestRequest> = (0..240)
        .map(|_| Event {
            delivery: next(60),
            comment: next(20),
            repo: next(4),
            kind: next(10),
        })
        .map(|e| request(&e))
        .collect();
    let disabled = "INSERT INTO repositories (repo_key, instance_id, owner, name, status, \
                    registered_at, updated_at, version) VALUES ('default:acme/r3', 'default', \
                    'acme', 'r3', 'disabled', 't', 't', 1)";

    let dir = tempfile::tempdir().unwrap();
    let mut lite = connect(&format!("sqlite://{}", dir.path().join("i.db").display()));
    run_migrations(&mut lite).unwrap();
    exec(&mut lite, disabled).unwrap();
    let one_by_one: Vec<_> = reqs
        .iter()
        .map(|r| lite.write_transaction(|c| ingest::ingest(c, r)).unwrap())
        .collect();

    let db = PgDb::create();
    let mut pg = connect(&db.url);
    run_migrations(&mut pg).unwrap();
    exec(&mut pg, disabled).unwrap();
    let mut batched = Vec::new();
    let mut rest = &reqs[..];
    for size in [1usize, 7, 3, 16, 2, 33, 5].into_iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (now, later) = rest.split_at(size.min(rest.len()));
        batched.extend(
            pg.write_transaction(|c| ingest::ingest_batch(c, now))
                .unwrap(),
        );
        rest = later;
    }
    assert_eq!(one_by_one.len(), batched.len());
    for (a, b) in one_by_one.iter().zip(&batched) {
        assert_eq!(
            std::mem::discriminant(a),
            std::mem::discriminant(b),
            "{a:?} on SQLite, {b:?} on PostgreSQL"
        );
    }
    for (table, columns) in WRITTEN {
        let (l, p) = (
            dump(&mut lite, table, columns),
            dump(&mut pg, table, columns),
        );
        assert!(!l.is_empty(), "the stream wrote nothing to {table}");
        let first = l.iter().zip(&p).position(|(a, b)| a != b);
        assert!(
            l.len() == p.len() && first.is_none(),
            "{table}: {} rows on SQLite, {} on PostgreSQL; first difference:\n{:?}\n{:?}",
            l.len(),
            p.len(),
            first.map(|i| &l[i]),
            first.map(|i| &p[i]),
        );
    }
}
