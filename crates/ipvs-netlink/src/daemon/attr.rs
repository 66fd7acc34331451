//! The wire layer of a sync daemon: `IPVS_DAEMON_ATTR_*`, nested in `IPVS_CMD_ATTR_DAEMON`.

use netlink_packet_core::{DecodeError, DefaultNla, Nla, NlaBuffer, Parseable};

use crate::nla::{
    emit_string, parse_array, parse_string, parse_u8, parse_u16, parse_u32, string_len,
};

const STATE: u16 = 1;
const MCAST_IFN: u16 = 2;
const SYNC_ID: u16 = 3;
const SYNC_MAXLEN: u16 = 4;
const MCAST_GROUP: u16 = 5;
const MCAST_GROUP6: u16 = 6;
const MCAST_PORT: u16 = 7;
const MCAST_TTL: u16 = 8;

/// One attribute of a sync daemon, exactly as on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonAttr {
    /// `IPVS_DAEMON_ATTR_STATE` (u32): `IP_VS_STATE_MASTER` (1) or `_BACKUP` (2).
    State(u32),
    /// `IPVS_DAEMON_ATTR_MCAST_IFN` (string): the multicast interface.
    Interface(String),
    /// `IPVS_DAEMON_ATTR_SYNC_ID` (u32).
    SyncId(u32),
    /// `IPVS_DAEMON_ATTR_SYNC_MAXLEN` (u16): maximum sync message length.
    MaxLength(u16),
    /// `IPVS_DAEMON_ATTR_MCAST_GROUP` (IPv4 address, network order).
    Group([u8; 4]),
    /// `IPVS_DAEMON_ATTR_MCAST_GROUP6` (IPv6 address).
    Group6([u8; 16]),
    /// `IPVS_DAEMON_ATTR_MCAST_PORT` (u16).
    Port(u16),
    /// `IPVS_DAEMON_ATTR_MCAST_TTL` (u8).
    Ttl(u8),
    /// An attribute this crate does not know, kept as is.
    Other(DefaultNla),
}

impl Nla for DaemonAttr {
    fn value_len(&self) -> usize {
        match self {
            DaemonAttr::State(_) | DaemonAttr::SyncId(_) | DaemonAttr::Group(_) => 4,
            DaemonAttr::Interface(s) => string_len(s),
            DaemonAttr::MaxLength(_) | DaemonAttr::Port(_) => 2,
            DaemonAttr::Group6(_) => 16,
            DaemonAttr::Ttl(_) => 1,
            DaemonAttr::Other(o) => o.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            DaemonAttr::State(_) => STATE,
            DaemonAttr::Interface(_) => MCAST_IFN,
            DaemonAttr::SyncId(_) => SYNC_ID,
            DaemonAttr::MaxLength(_) => SYNC_MAXLEN,
            DaemonAttr::Group(_) => MCAST_GROUP,
            DaemonAttr::Group6(_) => MCAST_GROUP6,
            DaemonAttr::Port(_) => MCAST_PORT,
            DaemonAttr::Ttl(_) => MCAST_TTL,
            DaemonAttr::Other(o) => o.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            DaemonAttr::State(v) | DaemonAttr::SyncId(v) => {
                buffer.copy_from_slice(&v.to_ne_bytes())
            }
            DaemonAttr::Interface(s) => emit_string(s, buffer),
            DaemonAttr::MaxLength(v) | DaemonAttr::Port(v) => {
                buffer.copy_from_slice(&v.to_ne_bytes())
            }
            DaemonAttr::Group(a) => buffer.copy_from_slice(a),
            DaemonAttr::Group6(a) => buffer.copy_from_slice(a),
            DaemonAttr::Ttl(v) => buffer[0] = *v,
            DaemonAttr::Other(o) => o.emit_value(buffer),
        }
    }
}

impl<T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&T>> for DaemonAttr {
    fn parse(buf: &NlaBuffer<&T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            STATE => DaemonAttr::State(parse_u32(v, "daemon state")?),
            MCAST_IFN => DaemonAttr::Interface(parse_string(v)?),
            SYNC_ID => DaemonAttr::SyncId(parse_u32(v, "sync id")?),
            SYNC_MAXLEN => DaemonAttr::MaxLength(parse_u16(v, "sync maxlen")?),
            MCAST_GROUP => DaemonAttr::Group(parse_array(v, "mcast group")?),
            MCAST_GROUP6 => DaemonAttr::Group6(parse_array(v, "mcast group6")?),
            MCAST_PORT => DaemonAttr::Port(parse_u16(v, "mcast port")?),
            MCAST_TTL => DaemonAttr::Ttl(parse_u8(v, "mcast ttl")?),
            _ => DaemonAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}
