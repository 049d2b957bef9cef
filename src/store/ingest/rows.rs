//! The rows a batch writes, collected while its deliveries are decided, and
//! their write: new repositories and sessions row by row, everything else in
//! multi-row INSERTs of fixed sizes, and each session's count of open entries.

use super::kept;
use super::unnest;
use crate::domain::command::Command;
use crate::domain::states::{ChangeKind, CommentKind, CommentStatus, OutboxStatus, SendMode};
use crate::domain::{OperationId, RepoKey, ResourceKey, ResourceKind, TaskId};
use crate::lifecycle::TaskState;
use crate::store::models::Delivery;
use crate::store::rawsql::SqliteConn;
use crate::store::schema::{comment_changes, repositories, sessions};
use crate::store::{DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;
use std::collections::BTreeMap;

#[derive(Insertable)]
#[diesel(table_name = repositories)]
pub(super) struct RepoRow {
    pub(super) repo_key: RepoKey,
    pub(super) instance_id: String,
    pub(super) owner: String,
    pub(super) name: String,
    pub(super) clone_url: Option<String>,
    pub(super) default_branch: Option<String>,
    pub(super) status: String,
    pub(super) registered_at: String,
    pub(super) updated_at: String,
    pub(super) version: i64,
}

#[derive(Insertable)]
#[diesel(table_name = sessions)]
pub(super) struct SessionRow {
    pub(super) session_key: ResourceKey,
    pub(super) repo_key: RepoKey,
    pub(super) kind: ResourceKind,
    pub(super) number: i64,
    pub(super) status: String,
    pub(super) created_at: String,
    pub(super) updated_at: String,
    pub(super) version: i64,
}

pub(super) struct TaskRow {
    pub(super) task_id: TaskId,
    pub(super) delivery_key: String,
    pub(super) repo_key: RepoKey,
    pub(super) session_key: ResourceKey,
    pub(super) resource_key: ResourceKey,
    pub(super) trigger_key: String,
    pub(super) comment_id: Option<i64>,
    pub(super) author: String,
    pub(super) state: TaskState,
    pub(super) state_version: i64,
    pub(super) head_ref: Option<String>,
    pub(super) base_ref: Option<String>,
    pub(super) created_at: String,
    pub(super) updated_at: String,
    pub(super) command: Option<Command>,
    /// Why a task born refused was refused.
    pub(super) error_code: Option<String>,
}

pub(super) struct TransitionRow {
    pub(super) task_id: TaskId,
    pub(super) from_state: Option<TaskState>,
    pub(super) to_state: TaskState,
    pub(super) state_version: i64,
    pub(super) actor: String,
    pub(super) reason: Option<String>,
    pub(super) error_code: Option<String>,
    pub(super) at: String,
}

pub(super) struct OutboxRow {
    pub(super) queue_id: String,
    pub(super) session_key: ResourceKey,
    pub(super) task_id: TaskId,
    pub(super) operation_id: OperationId,
    pub(super) fingerprint: String,
    pub(super) mode: SendMode,
    pub(super) status: OutboxStatus,
    pub(super) auto_drain: bool,
    pub(super) user_text: String,
    pub(super) created_at: String,
    pub(super) updated_at: String,
    pub(super) version: i64,
    pub(super) command: Option<Command>,
    pub(super) command_argument: Option<String>,
}

pub(super) struct AuditRow {
    pub(super) event_id: String,
    pub(super) task_id: Option<TaskId>,
    pub(super) action: String,
    pub(super) actor: String,
    pub(super) from_state: Option<TaskState>,
    pub(super) to_state: Option<TaskState>,
    pub(super) delivery_id: Option<String>,
    pub(super) turn_id: Option<String>,
    pub(super) comment_id: Option<i64>,
    pub(super) error_code: Option<String>,
    pub(super) metadata: String,
    pub(super) at: String,
}

/// The error of a multi-row INSERT that wrote fewer rows than it was given:
/// `INSERT OR IGNORE` skipped rows that break a constraint. The batch's
/// transaction rolls back, and the writer ingests its deliveries again one by
/// one (`store::writer`), where the one at fault fails with this message.
pub(super) fn refused(table: &str, rows: usize) -> diesel::result::Error {
    diesel::result::Error::DatabaseError(
        diesel::result::DatabaseErrorKind::Unknown,
        Box::new(format!(
            "{rows} row(s) of `{table}` the ingest decided to write break a constraint of the \
             table (a key already stored, a missing value or a value out of range); nothing of \
             the delivery was stored"
        )),
    )
}

/// The rows the batch writes, collected while deciding.
#[derive(Default)]
pub(super) struct BatchRows {
    pub(super) repos: Vec<RepoRow>,
    pub(super) sessions: Vec<SessionRow>,
    pub(super) deliveries: Vec<Delivery>,
    pub(super) tasks: Vec<TaskRow>,
    pub(super) transitions: Vec<TransitionRow>,
    pub(super) outbox: Vec<OutboxRow>,
    pub(super) receipts: Vec<ReceiptRow>,
    pub(super) changes: Vec<ChangeRow>,
    pub(super) audits: Vec<AuditRow>,
    /// session key → outbox entries this batch opens.
    pub(super) opened: BTreeMap<ResourceKey, i64>,
}

/// The receipt a task born in the ingest gets ("received", or a refusal),
/// written by the receipts worker after the commit.
pub(super) struct ReceiptRow {
    pub(super) comment_key: String,
    pub(super) task_id: TaskId,
    pub(super) kind: CommentKind,
    pub(super) resource_key: ResourceKey,
    pub(super) status: CommentStatus,
    pub(super) created_at: String,
    pub(super) updated_at: String,
}

impl ReceiptRow {
    /// The pending receipt of `task_id` for `state`.
    pub(super) fn pending(
        task_id: &TaskId,
        state: crate::lifecycle::TaskState,
        resource_key: &ResourceKey,
        at: &str,
    ) -> ReceiptRow {
        ReceiptRow {
            comment_key: crate::store::comments::receipt_key(task_id, state),
            task_id: task_id.clone(),
            kind: CommentKind::Receipt,
            resource_key: resource_key.clone(),
            status: CommentStatus::Pending,
            created_at: at.to_owned(),
            updated_at: at.to_owned(),
        }
    }
}

/// An edit or deletion of a comment that has a task, for its session to
/// decide on.
#[derive(Insertable)]
#[diesel(table_name = comment_changes, treat_none_as_default_value = false)]
pub(super) struct ChangeRow {
    pub(super) task_id: TaskId,
    pub(super) session_key: ResourceKey,
    pub(super) kind: ChangeKind,
    pub(super) body: Option<String>,
    pub(super) command: Option<Command>,
    pub(super) command_argument: Option<String>,
    pub(super) written_at: String,
    pub(super) status: String,
    pub(super) created_at: String,
    /// A JSON array of asset ids.
    pub(super) attachments: String,
}

/// An audit event under construction (`BatchRows::audit` fills the rest).
pub(super) struct AuditDraft<'a> {
    pub(super) action: &'a str,
    pub(super) actor: &'a str,
    pub(super) task_id: Option<&'a TaskId>,
    pub(super) states: (Option<TaskState>, Option<TaskState>),
    pub(super) delivery_id: Option<&'a str>,
    pub(super) comment_id: Option<i64>,
    pub(super) error_code: Option<&'a str>,
    /// The event's metadata, already JSON.
    pub(super) metadata: String,
}

impl<'a> AuditDraft<'a> {
    pub(super) fn new(action: &'a str, actor: &'a str, metadata: serde_json::Value) -> Self {
        Self::serialized(action, actor, metadata.to_string())
    }

    /// An event whose metadata was serialized by its caller: the accept's
    /// own event writes a typed struct, several times cheaper than building a
    /// `serde_json::Value` and printing it, on the writer's thread.
    pub(super) fn serialized(action: &'a str, actor: &'a str, metadata: String) -> Self {
        AuditDraft {
            action,
            actor,
            task_id: None,
            states: (None, None),
            delivery_id: None,
            comment_id: None,
            error_code: None,
            metadata,
        }
    }
}

/// The metadata of an accept's audit event, in the order of its keys (as
/// every other event's, whose JSON objects keep their keys sorted).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AcceptMetadata<'a> {
    pub(super) event_type: &'a str,
    pub(super) operation_id: &'a OperationId,
    pub(super) queue_id: &'a str,
    pub(super) reason: &'a str,
    pub(super) repo_key: &'a crate::domain::RepoKey,
    pub(super) resource_key: &'a crate::domain::ResourceKey,
    pub(super) state_version: i64,
}

impl AcceptMetadata<'_> {
    pub(super) fn to_json(&self) -> String {
        // Strings and a number always serialize.
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl BatchRows {
    pub(super) fn audit(&mut self, e: AuditDraft<'_>, at: &str) {
        self.audits.push(AuditRow {
            event_id: crate::domain::keys::mint_with_prefix("audit-"),
            task_id: e.task_id.cloned(),
            action: e.action.to_owned(),
            actor: e.actor.to_owned(),
            from_state: e.states.0,
            to_state: e.states.1,
            delivery_id: e.delivery_id.map(str::to_owned),
            turn_id: None,
            comment_id: e.comment_id,
            error_code: e.error_code.map(str::to_owned),
            metadata: e.metadata,
            at: at.to_owned(),
        });
    }

    pub(super) fn write(mut self, conn: &mut DbConn, at: &str) -> Result<(), StoreError> {
        // In key order, as every writer inserts them: two processes that
        // first see the same new repositories or sessions in other orders
        // would otherwise wait on each other's inserts (a deadlock
        // PostgreSQL breaks only after a second, failing one batch).
        self.repos.sort_by(|a, b| a.repo_key.cmp(&b.repo_key));
        self.sessions
            .sort_by(|a, b| a.session_key.cmp(&b.session_key));
        // Repositories first: a concurrent first sighting (another writer)
        // inserts nothing here, and only real registrations are audited.
        let mut registered: Vec<RepoKey> = Vec::new();
        // (Row by row: SQLite cannot combine multi-row inserts with ON
        // CONFLICT, and new repositories and sessions are few.)
        for repo in &self.repos {
            let inserted = with_conn!(conn, |c| diesel::insert_into(repositories::table)
                .values(repo)
                .on_conflict_do_nothing()
                .execute(c))?;
            if inserted == 1 {
                registered.push(repo.repo_key.clone());
            }
        }
        for repo_key in registered {
            self.audit(
                AuditDraft::new(
                    "repository.registered",
                    "system",
                    serde_json::json!({ "repoKey": repo_key }),
                ),
                at,
            );
        }
        // On SQLite the multi-row INSERTs resolve their constraints by
        // skipping (`OR IGNORE`), and `kept::insert_all` fails the batch when a row
        // was skipped. A statement that could abort halfway (any constraint
        // resolved by aborting, or an immediate foreign key) makes SQLite
        // copy every page it touches into a statement journal first, to undo
        // its own part: 7% of the writer's instructions. Nothing here needs
        // that undo: a failed batch rolls its whole transaction back.
        match conn {
            DbConn::Sqlite(c) => self.write_sqlite(c),
            DbConn::Pg(c) => self.write_pg(c),
        }?;
        Ok(())
    }

    /// Everything after the repositories on SQLite: the new sessions through
    /// diesel, then multi-row INSERTs of fixed sizes through the
    /// connection's kept statements (`kept`).
    fn write_sqlite(&self, c: &mut SqliteConn) -> Result<(), diesel::result::Error> {
        for session in &self.sessions {
            diesel::insert_into(sessions::table)
                .values(session)
                .on_conflict_do_nothing()
                .execute(&mut **c)?;
        }
        let st = c.statements();
        kept::insert_all(st, &self.deliveries)?;
        kept::insert_all(st, &self.tasks)?;
        kept::insert_all(st, &self.transitions)?;
        for row in &self.transitions {
            crate::metrics::transition_written(row.to_state.as_str());
        }
        kept::insert_all(st, &self.outbox)?;
        // One run of a kept statement per session: about the instructions
        // of one statement over lists of 64 keys (most of either is
        // rewriting each session's row), and each run checks that its
        // session's row is there.
        for (session, n) in &self.opened {
            kept::add_open_entries(st, session.as_str(), *n)?;
        }
        kept::insert_all(st, &self.receipts)?;
        for change in &self.changes {
            diesel::insert_into(comment_changes::table)
                .values(change)
                .execute(&mut **c)?;
        }
        kept::insert_all(c.statements(), &self.audits)?;
        Ok(())
    }

    /// Everything after the repositories on PostgreSQL: one statement per
    /// table (`unnest`), in the order SQLite's writes take.
    fn write_pg(&self, c: &mut diesel::PgConnection) -> Result<(), diesel::result::Error> {
        for session in &self.sessions {
            diesel::insert_into(sessions::table)
                .values(session)
                .on_conflict_do_nothing()
                .execute(c)?;
        }
        let all = |table: &str, wrote: usize, asked: usize| {
            if wrote == asked {
                Ok(())
            } else {
                Err(refused(table, asked.abs_diff(wrote)))
            }
        };
        all(
            "webhook_deliveries",
            unnest::deliveries(c, &self.deliveries)?,
            self.deliveries.len(),
        )?;
        all("tasks", unnest::tasks(c, &self.tasks)?, self.tasks.len())?;
        all(
            "task_transitions",
            unnest::transitions(c, &self.transitions)?,
            self.transitions.len(),
        )?;
        for row in &self.transitions {
            crate::metrics::transition_written(row.to_state.as_str());
        }
        all(
            "outbox_entries",
            unnest::outbox(c, &self.outbox)?,
            self.outbox.len(),
        )?;
        // The rows were locked at the batch's lookup, in key order
        // (`lookups::sessions_of`); a session created since, here or by
        // another writer whose insert this batch waited for, is locked here,
        // and a rare cycle with another PostgreSQL writer is one PostgreSQL
        // detects: that transaction rolls back and the writer retries it as
        // contended.
        let opened: Vec<(&ResourceKey, i64)> = self.opened.iter().map(|(k, n)| (k, *n)).collect();
        all(
            "sessions",
            unnest::add_open_entries(c, &opened)?,
            opened.len(),
        )?;
        all(
            "comments",
            unnest::receipts(c, &self.receipts)?,
            self.receipts.len(),
        )?;
        for change in &self.changes {
            diesel::insert_into(comment_changes::table)
                .values(change)
                .execute(c)?;
        }
        all(
            "audit_events",
            unnest::audits(c, &self.audits)?,
            self.audits.len(),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The accept's typed metadata is the JSON every other event's
    /// `serde_json::Value` prints: the same keys, in the same order.
    #[test]
    fn accept_metadata_prints_as_its_json_value_would() {
        let repo_key = RepoKey::new("default", "acme", "widgets").unwrap();
        let resource_key = ResourceKey::new(repo_key.clone(), ResourceKind::Issue, 7);
        let operation_id = OperationId::of_comment("default:comment:1", "2026-01-02T03:04:05Z");
        let typed = AcceptMetadata {
            event_type: "issue_comment",
            operation_id: &operation_id,
            queue_id: "q-1",
            reason: "a \"quoted\" reason",
            repo_key: &repo_key,
            resource_key: &resource_key,
            state_version: 2,
        }
        .to_json();
        let value = serde_json::json!({
            "stateVersion": 2,
            "reason": "a \"quoted\" reason",
            "eventType": "issue_comment",
            "repoKey": repo_key,
            "resourceKey": resource_key,
            "queueId": "q-1",
            "operationId": operation_id,
        });
        assert_eq!(typed, value.to_string());
    }
}
