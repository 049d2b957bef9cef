//! Worker authentication: `Authorization: Bearer <worker token>`, looked up
//! by its hash in the store (`store::workers::authenticate`). A missing,
//! malformed, unknown or revoked token is a 401 that says nothing more. A
//! store that cannot be read refuses too (503, so the worker retries rather
//! than taking itself for revoked): a revocation it may hold must not be
//! ignored. The token is never logged, nor put in an error.

use crate::store::workers::{self, Worker, WorkerToken};
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpRequest};
use futures_util::future::{ready, FutureExt, LocalBoxFuture};

/// Proof that the request carried the token of a worker that is not
/// revoked, and which worker that is. Take it as a handler argument.
#[derive(Debug, Clone)]
pub struct WorkerAuth(pub Worker);

/// The token a request presents, if it has a token's shape.
fn presented(req: &HttpRequest) -> Option<WorkerToken> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))?;
    WorkerToken::from_presented(token.trim())
}

impl FromRequest for WorkerAuth {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<WorkerAuth, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        // Refused at once when there is nothing to look up: the answer is
        // then a 401 before the body is read or parsed.
        let (Some(state), Some(token)) = (
            req.app_data::<web::Data<AppState>>().cloned(),
            presented(req),
        ) else {
            return ready(Err(ApiError::Unauthorized)).boxed_local();
        };
        async move {
            match state
                .store
                .read(move |c| workers::authenticate(c, &token))
                .await
            {
                Ok(Some(worker)) => Ok(WorkerAuth(worker)),
                Ok(None) => Err(ApiError::Unauthorized),
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "cannot read the registered workers from the store, so worker requests \
                         are refused until it can: check the database"
                    );
                    Err(ApiError::Unavailable)
                }
            }
        }
        .boxed_local()
    }
}
