//! The batch's rows on SQLite, written through statements the connection
//! keeps (`store::rawsql`): each table's multi-row `INSERT OR IGNORE` of 64,
//! 32, 16, 8, 4, 2 or 1 rows, prepared once per connection and size, and the
//! sessions' counts of open entries, one kept UPDATE per session.
//!
//! Every column a row writes is named here next to the value bound to it;
//! PostgreSQL writes the same rows through `unnest`, and the ingest's tests
//! compare the two stores column by column.

use super::lookups::Found;
use super::rows::{AuditRow, OutboxRow, ReceiptRow, TaskRow, TransitionRow};
use crate::domain::states::ThreadTrust;
use crate::domain::{RepoKey, ResourceKey, TaskId};
use crate::store::models::Delivery;
use crate::store::rawsql::{Row, Run, Statements};
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

/// Adds `n` to the count of open entries of the session `key`, failing
/// unless the session's row is there (it was found or created by the batch).
pub(super) fn add_open_entries(st: &mut Statements, key: &str, n: i64) -> Result<(), Error> {
    let mut run = st.prepared(("sessions.open_entries", 1), || {
        "UPDATE sessions SET open_entries = open_entries + ? WHERE session_key = ?".into()
    })?;
    run.int(n);
    run.text(key);
    match run.execute()? {
        1 => Ok(()),
        _ => Err(super::rows::refused("sessions", 1)),
    }
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

// The batch's lookups on SQLite: one run of a kept statement per key, each
// an index seek. (An `IN` list makes SQLite build a temporary index of the
// list at every run, and diesel binds all of its places through its query
// tree.)

/// The keys a batch looks up, each list without repeats.
pub(super) struct Wanted<'a> {
    pub(super) deliveries: &'a [&'a str],
    pub(super) contents: &'a [&'a str],
    pub(super) repos: &'a [RepoKey],
    pub(super) triggers: &'a [&'a str],
    pub(super) sessions: &'a [ResourceKey],
}

fn each_key<'k>(
    st: &mut Statements,
    name: &'static str,
    sql: &'static str,
    keys: impl IntoIterator<Item = &'k str>,
    mut row: impl FnMut(&'k str, &Row<'_>) -> Result<(), Error>,
) -> Result<(), Error> {
    for key in keys {
        let mut run = st.prepared((name, 1), || sql.into())?;
        run.text(key);
        run.query(|r| row(key, r))?;
    }
    Ok(())
}

fn bad_value(what: &str, e: impl std::fmt::Display) -> Error {
    Error::DeserializationError(format!("the store holds an invalid {what}: {e}").into())
}

/// What the store holds for `wanted`.
pub(super) fn find(st: &mut Statements, wanted: &Wanted<'_>) -> Result<Found, Error> {
    let mut found = Found {
        deliveries: Vec::new(),
        by_content: Vec::new(),
        repos: Vec::new(),
        triggers: Vec::new(),
        sessions: Vec::new(),
    };
    each_key(
        st,
        "lookup.delivery",
        "SELECT delivery_key, delivery_id, event_type, action, status, reason, repo_key, \
         resource_key, comment_id, content_key, duplicate_of, task_id, sender, payload_hash, \
         received_at FROM webhook_deliveries WHERE delivery_key = ?",
        wanted.deliveries.iter().copied(),
        |_, r| {
            let opt = |i| r.text(i).map(|t| t.map(str::to_owned));
            found.deliveries.push(Delivery {
                delivery_key: r.string(0)?,
                delivery_id: r.string(1)?,
                event_type: r.string(2)?,
                action: opt(3)?,
                status: r.string(4)?,
                reason: opt(5)?,
                repo_key: r
                    .text(6)?
                    .map(RepoKey::parse)
                    .transpose()
                    .map_err(|e| bad_value("repository key", e))?,
                resource_key: r
                    .text(7)?
                    .map(ResourceKey::parse)
                    .transpose()
                    .map_err(|e| bad_value("resource key", e))?,
                comment_id: r.int(8),
                content_key: opt(9)?,
                duplicate_of: opt(10)?,
                task_id: r
                    .text(11)?
                    .map(TaskId::parse)
                    .transpose()
                    .map_err(|e| bad_value("task id", e))?,
                sender: opt(12)?,
                payload_hash: r.string(13)?,
                received_at: r.string(14)?,
            });
            Ok(())
        },
    )?;
    each_key(
        st,
        "lookup.content",
        "SELECT delivery_key, task_id FROM webhook_deliveries WHERE content_key = ?",
        wanted.contents.iter().copied(),
        |key, r| {
            let task_id = r
                .text(1)?
                .map(TaskId::parse)
                .transpose()
                .map_err(|e| bad_value("task id", e))?;
            found
                .by_content
                .push((Some(key.to_owned()), r.string(0)?, task_id));
            Ok(())
        },
    )?;
    for repo in wanted.repos {
        each_key(
            st,
            "lookup.repository",
            "SELECT status FROM repositories WHERE repo_key = ?",
            [repo.as_str()],
            |_, r| {
                found.repos.push((repo.clone(), r.string(0)?));
                Ok(())
            },
        )?;
    }
    each_key(
        st,
        "lookup.trigger",
        "SELECT task_id, state, delivery_key FROM tasks WHERE trigger_key = ?",
        wanted.triggers.iter().copied(),
        |key, r| {
            let task_id = TaskId::parse(&r.string(0)?).map_err(|e| bad_value("task id", e))?;
            found
                .triggers
                .push((key.to_owned(), task_id, r.string(1)?, r.string(2)?));
            Ok(())
        },
    )?;
    for session in wanted.sessions {
        each_key(
            st,
            "lookup.session",
            "SELECT open_entries, thread_id, thread_trust, thread_generation FROM sessions \
             WHERE session_key = ?",
            [session.as_str()],
            |_, r| {
                let trust = r
                    .text(2)?
                    .map(ThreadTrust::parse)
                    .transpose()
                    .map_err(|e| bad_value("thread trust", e))?;
                found.sessions.push((
                    session.clone(),
                    r.number(0)?,
                    r.text(1)?.map(str::to_owned),
                    trust,
                    r.number(3)?,
                ));
                Ok(())
            },
        )?;
    }
    Ok(found)
}
