//! The workspace manager as the repo actor uses it: its errors mapped onto the
//! lifecycle: which state each failure moves the task to.

use super::{PrepareError, PrepareRequest, Workspaces};
use crate::workspace::{Checkout, Disposition, RepoSpec, WorkspaceError, WorkspaceManager};
use std::path::PathBuf;

fn map(err: WorkspaceError) -> PrepareError {
    let detail = err.to_string();
    match err.disposition() {
        Disposition::Refuse => PrepareError::InvalidName(detail),
        Disposition::Blocked => PrepareError::Dirty(detail),
        Disposition::RetryOnce => PrepareError::Auth(detail),
        Disposition::Retry => PrepareError::Transient(detail),
        Disposition::Fail => PrepareError::Fatal {
            code: err.code(),
            detail,
        },
    }
}

impl Workspaces for WorkspaceManager {
    fn prepare(&self, req: &PrepareRequest) -> Result<PathBuf, PrepareError> {
        let clone_url = req.clone_url.clone().ok_or_else(|| PrepareError::Fatal {
            code: "no_clone_url",
            detail: format!(
                "repository {}/{} has no clone URL (the webhook did not carry one)",
                req.owner, req.name
            ),
        })?;
        let spec = RepoSpec {
            owner: req.owner.clone(),
            name: req.name.clone(),
            clone_url,
        };
        let checkout = match &req.pull {
            Some((number, head_ref)) => Checkout::PullRequest {
                number: *number,
                head_ref: head_ref.clone(),
            },
            None => Checkout::DefaultBranch {
                name: req.default_branch.clone(),
            },
        };
        WorkspaceManager::prepare(self, &spec, &checkout)
            .map(|p| p.path)
            .map_err(map)
    }

    fn path_for(&self, owner: &str, name: &str) -> Result<PathBuf, PrepareError> {
        WorkspaceManager::path_for(self, owner, name).map_err(map)
    }
}
