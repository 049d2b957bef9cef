//! The batch's one round of lookups: what the store already holds that the
//! decisions of a batch depend on, read with one query per table for the
//! whole batch, then kept up to date in memory as its deliveries are decided.

use crate::domain::states::ThreadTrust;
use crate::domain::{IngestRequest, Intent, RepoKey, ResourceKey, Subject, TaskId};
use crate::store::models::Delivery;
use crate::store::schema::{repositories, sessions, tasks, webhook_deliveries};
use crate::store::{DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;
use std::collections::HashMap;

/// What the store already holds that the batch's decisions depend on, kept up
/// to date as the batch is decided.
#[derive(Default)]
pub(super) struct BatchLookups {
    /// delivery key → its row, stored or recorded earlier in the batch
    pub(super) deliveries: HashMap<String, Delivery>,
    /// content key → (delivery key, task id) of the delivery that claimed it.
    pub(super) content: HashMap<String, (String, Option<TaskId>)>,
    /// repository key → status
    pub(super) repos: HashMap<RepoKey, String>,
    /// trigger key → (task id, state, delivery key)
    pub(super) triggers: HashMap<String, (TaskId, String, String)>,
    /// task id → state, for the answers to repeated deliveries
    pub(super) task_states: HashMap<TaskId, String>,
    /// session key → unfinished outbox entries, for every session that
    /// exists (in the store or created earlier in the batch)
    pub(super) open_entries: HashMap<ResourceKey, i64>,
    /// session key → its thread as a message's fingerprint names it, for
    /// every session that exists (none for one created in the batch).
    pub(super) threads: HashMap<ResourceKey, ThreadFacts>,
    /// commenter → tasks they started in the last hour (kept only when
    /// `user_triggers_per_hour` is on), counting those the batch accepts.
    pub(super) recent_triggers: HashMap<String, i64>,
}

/// A session's thread, as a message's fingerprint names it.
#[derive(Debug, Clone, Default)]
pub(super) struct ThreadFacts {
    pub(super) thread_id: Option<String>,
    pub(super) access_mode: Option<ThreadTrust>,
    pub(super) generation: i64,
}

fn keys<'a>(items: impl Iterator<Item = &'a String>) -> Vec<&'a str> {
    let mut v: Vec<&str> = items.map(String::as_str).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Tasks each commenter of the batch started in the last hour that take a
/// turn: neither a turnless command (a rate-limited commenter can still
/// `/stop`) nor a refusal.
fn recent_triggers(
    conn: &mut DbConn,
    reqs: &[IngestRequest],
) -> Result<HashMap<String, i64>, StoreError> {
    let authors: Vec<&String> = reqs
        .iter()
        .filter(|r| matches!(r.intent, Intent::Trigger { .. } | Intent::Edit { .. }))
        .filter_map(|r| r.subject.as_ref().map(|s| &s.author))
        .collect();
    let authors = keys(authors.into_iter());
    let since = crate::store::format_time(chrono::Utc::now() - chrono::Duration::hours(1));
    let turnless = crate::store::commands::turnless_names();
    let counted: Vec<(String, i64)> = with_conn!(conn, |c| each_64(&authors, |keys| {
        tasks::table
            .filter(InKeys {
                column: tasks::author,
                keys,
            })
            .filter(tasks::created_at.ge(&since))
            .filter(tasks::continuation.is_null())
            .filter(tasks::state.ne_all(["rejected", "ignored", "duplicate"]))
            .filter(
                tasks::command
                    .is_null()
                    .or(tasks::command.ne_all(&turnless)),
            )
            .group_by(tasks::author)
            .select((tasks::author, diesel::dsl::count_star()))
            .load(c)
    }))?;
    Ok(counted.into_iter().collect())
}

impl BatchLookups {
    /// A task the batch created: later deliveries of its comment find it.
    pub(super) fn remember_task(
        &mut self,
        trigger_key: &str,
        task_id: &TaskId,
        state: crate::lifecycle::TaskState,
        delivery_key: &str,
    ) {
        self.task_states
            .insert(task_id.clone(), state.as_str().to_owned());
        self.triggers.insert(
            trigger_key.to_owned(),
            (
                task_id.clone(),
                state.as_str().to_owned(),
                delivery_key.to_owned(),
            ),
        );
    }

    pub(super) fn load(
        conn: &mut DbConn,
        reqs: &[IngestRequest],
        rules: &super::IngestRules,
    ) -> Result<BatchLookups, StoreError> {
        let delivery_keys = keys(reqs.iter().map(|r| &r.delivery_key));
        let content_keys = keys(reqs.iter().filter_map(|r| r.content_key.as_ref()));
        let repo_keys: Vec<RepoKey> = {
            let mut v: Vec<RepoKey> = reqs
                .iter()
                .filter_map(|r| r.subject.as_ref().map(|s| s.repo.repo_key().clone()))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let trigger_keys = keys(reqs.iter().filter_map(|r| match &r.intent {
            Intent::Trigger { trigger_key, .. }
            | Intent::Edit { trigger_key, .. }
            | Intent::Delete { trigger_key } => Some(trigger_key),
            Intent::Ignore { .. } => None,
        }));
        let session_keys: Vec<ResourceKey> = {
            let mut v: Vec<ResourceKey> = reqs
                .iter()
                .filter(|r| matches!(r.intent, Intent::Trigger { .. } | Intent::Edit { .. }))
                .filter_map(|r| r.subject.as_ref().map(Subject::resource_key))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };

        let Found {
            deliveries,
            by_content,
            repos,
            triggers,
            sessions: open,
        } = match conn {
            DbConn::Sqlite(c) => super::kept::find(
                c.statements(),
                &super::kept::Wanted {
                    deliveries: &delivery_keys,
                    contents: &content_keys,
                    repos: &repo_keys,
                    triggers: &trigger_keys,
                    sessions: &session_keys,
                },
            )?,
            DbConn::Pg(c) => {
                let repo_keys: Vec<&str> = repo_keys.iter().map(RepoKey::as_str).collect();
                let session_keys: Vec<&str> =
                    session_keys.iter().map(ResourceKey::as_str).collect();
                pg_lookups(
                    c,
                    [&delivery_keys, &content_keys, &repo_keys, &trigger_keys],
                    &session_keys,
                )?
            }
        };
        let mut lookups = BatchLookups::default();
        if rules.user_triggers_per_hour > 0 {
            lookups.recent_triggers = recent_triggers(conn, reqs)?;
        }
        for (key, entries, thread_id, access_mode, generation) in open {
            lookups.open_entries.insert(key.clone(), entries);
            lookups.threads.insert(
                key,
                ThreadFacts {
                    thread_id,
                    access_mode,
                    generation,
                },
            );
        }
        for (content_key, delivery_key, task_id) in by_content {
            if let Some(k) = content_key {
                lookups.content.insert(k, (delivery_key, task_id));
            }
        }
        lookups.repos = repos.into_iter().collect();
        for (trigger, task_id, state, delivery_key) in triggers {
            lookups.task_states.insert(task_id.clone(), state.clone());
            lookups
                .triggers
                .insert(trigger, (task_id, state, delivery_key));
        }
        // States of the tasks that repeated deliveries point at.
        let wanted: Vec<TaskId> = deliveries
            .iter()
            .filter_map(|d| d.task_id.clone())
            .chain(lookups.content.values().filter_map(|(_, t)| t.clone()))
            .filter(|t| !lookups.task_states.contains_key(t))
            .collect();
        if !wanted.is_empty() {
            let states: Vec<(TaskId, String)> = with_conn!(conn, |c| tasks::table
                .filter(tasks::task_id.eq_any(&wanted))
                .select((tasks::task_id, tasks::state))
                .load(c))?;
            lookups.task_states.extend(states);
        }
        lookups.deliveries = deliveries
            .into_iter()
            .map(|d| (d.delivery_key.clone(), d))
            .collect();
        Ok(lookups)
    }
}

/// What the store holds for the batch's keys.
pub(super) struct Found {
    pub(super) deliveries: Vec<Delivery>,
    pub(super) by_content: Vec<(Option<String>, String, Option<TaskId>)>,
    pub(super) repos: Vec<(RepoKey, String)>,
    pub(super) triggers: Vec<(String, TaskId, String, String)>,
    pub(super) sessions: Vec<SessionFacts>,
}

/// [`Found`] on PostgreSQL: one statement per list of 64 keys (`InKeys`),
/// each a round trip.
fn pg_lookups(
    c: &mut diesel::PgConnection,
    [delivery_keys, content_keys, repo_keys, trigger_keys]: [&[&str]; 4],
    session_keys: &[&str],
) -> Result<Found, StoreError> {
    let deliveries: Vec<Delivery> = each_64(delivery_keys, |keys| {
        webhook_deliveries::table
            .filter(InKeys {
                column: webhook_deliveries::delivery_key,
                keys,
            })
            .select(Delivery::as_select())
            .load(c)
    })?;
    let by_content: Vec<(Option<String>, String, Option<TaskId>)> =
        each_64(content_keys, |keys| {
            webhook_deliveries::table
                // (NULL is in no IN list: only keyed rows match.)
                .filter(InKeys {
                    column: webhook_deliveries::content_key.assume_not_null(),
                    keys,
                })
                .select((
                    webhook_deliveries::content_key,
                    webhook_deliveries::delivery_key,
                    webhook_deliveries::task_id,
                ))
                .load(c)
        })?;
    let repos: Vec<(RepoKey, String)> = each_64(repo_keys, |keys| {
        repositories::table
            .filter(InKeys {
                column: repositories::repo_key,
                keys,
            })
            .select((repositories::repo_key, repositories::status))
            .load(c)
    })?;
    let triggers: Vec<(String, TaskId, String, String)> = each_64(trigger_keys, |keys| {
        tasks::table
            .filter(InKeys {
                column: tasks::trigger_key,
                keys,
            })
            .select((
                tasks::trigger_key,
                tasks::task_id,
                tasks::state,
                tasks::delivery_key,
            ))
            .load(c)
    })?;
    Ok(Found {
        deliveries,
        by_content,
        repos,
        triggers,
        sessions: sessions_of(c, session_keys)?,
    })
}

/// Existing sessions, with their count of unfinished outbox entries.
pub(super) type SessionFacts = (ResourceKey, i64, Option<String>, Option<ThreadTrust>, i64);

/// The batch's existing sessions. On PostgreSQL their rows are also locked
/// here, in key order, for the counts the batch adds at its end: several
/// writers then take these locks in one order and never wait on each other
/// in a cycle, and the counts can be added with one statement per increment
/// instead of one per session.
fn sessions_of(
    c: &mut diesel::PgConnection,
    keys: &[&str],
) -> Result<Vec<SessionFacts>, StoreError> {
    let columns = (
        sessions::session_key,
        sessions::open_entries,
        sessions::thread_id,
        sessions::thread_trust,
        sessions::thread_generation,
    );
    Ok(each_64(keys, |keys| {
        sessions::table
            .filter(InKeys {
                column: sessions::session_key,
                keys,
            })
            .select(columns)
            .order_by(sessions::session_key)
            .for_no_key_update()
            .load(c)
    })?)
}

/// `keys` in lists of exactly 64, unused places repeating the chunk's first
/// key (see [`InKeys`]).
pub(super) fn lists_of_64<'a, 'k>(keys: &'a [&'k str]) -> impl Iterator<Item = [&'k str; 64]> + 'a {
    keys.chunks(64).map(|chunk| {
        let mut list = [chunk[0]; 64];
        list[..chunk.len()].copy_from_slice(chunk);
        list
    })
}

/// Runs `query` over `keys` in lists of 64 (see [`InKeys`]).
fn each_64<'k, T>(
    keys: &[&'k str],
    mut query: impl FnMut([&'k str; 64]) -> diesel::QueryResult<Vec<T>>,
) -> diesel::QueryResult<Vec<T>> {
    let mut rows = Vec::new();
    for list in lists_of_64(keys) {
        rows.extend(query(list)?);
    }
    Ok(rows)
}

/// `column IN (?, …)` over exactly `N` text values. diesel prepares every
/// `eq_any` afresh (its list is of any length), and the batch's five lookups
/// were parsed and planned again at every group commit; a list of fixed length
/// is a statement diesel keeps. Unused places repeat the first key.
///
/// PostgreSQL plans a kept statement for its own values five times, then
/// settles on one generic plan made from the statistics of that moment: on a
/// young table (before autovacuum's first ANALYZE) a sequential scan, kept
/// while the table grows. The ingest transaction rules sequential scans out
/// ([`super::ingest_batch_with`]), so that plan is the index's.
#[derive(Debug, Clone, Copy)]
pub(super) struct InKeys<'a, C, const N: usize> {
    pub(super) column: C,
    pub(super) keys: [&'a str; N],
}

impl<C, const N: usize> diesel::expression::Expression for InKeys<'_, C, N>
where
    C: diesel::expression::Expression<SqlType = diesel::sql_types::Text>,
{
    type SqlType = diesel::sql_types::Bool;
}

impl<C, QS, const N: usize> diesel::expression::AppearsOnTable<QS> for InKeys<'_, C, N> where
    C: diesel::expression::AppearsOnTable<QS, SqlType = diesel::sql_types::Text>
{
}

impl<C, QS, const N: usize> diesel::expression::SelectableExpression<QS> for InKeys<'_, C, N> where
    C: diesel::expression::SelectableExpression<QS, SqlType = diesel::sql_types::Text>
{
}

impl<C, const N: usize> diesel::expression::ValidGrouping<()> for InKeys<'_, C, N>
where
    C: diesel::expression::ValidGrouping<()>,
{
    type IsAggregate = C::IsAggregate;
}

impl<C: diesel::query_builder::QueryId, const N: usize> diesel::query_builder::QueryId
    for InKeys<'_, C, N>
{
    type QueryId = InKeys<'static, C::QueryId, N>;
    const HAS_STATIC_QUERY_ID: bool = C::HAS_STATIC_QUERY_ID;
}

impl<C, DB, const N: usize> diesel::query_builder::QueryFragment<DB> for InKeys<'_, C, N>
where
    DB: diesel::backend::Backend + diesel::sql_types::HasSqlType<diesel::sql_types::Text>,
    C: diesel::query_builder::QueryFragment<DB>,
    str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> diesel::QueryResult<()> {
        self.column.walk_ast(out.reborrow())?;
        out.push_sql(" IN (");
        for (i, key) in self.keys.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            out.push_bind_param::<diesel::sql_types::Text, str>(key)?;
        }
        out.push_sql(")");
        Ok(())
    }
}
