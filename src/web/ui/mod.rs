//! The operators' web view at `/admin`: one page (HTML, CSS and JS built into
//! the binary; no framework, no Node.js) that signs in with the admin token,
//! then talks only to the admin API (`/api/gitea-workflow/*`) with its session
//! cookie and follows `/api/gitea-workflow/events` for live updates. See
//! web/auth.rs for the cookie and the cross-site rules.

use crate::web::auth::{self, COOKIE, SESSION_SECS};
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::cookie::{time, Cookie, SameSite};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;

const LOGIN_HTML: &str = include_str!("login.html");
const APP_HTML: &str = include_str!("app.html");
const APP_CSS: &str = include_str!("app.css");
const APP_JS: &str = include_str!("app.js");
const ACTIONS_JS: &str = include_str!("actions.js");
const TRANSCRIPT_JS: &str = include_str!("transcript.js");
const CODEX_JS: &str = include_str!("codex.js");
const REPOS_JS: &str = include_str!("repos.js");
const CHARTS_JS: &str = include_str!("charts.js");
const WORKFLOWS_JS: &str = include_str!("workflows.js");
const WORKERS_JS: &str = include_str!("workers.js");

/// Only our own files: no inline script, nothing from elsewhere, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub fn config(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin", web::get().to(page))
        .route("/admin/", web::get().to(page))
        .route("/admin/login", web::post().to(login))
        .route("/admin/logout", web::post().to(logout))
        .route("/admin/assets/{name}", web::get().to(asset));
}

fn html(status: actix_web::http::StatusCode, body: String) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        // `same-origin`, not `no-referrer`: the latter makes browsers send
        // `Origin: null` on form posts, which the cross-site check refuses.
        .insert_header((header::REFERRER_POLICY, "same-origin"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .body(body)
}

fn login_page(status: actix_web::http::StatusCode, message: &str) -> HttpResponse {
    html(status, LOGIN_HTML.replace("<!--MESSAGE-->", message))
}

/// `GET /admin`: the app when signed in, else the sign-in form.
async fn page(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    if auth::has_session(&req, &state).await {
        html(
            actix_web::http::StatusCode::OK,
            APP_HTML
                .replace("{{instance}}", &escape(&state.config.instance_id))
                .replace(
                    "{{gitea}}",
                    &escape(&without_userinfo(
                        state.config.gitea_url.as_deref().unwrap_or(""),
                    )),
                ),
        )
    } else {
        login_page(actix_web::http::StatusCode::OK, "")
    }
}

async fn asset(path: web::Path<String>) -> HttpResponse {
    let (body, kind) = match path.as_str() {
        "app.css" => (APP_CSS, "text/css; charset=utf-8"),
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "actions.js" => (ACTIONS_JS, "text/javascript; charset=utf-8"),
        "transcript.js" => (TRANSCRIPT_JS, "text/javascript; charset=utf-8"),
        "codex.js" => (CODEX_JS, "text/javascript; charset=utf-8"),
        "repos.js" => (REPOS_JS, "text/javascript; charset=utf-8"),
        "charts.js" => (CHARTS_JS, "text/javascript; charset=utf-8"),
        "workflows.js" => (WORKFLOWS_JS, "text/javascript; charset=utf-8"),
        "workers.js" => (WORKERS_JS, "text/javascript; charset=utf-8"),
        _ => return HttpResponse::NotFound().finish(),
    };
    HttpResponse::Ok()
        .content_type(kind)
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// The session cookie's attributes, with an empty value (the sign-in signs one in).
fn session_cookie(req: &HttpRequest, max_age: i64) -> Cookie<'static> {
    Cookie::build(COOKIE, "")
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(crate::web::client::ClientInfo::of(req).secure)
        .max_age(time::Duration::seconds(max_age))
        .finish()
}

/// `POST /admin/login` (form field `token`): a session cookie, or the form again.
async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    form: web::Form<LoginForm>,
) -> Result<HttpResponse, ApiError> {
    auth::require_same_origin(&req)?;
    if !auth::is_admin_token(&state, form.token.trim()) {
        tracing::warn!("admin sign-in refused: wrong token");
        // Slow down guessing a little.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        return Ok(login_page(
            actix_web::http::StatusCode::UNAUTHORIZED,
            r#"<p class="error" id="login-error" role="alert">That token was refused. Use the admin_token of this server.</p>"#,
        ));
    }
    let jar = state
        .sessions
        .issue(session_cookie(&req, SESSION_SECS), auth::unix_now());
    tracing::info!("admin signed in to the web view");
    let mut resp = HttpResponse::SeeOther();
    resp.insert_header((header::LOCATION, "/admin"))
        .insert_header((header::CACHE_CONTROL, "no-store"));
    for cookie in jar.delta() {
        resp.cookie(cookie.clone());
    }
    Ok(resp.finish())
}

/// `POST /admin/logout`: signs the session out for every process on the
/// database and clears the cookie. When the store cannot record that, the
/// answer is a 503 and the cookie stays: clearing it in this browser alone
/// would look like a sign-out while a copy of the cookie still worked.
async fn logout(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    auth::require_same_origin(&req)?;
    if let Some(c) = req.cookie(COOKIE) {
        state
            .sessions
            .revoke(&state.store, &c, auth::unix_now())
            .await?;
        tracing::info!("admin signed out of the web view");
    }
    Ok(HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/admin"))
        .cookie(session_cookie(&req, 0))
        .finish())
}

/// Gitea's base URL for links, never with credentials someone put into it.
fn without_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return String::new();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{scheme}://{host}{path}")
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitea_links_never_carry_credentials() {
        assert_eq!(
            without_userinfo("https://bot:secret@git.example.com/sub"),
            "https://git.example.com/sub"
        );
        assert_eq!(
            without_userinfo("http://127.0.0.1:3000"),
            "http://127.0.0.1:3000"
        );
        assert_eq!(without_userinfo(""), "");
        assert_eq!(
            escape(r#"<a href="x">&"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;"
        );
    }
}
