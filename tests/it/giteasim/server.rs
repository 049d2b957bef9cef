//! The HTTP side: every request is logged, meets the injected faults, is
//! authenticated as Gitea does, and goes to git or to the REST routes.

use crate::giteasim::data::{Data, Perm};
use crate::giteasim::faults::FaultKind;
use crate::giteasim::json::{go_json, obj};
use crate::giteasim::routes::api_answer;
use crate::giteasim::LoggedRequest;
use crate::giteasim::{Sim, J, JSON_CT};
use actix_web::{web, HttpRequest, HttpResponse};

/// An API answer, turned into an `HttpResponse` on the server thread.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Option<J>,
    pub(crate) headers: Vec<(&'static str, String)>,
}

pub(crate) fn json(status: u16, body: J) -> Answer {
    Answer {
        status,
        body: Some(body),
        headers: Vec::new(),
    }
}

pub(crate) fn empty(status: u16) -> Answer {
    Answer {
        status,
        body: None,
        headers: Vec::new(),
    }
}

/// Gitea's `APIError` body.
pub(crate) fn error(base: &str, status: u16, message: &str) -> Answer {
    json(
        status,
        obj(vec![
            ("message", message.into()),
            ("url", format!("{base}/api/swagger").into()),
        ]),
    )
}

/// Gitea's `APIErrorNotFound` body (a Go map: keys sorted).
pub(crate) fn not_found(base: &str) -> Answer {
    json(
        404,
        obj(vec![
            ("errors", J::Null),
            ("message", "The target couldn't be found.".into()),
            ("url", format!("{base}/api/swagger").into()),
        ]),
    )
}

impl Answer {
    pub(crate) fn into_response(self) -> HttpResponse {
        let status = actix_web::http::StatusCode::from_u16(self.status).unwrap();
        let mut resp = HttpResponse::build(status);
        for (k, v) in self.headers {
            resp.insert_header((k, v));
        }
        match self.body {
            Some(body) => {
                // Go's json.Encoder: compact, HTML-escaped, trailing newline.
                let mut bytes = go_json(&body, false);
                bytes.push(b'\n');
                resp.insert_header(("Content-Type", JSON_CT)).body(bytes)
            }
            None => resp.finish(),
        }
    }
}

pub(crate) fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

pub(crate) fn query_param(query: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Standard base64 (padding optional), for HTTP basic credentials.
pub(crate) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

pub(crate) enum Auth {
    Anonymous,
    User(String),
    /// Credentials that match no token.
    Invalid,
}

/// Gitea's `parseToken` plus basic auth with a token.
pub(crate) fn authenticate(d: &Data, headers: &[(String, String)], query: &str) -> Auth {
    let by_token = |t: &str| {
        d.users
            .iter()
            .find(|u| u.token.as_deref() == Some(t))
            .map(|u| u.login.clone())
    };
    let found = |login: Option<String>| login.map_or(Auth::Invalid, Auth::User);
    if let Some(value) = header(headers, "authorization") {
        let (scheme, rest) = value.trim().split_once(' ').unwrap_or((value, ""));
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("token") || scheme.eq_ignore_ascii_case("bearer") {
            return found(by_token(rest));
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64_decode(rest).and_then(|b| String::from_utf8(b).ok());
            let Some((user, pass)) = decoded.as_deref().and_then(|s| s.split_once(':')) else {
                return Auth::Invalid;
            };
            return found(by_token(pass).or_else(|| by_token(user)));
        }
        return Auth::Invalid;
    }
    match query_param(query, "token").or_else(|| query_param(query, "access_token")) {
        Some(t) => found(by_token(&t)),
        None => Auth::Anonymous,
    }
}

/// Every request: log it, apply faults, then git or the API.
pub(crate) async fn handle(
    req: HttpRequest,
    body: web::Bytes,
    sim: web::Data<Sim>,
) -> HttpResponse {
    let received = std::time::Instant::now();
    let method = req.method().as_str().to_owned();
    let path = req.path().to_owned();
    let query = req.query_string().to_owned();
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let (delay, fail) = {
        let mut f = sim.faults.lock().unwrap();
        let mut delay = f.delay;
        let (mut fail, mut delayed) = (false, false);
        for fault in f.list.iter_mut().filter(|x| x.on.hits(&method, &path)) {
            match fault.kind {
                FaultKind::Fail500 if !fail => {
                    fail = true;
                    fault.left -= 1;
                }
                FaultKind::Delay(d) if !delayed => {
                    delayed = true;
                    delay += d;
                    fault.left -= 1;
                }
                _ => {}
            }
        }
        f.list.retain(|x| x.left > 0);
        (delay, fail)
    };
    if !delay.is_zero() {
        // The slow-server fault a test injected: the wait is the fault.
        tokio::time::sleep(delay).await;
    }
    let api = path.starts_with("/api/");
    let response = if fail && api {
        // Production Gitea hides the message of a 500 from non-admins.
        error(sim.base(), 500, "").into_response()
    } else if fail {
        HttpResponse::InternalServerError().body("injected fault\n")
    } else if api {
        api_answer(&sim, &method, &path, &query, &headers, &body).into_response()
    } else {
        git_http(&sim, &req, &headers, body.clone()).await
    };
    sim.requests.lock().unwrap().push(LoggedRequest {
        method,
        path,
        query,
        authorization: header(&headers, "authorization").map(str::to_owned),
        headers,
        body: if api {
            String::from_utf8_lossy(&body).into_owned()
        } else {
            String::new()
        },
        status: response.status().as_u16(),
        received,
    });
    response
}

/// Smart HTTP for `/<owner>/<name>.git/...`: read needs read access, push
/// write access; anonymous requests to private repositories get Gitea's 401.
pub(crate) async fn git_http(
    sim: &Sim,
    req: &HttpRequest,
    headers: &[(String, String)],
    body: web::Bytes,
) -> HttpResponse {
    let path = req.path();
    let mut segs = path.trim_start_matches('/').splitn(3, '/');
    let owner = segs.next().unwrap_or_default();
    let name = segs.next().unwrap_or_default().trim_end_matches(".git");
    let push = path.ends_with("/git-receive-pack")
        || query_param(req.query_string(), "service").as_deref() == Some("git-receive-pack");
    let unauthorized = || {
        HttpResponse::Unauthorized()
            .insert_header(("WWW-Authenticate", r#"Basic realm="Gitea""#))
            .body("Unauthorized\n")
    };
    let user = {
        let d = sim.data.lock().unwrap();
        let user = match authenticate(&d, headers, req.query_string()) {
            Auth::Invalid => return unauthorized(),
            Auth::Anonymous => None,
            Auth::User(login) => Some(login),
        };
        let Some(repo) = d.repo(owner, name) else {
            return HttpResponse::NotFound().body("Not found.\n");
        };
        let perm = d.perm(repo, user.as_deref());
        let needed = if push { Perm::Write } else { Perm::Read };
        if perm < needed {
            return match (&user, perm) {
                (None, _) => unauthorized(),
                (Some(_), Perm::None) => HttpResponse::NotFound().body("Not found.\n"),
                (Some(_), _) => HttpResponse::Forbidden().body("Forbidden\n"),
            };
        }
        user
    };
    sim.git.serve(req, headers, body, user).await
}
