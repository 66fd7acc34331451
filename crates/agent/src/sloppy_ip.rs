//! Addresses and CIDRs read as kube-proxy reads them: `netutils.ParseIPSloppy` and
//! `ParseCIDRSloppy` (k8s.io/utils), Go's parser from before 1.17.
//!
//! Go 1.17 stopped accepting IPv4 numbers with leading zeros; Kubernetes kept the old
//! parser for what is already stored, because objects written before the API server
//! validated strictly (and KEP-4858 ratchets only new writes) still exist on long-lived
//! clusters. Rust's parser is strict, so read alone it would drop those objects where
//! kube-proxy serves them. What the old parser accepts beyond the strict one:
//! - IPv4 numbers with leading zeros, read as decimal (`010.001.2.3` is 10.1.2.3, not octal);
//! - IPv6 groups of more than four hex digits whose value fits (`00001::` is `1::`), and the
//!   same IPv4 leniency in an IPv6 address's dotted tail;
//! - CIDR prefix lengths with leading zeros (`/024`).
//!
//! An IPv4-mapped IPv6 address (`::ffff:10.1.2.3`) is IPv4 to Go (`To4()` is not nil), and
//! so to kube-proxy's family split: it is returned as IPv4 here. A CIDR keeps the form it was
//! written in (`::ffff:10.0.0.0/104` stays IPv6), as `ParseCIDR` does, with its host bits
//! masked off.
//!
//! Hand-written because no crate parses Go's legacy forms; the strict parser of the standard
//! library does the rest once a value is rewritten in canonical digits.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// `value` as `netutils.ParseIPSloppy` reads it, or `None` where that returns nil.
pub fn parse_ip(value: &str) -> Option<IpAddr> {
    let ip = parse_literal(value)?;
    Some(match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    })
}

/// `value` as `netutils.ParseCIDRSloppy` reads it, host bits masked off, or `None` where that
/// fails.
pub fn parse_cidr(value: &str) -> Option<IpNet> {
    let (address, prefix) = value.split_once('/')?;
    let ip = parse_literal(address)?;
    let prefix = decimal(prefix)?;
    let net = IpNet::new(ip, u8::try_from(prefix).ok()?).ok()?;
    Some(net.trunc())
}

/// The address as written: IPv4 if it parses as IPv4, else IPv6 (Go's order).
fn parse_literal(value: &str) -> Option<IpAddr> {
    if let Some(v4) = parse_v4(value) {
        return Some(IpAddr::V4(v4));
    }
    parse_v6(value).map(IpAddr::V6)
}

/// Four dot-separated decimal numbers, each at most 255, leading zeros allowed.
fn parse_v4(value: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = value.split('.');
    for octet in &mut octets {
        *octet = u8::try_from(decimal(parts.next()?)?).ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
}

/// IPv6, with each group's digits and any dotted tail rewritten canonically, then parsed
/// strictly.
fn parse_v6(value: &str) -> Option<Ipv6Addr> {
    if !value.contains(':') {
        return None;
    }
    let mut canonical = String::with_capacity(value.len());
    let mut groups = value.split(':').peekable();
    while let Some(group) = groups.next() {
        let last = groups.peek().is_none();
        if group.is_empty() {
            // Part of "::", or a stray colon the strict parser refuses.
        } else if last && group.contains('.') {
            canonical.push_str(&parse_v4(group)?.to_string());
        } else {
            canonical.push_str(&format!("{:x}", hex16(group)?));
        }
        if !last {
            canonical.push(':');
        }
    }
    canonical.parse().ok()
}

/// Decimal digits only, at least one; `None` beyond what any field holds (Go's `dtoi`, whose
/// callers then refuse anything over 255 or the prefix length).
fn decimal(digits: &str) -> Option<u32> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.bytes().try_fold(0u32, |n, b| {
        n.checked_mul(10)?.checked_add(u32::from(b - b'0'))
    })
}

/// Hex digits only, at least one, at most 0xffff (Go's `xtoi` and its caller).
fn hex16(digits: &str) -> Option<u16> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let n = digits.bytes().try_fold(0u32, |n, b| {
        n.checked_mul(16)?.checked_add(char::from(b).to_digit(16)?)
    })?;
    u16::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<String> {
        parse_ip(s).map(|ip| ip.to_string())
    }

    fn cidr(s: &str) -> Option<String> {
        parse_cidr(s).map(|n| n.to_string())
    }

    /// Expected values from Go: k8s.io/utils/net's ParseIPSloppy and ParseCIDRSloppy (the
    /// cases of its parse_test.go and Go 1.16's net.ParseIP tests).
    #[test]
    fn addresses_as_parse_ip_sloppy_reads_them() {
        for (input, want) in [
            ("10.1.2.3", Some("10.1.2.3")),
            ("010.001.002.003", Some("10.1.2.3")),
            ("0010.01.2.08", Some("10.1.2.8")),
            ("00000000000000000127.0.0.1", Some("127.0.0.1")),
            ("256.1.1.1", None),
            ("0256.1.1.1", None),
            ("1.2.3", None),
            ("1.2.3.4.5", None),
            ("1.2.3.", None),
            (".1.2.3", None),
            ("1.2.3.-4", None),
            ("+1.2.3.4", None),
            (" 1.2.3.4", None),
            ("1.2.3.4 ", None),
            ("0x1.2.3.4", None),
            ("", None),
            ("2001:db8::1", Some("2001:db8::1")),
            ("2001:0db8:0000::00001", Some("2001:db8::1")),
            ("2001:db8::10000", None),
            ("::ffff:010.1.2.3", Some("10.1.2.3")),
            ("::ffff:10.1.2.3", Some("10.1.2.3")),
            ("64:ff9b::010.0.0.1", Some("64:ff9b::a00:1")),
            ("::", Some("::")),
            ("1::2::3", None),
            ("1:2:3:4:5:6:7:8:9", None),
            (":1::2", None),
            ("fe80::1%eth0", None),
            ("[::1]", None),
        ] {
            assert_eq!(ip(input).as_deref(), want, "{input:?}");
        }
    }

    #[test]
    fn cidrs_as_parse_cidr_sloppy_reads_them_masked() {
        for (input, want) in [
            ("10.0.0.0/8", Some("10.0.0.0/8")),
            ("010.001.0.0/016", Some("10.1.0.0/16")),
            ("10.1.2.3/8", Some("10.0.0.0/8")),
            ("0.0.0.0/0", Some("0.0.0.0/0")),
            ("10.0.0.0/33", None),
            ("10.0.0.0/", None),
            ("10.0.0.0", None),
            ("10.0.0.0/-1", None),
            ("10.0.0.0/ 8", None),
            ("2001:db8::1/64", Some("2001:db8::/64")),
            ("2001:db8::/0129", None),
            ("::ffff:10.0.0.0/104", Some("::ffff:10.0.0.0/104")),
        ] {
            assert_eq!(cidr(input).as_deref(), want, "{input:?}");
        }
    }

    #[test]
    fn whatever_strict_rust_reads_reads_the_same() {
        for s in [
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "1:2:3:4:5:6:7:8",
            "::ffff:0:1.2.3.4",
        ] {
            let strict: IpAddr = s.parse().unwrap();
            let strict = match strict {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
                v4 => v4,
            };
            assert_eq!(parse_ip(s), Some(strict), "{s}");
        }
    }
}
