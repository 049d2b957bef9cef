//! `ApiError`: what an HTTP handler can answer besides success, with an explicit
//! status and a stable snake_case `code` in a JSON body.

use crate::store::StoreError;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// No reason is given: a caller without the secret learns nothing.
    #[error("unauthorized")]
    Unauthorized,
    /// Authenticated, but the request is refused as it is (e.g. a cross-site
    /// state change carrying the admin cookie).
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    #[error("{0} not found")]
    NotFound(String),
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("the request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// The body did not arrive within `request_timeout_secs`.
    #[error("the request body did not arrive within {0} s; send it whole, without pauses")]
    RequestTimeout(u64),
    #[error("content type `{0}` is not supported; use application/json or application/x-www-form-urlencoded")]
    UnsupportedMediaType(String),
    /// Nothing was stored; the caller may retry.
    #[error("the store is unavailable, nothing was stored; retry later")]
    Unavailable,
    /// The agent runtime is not running and could not be started: nothing
    /// was done, the caller may retry once it runs.
    #[error("{0}")]
    AgentUnavailable(String),
    /// The agent runtime answered, and refused (or could not reach its
    /// model's provider).
    #[error("{0}")]
    AgentRefused(String),
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code,
            message: message.into(),
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest { code, .. }
            | ApiError::Conflict { code, .. }
            | ApiError::Forbidden { code, .. } => code,
            ApiError::Unauthorized => "unauthorized",
            ApiError::NotFound(_) => "not_found",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::RequestTimeout(_) => "request_timeout",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::Unavailable => "store_unavailable",
            ApiError::AgentUnavailable(_) => "codex_unavailable",
            ApiError::AgentRefused(_) => "codex_refused",
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unavailable | ApiError::AgentUnavailable(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::AgentRefused(_) => StatusCode::BAD_GATEWAY,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut resp = HttpResponse::build(self.status_code());
        if matches!(self, ApiError::Unavailable) {
            resp.insert_header(("Retry-After", "5"));
        }
        // The rest of a body that stalled is never read: the connection
        // cannot carry another request.
        if matches!(self, ApiError::RequestTimeout(_)) {
            resp.force_close();
        }
        resp.json(serde_json::json!({ "code": self.code(), "message": self.to_string() }))
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => ApiError::NotFound(what),
            StoreError::Refused { code, message } => ApiError::Conflict { code, message },
            StoreError::Unavailable(_) | StoreError::Query(_) | StoreError::Contended(_) => {
                // Logged once, here, where it is turned into a 503.
                tracing::error!(error = %e, "store failure; answering 503");
                ApiError::Unavailable
            }
        }
    }
}
