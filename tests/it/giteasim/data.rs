//! The simulated instance's records (users, repositories, issues, comments,
//! pull request reviews) and the model rules over them (ids, the clock,
//! permissions, how a review is submitted).

/// A user's access to a repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Perm {
    None,
    Read,
    Write,
    Admin,
}

impl Perm {
    pub fn as_str(self) -> &'static str {
        match self {
            Perm::None => "none",
            Perm::Read => "read",
            Perm::Write => "write",
            Perm::Admin => "admin",
        }
    }
}

pub(crate) struct User {
    pub(crate) id: i64,
    pub(crate) login: String,
    pub(crate) full_name: String,
    pub(crate) is_admin: bool,
    pub(crate) token: Option<String>,
    pub(crate) created: i64,
}

pub(crate) struct Repo {
    pub(crate) id: i64,
    pub(crate) owner: String,
    pub(crate) name: String,
    pub(crate) private: bool,
    pub(crate) default_branch: String,
    pub(crate) perms: Vec<(String, Perm)>,
    pub(crate) created: i64,
    pub(crate) next_index: i64,
}

pub(crate) struct Pull {
    pub(crate) id: i64,
    /// The repository the head branch lives in when it is not the base
    /// repository (a fork).
    pub(crate) head_repo_id: Option<i64>,
    pub(crate) head: String,
    pub(crate) base: String,
    /// Tips when the PR was opened, used if a branch is gone.
    pub(crate) head_sha: String,
    pub(crate) base_sha: String,
}

pub(crate) struct Issue {
    pub(crate) id: i64,
    pub(crate) repo_id: i64,
    pub(crate) number: i64,
    pub(crate) title: String,
    pub(crate) body: String,
    pub(crate) author: String,
    pub(crate) locked: bool,
    /// Unix time it was closed (`None`: open).
    pub(crate) closed: Option<i64>,
    pub(crate) created: i64,
    pub(crate) updated: i64,
    pub(crate) pull: Option<Pull>,
}

#[derive(Clone)]
pub(crate) struct Reaction {
    pub(crate) user: String,
    pub(crate) content: String,
    pub(crate) created: i64,
}

pub(crate) struct Comment {
    pub(crate) id: i64,
    pub(crate) issue_id: i64,
    pub(crate) author: String,
    pub(crate) body: String,
    /// `false` for timeline events (label changes, commits pushed, ...), which
    /// share the comment table in Gitea but are not "comments" to the API.
    pub(crate) plain: bool,
    pub(crate) created: i64,
    pub(crate) updated: i64,
    pub(crate) reactions: Vec<Reaction>,
}

/// One commit status (Gitea's `commit_status` row).
pub(crate) struct CommitStatus {
    pub(crate) repo_id: i64,
    /// The full commit id the status was set on.
    pub(crate) sha: String,
    /// Per repository and commit, from 1: what the API calls the status's `id`.
    pub(crate) index: i64,
    /// As the client sent it: Gitea stores any word (only the five known
    /// ones count towards the combined state).
    pub(crate) state: String,
    pub(crate) target_url: String,
    pub(crate) description: String,
    pub(crate) context: String,
    pub(crate) creator: String,
    pub(crate) created: i64,
}

/// What a review says (Gitea's `ReviewType`, as the API names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReviewState {
    /// Not submitted yet: shown only to its reviewer (and site admins).
    Pending,
    Approved,
    Comment,
    RequestChanges,
}

impl ReviewState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReviewState::Pending => "PENDING",
            ReviewState::Approved => "APPROVED",
            ReviewState::Comment => "COMMENT",
            ReviewState::RequestChanges => "REQUEST_CHANGES",
        }
    }

    /// `(X-Gitea-Event, X-Gitea-Event-Type)` of the webhook a submitted
    /// review fires; a pending one fires none.
    pub(crate) fn hook_event(self) -> Option<(&'static str, &'static str)> {
        match self {
            ReviewState::Pending => None,
            ReviewState::Approved => {
                Some(("pull_request_approved", "pull_request_review_approved"))
            }
            ReviewState::Comment => Some(("pull_request_comment", "pull_request_review_comment")),
            ReviewState::RequestChanges => {
                Some(("pull_request_rejected", "pull_request_review_rejected"))
            }
        }
    }

    /// Approvals and requests for changes are the ones that count towards
    /// (or block) merging, so only they are ever official or dismissed.
    fn decisive(self) -> bool {
        matches!(self, ReviewState::Approved | ReviewState::RequestChanges)
    }
}

/// A pull request review (Gitea's `review` row).
pub(crate) struct Review {
    pub(crate) id: i64,
    pub(crate) issue_id: i64,
    pub(crate) reviewer: String,
    pub(crate) state: ReviewState,
    pub(crate) body: String,
    pub(crate) commit_id: String,
    /// By someone who may write to the repository, and the reviewer's
    /// latest approval or request for changes.
    pub(crate) official: bool,
    /// A later approval or request for changes by the same reviewer
    /// replaced it.
    pub(crate) dismissed: bool,
    /// How many inline (code) comments it holds; the simulator keeps no
    /// more of them.
    pub(crate) code_comments: i64,
    /// The timeline entry (a non-plain comment) its `html_url` points at:
    /// the first one made for it.
    pub(crate) comment_id: Option<i64>,
    pub(crate) created: i64,
    pub(crate) updated: i64,
}

#[derive(Default)]
pub(crate) struct Data {
    pub(crate) next_id: i64,
    pub(crate) users: Vec<User>,
    pub(crate) repos: Vec<Repo>,
    pub(crate) issues: Vec<Issue>,
    pub(crate) comments: Vec<Comment>,
    pub(crate) statuses: Vec<CommitStatus>,
    pub(crate) reviews: Vec<Review>,
    /// Added to the wall clock, in seconds.
    pub(crate) clock_offset: i64,
}

impl Data {
    pub(crate) fn alloc(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub(crate) fn now(&self) -> i64 {
        chrono::Utc::now().timestamp() + self.clock_offset
    }

    pub(crate) fn user(&self, login: &str) -> Option<&User> {
        self.users
            .iter()
            .find(|u| u.login.eq_ignore_ascii_case(login))
    }

    pub(crate) fn ensure_user(&mut self, login: &str) -> i64 {
        if let Some(u) = self.user(login) {
            return u.id;
        }
        let id = self.alloc();
        let created = self.now();
        self.users.push(User {
            id,
            login: login.to_owned(),
            full_name: String::new(),
            is_admin: false,
            token: None,
            created,
        });
        id
    }

    pub(crate) fn repo(&self, owner: &str, name: &str) -> Option<&Repo> {
        self.repos
            .iter()
            .find(|r| r.owner.eq_ignore_ascii_case(owner) && r.name.eq_ignore_ascii_case(name))
    }

    pub(crate) fn repo_mut(&mut self, owner: &str, name: &str) -> &mut Repo {
        self.repos
            .iter_mut()
            .find(|r| r.owner.eq_ignore_ascii_case(owner) && r.name.eq_ignore_ascii_case(name))
            .unwrap_or_else(|| panic!("giteasim: no repository {owner}/{name}"))
    }

    pub(crate) fn repo_by_id(&self, id: i64) -> &Repo {
        self.repos.iter().find(|r| r.id == id).unwrap()
    }

    pub(crate) fn issue_id(&self, owner: &str, name: &str, number: i64) -> Option<i64> {
        let repo = self.repo(owner, name)?;
        self.issues
            .iter()
            .find(|i| i.repo_id == repo.id && i.number == number)
            .map(|i| i.id)
    }

    pub(crate) fn issue(&self, id: i64) -> &Issue {
        self.issues.iter().find(|i| i.id == id).unwrap()
    }

    pub(crate) fn comment(&self, id: i64) -> Option<&Comment> {
        self.comments.iter().find(|c| c.id == id)
    }

    pub(crate) fn comment_mut(&mut self, id: i64) -> Option<&mut Comment> {
        self.comments.iter_mut().find(|c| c.id == id)
    }

    /// `login`'s access to the repository (`None` for anonymous).
    /// The user whose e-mail address is `email`, as Gitea matches a commit's
    /// author (the simulator's users have `<login>@example.com`).
    pub(crate) fn user_by_email(&self, email: &str) -> Option<&User> {
        let local = email.strip_suffix("@example.com")?;
        self.user(local)
    }

    pub(crate) fn perm(&self, repo: &Repo, login: Option<&str>) -> Perm {
        let Some(login) = login else {
            return if repo.private { Perm::None } else { Perm::Read };
        };
        if repo.owner.eq_ignore_ascii_case(login) || self.user(login).is_some_and(|u| u.is_admin) {
            return Perm::Admin;
        }
        let explicit = repo
            .perms
            .iter()
            .find(|(u, _)| u.eq_ignore_ascii_case(login))
            .map(|(_, p)| *p)
            .unwrap_or(Perm::None);
        if repo.private {
            explicit
        } else {
            explicit.max(Perm::Read)
        }
    }

    pub(crate) fn new_issue(
        &mut self,
        owner: &str,
        repo: &str,
        title: &str,
        body: &str,
        author: &str,
        pull: Option<Pull>,
    ) -> i64 {
        self.ensure_user(author);
        let id = self.alloc();
        let now = self.now();
        let r = self.repo_mut(owner, repo);
        let number = r.next_index;
        r.next_index += 1;
        let repo_id = r.id;
        self.issues.push(Issue {
            id,
            repo_id,
            number,
            title: title.to_owned(),
            body: body.to_owned(),
            author: author.to_owned(),
            locked: false,
            closed: None,
            created: now,
            updated: now,
            pull,
        });
        number
    }

    pub(crate) fn add_comment(
        &mut self,
        issue_id: i64,
        author: &str,
        body: &str,
        plain: bool,
    ) -> i64 {
        let id = self.alloc();
        let now = self.now();
        self.comments.push(Comment {
            id,
            issue_id,
            author: author.to_owned(),
            body: body.to_owned(),
            plain,
            created: now,
            updated: now,
            reactions: Vec::new(),
        });
        if let Some(issue) = self.issues.iter_mut().find(|i| i.id == issue_id) {
            issue.updated = now;
        }
        id
    }

    pub(crate) fn review(&self, id: i64) -> Option<&Review> {
        self.reviews.iter().find(|r| r.id == id)
    }

    /// Gitea's `SubmitReview`, after the API checked the event and body:
    /// the reviewer's pending review of this pull request, if there is one,
    /// becomes this review (keeping its id and creation time); otherwise a
    /// new review is made, and a new approval or request for changes
    /// dismisses the reviewer's earlier ones. Inline comments first go into
    /// the pending review (made for them if needed), so a review with
    /// comments always takes that path. An approval or request for changes
    /// is official when its reviewer may write (no branch protection here)
    /// and clears the official flag of the reviewer's earlier reviews.
    /// Every submission, pending included, adds a timeline entry. Returns
    /// the review's id.
    #[expect(
        clippy::too_many_arguments,
        reason = "a review's fields, as Gitea's SubmitReview takes them"
    )]
    pub(crate) fn submit_review(
        &mut self,
        issue_id: i64,
        reviewer: &str,
        state: ReviewState,
        body: &str,
        commit_id: &str,
        code_comments: i64,
        writer: bool,
    ) -> i64 {
        let now = self.now();
        let mine = |r: &Review| r.issue_id == issue_id && r.reviewer.eq_ignore_ascii_case(reviewer);
        let mut pending = self
            .reviews
            .iter()
            .position(|r| mine(r) && r.state == ReviewState::Pending);
        if pending.is_none() && code_comments > 0 {
            let id = self.alloc();
            self.reviews.push(Review {
                id,
                issue_id,
                reviewer: reviewer.to_owned(),
                state: ReviewState::Pending,
                body: String::new(),
                commit_id: commit_id.to_owned(),
                official: false,
                dismissed: false,
                code_comments: 0,
                comment_id: None,
                created: now,
                updated: now,
            });
            pending = Some(self.reviews.len() - 1);
        }
        if state.decisive() {
            for r in self.reviews.iter_mut().filter(|r| mine(r)) {
                r.official = false;
            }
        }
        let official = state.decisive() && writer;
        let id = match pending {
            Some(i) => {
                let r = &mut self.reviews[i];
                r.state = state;
                r.body = body.to_owned();
                r.commit_id = commit_id.to_owned();
                r.official = official;
                r.code_comments += code_comments;
                r.updated = now;
                r.id
            }
            None => {
                if state.decisive() {
                    for r in self
                        .reviews
                        .iter_mut()
                        .filter(|r| mine(r) && r.state.decisive())
                    {
                        r.dismissed = true;
                    }
                }
                let id = self.alloc();
                self.reviews.push(Review {
                    id,
                    issue_id,
                    reviewer: reviewer.to_owned(),
                    state,
                    body: body.to_owned(),
                    commit_id: commit_id.to_owned(),
                    official,
                    dismissed: false,
                    code_comments: 0,
                    comment_id: None,
                    created: now,
                    updated: now,
                });
                id
            }
        };
        let entry = self.add_comment(issue_id, reviewer, body, false);
        let review = self.reviews.iter_mut().find(|r| r.id == id).unwrap();
        review.comment_id.get_or_insert(entry);
        id
    }
}
