//! The server processes sharing this database: each registers itself when it
//! starts, beats while it runs and says when it stopped. An operator may ask
//! one to drain; the process reads that answer back with its heartbeat.
//!
//! A process's `serverId` is the same name it writes as the holder of leases
//! and attempts, so what it holds can be read straight from those tables.
//!
//! Each heartbeat also carries the process's actor tree, so that the admin
//! view of any process can show the actors of every other one. The store
//! keeps it as JSON it does not look into: the actors are a floor above.

use super::audit::{self, Audit, AuditView};
use super::control::{self, ControlRequest};
use super::schema::{leases, server_instances};
use super::{format_time, now, shared_clock, shared_now, DbConn, StoreError};
use crate::domain::RepoKey;
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Queryable, Selectable, Debug, Clone)]
#[diesel(table_name = server_instances)]
struct Row {
    server_id: String,
    instance_id: String,
    version: String,
    started_at: String,
    heartbeat_at: String,
    draining: bool,
    drain_requested_at: Option<String>,
    stopped_at: Option<String>,
    codex_home: Option<String>,
}

/// A server process as the admin API shows it, with what it holds now.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    pub server_id: String,
    /// The Gitea namespace it serves (`instance_id`), shared by every
    /// process of one deployment.
    pub instance_id: String,
    pub version: String,
    pub started_at: String,
    pub heartbeat_at: String,
    /// How many repositories' leases it holds now.
    pub leases: usize,
    /// Those repositories, in key order.
    pub repositories: Vec<RepoKey>,
    pub draining: bool,
    pub drain_requested_at: Option<String>,
    pub stopped_at: Option<String>,
    /// The id of the Codex home its threads live in (`None`: no Codex, or
    /// not reported yet). Sessions whose threads live there go on there
    /// while it serves.
    pub codex_home: Option<String>,
}

impl InstanceView {
    fn new(row: Row, repositories: Vec<RepoKey>) -> InstanceView {
        InstanceView {
            server_id: row.server_id,
            instance_id: row.instance_id,
            version: row.version,
            started_at: row.started_at,
            heartbeat_at: row.heartbeat_at,
            leases: repositories.len(),
            repositories,
            draining: row.draining,
            drain_requested_at: row.drain_requested_at,
            stopped_at: row.stopped_at,
            codex_home: row.codex_home,
        }
    }

    /// Whether the process still runs, as far as anyone can tell: it has not
    /// said it stopped and it beat after `since` (a stored time).
    pub fn alive_since(&self, since: &str) -> bool {
        self.stopped_at.is_none() && self.heartbeat_at.as_str() > since
    }
}

/// Another process's actor tree, as its last heartbeat wrote it.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceActors {
    pub server_id: String,
    pub heartbeat_at: String,
    /// When the tree was taken; `None`: the process runs no actors (intake
    /// only) or has reported none yet.
    pub actors_at: Option<String>,
    pub draining: bool,
    /// Its repositories with their session actors, as the process's own
    /// `GET /actors` shows them (`[]` when it reported none).
    pub repositories: serde_json::Value,
}

/// What a heartbeat writes besides the time. `None` fields are left as
/// they are: a process that could not take its tree this time keeps the
/// last one, whose `actors_at` then tells its age.
#[derive(AsChangeset)]
#[diesel(table_name = server_instances)]
struct Beat<'a> {
    heartbeat_at: &'a str,
    actors: Option<&'a str>,
    actors_at: Option<&'a str>,
}

/// What a heartbeat learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// An operator asked this process to drain.
    pub draining: bool,
    /// The process's row was gone (deleted by hand, or a database restored
    /// from before it started) and was written again.
    pub registered_again: bool,
}

/// Records a process that starts (or, under the same id, starts over):
/// started and beating now, not draining, not stopped.
pub fn register(
    conn: &mut DbConn,
    server_id: &str,
    instance_id: &str,
    version: &str,
) -> Result<(), StoreError> {
    let at = shared_now(conn)?;
    with_conn!(conn, |c| diesel::insert_into(server_instances::table)
        .values((
            server_instances::server_id.eq(server_id),
            server_instances::instance_id.eq(instance_id),
            server_instances::version.eq(version),
            server_instances::started_at.eq(&at),
            server_instances::heartbeat_at.eq(&at),
            server_instances::draining.eq(false),
        ))
        .on_conflict(server_instances::server_id)
        .do_update()
        .set((
            server_instances::instance_id.eq(instance_id),
            server_instances::version.eq(version),
            server_instances::started_at.eq(&at),
            server_instances::heartbeat_at.eq(&at),
            server_instances::draining.eq(false),
            server_instances::drain_requested_at.eq(None::<String>),
            server_instances::stopped_at.eq(None::<String>),
            server_instances::actors.eq(None::<String>),
            server_instances::actors_at.eq(None::<String>),
        ))
        .execute(c))?;
    Ok(())
}

/// The process is still there, with its actor tree as of now (`None`: it
/// has none to report, and the last one written stays). A process whose row
/// is gone registers again (hence `instance_id` and `version`): it runs, so
/// it should be listed; its tree waits for the next beat.
pub fn heartbeat(
    conn: &mut DbConn,
    server_id: &str,
    instance_id: &str,
    version: &str,
    actors: Option<&serde_json::Value>,
) -> Result<Heartbeat, StoreError> {
    let at = shared_now(conn)?;
    let actors = actors.map(|a| a.to_string());
    let beat = Beat {
        heartbeat_at: &at,
        actors: actors.as_deref(),
        actors_at: actors.as_ref().map(|_| at.as_str()),
    };
    // The beat, the tree and the drain answer in one statement.
    let draining: Option<bool> = with_conn!(conn, |c| diesel::update(
        server_instances::table.find(server_id)
    )
    .set(&beat)
    .returning(server_instances::draining)
    .get_result(c)
    .optional())?;
    match draining {
        Some(draining) => Ok(Heartbeat {
            draining,
            registered_again: false,
        }),
        None => {
            register(conn, server_id, instance_id, version)?;
            Ok(Heartbeat {
                draining: false,
                registered_again: true,
            })
        }
    }
}

/// Records the id of the Codex home the process runs its threads in, so
/// that a session whose thread lives there can be sent to it. `false`: the
/// process has no row (the next heartbeat registers it; report again then).
pub fn report_codex_home(
    conn: &mut DbConn,
    server_id: &str,
    home: &str,
) -> Result<bool, StoreError> {
    let n = with_conn!(conn, |c| diesel::update(
        server_instances::table.find(server_id)
    )
    .set(server_instances::codex_home.eq(home))
    .execute(c))?;
    Ok(n == 1)
}

/// Whether another process than `except` that serves (it beat after
/// `since`, has not stopped and is not draining) runs its threads in the
/// Codex home `home`.
pub fn home_served_elsewhere(
    conn: &mut DbConn,
    home: &str,
    except: &str,
    since: &str,
) -> Result<bool, StoreError> {
    let n: i64 = with_conn!(conn, |c| server_instances::table
        .filter(server_instances::codex_home.eq(home))
        .filter(server_instances::server_id.ne(except))
        .filter(server_instances::stopped_at.is_null())
        .filter(server_instances::draining.eq(false))
        .filter(server_instances::drain_requested_at.is_null())
        .filter(server_instances::heartbeat_at.gt(since))
        .count()
        .get_result(c))?;
    Ok(n > 0)
}

/// The process stopped cleanly. `false`: it has no row. Its actor tree goes:
/// those actors are gone, and nobody reads a stopped process's tree.
pub fn mark_stopped(conn: &mut DbConn, server_id: &str) -> Result<bool, StoreError> {
    let at = shared_now(conn)?;
    let n = with_conn!(conn, |c| diesel::update(
        server_instances::table.find(server_id)
    )
    .set((
        server_instances::stopped_at.eq(&at),
        server_instances::actors.eq(None::<String>),
        server_instances::actors_at.eq(None::<String>),
    ))
    .execute(c))?;
    Ok(n == 1)
}

/// Asks the process to drain. The first request sets the time; later ones
/// change nothing. `None`: no such process.
pub fn request_drain(
    conn: &mut DbConn,
    server_id: &str,
) -> Result<Option<InstanceView>, StoreError> {
    let at = now();
    with_conn!(conn, |c| diesel::update(
        server_instances::table
            .find(server_id)
            .filter(server_instances::draining.eq(false))
    )
    .set((
        server_instances::draining.eq(true),
        server_instances::drain_requested_at.eq(&at),
    ))
    .execute(c))?;
    find(conn, server_id)
}

/// The operator's drain request (`POST /instances/{serverId}/drain`):
/// idempotent by its `requestId`, audited; an unknown process is `NotFound`.
pub fn drain(
    conn: &mut DbConn,
    req: &ControlRequest,
    server_id: &str,
) -> Result<AuditView, StoreError> {
    control::idempotent(conn, req, "instance.drain", server_id, |conn| {
        let was_draining = is_draining(conn, server_id)?;
        let view = request_drain(conn, server_id)?
            .ok_or_else(|| StoreError::NotFound(format!("server instance {server_id}")))?;
        audit::record(
            conn,
            &Audit::new("instance.drain", &req.actor).meta(serde_json::json!({
                "requestId": req.request_id,
                "reason": req.reason,
                "serverId": server_id,
                "wasDraining": was_draining,
                "drainRequestedAt": view.drain_requested_at,
                "leases": view.leases,
            })),
        )
    })
}

/// Whether an operator asked the process to drain (`false` for an unknown one).
pub fn is_draining(conn: &mut DbConn, server_id: &str) -> Result<bool, StoreError> {
    let draining: Option<bool> = with_conn!(conn, |c| server_instances::table
        .find(server_id)
        .select(server_instances::draining)
        .first(c)
        .optional())?;
    Ok(draining.unwrap_or(false))
}

/// One process with what it holds now.
pub fn find(conn: &mut DbConn, server_id: &str) -> Result<Option<InstanceView>, StoreError> {
    let row: Option<Row> = with_conn!(conn, |c| server_instances::table
        .find(server_id)
        .select(Row::as_select())
        .first(c)
        .optional())?;
    let Some(row) = row else {
        return Ok(None);
    };
    let mut held = held_leases(conn, Some(server_id))?;
    let repositories = held.remove(server_id).unwrap_or_default();
    Ok(Some(InstanceView::new(row, repositories)))
}

/// Every process that ever registered here, the earliest started first.
pub fn list(conn: &mut DbConn) -> Result<Vec<InstanceView>, StoreError> {
    let rows: Vec<Row> = with_conn!(conn, |c| server_instances::table
        .select(Row::as_select())
        .order((
            server_instances::started_at.asc(),
            server_instances::server_id.asc(),
        ))
        .load(c))?;
    let mut held = held_leases(conn, None)?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let repositories = held.remove(&row.server_id).unwrap_or_default();
            InstanceView::new(row, repositories)
        })
        .collect())
}

/// The stored time after which a process must have beaten to count alive:
/// `window` before now by the clock heartbeats are written with (the
/// database's, when several processes share it).
pub fn alive_since(conn: &mut DbConn, window: std::time::Duration) -> Result<String, StoreError> {
    let window =
        chrono::Duration::from_std(window).unwrap_or_else(|_| chrono::Duration::seconds(45));
    Ok(format_time(shared_clock(conn)? - window))
}

/// The actor trees of the processes other than `except` that still run as
/// far as anyone can tell (the rule of [`InstanceView::alive_since`]: not
/// stopped, beat after `since`), the earliest started first. A tree that
/// is not valid JSON (written by hand) shows as none.
pub fn find_alive_actors(
    conn: &mut DbConn,
    since: &str,
    except: &str,
) -> Result<Vec<InstanceActors>, StoreError> {
    type TreeRow = (String, String, Option<String>, bool, Option<String>);
    let rows: Vec<TreeRow> = with_conn!(conn, |c| server_instances::table
        .filter(server_instances::stopped_at.is_null())
        .filter(server_instances::heartbeat_at.gt(since))
        .filter(server_instances::server_id.ne(except))
        .select((
            server_instances::server_id,
            server_instances::heartbeat_at,
            server_instances::actors_at,
            server_instances::draining,
            server_instances::actors,
        ))
        .order((
            server_instances::started_at.asc(),
            server_instances::server_id.asc(),
        ))
        .load(c))?;
    Ok(rows
        .into_iter()
        .map(|(server_id, heartbeat_at, actors_at, draining, actors)| {
            let tree = actors.and_then(|a| serde_json::from_str(&a).ok());
            InstanceActors {
                server_id,
                heartbeat_at,
                actors_at: tree.as_ref().and(actors_at),
                draining,
                repositories: tree.unwrap_or_else(|| serde_json::json!([])),
            }
        })
        .collect())
}

/// The repositories whose lease each holder (or just `owner`) holds now: not
/// released, not expired. A lease row stays once written, so an expired or
/// released row names a past holder, not a present one.
fn held_leases(
    conn: &mut DbConn,
    owner: Option<&str>,
) -> Result<BTreeMap<String, Vec<RepoKey>>, StoreError> {
    let at = shared_now(conn)?;
    let rows: Vec<(String, RepoKey)> = with_conn!(conn, |c| {
        let mut q = leases::table.into_boxed();
        if let Some(owner) = owner {
            q = q.filter(leases::owner.eq(owner));
        }
        q.filter(leases::released_at.is_null())
            .filter(leases::expires_at.gt(&at))
            .select((leases::owner, leases::repo_key))
            .order(leases::repo_key.asc())
            .load(c)
    })?;
    let mut held: BTreeMap<String, Vec<RepoKey>> = BTreeMap::new();
    for (owner, repo_key) in rows {
        held.entry(owner).or_default().push(repo_key);
    }
    Ok(held)
}
