//! The wire layer of a destination (real server): `IPVS_DEST_ATTR_*`, the attributes nested
//! in `IPVS_CMD_ATTR_DEST`.

use netlink_packet_core::{DecodeError, DefaultNla, Nla, NlaBuffer, Parseable};

use crate::nla::{
    emit_list, list_len, parse_array, parse_be16, parse_list, parse_u8, parse_u16, parse_u32,
};
use crate::stats::{Stats64Attr, StatsAttr};

const ADDR: u16 = 1;
const PORT: u16 = 2;
const FWD_METHOD: u16 = 3;
const WEIGHT: u16 = 4;
const U_THRESH: u16 = 5;
const L_THRESH: u16 = 6;
const ACTIVE_CONNS: u16 = 7;
const INACT_CONNS: u16 = 8;
const PERSIST_CONNS: u16 = 9;
const STATS: u16 = 10;
const ADDR_FAMILY: u16 = 11;
const STATS64: u16 = 12;
const TUN_TYPE: u16 = 13;
const TUN_PORT: u16 = 14;
const TUN_FLAGS: u16 = 15;

/// One attribute of a destination, exactly as on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestinationAttr {
    /// `IPVS_DEST_ATTR_ADDR`: 16 bytes, an IPv4 address in the first 4.
    Address([u8; 16]),
    /// `IPVS_DEST_ATTR_PORT` (big-endian on the wire, host order here).
    Port(u16),
    /// `IPVS_DEST_ATTR_FWD_METHOD` (u32, `IP_VS_CONN_F_*` forwarding bits).
    ForwardMethod(u32),
    /// `IPVS_DEST_ATTR_WEIGHT` (u32; the kernel reads it as a signed int).
    Weight(u32),
    /// `IPVS_DEST_ATTR_U_THRESH` (u32): upper connection threshold.
    UpperThreshold(u32),
    /// `IPVS_DEST_ATTR_L_THRESH` (u32): lower connection threshold.
    LowerThreshold(u32),
    /// `IPVS_DEST_ATTR_ACTIVE_CONNS` (u32, read only).
    ActiveConnections(u32),
    /// `IPVS_DEST_ATTR_INACT_CONNS` (u32, read only).
    InactiveConnections(u32),
    /// `IPVS_DEST_ATTR_PERSIST_CONNS` (u32, read only).
    PersistentConnections(u32),
    /// `IPVS_DEST_ATTR_STATS` (nest of 32-bit counters).
    Stats(Vec<StatsAttr>),
    /// `IPVS_DEST_ATTR_ADDR_FAMILY` (u16): the destination's own family.
    AddressFamily(u16),
    /// `IPVS_DEST_ATTR_STATS64` (nest of 64-bit counters).
    Stats64(Vec<Stats64Attr>),
    /// `IPVS_DEST_ATTR_TUN_TYPE` (u8): `IP_VS_CONN_F_TUNNEL_TYPE_*`.
    TunnelType(u8),
    /// `IPVS_DEST_ATTR_TUN_PORT` (big-endian on the wire, host order here).
    TunnelPort(u16),
    /// `IPVS_DEST_ATTR_TUN_FLAGS` (u16): `IP_VS_TUNNEL_ENCAP_FLAG_*`.
    TunnelFlags(u16),
    /// An attribute this crate does not know, kept as is.
    Other(DefaultNla),
}

impl Nla for DestinationAttr {
    fn value_len(&self) -> usize {
        match self {
            DestinationAttr::Address(_) => 16,
            DestinationAttr::Port(_)
            | DestinationAttr::AddressFamily(_)
            | DestinationAttr::TunnelPort(_)
            | DestinationAttr::TunnelFlags(_) => 2,
            DestinationAttr::TunnelType(_) => 1,
            DestinationAttr::ForwardMethod(_)
            | DestinationAttr::Weight(_)
            | DestinationAttr::UpperThreshold(_)
            | DestinationAttr::LowerThreshold(_)
            | DestinationAttr::ActiveConnections(_)
            | DestinationAttr::InactiveConnections(_)
            | DestinationAttr::PersistentConnections(_) => 4,
            DestinationAttr::Stats(s) => list_len(s),
            DestinationAttr::Stats64(s) => list_len(s),
            DestinationAttr::Other(o) => o.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            DestinationAttr::Address(_) => ADDR,
            DestinationAttr::Port(_) => PORT,
            DestinationAttr::ForwardMethod(_) => FWD_METHOD,
            DestinationAttr::Weight(_) => WEIGHT,
            DestinationAttr::UpperThreshold(_) => U_THRESH,
            DestinationAttr::LowerThreshold(_) => L_THRESH,
            DestinationAttr::ActiveConnections(_) => ACTIVE_CONNS,
            DestinationAttr::InactiveConnections(_) => INACT_CONNS,
            DestinationAttr::PersistentConnections(_) => PERSIST_CONNS,
            DestinationAttr::Stats(_) => STATS,
            DestinationAttr::AddressFamily(_) => ADDR_FAMILY,
            DestinationAttr::Stats64(_) => STATS64,
            DestinationAttr::TunnelType(_) => TUN_TYPE,
            DestinationAttr::TunnelPort(_) => TUN_PORT,
            DestinationAttr::TunnelFlags(_) => TUN_FLAGS,
            DestinationAttr::Other(o) => o.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            DestinationAttr::Address(a) => buffer.copy_from_slice(a),
            DestinationAttr::Port(v) | DestinationAttr::TunnelPort(v) => {
                buffer.copy_from_slice(&v.to_be_bytes())
            }
            DestinationAttr::AddressFamily(v) | DestinationAttr::TunnelFlags(v) => {
                buffer.copy_from_slice(&v.to_ne_bytes())
            }
            DestinationAttr::TunnelType(v) => buffer[0] = *v,
            DestinationAttr::ForwardMethod(v)
            | DestinationAttr::Weight(v)
            | DestinationAttr::UpperThreshold(v)
            | DestinationAttr::LowerThreshold(v)
            | DestinationAttr::ActiveConnections(v)
            | DestinationAttr::InactiveConnections(v)
            | DestinationAttr::PersistentConnections(v) => buffer.copy_from_slice(&v.to_ne_bytes()),
            DestinationAttr::Stats(s) => emit_list(s, buffer),
            DestinationAttr::Stats64(s) => emit_list(s, buffer),
            DestinationAttr::Other(o) => o.emit_value(buffer),
        }
    }
}

impl<T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&T>> for DestinationAttr {
    fn parse(buf: &NlaBuffer<&T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            ADDR => DestinationAttr::Address(parse_array(v, "destination address")?),
            PORT => DestinationAttr::Port(parse_be16(v, "destination port")?),
            FWD_METHOD => DestinationAttr::ForwardMethod(parse_u32(v, "forward method")?),
            WEIGHT => DestinationAttr::Weight(parse_u32(v, "weight")?),
            U_THRESH => DestinationAttr::UpperThreshold(parse_u32(v, "upper threshold")?),
            L_THRESH => DestinationAttr::LowerThreshold(parse_u32(v, "lower threshold")?),
            ACTIVE_CONNS => DestinationAttr::ActiveConnections(parse_u32(v, "active conns")?),
            INACT_CONNS => DestinationAttr::InactiveConnections(parse_u32(v, "inactive conns")?),
            PERSIST_CONNS => {
                DestinationAttr::PersistentConnections(parse_u32(v, "persistent conns")?)
            }
            STATS => DestinationAttr::Stats(parse_list(v)?),
            ADDR_FAMILY => DestinationAttr::AddressFamily(parse_u16(v, "destination af")?),
            STATS64 => DestinationAttr::Stats64(parse_list(v)?),
            TUN_TYPE => DestinationAttr::TunnelType(parse_u8(v, "tunnel type")?),
            TUN_PORT => DestinationAttr::TunnelPort(parse_be16(v, "tunnel port")?),
            TUN_FLAGS => DestinationAttr::TunnelFlags(parse_u16(v, "tunnel flags")?),
            _ => DestinationAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}
