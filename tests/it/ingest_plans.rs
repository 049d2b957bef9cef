//! On PostgreSQL the ingest keeps its batch lookups as prepared statements,
//! and the generic plans PostgreSQL settles on for them use the tables'
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
