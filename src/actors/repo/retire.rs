//! Retiring sessions' worktrees once their work ended and
//! `worktree_retention_hours` passed: under the repository's lease, each
//! audited with where its uncommitted work was kept.

use crate::actors::ActorDeps;
use crate::domain::{RepoKey, ResourceKey};
use crate::store::audit::{self, Audit};
use crate::store::{format_time, worktrees, StoreError};
use std::sync::Arc;

/// Worktrees unused since this time may be retired; `None`: they are kept.
pub(in crate::actors) fn retention_cutoff(deps: &ActorDeps) -> Option<String> {
    let keep = chrono::Duration::from_std(deps.settings.worktree_retention?).ok()?;
    Some(format_time(chrono::Utc::now() - keep))
}

/// Removes the worktrees of sessions whose work ended longer ago than the
/// retention (under the repository's lease), each audited with where its
/// uncommitted work was kept. One that cannot be removed stays on disk and
/// recorded; the next idle pass tries again.
pub(super) async fn retire(
    deps: &Arc<ActorDeps>,
    repo: &crate::store::models::Repository,
    sessions: Vec<(RepoKey, ResourceKey)>,
) -> Result<(), StoreError> {
    for (_, session) in sessions {
        let id = crate::workspace::WorktreeId::of(&session);
        let (workspaces, owner, name) = (
            deps.workspaces.clone(),
            repo.owner.clone(),
            repo.name.clone(),
        );
        let done = tokio::task::spawn_blocking(move || workspaces.retire(&owner, &name, id)).await;
        let retired = match done {
            Ok(Ok(retired)) => retired,
            Ok(Err(e)) => {
                tracing::warn!(session.key = %session, code = e.code(), "could not retire the session's worktree; it stays: {e}");
                continue;
            }
            Err(e) => {
                tracing::warn!(session.key = %session, "could not retire the session's worktree; it stays: {e}");
                continue;
            }
        };
        tracing::info!(session.key = %session, kept = ?retired.kept, "session worktree retired");
        deps.store
            .write(move |c| {
                worktrees::removed(c, &session)?;
                audit::record(
                    c,
                    &Audit::new("worktree.retired", "system").meta(serde_json::json!({
                            "session": session.as_str(),
                            "removed": retired.removed,
                            "uncommittedWorkKeptAt": retired.kept,
                    })),
                )
                .map(drop)
            })
            .await?;
    }
    Ok(())
}
