//! A deadline on request bodies. actix-web bounds how long a client may
//! take to send a request's head, never its body: a client that announces a
//! megabyte and then stops would hold its connection, and the memory behind
//! it, for as long as it likes. Every request's body must arrive whole
//! within `request_timeout_secs` of the head; a body still missing then
//! ends in an error its reader answers 408, and the connection is closed.

use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::middleware::Next;
use actix_web::web::Bytes;
use actix_web::HttpMessage;
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use std::time::Duration;

/// What a reader of a body sees when the deadline passed.
const TIMED_OUT: &str = "the request body did not arrive in time";

/// Wraps every request's body in its deadline.
pub async fn body_deadline(
    mut req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let timeout = req
        .app_data::<actix_web::web::Data<super::state::AppState>>()
        .map(|s| s.config.request_timeout);
    if let Some(timeout) = timeout {
        let body = req.take_payload();
        req.set_payload(within(body, timeout));
    }
    next.call(req).await
}

/// `body`, failing with a timed-out I/O error once `timeout` has passed.
fn within(body: Payload, timeout: Duration) -> Payload {
    let deadline = tokio::time::Instant::now() + timeout;
    let stream = futures_util::stream::unfold(Some(body), move |body| async move {
        let mut body = body?;
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(item)) => Some((item, Some(body))),
            Ok(None) => None,
            // Once: the stream ends after saying why.
            Err(_) => Some((Err(timed_out()), None)),
        }
    });
    let boxed: Pin<Box<dyn Stream<Item = Result<Bytes, PayloadError>>>> = Box::pin(stream);
    Payload::from(boxed)
}

fn timed_out() -> PayloadError {
    PayloadError::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, TIMED_OUT))
}

/// Whether a body's read failed on its deadline.
pub fn is_timeout(e: &PayloadError) -> bool {
    matches!(e, PayloadError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut)
}
