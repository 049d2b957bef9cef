//! Comments and their reactions: one comment (`GET/PATCH/DELETE
//! /issues/comments/{id}`), an issue's comments (`GET/POST
//! /issues/{n}/comments`), the repository's comments (`GET
//! /issues/comments`), reactions (`/issues/comments/{id}/reactions`).

use super::{bind, listed, InRepo, ListOptions};
use crate::giteasim::data::{Comment, Data, Perm, Reaction};
use crate::giteasim::server::{empty, error, json, not_found, query_param, Answer};
use crate::giteasim::{ALLOWED_REACTIONS, J};
use serde::Deserialize;

#[derive(Deserialize)]
struct BodyOption {
    #[serde(default)]
    body: Option<String>,
}

#[derive(Deserialize)]
struct ReactionOption {
    #[serde(default)]
    content: Option<String>,
}

/// The `since`/`before` bounds as Gitea's `GetQueryBeforeSince` reads them
/// (RFC 3339, inclusive, on the *updated* time); a bad value is 422.
fn time_bounds(base: &str, query: &str) -> Result<[i64; 2], Answer> {
    let mut bounds = [i64::MIN, i64::MAX];
    for (i, key) in ["since", "before"].into_iter().enumerate() {
        if let Some(v) = query_param(query, key).filter(|v| !v.is_empty()) {
            match chrono::DateTime::parse_from_rfc3339(&v) {
                Ok(t) => bounds[i] = t.timestamp(),
                Err(e) => return Err(error(base, 422, &format!("parsing time {v:?}: {e}"))),
            }
        }
    }
    Ok(bounds)
}

/// The new body of a create or edit: 422 when missing or empty.
fn body_of(base: &str, body: &[u8]) -> Result<String, Answer> {
    match bind::<BodyOption>(base, body) {
        Ok(BodyOption { body: Some(b) }) if !b.is_empty() => Ok(b),
        Ok(_) => Err(error(base, 422, "[Body]: Required")),
        Err(answer) => Err(answer),
    }
}

pub(super) fn route(r: &InRepo, d: &mut Data, rest: &[&str]) -> Option<Answer> {
    let call = r.call;
    let base = call.base;
    let issue_of = |d: &Data, n: &str| {
        let n: i64 = n.parse().ok()?;
        d.issues
            .iter()
            .find(|i| i.repo_id == r.repo_id && i.number == n)
            .map(|i| i.id)
    };
    // A comment of this repository, by id.
    let comment_of = |d: &Data, id: &str| {
        let id: i64 = id.parse().ok()?;
        let c = d.comment(id)?;
        (d.issue(c.issue_id).repo_id == r.repo_id).then_some(id)
    };
    let answer = match (call.method, rest) {
        ("GET", ["issues", "comments"]) => repo_comments(r, d),
        ("GET", ["issues", "comments", id]) => match comment_of(d, id) {
            None => not_found(base),
            Some(id) if !d.comment(id).unwrap().plain => empty(204),
            Some(id) => json(200, d.comment_json(base, d.comment(id).unwrap())),
        },
        ("PATCH" | "DELETE", ["issues", "comments", id]) => {
            let Some(id) = comment_of(d, id) else {
                return Some(not_found(base));
            };
            change_comment(r, d, id)
        }
        (_, ["issues", "comments", id, "reactions"]) => {
            let Some(id) = comment_of(d, id) else {
                return Some(not_found(base));
            };
            reactions(r, d, id)
        }
        ("GET", ["issues", n, "comments"]) => {
            let Some(issue_id) = issue_of(d, n) else {
                return Some(not_found(base));
            };
            let [since, before] = match time_bounds(base, call.query) {
                Ok(b) => b,
                Err(answer) => return Some(answer),
            };
            let list: Vec<J> = d
                .comments
                .iter()
                .filter(|c| c.issue_id == issue_id && c.plain)
                .filter(|c| c.updated >= since && c.updated <= before)
                .map(|c| d.comment_json(base, c))
                .collect();
            let total = list.len();
            listed(call, list, total, None)
        }
        ("POST", ["issues", n, "comments"]) => {
            let text = match body_of(base, call.body) {
                Ok(text) => text,
                Err(answer) => return Some(answer),
            };
            let Some(issue_id) = issue_of(d, n) else {
                return Some(not_found(base));
            };
            create_comment(r, d, issue_id, text)
        }
        _ => return None,
    };
    Some(answer)
}

/// `GET /issues/comments`: the repository's plain comments, ordered by
/// creation (then id) as Gitea's `FindComments` does, `since`/`before` on
/// the updated time; paged only when `page` is given (without it Gitea
/// returns them all, whatever `limit` says); `X-Total-Count` counts them
/// all; no `Link`.
fn repo_comments(r: &InRepo, d: &Data) -> Answer {
    let call = r.call;
    let [since, before] = match time_bounds(call.base, call.query) {
        Ok(b) => b,
        Err(answer) => return answer,
    };
    let mut matching: Vec<&Comment> = d
        .comments
        .iter()
        .filter(|c| c.plain && d.issue(c.issue_id).repo_id == r.repo_id)
        .filter(|c| c.updated >= since && c.updated <= before)
        .collect();
    matching.sort_by_key(|c| (c.created, c.id));
    let total = matching.len();
    let opts = ListOptions::from_query(call.query);
    let shown = if opts.page > 0 {
        opts.page_of(matching)
    } else {
        matching
    };
    let list = shown
        .into_iter()
        .map(|c| d.comment_json(call.base, c))
        .collect();
    listed(call, list, total, None)
}

/// `PATCH`/`DELETE /issues/comments/{id}`: 204 for a comment that is not a
/// plain one; 403 with an empty body for someone neither author nor writer.
fn change_comment(r: &InRepo, d: &mut Data, id: i64) -> Answer {
    let call = r.call;
    let c = d.comment(id).unwrap();
    if !c.plain {
        return empty(204);
    }
    if !c.author.eq_ignore_ascii_case(call.doer) && r.perm < Perm::Write {
        return empty(403);
    }
    if call.method == "DELETE" {
        call.sim.comment_hook(d, "deleted", id, call.doer, None);
        d.comments.retain(|c| c.id != id);
        return empty(204);
    }
    let new_body = match body_of(call.base, call.body) {
        Ok(text) => text,
        Err(answer) => return answer,
    };
    let now = d.now();
    let c = d.comment_mut(id).unwrap();
    let old = std::mem::replace(&mut c.body, new_body);
    c.updated = now;
    call.sim
        .comment_hook(d, "edited", id, call.doer, Some(&old));
    json(200, d.comment_json(call.base, d.comment(id).unwrap()))
}

/// `POST /issues/{n}/comments`, with the injected faults (a blocked user,
/// a comment answered but never stored).
fn create_comment(r: &InRepo, d: &mut Data, issue_id: i64, text: String) -> Answer {
    let call = r.call;
    let base = call.base;
    if d.issue(issue_id).locked && r.perm < Perm::Write {
        return error(base, 403, "You cannot comment on a locked issue.");
    }
    let (denied, dropped) = {
        let mut f = call.sim.faults.lock().unwrap();
        let denied = f.denied.contains(&call.doer.to_ascii_lowercase());
        let dropped = !denied && f.drop_comments > 0;
        if dropped {
            f.drop_comments -= 1;
        }
        (denied, dropped)
    };
    if denied {
        return error(base, 403, "user is blocked");
    }
    if dropped {
        let now = d.now();
        let ghost = Comment {
            id: d.alloc(),
            issue_id,
            author: call.doer.to_owned(),
            body: text,
            plain: true,
            created: now,
            updated: now,
            reactions: Vec::new(),
        };
        return json(201, d.comment_json(base, &ghost));
    }
    let id = d.add_comment(issue_id, call.doer, &text, true);
    call.sim.comment_hook(d, "created", id, call.doer, None);
    json(201, d.comment_json(base, d.comment(id).unwrap()))
}

/// `/issues/comments/{id}/reactions`: POST 201 new, 200 already there, 403
/// for a reaction not allowed or a locked issue without write; DELETE 200.
fn reactions(r: &InRepo, d: &mut Data, id: i64) -> Answer {
    let call = r.call;
    let base = call.base;
    if call.method == "GET" {
        let c = d.comment(id).unwrap();
        let list = c
            .reactions
            .iter()
            .map(|r| d.reaction_json(base, r))
            .collect();
        return json(200, J::Arr(list));
    }
    if call.method != "POST" && call.method != "DELETE" {
        return not_found(base);
    }
    let content = match bind::<ReactionOption>(base, call.body) {
        Ok(ReactionOption { content: Some(c) }) if !c.is_empty() => c,
        Ok(_) => return error(base, 422, "[Content]: Required"),
        Err(answer) => return answer,
    };
    let issue = d.issue(d.comment(id).unwrap().issue_id);
    if issue.locked && r.perm < Perm::Write {
        return error(base, 403, "no permission to change reaction");
    }
    if !ALLOWED_REACTIONS.contains(&content.as_str()) {
        return error(
            base,
            403,
            &format!("'{content}' is not an allowed reaction"),
        );
    }
    let now = d.now();
    let doer = call.doer;
    let c = d.comment_mut(id).unwrap();
    let mine = |r: &Reaction| r.user.eq_ignore_ascii_case(doer) && r.content == content;
    if call.method == "DELETE" {
        c.reactions.retain(|r| !mine(r));
        return empty(200);
    }
    if let Some(existing) = c.reactions.iter().find(|r| mine(r)).cloned() {
        return json(200, d.reaction_json(base, &existing));
    }
    let reaction = Reaction {
        user: doer.to_owned(),
        content,
        created: now,
    };
    c.reactions.push(reaction.clone());
    json(201, d.reaction_json(base, &reaction))
}
