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
//! is checked here, not left to the browser. Signing out records the
//! sign-in's id in the store (`store::signins`) until the cookie would have
//! expired, and clears the cookie in the browser: every process on the
//! database refuses that cookie from then on, after a restart too. So each
//! cookie request reads the store once; when it cannot be read the cookie is
//! refused (401 for the API, the sign-in form for the page) rather than
//! taken on trust. The id is a random UUID, useless without the signing
//! key, so the store holds nothing secret. The cookie is `HttpOnly`,
//! `SameSite=Strict`, `Path=/`, and `Secure`
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

use crate::store::{signins, Store, StoreError};
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::dev::Payload;
use actix_web::http::{header, Method};
use actix_web::{web, FromRequest, HttpRequest};
use cookie::{Cookie, CookieJar, Key};
use futures_util::future::{ready, FutureExt, LocalBoxFuture};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
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

/// Issues and checks the signed session cookies; which sign-ins were signed
/// out is the store's to say (see [`signed_in`]).
pub struct Sessions {
    key: Key,
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

    /// The claim of a cookie signed under this admin token and unexpired.
    /// Only the signature and the expiry: whether it was signed out since is
    /// for [`signed_in`] to check.
    pub fn verify(&self, cookie: &Cookie<'_>, now: i64) -> Option<Claim> {
        let verified = CookieJar::new()
            .signed(&self.key)
            .verify(cookie.clone().into_owned())?;
        let claim = Claim::decode(verified.value())?;
        (claim.expires > now).then_some(claim)
    }

    /// Signs a cookie out for every process on the database, until it would
    /// have expired; resolves once that is committed. A cookie that is not
    /// valid anyway needs nothing recorded.
    pub async fn revoke(
        &self,
        store: &Store,
        cookie: &Cookie<'_>,
        now: i64,
    ) -> Result<(), StoreError> {
        let Some(claim) = self.verify(cookie, now) else {
            return Ok(());
        };
        store
            .write(move |c| signins::sign_out(c, &claim.id, claim.expires, now))
            .await
    }
}

/// Whether the sign-in of a verified cookie still holds: nobody signed it out
/// through any process on the database. A store that cannot be read says no:
/// a sign-out it may hold must not be ignored.
pub async fn signed_in(store: &Store, claim: Claim) -> bool {
    match store
        .read(move |c| signins::is_signed_out(c, &claim.id))
        .await
    {
        Ok(signed_out) => !signed_out,
        Err(e) => {
            tracing::warn!(
                error = %e,
                "cannot read the admin sign-outs from the store, so the admin session cookie \
                 is refused until it can: check the database (the Bearer token still works)"
            );
            false
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

/// What a request presents, as far as it can be judged without the store.
enum Presented {
    /// The admin token: nothing more to check.
    Token,
    /// A cookie with a valid signature and expiry; whether it was signed out
    /// is still to be read from the store.
    Cookie {
        state: web::Data<AppState>,
        claim: Claim,
        same_origin: bool,
    },
}

fn check(req: &HttpRequest) -> Result<Presented, ApiError> {
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
            Some(token) if is_admin_token(state, token) => Ok(Presented::Token),
            _ => Err(ApiError::Unauthorized),
        };
    }
    let cookie = req.cookie(COOKIE).ok_or(ApiError::Unauthorized)?;
    let claim = state
        .sessions
        .verify(&cookie, unix_now())
        .ok_or(ApiError::Unauthorized)?;
    let safe = [Method::GET, Method::HEAD, Method::OPTIONS].contains(req.method());
    Ok(Presented::Cookie {
        state: state.clone(),
        claim,
        same_origin: safe || same_origin(req),
    })
}

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Admin, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        match check(req) {
            Err(e) => ready(Err(e)).boxed_local(),
            Ok(Presented::Token) => ready(Ok(Admin)).boxed_local(),
            Ok(Presented::Cookie {
                state,
                claim,
                same_origin,
            }) => async move {
                // A signed-out cookie is a wrong credential (401) before it
                // is a cross-site one (403).
                if !signed_in(&state.store, claim).await {
                    return Err(ApiError::Unauthorized);
                }
                if !same_origin {
                    return Err(cross_site());
                }
                Ok(Admin)
            }
            .boxed_local(),
        }
    }
}

/// Whether the request carries a valid session cookie that was not signed
/// out (for the page itself).
pub async fn has_session(req: &HttpRequest, state: &AppState) -> bool {
    let Some(claim) = req
        .cookie(COOKIE)
        .and_then(|c| state.sessions.verify(&c, unix_now()))
    else {
        return false;
    };
    signed_in(&state.store, claim).await
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
    fn cookies_are_signed_and_expire() {
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
