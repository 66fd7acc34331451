//! Typed virtual services and their pure conversions to and from [`ServiceAttr`] lists.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::time::Duration;

use netlink_packet_core::DecodeError;

use super::attr::{FlagsAttr, ServiceAttr};
use crate::stats::Stats;

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// An address family IPVS supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddressFamily {
    /// IPv4 (`AF_INET`).
    Inet,
    /// IPv6 (`AF_INET6`).
    Inet6,
}

impl AddressFamily {
    /// The `AF_*` number.
    pub fn to_raw(self) -> u16 {
        match self {
            AddressFamily::Inet => AF_INET,
            AddressFamily::Inet6 => AF_INET6,
        }
    }

    /// Reads an `AF_*` number; IPVS knows no other family.
    pub fn from_raw(af: u16) -> Result<Self, DecodeError> {
        match af {
            AF_INET => Ok(AddressFamily::Inet),
            AF_INET6 => Ok(AddressFamily::Inet6),
            other => Err(DecodeError::from(format!("unknown address family {other}"))),
        }
    }

    /// The family of an address.
    pub fn of(addr: &IpAddr) -> Self {
        match addr {
            IpAddr::V4(_) => AddressFamily::Inet,
            IpAddr::V6(_) => AddressFamily::Inet6,
        }
    }

    /// Reads the kernel's 16-byte `union nf_inet_addr` as an address of this family.
    pub fn address(self, raw: &[u8; 16]) -> IpAddr {
        match self {
            AddressFamily::Inet => IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3])),
            AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::from(*raw)),
        }
    }
}

/// Writes an address as the kernel's 16-byte `union nf_inet_addr`.
pub(crate) fn raw_address(addr: &IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => {
            let mut raw = [0; 16];
            raw[..4].copy_from_slice(&a.octets());
            raw
        }
        IpAddr::V6(a) => a.octets(),
    }
}

/// The transport protocol of an address-keyed service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP (6), ipvsadm `-t`.
    Tcp,
    /// UDP (17), ipvsadm `-u`.
    Udp,
    /// SCTP (132), ipvsadm `--sctp-service`.
    Sctp,
    /// Another IP protocol number.
    Other(u16),
}

impl Protocol {
    /// The IP protocol number.
    pub fn to_raw(self) -> u16 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
            Protocol::Other(p) => p,
        }
    }

    /// From an IP protocol number.
    pub fn from_raw(p: u16) -> Self {
        match p {
            6 => Protocol::Tcp,
            17 => Protocol::Udp,
            132 => Protocol::Sctp,
            other => Protocol::Other(other),
        }
    }
}

/// What identifies a virtual service: protocol, address and port, or a firewall mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceKey {
    /// A service on an address and port (`ipvsadm -t|-u|--sctp-service ADDR:PORT`).
    Inet {
        /// The transport protocol.
        protocol: Protocol,
        /// The virtual address.
        address: IpAddr,
        /// The virtual port.
        port: u16,
    },
    /// A service on packets carrying a firewall mark (`ipvsadm -f MARK [-6]`).
    Fwmark {
        /// The family of the marked packets.
        family: AddressFamily,
        /// The mark (non-zero).
        mark: u32,
    },
}

impl ServiceKey {
    /// A TCP service.
    pub fn tcp(address: IpAddr, port: u16) -> Self {
        ServiceKey::Inet {
            protocol: Protocol::Tcp,
            address,
            port,
        }
    }

    /// A UDP service.
    pub fn udp(address: IpAddr, port: u16) -> Self {
        ServiceKey::Inet {
            protocol: Protocol::Udp,
            address,
            port,
        }
    }

    /// An SCTP service.
    pub fn sctp(address: IpAddr, port: u16) -> Self {
        ServiceKey::Inet {
            protocol: Protocol::Sctp,
            address,
            port,
        }
    }

    /// A firewall-mark service.
    pub fn fwmark(family: AddressFamily, mark: u32) -> Self {
        ServiceKey::Fwmark { family, mark }
    }

    /// The service's address family.
    pub fn family(&self) -> AddressFamily {
        match self {
            ServiceKey::Inet { address, .. } => AddressFamily::of(address),
            ServiceKey::Fwmark { family, .. } => *family,
        }
    }

    /// The key's attributes, as ipvsadm sends them to name a service.
    pub fn to_attrs(&self) -> Vec<ServiceAttr> {
        let mut attrs = vec![ServiceAttr::AddressFamily(self.family().to_raw())];
        match self {
            ServiceKey::Inet {
                protocol,
                address,
                port,
            } => {
                attrs.push(ServiceAttr::Protocol(protocol.to_raw()));
                attrs.push(ServiceAttr::Address(raw_address(address)));
                attrs.push(ServiceAttr::Port(*port));
            }
            ServiceKey::Fwmark { mark, .. } => attrs.push(ServiceAttr::Fwmark(*mark)),
        }
        attrs
    }

    /// Reads a key from a service's attributes: a non-zero fwmark wins, as in the kernel.
    pub fn from_attrs(attrs: &[ServiceAttr]) -> Result<Self, DecodeError> {
        let (mut af, mut protocol, mut address, mut port, mut mark) =
            (None, None, None, None, None);
        for a in attrs {
            match a {
                ServiceAttr::AddressFamily(v) => af = Some(*v),
                ServiceAttr::Protocol(v) => protocol = Some(*v),
                ServiceAttr::Address(v) => address = Some(*v),
                ServiceAttr::Port(v) => port = Some(*v),
                ServiceAttr::Fwmark(v) => mark = Some(*v),
                _ => {}
            }
        }
        let family = AddressFamily::from_raw(af.ok_or("service without address family")?)?;
        if let Some(mark) = mark.filter(|m| *m != 0) {
            return Ok(ServiceKey::Fwmark { family, mark });
        }
        match (protocol, address, port) {
            (Some(p), Some(a), Some(port)) => Ok(ServiceKey::Inet {
                protocol: Protocol::from_raw(p),
                address: family.address(&a),
                port,
            }),
            _ => Err(DecodeError::from(
                "service without fwmark nor protocol, address and port",
            )),
        }
    }
}

impl fmt::Display for ServiceKey {
    /// ipvsadm's numeric service notation: `-t 10.0.0.1:80`, `-f 7 -6`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceKey::Inet {
                protocol,
                address,
                port,
            } => {
                let opt = match protocol {
                    Protocol::Tcp => "-t".to_string(),
                    Protocol::Udp => "-u".to_string(),
                    Protocol::Sctp => "--sctp-service".to_string(),
                    Protocol::Other(p) => format!("--protocol {p}"),
                };
                match address {
                    IpAddr::V4(a) => write!(f, "{opt} {a}:{port}"),
                    IpAddr::V6(a) => write!(f, "{opt} [{a}]:{port}"),
                }
            }
            ServiceKey::Fwmark { family, mark } => match family {
                AddressFamily::Inet => write!(f, "-f {mark}"),
                AddressFamily::Inet6 => write!(f, "-f {mark} -6"),
            },
        }
    }
}

/// A scheduling algorithm, by its kernel module's name (`ip_vs_NAME`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheduler {
    /// Round robin.
    RoundRobin,
    /// Weighted round robin.
    WeightedRoundRobin,
    /// Least connection.
    LeastConnection,
    /// Weighted least connection (ipvsadm's default).
    WeightedLeastConnection,
    /// Locality-based least connection.
    LocalityBasedLeastConnection,
    /// Locality-based least connection with replication.
    LocalityBasedLeastConnectionReplication,
    /// Destination hashing.
    DestinationHashing,
    /// Source hashing.
    SourceHashing,
    /// Shortest expected delay.
    ShortestExpectedDelay,
    /// Never queue.
    NeverQueue,
    /// Weighted failover.
    WeightedFailover,
    /// Weighted overflow.
    WeightedOverflow,
    /// Maglev hashing.
    MaglevHashing,
    /// Any other scheduler the kernel knows.
    Other(String),
}

impl Scheduler {
    /// The kernel's name (`rr`, `wrr`, ...).
    pub fn name(&self) -> &str {
        match self {
            Scheduler::RoundRobin => "rr",
            Scheduler::WeightedRoundRobin => "wrr",
            Scheduler::LeastConnection => "lc",
            Scheduler::WeightedLeastConnection => "wlc",
            Scheduler::LocalityBasedLeastConnection => "lblc",
            Scheduler::LocalityBasedLeastConnectionReplication => "lblcr",
            Scheduler::DestinationHashing => "dh",
            Scheduler::SourceHashing => "sh",
            Scheduler::ShortestExpectedDelay => "sed",
            Scheduler::NeverQueue => "nq",
            Scheduler::WeightedFailover => "fo",
            Scheduler::WeightedOverflow => "ovf",
            Scheduler::MaglevHashing => "mh",
            Scheduler::Other(name) => name,
        }
    }

    /// From the kernel's name; unknown names become [`Scheduler::Other`].
    pub fn from_name(name: &str) -> Self {
        match name {
            "rr" => Scheduler::RoundRobin,
            "wrr" => Scheduler::WeightedRoundRobin,
            "lc" => Scheduler::LeastConnection,
            "wlc" => Scheduler::WeightedLeastConnection,
            "lblc" => Scheduler::LocalityBasedLeastConnection,
            "lblcr" => Scheduler::LocalityBasedLeastConnectionReplication,
            "dh" => Scheduler::DestinationHashing,
            "sh" => Scheduler::SourceHashing,
            "sed" => Scheduler::ShortestExpectedDelay,
            "nq" => Scheduler::NeverQueue,
            "fo" => Scheduler::WeightedFailover,
            "ovf" => Scheduler::WeightedOverflow,
            "mh" => Scheduler::MaglevHashing,
            other => Scheduler::Other(other.to_string()),
        }
    }

    /// Every scheduler of the kernel's tree this crate names.
    pub const KNOWN: [Scheduler; 13] = [
        Scheduler::RoundRobin,
        Scheduler::WeightedRoundRobin,
        Scheduler::LeastConnection,
        Scheduler::WeightedLeastConnection,
        Scheduler::LocalityBasedLeastConnection,
        Scheduler::LocalityBasedLeastConnectionReplication,
        Scheduler::DestinationHashing,
        Scheduler::SourceHashing,
        Scheduler::ShortestExpectedDelay,
        Scheduler::NeverQueue,
        Scheduler::WeightedFailover,
        Scheduler::WeightedOverflow,
        Scheduler::MaglevHashing,
    ];
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scheduler {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Scheduler::from_name(s))
    }
}

bitflags::bitflags! {
    /// Service flags (`IP_VS_SVC_F_*`). The three scheduler flags mean what the scheduler
    /// says: `sh` and `mh` read `SCHED1` as fallback and `SCHED2` as port.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub struct ServiceFlags: u32 {
        /// Persistent connections (`-p`).
        const PERSISTENT = 0x1;
        /// The service is hashed (set by the kernel, ignored on requests).
        const HASHED = 0x2;
        /// One-packet scheduling (`-o`, UDP only).
        const ONE_PACKET = 0x4;
        /// Scheduler flag 1 (`-b flag-1`).
        const SCHED1 = 0x8;
        /// Scheduler flag 2 (`-b flag-2`).
        const SCHED2 = 0x10;
        /// Scheduler flag 3 (`-b flag-3`).
        const SCHED3 = 0x20;
        /// `sh`: fall back to another destination when the chosen one is unavailable.
        const SH_FALLBACK = 0x8;
        /// `sh`: hash the source port too.
        const SH_PORT = 0x10;
        /// `mh`: fall back to another destination when the chosen one is unavailable.
        const MH_FALLBACK = 0x8;
        /// `mh`: hash the source port too.
        const MH_PORT = 0x10;
        // A newer kernel's flags survive a round trip.
        const _ = !0;
    }
}

/// The persistence granularity (`-M`): which source addresses share a persistent entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Netmask {
    /// An IPv4 mask (`-M 255.255.255.0`).
    V4(Ipv4Addr),
    /// An IPv6 prefix length (`-M 64`).
    V6(u32),
}

impl Netmask {
    /// Every address on its own: `255.255.255.255` or `/128`.
    pub fn host(family: AddressFamily) -> Self {
        match family {
            AddressFamily::Inet => Netmask::V4(Ipv4Addr::BROADCAST),
            AddressFamily::Inet6 => Netmask::V6(128),
        }
    }

    /// The kernel's value (`IPVS_SVC_ATTR_NETMASK`).
    pub fn to_raw(self) -> u32 {
        match self {
            Netmask::V4(a) => u32::from_ne_bytes(a.octets()),
            Netmask::V6(p) => p,
        }
    }

    /// From the kernel's value for a service of `family`.
    pub fn from_raw(family: AddressFamily, raw: u32) -> Self {
        match family {
            AddressFamily::Inet => Netmask::V4(Ipv4Addr::from(raw.to_ne_bytes())),
            AddressFamily::Inet6 => Netmask::V6(raw),
        }
    }
}

/// A virtual service (`ipvsadm -A`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// What identifies it.
    pub key: ServiceKey,
    /// How it picks a destination.
    pub scheduler: Scheduler,
    /// Flags; [`ServiceFlags::HASHED`] is the kernel's business.
    pub flags: ServiceFlags,
    /// Persistence timeout (whole seconds on the wire).
    pub timeout: Duration,
    /// Persistence granularity.
    pub netmask: Netmask,
    /// Persistence engine (`--pe sip`).
    pub persistence_engine: Option<String>,
    /// 32-bit counters, as read from the kernel (never sent).
    pub stats: Option<Stats>,
    /// 64-bit counters, as read from the kernel (never sent).
    pub stats64: Option<Stats>,
}

impl Service {
    /// A service with ipvsadm's defaults: no flags, no persistence, host netmask.
    pub fn new(key: ServiceKey, scheduler: Scheduler) -> Self {
        Service {
            netmask: Netmask::host(key.family()),
            key,
            scheduler,
            flags: ServiceFlags::empty(),
            timeout: Duration::ZERO,
            persistence_engine: None,
            stats: None,
            stats64: None,
        }
    }

    /// Makes it persistent for `timeout` (`-p SECONDS`).
    pub fn persistent(mut self, timeout: Duration) -> Self {
        self.flags |= ServiceFlags::PERSISTENT;
        self.timeout = timeout;
        self
    }

    /// Adds flags.
    pub fn with_flags(mut self, flags: ServiceFlags) -> Self {
        self.flags |= flags;
        self
    }

    /// Sets the persistence granularity (`-M`).
    pub fn with_netmask(mut self, netmask: Netmask) -> Self {
        self.netmask = netmask;
        self
    }

    /// Sets the persistence engine (`--pe`).
    pub fn with_persistence_engine(mut self, pe: impl Into<String>) -> Self {
        self.persistence_engine = Some(pe.into());
        self
    }

    /// The attributes `-A`/`-E` send, in ipvsadm's order (the flags' mask all ones: every
    /// flag is set as given).
    pub fn config_attrs(&self) -> Vec<ServiceAttr> {
        let mut attrs = self.key.to_attrs();
        attrs.push(ServiceAttr::Scheduler(self.scheduler.name().to_string()));
        if let Some(pe) = &self.persistence_engine {
            attrs.push(ServiceAttr::PersistenceEngine(pe.clone()));
        }
        attrs.push(ServiceAttr::Flags(FlagsAttr {
            flags: self.flags.bits(),
            mask: u32::MAX,
        }));
        attrs.push(ServiceAttr::Timeout(
            u32::try_from(self.timeout.as_secs()).unwrap_or(u32::MAX),
        ));
        attrs.push(ServiceAttr::Netmask(self.netmask.to_raw()));
        attrs
    }

    /// [`Service::config_attrs`], then the counters if present (as the kernel describes it).
    pub fn to_attrs(&self) -> Vec<ServiceAttr> {
        let mut attrs = self.config_attrs();
        if let Some(s) = &self.stats {
            attrs.push(ServiceAttr::Stats(s.to_attrs()));
        }
        if let Some(s) = &self.stats64 {
            attrs.push(ServiceAttr::Stats64(s.to_attrs64()));
        }
        attrs
    }

    /// Reads a service the kernel described; missing optional attributes take ipvsadm's
    /// defaults.
    pub fn from_attrs(attrs: &[ServiceAttr]) -> Result<Self, DecodeError> {
        let key = ServiceKey::from_attrs(attrs)?;
        let mut svc = Service::new(key, Scheduler::Other(String::new()));
        let mut scheduler = None;
        for a in attrs {
            match a {
                ServiceAttr::Scheduler(s) => scheduler = Some(Scheduler::from_name(s)),
                ServiceAttr::Flags(f) => svc.flags = ServiceFlags::from_bits_retain(f.flags),
                ServiceAttr::Timeout(t) => svc.timeout = Duration::from_secs((*t).into()),
                ServiceAttr::Netmask(m) => svc.netmask = Netmask::from_raw(key.family(), *m),
                ServiceAttr::PersistenceEngine(pe) if !pe.is_empty() => {
                    svc.persistence_engine = Some(pe.clone())
                }
                ServiceAttr::Stats(s) => svc.stats = Some(Stats::from_attrs(s)),
                ServiceAttr::Stats64(s) => svc.stats64 = Some(Stats::from_attrs64(s)),
                _ => {}
            }
        }
        svc.scheduler = scheduler.ok_or("service without scheduler")?;
        Ok(svc)
    }
}
