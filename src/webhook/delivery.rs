//! What a delivery's headers and body say, read before anything is stored:
//! pure functions, so the handler and the fuzz targets read a delivery the
//! same way.

use super::event::DeliveryHeaders;
use actix_web::http::header::{HeaderMap, CONTENT_TYPE};
use std::borrow::Cow;

/// Longest delivery id we keep (Gitea's are UUIDs).
pub const MAX_DELIVERY_ID: usize = 128;

/// Why a delivery is refused before its signature or payload is looked at
/// further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryRefusal {
    #[error("X-Gitea-Delivery is missing: without it a delivery cannot be deduplicated")]
    MissingDeliveryId,
    #[error("X-Gitea-Delivery must be 1 to 128 printable ASCII characters")]
    InvalidDeliveryId,
    #[error("form body has no `payload` field")]
    NoFormPayload,
    /// The content type, cut to 100 characters.
    #[error("unsupported content type {0:?}")]
    UnsupportedMediaType(String),
}

/// The signed payload: the body as sent for JSON, the `payload` field of a
/// form (Gitea signs the JSON inside it).
pub fn signed_payload<'a>(
    content_type: Option<&str>,
    body: &'a [u8],
) -> Result<Cow<'a, [u8]>, DeliveryRefusal> {
    let mime = content_type
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match mime.as_str() {
        "application/json" | "" => Ok(Cow::Borrowed(body)),
        "application/x-www-form-urlencoded" => form_urlencoded::parse(body)
            .find(|(k, _)| k == "payload")
            .map(|(_, v)| Cow::Owned(v.into_owned().into_bytes()))
            .ok_or(DeliveryRefusal::NoFormPayload),
        other => Err(DeliveryRefusal::UnsupportedMediaType(
            other.chars().take(100).collect(),
        )),
    }
}

/// The request's content type, when it is text.
pub fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())
}

/// The delivery id and event names (Gitea's headers, or Gogs' that old
/// Gitea releases also send).
pub fn delivery_headers(headers: &HeaderMap) -> Result<DeliveryHeaders, DeliveryRefusal> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    // Present but not text (a byte outside visible ASCII, say) is not missing.
    let delivery_id = match headers
        .get("x-gitea-delivery")
        .or_else(|| headers.get("x-gogs-delivery"))
        .map(|v| v.to_str().map(str::trim))
    {
        Some(Ok(id))
            if !id.is_empty()
                && id.len() <= MAX_DELIVERY_ID
                && id.chars().all(|c| c.is_ascii_graphic()) =>
        {
            id.to_owned()
        }
        Some(_) => return Err(DeliveryRefusal::InvalidDeliveryId),
        None => return Err(DeliveryRefusal::MissingDeliveryId),
    };
    Ok(DeliveryHeaders {
        delivery_id,
        event: header("x-gitea-event").or_else(|| header("x-gogs-event")),
        event_type: header("x-gitea-event-type").or_else(|| header("x-gogs-event-type")),
    })
}
