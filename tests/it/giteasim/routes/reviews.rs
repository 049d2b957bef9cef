//! Pull request reviews: `GET /pulls/{n}/reviews` (Gitea's
//! `ListPullReviews`) and `POST /pulls/{n}/reviews` (`CreatePullReview`).
//! Both need only read access to the repository, as every `/pulls` route;
//! a number that is an issue, or no pull request at all, is a 404.

use super::{bind, listed, InRepo, ListOptions};
use crate::giteasim::data::{Data, Issue, Perm, ReviewState};
use crate::giteasim::server::{error, json, not_found, Answer};
use serde::Deserialize;

/// Gitea's `CreatePullReviewOptions`: nothing is required by the binding;
/// the handler decides what the event needs.
#[derive(Deserialize)]
struct CreatePullReviewOptions {
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    commit_id: Option<String>,
    #[serde(default)]
    comments: Option<Vec<CreatePullReviewComment>>,
}

/// One inline comment of a new review.
#[derive(Deserialize)]
#[expect(
    dead_code,
    reason = "parsed so that a malformed comment is a 422 as Gitea's binding \
              makes it; the simulator keeps only how many there are"
)]
struct CreatePullReviewComment {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    old_position: Option<i64>,
    #[serde(default)]
    new_position: Option<i64>,
}

pub(super) fn route(r: &InRepo, d: &mut Data, rest: &[&str]) -> Option<Answer> {
    let answer = match (r.call.method, rest) {
        ("GET", ["pulls", n, "reviews"]) => list(r, d, n),
        ("POST", ["pulls", n, "reviews"]) => create(r, d, n),
        _ => return None,
    };
    Some(answer)
}

/// The issue id of pull request `n` of this repository (a number Gitea
/// cannot parse reads as 0, which names nothing).
fn pull_of(r: &InRepo, d: &Data, n: &str) -> Option<i64> {
    let n: i64 = n.parse().ok()?;
    d.issues
        .iter()
        .find(|i| i.repo_id == r.repo_id && i.number == n && i.pull.is_some())
        .map(|i| i.id)
}

/// Gitea's `preparePullReviewType`: the review an event asks for, or the
/// 422 message. Events are matched exactly; any other word (or none) makes
/// a pending review, which, like a request for changes, needs a body that
/// is not blank. Nobody approves or rejects their own pull request.
fn review_state(
    pull: &Issue,
    doer: &str,
    event: &str,
    body: &str,
    has_comments: bool,
) -> Result<ReviewState, String> {
    let own = pull.author.eq_ignore_ascii_case(doer);
    let has_body = !body.trim().is_empty();
    let (state, needs_body) = match event {
        "APPROVED" if own => return Err("approve your own pull is not allowed".into()),
        "APPROVED" => (ReviewState::Approved, false),
        "REQUEST_CHANGES" if own => return Err("reject your own pull is not allowed".into()),
        "REQUEST_CHANGES" => (ReviewState::RequestChanges, true),
        "COMMENT" if !has_body && !has_comments => {
            return Err(format!("review event {event} requires a body or a comment"))
        }
        "COMMENT" => (ReviewState::Comment, false),
        _ => (ReviewState::Pending, true),
    };
    if needs_body && !has_body {
        return Err(format!("review event {event} requires a body"));
    }
    Ok(state)
}

/// `POST /pulls/{n}/reviews`: 200 with the review. The body is bound
/// first (malformed: 422), then the pull request looked up (404), then the
/// event checked (422). No `commit_id` means the commit
/// `refs/pull/<n>/head` names. With [`GiteaSim::drop_next_review_answer`]
/// the review lands and only the answer is lost.
///
/// [`GiteaSim::drop_next_review_answer`]: crate::giteasim::GiteaSim::drop_next_review_answer
fn create(r: &InRepo, d: &mut Data, n: &str) -> Answer {
    let call = r.call;
    let base = call.base;
    let form = match bind::<CreatePullReviewOptions>(base, call.body) {
        Ok(form) => form,
        Err(answer) => return answer,
    };
    let Some(issue_id) = pull_of(r, d, n) else {
        return not_found(base);
    };
    let body = form.body.unwrap_or_default();
    let comments = form.comments.unwrap_or_default().len() as i64;
    let event = form.event.unwrap_or_default();
    let state = match review_state(d.issue(issue_id), call.doer, &event, &body, comments > 0) {
        Ok(state) => state,
        Err(message) => return error(base, 422, &message),
    };
    let commit_id = match form.commit_id.filter(|c| !c.is_empty()) {
        Some(commit) => commit,
        None => {
            let repo = d.repo_by_id(r.repo_id);
            let number = d.issue(issue_id).number;
            let head = format!("refs/pull/{number}/head");
            match call.sim.git.resolve_commit(&repo.owner, &repo.name, &head) {
                Some(sha) => sha,
                // Gitea cannot read the pull request's head: a bare 500.
                None => return error(base, 500, ""),
            }
        }
    };
    let id = d.submit_review(
        issue_id,
        call.doer,
        state,
        &body,
        &commit_id,
        comments,
        r.perm >= Perm::Write,
    );
    call.sim.review_hook(d, id);
    let lost = {
        let mut f = call.sim.faults.lock().unwrap();
        let lost = f.lost_review_answers > 0;
        if lost {
            f.lost_review_answers -= 1;
        }
        lost
    };
    if lost {
        return error(base, 500, "");
    }
    json(
        200,
        d.review_json(base, d.review(id).unwrap(), Some(call.doer)),
    )
}

/// `GET /pulls/{n}/reviews`: oldest first (by creation, then id), paged
/// only when `page` is given (without it Gitea lists them all, whatever
/// `limit` says); no `Link`. Gitea pages and counts (`X-Total-Count`) every
/// review, then leaves out the pending ones of other users unless the
/// caller is a site admin: a page may come out short, and the total may
/// count reviews no page shows.
fn list(r: &InRepo, d: &Data, n: &str) -> Answer {
    let call = r.call;
    let Some(issue_id) = pull_of(r, d, n) else {
        return not_found(call.base);
    };
    let mut all: Vec<_> = d
        .reviews
        .iter()
        .filter(|x| x.issue_id == issue_id)
        .collect();
    all.sort_by_key(|x| (x.created, x.id));
    let total = all.len();
    let opts = ListOptions::from_query(call.query);
    let shown = if opts.page > 0 {
        opts.page_of(all)
    } else {
        all
    };
    let admin = d.user(call.doer).is_some_and(|u| u.is_admin);
    let list = shown
        .into_iter()
        .filter(|x| {
            x.state != ReviewState::Pending || admin || x.reviewer.eq_ignore_ascii_case(call.doer)
        })
        .map(|x| d.review_json(call.base, x, Some(call.doer)))
        .collect();
    listed(call, list, total, None)
}
