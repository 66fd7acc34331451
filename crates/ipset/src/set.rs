//! Set types, create options (the set header) and whole sets, with `ipset save` rendering.
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::entry::Member;
use crate::error::ParseError;
use crate::name::SetName;

/// An address family of a hash set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Family {
    /// IPv4, `family inet`.
    #[default]
    Inet,
    /// IPv6, `family inet6`.
    Inet6,
}

impl Family {
    /// The family of an address.
    pub fn of(addr: IpAddr) -> Self {
        if addr.is_ipv4() {
            Family::Inet
        } else {
            Family::Inet6
        }
    }

    /// The name `ipset` prints.
    pub fn name(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Inet6 => "inet6",
        }
    }

    /// `NFPROTO_IPV4` / `NFPROTO_IPV6`.
    pub(crate) fn nfproto(self) -> u8 {
        match self {
            Family::Inet => 2,
            Family::Inet6 => 10,
        }
    }

    pub(crate) fn from_nfproto(v: u8) -> Option<Self> {
        match v {
            2 => Some(Family::Inet),
            10 => Some(Family::Inet6),
            _ => None,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Family {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "inet" | "ipv4" => Ok(Family::Inet),
            "inet6" | "ipv6" => Ok(Family::Inet6),
            _ => Err(ParseError::new("family inet or inet6", s)),
        }
    }
}

/// The set types this crate handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetType {
    /// `hash:ip`
    HashIp,
    /// `hash:net`
    HashNet,
    /// `hash:ip,port`
    HashIpPort,
    /// `hash:ip,port,ip`
    HashIpPortIp,
    /// `hash:ip,port,net`
    HashIpPortNet,
    /// `hash:net,port`
    HashNetPort,
    /// `bitmap:port`
    BitmapPort,
}

impl SetType {
    /// Every supported type.
    pub const ALL: [SetType; 7] = [
        SetType::HashIp,
        SetType::HashNet,
        SetType::HashIpPort,
        SetType::HashIpPortIp,
        SetType::HashIpPortNet,
        SetType::HashNetPort,
        SetType::BitmapPort,
    ];

    /// The kernel's type name.
    pub fn name(self) -> &'static str {
        match self {
            SetType::HashIp => "hash:ip",
            SetType::HashNet => "hash:net",
            SetType::HashIpPort => "hash:ip,port",
            SetType::HashIpPortIp => "hash:ip,port,ip",
            SetType::HashIpPortNet => "hash:ip,port,net",
            SetType::HashNetPort => "hash:net,port",
            SetType::BitmapPort => "bitmap:port",
        }
    }

    /// Whether sets of this type have an address family (all but `bitmap:port`).
    pub fn has_family(self) -> bool {
        self != SetType::BitmapPort
    }
}

impl fmt::Display for SetType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SetType {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        SetType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| ParseError::new("a supported set type", s))
    }
}

/// An inclusive port range, the `range` of a `bitmap:port` set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRange {
    /// First port.
    pub from: u16,
    /// Last port (inclusive).
    pub to: u16,
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.from, self.to)
    }
}

impl FromStr for PortRange {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let err = || ParseError::new("port range FROM-TO", s);
        let (a, b) = s.split_once('-').ok_or_else(err)?;
        let (from, to) = (a.parse().map_err(|_| err())?, b.parse().map_err(|_| err())?);
        if from > to {
            return Err(err());
        }
        Ok(PortRange { from, to })
    }
}

/// A set's name, type and create options: one `create` line of `ipset save`.
///
/// Options left `None` take the kernel's defaults; the kernel reports them back, so a header
/// read from the kernel has `hashsize`, `maxelem`, `bucketsize` and `initval` filled in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Header {
    /// The set's name.
    pub name: SetName,
    /// The set's type.
    pub set_type: SetType,
    /// Address family (hash types; not used by `bitmap:port`).
    pub family: Family,
    /// Port range (`bitmap:port` only, where it is required).
    pub range: Option<PortRange>,
    /// Initial hash size (hash types; the kernel rounds up to a power of two).
    pub hashsize: Option<u32>,
    /// Maximal number of elements (hash types).
    pub maxelem: Option<u32>,
    /// Default entry timeout in seconds; enables per-entry timeouts.
    pub timeout: Option<u32>,
    /// Per-entry packet and byte counters.
    pub counters: bool,
    /// Per-entry comments.
    pub comment: bool,
    /// Bucket size (hash types, kernel revision that supports it).
    pub bucketsize: Option<u8>,
    /// Hash seed (hash types); printed by `ipset save` so a restore reproduces the set.
    pub initval: Option<u32>,
}

impl Header {
    /// A hash set header with default options.
    pub fn hash(name: SetName, set_type: SetType, family: Family) -> Self {
        Header {
            name,
            set_type,
            family,
            range: None,
            hashsize: None,
            maxelem: None,
            timeout: None,
            counters: false,
            comment: false,
            bucketsize: None,
            initval: None,
        }
    }

    /// A `bitmap:port` header over `from..=to`.
    pub fn bitmap_port(name: SetName, from: u16, to: u16) -> Self {
        Header {
            range: Some(PortRange { from, to }),
            ..Header::hash(name, SetType::BitmapPort, Family::Inet)
        }
    }

    /// Sets `hashsize`.
    pub fn with_hashsize(mut self, n: u32) -> Self {
        self.hashsize = Some(n);
        self
    }

    /// Sets `maxelem`.
    pub fn with_maxelem(mut self, n: u32) -> Self {
        self.maxelem = Some(n);
        self
    }

    /// Sets the default timeout.
    pub fn with_timeout(mut self, seconds: u32) -> Self {
        self.timeout = Some(seconds);
        self
    }

    /// Enables counters.
    pub fn with_counters(mut self) -> Self {
        self.counters = true;
        self
    }

    /// Enables comments.
    pub fn with_comment(mut self) -> Self {
        self.comment = true;
        self
    }

    /// The same header under another name.
    pub fn renamed(&self, name: SetName) -> Self {
        Header {
            name,
            ..self.clone()
        }
    }

    /// Checks that options fit the type (a range only and always for `bitmap:port`...).
    pub fn check(&self) -> Result<(), String> {
        let hash = self.set_type.has_family();
        if hash && self.range.is_some() {
            return Err(format!("{} takes no range", self.set_type));
        }
        if !hash {
            if self.range.is_none() {
                return Err("bitmap:port needs a range".into());
            }
            if self.hashsize.is_some()
                || self.maxelem.is_some()
                || self.bucketsize.is_some()
                || self.initval.is_some()
            {
                return Err("bitmap:port takes no hash options".into());
            }
        }
        Ok(())
    }

    /// Parses the options after `create NAME TYPE` (also the `Header:` line of `ipset list`).
    pub fn parse_options(
        name: SetName,
        set_type: SetType,
        options: &str,
    ) -> Result<Self, ParseError> {
        let mut h = Header::hash(name, set_type, Family::Inet);
        let tokens = crate::text::tokenize(options)?;
        let mut it = tokens.iter().map(String::as_str);
        while let Some(key) = it.next() {
            let mut value = |what: &str| {
                it.next()
                    .ok_or_else(|| ParseError::new(format!("a value after {what}"), options))
            };
            match key {
                "family" => h.family = value(key)?.parse()?,
                "hashsize" => h.hashsize = Some(number(value(key)?)?),
                "maxelem" => h.maxelem = Some(number(value(key)?)?),
                "timeout" => h.timeout = Some(number(value(key)?)?),
                "bucketsize" => h.bucketsize = Some(number(value(key)?)?),
                "initval" => h.initval = Some(hex(value(key)?)?),
                "range" => h.range = Some(value(key)?.parse()?),
                "counters" => h.counters = true,
                "comment" => h.comment = true,
                other => return Err(ParseError::new("a supported create option", other)),
            }
        }
        h.check().map_err(|what| ParseError::new(what, options))?;
        Ok(h)
    }
}

fn number<T: FromStr>(s: &str) -> Result<T, ParseError> {
    s.parse().map_err(|_| ParseError::new("a number", s))
}

fn hex(s: &str) -> Result<u32, ParseError> {
    let digits = s.strip_prefix("0x").unwrap_or(s);
    u32::from_str_radix(digits, 16).map_err(|_| ParseError::new("a hex number 0x…", s))
}

impl fmt::Display for Header {
    /// The `create` line, exactly as `ipset save` writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "create {} {}", self.name, self.set_type)?;
        if self.set_type.has_family() {
            write!(f, " family {}", self.family)?;
        }
        if let Some(n) = self.hashsize {
            write!(f, " hashsize {n}")?;
        }
        if let Some(n) = self.maxelem {
            write!(f, " maxelem {n}")?;
        }
        if let Some(r) = self.range {
            write!(f, " range {r}")?;
        }
        if let Some(t) = self.timeout {
            write!(f, " timeout {t}")?;
        }
        if self.counters {
            f.write_str(" counters")?;
        }
        if self.comment {
            f.write_str(" comment")?;
        }
        if let Some(n) = self.bucketsize {
            write!(f, " bucketsize {n}")?;
        }
        if let Some(n) = self.initval {
            write!(f, " initval 0x{n:08x}")?;
        }
        Ok(())
    }
}

/// A whole set: its header and members, as one `ipset save` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    /// Name, type and options.
    pub header: Header,
    /// The entries, in the order read (the kernel's hash order) or given.
    pub members: Vec<Member>,
}

impl Set {
    /// An empty set.
    pub fn new(header: Header) -> Self {
        Set {
            header,
            members: Vec::new(),
        }
    }

    /// The set's name.
    pub fn name(&self) -> &SetName {
        &self.header.name
    }

    /// Members sorted, for order-independent comparison.
    pub fn sorted(mut self) -> Self {
        self.members.sort();
        self
    }
}

impl fmt::Display for Set {
    /// `create …` then one `add …` line per member, each ending in a newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.header)?;
        for m in &self.members {
            writeln!(f, "add {} {}", self.header.name, m)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> SetName {
        SetName::new(s).unwrap()
    }

    #[test]
    fn header_lines_round_trip_as_ipset_prints_them() {
        // Lines printed by ipset v7.17 on kernel 6.18.
        for line in [
            "create a hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x5f9eeb3b",
            "create b hash:net family inet6 hashsize 1024 maxelem 65536 timeout 300 counters comment bucketsize 12 initval 0x328cbaca",
            "create d hash:ip,port,ip family inet6 hashsize 1024 maxelem 65536 bucketsize 12 initval 0x06098b26",
            "create g bitmap:port range 0-65535",
            "create h bitmap:port range 1000-2000 timeout 10 counters",
        ] {
            let mut words = line.splitn(4, ' ');
            words.next();
            let n = name(words.next().unwrap());
            let t: SetType = words.next().unwrap().parse().unwrap();
            let h = Header::parse_options(n, t, words.next().unwrap_or("")).unwrap();
            assert_eq!(h.to_string(), line);
        }
    }

    #[test]
    fn check_refuses_options_of_the_wrong_type() {
        assert!(
            Header::hash(name("a"), SetType::BitmapPort, Family::Inet)
                .check()
                .is_err()
        );
        let mut h = Header::hash(name("a"), SetType::HashIp, Family::Inet);
        h.range = Some(PortRange { from: 1, to: 2 });
        assert!(h.check().is_err());
        assert!(
            Header::bitmap_port(name("a"), 1, 2)
                .with_hashsize(64)
                .check()
                .is_err()
        );
        assert!(Header::bitmap_port(name("a"), 1, 2).check().is_ok());
    }

    #[test]
    fn refuses_unknown_options_and_types() {
        assert!(
            Header::parse_options(name("a"), SetType::HashIp, "family inet netmask 24").is_err()
        );
        assert!("hash:mac".parse::<SetType>().is_err());
        assert!("5-4".parse::<PortRange>().is_err());
    }
}
