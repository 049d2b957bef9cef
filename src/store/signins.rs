//! Signed-out admin web sign-ins (`signed_out`). The session cookie is
//! signed, not stored (web/auth.rs), so a sign-out is the one thing about it
//! the store must know: every process of the database refuses a cookie whose
//! sign-in is listed here, also after a restart. A row is only needed until
//! the cookie would have expired anyway; recording a sign-out deletes the
//! rows past that, so the table holds about one row per sign-out of the last
//! session's length and needs no retention pass of its own.

use crate::store::schema::signed_out;
use crate::store::{DbConn, StoreError};
use crate::with_conn;
use diesel::prelude::*;
use uuid::Uuid;

/// How long past its expiry a row is kept. Each process judges a cookie's
/// expiry by its own clock: a process whose clock runs behind the one that
/// prunes must still find the row while it takes the cookie for unexpired.
pub const PRUNE_GRACE_SECS: i64 = 3600;

/// The stored spelling of a sign-in id: the one the cookie carries.
fn key(id: &Uuid) -> String {
    id.simple().to_string()
}

/// Records that sign-in `id` was signed out; its cookie would have expired at
/// `expires_at` (unix seconds). Recording it twice is no error. Rows expired
/// by more than [`PRUNE_GRACE_SECS`] as of `now` are deleted on the way.
pub fn sign_out(conn: &mut DbConn, id: &Uuid, expires_at: i64, now: i64) -> Result<(), StoreError> {
    let id = key(id);
    with_conn!(conn, |c| diesel::insert_into(signed_out::table)
        .values((
            signed_out::signin_id.eq(&id),
            signed_out::expires_at.eq(expires_at),
        ))
        .on_conflict_do_nothing()
        .execute(c))?;
    prune(conn, now - PRUNE_GRACE_SECS)?;
    Ok(())
}

/// Whether sign-in `id` was signed out.
pub fn is_signed_out(conn: &mut DbConn, id: &Uuid) -> Result<bool, StoreError> {
    let id = key(id);
    Ok(with_conn!(conn, |c| diesel::select(diesel::dsl::exists(
        signed_out::table.filter(signed_out::signin_id.eq(&id))
    ))
    .get_result(c))?)
}

/// Deletes the rows of sign-ins that expired before `before` (unix seconds);
/// how many.
pub fn prune(conn: &mut DbConn, before: i64) -> Result<usize, StoreError> {
    Ok(with_conn!(conn, |c| diesel::delete(
        signed_out::table.filter(signed_out::expires_at.lt(before))
    )
    .execute(c))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DatabaseUrl;
    use crate::store::{run_migrations, ConnSettings};

    #[test]
    fn a_sign_out_is_kept_until_well_past_its_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = DbConn::establish(&ConnSettings {
            url: DatabaseUrl::Sqlite(dir.path().join("db.sqlite")),
            sqlite_busy_timeout: std::time::Duration::from_secs(5),
            read_only: false,
        })
        .unwrap();
        run_migrations(&mut c).unwrap();
        let now = 1_800_000_000;
        let (old, new) = (Uuid::new_v4(), Uuid::new_v4());
        assert!(!is_signed_out(&mut c, &old).unwrap());
        sign_out(&mut c, &old, now + 10, now).unwrap();
        sign_out(&mut c, &old, now + 10, now).unwrap();
        assert!(is_signed_out(&mut c, &old).unwrap(), "twice is no error");
        assert!(!is_signed_out(&mut c, &new).unwrap());
        // Expired, but within the grace: kept.
        sign_out(&mut c, &new, now + 7200, now + 10 + PRUNE_GRACE_SECS).unwrap();
        assert!(is_signed_out(&mut c, &old).unwrap());
        // Past the grace: the next sign-out deletes it.
        sign_out(&mut c, &new, now + 7200, now + 11 + PRUNE_GRACE_SECS).unwrap();
        assert!(!is_signed_out(&mut c, &old).unwrap());
        assert!(is_signed_out(&mut c, &new).unwrap());
    }
}
