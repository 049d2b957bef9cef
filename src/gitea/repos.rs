//! The repositories the bot can reach (`GET /user/repos`): those it owns or
//! is a collaborator on, each with its own permissions.

use super::client::{GiteaClient, GiteaError, User};
use serde::Deserialize;

/// What a user may do in a repository (`api.Permission`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct RepoPermissions {
    #[serde(default)]
    pub admin: bool,
    #[serde(default)]
    pub push: bool,
    #[serde(default)]
    pub pull: bool,
}

/// A repository in a listing, as much as the bridge reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RepoEntry {
    pub owner: User,
    pub name: String,
    /// `owner/name` as Gitea spells it.
    pub full_name: String,
    /// The caller's, not anyone else's.
    #[serde(default)]
    pub permissions: RepoPermissions,
}

impl GiteaClient {
    /// The token's user (`GET /user`): proves the token and names the bot.
    pub fn current_user(&self) -> Result<User, GiteaError> {
        let what = "the token's user";
        Self::decode(self.read("/api/v1/user", what)?.body, what)
    }

    /// Every repository the token's user owns or collaborates on (all pages).
    pub fn list_my_repos(&self) -> Result<Vec<RepoEntry>, GiteaError> {
        self.read_all("/api/v1/user/repos", &[], "the bot's repositories")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_listed_repository_carries_the_callers_permissions() {
        let r: RepoEntry = serde_json::from_value(json!({
            "id": 1, "owner": {"login": "acme", "id": 2}, "name": "widgets",
            "full_name": "acme/widgets",
            "permissions": {"admin": true, "push": true, "pull": true}
        }))
        .unwrap();
        assert_eq!(r.owner.login, "acme");
        assert!(r.permissions.admin);
    }
}
