//! Gitea's REST routes under `/api/v1`, with its status codes, bodies and
//! permission rules: [`repos`] (repositories, issues, pulls, collaborators,
//! the caller's repositories), [`comments`] (comments and reactions),
//! [`hooks`] (repository webhooks), [`statuses`] (commit statuses),
//! [`reviews`] (pull request reviews). Here:
//! authentication, the dispatch, and Gitea's paging (`page`/`limit`,
//! `X-Total-Count`, `Link`).

mod comments;
mod hooks;
mod repos;
mod reviews;
mod statuses;

use crate::giteasim::data::{Data, Perm};
use crate::giteasim::json::obj;
use crate::giteasim::server::{authenticate, error, json, not_found, query_param, Answer, Auth};
use crate::giteasim::{Sim, GITEA_VERSION, J};

/// One API request, as the routes see it.
pub(crate) struct Call<'a> {
    pub(crate) sim: &'a Sim,
    /// Gitea's ROOT_URL without the trailing slash.
    pub(crate) base: &'a str,
    /// The authenticated user.
    pub(crate) doer: &'a str,
    pub(crate) method: &'a str,
    /// Without the query.
    pub(crate) path: &'a str,
    pub(crate) query: &'a str,
    pub(crate) body: &'a [u8],
}

/// A call on one repository the doer can see.
pub(crate) struct InRepo<'a> {
    pub(crate) call: &'a Call<'a>,
    pub(crate) repo_id: i64,
    /// The doer's access (never `None`: that is a 404 before any route).
    pub(crate) perm: Perm,
}

/// Parse a JSON request body as binding does: malformed → 422.
pub(crate) fn bind<T: serde::de::DeserializeOwned>(base: &str, body: &[u8]) -> Result<T, Answer> {
    serde_json::from_slice(body).map_err(|e| error(base, 422, &e.to_string()))
}

/// Gitea's `GetListOptions`: `page` as given (0 when absent or not a
/// number: some handlers then list everything), `limit` through
/// `ToCorrectPageSize` (default 30, at most `MAX_RESPONSE_ITEMS` = 50).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListOptions {
    pub(crate) page: i64,
    pub(crate) size: usize,
}

pub(crate) const DEFAULT_PAGING_NUM: usize = 30;
pub(crate) const MAX_RESPONSE_ITEMS: usize = 50;

impl ListOptions {
    pub(crate) fn from_query(query: &str) -> ListOptions {
        let int = |key: &str| {
            query_param(query, key)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(0)
        };
        let limit = int("limit");
        let size = if limit <= 0 {
            DEFAULT_PAGING_NUM
        } else {
            (limit as usize).min(MAX_RESPONSE_ITEMS)
        };
        ListOptions {
            page: int("page"),
            size,
        }
    }

    /// The items on this page (a page below 1 is page 1).
    pub(crate) fn page_of<T>(&self, items: Vec<T>) -> Vec<T> {
        let page = self.page.max(1) as usize;
        items
            .into_iter()
            .skip((page - 1) * self.size)
            .take(self.size)
            .collect()
    }
}

/// A 200 list with Gitea's paging headers: `Link` (only from the handlers
/// that call `SetLinkHeader`) then `X-Total-Count`, each named in
/// `Access-Control-Expose-Headers`.
pub(crate) fn listed(call: &Call, items: Vec<J>, total: usize, links: Option<usize>) -> Answer {
    let mut headers = Vec::new();
    let mut exposed = Vec::new();
    if let Some(link) = links.and_then(|size| link_header(call, total, size)) {
        headers.push(("Link", link));
        exposed.push("Link");
    }
    headers.push(("X-Total-Count", total.to_string()));
    exposed.push("X-Total-Count");
    headers.push(("Access-Control-Expose-Headers", exposed.join(", ")));
    Answer {
        status: 200,
        body: Some(J::Arr(items)),
        headers,
    }
}

/// Gitea's `SetLinkHeader`: `next`, `last`, `first`, `prev` as its
/// paginator has them, each the request's own URL (absolute, from ROOT_URL)
/// with `page` set and the query keys sorted as Go encodes them.
fn link_header(call: &Call, total: usize, size: usize) -> Option<String> {
    let asked = query_param(call.query, "page")
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0);
    let size = size.max(1);
    let total_pages = if total == 0 { 1 } else { total.div_ceil(size) };
    let current = (asked.max(1) as usize).min(total_pages);
    let has_next = total > current * size;
    let is_last = total == 0 || (total > (current - 1) * size && !has_next);
    let url = |page: usize| {
        let mut pairs: Vec<(String, String)> = form_urlencoded::parse(call.query.as_bytes())
            .filter(|(k, _)| k != "page")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        pairs.push(("page".into(), page.to_string()));
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish();
        format!("{}{}?{query}", call.base, call.path)
    };
    let mut links = Vec::new();
    if has_next {
        links.push(format!("<{}>; rel=\"next\"", url(current + 1)));
    }
    if !is_last {
        links.push(format!("<{}>; rel=\"last\"", url(total_pages)));
    }
    if current != 1 {
        links.push(format!("<{}>; rel=\"first\"", url(1)));
        links.push(format!("<{}>; rel=\"prev\"", url(current - 1)));
    }
    (!links.is_empty()).then(|| links.join(","))
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
    let call = Call {
        sim,
        base,
        doer: &doer,
        method,
        path,
        query,
        body,
    };
    match (method, segs.as_slice()) {
        ("GET", ["user"]) => json(200, d.user_json(base, &doer, true)),
        ("GET", ["user", "repos"]) => repos::user_repos(&call, &d),
        (_, ["repos", owner, name, rest @ ..]) => repo_api(&call, &mut d, owner, name, rest),
        _ => not_found(base),
    }
}

/// A repository's routes: 404 for a repository the doer cannot see (as for
/// one that does not exist), then each area's routes in turn.
fn repo_api(call: &Call, d: &mut Data, owner: &str, name: &str, rest: &[&str]) -> Answer {
    let Some(repo) = d.repo(owner, name) else {
        return not_found(call.base);
    };
    let perm = d.perm(repo, Some(call.doer));
    if perm == Perm::None {
        return not_found(call.base);
    }
    let r = InRepo {
        call,
        repo_id: repo.id,
        perm,
    };
    if let Some(answer) = comments::route(&r, d, rest) {
        return answer;
    }
    if let Some(answer) = hooks::route(&r, d, rest) {
        return answer;
    }
    if let Some(answer) = statuses::route(&r, d, rest) {
        return answer;
    }
    if let Some(answer) = reviews::route(&r, d, rest) {
        return answer;
    }
    repos::route(&r, d, rest).unwrap_or_else(|| not_found(call.base))
}
