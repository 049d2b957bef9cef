//! The workspace calls that read or remove what a session left on this
//! worker: the base branch's `AGENTS.md` for a thread that must not follow
//! the checked-out head's, the worktree's state as a turn ends, and
//! retiring the worktree. Each names the repository and the session, never
//! a folder: the worker's own [`WorkspaceManager`] makes the folder from
//! those names under its `workspace_root`, and refuses a name that would
//! lead anywhere else (nothing is read or removed then).

use super::{refused, workspace_failed, worktree, Runtime};
use crate::worker_api::{self as wire, CallBody, Outcome, Value};
use crate::workspace::WorkspaceManager;

impl Runtime {
    /// Runs a `base_instructions`, `tree_state` or `retire_session` call
    /// with the workspaces of the instance it names.
    pub(super) async fn session_workspace(&self, body: CallBody) -> Result<Value, Outcome> {
        let instance = match &body {
            CallBody::BaseInstructions { instance, .. }
            | CallBody::TreeState { instance, .. }
            | CallBody::RetireSession { instance, .. } => instance.clone(),
            other => return Err(not_ours(other)),
        };
        let workspaces = self.workspaces(&instance)?;
        let kind = body.kind();
        // Git runs: off the async threads.
        tokio::task::spawn_blocking(move || run(&workspaces, body))
            .await
            .map_err(|e| refused(format!("the {kind} call stopped: {e}")))?
    }
}

fn not_ours(body: &CallBody) -> Outcome {
    refused(format!(
        "{} is not a call on a session's workspace",
        body.kind()
    ))
}

/// Blocking: the call run on `workspaces`.
fn run(workspaces: &WorkspaceManager, body: CallBody) -> Result<Value, Outcome> {
    match body {
        CallBody::BaseInstructions {
            owner, name, base, ..
        } => {
            // Bounded by the workspaces (`MAX_INSTRUCTIONS_BYTES`).
            let text = workspaces
                .base_instructions(&owner, &name, base.as_deref())
                .map_err(workspace_failed)?;
            Ok(Value::Instructions { text })
        }
        CallBody::TreeState {
            owner,
            name,
            worktree: w,
            ..
        } => {
            let state = workspaces
                .tree_state(&owner, &name, worktree(&w)?)
                .map_err(workspace_failed)?;
            Ok(Value::TreeState {
                state: state.map(|t| wire::Tree {
                    head: t.head,
                    tree: t.tree,
                }),
            })
        }
        CallBody::RetireSession {
            owner,
            name,
            worktree: w,
            ..
        } => {
            let retired = workspaces
                .retire_session(&owner, &name, worktree(&w)?)
                .map_err(workspace_failed)?;
            Ok(Value::Retired {
                removed: retired.removed,
                kept: retired.kept,
            })
        }
        other => Err(not_ours(&other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(kind: &str) -> wire::Worktree {
        wire::Worktree {
            kind: kind.into(),
            number: 4,
            child: None,
        }
    }

    fn calls(instance: &str, owner: &str, name: &str, kind: &str) -> Vec<CallBody> {
        vec![
            CallBody::BaseInstructions {
                instance: instance.into(),
                owner: owner.into(),
                name: name.into(),
                base: None,
            },
            CallBody::TreeState {
                instance: instance.into(),
                owner: owner.into(),
                name: name.into(),
                worktree: session(kind),
            },
            CallBody::RetireSession {
                instance: instance.into(),
                owner: owner.into(),
                name: name.into(),
                worktree: session(kind),
            },
        ]
    }

    #[test]
    fn names_that_lead_out_of_the_root_are_refused_and_touch_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        // What a name that escaped would reach.
        let outside = tmp.path().join("acme");
        std::fs::create_dir(&outside).unwrap();
        let bad = [
            ("default", "..", "acme"),
            ("default", "acme", "../../acme"),
            ("..", "acme", "widgets"),
            ("default", "/etc", "widgets"),
            ("", "acme", "widgets"),
        ];
        for (instance, owner, name) in bad {
            let m = WorkspaceManager::new(root.clone(), instance.into(), None);
            for body in calls(instance, owner, name, "issue") {
                let kind = body.kind();
                match run(&m, body) {
                    Err(Outcome::WorkspaceFailed { disposition, .. }) => {
                        assert_eq!(disposition, "cannot_name", "{kind} {owner}/{name}")
                    }
                    other => panic!("{kind} on {instance}/{owner}/{name}: {other:?}"),
                }
            }
        }
        let m = WorkspaceManager::new(root.clone(), "default".into(), None);
        for body in calls("default", "acme", "widgets", "branch")
            .into_iter()
            .skip(1)
        {
            assert!(
                matches!(run(&m, body), Err(Outcome::Refused { .. })),
                "a worktree of no known kind"
            );
        }
        assert!(outside.is_dir());
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
    }

    #[test]
    fn a_session_with_nothing_on_this_worker_has_no_state_and_nothing_to_retire() {
        let tmp = tempfile::tempdir().unwrap();
        let m = WorkspaceManager::new(tmp.path().to_path_buf(), "default".into(), None);
        let [_, state, retire] =
            <[CallBody; 3]>::try_from(calls("default", "acme", "widgets", "pull")).unwrap();
        assert_eq!(run(&m, state).unwrap(), Value::TreeState { state: None });
        assert_eq!(
            run(&m, retire).unwrap(),
            Value::Retired {
                removed: false,
                kept: None
            }
        );
        assert!(matches!(
            run(&m, CallBody::Reset),
            Err(Outcome::Refused { .. })
        ));
    }
}
