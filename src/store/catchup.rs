//! The catch-up's cursors (`catchup_cursors`): per repository, where the next
//! listing of its comments starts, and the lease that keeps two processes
//! sharing the database from listing one repository at once.
//!
//! A pass over a repository is [`claim`] → list and ingest → [`finish`]. The
//! cursor only moves in [`finish`], after the pass's tasks are committed, and
//! only forward: a pass that fails or is cut short leaves it where it was, and
//! the next pass reads those comments again (their tasks are found by their
//! keys, see [`known`]).

use super::models::Repository;
use super::schema::{catchup_cursors, repositories, tasks, webhook_deliveries};
use super::{format_time, now, DbConn, StoreError};
use crate::domain::RepoKey;
use crate::with_conn;
use diesel::prelude::*;
use std::collections::HashSet;
use std::time::Duration;

/// Every repository of this Gitea instance the store knows, oldest first.
pub fn repositories(conn: &mut DbConn, instance_id: &str) -> Result<Vec<Repository>, StoreError> {
    Ok(with_conn!(conn, |c| repositories::table
        .filter(repositories::instance_id.eq(instance_id))
        .order(repositories::registered_at.asc())
        .select(Repository::as_select())
        .load(c))?)
}

/// Where a claimed repository's listing starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// Gitea's `updated_at` of the newest comment a finished pass saw (stored
    /// form), or the time the repository was first seen here.
    pub since: String,
    /// That comment.
    pub last_comment_id: Option<i64>,
}

fn later(ttl: Duration) -> String {
    let ttl = chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::seconds(60));
    format_time(chrono::Utc::now() + ttl)
}

/// Takes the repository for a pass by `owner` for `ttl`, giving it a cursor
/// at `first_since` if it has none yet. `None`: another pass holds it, or a
/// pass ended so recently that the next one is not due (see [`finish`]).
pub fn claim(
    conn: &mut DbConn,
    repo_key: &RepoKey,
    first_since: &str,
    owner: &str,
    ttl: Duration,
) -> Result<Option<Cursor>, StoreError> {
    let at = now();
    let expires_at = later(ttl);
    let cursor = with_conn!(conn, |c| {
        diesel::insert_into(catchup_cursors::table)
            .values((
                catchup_cursors::repo_key.eq(repo_key),
                catchup_cursors::since.eq(first_since),
                catchup_cursors::updated_at.eq(&at),
            ))
            .on_conflict_do_nothing()
            .execute(c)?;
        // One statement decides between two processes: PostgreSQL evaluates
        // the condition again on the row the other one just committed.
        let taken = diesel::update(
            catchup_cursors::table
                .filter(catchup_cursors::repo_key.eq(repo_key))
                .filter(
                    catchup_cursors::lease_expires_at
                        .is_null()
                        .or(catchup_cursors::lease_expires_at.le(&at)),
                ),
        )
        .set((
            catchup_cursors::lease_owner.eq(owner),
            catchup_cursors::lease_expires_at.eq(&expires_at),
        ))
        .execute(c)?;
        if taken == 0 {
            Ok::<_, diesel::result::Error>(None)
        } else {
            catchup_cursors::table
                .find(repo_key)
                .select((catchup_cursors::since, catchup_cursors::last_comment_id))
                .first::<(String, Option<i64>)>(c)
                .map(|(since, last_comment_id)| {
                    Some(Cursor {
                        since,
                        last_comment_id,
                    })
                })
        }
    })?;
    Ok(cursor)
}

/// Ends `owner`'s pass over the repository: moves the cursor to `advance`
/// if that is later than where it is (never back), and keeps the lease for
/// `quiet` more, so that no process lists the repository again before its
/// next pass is due. A lease another process took meanwhile (this pass
/// overran its lease) is left to it.
pub fn finish(
    conn: &mut DbConn,
    repo_key: &RepoKey,
    owner: &str,
    advance: Option<&Cursor>,
    quiet: Duration,
) -> Result<(), StoreError> {
    let at = now();
    let until = later(quiet);
    with_conn!(conn, |c| {
        if let Some(to) = advance {
            diesel::update(
                catchup_cursors::table
                    .filter(catchup_cursors::repo_key.eq(repo_key))
                    .filter(catchup_cursors::since.lt(&to.since)),
            )
            .set((
                catchup_cursors::since.eq(&to.since),
                catchup_cursors::last_comment_id.eq(to.last_comment_id),
            ))
            .execute(c)?;
        }
        diesel::update(catchup_cursors::table.find(repo_key))
            .set(catchup_cursors::updated_at.eq(&at))
            .execute(c)?;
        diesel::update(
            catchup_cursors::table
                .filter(catchup_cursors::repo_key.eq(repo_key))
                .filter(catchup_cursors::lease_owner.eq(owner)),
        )
        .set(catchup_cursors::lease_expires_at.eq(&until))
        .execute(c)?;
        Ok::<_, diesel::result::Error>(())
    })?;
    Ok(())
}

/// Sets the cursor of a repository that is not caught up (an operator
/// disabled it) to `to`, creating it if needed: its comments were refused
/// while it was disabled, and enabling it again must not run them all.
pub fn follow(conn: &mut DbConn, repo_key: &RepoKey, to: &str) -> Result<(), StoreError> {
    let at = now();
    with_conn!(conn, |c| {
        diesel::insert_into(catchup_cursors::table)
            .values((
                catchup_cursors::repo_key.eq(repo_key),
                catchup_cursors::since.eq(to),
                catchup_cursors::updated_at.eq(&at),
            ))
            .on_conflict(catchup_cursors::repo_key)
            .do_update()
            .set((
                catchup_cursors::since.eq(to),
                catchup_cursors::last_comment_id.eq(None::<i64>),
                catchup_cursors::updated_at.eq(&at),
            ))
            .execute(c)
    })?;
    Ok(())
}

/// Which of these comments the store already knows: a task holds the
/// trigger key, or a catch-up delivery was recorded under the delivery key
/// (one that made no task: refused, say, for a full outbox). Their Pull
/// Request need not be fetched again.
pub fn known(
    conn: &mut DbConn,
    trigger_keys: &[String],
    delivery_keys: &[String],
) -> Result<HashSet<String>, StoreError> {
    if trigger_keys.is_empty() && delivery_keys.is_empty() {
        return Ok(HashSet::new());
    }
    let (triggers, deliveries) = with_conn!(conn, |c| {
        let triggers: Vec<String> = tasks::table
            .filter(tasks::trigger_key.eq_any(trigger_keys))
            .select(tasks::trigger_key)
            .load(c)?;
        let deliveries: Vec<String> = webhook_deliveries::table
            .filter(webhook_deliveries::delivery_key.eq_any(delivery_keys))
            .select(webhook_deliveries::delivery_key)
            .load(c)?;
        Ok::<_, diesel::result::Error>((triggers, deliveries))
    })?;
    Ok(triggers.into_iter().chain(deliveries).collect())
}

/// What the admin overview says about the catch-up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Repositories with a cursor.
    pub repositories: i64,
    /// When a pass last ended for any of them.
    pub last_pass_at: Option<String>,
}

pub fn summary(conn: &mut DbConn) -> Result<Summary, StoreError> {
    let (repositories, last_pass_at) = with_conn!(conn, |c| catchup_cursors::table
        .select((
            diesel::dsl::count_star(),
            diesel::dsl::max(catchup_cursors::updated_at),
        ))
        .first::<(i64, Option<String>)>(c))?;
    Ok(Summary {
        repositories,
        last_pass_at,
    })
}
