//! Typed entries and their `ipset save` syntax (pure code, no FFI).
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::error::ParseError;
use crate::set::{Family, SetType};

/// The layer-4 protocol of a `…,port` entry part, as `ipset save` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// `tcp` (6).
    Tcp,
    /// `udp` (17).
    Udp,
    /// `sctp` (132).
    Sctp,
    /// `udplite` (136).
    UdpLite,
}

impl Protocol {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
            Protocol::UdpLite => 136,
        }
    }

    /// The name `ipset` prints.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
            Protocol::UdpLite => "udplite",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Protocol {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            "sctp" => Ok(Protocol::Sctp),
            "udplite" => Ok(Protocol::UdpLite),
            _ => Err(ParseError::new("protocol tcp, udp, sctp or udplite", s)),
        }
    }
}

/// An IP network: an address with its host bits cleared and a prefix length.
///
/// Construction masks the host bits, as the kernel does, so `10.1.2.3/8` and `10.0.0.0/8`
/// are the same value and round trips through the kernel are exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    /// `addr/prefix`, host bits cleared; `None` if the prefix is longer than the address.
    /// (The kernel also refuses a prefix of 0 in hash types.)
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        let addr = match addr {
            IpAddr::V4(a) if prefix <= 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) if prefix <= 128 => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
            _ => return None,
        };
        Some(Net { addr, prefix })
    }

    /// A single host: `/32` or `/128`.
    pub fn host(addr: IpAddr) -> Self {
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        Net { addr, prefix }
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// The address family.
    pub fn family(&self) -> Family {
        Family::of(self.addr)
    }

    fn is_host(&self) -> bool {
        self.prefix == if self.addr.is_ipv4() { 32 } else { 128 }
    }
}

impl fmt::Display for Net {
    /// `ipset` prints a full-length prefix as a bare address.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_host() {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.prefix)
        }
    }
}

impl FromStr for Net {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let err = || ParseError::new("network address[/prefix]", s);
        match s.split_once('/') {
            None => Ok(Net::host(s.parse().map_err(|_| err())?)),
            Some((addr, prefix)) => {
                let addr = addr.parse().map_err(|_| err())?;
                let prefix = prefix.parse().map_err(|_| err())?;
                Net::new(addr, prefix).ok_or_else(err)
            }
        }
    }
}

/// One element of a set, shaped by the set's type.
///
/// Each variant is the element of the set type of the same name; [`Entry::set_type`] says
/// which. `Display` writes the element as `ipset save` does; [`Entry::parse`] reads it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Entry {
    /// `hash:ip`: `10.0.0.1`.
    Ip(IpAddr),
    /// `hash:net`: `10.0.0.0/8`.
    Net(Net),
    /// `hash:ip,port`: `10.0.0.1,tcp:80`.
    IpPort {
        /// The address.
        ip: IpAddr,
        /// The protocol.
        protocol: Protocol,
        /// The port.
        port: u16,
    },
    /// `hash:ip,port,ip`: `10.0.0.1,tcp:80,10.0.0.2`.
    IpPortIp {
        /// The first address.
        ip: IpAddr,
        /// The protocol.
        protocol: Protocol,
        /// The port.
        port: u16,
        /// The second address.
        ip2: IpAddr,
    },
    /// `hash:ip,port,net`: `10.0.0.1,tcp:80,10.0.0.0/8`.
    IpPortNet {
        /// The address.
        ip: IpAddr,
        /// The protocol.
        protocol: Protocol,
        /// The port.
        port: u16,
        /// The network.
        net: Net,
    },
    /// `hash:net,port`: `10.0.0.0/8,udp:53`.
    NetPort {
        /// The network.
        net: Net,
        /// The protocol.
        protocol: Protocol,
        /// The port.
        port: u16,
    },
    /// `bitmap:port`: `80`.
    Port(u16),
}

impl Entry {
    /// The set type this entry belongs to.
    pub fn set_type(&self) -> SetType {
        match self {
            Entry::Ip(_) => SetType::HashIp,
            Entry::Net(_) => SetType::HashNet,
            Entry::IpPort { .. } => SetType::HashIpPort,
            Entry::IpPortIp { .. } => SetType::HashIpPortIp,
            Entry::IpPortNet { .. } => SetType::HashIpPortNet,
            Entry::NetPort { .. } => SetType::HashNetPort,
            Entry::Port(_) => SetType::BitmapPort,
        }
    }

    /// The address family, `None` for `bitmap:port`.
    pub fn family(&self) -> Option<Family> {
        match self {
            Entry::Ip(ip)
            | Entry::IpPort { ip, .. }
            | Entry::IpPortIp { ip, .. }
            | Entry::IpPortNet { ip, .. } => Some(Family::of(*ip)),
            Entry::Net(net) | Entry::NetPort { net, .. } => Some(net.family()),
            Entry::Port(_) => None,
        }
    }

    /// Whether all addresses inside share one family (a mixed entry cannot be sent).
    pub fn is_consistent(&self) -> bool {
        match self {
            Entry::IpPortIp { ip, ip2, .. } => ip.is_ipv4() == ip2.is_ipv4(),
            Entry::IpPortNet { ip, net, .. } => ip.is_ipv4() == net.addr().is_ipv4(),
            _ => true,
        }
    }

    /// Parses an element of a set of type `set_type`, as `ipset save` prints it.
    ///
    /// Like `ipset restore`, a port without a protocol means TCP.
    ///
    /// ```
    /// use libipset::{Entry, Protocol, SetType};
    /// let e = Entry::parse(SetType::HashIpPort, "10.96.0.1,tcp:443").unwrap();
    /// assert_eq!(e, Entry::IpPort { ip: "10.96.0.1".parse().unwrap(), protocol: Protocol::Tcp, port: 443 });
    /// assert_eq!(e.to_string(), "10.96.0.1,tcp:443");
    /// ```
    pub fn parse(set_type: SetType, text: &str) -> Result<Entry, ParseError> {
        let err = || ParseError::new(format!("{set_type} element"), text);
        let parts: Vec<&str> = text.split(',').collect();
        let ip = |s: &str| s.parse::<IpAddr>().map_err(|_| err());
        let net = |s: &str| s.parse::<Net>().map_err(|_| err());
        let entry = match (set_type, parts.as_slice()) {
            (SetType::HashIp, [a]) => Entry::Ip(ip(a)?),
            (SetType::HashNet, [n]) => Entry::Net(net(n)?),
            (SetType::HashIpPort, [a, p]) => {
                let (protocol, port) = parse_proto_port(p).ok_or_else(err)?;
                Entry::IpPort {
                    ip: ip(a)?,
                    protocol,
                    port,
                }
            }
            (SetType::HashIpPortIp, [a, p, b]) => {
                let (protocol, port) = parse_proto_port(p).ok_or_else(err)?;
                Entry::IpPortIp {
                    ip: ip(a)?,
                    protocol,
                    port,
                    ip2: ip(b)?,
                }
            }
            (SetType::HashIpPortNet, [a, p, n]) => {
                let (protocol, port) = parse_proto_port(p).ok_or_else(err)?;
                Entry::IpPortNet {
                    ip: ip(a)?,
                    protocol,
                    port,
                    net: net(n)?,
                }
            }
            (SetType::HashNetPort, [n, p]) => {
                let (protocol, port) = parse_proto_port(p).ok_or_else(err)?;
                Entry::NetPort {
                    net: net(n)?,
                    protocol,
                    port,
                }
            }
            (SetType::BitmapPort, [p]) => Entry::Port(p.parse().map_err(|_| err())?),
            _ => return Err(err()),
        };
        if entry.is_consistent() {
            Ok(entry)
        } else {
            Err(ParseError::new("addresses of one family", text))
        }
    }
}

fn parse_proto_port(s: &str) -> Option<(Protocol, u16)> {
    match s.split_once(':') {
        Some((proto, port)) => Some((proto.parse().ok()?, port.parse().ok()?)),
        None => Some((Protocol::Tcp, s.parse().ok()?)),
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Ip(ip) => write!(f, "{ip}"),
            Entry::Net(net) => write!(f, "{net}"),
            Entry::IpPort { ip, protocol, port } => write!(f, "{ip},{protocol}:{port}"),
            Entry::IpPortIp {
                ip,
                protocol,
                port,
                ip2,
            } => {
                write!(f, "{ip},{protocol}:{port},{ip2}")
            }
            Entry::IpPortNet {
                ip,
                protocol,
                port,
                net,
            } => {
                write!(f, "{ip},{protocol}:{port},{net}")
            }
            Entry::NetPort {
                net,
                protocol,
                port,
            } => write!(f, "{net},{protocol}:{port}"),
            Entry::Port(port) => write!(f, "{port}"),
        }
    }
}

/// Per-entry extensions, written after the element in `ipset save` syntax.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntryOptions {
    /// Seconds left (sets created with a timeout); `timeout 0` means permanent.
    pub timeout: Option<u32>,
    /// Packet counter (sets created with `counters`).
    pub packets: Option<u64>,
    /// Byte counter (sets created with `counters`).
    pub bytes: Option<u64>,
    /// Comment (sets created with `comment`): at most 255 bytes, no `"` and no NUL.
    pub comment: Option<String>,
}

impl EntryOptions {
    /// True when no option is set.
    pub fn is_empty(&self) -> bool {
        *self == EntryOptions::default()
    }
}

impl fmt::Display for EntryOptions {
    /// Space-separated options, each preceded by a space, in `ipset save`'s order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(t) = self.timeout {
            write!(f, " timeout {t}")?;
        }
        if let Some(p) = self.packets {
            write!(f, " packets {p}")?;
        }
        if let Some(b) = self.bytes {
            write!(f, " bytes {b}")?;
        }
        if let Some(c) = &self.comment {
            write!(f, " comment \"{c}\"")?;
        }
        Ok(())
    }
}

/// The longest comment the kernel keeps, in bytes.
pub const MAX_COMMENT_LEN: usize = 255;

pub(crate) fn check_comment(c: &str) -> Result<(), String> {
    if c.len() > MAX_COMMENT_LEN {
        Err(format!("comment longer than {MAX_COMMENT_LEN} bytes"))
    } else if c.contains(['"', '\0']) {
        Err("comment contains '\"' or NUL".into())
    } else {
        Ok(())
    }
}

/// An entry with its options: one `add` line of `ipset save`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    /// The element.
    pub entry: Entry,
    /// Timeout, counters, comment.
    pub options: EntryOptions,
}

impl Member {
    /// A member without options.
    pub fn new(entry: Entry) -> Self {
        Member {
            entry,
            options: EntryOptions::default(),
        }
    }

    /// With a timeout in seconds.
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.options.timeout = Some(seconds);
        self
    }

    /// With a comment.
    pub fn comment(mut self, comment: impl Into<String>) -> Self {
        self.options.comment = Some(comment.into());
        self
    }
}

impl From<Entry> for Member {
    fn from(entry: Entry) -> Self {
        Member::new(entry)
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.entry, self.options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_type_renders_and_parses_v4_and_v6() {
        let cases = [
            (SetType::HashIp, "10.0.0.1"),
            (SetType::HashIp, "fd00::1"),
            (SetType::HashNet, "10.0.0.0/8"),
            (SetType::HashNet, "10.0.0.1"),
            (SetType::HashNet, "fd00::/64"),
            (SetType::HashIpPort, "10.0.0.1,udp:53"),
            (SetType::HashIpPort, "fd00::1,sctp:5"),
            (SetType::HashIpPortIp, "10.0.0.1,tcp:80,10.0.0.2"),
            (SetType::HashIpPortIp, "fd00::1,tcp:80,fd00::2"),
            (SetType::HashIpPortNet, "10.0.0.1,tcp:80,10.0.0.0/8"),
            (SetType::HashIpPortNet, "fd00::1,udplite:9,fd00:1::/48"),
            (SetType::HashNetPort, "10.0.0.0/8,udp:53"),
            (SetType::HashNetPort, "fd00::/8,tcp:1"),
            (SetType::BitmapPort, "65535"),
        ];
        for (t, text) in cases {
            let e = Entry::parse(t, text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(e.set_type(), t);
            assert_eq!(e.to_string(), text);
        }
    }

    #[test]
    fn net_masks_host_bits_and_prints_hosts_bare() {
        let n: Net = "10.1.2.3/8".parse().unwrap();
        assert_eq!(n.to_string(), "10.0.0.0/8");
        assert_eq!(Net::new(ip("fd00::1"), 128).unwrap().to_string(), "fd00::1");
        assert_eq!(
            "10.0.0.1/32".parse::<Net>().unwrap().to_string(),
            "10.0.0.1"
        );
        assert_eq!(Net::new(ip("1.2.3.4"), 0).unwrap().to_string(), "0.0.0.0/0");
        assert!(Net::new(ip("1.2.3.4"), 33).is_none());
        assert!(Net::new(ip("::1"), 129).is_none());
    }

    #[test]
    fn bare_port_means_tcp() {
        assert_eq!(
            Entry::parse(SetType::HashIpPort, "10.0.0.1,80")
                .unwrap()
                .to_string(),
            "10.0.0.1,tcp:80"
        );
    }

    #[test]
    fn refuses_wrong_shapes() {
        for (t, text) in [
            (SetType::HashIp, "10.0.0.1,tcp:80"),
            (SetType::HashIp, "10.0.0.0/8"),
            (SetType::HashIpPort, "10.0.0.1"),
            (SetType::HashIpPort, "10.0.0.1,icmp:ping"),
            (SetType::HashIpPort, "10.0.0.1,tcp:65536"),
            (SetType::HashIpPortIp, "10.0.0.1,tcp:80,fd00::1"),
            (SetType::HashIpPortNet, "10.0.0.1,tcp:80,10.0.0.0/33"),
            (SetType::BitmapPort, "-1"),
            (SetType::HashNet, ""),
        ] {
            assert!(Entry::parse(t, text).is_err(), "{t} {text}");
        }
    }

    #[test]
    fn options_render_in_save_order() {
        let m = Member {
            entry: Entry::Port(80),
            options: EntryOptions {
                timeout: Some(9),
                packets: Some(1),
                bytes: Some(2),
                comment: Some("a b".into()),
            },
        };
        assert_eq!(
            m.to_string(),
            "80 timeout 9 packets 1 bytes 2 comment \"a b\""
        );
    }
}
