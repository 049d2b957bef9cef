//! The simulated instance's records (users, repositories, issues, comments)
//! and the model rules over them (ids, the clock, permissions).

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

#[derive(Default)]
pub(crate) struct Data {
    pub(crate) next_id: i64,
    pub(crate) users: Vec<User>,
    pub(crate) repos: Vec<Repo>,
    pub(crate) issues: Vec<Issue>,
    pub(crate) comments: Vec<Comment>,
    pub(crate) statuses: Vec<CommitStatus>,
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
}
