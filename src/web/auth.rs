//! Admin authentication: `Authorization: Bearer <admin_token>` on every admin
//! route, compared in constant time. A missing or wrong token is a 401 that
//! says nothing more.

use crate::app::AppState;
use crate::error::ApiError;
use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use std::future::{ready, Ready};

/// Proof that the request carried the admin token. Take it as a handler argument.
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

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = Ready<Result<Admin, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let Some(state) = req.app_data::<web::Data<AppState>>() else {
            return ready(Err(ApiError::Unauthorized));
        };
        let presented = req
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        let ok = presented.is_some_and(|token| {
            constant_time_eq(
                token.as_bytes(),
                state.secrets.admin_token.expose_secret().as_bytes(),
            )
        });
        ready(if ok {
            Ok(Admin)
        } else {
            Err(ApiError::Unauthorized)
        })
    }
}
