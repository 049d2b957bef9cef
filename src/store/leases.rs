//! Repository leases: `leaseId` + owner + `expiresAt`, renewed by heartbeat.
//! Every change names the lease id it expects, so a stale owner (a process that
//! was paused or partitioned past its expiry) can neither renew nor release a
//! lease that someone else now holds.
//!
//! Expiry is written and judged by one clock for every process
//! ([`shared_clock`]: PostgreSQL's, when several share it), so a process
//! whose clock is skewed neither takes a lease its holder still renews nor
//! keeps one past its time. The fencing token makes a write under a lost
//! lease fail either way; the shared clock keeps the lease from moving
//! without cause.

use super::audit::{self, Audit};
use super::schema::leases;
use super::{format_time, shared_clock, shared_now, DbConn, StoreError};
use crate::domain::RepoKey;
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;
use std::time::Duration;

#[derive(Queryable, Selectable, Insertable, Serialize, Debug, Clone, PartialEq, Eq)]
#[diesel(table_name = leases)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    pub repo_key: RepoKey,
    pub lease_id: String,
    pub owner: String,
    pub acquired_at: String,
    pub renewed_at: String,
    pub expires_at: String,
    /// The fencing token: grows by one with every new holder of this
    /// repository's lease, and is never reused.
    pub fence: i64,
    /// When the holder (or start-up recovery, for an expired one) gave it
    /// back; the row stays so that the next holder's token follows this one.
    pub released_at: Option<String>,
}

impl Lease {
    /// Whether someone holds it at `at`: not released, not expired.
    pub fn is_held(&self, at: &str) -> bool {
        self.released_at.is_none() && self.expires_at.as_str() > at
    }

    /// What its holder names when it writes (see [`check`]).
    pub fn fence(&self) -> Fence {
        Fence {
            repo_key: self.repo_key.clone(),
            lease_id: self.lease_id.clone(),
            token: self.fence,
        }
    }
}

/// A holder's claim on a repository, checked by every write it makes under
/// the lease: its lease id and that holding's fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub repo_key: RepoKey,
    pub lease_id: String,
    pub token: i64,
}

/// Now and a lease's expiry from now, by the clock every process shares
/// ([`shared_clock`]).
fn now_and_expiry(conn: &mut DbConn, ttl: Duration) -> Result<(String, String), StoreError> {
    let at = shared_clock(conn)?;
    let ttl = chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::seconds(60));
    Ok((format_time(at), format_time(at + ttl)))
}

/// The repository's lease row, held or not.
pub fn find(conn: &mut DbConn, repo_key: &RepoKey) -> Result<Option<Lease>, StoreError> {
    Ok(with_conn!(conn, |c| leases::table
        .find(repo_key)
        .select(Lease::as_select())
        .first(c)
        .optional())?)
}

/// Takes the repository's lease for `owner` if it is free, released or
/// expired; renews it if `owner` already holds it. `None`: someone else holds
/// a live lease. A lease that moves from one holder to another is audited
/// with both, and its fencing token grows.
pub fn acquire(
    conn: &mut DbConn,
    repo_key: &RepoKey,
    owner: &str,
    ttl: Duration,
) -> Result<Option<Lease>, StoreError> {
    let (at, expires_at) = now_and_expiry(conn, ttl)?;
    match find(conn, repo_key)? {
        // Ours and never released: renewed, even past its expiry (nobody
        // took it meanwhile, or its lease id would differ), so the writes of
        // turns begun under it still pass `check`.
        Some(held) if held.released_at.is_none() && held.owner == owner => {
            renew(conn, repo_key, &held.lease_id, ttl)
        }
        Some(held) if held.is_held(&at) => Ok(None),
        Some(previous) => {
            // A row another transaction holds locked (its holder writing
            // under it, or a process paused in the middle of doing so) is not
            // waited for: this writer serves every other write of the
            // process, webhooks included.
            if !lock_unless_busy(conn, &previous)? {
                return Ok(None);
            }
            // Take the exact row we looked at: a competitor that took it
            // first changed its lease id, and this update then finds nothing.
            let lease_id = new_lease_id();
            let n = with_conn!(conn, |c| diesel::update(
                leases::table
                    .filter(leases::repo_key.eq(repo_key))
                    .filter(leases::lease_id.eq(&previous.lease_id))
            )
            .set((
                leases::lease_id.eq(&lease_id),
                leases::owner.eq(owner),
                leases::acquired_at.eq(&at),
                leases::renewed_at.eq(&at),
                leases::expires_at.eq(&expires_at),
                leases::fence.eq(previous.fence + 1),
                leases::released_at.eq(None::<String>),
            ))
            .execute(c))?;
            if n == 0 {
                return Ok(None);
            }
            if previous.owner != owner {
                // Expired while held: its holder died, stalled or was cut
                // off. Released: it gave the lease back (or recovery did).
                let action = if previous.released_at.is_none() {
                    "lease.taken_over"
                } else {
                    "lease.handed_over"
                };
                audit::record(
                    conn,
                    &Audit::new(action, "system").meta(serde_json::json!({
                        "repoKey": repo_key,
                        "leaseId": lease_id,
                        "owner": owner,
                        "fence": previous.fence + 1,
                        "previousLeaseId": previous.lease_id,
                        "previousOwner": previous.owner,
                        "previousFence": previous.fence,
                        "previousExpiresAt": previous.expires_at,
                        "previousReleasedAt": previous.released_at,
                    })),
                )?;
            }
            find(conn, repo_key)
        }
        None => {
            let lease = Lease {
                repo_key: repo_key.clone(),
                lease_id: new_lease_id(),
                owner: owner.to_owned(),
                acquired_at: at.clone(),
                renewed_at: at,
                expires_at,
                fence: 1,
                released_at: None,
            };
            let n = with_conn!(conn, |c| diesel::insert_into(leases::table)
                .values(&lease)
                .on_conflict_do_nothing()
                .execute(c))?;
            Ok((n == 1).then_some(lease))
        }
    }
}

/// Extends a lease we hold. `None` if it is no longer ours.
pub fn renew(
    conn: &mut DbConn,
    repo_key: &RepoKey,
    lease_id: &str,
    ttl: Duration,
) -> Result<Option<Lease>, StoreError> {
    let (at, expires_at) = now_and_expiry(conn, ttl)?;
    let n = with_conn!(conn, |c| diesel::update(
        leases::table
            .filter(leases::repo_key.eq(repo_key))
            .filter(leases::lease_id.eq(lease_id))
            .filter(leases::released_at.is_null())
    )
    .set((
        leases::renewed_at.eq(&at),
        leases::expires_at.eq(&expires_at)
    ))
    .execute(c))?;
    if n == 0 {
        return Ok(None);
    }
    find(conn, repo_key)
}

/// Gives a lease back. Only the holder of `lease_id` can: `false` otherwise.
pub fn release(conn: &mut DbConn, repo_key: &RepoKey, lease_id: &str) -> Result<bool, StoreError> {
    let at = shared_now(conn)?;
    let n = with_conn!(conn, |c| diesel::update(
        leases::table
            .filter(leases::repo_key.eq(repo_key))
            .filter(leases::lease_id.eq(lease_id))
            .filter(leases::released_at.is_null())
    )
    .set((leases::released_at.eq(&at), leases::expires_at.eq(&at)))
    .execute(c))?;
    Ok(n == 1)
}

/// Releases every expired lease (the first step of start-up recovery) and audits each.
pub fn release_expired(conn: &mut DbConn) -> Result<Vec<Lease>, StoreError> {
    let at = shared_now(conn)?;
    let expired: Vec<Lease> = with_conn!(conn, |c| leases::table
        .filter(leases::expires_at.le(&at))
        .filter(leases::released_at.is_null())
        .select(Lease::as_select())
        .load(c))?;
    for lease in &expired {
        if !lock_unless_busy(conn, lease)? {
            continue;
        }
        let n = with_conn!(conn, |c| diesel::update(
            leases::table
                .filter(leases::lease_id.eq(&lease.lease_id))
                .filter(leases::released_at.is_null())
        )
        .set(leases::released_at.eq(&at))
        .execute(c))?;
        if n == 1 {
            audit::record(
                conn,
                &Audit::new("lease.expired_released", "system").meta(serde_json::json!({
                    "repoKey": lease.repo_key,
                    "leaseId": lease.lease_id,
                    "owner": lease.owner,
                    "fence": lease.fence,
                    "expiresAt": lease.expires_at,
                })),
            )?;
        }
    }
    Ok(expired)
}

/// Refuses the transaction it runs in unless `fence` still names the
/// repository's current holding: the same lease id and token, not released.
/// A lease that expired but that nobody took over yet still passes: no other
/// holder exists whose work a write could overwrite.
///
/// It runs first in every transaction a holder writes under its lease. On
/// PostgreSQL it keeps a key-share lock on the lease row until that
/// transaction ends, so a takeover (which locks the row `FOR UPDATE` and
/// gives it a new lease id) cannot commit meanwhile, or, if the takeover
/// committed first, this check sees the new holder and refuses: every write
/// of the transaction, inserts included, is covered by one check. The
/// holder's own renewals and release change no key, so they never wait for
/// its writes (nor its writes for them): two writer threads of one process,
/// each with a batch of writes and renewals over several repositories,
/// cannot deadlock on the lease rows.
/// SQLite has one writer at a time, so nothing can move the lease between
/// the check and the commit.
pub fn check(conn: &mut DbConn, fence: &Fence) -> Result<(), StoreError> {
    let found: Option<i64> = match conn {
        DbConn::Sqlite(c) => current(fence).first(&mut **c).optional()?,
        DbConn::Pg(c) => current(fence).for_key_share().first(c).optional()?,
    };
    match found {
        Some(_) => Ok(()),
        None => Err(StoreError::Refused {
            code: "lease_lost",
            message: format!(
                "repository {}'s lease moved on from token {} (lease {}): another holder took it over, so this write was refused",
                fence.repo_key, fence.token, fence.lease_id
            ),
        }),
    }
}

/// The fence of the holding `lease_id` names, if it is still the current
/// one: what a turn begun under that lease writes under.
pub fn fence_of(
    conn: &mut DbConn,
    repo_key: &RepoKey,
    lease_id: &str,
) -> Result<Option<Fence>, StoreError> {
    Ok(find(conn, repo_key)?
        .filter(|l| l.lease_id == lease_id && l.released_at.is_none())
        .map(|l| l.fence()))
}

/// Locks the row of `lease` for this transaction unless another transaction
/// holds it locked (PostgreSQL's `SKIP LOCKED`); `false`: busy, or no longer
/// that holding. SQLite has one writer, so nothing else holds it.
fn lock_unless_busy(conn: &mut DbConn, lease: &Lease) -> Result<bool, StoreError> {
    match conn {
        DbConn::Sqlite(_) => Ok(true),
        DbConn::Pg(c) => Ok(leases::table
            .filter(leases::repo_key.eq(&lease.repo_key))
            .filter(leases::lease_id.eq(&lease.lease_id))
            .select(leases::fence)
            .for_update()
            .skip_locked()
            .first::<i64>(c)
            .optional()?
            .is_some()),
    }
}

/// The lease row `fence` names, if it is still the current holding.
#[diesel::dsl::auto_type(no_type_alias)]
fn current<'a>(fence: &'a Fence) -> _ {
    let repo_key: &'a RepoKey = &fence.repo_key;
    let lease_id: &'a str = fence.lease_id.as_str();
    let token: i64 = fence.token;
    leases::table
        .filter(leases::repo_key.eq(repo_key))
        .filter(leases::lease_id.eq(lease_id))
        .filter(leases::fence.eq(token))
        .filter(leases::released_at.is_null())
        .select(leases::fence)
}

/// Whether the repository was last held by another process that still
/// serves: it beat within `ttl` of `at` (the shared clock), has not stopped
/// and is not draining. Its sessions' threads live in its Codex home, so it
/// gets the first go at the repository's new work.
pub fn previous_holder_serves(
    conn: &mut DbConn,
    repo_key: &RepoKey,
    owner: &str,
    at: chrono::DateTime<chrono::Utc>,
    ttl: Duration,
) -> Result<bool, StoreError> {
    use super::schema::server_instances;
    let Some(previous) = find(conn, repo_key)? else {
        return Ok(false);
    };
    if previous.owner == owner {
        return Ok(false);
    }
    let ttl = chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::seconds(60));
    let since = format_time(at - ttl);
    let serving: i64 = with_conn!(conn, |c| server_instances::table
        .filter(server_instances::server_id.eq(&previous.owner))
        .filter(server_instances::stopped_at.is_null())
        .filter(server_instances::draining.eq(false))
        .filter(server_instances::drain_requested_at.is_null())
        .filter(server_instances::heartbeat_at.gt(&since))
        .count()
        .get_result(c))?;
    Ok(serving > 0)
}

pub fn new_lease_id() -> String {
    crate::domain::keys::mint_with_prefix("lease-")
}
