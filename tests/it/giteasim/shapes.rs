//! Gitea's JSON shapes (`api.User`, `api.Repository`, `api.Issue`,
//! `api.PullRequest`, `api.Comment`, `api.Reaction`, `api.CommitStatus`,
//! `api.PullReview`), field for field in the order Go marshals them.

use crate::giteasim::data::{Comment, CommitStatus, Data, Issue, Perm, Reaction, Repo, Review};
use crate::giteasim::json::obj;
use crate::giteasim::{rfc3339, J};
use crate::gitsim::GitRepos;

impl Data {
    /// `api.User`. `full`: as the user sees itself (real e-mail, admin flag);
    /// otherwise as converted without a viewer (no-reply e-mail, zero login).
    pub(crate) fn user_json(&self, base: &str, login: &str, full: bool) -> J {
        let (id, login, full_name, is_admin, created) = match self.user(login) {
            Some(u) => (
                u.id,
                u.login.clone(),
                u.full_name.clone(),
                u.is_admin,
                u.created,
            ),
            None => (-1, "Ghost".to_owned(), String::new(), false, 0),
        };
        let lower = login.to_ascii_lowercase();
        let email = if full {
            format!("{lower}@example.com")
        } else {
            format!("{lower}@noreply.localhost")
        };
        obj(vec![
            ("id", id.into()),
            ("login", (&login).into()),
            ("login_name", "".into()),
            ("source_id", 0.into()),
            ("full_name", full_name.into()),
            ("email", email.into()),
            (
                "avatar_url",
                format!("{base}/avatars/{:032x}", id.max(0)).into(),
            ),
            ("html_url", format!("{base}/{login}").into()),
            ("language", "".into()),
            ("is_admin", (full && is_admin).into()),
            (
                "last_login",
                if full {
                    rfc3339(created)
                } else {
                    "0001-01-01T00:00:00Z".into()
                }
                .into(),
            ),
            ("created", rfc3339(created).into()),
            ("restricted", false.into()),
            ("active", full.into()),
            ("prohibit_login", false.into()),
            ("location", "".into()),
            ("website", "".into()),
            ("description", "".into()),
            ("visibility", "public".into()),
            ("followers_count", 0.into()),
            ("following_count", 0.into()),
            ("starred_repos_count", 0.into()),
            ("username", (&login).into()),
        ])
    }

    /// `api.Repository`, `permissions` those of `viewer`.
    pub(crate) fn repo_json(&self, base: &str, repo: &Repo, viewer: Option<&str>) -> J {
        let perm = self.perm(repo, viewer);
        let full = format!("{}/{}", repo.owner, repo.name);
        let open_issues = self
            .issues
            .iter()
            .filter(|i| i.repo_id == repo.id && i.pull.is_none())
            .count() as i64;
        let open_pulls = self
            .issues
            .iter()
            .filter(|i| i.repo_id == repo.id && i.pull.is_some())
            .count() as i64;
        let host = base.trim_start_matches("http://");
        obj(vec![
            ("id", repo.id.into()),
            ("owner", self.user_json(base, &repo.owner, false)),
            ("name", (&repo.name).into()),
            ("full_name", (&full).into()),
            ("description", "".into()),
            ("empty", false.into()),
            ("private", repo.private.into()),
            ("fork", false.into()),
            ("template", false.into()),
            ("mirror", false.into()),
            ("size", 0.into()),
            ("language", "".into()),
            (
                "languages_url",
                format!("{base}/api/v1/repos/{full}/languages").into(),
            ),
            ("html_url", format!("{base}/{full}").into()),
            ("url", format!("{base}/api/v1/repos/{full}").into()),
            ("link", "".into()),
            ("ssh_url", format!("git@{host}:{full}.git").into()),
            ("clone_url", format!("{base}/{full}.git").into()),
            ("original_url", "".into()),
            ("website", "".into()),
            ("stars_count", 0.into()),
            ("forks_count", 0.into()),
            ("watchers_count", 0.into()),
            ("open_issues_count", open_issues.into()),
            ("open_pr_counter", open_pulls.into()),
            ("release_counter", 0.into()),
            ("default_branch", (&repo.default_branch).into()),
            ("archived", false.into()),
            ("created_at", rfc3339(repo.created).into()),
            ("updated_at", rfc3339(repo.created).into()),
            ("archived_at", "1970-01-01T00:00:00Z".into()),
            (
                "permissions",
                obj(vec![
                    ("admin", (perm >= Perm::Admin).into()),
                    ("push", (perm >= Perm::Write).into()),
                    ("pull", (perm >= Perm::Read).into()),
                ]),
            ),
            ("has_code", true.into()),
            ("has_issues", true.into()),
            (
                "internal_tracker",
                obj(vec![
                    ("enable_time_tracker", true.into()),
                    ("allow_only_contributors_to_track_time", true.into()),
                    ("enable_issue_dependencies", true.into()),
                ]),
            ),
            ("has_wiki", true.into()),
            ("has_pull_requests", true.into()),
            ("has_projects", true.into()),
            ("projects_mode", "all".into()),
            ("has_releases", true.into()),
            ("has_packages", true.into()),
            ("has_actions", true.into()),
            ("ignore_whitespace_conflicts", false.into()),
            ("allow_merge_commits", true.into()),
            ("allow_rebase", true.into()),
            ("allow_rebase_explicit", true.into()),
            ("allow_squash_merge", true.into()),
            ("allow_fast_forward_only_merge", true.into()),
            ("allow_rebase_update", true.into()),
            ("allow_manual_merge", false.into()),
            ("autodetect_manual_merge", false.into()),
            ("default_delete_branch_after_merge", false.into()),
            ("default_merge_style", "merge".into()),
            ("default_allow_maintainer_edit", false.into()),
            ("avatar_url", "".into()),
            ("internal", false.into()),
            ("mirror_interval", "".into()),
            ("object_format_name", "sha1".into()),
            ("mirror_updated", "0001-01-01T00:00:00Z".into()),
            ("topics", J::Arr(Vec::new())),
            ("licenses", J::Arr(Vec::new())),
        ])
    }

    pub(crate) fn issue_html_url(&self, base: &str, issue: &Issue) -> String {
        let repo = self.repo_by_id(issue.repo_id);
        let kind = if issue.pull.is_some() {
            "pulls"
        } else {
            "issues"
        };
        format!(
            "{base}/{}/{}/{kind}/{}",
            repo.owner, repo.name, issue.number
        )
    }

    pub(crate) fn comment_count(&self, issue_id: i64) -> i64 {
        self.comments
            .iter()
            .filter(|c| c.issue_id == issue_id && c.plain)
            .count() as i64
    }

    /// `api.Issue`.
    pub(crate) fn issue_json(&self, base: &str, issue: &Issue, viewer: Option<&str>) -> J {
        let repo = self.repo_by_id(issue.repo_id);
        let html = self.issue_html_url(base, issue);
        let full_view = viewer.is_some_and(|v| v.eq_ignore_ascii_case(&issue.author));
        let pull_request = match &issue.pull {
            None => J::Null,
            Some(_) => obj(vec![
                ("merged", false.into()),
                ("merged_at", J::Null),
                ("draft", false.into()),
                ("html_url", (&html).into()),
            ]),
        };
        obj(vec![
            ("id", issue.id.into()),
            (
                "url",
                format!(
                    "{base}/api/v1/repos/{}/{}/issues/{}",
                    repo.owner, repo.name, issue.number
                )
                .into(),
            ),
            ("html_url", (&html).into()),
            ("number", issue.number.into()),
            ("user", self.user_json(base, &issue.author, full_view)),
            ("original_author", "".into()),
            ("original_author_id", 0.into()),
            ("title", (&issue.title).into()),
            ("body", (&issue.body).into()),
            ("ref", "".into()),
            ("assets", J::Arr(Vec::new())),
            ("labels", J::Arr(Vec::new())),
            ("milestone", J::Null),
            ("assignee", J::Null),
            ("assignees", J::Null),
            (
                "state",
                if issue.closed.is_some() {
                    "closed"
                } else {
                    "open"
                }
                .into(),
            ),
            ("is_locked", issue.locked.into()),
            ("comments", self.comment_count(issue.id).into()),
            ("created_at", rfc3339(issue.created).into()),
            ("updated_at", rfc3339(issue.updated).into()),
            (
                "closed_at",
                issue.closed.map(|t| J::from(rfc3339(t))).unwrap_or(J::Null),
            ),
            ("due_date", J::Null),
            ("time_estimate", 0.into()),
            ("pull_request", pull_request),
            (
                "repository",
                obj(vec![
                    ("id", repo.id.into()),
                    ("name", (&repo.name).into()),
                    ("owner", (&repo.owner).into()),
                    ("full_name", format!("{}/{}", repo.owner, repo.name).into()),
                ]),
            ),
            ("pin_order", 0.into()),
            ("content_version", 0.into()),
        ])
    }

    /// `api.PullRequest` (`git` resolves the branch tips now).
    pub(crate) fn pull_json(
        &self,
        base: &str,
        git: &GitRepos,
        issue: &Issue,
        viewer: Option<&str>,
    ) -> J {
        let repo = self.repo_by_id(issue.repo_id);
        let pull = issue.pull.as_ref().unwrap();
        let head_repo = self.repo_by_id(pull.head_repo_id.unwrap_or(repo.id));
        let html = self.issue_html_url(base, issue);
        let tip = |r: &Repo, branch: &str, fallback: &str| {
            git.try_branch_head(&r.owner, &r.name, branch)
                .unwrap_or_else(|| fallback.to_owned())
        };
        let branch = |r: &Repo, name: &str, sha: String| {
            // Gitea labels a fork's branch `owner:branch`.
            let label = if r.id == repo.id {
                name.to_owned()
            } else {
                format!("{}:{name}", r.owner)
            };
            obj(vec![
                ("label", label.into()),
                ("ref", name.into()),
                ("sha", sha.into()),
                ("repo_id", r.id.into()),
                ("repo", self.repo_json(base, r, viewer)),
            ])
        };
        let base_sha = tip(repo, &pull.base, &pull.base_sha);
        obj(vec![
            ("id", pull.id.into()),
            ("url", (&html).into()),
            ("number", issue.number.into()),
            ("user", self.user_json(base, &issue.author, false)),
            ("title", (&issue.title).into()),
            ("body", (&issue.body).into()),
            ("labels", J::Arr(Vec::new())),
            ("milestone", J::Null),
            ("assignee", J::Null),
            ("assignees", J::Null),
            ("requested_reviewers", J::Arr(Vec::new())),
            ("requested_reviewers_teams", J::Arr(Vec::new())),
            (
                "state",
                if issue.closed.is_some() {
                    "closed"
                } else {
                    "open"
                }
                .into(),
            ),
            ("draft", false.into()),
            ("is_locked", issue.locked.into()),
            ("comments", self.comment_count(issue.id).into()),
            ("additions", 0.into()),
            ("deletions", 0.into()),
            ("changed_files", 0.into()),
            ("html_url", (&html).into()),
            ("diff_url", format!("{html}.diff").into()),
            ("patch_url", format!("{html}.patch").into()),
            ("mergeable", true.into()),
            ("merged", false.into()),
            ("merged_at", J::Null),
            ("merge_commit_sha", J::Null),
            ("merged_by", J::Null),
            ("allow_maintainer_edit", false.into()),
            ("base", branch(repo, &pull.base, base_sha.clone())),
            (
                "head",
                branch(
                    head_repo,
                    &pull.head,
                    tip(head_repo, &pull.head, &pull.head_sha),
                ),
            ),
            ("merge_base", base_sha.into()),
            ("due_date", J::Null),
            ("created_at", rfc3339(issue.created).into()),
            ("updated_at", rfc3339(issue.updated).into()),
            ("closed_at", J::Null),
            ("pin_order", 0.into()),
            ("content_version", 0.into()),
        ])
    }

    /// `api.Comment`.
    pub(crate) fn comment_json(&self, base: &str, c: &Comment) -> J {
        let issue = self.issue(c.issue_id);
        let page = self.issue_html_url(base, issue);
        let (pr_url, issue_url) = if issue.pull.is_some() {
            (page.clone(), String::new())
        } else {
            (String::new(), page.clone())
        };
        obj(vec![
            ("id", c.id.into()),
            ("html_url", format!("{page}#issuecomment-{}", c.id).into()),
            ("pull_request_url", pr_url.into()),
            ("issue_url", issue_url.into()),
            ("user", self.user_json(base, &c.author, false)),
            ("original_author", "".into()),
            ("original_author_id", 0.into()),
            ("body", (&c.body).into()),
            ("assets", J::Arr(Vec::new())),
            ("created_at", rfc3339(c.created).into()),
            ("updated_at", rfc3339(c.updated).into()),
        ])
    }

    pub(crate) fn reaction_json(&self, base: &str, r: &Reaction) -> J {
        obj(vec![
            ("user", self.user_json(base, &r.user, false)),
            ("content", (&r.content).into()),
            ("created_at", rfc3339(r.created).into()),
        ])
    }

    /// `api.CommitStatus`: its `id` is the per-commit index, its state is
    /// under `status`, and `updated_at` repeats `created_at` (as Gitea's
    /// converter does).
    pub(crate) fn status_json(&self, base: &str, s: &CommitStatus) -> J {
        let repo = self.repo_by_id(s.repo_id);
        obj(vec![
            ("id", s.index.into()),
            ("status", (&s.state).into()),
            ("target_url", (&s.target_url).into()),
            ("description", (&s.description).into()),
            (
                "url",
                format!(
                    "{base}/api/v1/repos/{}/{}/statuses/{}",
                    repo.owner, repo.name, s.sha
                )
                .into(),
            ),
            ("context", (&s.context).into()),
            ("creator", self.user_json(base, &s.creator, false)),
            ("created_at", rfc3339(s.created).into()),
            ("updated_at", rfc3339(s.created).into()),
        ])
    }

    /// `api.PullReview` as `viewer` sees it (its reviewer sees its own
    /// user in full). No teams or branch protection here: `team` is null
    /// and `stale` false; `html_url` is the review's timeline entry.
    pub(crate) fn review_json(&self, base: &str, r: &Review, viewer: Option<&str>) -> J {
        let page = self.issue_html_url(base, self.issue(r.issue_id));
        let full = viewer.is_some_and(|v| v.eq_ignore_ascii_case(&r.reviewer));
        let html = r
            .comment_id
            .map(|c| format!("{page}#issuecomment-{c}"))
            .unwrap_or_default();
        obj(vec![
            ("id", r.id.into()),
            ("user", self.user_json(base, &r.reviewer, full)),
            ("team", J::Null),
            ("state", r.state.as_str().into()),
            ("body", (&r.body).into()),
            ("commit_id", (&r.commit_id).into()),
            ("stale", false.into()),
            ("official", r.official.into()),
            ("dismissed", r.dismissed.into()),
            ("comments_count", r.code_comments.into()),
            ("submitted_at", rfc3339(r.created).into()),
            ("updated_at", rfc3339(r.updated).into()),
            ("html_url", html.into()),
            ("pull_request_url", page.into()),
        ])
    }
}
