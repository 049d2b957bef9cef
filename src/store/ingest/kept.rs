//! The batch's rows on SQLite, written through statements the connection
//! keeps (`store::rawsql`): each table's multi-row `INSERT OR IGNORE` of 64,
//! 32, 16, 8, 4, 2 or 1 rows, prepared once per connection and size, and the
//! sessions' counts of open entries over lists of 64 keys.
//!
//! Every column a row writes is named here next to the value bound to it;
//! PostgreSQL writes the same rows through `unnest`, and the ingest's tests
//! compare the two stores column by column.

use super::rows::{AuditRow, OutboxRow, ReceiptRow, TaskRow, TransitionRow};
use crate::store::models::Delivery;
use crate::store::rawsql::{Run, Statements};
use diesel::result::Error;

/// A row of one table, as the values of its `INSERT`.
pub(super) trait KeptRow {
    const TABLE: &'static str;
    const COLUMNS: &'static [&'static str];
    /// Binds the row's values in the order of `COLUMNS`.
    fn bind<'d>(&'d self, run: &mut Run<'_, 'd>);
}

/// Inserts `rows`, failing unless every one was written: `OR IGNORE` skips a
/// row that breaks a constraint, and the caller's transaction is then rolled
/// back (a statement that could abort halfway would make SQLite journal every
/// page it touches first, to undo only its own part).
pub(super) fn insert_all<R: KeptRow>(st: &mut Statements, rows: &[R]) -> Result<(), Error> {
    let mut rest = rows;
    while !rest.is_empty() {
        let size = [64, 32, 16, 8, 4, 2, 1]
            .into_iter()
            .find(|n| *n <= rest.len())
            .unwrap_or(1);
        let (head, tail) = rest.split_at(size);
        rest = tail;
        let mut run = st.prepared((R::TABLE, size), || insert_sql::<R>(size))?;
        for row in head {
            row.bind(&mut run);
        }
        let wrote = run.execute()?;
        if wrote != size {
            return Err(super::rows::refused(R::TABLE, size.abs_diff(wrote)));
        }
    }
    Ok(())
}

fn insert_sql<R: KeptRow>(rows: usize) -> String {
    let places = format!("({})", vec!["?"; R::COLUMNS.len()].join(", "));
    format!(
        "INSERT OR IGNORE INTO {} ({}) VALUES {}",
        R::TABLE,
        R::COLUMNS.join(", "),
        vec![places; rows].join(", ")
    )
}

/// Adds `n` to the count of open entries of each session of `keys` (a list
/// of 64, unused places repeating a key: each row is updated once).
pub(super) fn add_open_entries(
    st: &mut Statements,
    n: i64,
    keys: &[&str; 64],
) -> Result<usize, Error> {
    let mut run = st.prepared(("sessions.open_entries", 64), || {
        format!(
            "UPDATE sessions SET open_entries = open_entries + ? WHERE session_key IN ({})",
            vec!["?"; 64].join(", ")
        )
    })?;
    run.int(n);
    for key in keys {
        run.text(key);
    }
    run.execute()
}

impl KeptRow for Delivery {
    const TABLE: &'static str = "webhook_deliveries";
    const COLUMNS: &'static [&'static str] = &[
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
    ];
    fn bind<'d>(&'d self, run: &mut Run<'_, 'd>) {
        run.text(&self.delivery_key);
        run.text(&self.delivery_id);
        run.text(&self.event_type);
        run.opt_text(self.action.as_deref());
        run.text(&self.status);
        run.opt_text(self.reason.as_deref());
        run.opt_text(self.repo_key.as_ref().map(|k| k.as_str()));
        run.opt_text(self.resource_key.as_ref().map(|k| k.as_str()));
        run.opt_int(self.comment_id);
        run.opt_text(self.content_key.as_deref());
        run.opt_text(self.duplicate_of.as_deref());
        run.opt_text(self.task_id.as_ref().map(|k| k.as_str()));
        run.opt_text(self.sender.as_deref());
        run.text(&self.payload_hash);
        run.text(&self.received_at);
    }
}

impl KeptRow for TaskRow {
    const TABLE: &'static str = "tasks";
    const COLUMNS: &'static [&'static str] = &[
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
    ];
    fn bind<'d>(&'d self, run: &mut Run<'_, 'd>) {
        run.text(self.task_id.as_str());
        run.text(&self.delivery_key);
        run.text(self.repo_key.as_str());
        run.text(self.session_key.as_str());
        run.text(self.resource_key.as_str());
        run.text(&self.trigger_key);
        run.opt_int(self.comment_id);
        run.text(&self.author);
        run.text(self.state.as_str());
        run.int(self.state_version);
        run.opt_text(self.head_ref.as_deref());
        run.opt_text(self.base_ref.as_deref());
        run.text(&self.created_at);
        run.text(&self.updated_at);
        run.opt_text(self.command.map(|c| c.as_str()));
        run.opt_text(self.error_code.as_deref());
    }
}

impl KeptRow for TransitionRow {
    const TABLE: &'static str = "task_transitions";
    const COLUMNS: &'static [&'static str] = &[
        "task_id",
        "from_state",
        "to_state",
        "state_version",
        "actor",
        "reason",
        "error_code",
        "at",
    ];
    fn bind<'d>(&'d self, run: &mut Run<'_, 'd>) {
        run.text(self.task_id.as_str());
        run.opt_text(self.from_state.map(|s| s.as_str()));
        run.text(self.to_state.as_str());
        run.int(self.state_version);
        run.text(&self.actor);
        run.opt_text(self.reason.as_deref());
        run.opt_text(self.error_code.as_deref());
        run.text(&self.at);
    }
}

impl KeptRow for OutboxRow {
    const TABLE: &'static str = "outbox_entries";
    const COLUMNS: &'static [&'static str] = &[
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
    ];
    fn bind<'d>(&'d self, run: &mut Run<'_, 'd>) {
        run.text(&self.queue_id);
        run.text(self.session_key.as_str());
        run.text(self.task_id.as_str());
        run.text(self.operation_id.as_str());
        run.text(&self.fingerprint);
        run.text(self.mode.as_str());
        run.text(self.status.as_str());
        run.boolean(self.auto_drain);
        run.text(&self.user_text);
        run.text(&self.created_at);
        run.text(&self.updated_at);
        run.int(self.version);
        run.opt_text(self.command.map(|c| c.as_str()));
        run.opt_text(self.command_argument.as_deref());
    }
}

impl KeptRow for ReceiptRow {
    const TABLE: &'static str = "comments";
    const COLUMNS: &'static [&'static str] = &[
        "comment_key",
        "task_id",
        "kind",
        "resource_key",
        "status",
        "created_at",
        "updated_at",
    ];
    fn bind<'d>(&'d self, run: &mut Run<'_, 'd>) {
        run.text(&self.comment_key);
        run.text(self.task_id.as_str());
        run.text(self.kind.as_str());
        run.text(self.resource_key.as_str());
        run.text(self.status.as_str());
        run.text(&self.created_at);
        run.text(&self.updated_at);
    }
}

impl KeptRow for AuditRow {
    const TABLE: &'static str = "audit_events";
    const COLUMNS: &'static [&'static str] = &[
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
    ];
    fn bind<'d>(&'d self, run: &mut Run<'_, 'd>) {
        run.text(&self.event_id);
        run.opt_text(self.task_id.as_ref().map(|k| k.as_str()));
        run.text(&self.action);
        run.text(&self.actor);
        run.opt_text(self.from_state.map(|s| s.as_str()));
        run.opt_text(self.to_state.map(|s| s.as_str()));
        run.opt_text(self.delivery_id.as_deref());
        run.opt_text(self.turn_id.as_deref());
        run.opt_int(self.comment_id);
        run.opt_text(self.error_code.as_deref());
        run.text(&self.metadata);
        run.text(&self.at);
    }
}
