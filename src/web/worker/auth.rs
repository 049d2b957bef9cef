//! Worker authentication: `Authorization: Bearer <worker token>`, looked up
//! by its hash in the store (`store::workers::authenticate`). A missing,
//! malformed or unknown token is a 401 that says nothing more. The token of
//! a revoked worker is a 403 `worker_revoked`: whoever presents it proves
//! they hold it, so saying so tells them nothing new, and the worker must
//! learn to stop rather than retry. A
//! store that cannot be read refuses too (503, so the worker retries rather
//! than taking itself for revoked): a revocation it may hold must not be
//! ignored. The token is never logged, nor put in an error.

use crate::store::worker_leases;
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
            let presented = token.clone();
            match state
                .store
                .read(move |c| workers::authenticate(c, &presented))
                .await
            {
                Ok(Some(worker)) => Ok(WorkerAuth(worker)),
                Ok(None) => {
                    let revoked = state
                        .store
                        .read(move |c| worker_leases::is_revoked_token(c, &token))
                        .await;
                    match revoked {
                        Ok(true) => Err(ApiError::Forbidden {
                            code: "worker_revoked",
                            message: "an operator revoked this worker: it takes no more work; \
                                      stop it, or register a new worker for this machine"
                                .into(),
                        }),
                        _ => Err(ApiError::Unauthorized),
                    }
                }
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
