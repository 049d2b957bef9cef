//! What a test does to the simulated instance directly, as an
//! administrator or a user of the web UI would: users, repositories, git,
//! issues, pull requests and comments; and what it reads back (comments,
//! reviews, statuses).

use crate::giteasim::data::{Perm, Pull, Repo};
use crate::giteasim::GiteaSim;
use crate::support::BOT;
use std::path::PathBuf;
use std::time::Duration;

impl GiteaSim {
    /// The usual cast: `acme/widgets`, the bot its admin (Gitea lets only
    /// repository admins read others' permissions), and Bob, a writer, who
    /// opened an Issue with this title and body; the Issue's number.
    pub fn widgets_with_bob(title: &str, body: &str) -> (GiteaSim, i64) {
        let sim = GiteaSim::start();
        sim.create_repo("acme", "widgets");
        sim.set_permission("acme", "widgets", BOT, Perm::Admin);
        sim.add_user("bob");
        sim.set_permission("acme", "widgets", "bob", Perm::Write);
        let issue = sim.create_issue("acme", "widgets", title, body, "bob");
        (sim, issue)
    }

    // -- users -------------------------------------------------------------

    /// Create a user with a fresh access token; returns the token.
    pub fn add_user(&self, login: &str) -> String {
        let token = format!("tok-{login}-{}", uuid::Uuid::new_v4().simple());
        self.add_user_with_token(login, &token);
        token
    }

    /// Create a user (or give an existing one) this access token.
    pub fn add_user_with_token(&self, login: &str, token: &str) {
        let mut d = self.sim.data.lock().unwrap();
        let id = d.ensure_user(login);
        d.users.iter_mut().find(|u| u.id == id).unwrap().token = Some(token.to_owned());
    }

    /// The token of a user made by [`GiteaSim::add_user`].
    pub fn token_of(&self, login: &str) -> String {
        let d = self.sim.data.lock().unwrap();
        d.user(login)
            .and_then(|u| u.token.clone())
            .unwrap_or_else(|| panic!("giteasim: user {login} has no token"))
    }

    /// Make a user a site administrator (admin on every repository).
    pub fn set_site_admin(&self, login: &str, admin: bool) {
        let mut d = self.sim.data.lock().unwrap();
        let id = d.ensure_user(login);
        d.users.iter_mut().find(|u| u.id == id).unwrap().is_admin = admin;
    }

    // -- repositories and git ------------------------------------------------

    /// A private repository `owner/name` (owner created as needed) with one
    /// commit on `main`; the bot gets write access. Returns that commit.
    pub fn create_repo(&self, owner: &str, name: &str) -> String {
        let sha = self.sim.git.create_repo(owner, name);
        let mut d = self.sim.data.lock().unwrap();
        d.ensure_user(owner);
        let id = d.alloc();
        let now = d.now();
        d.repos.push(Repo {
            id,
            owner: owner.to_owned(),
            name: name.to_owned(),
            private: true,
            default_branch: "main".into(),
            perms: vec![(BOT.to_owned(), Perm::Write)],
            created: now,
            next_index: 1,
        });
        sha
    }

    /// Make a repository public (anonymous git reads) or private again.
    pub fn set_private(&self, owner: &str, name: &str, private: bool) {
        let mut d = self.sim.data.lock().unwrap();
        d.repo_mut(owner, name).private = private;
    }

    /// Give `user` (created as needed) this access to `owner/name`.
    pub fn set_permission(&self, owner: &str, name: &str, user: &str, perm: Perm) {
        let mut d = self.sim.data.lock().unwrap();
        d.ensure_user(user);
        let repo = d.repo_mut(owner, name);
        repo.perms.retain(|(u, _)| !u.eq_ignore_ascii_case(user));
        repo.perms.push((user.to_owned(), perm));
    }

    /// The bare repository of `owner/name`.
    pub fn repo_path(&self, owner: &str, name: &str) -> PathBuf {
        self.sim.git.repo_path(owner, name)
    }

    /// Commit `file` with `contents` on `branch` (created from `main` if
    /// missing); returns the commit.
    pub fn commit(
        &self,
        owner: &str,
        name: &str,
        branch: &str,
        file: &str,
        contents: &str,
        message: &str,
    ) -> String {
        // Authored by the owner, whom Gitea maps to a user with admin rights.
        let email = format!("{}@example.com", owner.to_ascii_lowercase());
        self.sim.git.commit_by(
            owner,
            name,
            branch,
            file,
            contents,
            message,
            Some((owner, &email)),
        )
    }

    /// As [`GiteaSim::commit`], authored by `login` (`None`: an address no
    /// user of the instance has).
    #[expect(
        clippy::too_many_arguments,
        reason = "a commit's fields, as git takes them"
    )]
    pub fn commit_as(
        &self,
        owner: &str,
        name: &str,
        branch: &str,
        file: &str,
        contents: &str,
        message: &str,
        login: Option<&str>,
    ) -> String {
        let email = match login {
            Some(l) => format!("{}@example.com", l.to_ascii_lowercase()),
            None => "stranger@elsewhere.invalid".to_owned(),
        };
        let name_of = login.unwrap_or("stranger");
        self.sim.git.commit_by(
            owner,
            name,
            branch,
            file,
            contents,
            message,
            Some((name_of, &email)),
        )
    }

    /// Fork `owner/name` as `fork_owner/name` (public, like most forks;
    /// `fork_owner` gets admin on it as its owner).
    pub fn fork_repo(&self, owner: &str, name: &str, fork_owner: &str) {
        self.sim.git.fork_repo(owner, name, fork_owner);
        let mut d = self.sim.data.lock().unwrap();
        d.ensure_user(fork_owner);
        let id = d.alloc();
        let now = d.now();
        d.repos.push(Repo {
            id,
            owner: fork_owner.to_owned(),
            name: name.to_owned(),
            private: false,
            default_branch: "main".into(),
            perms: Vec::new(),
            created: now,
            next_index: 1,
        });
    }

    /// The commit at the tip of `branch`.
    pub fn branch_head(&self, owner: &str, name: &str, branch: &str) -> String {
        self.sim.git.branch_head(owner, name, branch)
    }

    /// Point a same-repository pull request's `refs/pull/<number>/head` at
    /// its branch's tip again, as Gitea does after a push to the branch.
    pub fn sync_pull(&self, owner: &str, name: &str, number: i64, branch: &str) {
        self.sim.git.set_pull_ref(owner, name, number, branch);
    }

    /// The commit the base repository's `refs/pull/<number>/head` names.
    pub fn resolve_pull_head(&self, owner: &str, name: &str, number: i64) -> String {
        self.sim
            .git
            .resolve_commit(owner, name, &format!("refs/pull/{number}/head"))
            .expect("giteasim: no such pull request ref")
    }

    /// Delete a branch.
    pub fn delete_branch(&self, owner: &str, name: &str, branch: &str) {
        self.sim.git.delete_branch(owner, name, branch)
    }

    // -- issues, pulls, comments -----------------------------------------------

    /// Open an issue; returns its number (shared index with PRs). Fires the
    /// `issues` `opened` webhook if [`GiteaSim::set_issue_events`] is on.
    pub fn create_issue(
        &self,
        owner: &str,
        repo: &str,
        title: &str,
        body: &str,
        author: &str,
    ) -> i64 {
        let mut d = self.sim.data.lock().unwrap();
        let number = d.new_issue(owner, repo, title, body, author, None);
        let id = d.issue_id(owner, repo, number).unwrap();
        self.sim.issue_opened_hook(&d, id);
        number
    }

    /// Open a pull request from `head` into `base` (branches of the same
    /// repository; `head` must exist, see [`GiteaSim::commit`]); sets
    /// `refs/pull/<n>/head` like Gitea. Returns its number.
    #[expect(
        clippy::too_many_arguments,
        reason = "a Gitea request's fields, as the simulator records them"
    )]
    pub fn create_pull(
        &self,
        owner: &str,
        repo: &str,
        title: &str,
        body: &str,
        author: &str,
        head: &str,
        base: &str,
    ) -> i64 {
        let head_sha = self.branch_head(owner, repo, head);
        let base_sha = self.branch_head(owner, repo, base);
        let number = {
            let mut d = self.sim.data.lock().unwrap();
            let id = d.alloc();
            d.new_issue(
                owner,
                repo,
                title,
                body,
                author,
                Some(Pull {
                    id,
                    head_repo_id: None,
                    head: head.to_owned(),
                    base: base.to_owned(),
                    head_sha,
                    base_sha,
                }),
            )
        };
        self.sim.git.set_pull_ref(owner, repo, number, head);
        number
    }

    /// Open a pull request into `owner/name`'s `base` from branch `head` of
    /// the fork `fork_owner/name` (see [`GiteaSim::fork_repo`]); sets the
    /// base repository's `refs/pull/<n>/head` to the fork's commit like
    /// Gitea. Returns its number.
    #[expect(
        clippy::too_many_arguments,
        reason = "a Gitea request's fields, as the simulator records them"
    )]
    pub fn create_fork_pull(
        &self,
        owner: &str,
        name: &str,
        fork_owner: &str,
        title: &str,
        body: &str,
        author: &str,
        head: &str,
        base: &str,
    ) -> i64 {
        let head_sha = self.branch_head(fork_owner, name, head);
        let base_sha = self.branch_head(owner, name, base);
        let number = {
            let mut d = self.sim.data.lock().unwrap();
            let id = d.alloc();
            let head_repo_id = d.repo(fork_owner, name).map(|r| r.id);
            assert!(
                head_repo_id.is_some(),
                "giteasim: fork the repository first"
            );
            d.new_issue(
                owner,
                name,
                title,
                body,
                author,
                Some(Pull {
                    id,
                    head_repo_id,
                    head: head.to_owned(),
                    base: base.to_owned(),
                    head_sha,
                    base_sha,
                }),
            )
        };
        self.sim
            .git
            .set_fork_pull_ref(owner, name, number, fork_owner, head);
        number
    }

    /// Lock or unlock an issue's conversation.
    pub fn set_locked(&self, owner: &str, repo: &str, number: i64, locked: bool) {
        let mut d = self.sim.data.lock().unwrap();
        let id = d.issue_id(owner, repo, number).expect("no such issue");
        d.issues.iter_mut().find(|i| i.id == id).unwrap().locked = locked;
    }

    /// Close an issue or pull request (as its page's Close button does:
    /// no webhook is sent by this call).
    pub fn close_issue(&self, owner: &str, repo: &str, number: i64) {
        let mut d = self.sim.data.lock().unwrap();
        let now = d.now();
        let id = d.issue_id(owner, repo, number).expect("no such issue");
        d.issues.iter_mut().find(|i| i.id == id).unwrap().closed = Some(now);
    }

    /// The plain comments of an issue/PR as `GET .../comments` shows them.
    pub fn comments(&self, owner: &str, repo: &str, number: i64) -> Vec<serde_json::Value> {
        let d = self.sim.data.lock().unwrap();
        let base = self.sim.base();
        let id = d.issue_id(owner, repo, number).expect("no such issue");
        d.comments
            .iter()
            .filter(|c| c.issue_id == id && c.plain)
            .map(|c| d.comment_json(base, c).to_value())
            .collect()
    }

    /// Every review of a pull request, pending ones included, oldest first
    /// (as the API orders them), each as the API shows it to its reviewer.
    pub fn reviews(&self, owner: &str, repo: &str, number: i64) -> Vec<serde_json::Value> {
        let d = self.sim.data.lock().unwrap();
        let id = d.issue_id(owner, repo, number).expect("no such issue");
        let mut reviews: Vec<_> = d.reviews.iter().filter(|r| r.issue_id == id).collect();
        reviews.sort_by_key(|r| (r.created, r.id));
        reviews
            .into_iter()
            .map(|r| {
                d.review_json(self.sim.base(), r, Some(&r.reviewer))
                    .to_value()
            })
            .collect()
    }

    /// One comment by id, plain or not (`None` once deleted or never stored).
    pub fn comment(&self, id: i64) -> Option<serde_json::Value> {
        let d = self.sim.data.lock().unwrap();
        d.comments
            .iter()
            .find(|c| c.id == id)
            .map(|c| d.comment_json(self.sim.base(), c).to_value())
    }

    /// `(user, content)` of a comment's reactions.
    pub fn reactions(&self, comment_id: i64) -> Vec<(String, String)> {
        let d = self.sim.data.lock().unwrap();
        d.comments
            .iter()
            .find(|c| c.id == comment_id)
            .map(|c| {
                c.reactions
                    .iter()
                    .map(|r| (r.user.clone(), r.content.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Post a comment as the web UI does (no permission checks, `\r\n` line
    /// endings as a browser sends them); fires the `created` webhook. Returns
    /// the comment as the API shows it.
    pub fn post_comment_as(
        &self,
        user: &str,
        owner: &str,
        repo: &str,
        number: i64,
        body: &str,
    ) -> serde_json::Value {
        self.web_comment(user, owner, repo, number, body, true)
    }

    /// As [`GiteaSim::post_comment_as`], but Gitea never sends its webhook
    /// (as when the hook was missing, inactive or its queue lost): the
    /// comment is only in the REST API, for a catch-up to find.
    pub fn post_comment_without_webhook(
        &self,
        user: &str,
        owner: &str,
        repo: &str,
        number: i64,
        body: &str,
    ) -> serde_json::Value {
        self.web_comment(user, owner, repo, number, body, false)
    }

    fn web_comment(
        &self,
        user: &str,
        owner: &str,
        repo: &str,
        number: i64,
        body: &str,
        hook: bool,
    ) -> serde_json::Value {
        let body = body.replace("\r\n", "\n").replace('\n', "\r\n");
        let mut d = self.sim.data.lock().unwrap();
        d.ensure_user(user);
        let issue_id = d.issue_id(owner, repo, number).expect("no such issue");
        let id = d.add_comment(issue_id, user, &body, true);
        let comment = d.comment_json(self.sim.base(), d.comment(id).unwrap());
        if hook {
            self.sim.comment_hook(&d, "created", id, user, None);
        }
        comment.to_value()
    }

    /// A non-plain timeline comment (e.g. a label change): hidden from the
    /// comment listing, 204 on `GET /issues/comments/{id}`. Returns its id.
    pub fn add_event_comment(&self, owner: &str, repo: &str, number: i64, author: &str) -> i64 {
        let mut d = self.sim.data.lock().unwrap();
        d.ensure_user(author);
        let issue_id = d.issue_id(owner, repo, number).expect("no such issue");
        d.add_comment(issue_id, author, "", false)
    }

    /// Edit a comment as `user` (web UI); fires the `edited` webhook with
    /// `changes.body.from`.
    pub fn edit_comment_as(&self, user: &str, id: i64, body: &str) {
        let mut d = self.sim.data.lock().unwrap();
        let now = d.now();
        let c = d.comment_mut(id).expect("no such comment");
        let old = std::mem::replace(&mut c.body, body.to_owned());
        c.updated = now;
        self.sim.comment_hook(&d, "edited", id, user, Some(&old));
    }

    /// Delete a comment as `user` (web UI); fires the `deleted` webhook.
    pub fn delete_comment_as(&self, user: &str, id: i64) {
        let mut d = self.sim.data.lock().unwrap();
        self.sim.comment_hook(&d, "deleted", id, user, None);
        d.comments.retain(|c| c.id != id);
    }

    /// Move the simulator's clock (timestamps of new comments, edits).
    pub fn advance_clock(&self, by: Duration) {
        self.sim.data.lock().unwrap().clock_offset += by.as_secs() as i64;
    }

    /// Move the simulator's clock back (what is created next is stamped as
    /// if it had happened that long ago, before the bridge first saw it).
    pub fn rewind_clock(&self, by: Duration) {
        self.sim.data.lock().unwrap().clock_offset -= by.as_secs() as i64;
    }

    // -- commit statuses -------------------------------------------------------

    /// The statuses set on commit `sha` (full id), oldest first, as the API
    /// shows each.
    pub fn statuses(&self, owner: &str, repo: &str, sha: &str) -> Vec<serde_json::Value> {
        let d = self.sim.data.lock().unwrap();
        let repo_id = d
            .repo(owner, repo)
            .unwrap_or_else(|| panic!("giteasim: no repository {owner}/{repo}"))
            .id;
        d.statuses
            .iter()
            .filter(|s| s.repo_id == repo_id && s.sha == sha)
            .map(|s| d.status_json(self.sim.base(), s).to_value())
            .collect()
    }
}
