//! Repository leases: `leaseId` + owner + `expiresAt`, renewed by heartbeat.
//! Every change names the lease id it expects, so a stale owner (a process that
//! was paused or partitioned past its expiry) can neither renew nor release a
//! lease that someone else now holds.

use super::audit::{self, Audit};
use super::schema::leases;
use super::{format_time, now, DbConn, StoreError};
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
}

fn expiry(ttl: Duration) -> String {
    let ttl = chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::seconds(60));
    format_time(chrono::Utc::now() + ttl)
}

pub fn find(conn: &mut DbConn, repo_key: &RepoKey) -> Result<Option<Lease>, StoreError> {
    Ok(with_conn!(conn, |c| leases::table
        .find(repo_key)
        .select(Lease::as_select())
        .first(c)
        .optional())?)
}

/// Takes the repository's lease for `owner` if it is free or expired; renews
/// it if `owner` already holds it. `None`: someone else holds a live lease.
pub fn acquire(
    conn: &mut DbConn,
    repo_key: &RepoKey,
    owner: &str,
    ttl: Duration,
) -> Result<Option<Lease>, StoreError> {
    let at = now();
    let expires_at = expiry(ttl);
    match find(conn, repo_key)? {
        Some(held) if held.owner == owner && held.expires_at > at => {
            let renewed = renew(conn, repo_key, &held.lease_id, ttl)?;
            Ok(renewed)
        }
        Some(held) if held.expires_at > at => Ok(None),
        Some(expired) => {
            // Take over an expired lease, but only the exact one we looked at.
            let lease_id = new_lease_id();
            let n = with_conn!(conn, |c| diesel::update(
                leases::table
                    .filter(leases::repo_key.eq(repo_key))
                    .filter(leases::lease_id.eq(&expired.lease_id))
            )
            .set((
                leases::lease_id.eq(&lease_id),
                leases::owner.eq(owner),
                leases::acquired_at.eq(&at),
                leases::renewed_at.eq(&at),
                leases::expires_at.eq(&expires_at),
            ))
            .execute(c))?;
            if n == 0 {
                return Ok(None);
            }
            audit::record(
                conn,
                &Audit::new("lease.taken_over", "system").meta(serde_json::json!({
                    "repoKey": repo_key,
                    "leaseId": lease_id,
                    "owner": owner,
                    "previousLeaseId": expired.lease_id,
                    "previousOwner": expired.owner,
                    "previousExpiresAt": expired.expires_at,
                })),
            )?;
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
    let at = now();
    let n = with_conn!(conn, |c| diesel::update(
        leases::table
            .filter(leases::repo_key.eq(repo_key))
            .filter(leases::lease_id.eq(lease_id))
    )
    .set((
        leases::renewed_at.eq(&at),
        leases::expires_at.eq(expiry(ttl))
    ))
    .execute(c))?;
    if n == 0 {
        return Ok(None);
    }
    find(conn, repo_key)
}

/// Gives a lease back. Only the holder of `lease_id` can: `false` otherwise.
pub fn release(conn: &mut DbConn, repo_key: &RepoKey, lease_id: &str) -> Result<bool, StoreError> {
    let n = with_conn!(conn, |c| diesel::delete(
        leases::table
            .filter(leases::repo_key.eq(repo_key))
            .filter(leases::lease_id.eq(lease_id))
    )
    .execute(c))?;
    Ok(n == 1)
}

/// Releases every expired lease (the first step of start-up recovery) and audits each.
pub fn release_expired(conn: &mut DbConn) -> Result<Vec<Lease>, StoreError> {
    let at = now();
    let expired: Vec<Lease> = with_conn!(conn, |c| leases::table
        .filter(leases::expires_at.le(&at))
        .select(Lease::as_select())
        .load(c))?;
    for lease in &expired {
        let n = with_conn!(conn, |c| diesel::delete(
            leases::table.filter(leases::lease_id.eq(&lease.lease_id))
        )
        .execute(c))?;
        if n == 1 {
            audit::record(
                conn,
                &Audit::new("lease.expired_released", "system").meta(serde_json::json!({
                    "repoKey": lease.repo_key,
                    "leaseId": lease.lease_id,
                    "owner": lease.owner,
                    "expiresAt": lease.expires_at,
                })),
            )?;
        }
    }
    Ok(expired)
}

pub fn new_lease_id() -> String {
    format!("lease-{}", uuid::Uuid::now_v7().simple())
}
