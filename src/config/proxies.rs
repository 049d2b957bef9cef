//! The `trusted_proxies` key: the reverse proxies whose `X-Forwarded-*`
//! headers the server believes (see `web::client`). Entries are addresses
//! (`127.0.0.1`, `::1`) or CIDR networks (`10.0.0.0/8`, `fd00::/8`).

use ipnet::{IpNet, Ipv4Net};
use std::net::IpAddr;

/// The reverse proxies whose `X-Forwarded-*` headers the server believes.
/// Empty (the default): none, every request's client is its TCP peer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// A JSON array (`["127.0.0.1", "10.0.0.0/8"]`) or a comma-separated list,
    /// as the environment writes the key.
    pub fn parse(text: &str) -> Result<TrustedProxies, String> {
        Self::from_entries(&entries(text)?)
    }

    /// One network per entry; blank entries are skipped.
    pub fn from_entries(items: &[String]) -> Result<TrustedProxies, String> {
        items
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(network)
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    /// Whether `ip` is one of the proxies. An IPv4 peer that reaches an IPv6
    /// socket arrives as `::ffff:a.b.c.d` and matches the IPv4 entries.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The entries of the environment's forms: a JSON array, or a comma list.
pub(super) fn entries(text: &str) -> Result<Vec<String>, String> {
    if text.trim_start().starts_with('[') {
        serde_json::from_str(text).map_err(|_| EXPECTED.to_owned())
    } else {
        Ok(text.split(',').map(str::to_owned).collect())
    }
}

/// What `trusted_proxies` takes, for an error that found something else.
pub(super) const EXPECTED: &str =
    "expected an array of addresses or networks, e.g. [\"127.0.0.1\", \"10.0.0.0/8\"]";

/// One entry: a network, or an address standing for itself alone.
fn network(text: &str) -> Result<IpNet, String> {
    let net = match text.parse::<IpNet>() {
        Ok(net) => net,
        Err(_) => match text.parse::<IpAddr>() {
            Ok(addr) => IpNet::from(addr),
            Err(_) => return Err(not_a_network(text)),
        },
    };
    Ok(canonical(net))
}

/// Why `text` is no network: a bad prefix length after a good address says so.
fn not_a_network(text: &str) -> String {
    match text.split_once('/').map(|(a, _)| a.parse::<IpAddr>()) {
        Some(Ok(addr)) => {
            let max = if addr.is_ipv4() { 32 } else { 128 };
            format!("`{text}`: the prefix length must be 0..={max}")
        }
        _ => format!("`{text}` is not an IP address or network (e.g. 10.0.0.0/8)"),
    }
}

/// An IPv4-mapped entry (`::ffff:10.0.0.0/104`) as the IPv4 network it names,
/// since [`TrustedProxies::contains`] compares peers in their IPv4 form.
fn canonical(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net {
        if let Some(v4) = v6.addr().to_ipv4_mapped() {
            if let Some(prefix) = v6.prefix_len().checked_sub(96) {
                if let Ok(v4net) = Ipv4Net::new(v4, prefix) {
                    return IpNet::V4(v4net);
                }
            }
        }
    }
    net
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_and_networks_in_either_form() {
        let p = TrustedProxies::parse(r#"["127.0.0.1", "10.0.0.0/8", "fd00::/8"]"#).unwrap();
        assert!(p.contains(ip("127.0.0.1")));
        assert!(p.contains(ip("::ffff:127.0.0.1")), "v4-mapped peers match");
        assert!(!p.contains(ip("127.0.0.2")));
        assert!(p.contains(ip("10.200.3.4")));
        assert!(!p.contains(ip("11.0.0.1")));
        assert!(p.contains(ip("fd12::1")));
        assert!(!p.contains(ip("fe80::1")));
        let list = TrustedProxies::parse("192.168.0.0/16, ::1").unwrap();
        assert!(list.contains(ip("192.168.7.7")) && list.contains(ip("::1")));
        assert!(TrustedProxies::parse("0.0.0.0/0")
            .unwrap()
            .contains(ip("8.8.8.8")));
        assert!(TrustedProxies::parse("").unwrap().is_empty());
    }

    #[test]
    fn a_mapped_entry_matches_the_ipv4_peer() {
        let p = TrustedProxies::parse("::ffff:10.0.0.0/104").unwrap();
        assert!(p.contains(ip("10.1.2.3")));
        assert!(p.contains(ip("::ffff:10.1.2.3")));
        assert!(!p.contains(ip("11.1.2.3")));
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        for bad in [
            "10.0.0.0/33",
            "proxy.example.com",
            "[1]",
            "::1/129",
            "10.0.0.1/x",
        ] {
            assert!(TrustedProxies::parse(bad).is_err(), "{bad}");
        }
        let err = TrustedProxies::parse("10.0.0.0/33").unwrap_err();
        assert!(err.contains("prefix length must be 0..=32"), "{err}");
        let err = TrustedProxies::parse("::/200").unwrap_err();
        assert!(err.contains("0..=128"), "{err}");
        let err = TrustedProxies::parse("proxy.example.com").unwrap_err();
        assert!(err.contains("not an IP address or network"), "{err}");
        assert_eq!(TrustedProxies::parse("[1]").unwrap_err(), EXPECTED);
    }
}
