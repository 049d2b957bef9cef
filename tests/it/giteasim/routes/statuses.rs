//! Commit statuses: `POST/GET /repos/{o}/{r}/statuses/{sha}`, `GET
//! /repos/{o}/{r}/commits/{ref}/statuses` and the combined
//! `GET /repos/{o}/{r}/commits/{ref}/status`. Reading needs read access,
//! setting one write access (Gitea's `reqRepoWriter`).

use super::{bind, listed, InRepo, ListOptions};
use crate::giteasim::data::{CommitStatus, Data, Perm};
use crate::giteasim::json::obj;
use crate::giteasim::server::{error, json, query_param, Answer};
use crate::giteasim::J;
use serde::Deserialize;

/// Gitea's `CreateStatusOption`: every field optional, the state not
/// checked against the known words.
#[derive(Deserialize)]
struct CreateStatusOption {
    #[serde(default)]
    state: String,
    #[serde(default)]
    target_url: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    context: String,
}

const NOT_WRITER: &str = "user should have a permission to write to a repo";

/// Gitea's `CommitStatusState` priorities: lower is worse; a word it does
/// not know never wins.
fn priority(state: &str) -> Option<u8> {
    match state {
        "error" => Some(0),
        "failure" => Some(1),
        "warning" => Some(2),
        "pending" => Some(3),
        "success" => Some(4),
        "skipped" => Some(5),
        _ => None,
    }
}

/// `NoBetterThan`.
fn no_better_than(a: &str, b: &str) -> bool {
    match (priority(a), priority(b)) {
        (Some(a), Some(b)) => a <= b,
        _ => false,
    }
}

pub(super) fn route(r: &InRepo, d: &mut Data, rest: &[&str]) -> Option<Answer> {
    let call = r.call;
    let answer = match (call.method, rest) {
        ("POST", ["statuses", sha]) => create(r, d, sha),
        ("GET", ["statuses", sha]) => {
            let sha = full_sha(r, d, sha);
            list(r, d, &sha)
        }
        ("GET", ["commits", reference, "statuses"]) => {
            let sha = resolve_ref(r, d, reference);
            list(r, d, &sha)
        }
        ("GET", ["commits", reference, "status"]) => {
            let sha = resolve_ref(r, d, reference);
            combined(r, d, &sha)
        }
        _ => return None,
    };
    Some(answer)
}

/// Gitea's `MustConvertToSHA1`: a short id becomes the full one; anything
/// that names no commit stays as written.
fn full_sha(r: &InRepo, d: &Data, sha: &str) -> String {
    let repo = d.repo_by_id(r.repo_id);
    let looks_like_sha =
        (4..=40).contains(&sha.len()) && sha.bytes().all(|b| b.is_ascii_hexdigit());
    if looks_like_sha {
        if let Some(full) = r.call.sim.git.resolve_commit(&repo.owner, &repo.name, sha) {
            return full;
        }
    }
    sha.to_owned()
}

/// Gitea's `ResolveRefOrSha`: a branch's tip, else as [`full_sha`].
fn resolve_ref(r: &InRepo, d: &Data, reference: &str) -> String {
    let repo = d.repo_by_id(r.repo_id);
    match r
        .call
        .sim
        .git
        .try_branch_head(&repo.owner, &repo.name, reference)
    {
        Some(sha) => sha,
        None => full_sha(r, d, reference),
    }
}

/// `POST /statuses/{sha}`: 201 with the status. The commit must exist (a
/// full or short id, or a branch, as Gitea's `GetCommit` reads it; the
/// status is kept under the full id); when it does not, Gitea fails with a
/// bare 500.
fn create(r: &InRepo, d: &mut Data, sha: &str) -> Answer {
    let call = r.call;
    let base = call.base;
    if r.perm < Perm::Write {
        return error(base, 403, NOT_WRITER);
    }
    let form = match bind::<CreateStatusOption>(base, call.body) {
        Ok(form) => form,
        Err(answer) => return answer,
    };
    let repo = d.repo_by_id(r.repo_id);
    let Some(full) = call.sim.git.resolve_commit(&repo.owner, &repo.name, sha) else {
        return error(base, 500, "");
    };
    let index = d
        .statuses
        .iter()
        .filter(|s| s.repo_id == r.repo_id && s.sha == full)
        .map(|s| s.index)
        .max()
        .unwrap_or(0)
        + 1;
    let status = CommitStatus {
        repo_id: r.repo_id,
        sha: full,
        index,
        state: form.state,
        target_url: form.target_url.trim().to_owned(),
        description: form.description.trim().to_owned(),
        context: form.context.trim().to_owned(),
        creator: call.doer.to_owned(),
        created: d.now(),
    };
    let shown = d.status_json(base, &status);
    d.statuses.push(status);
    json(201, shown)
}

/// The statuses of `sha`: newest first unless `sort` says otherwise
/// (`oldest`, `recentupdate`, `leastupdate`, `leastindex`, `highestindex`;
/// statuses of one second come highest index first), `state` filters,
/// paged from page 1 with `Link` and `X-Total-Count`.
fn list(r: &InRepo, d: &Data, sha: &str) -> Answer {
    let call = r.call;
    let sort = query_param(call.query, "sort").unwrap_or_default();
    let state = query_param(call.query, "state").unwrap_or_default();
    // Gitea filters on these five words only; any other `state` is ignored.
    let by_state = matches!(
        state.as_str(),
        "pending" | "success" | "error" | "failure" | "warning"
    );
    let mut mine: Vec<&CommitStatus> = d
        .statuses
        .iter()
        .filter(|s| s.repo_id == r.repo_id && s.sha == sha)
        .filter(|s| !by_state || s.state == state)
        .collect();
    match sort.as_str() {
        "oldest" | "leastupdate" => mine.sort_by_key(|s| (s.created, s.index)),
        "leastindex" => mine.sort_by_key(|s| std::cmp::Reverse(s.index)),
        "highestindex" => mine.sort_by_key(|s| s.index),
        _ => mine.sort_by_key(|s| std::cmp::Reverse((s.created, s.index))),
    }
    let total = mine.len();
    let opts = ListOptions::from_query(call.query);
    let page = opts
        .page_of(mine)
        .into_iter()
        .map(|s| d.status_json(call.base, s))
        .collect();
    listed(call, page, total, Some(opts.size))
}

/// `GET /commits/{ref}/status`: the latest status of each context (the one
/// with the highest index), most recent first; the combined state is the
/// worst of them, `error` reported as `failure`. No status at all: Gitea's
/// empty `CombinedStatus`.
fn combined(r: &InRepo, d: &Data, sha: &str) -> Answer {
    let call = r.call;
    let mut latest: Vec<&CommitStatus> = Vec::new();
    for s in d
        .statuses
        .iter()
        .filter(|s| s.repo_id == r.repo_id && s.sha == sha)
    {
        match latest.iter_mut().find(|l| l.context == s.context) {
            Some(l) if l.index < s.index => *l = s,
            Some(_) => {}
            None => latest.push(s),
        }
    }
    latest.sort_by_key(|s| std::cmp::Reverse(s.index));
    if latest.is_empty() {
        return json(
            200,
            obj(vec![
                ("state", "".into()),
                ("sha", "".into()),
                ("total_count", 0.into()),
                ("statuses", J::Null),
                ("repository", J::Null),
                ("commit_url", "".into()),
                ("url", "".into()),
            ]),
        );
    }
    let contexts = latest.len();
    let page = ListOptions::from_query(call.query).page_of(latest);
    let mut state = String::new();
    for s in &page {
        if state.is_empty() || no_better_than(&s.state, &state) {
            state = s.state.clone();
        }
    }
    if state == "error" {
        state = "failure".into();
    }
    let statuses = page.iter().map(|s| d.status_json(call.base, s)).collect();
    let body = obj(vec![
        ("state", state.into()),
        ("sha", sha.into()),
        ("total_count", (page.len() as i64).into()),
        ("statuses", J::Arr(statuses)),
        (
            "repository",
            d.repo_json(call.base, d.repo_by_id(r.repo_id), Some(call.doer)),
        ),
        ("commit_url", "".into()),
        ("url", "".into()),
    ]);
    let mut answer = json(200, body);
    answer.headers = vec![
        ("X-Total-Count", contexts.to_string()),
        ("Access-Control-Expose-Headers", "X-Total-Count".into()),
    ];
    answer
}
