//! Sessions' worktrees in the store: the state each one's last turn left
//! (what the next turn must find), when it was last used, and which ones may
//! be retired.

use super::schema::{result_deliveries, tasks, workflow_results, workflows, worktrees};
use super::{now, DbConn, StoreError};
use crate::domain::workflow::results::DeliveryState;
use crate::domain::workflow::WorkflowState;
use crate::domain::worktree::TreeState;
use crate::domain::{RepoKey, ResourceKey};
use crate::with_conn;
use diesel::prelude::*;

/// What the session's next turn must find in its worktree: the state its
/// last turn left, or `None` to take it as it is (no turn ended in it yet,
/// an operator cleared it, or it was retired).
pub fn recorded(c: &mut DbConn, session: &ResourceKey) -> Result<Option<TreeState>, StoreError> {
    let row: Option<(Option<String>, Option<String>)> = with_conn!(c, |c| worktrees::table
        .find(session)
        .filter(worktrees::removed_at.is_null())
        .select((worktrees::head, worktrees::tree))
        .first(c)
        .optional())?;
    Ok(match row {
        Some((Some(head), Some(tree))) => Some(TreeState { head, tree }),
        _ => None,
    })
}

/// The session's worktree was made ready for a turn (created, or made again
/// after it was retired).
pub fn prepared(c: &mut DbConn, session: &ResourceKey, repo: &RepoKey) -> Result<(), StoreError> {
    let at = now();
    with_conn!(c, |c| diesel::insert_into(worktrees::table)
        .values((
            worktrees::session_key.eq(session),
            worktrees::repo_key.eq(repo),
            worktrees::prepared_at.eq(&at),
        ))
        .on_conflict(worktrees::session_key)
        .do_update()
        .set((
            worktrees::prepared_at.eq(&at),
            worktrees::removed_at.eq(None::<String>),
        ))
        .execute(c))?;
    Ok(())
}

/// A turn in the session's worktree ended leaving `state` (in the
/// transaction that records the turn's end).
pub fn record(c: &mut DbConn, session: &ResourceKey, state: &TreeState) -> Result<(), StoreError> {
    let at = now();
    with_conn!(c, |c| diesel::update(worktrees::table.find(session))
        .set((
            worktrees::head.eq(&state.head),
            worktrees::tree.eq(&state.tree),
            worktrees::recorded_at.eq(&at),
        ))
        .execute(c))?;
    Ok(())
}

/// An operator looked at the session's worktree: its next turn takes it as
/// it is. Whether there was a state to forget.
pub fn accept(c: &mut DbConn, session: &ResourceKey) -> Result<bool, StoreError> {
    let n = with_conn!(c, |c| diesel::update(
        worktrees::table
            .find(session)
            .filter(worktrees::head.is_not_null())
    )
    .set((
        worktrees::head.eq(None::<String>),
        worktrees::tree.eq(None::<String>),
    ))
    .execute(c))?;
    Ok(n > 0)
}

/// Sessions whose worktree may be retired (of `repo`, or of every
/// repository): on disk, unused since `before`, with no task that has not
/// ended, no workflow still open, and (a delegated child's) no result its
/// parent has yet to acknowledge: the parent may still read its worktree.
pub fn retirable(
    c: &mut DbConn,
    repo: Option<&RepoKey>,
    before: &str,
) -> Result<Vec<(RepoKey, ResourceKey)>, StoreError> {
    let live_tasks = crate::store::workflows::live_states();
    let live_workflows: Vec<&str> = WorkflowState::ALL
        .iter()
        .filter(|s| !s.is_end())
        .map(|s| s.as_str())
        .collect();
    Ok(with_conn!(c, |c| {
        let mut q = worktrees::table.into_boxed();
        if let Some(repo) = repo {
            q = q.filter(worktrees::repo_key.eq(repo));
        }
        q.filter(worktrees::removed_at.is_null())
            .filter(worktrees::prepared_at.lt(before))
            .filter(
                worktrees::recorded_at
                    .is_null()
                    .or(worktrees::recorded_at.lt(before)),
            )
            .filter(diesel::dsl::not(diesel::dsl::exists(
                tasks::table
                    .filter(tasks::session_key.eq(worktrees::session_key))
                    .filter(tasks::state.eq_any(&live_tasks)),
            )))
            .filter(diesel::dsl::not(diesel::dsl::exists(
                workflows::table
                    .filter(workflows::session_key.eq(worktrees::session_key))
                    .filter(workflows::state.eq_any(&live_workflows)),
            )))
            .filter(diesel::dsl::not(diesel::dsl::exists(
                workflow_results::table
                    .inner_join(
                        result_deliveries::table
                            .on(result_deliveries::result_id.eq(workflow_results::result_id)),
                    )
                    .filter(
                        workflow_results::workflow_id.eq_any(
                            workflows::table
                                .filter(workflows::session_key.eq(worktrees::session_key))
                                .select(workflows::workflow_id),
                        ),
                    )
                    .filter(
                        result_deliveries::state
                            .eq_any([DeliveryState::Pending, DeliveryState::Delivered]),
                    ),
            )))
            .select((worktrees::repo_key, worktrees::session_key))
            .load::<(RepoKey, ResourceKey)>(c)
    })?)
}

/// The session's worktree was removed from disk; a later turn makes it
/// again from its branch.
pub fn removed(c: &mut DbConn, session: &ResourceKey) -> Result<(), StoreError> {
    let at = now();
    with_conn!(c, |c| diesel::update(worktrees::table.find(session))
        .set((
            worktrees::removed_at.eq(&at),
            worktrees::head.eq(None::<String>),
            worktrees::tree.eq(None::<String>),
        ))
        .execute(c))?;
    Ok(())
}
