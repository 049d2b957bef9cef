//! Forks as Gitea makes them: a bare copy of the repository under another
//! owner, and a pull request from it whose commits the base repository keeps
//! under `refs/pull/<n>/head`; and who authored a commit.

use super::GitRepos;

impl GitRepos {
    /// A bare copy of `owner/name` as `fork_owner/name`, as Gitea's fork.
    pub fn fork_repo(&self, owner: &str, name: &str, fork_owner: &str) {
        let from = self.repo_path(owner, name);
        let to = self.repo_path(fork_owner, name);
        std::fs::create_dir_all(&to).unwrap();
        self.git(
            &to,
            &["init", "--quiet", "--bare", "--initial-branch=main"],
            None,
            &[],
        );
        self.git(
            &to,
            &[
                "fetch",
                "--quiet",
                from.to_str().unwrap(),
                "+refs/heads/*:refs/heads/*",
            ],
            None,
            &[],
        );
    }

    /// Point the base repository's `refs/pull/<number>/head` at the tip of
    /// `branch` in the fork `fork_owner/name`, copying its commits, as Gitea
    /// does for a pull request from a fork; returns that commit.
    pub fn set_fork_pull_ref(
        &self,
        owner: &str,
        name: &str,
        number: i64,
        fork_owner: &str,
        branch: &str,
    ) -> String {
        let repo = self.repo_path(owner, name);
        let fork = self.repo_path(fork_owner, name);
        let refspec = format!("+refs/heads/{branch}:refs/pull/{number}/head");
        self.git(
            &repo,
            &["fetch", "--quiet", fork.to_str().unwrap(), &refspec],
            None,
            &[],
        );
        self.branch_head(fork_owner, name, branch)
    }

    /// The author e-mail of commit `sha`, if the repository has it.
    pub fn commit_author_email(&self, owner: &str, name: &str, sha: &str) -> Option<String> {
        if sha.starts_with('-') {
            return None;
        }
        let repo = self.repo_path(owner, name);
        self.try_git(&repo, &["log", "-1", "--format=%ae", sha])
    }
}
