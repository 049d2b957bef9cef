//! Logging through `tracing`: plain or JSON lines on stderr, and the root span of
//! every HTTP request. Spans carry ids (`delivery.id`, `task.id`), never bodies,
//! headers or secrets.

use crate::config::LogFormat;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use tracing::field::Empty;
use tracing::Span;
use tracing_actix_web::RootSpanBuilder;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `RUST_LOG`, when set, wins over `filter`.
pub fn init(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true);
    // A second init (tests calling into the library twice) is harmless.
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
    };
}

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
