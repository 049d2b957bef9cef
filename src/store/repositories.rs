//! Registering a repository as known without a webhook: `gitea hook` does
//! it for each repository it hooks, so that the catch-up covers it from that
//! moment on (a webhook registers a repository on first sight, in the
//! ingest's own transaction).

use super::audit::{self, Audit};
use super::schema::repositories;
use super::{now, DbConn, StoreError};
use crate::domain::states::RepoStatus;
use crate::domain::RepoKey;
use crate::with_conn;
use diesel::prelude::*;

/// A repository as Gitea shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownRepository {
    pub repo_key: RepoKey,
    /// As Gitea spells them (the key folds them to lower case).
    pub owner: String,
    pub name: String,
    pub clone_url: Option<String>,
    pub default_branch: Option<String>,
}

/// What [`register`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// A new row, enabled, registered now: the catch-up's cursor for it
    /// starts at this moment, never at the beginning of the repository.
    New,
    /// Already known; its status (an operator may have disabled it) and
    /// registration time stay, a missing clone URL or default branch is
    /// filled in.
    Known,
}

/// Registers `repo` as known (one transaction, audited as
/// `repository.registered` by `actor` when the row is new).
pub fn register(
    conn: &mut DbConn,
    repo: &KnownRepository,
    actor: &str,
) -> Result<Registered, StoreError> {
    let at = now();
    conn.transaction(|conn| {
        let inserted = with_conn!(conn, |c| diesel::insert_into(repositories::table)
            .values((
                repositories::repo_key.eq(&repo.repo_key),
                repositories::instance_id.eq(repo.repo_key.instance()),
                repositories::owner.eq(&repo.owner),
                repositories::name.eq(&repo.name),
                repositories::clone_url.eq(&repo.clone_url),
                repositories::default_branch.eq(&repo.default_branch),
                repositories::status.eq(RepoStatus::Active.as_str()),
                repositories::registered_at.eq(&at),
                repositories::updated_at.eq(&at),
                repositories::version.eq(1_i64),
            ))
            .on_conflict_do_nothing()
            .execute(c))?;
        if inserted == 1 {
            audit::record(
                conn,
                &Audit::new("repository.registered", actor)
                    .meta(serde_json::json!({ "repoKey": repo.repo_key })),
            )?;
            return Ok(Registered::New);
        }
        let row = repositories::table.find(&repo.repo_key);
        with_conn!(conn, |c| {
            diesel::update(row.filter(repositories::clone_url.is_null()))
                .set(repositories::clone_url.eq(&repo.clone_url))
                .execute(c)?;
            diesel::update(row.filter(repositories::default_branch.is_null()))
                .set(repositories::default_branch.eq(&repo.default_branch))
                .execute(c)
        })?;
        Ok(Registered::Known)
    })
}
