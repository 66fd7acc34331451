//! The wire layer of a virtual service: `IPVS_SVC_ATTR_*`, the attributes nested in
//! `IPVS_CMD_ATTR_SERVICE`.

use netlink_packet_core::{DecodeError, DefaultNla, Nla, NlaBuffer, Parseable};

use crate::nla::{
    emit_list, emit_string, list_len, parse_array, parse_be16, parse_list, parse_string, parse_u16,
    parse_u32, string_len,
};
use crate::stats::{Stats64Attr, StatsAttr};

const AF: u16 = 1;
const PROTOCOL: u16 = 2;
const ADDR: u16 = 3;
const PORT: u16 = 4;
const FWMARK: u16 = 5;
const SCHED_NAME: u16 = 6;
const FLAGS: u16 = 7;
const TIMEOUT: u16 = 8;
const NETMASK: u16 = 9;
const STATS: u16 = 10;
const PE_NAME: u16 = 11;
const STATS64: u16 = 12;

/// `struct ip_vs_flags`: the flags to set and the mask of flags the request changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlagsAttr {
    /// Flag bits (`IP_VS_SVC_F_*`).
    pub flags: u32,
    /// Which bits `flags` sets; the kernel answers with all ones.
    pub mask: u32,
}

/// One attribute of a virtual service, exactly as on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceAttr {
    /// `IPVS_SVC_ATTR_AF` (u16): `AF_INET` (2) or `AF_INET6` (10).
    AddressFamily(u16),
    /// `IPVS_SVC_ATTR_PROTOCOL` (u16): IP protocol number.
    Protocol(u16),
    /// `IPVS_SVC_ATTR_ADDR`: `union nf_inet_addr`, 16 bytes, an IPv4 address in the first 4.
    Address([u8; 16]),
    /// `IPVS_SVC_ATTR_PORT` (big-endian u16 on the wire, host order here).
    Port(u16),
    /// `IPVS_SVC_ATTR_FWMARK` (u32).
    Fwmark(u32),
    /// `IPVS_SVC_ATTR_SCHED_NAME` (NUL-terminated string).
    Scheduler(String),
    /// `IPVS_SVC_ATTR_FLAGS` (`struct ip_vs_flags`).
    Flags(FlagsAttr),
    /// `IPVS_SVC_ATTR_TIMEOUT` (u32 seconds): persistence timeout.
    Timeout(u32),
    /// `IPVS_SVC_ATTR_NETMASK` (u32 as the kernel stores it: an IPv4 mask in network byte
    /// order, or an IPv6 prefix length).
    Netmask(u32),
    /// `IPVS_SVC_ATTR_STATS` (nest of 32-bit counters).
    Stats(Vec<StatsAttr>),
    /// `IPVS_SVC_ATTR_PE_NAME` (NUL-terminated string): persistence engine.
    PersistenceEngine(String),
    /// `IPVS_SVC_ATTR_STATS64` (nest of 64-bit counters).
    Stats64(Vec<Stats64Attr>),
    /// An attribute this crate does not know, kept as is.
    Other(DefaultNla),
}

impl Nla for ServiceAttr {
    fn value_len(&self) -> usize {
        match self {
            ServiceAttr::AddressFamily(_) | ServiceAttr::Protocol(_) | ServiceAttr::Port(_) => 2,
            ServiceAttr::Address(_) => 16,
            ServiceAttr::Fwmark(_) | ServiceAttr::Timeout(_) | ServiceAttr::Netmask(_) => 4,
            ServiceAttr::Scheduler(s) | ServiceAttr::PersistenceEngine(s) => string_len(s),
            ServiceAttr::Flags(_) => 8,
            ServiceAttr::Stats(s) => list_len(s),
            ServiceAttr::Stats64(s) => list_len(s),
            ServiceAttr::Other(o) => o.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            ServiceAttr::AddressFamily(_) => AF,
            ServiceAttr::Protocol(_) => PROTOCOL,
            ServiceAttr::Address(_) => ADDR,
            ServiceAttr::Port(_) => PORT,
            ServiceAttr::Fwmark(_) => FWMARK,
            ServiceAttr::Scheduler(_) => SCHED_NAME,
            ServiceAttr::Flags(_) => FLAGS,
            ServiceAttr::Timeout(_) => TIMEOUT,
            ServiceAttr::Netmask(_) => NETMASK,
            ServiceAttr::Stats(_) => STATS,
            ServiceAttr::PersistenceEngine(_) => PE_NAME,
            ServiceAttr::Stats64(_) => STATS64,
            ServiceAttr::Other(o) => o.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            ServiceAttr::AddressFamily(v) | ServiceAttr::Protocol(v) => {
                buffer.copy_from_slice(&v.to_ne_bytes())
            }
            ServiceAttr::Port(v) => buffer.copy_from_slice(&v.to_be_bytes()),
            ServiceAttr::Address(a) => buffer.copy_from_slice(a),
            ServiceAttr::Fwmark(v) | ServiceAttr::Timeout(v) | ServiceAttr::Netmask(v) => {
                buffer.copy_from_slice(&v.to_ne_bytes())
            }
            ServiceAttr::Scheduler(s) | ServiceAttr::PersistenceEngine(s) => emit_string(s, buffer),
            ServiceAttr::Flags(f) => {
                buffer[..4].copy_from_slice(&f.flags.to_ne_bytes());
                buffer[4..8].copy_from_slice(&f.mask.to_ne_bytes());
            }
            ServiceAttr::Stats(s) => emit_list(s, buffer),
            ServiceAttr::Stats64(s) => emit_list(s, buffer),
            ServiceAttr::Other(o) => o.emit_value(buffer),
        }
    }
}

impl<T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&T>> for ServiceAttr {
    fn parse(buf: &NlaBuffer<&T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            AF => ServiceAttr::AddressFamily(parse_u16(v, "service af")?),
            PROTOCOL => ServiceAttr::Protocol(parse_u16(v, "service protocol")?),
            ADDR => ServiceAttr::Address(parse_array(v, "service address")?),
            PORT => ServiceAttr::Port(parse_be16(v, "service port")?),
            FWMARK => ServiceAttr::Fwmark(parse_u32(v, "service fwmark")?),
            SCHED_NAME => ServiceAttr::Scheduler(parse_string(v)?),
            FLAGS => {
                let raw: [u8; 8] = parse_array(v, "service flags")?;
                ServiceAttr::Flags(FlagsAttr {
                    flags: u32::from_ne_bytes([raw[0], raw[1], raw[2], raw[3]]),
                    mask: u32::from_ne_bytes([raw[4], raw[5], raw[6], raw[7]]),
                })
            }
            TIMEOUT => ServiceAttr::Timeout(parse_u32(v, "service timeout")?),
            NETMASK => ServiceAttr::Netmask(parse_u32(v, "service netmask")?),
            STATS => ServiceAttr::Stats(parse_list(v)?),
            PE_NAME => ServiceAttr::PersistenceEngine(parse_string(v)?),
            STATS64 => ServiceAttr::Stats64(parse_list(v)?),
            _ => ServiceAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}
