//! Gitea's REST routes under `/api/v1`, with its status codes, bodies and
//! permission rules.

use crate::giteasim::data::{Comment, Data, Perm, Reaction};
use crate::giteasim::json::obj;
use crate::giteasim::server::{
    authenticate, empty, error, json, not_found, query_param, Answer, Auth,
};
use crate::giteasim::{Sim, ALLOWED_REACTIONS, GITEA_VERSION, J};
use serde::Deserialize;

#[derive(Deserialize)]
pub(crate) struct BodyOption {
    #[serde(default)]
    pub(crate) body: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct ReactionOption {
    #[serde(default)]
    pub(crate) content: Option<String>,
}

/// Parse a JSON request body as binding does: malformed → 422.
pub(crate) fn bind<T: serde::de::DeserializeOwned>(base: &str, body: &[u8]) -> Result<T, Answer> {
    serde_json::from_slice(body).map_err(|e| error(base, 422, &e.to_string()))
}

pub(crate) fn api_answer(
    sim: &Sim,
    method: &str,
    path: &str,
    query: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Answer {
    let base = sim.base();
    let mut d = sim.data.lock().unwrap();
    let doer = match authenticate(&d, headers, query) {
        Auth::Invalid => return error(base, 401, "user does not exist [uid: 0, name: ]"),
        Auth::Anonymous => None,
        Auth::User(login) => Some(login),
    };
    let Some(rest) = path.strip_prefix("/api/v1/") else {
        return not_found(base);
    };
    let segs: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    if method == "GET" && segs == ["version"] {
        return json(200, obj(vec![("version", GITEA_VERSION.into())]));
    }
    let Some(doer) = doer else {
        return error(base, 401, "token is required");
    };
    match (method, segs.as_slice()) {
        ("GET", ["user"]) => json(200, d.user_json(base, &doer, true)),
        (_, ["repos", owner, name, rest @ ..]) => {
            repo_api(sim, &mut d, &doer, method, owner, name, rest, query, body)
        }
        _ => not_found(base),
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "a Gitea request's fields, as the simulator records them"
)]
pub(crate) fn repo_api(
    sim: &Sim,
    d: &mut Data,
    doer: &str,
    method: &str,
    owner: &str,
    name: &str,
    rest: &[&str],
    query: &str,
    body: &[u8],
) -> Answer {
    let base = sim.base();
    let Some(repo) = d.repo(owner, name) else {
        return not_found(base);
    };
    let perm = d.perm(repo, Some(doer));
    if perm == Perm::None {
        return not_found(base);
    }
    let repo_id = repo.id;
    let issue_of = |d: &Data, n: &str| {
        let n: i64 = n.parse().ok()?;
        d.issues
            .iter()
            .find(|i| i.repo_id == repo_id && i.number == n)
            .map(|i| i.id)
    };
    // A comment of this repository, by id.
    let comment_of = |d: &Data, id: &str| {
        let id: i64 = id.parse().ok()?;
        let c = d.comment(id)?;
        (d.issue(c.issue_id).repo_id == repo_id).then_some(id)
    };
    match (method, rest) {
        ("GET", []) => json(200, d.repo_json(base, d.repo_by_id(repo_id), Some(doer))),
        ("GET", ["issues", "comments", id]) => match comment_of(d, id) {
            None => not_found(base),
            Some(id) if !d.comment(id).unwrap().plain => empty(204),
            Some(id) => json(200, d.comment_json(base, d.comment(id).unwrap())),
        },
        ("PATCH" | "DELETE", ["issues", "comments", id]) => {
            let Some(id) = comment_of(d, id) else {
                return not_found(base);
            };
            let c = d.comment(id).unwrap();
            if !c.plain {
                return empty(204);
            }
            if !c.author.eq_ignore_ascii_case(doer) && perm < Perm::Write {
                return empty(403);
            }
            if method == "DELETE" {
                sim.comment_hook(d, "deleted", id, doer, None);
                d.comments.retain(|c| c.id != id);
                return empty(204);
            }
            let new_body = match bind::<BodyOption>(base, body) {
                Ok(BodyOption { body: Some(b) }) if !b.is_empty() => b,
                Ok(_) => return error(base, 422, "[Body]: Required"),
                Err(answer) => return answer,
            };
            let now = d.now();
            let c = d.comment_mut(id).unwrap();
            let old = std::mem::replace(&mut c.body, new_body);
            c.updated = now;
            sim.comment_hook(d, "edited", id, doer, Some(&old));
            json(200, d.comment_json(base, d.comment(id).unwrap()))
        }
        (_, ["issues", "comments", id, "reactions"]) => {
            let Some(id) = comment_of(d, id) else {
                return not_found(base);
            };
            reactions_api(d, base, doer, perm, method, id, body)
        }
        ("GET", ["issues", n, "comments"]) => {
            let Some(issue_id) = issue_of(d, n) else {
                return not_found(base);
            };
            let mut bounds = [i64::MIN, i64::MAX];
            for (i, key) in ["since", "before"].into_iter().enumerate() {
                if let Some(v) = query_param(query, key).filter(|v| !v.is_empty()) {
                    match chrono::DateTime::parse_from_rfc3339(&v) {
                        Ok(t) => bounds[i] = t.timestamp(),
                        Err(e) => return error(base, 422, &format!("parsing time {v:?}: {e}")),
                    }
                }
            }
            let list: Vec<J> = d
                .comments
                .iter()
                .filter(|c| c.issue_id == issue_id && c.plain)
                .filter(|c| c.updated >= bounds[0] && c.updated <= bounds[1])
                .map(|c| d.comment_json(base, c))
                .collect();
            Answer {
                status: 200,
                headers: vec![
                    ("X-Total-Count", list.len().to_string()),
                    ("Access-Control-Expose-Headers", "X-Total-Count".into()),
                ],
                body: Some(J::Arr(list)),
            }
        }
        ("POST", ["issues", n, "comments"]) => {
            let text = match bind::<BodyOption>(base, body) {
                Ok(BodyOption { body: Some(b) }) if !b.is_empty() => b,
                Ok(_) => return error(base, 422, "[Body]: Required"),
                Err(answer) => return answer,
            };
            let Some(issue_id) = issue_of(d, n) else {
                return not_found(base);
            };
            if d.issue(issue_id).locked && perm < Perm::Write {
                return error(base, 403, "You cannot comment on a locked issue.");
            }
            let (denied, dropped) = {
                let mut f = sim.faults.lock().unwrap();
                let denied = f.denied.contains(&doer.to_ascii_lowercase());
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
                    author: doer.to_owned(),
                    body: text,
                    plain: true,
                    created: now,
                    updated: now,
                    reactions: Vec::new(),
                };
                return json(201, d.comment_json(base, &ghost));
            }
            let id = d.add_comment(issue_id, doer, &text, true);
            sim.comment_hook(d, "created", id, doer, None);
            json(201, d.comment_json(base, d.comment(id).unwrap()))
        }
        ("GET", ["issues", n]) => match issue_of(d, n) {
            Some(id) => json(200, d.issue_json(base, d.issue(id), Some(doer))),
            None => not_found(base),
        },
        ("GET", ["pulls", n]) => match issue_of(d, n).filter(|id| d.issue(*id).pull.is_some()) {
            Some(id) => json(200, d.pull_json(base, &sim.git, d.issue(id), Some(doer))),
            None => not_found(base),
        },
        ("GET", ["collaborators", user, "permission"]) => {
            let site_admin = d.user(doer).is_some_and(|u| u.is_admin);
            if !site_admin && !doer.eq_ignore_ascii_case(user) && perm < Perm::Admin {
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
            let repo = d.repo_by_id(repo_id);
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
        _ => not_found(base),
    }
}

pub(crate) fn reactions_api(
    d: &mut Data,
    base: &str,
    doer: &str,
    perm: Perm,
    method: &str,
    id: i64,
    body: &[u8],
) -> Answer {
    if method == "GET" {
        let c = d.comment(id).unwrap();
        let list = c
            .reactions
            .iter()
            .map(|r| d.reaction_json(base, r))
            .collect();
        return json(200, J::Arr(list));
    }
    if method != "POST" && method != "DELETE" {
        return not_found(base);
    }
    let content = match bind::<ReactionOption>(base, body) {
        Ok(ReactionOption { content: Some(c) }) if !c.is_empty() => c,
        Ok(_) => return error(base, 422, "[Content]: Required"),
        Err(answer) => return answer,
    };
    let issue = d.issue(d.comment(id).unwrap().issue_id);
    if issue.locked && perm < Perm::Write {
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
    let c = d.comment_mut(id).unwrap();
    let mine = |r: &Reaction| r.user.eq_ignore_ascii_case(doer) && r.content == content;
    if method == "DELETE" {
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
