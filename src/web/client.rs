//! Who the client is, as far as the server can tell.
//!
//! Behind nginx every request comes from the proxy; the real client is in
//! `X-Forwarded-For` and the scheme it used in `X-Forwarded-Proto`. Anybody can
//! send those headers, so they are believed only when the TCP peer is one of
//! the configured `trusted_proxies` (default: none). Then `X-Forwarded-For` is
//! read from the right, skipping entries that are trusted proxies themselves:
//! the first untrusted address is the client (an entry the client wrote itself
//! sits further left and is never reached). Everything else uses the peer.
//!
//! Use [`ClientInfo::of`] in handlers (for instance `secure` decides a cookie's
//! `Secure` flag); the request log's root span uses [`ClientInfo::resolve`].

use crate::config::TrustedProxies;
use crate::web::state::AppState;
use actix_web::http::header::HeaderMap;
use actix_web::{web, HttpRequest};
use std::net::{IpAddr, SocketAddr};

/// The client of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    /// The client's address: from `X-Forwarded-For` when the peer is a trusted
    /// proxy, else the TCP peer. `None` only when neither is known.
    pub ip: Option<IpAddr>,
    /// The TCP peer (the proxy, behind nginx).
    pub peer: Option<IpAddr>,
    /// Whether the client reached us over TLS: `X-Forwarded-Proto: https` from
    /// a trusted proxy. The server itself speaks plain HTTP, so a direct request
    /// is never secure.
    pub secure: bool,
    /// Whether the forwarded headers were believed.
    pub via_trusted_proxy: bool,
}

impl ClientInfo {
    /// The client of a handler's request (trusted proxies from the config).
    pub fn of(req: &HttpRequest) -> ClientInfo {
        let trusted = req
            .app_data::<web::Data<AppState>>()
            .map(|s| &s.config.trusted_proxies);
        let none = TrustedProxies::default();
        Self::resolve(req.peer_addr(), req.headers(), trusted.unwrap_or(&none))
    }

    /// The client given the peer, the headers and the trusted proxies.
    pub fn resolve(
        peer: Option<SocketAddr>,
        headers: &HeaderMap,
        trusted: &TrustedProxies,
    ) -> ClientInfo {
        let peer = peer.map(|p| p.ip().to_canonical());
        let direct = ClientInfo {
            ip: peer,
            peer,
            secure: false,
            via_trusted_proxy: false,
        };
        let Some(peer_ip) = peer.filter(|ip| trusted.contains(*ip)) else {
            return direct;
        };
        // Every X-Forwarded-For header, in order, as one list.
        let chain: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let mut client = None;
        for hop in chain.iter().rev() {
            let Some(ip) = parse_hop(hop) else {
                // Garbage where an address should be: stop believing the rest.
                break;
            };
            client = Some(ip);
            if !trusted.contains(ip) {
                break;
            }
        }
        let secure = headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
        ClientInfo {
            ip: client.or(Some(peer_ip)),
            peer,
            secure,
            via_trusted_proxy: true,
        }
    }

    /// The client address for logs (`-` when unknown).
    pub fn ip_string(&self) -> String {
        self.ip.map_or_else(|| "-".into(), |ip| ip.to_string())
    }
}

/// An X-Forwarded-For entry: an address, maybe with a port (`1.2.3.4:5678`,
/// `[::1]:80`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    hop.parse::<SocketAddr>()
        .ok()
        .map(|s| s.ip().to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn peer(s: &str) -> Option<SocketAddr> {
        Some(SocketAddr::new(s.parse().unwrap(), 40000))
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let trusted = TrustedProxies::parse("10.0.0.1").unwrap();
        let c = ClientInfo::resolve(
            peer("198.51.100.7"),
            &headers(&[
                ("x-forwarded-for", "203.0.113.9"),
                ("x-forwarded-proto", "https"),
            ]),
            &trusted,
        );
        assert_eq!(c.ip, Some("198.51.100.7".parse().unwrap()));
        assert!(!c.secure && !c.via_trusted_proxy);
        // No proxies configured: the same.
        let c = ClientInfo::resolve(
            peer("10.0.0.1"),
            &headers(&[("x-forwarded-for", "203.0.113.9")]),
            &TrustedProxies::default(),
        );
        assert_eq!(c.ip, Some("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn a_trusted_proxy_names_the_client_and_the_scheme() {
        let trusted = TrustedProxies::parse("10.0.0.0/24").unwrap();
        let c = ClientInfo::resolve(
            peer("10.0.0.1"),
            &headers(&[
                ("x-forwarded-for", "203.0.113.9"),
                ("x-forwarded-proto", "https"),
            ]),
            &trusted,
        );
        assert_eq!(c.ip, Some("203.0.113.9".parse().unwrap()));
        assert_eq!(c.peer, Some("10.0.0.1".parse().unwrap()));
        assert!(c.secure && c.via_trusted_proxy);
        let c = ClientInfo::resolve(
            peer("10.0.0.1"),
            &headers(&[("x-forwarded-proto", "http")]),
            &trusted,
        );
        assert!(!c.secure);
        assert_eq!(c.ip, Some("10.0.0.1".parse().unwrap()), "no XFF: the peer");
    }

    #[test]
    fn a_forged_entry_left_of_the_proxy_chain_is_not_believed() {
        let trusted = TrustedProxies::parse("10.0.0.0/24").unwrap();
        // The client sent "1.1.1.1" itself; nginx appended the real address;
        // a second trusted proxy appended the first one's.
        let c = ClientInfo::resolve(
            peer("10.0.0.2"),
            &headers(&[
                ("x-forwarded-for", "1.1.1.1, 198.51.100.7"),
                ("x-forwarded-for", "10.0.0.1"),
            ]),
            &trusted,
        );
        assert_eq!(c.ip, Some("198.51.100.7".parse().unwrap()));
        // Garbage stops the walk at the last good address.
        let c = ClientInfo::resolve(
            peer("10.0.0.2"),
            &headers(&[("x-forwarded-for", "1.1.1.1, not-an-ip, 10.0.0.1")]),
            &trusted,
        );
        assert_eq!(c.ip, Some("10.0.0.1".parse().unwrap()));
        // Ports and IPv6.
        let c = ClientInfo::resolve(
            peer("::ffff:10.0.0.2"),
            &headers(&[("x-forwarded-for", "[2001:db8::5]:443")]),
            &trusted,
        );
        assert_eq!(c.ip, Some("2001:db8::5".parse().unwrap()));
    }
}
