//! Repositories, issues, pulls and collaborators: `GET /repos/{o}/{r}`,
//! `/issues/{n}`, `/pulls/{n}`, `/collaborators/{user}/permission`,
//! `/git/commits/{sha}`, and the
//! caller's own repositories, `GET /user/repos`.

use super::{listed, Call, InRepo, ListOptions};
use crate::giteasim::data::{Data, Perm};
use crate::giteasim::json::obj;
use crate::giteasim::server::{error, json, not_found, Answer};

pub(super) fn route(r: &InRepo, d: &mut Data, rest: &[&str]) -> Option<Answer> {
    let call = r.call;
    let base = call.base;
    let doer = call.doer;
    let issue_of = |d: &Data, n: &str| {
        let n: i64 = n.parse().ok()?;
        d.issues
            .iter()
            .find(|i| i.repo_id == r.repo_id && i.number == n)
            .map(|i| i.id)
    };
    let answer = match (call.method, rest) {
        ("GET", []) => json(200, d.repo_json(base, d.repo_by_id(r.repo_id), Some(doer))),
        ("GET", ["issues", n]) => match issue_of(d, n) {
            Some(id) => json(200, d.issue_json(base, d.issue(id), Some(doer))),
            None => not_found(base),
        },
        ("GET", ["pulls", n]) => match issue_of(d, n).filter(|id| d.issue(*id).pull.is_some()) {
            Some(id) => json(
                200,
                d.pull_json(base, &call.sim.git, d.issue(id), Some(doer)),
            ),
            None => not_found(base),
        },
        ("GET", ["pulls", n, "files"]) => {
            match issue_of(d, n).filter(|id| d.issue(*id).pull.is_some()) {
                Some(id) => pull_files(r, d, id, n),
                None => not_found(base),
            }
        }
        ("GET", ["collaborators", user, "permission"]) => permission(r, d, user),
        ("GET", ["git", "commits", sha]) => commit(r, d, sha),
        _ => return None,
    };
    Some(answer)
}

/// `GET /pulls/{n}/files` (`api.ChangedFile`): the files changed between
/// the merge base and `refs/pull/<n>/head`, paged, with `Link` and
/// `X-Total-Count` as Gitea's handler sets them.
fn pull_files(r: &InRepo, d: &Data, issue_id: i64, number: &str) -> Answer {
    let call = r.call;
    let repo = d.repo_by_id(r.repo_id);
    let pull = d.issue(issue_id).pull.as_ref().unwrap();
    let head = format!("refs/pull/{number}/head");
    let base = format!("refs/heads/{}", pull.base);
    let files = call
        .sim
        .git
        .changed_files(&repo.owner, &repo.name, &base, &head);
    let total = files.len();
    let opts = ListOptions::from_query(call.query);
    let web = format!("{}/{}/{}", call.base, repo.owner, repo.name);
    let list = opts
        .page_of(files)
        .into_iter()
        .map(|(status, name, adds, dels)| {
            obj(vec![
                ("filename", (&name).into()),
                ("status", status.into()),
                ("additions", adds.into()),
                ("deletions", dels.into()),
                ("changes", (adds + dels).into()),
                ("html_url", format!("{web}/src/commit/{head}/{name}").into()),
                (
                    "contents_url",
                    format!(
                        "{}/api/v1/repos/{}/{}/contents/{name}?ref={head}",
                        call.base, repo.owner, repo.name
                    )
                    .into(),
                ),
                ("raw_url", format!("{web}/raw/commit/{head}/{name}").into()),
            ])
        })
        .collect();
    listed(call, list, total, Some(opts.size))
}

/// `GET /git/commits/{sha}` (`api.Commit`, the fields the bridge reads and
/// their neighbours): `author` is the user whose e-mail address the
/// commit's author has, `null` when no user has it; 404 for a commit the
/// repository does not have (a fork pull request's commits are in the base
/// repository under `refs/pull/<n>/head`).
fn commit(r: &InRepo, d: &Data, sha: &str) -> Answer {
    let call = r.call;
    let base = call.base;
    let repo = d.repo_by_id(r.repo_id);
    let git = &call.sim.git;
    let Some(full) = git.resolve_commit(&repo.owner, &repo.name, sha) else {
        return error(base, 404, &format!("sha not found [sha: {sha}]"));
    };
    let email = git
        .commit_author_email(&repo.owner, &repo.name, &full)
        .unwrap_or_default();
    let user = d
        .user_by_email(&email)
        .map(|u| d.user_json(base, &u.login, false))
        .unwrap_or(crate::giteasim::J::Null);
    let url = format!(
        "{base}/api/v1/repos/{}/{}/git/commits/{full}",
        repo.owner, repo.name
    );
    let person = obj(vec![
        ("name", email.split('@').next().unwrap_or_default().into()),
        ("email", (&email).into()),
        ("date", "2026-01-01T00:00:00Z".into()),
    ]);
    json(
        200,
        obj(vec![
            ("url", (&url).into()),
            ("sha", (&full).into()),
            ("created", "2026-01-01T00:00:00Z".into()),
            (
                "html_url",
                format!("{base}/{}/{}/commit/{full}", repo.owner, repo.name).into(),
            ),
            (
                "commit",
                obj(vec![
                    ("url", (&url).into()),
                    ("author", person.clone()),
                    ("committer", person),
                    ("message", "".into()),
                ]),
            ),
            ("author", user.clone()),
            ("committer", user),
            ("parents", crate::giteasim::J::Arr(Vec::new())),
        ]),
    )
}

/// `GET /collaborators/{user}/permission`: 403 unless the caller is site
/// admin, repository admin or asks about itself; 404 for an unknown user.
fn permission(r: &InRepo, d: &Data, user: &str) -> Answer {
    let call = r.call;
    let base = call.base;
    let site_admin = d.user(call.doer).is_some_and(|u| u.is_admin);
    if !site_admin && !call.doer.eq_ignore_ascii_case(user) && r.perm < Perm::Admin {
        return error(
            base,
            403,
            "Only admins can query all permissions, repo admins can query all repo \
             permissions, collaborators can query only their own",
        );
    }
    let Some(target) = d.user(user).map(|u| u.login.clone()) else {
        return error(
            base,
            404,
            &format!("user does not exist [uid: 0, name: {user}]"),
        );
    };
    let repo = d.repo_by_id(r.repo_id);
    let p = d.perm(repo, Some(&target));
    let role = if repo.owner.eq_ignore_ascii_case(&target) {
        "owner"
    } else {
        p.as_str()
    };
    json(
        200,
        obj(vec![
            ("permission", p.as_str().into()),
            ("role_name", role.into()),
            ("user", d.user_json(base, &target, false)),
        ]),
    )
}

/// `GET /user/repos`: the repositories the caller owns or collaborates on
/// (a site administrator's included, not everyone's), by name, each with
/// the caller's `permissions`; paged (page 1 when not given), `Link` and
/// `X-Total-Count`.
pub(super) fn user_repos(call: &Call, d: &Data) -> Answer {
    let mut mine: Vec<_> = d
        .repos
        .iter()
        .filter(|r| {
            r.owner.eq_ignore_ascii_case(call.doer)
                || r.perms
                    .iter()
                    .any(|(u, p)| u.eq_ignore_ascii_case(call.doer) && *p > Perm::None)
        })
        .collect();
    mine.sort_by_key(|r| (r.name.to_ascii_lowercase(), r.id));
    let total = mine.len();
    let opts = ListOptions::from_query(call.query);
    let list = opts
        .page_of(mine)
        .into_iter()
        .map(|r| d.repo_json(call.base, r, Some(call.doer)))
        .collect();
    listed(call, list, total, Some(opts.size))
}
