//! PostgreSQL's writes of a batch, one statement per table whatever the
//! batch's size: each column goes over as one array, and
//! `INSERT … SELECT * FROM unnest(…)` makes the rows, so the statement's text
//! never changes and diesel keeps it prepared.
//!
//! Multi-row `VALUES` lists are one statement per list length; kept, that is
//! a ladder of sizes (64, 32, …, 1), about two statements per table for a
//! typical batch, each a round trip and an executor start on PostgreSQL.

use super::rows::{AuditRow, OutboxRow, ReceiptRow, TaskRow, TransitionRow};
use crate::domain::ResourceKey;
use crate::store::models::Delivery;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::serialize::{Output, ToSql};
use diesel::sql_types::{Array, BigInt, Bool, HasSqlType, Nullable, Text};
use diesel::{PgConnection, QueryResult, RunQueryDsl};

/// One column of a batch's rows, bound as one PostgreSQL array of `T`s.
pub(super) struct Column<'a, T: ?Sized> {
    values: Vec<&'a T>,
}

impl<'a, T: ?Sized> Column<'a, T> {
    fn new<R>(rows: &'a [R], get: fn(&R) -> &T) -> Self {
        Column {
            values: rows.iter().map(get).collect(),
        }
    }
}

impl<T: ?Sized> std::fmt::Debug for Column<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Column({} values)", self.values.len())
    }
}

impl<T, ST> ToSql<Array<ST>, Pg> for Column<'_, T>
where
    Pg: HasSqlType<ST>,
    T: ToSql<ST, Pg> + ?Sized,
    ST: 'static,
{
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> diesel::serialize::Result {
        <[&T] as ToSql<Array<ST>, Pg>>::to_sql(&self.values, out)
    }
}

/// `fn $name(conn, rows) -> rows written`: one `INSERT … SELECT * FROM
/// unnest(…)` into `$table` of the fields listed, each a column of the same
/// name and of the SQL type given (checked by the compiler against the
/// field's Rust type).
macro_rules! unnest_insert {
    ($(#[$doc:meta])* $name:ident, $row:ty, $table:literal, { $($field:ident: $st:ty),+ $(,)? }) => {
        $(#[$doc])*
        pub(super) fn $name(conn: &mut PgConnection, rows: &[$row]) -> QueryResult<usize> {
            #[allow(non_camel_case_types)]
            struct Columns<'a> {
                $($field: Box<dyn ToSql<Array<$st>, Pg> + 'a>,)+
            }
            struct Marker;
            impl QueryId for Columns<'_> {
                type QueryId = Marker;
                const HAS_STATIC_QUERY_ID: bool = true;
            }
            impl QueryFragment<Pg> for Columns<'_> {
                fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
                    out.push_sql(concat!(
                        "INSERT INTO \"", $table, "\" (",
                        unnest_insert!(@names $($field),+),
                        ") SELECT * FROM unnest("
                    ));
                    let mut first = true;
                    $(
                        if !std::mem::take(&mut first) {
                            out.push_sql(", ");
                        }
                        out.push_bind_param::<Array<$st>, _>(&*self.$field)?;
                    )+
                    out.push_sql(")");
                    Ok(())
                }
            }
            impl RunQueryDsl<PgConnection> for Columns<'_> {}
            if rows.is_empty() {
                return Ok(0);
            }
            Columns {
                $($field: Box::new(Column::new(rows, |r: &$row| &r.$field)),)+
            }
            .execute(conn)
        }
    };
    (@names $first:ident $(, $rest:ident)*) => {
        concat!("\"", stringify!($first), "\"" $(, ", \"", stringify!($rest), "\"")*)
    };
}

unnest_insert!(deliveries, Delivery, "webhook_deliveries", {
    delivery_key: Text,
    delivery_id: Text,
    event_type: Text,
    action: Nullable<Text>,
    status: Text,
    reason: Nullable<Text>,
    repo_key: Nullable<Text>,
    resource_key: Nullable<Text>,
    comment_id: Nullable<BigInt>,
    content_key: Nullable<Text>,
    duplicate_of: Nullable<Text>,
    task_id: Nullable<Text>,
    sender: Nullable<Text>,
    payload_hash: Text,
    received_at: Text,
});

unnest_insert!(tasks, TaskRow, "tasks", {
    task_id: Text,
    delivery_key: Text,
    repo_key: Text,
    session_key: Text,
    resource_key: Text,
    trigger_key: Text,
    comment_id: Nullable<BigInt>,
    author: Text,
    state: Text,
    state_version: BigInt,
    head_ref: Nullable<Text>,
    base_ref: Nullable<Text>,
    created_at: Text,
    updated_at: Text,
    command: Nullable<Text>,
    error_code: Nullable<Text>,
});

unnest_insert!(transitions, TransitionRow, "task_transitions", {
    task_id: Text,
    from_state: Nullable<Text>,
    to_state: Text,
    state_version: BigInt,
    actor: Text,
    reason: Nullable<Text>,
    error_code: Nullable<Text>,
    at: Text,
});

unnest_insert!(outbox, OutboxRow, "outbox_entries", {
    queue_id: Text,
    session_key: Text,
    task_id: Text,
    operation_id: Text,
    fingerprint: Text,
    mode: Text,
    status: Text,
    auto_drain: Bool,
    user_text: Text,
    created_at: Text,
    updated_at: Text,
    version: BigInt,
    command: Nullable<Text>,
    command_argument: Nullable<Text>,
});

unnest_insert!(receipts, ReceiptRow, "comments", {
    comment_key: Text,
    task_id: Text,
    kind: Text,
    resource_key: Text,
    status: Text,
    created_at: Text,
    updated_at: Text,
});

unnest_insert!(audits, AuditRow, "audit_events", {
    event_id: Text,
    task_id: Nullable<Text>,
    action: Text,
    actor: Text,
    from_state: Nullable<Text>,
    to_state: Nullable<Text>,
    delivery_id: Nullable<Text>,
    turn_id: Nullable<Text>,
    comment_id: Nullable<BigInt>,
    error_code: Nullable<Text>,
    metadata: Text,
    at: Text,
});

/// The batch's new outbox entries added to their sessions' counts, in one
/// statement (the rows were locked at the batch's lookup, in key order).
pub(super) fn add_open_entries(
    conn: &mut PgConnection,
    opened: &[(&ResourceKey, i64)],
) -> QueryResult<usize> {
    struct Counts<'a> {
        keys: Column<'a, ResourceKey>,
        added: Column<'a, i64>,
    }
    impl QueryId for Counts<'_> {
        type QueryId = Counts<'static>;
        const HAS_STATIC_QUERY_ID: bool = true;
    }
    impl QueryFragment<Pg> for Counts<'_> {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
            out.push_sql(
                "UPDATE \"sessions\" SET \"open_entries\" = \"sessions\".\"open_entries\" + v.n \
                 FROM unnest(",
            );
            out.push_bind_param::<Array<Text>, _>(&self.keys)?;
            out.push_sql(", ");
            out.push_bind_param::<Array<BigInt>, _>(&self.added)?;
            out.push_sql(") AS v(k, n) WHERE \"sessions\".\"session_key\" = v.k");
            Ok(())
        }
    }
    impl RunQueryDsl<PgConnection> for Counts<'_> {}
    if opened.is_empty() {
        return Ok(0);
    }
    Counts {
        keys: Column::new(opened, |o| o.0),
        added: Column::new(opened, |o| &o.1),
    }
    .execute(conn)
}
