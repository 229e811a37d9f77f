//! Who sent a request: the TCP peer, or, when the peer is a configured trusted proxy, the
//! client its `X-Forwarded-For` names. Without trusted proxies the header is never believed:
//! anyone can write it.

use std::net::IpAddr;

use hyper::http::HeaderMap;

/// An address range, `10.0.0.0/8` or a single address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let bad =
            || format!("{text:?} is not an address or range like \"127.0.0.1\" or \"10.0.0.0/8\"");
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(bad)?,
            None => max,
        };
        // A range written IPv4-mapped (`::ffff:192.0.2.0/120`) is an IPv4 range: `contains`
        // sees a mapped peer as the IPv4 address it is.
        if let IpAddr::V6(v6) = addr
            && let Some(v4) = v6.to_ipv4_mapped()
            && prefix >= 96
        {
            return Ok(Cidr {
                addr: IpAddr::V4(v4),
                prefix: prefix - 96,
            });
        }
        Ok(Cidr { addr, prefix })
    }

    /// Whether the two share an address (ranges are nested or apart).
    pub fn overlaps(&self, other: &Cidr) -> bool {
        self.contains(other.addr) || other.contains(self.addr)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        // An IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// As written in a configuration: `10.0.0.0/8`, or the bare address for a single one.
impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let single = self.prefix == if self.addr.is_ipv4() { 32 } else { 128 };
        if single {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.prefix)
        }
    }
}

/// The client's address: the peer itself, unless the peer is trusted; then the nearest
/// address in `X-Forwarded-For` (read from the right) that is not itself a trusted proxy.
pub fn client(peer: IpAddr, headers: &HeaderMap, trusted: &[Cidr]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    let mut client = peer;
    // Several headers are one list in order; each proxy appends the address it saw.
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .collect();
    for hop in hops.iter().rev() {
        match hop.trim().parse::<IpAddr>() {
            Ok(ip) => {
                client = ip;
                if !is_trusted(ip) {
                    break;
                }
            }
            // Garbage in the chain: believe nothing further out than the last good hop.
            Err(_) => break,
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xff(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", v.parse().unwrap());
        h
    }

    #[test]
    fn ranges() {
        let net = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(net.contains("10.1.2.3".parse().unwrap()));
        assert!(!net.contains("11.0.0.1".parse().unwrap()));
        assert!(
            Cidr::parse("127.0.0.1")
                .unwrap()
                .contains("::ffff:127.0.0.1".parse().unwrap())
        );
        assert!(Cidr::parse("::1").unwrap().contains("::1".parse().unwrap()));
        assert!(
            Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        // Written IPv4-mapped, a range is the IPv4 one; a mapped peer is found in either.
        let mapped = Cidr::parse("::ffff:192.0.2.0/120").unwrap();
        assert_eq!(mapped, Cidr::parse("192.0.2.0/24").unwrap());
        assert!(mapped.contains("::ffff:192.0.2.9".parse().unwrap()));
        let v6 = Cidr::parse("2a0a:a440::/29").unwrap();
        assert!(v6.contains("2a0a:a447:1::1".parse().unwrap()));
        assert!(!v6.contains("2a0a:a448::1".parse().unwrap()));
        assert!(!v6.contains("192.30.252.1".parse().unwrap()));
        for text in ["192.30.252.0/22", "2a0a:a440::/29", "127.0.0.1", "::1"] {
            assert_eq!(Cidr::parse(text).unwrap().to_string(), text);
        }
        assert!(Cidr::parse("localhost").is_err());
    }

    #[test]
    fn forwarded_for_only_from_trusted_peers() {
        let trusted = [Cidr::parse("127.0.0.1").unwrap()];
        let local = "127.0.0.1".parse().unwrap();
        let remote = "198.51.100.9".parse().unwrap();
        assert_eq!(
            client(local, &xff("203.0.113.7"), &trusted).to_string(),
            "203.0.113.7"
        );
        assert_eq!(client(remote, &xff("203.0.113.7"), &trusted), remote);
        assert_eq!(client(local, &xff("203.0.113.7"), &[]), local);
        // The client cannot forge its way past the proxy: the proxy appended the real one.
        assert_eq!(
            client(local, &xff("1.1.1.1, 203.0.113.7"), &trusted).to_string(),
            "203.0.113.7"
        );
        assert_eq!(client(local, &xff("nonsense"), &trusted), local);
        assert_eq!(client(local, &HeaderMap::new(), &trusted), local);
    }
}
