//! Traffic counters of services and destinations: `IPVS_SVC_ATTR_STATS`/`STATS64` and
//! `IPVS_DEST_ATTR_STATS`/`STATS64`, each a nest of `IPVS_STATS_ATTR_*`.

use netlink_packet_core::{DecodeError, DefaultNla, Nla, NlaBuffer, Parseable};

use crate::nla::{parse_u32, parse_u64};

const CONNS: u16 = 1;
const INPKTS: u16 = 2;
const OUTPKTS: u16 = 3;
const INBYTES: u16 = 4;
const OUTBYTES: u16 = 5;
const CPS: u16 = 6;
const INPPS: u16 = 7;
const OUTPPS: u16 = 8;
const INBPS: u16 = 9;
const OUTBPS: u16 = 10;

/// One counter of the 32-bit stats nest (`IPVS_STATS_ATTR_*`); bytes are 64-bit even here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatsAttr {
    /// `IPVS_STATS_ATTR_CONNS`: connections scheduled.
    Conns(u32),
    /// `IPVS_STATS_ATTR_INPKTS`: incoming packets.
    InPackets(u32),
    /// `IPVS_STATS_ATTR_OUTPKTS`: outgoing packets.
    OutPackets(u32),
    /// `IPVS_STATS_ATTR_INBYTES`: incoming bytes.
    InBytes(u64),
    /// `IPVS_STATS_ATTR_OUTBYTES`: outgoing bytes.
    OutBytes(u64),
    /// `IPVS_STATS_ATTR_CPS`: connections per second.
    Cps(u32),
    /// `IPVS_STATS_ATTR_INPPS`: incoming packets per second.
    InPps(u32),
    /// `IPVS_STATS_ATTR_OUTPPS`: outgoing packets per second.
    OutPps(u32),
    /// `IPVS_STATS_ATTR_INBPS`: incoming bytes per second.
    InBps(u32),
    /// `IPVS_STATS_ATTR_OUTBPS`: outgoing bytes per second.
    OutBps(u32),
    /// An attribute this crate does not know (`IPVS_STATS_ATTR_PAD`, or a newer one).
    Other(DefaultNla),
}

/// One counter of the 64-bit stats nest (`IPVS_STATS_ATTR_*`, every value a u64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stats64Attr {
    /// `IPVS_STATS_ATTR_CONNS`.
    Conns(u64),
    /// `IPVS_STATS_ATTR_INPKTS`.
    InPackets(u64),
    /// `IPVS_STATS_ATTR_OUTPKTS`.
    OutPackets(u64),
    /// `IPVS_STATS_ATTR_INBYTES`.
    InBytes(u64),
    /// `IPVS_STATS_ATTR_OUTBYTES`.
    OutBytes(u64),
    /// `IPVS_STATS_ATTR_CPS`.
    Cps(u64),
    /// `IPVS_STATS_ATTR_INPPS`.
    InPps(u64),
    /// `IPVS_STATS_ATTR_OUTPPS`.
    OutPps(u64),
    /// `IPVS_STATS_ATTR_INBPS`.
    InBps(u64),
    /// `IPVS_STATS_ATTR_OUTBPS`.
    OutBps(u64),
    /// An attribute this crate does not know (`IPVS_STATS_ATTR_PAD`, or a newer one).
    Other(DefaultNla),
}

impl Nla for StatsAttr {
    fn value_len(&self) -> usize {
        match self {
            StatsAttr::InBytes(_) | StatsAttr::OutBytes(_) => 8,
            StatsAttr::Other(o) => o.value_len(),
            _ => 4,
        }
    }

    fn kind(&self) -> u16 {
        match self {
            StatsAttr::Conns(_) => CONNS,
            StatsAttr::InPackets(_) => INPKTS,
            StatsAttr::OutPackets(_) => OUTPKTS,
            StatsAttr::InBytes(_) => INBYTES,
            StatsAttr::OutBytes(_) => OUTBYTES,
            StatsAttr::Cps(_) => CPS,
            StatsAttr::InPps(_) => INPPS,
            StatsAttr::OutPps(_) => OUTPPS,
            StatsAttr::InBps(_) => INBPS,
            StatsAttr::OutBps(_) => OUTBPS,
            StatsAttr::Other(o) => o.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            StatsAttr::Conns(v)
            | StatsAttr::InPackets(v)
            | StatsAttr::OutPackets(v)
            | StatsAttr::Cps(v)
            | StatsAttr::InPps(v)
            | StatsAttr::OutPps(v)
            | StatsAttr::InBps(v)
            | StatsAttr::OutBps(v) => buffer.copy_from_slice(&v.to_ne_bytes()),
            StatsAttr::InBytes(v) | StatsAttr::OutBytes(v) => {
                buffer.copy_from_slice(&v.to_ne_bytes())
            }
            StatsAttr::Other(o) => o.emit_value(buffer),
        }
    }
}

impl<T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&T>> for StatsAttr {
    fn parse(buf: &NlaBuffer<&T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            CONNS => StatsAttr::Conns(parse_u32(v, "stats conns")?),
            INPKTS => StatsAttr::InPackets(parse_u32(v, "stats inpkts")?),
            OUTPKTS => StatsAttr::OutPackets(parse_u32(v, "stats outpkts")?),
            INBYTES => StatsAttr::InBytes(parse_u64(v, "stats inbytes")?),
            OUTBYTES => StatsAttr::OutBytes(parse_u64(v, "stats outbytes")?),
            CPS => StatsAttr::Cps(parse_u32(v, "stats cps")?),
            INPPS => StatsAttr::InPps(parse_u32(v, "stats inpps")?),
            OUTPPS => StatsAttr::OutPps(parse_u32(v, "stats outpps")?),
            INBPS => StatsAttr::InBps(parse_u32(v, "stats inbps")?),
            OUTBPS => StatsAttr::OutBps(parse_u32(v, "stats outbps")?),
            _ => StatsAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}

impl Nla for Stats64Attr {
    fn value_len(&self) -> usize {
        match self {
            Stats64Attr::Other(o) => o.value_len(),
            _ => 8,
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Stats64Attr::Conns(_) => CONNS,
            Stats64Attr::InPackets(_) => INPKTS,
            Stats64Attr::OutPackets(_) => OUTPKTS,
            Stats64Attr::InBytes(_) => INBYTES,
            Stats64Attr::OutBytes(_) => OUTBYTES,
            Stats64Attr::Cps(_) => CPS,
            Stats64Attr::InPps(_) => INPPS,
            Stats64Attr::OutPps(_) => OUTPPS,
            Stats64Attr::InBps(_) => INBPS,
            Stats64Attr::OutBps(_) => OUTBPS,
            Stats64Attr::Other(o) => o.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            Stats64Attr::Conns(v)
            | Stats64Attr::InPackets(v)
            | Stats64Attr::OutPackets(v)
            | Stats64Attr::InBytes(v)
            | Stats64Attr::OutBytes(v)
            | Stats64Attr::Cps(v)
            | Stats64Attr::InPps(v)
            | Stats64Attr::OutPps(v)
            | Stats64Attr::InBps(v)
            | Stats64Attr::OutBps(v) => buffer.copy_from_slice(&v.to_ne_bytes()),
            Stats64Attr::Other(o) => o.emit_value(buffer),
        }
    }
}

impl<T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&T>> for Stats64Attr {
    fn parse(buf: &NlaBuffer<&T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            CONNS => Stats64Attr::Conns(parse_u64(v, "stats64 conns")?),
            INPKTS => Stats64Attr::InPackets(parse_u64(v, "stats64 inpkts")?),
            OUTPKTS => Stats64Attr::OutPackets(parse_u64(v, "stats64 outpkts")?),
            INBYTES => Stats64Attr::InBytes(parse_u64(v, "stats64 inbytes")?),
            OUTBYTES => Stats64Attr::OutBytes(parse_u64(v, "stats64 outbytes")?),
            CPS => Stats64Attr::Cps(parse_u64(v, "stats64 cps")?),
            INPPS => Stats64Attr::InPps(parse_u64(v, "stats64 inpps")?),
            OUTPPS => Stats64Attr::OutPps(parse_u64(v, "stats64 outpps")?),
            INBPS => Stats64Attr::InBps(parse_u64(v, "stats64 inbps")?),
            OUTBPS => Stats64Attr::OutBps(parse_u64(v, "stats64 outbps")?),
            _ => Stats64Attr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// Traffic counters and rate estimates of a service or a destination.
///
/// Both kernel nests decode into this type; the 32-bit nest's values are widened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections scheduled.
    pub conns: u64,
    /// Incoming packets.
    pub in_packets: u64,
    /// Outgoing packets.
    pub out_packets: u64,
    /// Incoming bytes.
    pub in_bytes: u64,
    /// Outgoing bytes.
    pub out_bytes: u64,
    /// Connections per second (estimate).
    pub cps: u64,
    /// Incoming packets per second.
    pub in_pps: u64,
    /// Outgoing packets per second.
    pub out_pps: u64,
    /// Incoming bytes per second.
    pub in_bps: u64,
    /// Outgoing bytes per second.
    pub out_bps: u64,
}

impl Stats {
    /// Reads the 32-bit nest; unknown counters are skipped.
    pub fn from_attrs(attrs: &[StatsAttr]) -> Self {
        let mut s = Stats::default();
        for a in attrs {
            match *a {
                StatsAttr::Conns(v) => s.conns = v.into(),
                StatsAttr::InPackets(v) => s.in_packets = v.into(),
                StatsAttr::OutPackets(v) => s.out_packets = v.into(),
                StatsAttr::InBytes(v) => s.in_bytes = v,
                StatsAttr::OutBytes(v) => s.out_bytes = v,
                StatsAttr::Cps(v) => s.cps = v.into(),
                StatsAttr::InPps(v) => s.in_pps = v.into(),
                StatsAttr::OutPps(v) => s.out_pps = v.into(),
                StatsAttr::InBps(v) => s.in_bps = v.into(),
                StatsAttr::OutBps(v) => s.out_bps = v.into(),
                StatsAttr::Other(_) => {}
            }
        }
        s
    }

    /// Reads the 64-bit nest; unknown counters are skipped.
    pub fn from_attrs64(attrs: &[Stats64Attr]) -> Self {
        let mut s = Stats::default();
        for a in attrs {
            match *a {
                Stats64Attr::Conns(v) => s.conns = v,
                Stats64Attr::InPackets(v) => s.in_packets = v,
                Stats64Attr::OutPackets(v) => s.out_packets = v,
                Stats64Attr::InBytes(v) => s.in_bytes = v,
                Stats64Attr::OutBytes(v) => s.out_bytes = v,
                Stats64Attr::Cps(v) => s.cps = v,
                Stats64Attr::InPps(v) => s.in_pps = v,
                Stats64Attr::OutPps(v) => s.out_pps = v,
                Stats64Attr::InBps(v) => s.in_bps = v,
                Stats64Attr::OutBps(v) => s.out_bps = v,
                Stats64Attr::Other(_) => {}
            }
        }
        s
    }

    /// The 32-bit nest in the kernel's order; values wider than 32 bits are truncated as
    /// the kernel itself does.
    pub fn to_attrs(&self) -> Vec<StatsAttr> {
        vec![
            StatsAttr::Conns(self.conns as u32),
            StatsAttr::InPackets(self.in_packets as u32),
            StatsAttr::OutPackets(self.out_packets as u32),
            StatsAttr::InBytes(self.in_bytes),
            StatsAttr::OutBytes(self.out_bytes),
            StatsAttr::Cps(self.cps as u32),
            StatsAttr::InPps(self.in_pps as u32),
            StatsAttr::OutPps(self.out_pps as u32),
            StatsAttr::InBps(self.in_bps as u32),
            StatsAttr::OutBps(self.out_bps as u32),
        ]
    }

    /// The 64-bit nest in the kernel's order.
    pub fn to_attrs64(&self) -> Vec<Stats64Attr> {
        vec![
            Stats64Attr::Conns(self.conns),
            Stats64Attr::InPackets(self.in_packets),
            Stats64Attr::OutPackets(self.out_packets),
            Stats64Attr::InBytes(self.in_bytes),
            Stats64Attr::OutBytes(self.out_bytes),
            Stats64Attr::Cps(self.cps),
            Stats64Attr::InPps(self.in_pps),
            Stats64Attr::OutPps(self.out_pps),
            Stats64Attr::InBps(self.in_bps),
            Stats64Attr::OutBps(self.out_bps),
        ]
    }
}
