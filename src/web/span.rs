//! The root span of every HTTP request: who asked (as `web/client.rs` resolves
//! it), over what, and how it ended. Ids only, never bodies, headers or secrets.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use tracing::field::Empty;
use tracing::Span;
use tracing_actix_web::RootSpanBuilder;

/// The root span of each request. `client_ip` is the client as
/// [`crate::web::client`] resolves it (the `X-Forwarded-For` address only when
/// the peer is one of `trusted_proxies`); `peer_ip` is the TCP peer and `tls`
/// whether a trusted proxy says the client used HTTPS.
pub struct BridgeRootSpan;

impl RootSpanBuilder for BridgeRootSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        let none = crate::config::TrustedProxies::default();
        let state = request.app_data::<actix_web::web::Data<crate::web::state::AppState>>();
        let trusted = state.map_or(&none, |s| &s.config.trusted_proxies);
        let client = crate::web::client::ClientInfo::resolve(
            request.peer_addr(),
            request.headers(),
            trusted,
        );
        let peer = client.peer.map_or_else(|| "-".into(), |ip| ip.to_string());
        tracing::info_span!(
            "http",
            method = %request.method(),
            // The path only: query strings are not logged.
            path = %request.path(),
            client_ip = %client.ip_string(),
            peer_ip = %peer,
            tls = client.secure,
            request_id = %uuid::Uuid::new_v4().simple(),
            status = Empty,
            delivery.id = Empty,
            task.id = Empty,
        )
    }

    fn on_request_end<B: MessageBody>(
        span: Span,
        outcome: &Result<ServiceResponse<B>, actix_web::Error>,
    ) {
        let status = match outcome {
            Ok(resp) => resp.status().as_u16(),
            Err(e) => e.as_response_error().status_code().as_u16(),
        };
        span.record("status", status);
        span.in_scope(|| {
            if status >= 500 {
                tracing::warn!(status, "request finished");
            } else {
                tracing::info!(status, "request finished");
            }
        });
    }
}
