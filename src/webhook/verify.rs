//! The signature check, over the raw bytes and before any JSON parsing.
//!
//! Gitea signs the JSON text with HMAC-SHA256 and sends it as lowercase hex in
//! `X-Gitea-Signature` (and `X-Gogs-Signature`), and as `sha256=<hex>` in
//! `X-Hub-Signature-256`. For "form" deliveries the signature is still over the
//! JSON inside `payload=`, never over the form encoding.

use actix_web::http::header::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureError {
    /// No signature header (or an empty one: Gitea sends empty values when the
    /// webhook has no secret).
    Missing,
    /// Not hex, or the wrong length.
    Malformed,
    /// Well-formed but wrong.
    Mismatch,
}

impl SignatureError {
    pub fn code(self) -> &'static str {
        match self {
            SignatureError::Missing => "signature_missing",
            SignatureError::Malformed => "signature_malformed",
            SignatureError::Mismatch => "signature_mismatch",
        }
    }
}

/// The hex signature the request carries: `X-Gitea-Signature` first, then
/// `X-Hub-Signature-256`.
fn signature_hex(headers: &HeaderMap) -> Option<&str> {
    let plain = headers
        .get("x-gitea-signature")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty());
    plain.or_else(|| {
        headers
            .get("x-hub-signature-256")
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.trim().strip_prefix("sha256="))
            .filter(|s| !s.is_empty())
    })
}

/// Checks the request's signature of `signed` (the JSON text) in constant time.
pub fn verify(secret: &[u8], signed: &[u8], headers: &HeaderMap) -> Result<(), SignatureError> {
    let hex_sig = signature_hex(headers).ok_or(SignatureError::Missing)?;
    let expected = hex::decode(hex_sig).map_err(|_| SignatureError::Malformed)?;
    if expected.len() != 32 {
        return Err(SignatureError::Malformed);
    }
    let mut mac = HmacSha256::new_from_slice(secret).map_err(|_| SignatureError::Mismatch)?;
    mac.update(signed);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&expected)
        .map_err(|_| SignatureError::Mismatch)
}

/// Lowercase hex HMAC-SHA256, as Gitea computes it (for tests and the benchmark).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = match HmacSha256::new_from_slice(secret) {
        Ok(mac) => mac,
        // HMAC accepts keys of any length; this branch cannot happen.
        Err(_) => return String::new(),
    };
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                HeaderName::from_static(k),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn accepts_both_header_forms_and_refuses_the_rest() {
        let body = br#"{"a":1}"#;
        let sig = sign(b"topsecret", body);
        assert_eq!(
            verify(b"topsecret", body, &headers(&[("x-gitea-signature", &sig)])),
            Ok(())
        );
        let hub = format!("sha256={sig}");
        assert_eq!(
            verify(
                b"topsecret",
                body,
                &headers(&[("x-hub-signature-256", &hub)])
            ),
            Ok(())
        );
        assert_eq!(
            verify(b"other", body, &headers(&[("x-gitea-signature", &sig)])),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(
                b"topsecret",
                b"{\"a\":2}",
                &headers(&[("x-gitea-signature", &sig)])
            ),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(b"topsecret", body, &headers(&[])),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify(
                b"topsecret",
                body,
                &headers(&[("x-hub-signature-256", "sha256=")])
            ),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify(b"topsecret", body, &headers(&[("x-gitea-signature", "zz")])),
            Err(SignatureError::Malformed)
        );
    }

    #[test]
    fn matches_the_gitea_fixture_signature() {
        // From ../shared/reference/gitea/fixtures (secret s3cr3t-ccbot-webhook).
        let body =
            include_bytes!("../../tests/fixtures/gitea/issue_comment.created.issue.mention.json");
        let sig = sign(b"s3cr3t-ccbot-webhook", body);
        assert_eq!(
            sig,
            "dcda5c9f6ecb7f011d8f07c47a96614c9f987bc2129c461d3825c1a821f7f8e7"
        );
    }
}
