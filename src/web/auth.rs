//! Admin authentication. Two ways in, one check for every admin route:
//!
//! - `Authorization: Bearer <admin_token>` (scripts, the CLI), compared in
//!   constant time;
//! - the web view's session cookie `cb_admin`, issued by `POST /admin/login`
//!   after the same token was typed in.
//!
//! The cookie is signed, not stored: the `cookie` crate's signed jar
//! (HMAC-SHA256) over `<id>.<expiry>`, under a key derived from the admin
//! token. So sessions survive a restart, work on every instance that shares
//! the token, and changing the token signs everybody out — what an operator
//! expects from "rotate the admin token". The expiry inside the signed value
//! is checked here, not left to the browser. Signing out revokes the id in
//! this process (until it would have expired) and clears the cookie in the
//! browser. The cookie is `HttpOnly`, `SameSite=Strict`, `Path=/`, and `Secure`
//! when the request came over TLS (as a proxy in `trusted_proxies` reports it
//! with `X-Forwarded-Proto: https`; the binary itself speaks plain HTTP).
//!
//! Cross-site requests: besides `SameSite=Strict`, a state-changing request
//! (anything but GET/HEAD/OPTIONS) that authenticates with the cookie must carry
//! an `Origin` naming this very host (or, without a usable `Origin`,
//! `Sec-Fetch-Site: same-origin`); otherwise it is refused with 403
//! `cross_site_request`. Bearer requests need no such check: a browser never
//! adds that header by itself.
//!
//! A missing or wrong credential is a 401 that says nothing more.

use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::dev::Payload;
use actix_web::http::{header, Method};
use actix_web::{web, FromRequest, HttpRequest};
use cookie::{Cookie, CookieJar, Key};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::future::{ready, Ready};
use std::sync::Mutex;
use uuid::Uuid;

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

/// What a valid session cookie says, once its signature checked out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Names the sign-in, so that signing out can revoke it.
    pub id: Uuid,
    /// Unix seconds after which the cookie is refused.
    pub expires: i64,
}

impl Claim {
    /// The signed part of the cookie: `<id>.<expiry>`.
    fn encode(&self) -> String {
        format!("{}.{}", self.id.simple(), self.expires)
    }

    fn decode(value: &str) -> Option<Claim> {
        let (id, expires) = value.split_once('.')?;
        Some(Claim {
            id: Uuid::try_parse(id).ok()?,
            expires: expires.parse().ok()?,
        })
    }
}

/// Issues and checks the signed session cookies of this process.
pub struct Sessions {
    key: Key,
    /// Signed-out ids → their expiry (unix seconds); pruned as they expire.
    revoked: Mutex<HashMap<Uuid, i64>>,
}

impl Sessions {
    pub fn new(admin_token: &SecretString) -> Sessions {
        // The admin token is a high-entropy secret (at least 16 characters);
        // its hash, under a context of its own, is the 32-byte master key that
        // `derive_from` expands (HKDF) into the signing key. Exactly 32 bytes,
        // so `derive_from`'s length check always holds.
        let master: [u8; 32] = Sha256::new()
            .chain_update(b"codex-bridge admin session cookie\0")
            .chain_update(admin_token.expose_secret().as_bytes())
            .finalize()
            .into();
        Sessions {
            key: Key::derive_from(&master),
            revoked: Mutex::new(HashMap::new()),
        }
    }

    /// Signs a fresh session valid until `now + SESSION_SECS` into `cookie`
    /// (which carries the attributes); send the returned jar's `delta()`.
    pub fn issue(&self, mut cookie: Cookie<'static>, now: i64) -> CookieJar {
        let claim = Claim {
            id: Uuid::new_v4(),
            expires: now + SESSION_SECS,
        };
        cookie.set_value(claim.encode());
        let mut jar = CookieJar::new();
        jar.signed_mut(&self.key).add(cookie);
        jar
    }

    /// The claim of a cookie signed under this admin token, unexpired and not
    /// revoked.
    pub fn verify(&self, cookie: &Cookie<'_>, now: i64) -> Option<Claim> {
        let verified = CookieJar::new()
            .signed(&self.key)
            .verify(cookie.clone().into_owned())?;
        let claim = Claim::decode(verified.value())?;
        if claim.expires <= now {
            return None;
        }
        let revoked = self
            .revoked
            .lock()
            .map(|r| r.contains_key(&claim.id))
            .unwrap_or(true);
        (!revoked).then_some(claim)
    }

    /// Signs a cookie out in this process.
    pub fn revoke(&self, cookie: &Cookie<'_>, now: i64) {
        if let Some(claim) = self.verify(cookie, now) {
            if let Ok(mut r) = self.revoked.lock() {
                r.retain(|_, e| *e > now);
                r.insert(claim.id, claim.expires);
            }
        }
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
        .verify(&cookie, unix_now())
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
        .is_some_and(|c| state.sessions.verify(&c, unix_now()).is_some())
}

/// The same-origin check for the sign-in and sign-out forms, which carry
/// no session cookie to speak of: said as what it is.
pub fn require_same_origin(req: &HttpRequest) -> Result<(), ApiError> {
    if same_origin(req) {
        Ok(())
    } else {
        Err(ApiError::Forbidden {
            code: "cross_site_request",
            message: "sign-in and sign-out are taken only from the admin page of this site: the \
                      request's Origin (or, without one, Sec-Fetch-Site: same-origin) must name \
                      this host. Scripts use the Bearer token instead of signing in"
                .into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(token: &str) -> Sessions {
        Sessions::new(&SecretString::from(token))
    }

    /// The cookie as the browser sends it back: name and signed value only.
    fn issued(s: &Sessions, now: i64) -> Cookie<'static> {
        let jar = s.issue(Cookie::new(COOKIE, ""), now);
        let sent = jar.delta().next().unwrap();
        Cookie::new(COOKIE, sent.value().to_owned())
    }

    fn with_value(value: String) -> Cookie<'static> {
        Cookie::new(COOKIE, value)
    }

    #[test]
    fn cookies_are_signed_expire_and_can_be_revoked() {
        let s = sessions("admin-token-0123456789");
        let now = 1_800_000_000;
        let c = issued(&s, now);
        let claim = s.verify(&c, now + 10).unwrap();
        assert_eq!(claim.expires, now + SESSION_SECS);
        assert!(s.verify(&c, now + SESSION_SECS).is_none(), "expired");
        let unsigned = with_value(claim.encode());
        assert!(
            s.verify(&unsigned, now).is_none(),
            "the claim without its signature"
        );
        assert!(
            !c.value().contains("admin-token"),
            "the token is not in the cookie"
        );
        s.revoke(&c, now);
        assert!(s.verify(&c, now + 1).is_none(), "signed out");
        assert!(s.verify(&issued(&s, now), now).is_some());
    }

    #[test]
    fn a_tampered_cookie_is_refused() {
        let s = sessions("admin-token-0123456789");
        let now = 1_800_000_000;
        let c = issued(&s, now);
        let value = c.value();
        let longer = value.replacen(
            &format!(".{}", now + SESSION_SECS),
            &format!(".{}", now + 10 * SESSION_SECS),
            1,
        );
        assert_ne!(longer, value);
        assert!(
            s.verify(&with_value(longer), now).is_none(),
            "expiry changed"
        );
        // Every single character changed, the signature's and the claim's.
        for i in 0..value.len() {
            let mut forged = value.to_owned();
            let flip = if &value[i..=i] == "A" { "B" } else { "A" };
            forged.replace_range(i..=i, flip);
            assert!(
                s.verify(&with_value(forged), now).is_none(),
                "character {i}"
            );
        }
    }

    #[test]
    fn a_cookie_signed_under_another_admin_token_is_refused() {
        let now = 1_800_000_000;
        let c = issued(&sessions("admin-token-0123456789"), now);
        assert!(
            sessions("another-token-0123456789")
                .verify(&c, now)
                .is_none(),
            "a new token signs everyone out"
        );
        // The same token on another instance or after a restart: still valid.
        assert!(sessions("admin-token-0123456789").verify(&c, now).is_some());
    }
}
