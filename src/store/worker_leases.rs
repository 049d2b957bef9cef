//! Worker leases: which remote worker runs a repository's agent calls now.
//! The same rules as the server processes' repository leases
//! ([`super::leases`]): a lease id, an expiry judged by the clock every
//! process shares, a fencing token that grows with every new holder, and
//! every change made against the lease id it expects, so that a worker
//! that was paused or cut off past its expiry can neither renew nor use a
//! lease another worker now holds.
//!
//! A lease also ends with its worker: one whose worker was revoked is
//! neither held nor renewable, and revoking a worker releases its leases in
//! the same transaction ([`end_all_of`]), so its calls fail closed at once.

use super::audit::{self, Audit};
use super::schema::{worker_leases, workers};
use super::workers::{Invalid, RepoName, Worker, WorkerId, WorkerToken};
use super::{format_time, shared_clock, DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;
use std::time::Duration;

/// A worker lease as its row holds it.
#[derive(Queryable, Selectable, Serialize, Debug, Clone, PartialEq, Eq)]
#[diesel(table_name = worker_leases)]
#[serde(rename_all = "camelCase")]
pub struct WorkerLease {
    pub repository: String,
    pub lease_id: String,
    pub worker_id: String,
    pub fence: i64,
    pub acquired_at: String,
    pub renewed_at: String,
    pub expires_at: String,
    pub released_at: Option<String>,
}

/// What a worker asking for a repository's lease gets, decided from the
/// lease row as it is (pure: see [`judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Nobody ever held it: a first row, fence 1.
    Insert,
    /// The asker holds it: extended, same lease id and fence.
    Renew,
    /// Released, expired or its holder revoked: a new lease id, and the
    /// fence one past the last.
    TakeOver { fence: i64 },
    /// Another worker holds it, live.
    Busy,
}

/// What [`judge`] reads of a lease row and its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding<'a> {
    pub worker_id: &'a str,
    pub fence: i64,
    pub expires_at: &'a str,
    pub released: bool,
    /// The holder's worker was revoked.
    pub revoked: bool,
}

impl Holding<'_> {
    /// Held at `at`: not released, not expired, its worker not revoked.
    pub fn is_held(&self, at: &str) -> bool {
        !self.released && !self.revoked && self.expires_at > at
    }
}

/// Who gets a repository's worker lease. A live lease of another worker is
/// never taken; the asker's own (unreleased, not revoked) is renewed even
/// past its expiry, as nobody took it meanwhile; anything else moves with
/// a fence past the last, so a stale holder's writes are refused.
pub fn judge(current: Option<&Holding<'_>>, asker: &str, at: &str) -> Claim {
    match current {
        None => Claim::Insert,
        Some(h) if !h.released && !h.revoked && h.worker_id == asker => Claim::Renew,
        Some(h) if h.is_held(at) => Claim::Busy,
        Some(h) => Claim::TakeOver { fence: h.fence + 1 },
    }
}

/// Whether `worker` may lease `repository` at all: only the repositories an
/// operator gave it.
pub fn may_lease(worker: &Worker, repository: &RepoName) -> bool {
    worker.repositories.contains(repository)
}

fn now_and_expiry(conn: &mut DbConn, ttl: Duration) -> Result<(String, String), StoreError> {
    let at = shared_clock(conn)?;
    let ttl = chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::seconds(60));
    Ok((format_time(at), format_time(at + ttl)))
}

fn new_lease_id() -> String {
    crate::domain::keys::mint_with_prefix("wl-")
}

fn is_revoked(conn: &mut DbConn, worker_id: &str) -> Result<bool, StoreError> {
    let revoked: Option<Option<String>> = with_conn!(conn, |c| workers::table
        .find(worker_id)
        .select(workers::revoked_at)
        .first(c)
        .optional())?;
    // A lease whose worker row is gone counts as revoked: nobody can renew it.
    Ok(!matches!(revoked, Some(None)))
}

/// The repository's lease row, held or not.
pub fn find(conn: &mut DbConn, repository: &str) -> Result<Option<WorkerLease>, StoreError> {
    Ok(with_conn!(conn, |c| worker_leases::table
        .find(repository)
        .select(WorkerLease::as_select())
        .first(c)
        .optional())?)
}

/// Takes (or renews) `repository`'s lease for `worker`. `None`: another
/// worker holds it. Refused with `repository_not_allowed` if the worker was
/// not given the repository. A lease that moves is audited with both holders.
pub fn acquire(
    conn: &mut DbConn,
    worker: &Worker,
    repository: &RepoName,
    ttl: Duration,
) -> Result<Option<WorkerLease>, StoreError> {
    if !may_lease(worker, repository) {
        return Err(StoreError::Refused {
            code: "repository_not_allowed",
            message: format!(
                "worker {} was not given repository {}; an operator registers a worker with \
                 the repositories it may work on",
                worker.worker_id,
                repository.as_str()
            ),
        });
    }
    let (at, expires_at) = now_and_expiry(conn, ttl)?;
    let repo = repository.as_str();
    let me = worker.worker_id.as_str();
    let row = find(conn, repo)?;
    let revoked = match &row {
        Some(r) => is_revoked(conn, &r.worker_id)?,
        None => false,
    };
    let holding = row.as_ref().map(|r| Holding {
        worker_id: &r.worker_id,
        fence: r.fence,
        expires_at: &r.expires_at,
        released: r.released_at.is_some(),
        revoked,
    });
    match judge(holding.as_ref(), me, &at) {
        Claim::Busy => Ok(None),
        Claim::Renew => {
            let Some(row) = row else { return Ok(None) };
            renew(conn, &worker.worker_id, &row.lease_id, ttl)
        }
        Claim::Insert => {
            let n = with_conn!(conn, |c| diesel::insert_into(worker_leases::table)
                .values((
                    worker_leases::repository.eq(repo),
                    worker_leases::lease_id.eq(new_lease_id()),
                    worker_leases::worker_id.eq(me),
                    worker_leases::fence.eq(1_i64),
                    worker_leases::acquired_at.eq(&at),
                    worker_leases::renewed_at.eq(&at),
                    worker_leases::expires_at.eq(&expires_at),
                ))
                .on_conflict_do_nothing()
                .execute(c))?;
            if n == 0 {
                return Ok(None);
            }
            find(conn, repo)
        }
        Claim::TakeOver { fence } => {
            let Some(previous) = row else { return Ok(None) };
            let lease_id = new_lease_id();
            // Against the exact row judged: a competitor that moved it first
            // changed its lease id, and this update then finds nothing.
            let n = with_conn!(conn, |c| diesel::update(
                worker_leases::table
                    .filter(worker_leases::repository.eq(repo))
                    .filter(worker_leases::lease_id.eq(&previous.lease_id))
            )
            .set((
                worker_leases::lease_id.eq(&lease_id),
                worker_leases::worker_id.eq(me),
                worker_leases::fence.eq(fence),
                worker_leases::acquired_at.eq(&at),
                worker_leases::renewed_at.eq(&at),
                worker_leases::expires_at.eq(&expires_at),
                worker_leases::released_at.eq(None::<String>),
            ))
            .execute(c))?;
            if n == 0 {
                return Ok(None);
            }
            if previous.worker_id != me {
                audit::record(
                    conn,
                    &Audit::new("worker_lease.taken_over", "system").meta(serde_json::json!({
                        "repository": repo,
                        "leaseId": lease_id,
                        "workerId": me,
                        "fence": fence,
                        "previousLeaseId": previous.lease_id,
                        "previousWorkerId": previous.worker_id,
                        "previousExpiresAt": previous.expires_at,
                        "previousReleasedAt": previous.released_at,
                    })),
                )?;
            }
            find(conn, repo)
        }
    }
}

/// Extends a lease the worker holds. `None`: it is no longer its own
/// (released, taken over, or the worker revoked).
pub fn renew(
    conn: &mut DbConn,
    worker_id: &WorkerId,
    lease_id: &str,
    ttl: Duration,
) -> Result<Option<WorkerLease>, StoreError> {
    if is_revoked(conn, worker_id.as_str())? {
        return Ok(None);
    }
    let (at, expires_at) = now_and_expiry(conn, ttl)?;
    let n = with_conn!(conn, |c| diesel::update(
        worker_leases::table
            .filter(worker_leases::lease_id.eq(lease_id))
            .filter(worker_leases::worker_id.eq(worker_id.as_str()))
            .filter(worker_leases::released_at.is_null())
    )
    .set((
        worker_leases::renewed_at.eq(&at),
        worker_leases::expires_at.eq(&expires_at),
    ))
    .execute(c))?;
    if n == 0 {
        return Ok(None);
    }
    by_id(conn, lease_id)
}

fn by_id(conn: &mut DbConn, lease_id: &str) -> Result<Option<WorkerLease>, StoreError> {
    Ok(with_conn!(conn, |c| worker_leases::table
        .filter(worker_leases::lease_id.eq(lease_id))
        .select(WorkerLease::as_select())
        .first(c)
        .optional())?)
}

/// The lease `lease_id`, if `worker_id` holds it now: what every call and
/// answer a worker makes is checked against. `None`: refuse it.
pub fn check(
    conn: &mut DbConn,
    worker_id: &WorkerId,
    lease_id: &str,
) -> Result<Option<WorkerLease>, StoreError> {
    let Some(lease) = by_id(conn, lease_id)? else {
        return Ok(None);
    };
    if lease.worker_id != worker_id.as_str() {
        return Ok(None);
    }
    let at = format_time(shared_clock(conn)?);
    let holding = Holding {
        worker_id: &lease.worker_id,
        fence: lease.fence,
        expires_at: &lease.expires_at,
        released: lease.released_at.is_some(),
        revoked: is_revoked(conn, &lease.worker_id)?,
    };
    Ok(holding.is_held(&at).then_some(lease))
}

/// Gives a lease back. `false`: it was not the worker's to give.
pub fn release(
    conn: &mut DbConn,
    worker_id: &WorkerId,
    lease_id: &str,
) -> Result<bool, StoreError> {
    let at = format_time(shared_clock(conn)?);
    let n = with_conn!(conn, |c| diesel::update(
        worker_leases::table
            .filter(worker_leases::lease_id.eq(lease_id))
            .filter(worker_leases::worker_id.eq(worker_id.as_str()))
            .filter(worker_leases::released_at.is_null())
    )
    .set(worker_leases::released_at.eq(&at))
    .execute(c))?;
    Ok(n == 1)
}

/// Releases every lease of a worker (it was revoked at `at`); how many.
pub fn end_all_of(conn: &mut DbConn, worker_id: &WorkerId, at: &str) -> Result<usize, StoreError> {
    Ok(with_conn!(conn, |c| diesel::update(
        worker_leases::table
            .filter(worker_leases::worker_id.eq(worker_id.as_str()))
            .filter(worker_leases::released_at.is_null())
    )
    .set(worker_leases::released_at.eq(at))
    .execute(c))?)
}

/// The id of the Codex home a worker runs its threads in, as it says when
/// it leases: 1 to 100 letters, digits, `-` or `_` (the bridge makes a
/// UUID). A thread lives in the home that made it, so this names where a
/// thread opened under the lease lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeId(String);

impl HomeId {
    pub fn parse(text: &str) -> Result<HomeId, Invalid> {
        let ok = !text.is_empty()
            && text.len() <= 100
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            let shown: String = text.chars().take(40).collect();
            return Err(Invalid {
                code: "invalid_codex_home",
                message: format!(
                    "codexHome must be 1 to 100 letters, digits, '-' or '_' (got {shown:?}); \
                     run the same version of codex-bridge on the worker as on the server"
                ),
            });
        }
        Ok(HomeId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Records the Codex home the worker holding `lease_id` runs its threads in
/// (`None`: it did not say), as it leases: a worker restarted on another
/// home renews its lease with the new one.
pub fn set_home(
    conn: &mut DbConn,
    lease_id: &str,
    home: Option<&HomeId>,
) -> Result<(), StoreError> {
    with_conn!(conn, |c| diesel::update(
        worker_leases::table.filter(worker_leases::lease_id.eq(lease_id))
    )
    .set(worker_leases::codex_home.eq(home.map(HomeId::as_str)))
    .execute(c))?;
    Ok(())
}

/// The Codex home of the worker that holds `repository`'s lease now: where
/// a thread of the repository opened now lives. `None`: nobody holds it
/// (released, expired, its worker revoked), or its worker did not say.
pub fn holder_home(conn: &mut DbConn, repository: &str) -> Result<Option<String>, StoreError> {
    let at = format_time(shared_clock(conn)?);
    let home: Option<Option<String>> = with_conn!(conn, |c| worker_leases::table
        .inner_join(workers::table)
        .filter(worker_leases::repository.eq(repository))
        .filter(workers::revoked_at.is_null())
        .filter(worker_leases::released_at.is_null())
        .filter(worker_leases::expires_at.gt(&at))
        .select(worker_leases::codex_home)
        .first(c)
        .optional())?;
    Ok(home.flatten())
}

/// The leases a worker holds now (for the admin view).
pub fn held_by(conn: &mut DbConn, worker_id: &WorkerId) -> Result<Vec<WorkerLease>, StoreError> {
    let at = format_time(shared_clock(conn)?);
    Ok(with_conn!(conn, |c| worker_leases::table
        .filter(worker_leases::worker_id.eq(worker_id.as_str()))
        .filter(worker_leases::released_at.is_null())
        .filter(worker_leases::expires_at.gt(&at))
        .order(worker_leases::repository.asc())
        .select(WorkerLease::as_select())
        .load(c))?)
}

/// Every lease held now, by any worker, by repository (for the admin view:
/// one read for the whole list).
pub fn held(conn: &mut DbConn) -> Result<Vec<WorkerLease>, StoreError> {
    let at = format_time(shared_clock(conn)?);
    Ok(with_conn!(conn, |c| worker_leases::table
        .inner_join(workers::table)
        .filter(workers::revoked_at.is_null())
        .filter(worker_leases::released_at.is_null())
        .filter(worker_leases::expires_at.gt(&at))
        .order(worker_leases::repository.asc())
        .select(WorkerLease::as_select())
        .load(c))?)
}

/// Whether `token` is the token of a worker that was revoked: such a worker
/// is told so (and stops), where an unknown token learns nothing.
pub fn is_revoked_token(conn: &mut DbConn, token: &WorkerToken) -> Result<bool, StoreError> {
    let hash = token.hash();
    let n: i64 = with_conn!(conn, |c| workers::table
        .filter(workers::token_hash.eq(&hash))
        .filter(workers::revoked_at.is_not_null())
        .count()
        .get_result(c))?;
    Ok(n > 0)
}

#[cfg(test)]
mod tests;
