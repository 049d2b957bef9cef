//! Admin authentication. Two ways in, one check for every admin route:
//!
//! - `Authorization: Bearer <admin_token>` (scripts, the CLI), compared in
//!   constant time;
//! - the web view's session cookie `cb_admin`, issued by `POST /admin/login`
//!   after the same token was typed in.
//!
//! The cookie is signed, not stored: `v1.<id>.<expiry>.<hmac>` with HMAC-SHA256
//! under a key derived from the admin token. So sessions survive a restart, work
//! on every instance that shares the token, and changing the token signs
//! everybody out — what an operator expects from "rotate the admin token".
//! Signing out revokes the id in this process (until it would have expired)
//! and clears the cookie in the browser. The cookie is `HttpOnly`,
//! `SameSite=Strict`, `Path=/`, and `Secure` when the request came over TLS
//! (as a proxy in `trusted_proxies` reports it with `X-Forwarded-Proto:
//! https`; the binary itself speaks plain HTTP).
//!
//! Cross-site requests: besides `SameSite=Strict`, a state-changing request
//! (anything but GET/HEAD/OPTIONS) that authenticates with the cookie must carry
//! an `Origin` naming this very host (or, without a usable `Origin`,
//! `Sec-Fetch-Site: same-origin`); otherwise it is refused with 403
//! `cross_site_request`. Bearer requests need no such check: a browser never
//! adds that header by itself.
//!
//! A missing or wrong credential is a 401 that says nothing more.

use crate::app::AppState;
use crate::error::ApiError;
use actix_web::dev::Payload;
use actix_web::http::{header, Method};
use actix_web::{web, FromRequest, HttpRequest};
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::future::{ready, Ready};
use std::sync::Mutex;

/// Name of the web view's session cookie.
pub const COOKIE: &str = "cb_admin";
/// How long a sign-in lasts.
pub const SESSION_SECS: i64 = 12 * 3600;

/// Proof that the request carried the admin token (or a valid session cookie).
/// Take it as a handler argument.
#[derive(Debug, Clone, Copy)]
pub struct Admin;

/// Equal in time independent of where the inputs differ (and of their lengths,
/// since both sides are hashed first).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let (da, db) = (Sha256::digest(a), Sha256::digest(b));
    da.iter()
        .zip(db.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// Whether `presented` is the admin token.
pub fn is_admin_token(state: &AppState, presented: &str) -> bool {
    constant_time_eq(
        presented.as_bytes(),
        state.secrets.admin_token.expose_secret().as_bytes(),
    )
}

/// Issues and checks the signed session cookies of this process.
pub struct Sessions {
    key: Vec<u8>,
    /// Signed-out ids → their expiry (unix seconds); pruned as they expire.
    revoked: Mutex<HashMap<String, i64>>,
}

impl Sessions {
    pub fn new(admin_token: &SecretString) -> Sessions {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(admin_token.expose_secret().as_bytes())
            .unwrap_or_else(|_| unreachable_hmac());
        mac.update(b"codex-bridge admin session cookie v1");
        Sessions {
            key: mac.finalize().into_bytes().to_vec(),
            revoked: Mutex::new(HashMap::new()),
        }
    }

    fn mac(&self, payload: &str) -> String {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable_hmac());
        mac.update(payload.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// A fresh cookie value valid until `now + SESSION_SECS`.
    pub fn issue(&self, now: i64) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let payload = format!("v1.{id}.{}", now + SESSION_SECS);
        let mac = self.mac(&payload);
        format!("{payload}.{mac}")
    }

    /// The session id and expiry of a valid, unexpired, not revoked cookie.
    pub fn verify(&self, value: &str, now: i64) -> Option<(String, i64)> {
        let (payload, mac) = value.rsplit_once('.')?;
        if !constant_time_eq(self.mac(payload).as_bytes(), mac.as_bytes()) {
            return None;
        }
        let mut parts = payload.split('.');
        let (Some("v1"), Some(id), Some(exp), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let exp: i64 = exp.parse().ok()?;
        if exp <= now {
            return None;
        }
        let revoked = self
            .revoked
            .lock()
            .map(|r| r.contains_key(id))
            .unwrap_or(true);
        (!revoked).then(|| (id.to_owned(), exp))
    }

    /// Signs a cookie out in this process.
    pub fn revoke(&self, value: &str, now: i64) {
        if let Some((id, exp)) = self.verify(value, now) {
            if let Ok(mut r) = self.revoked.lock() {
                r.retain(|_, e| *e > now);
                r.insert(id, exp);
            }
        }
    }
}

#[cold]
fn unreachable_hmac() -> Hmac<Sha256> {
    // HMAC takes keys of any length; this cannot happen. Fall back to a key
    // nobody knows rather than panicking.
    let random = uuid::Uuid::new_v4();
    match <Hmac<Sha256> as Mac>::new_from_slice(random.as_bytes()) {
        Ok(m) => m,
        Err(_) => std::process::abort(),
    }
}

pub fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Whether a state-changing request comes from a page of this very site:
/// its `Origin` names this host; or, where a browser sends no usable Origin
/// (absent, or `null` under some referrer policies), it says
/// `Sec-Fetch-Site: same-origin`, a header pages cannot set.
pub fn same_origin(req: &HttpRequest) -> bool {
    let headers = req.headers();
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .filter(|o| *o != "null");
    if let Some(origin) = origin {
        let authority = origin
            .strip_prefix("https://")
            .or_else(|| origin.strip_prefix("http://"));
        let host = headers
            .get("x-forwarded-host")
            .filter(|_| crate::web::client::ClientInfo::of(req).via_trusted_proxy)
            .or_else(|| headers.get(header::HOST))
            .and_then(|v| v.to_str().ok());
        return match (authority, host) {
            (Some(a), Some(h)) => a.eq_ignore_ascii_case(h.trim()),
            _ => false,
        };
    }
    headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "same-origin")
}

fn cross_site() -> ApiError {
    ApiError::Forbidden {
        code: "cross_site_request",
        message: "this request carries the admin session cookie but does not come from the admin page of this site (Origin mismatch); use the page, or the Bearer token from scripts".into(),
    }
}

fn check(req: &HttpRequest) -> Result<Admin, ApiError> {
    let Some(state) = req.app_data::<web::Data<AppState>>() else {
        return Err(ApiError::Unauthorized);
    };
    if let Some(auth) = req.headers().get(header::AUTHORIZATION) {
        let presented = auth
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        return match presented {
            Some(token) if is_admin_token(state, token) => Ok(Admin),
            _ => Err(ApiError::Unauthorized),
        };
    }
    let cookie = req.cookie(COOKIE).ok_or(ApiError::Unauthorized)?;
    state
        .sessions
        .verify(cookie.value(), unix_now())
        .ok_or(ApiError::Unauthorized)?;
    let safe = [Method::GET, Method::HEAD, Method::OPTIONS].contains(req.method());
    if !safe && !same_origin(req) {
        return Err(cross_site());
    }
    Ok(Admin)
}

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = Ready<Result<Admin, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(check(req))
    }
}

/// Whether the request carries a valid session cookie (for the page itself).
pub fn has_session(req: &HttpRequest, state: &AppState) -> bool {
    req.cookie(COOKIE)
        .is_some_and(|c| state.sessions.verify(c.value(), unix_now()).is_some())
}

/// The same-origin check for the sign-in and sign-out forms.
pub fn require_same_origin(req: &HttpRequest) -> Result<(), ApiError> {
    if same_origin(req) {
        Ok(())
    } else {
        Err(cross_site())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_signed_expire_and_can_be_revoked() {
        let s = Sessions::new(&SecretString::from("admin-token-0123456789"));
        let now = 1_800_000_000;
        let c = s.issue(now);
        assert!(s.verify(&c, now + 10).is_some());
        assert!(s.verify(&c, now + SESSION_SECS).is_none(), "expired");
        let mut forged = c.clone();
        forged.replace_range(4..5, if &c[4..5] == "a" { "b" } else { "a" });
        assert!(s.verify(&forged, now).is_none(), "id changed");
        let longer = c.replacen(
            &format!(".{}.", now + SESSION_SECS),
            &format!(".{}.", now + 10 * SESSION_SECS),
            1,
        );
        assert!(s.verify(&longer, now).is_none(), "expiry changed");
        let other = Sessions::new(&SecretString::from("another-token-0123456789"));
        assert!(
            other.verify(&c, now).is_none(),
            "a new token signs everyone out"
        );
        assert!(!c.contains("admin-token"), "the token is not in the cookie");
        s.revoke(&c, now);
        assert!(s.verify(&c, now + 1).is_none(), "signed out");
        assert!(s.verify(&s.issue(now), now).is_some());
    }
}
