//! Typed destinations and their pure conversions to and from [`DestinationAttr`] lists.

use std::fmt;
use std::net::IpAddr;

use netlink_packet_core::DecodeError;

use super::attr::DestinationAttr;
use crate::service::AddressFamily;
use crate::service::model::raw_address;
use crate::stats::Stats;

/// How packets reach a destination (`IP_VS_CONN_F_FWD_MASK` bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForwardMethod {
    /// NAT (`-m`, "Masq").
    Masquerade,
    /// The local node ("Local"; ipvsadm picks it for local addresses given with `-g`).
    Local,
    /// IP-in-IP, GUE or GRE tunnelling (`-i`, "Tunnel").
    Tunnel,
    /// Direct routing (`-g`, "Route").
    DirectRoute,
    /// Another value.
    Other(u32),
}

impl ForwardMethod {
    /// The kernel's value.
    pub fn to_raw(self) -> u32 {
        match self {
            ForwardMethod::Masquerade => 0,
            ForwardMethod::Local => 1,
            ForwardMethod::Tunnel => 2,
            ForwardMethod::DirectRoute => 3,
            ForwardMethod::Other(v) => v,
        }
    }

    /// From the kernel's value (only the forwarding bits count).
    pub fn from_raw(v: u32) -> Self {
        match v & 0x7 {
            0 => ForwardMethod::Masquerade,
            1 => ForwardMethod::Local,
            2 => ForwardMethod::Tunnel,
            3 => ForwardMethod::DirectRoute,
            other => ForwardMethod::Other(other),
        }
    }

    /// ipvsadm's name in listings (`Masq`, `Local`, `Tunnel`, `Route`).
    pub fn listing_name(self) -> &'static str {
        match self {
            ForwardMethod::Masquerade => "Masq",
            ForwardMethod::Local => "Local",
            ForwardMethod::Tunnel => "Tunnel",
            ForwardMethod::DirectRoute => "Route",
            ForwardMethod::Other(_) => "",
        }
    }
}

/// The encapsulation of a tunnelled destination (`IP_VS_CONN_F_TUNNEL_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TunnelType {
    /// IP in IP (the default).
    #[default]
    Ipip,
    /// Generic UDP encapsulation.
    Gue,
    /// Generic routing encapsulation.
    Gre,
    /// Another value.
    Other(u8),
}

impl TunnelType {
    /// The kernel's value.
    pub fn to_raw(self) -> u8 {
        match self {
            TunnelType::Ipip => 0,
            TunnelType::Gue => 1,
            TunnelType::Gre => 2,
            TunnelType::Other(v) => v,
        }
    }

    /// From the kernel's value.
    pub fn from_raw(v: u8) -> Self {
        match v {
            0 => TunnelType::Ipip,
            1 => TunnelType::Gue,
            2 => TunnelType::Gre,
            other => TunnelType::Other(other),
        }
    }
}

impl fmt::Display for TunnelType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TunnelType::Ipip => f.write_str("ipip"),
            TunnelType::Gue => f.write_str("gue"),
            TunnelType::Gre => f.write_str("gre"),
            TunnelType::Other(v) => write!(f, "{v}"),
        }
    }
}

bitflags::bitflags! {
    /// Tunnel encapsulation flags (`IP_VS_TUNNEL_ENCAP_FLAG_*`); empty means no checksum.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct TunnelFlags: u16 {
        /// Checksums in the encapsulation (`--tun-csum`).
        const CSUM = 0x1;
        /// Remote checksum offload (`--tun-remcsum`).
        const REMCSUM = 0x2;
        // A newer kernel's flags survive a round trip.
        const _ = !0;
    }
}

/// Tunnel settings of a destination; the kernel keeps them for every destination and
/// uses them with [`ForwardMethod::Tunnel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Tunnel {
    /// Encapsulation.
    pub kind: TunnelType,
    /// Destination port of the encapsulation (GUE).
    pub port: u16,
    /// Encapsulation flags.
    pub flags: TunnelFlags,
}

/// A destination (real server) of a virtual service (`ipvsadm -a`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// Its address (its family may differ from the service's with tunnelling).
    pub address: IpAddr,
    /// Its port.
    pub port: u16,
    /// How packets reach it.
    pub forward: ForwardMethod,
    /// Scheduling weight (0 takes it out of rotation).
    pub weight: u32,
    /// Upper connection threshold (0: none).
    pub upper_threshold: u32,
    /// Lower connection threshold (0: none).
    pub lower_threshold: u32,
    /// Tunnel settings.
    pub tunnel: Tunnel,
    /// Active connections (read from the kernel, never sent).
    pub active_connections: u32,
    /// Inactive connections (read from the kernel, never sent).
    pub inactive_connections: u32,
    /// Persistent connections (read from the kernel, never sent).
    pub persistent_connections: u32,
    /// 32-bit counters (read from the kernel, never sent).
    pub stats: Option<Stats>,
    /// 64-bit counters (read from the kernel, never sent).
    pub stats64: Option<Stats>,
}

impl Destination {
    /// A destination with ipvsadm's defaults (weight 1, no thresholds, IP-in-IP settings).
    pub fn new(address: IpAddr, port: u16, forward: ForwardMethod) -> Self {
        Destination {
            address,
            port,
            forward,
            weight: 1,
            upper_threshold: 0,
            lower_threshold: 0,
            tunnel: Tunnel::default(),
            active_connections: 0,
            inactive_connections: 0,
            persistent_connections: 0,
            stats: None,
            stats64: None,
        }
    }

    /// Sets the weight.
    pub fn with_weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// Sets the thresholds (`-x`, `-y`).
    pub fn with_thresholds(mut self, upper: u32, lower: u32) -> Self {
        self.upper_threshold = upper;
        self.lower_threshold = lower;
        self
    }

    /// Sets the tunnel settings.
    pub fn with_tunnel(mut self, tunnel: Tunnel) -> Self {
        self.tunnel = tunnel;
        self
    }

    /// The destination's family.
    pub fn family(&self) -> AddressFamily {
        AddressFamily::of(&self.address)
    }

    /// Attributes naming the destination (for `-d`), as ipvsadm sends them.
    pub fn key_attrs(address: &IpAddr, port: u16) -> Vec<DestinationAttr> {
        vec![
            DestinationAttr::AddressFamily(AddressFamily::of(address).to_raw()),
            DestinationAttr::Address(raw_address(address)),
            DestinationAttr::Port(port),
        ]
    }

    /// The attributes ipvsadm's `-a`/`-e` send, in its order.
    pub fn config_attrs(&self) -> Vec<DestinationAttr> {
        let mut attrs = Self::key_attrs(&self.address, self.port);
        attrs.extend([
            DestinationAttr::ForwardMethod(self.forward.to_raw()),
            DestinationAttr::Weight(self.weight),
            DestinationAttr::TunnelType(self.tunnel.kind.to_raw()),
            DestinationAttr::TunnelPort(self.tunnel.port),
            DestinationAttr::TunnelFlags(self.tunnel.flags.bits()),
            DestinationAttr::UpperThreshold(self.upper_threshold),
            DestinationAttr::LowerThreshold(self.lower_threshold),
        ]);
        attrs
    }

    /// [`Destination::config_attrs`], then the read-only attributes if set.
    pub fn to_attrs(&self) -> Vec<DestinationAttr> {
        let mut attrs = self.config_attrs();
        if self.active_connections != 0
            || self.inactive_connections != 0
            || self.persistent_connections != 0
        {
            attrs.extend([
                DestinationAttr::ActiveConnections(self.active_connections),
                DestinationAttr::InactiveConnections(self.inactive_connections),
                DestinationAttr::PersistentConnections(self.persistent_connections),
            ]);
        }
        if let Some(s) = &self.stats {
            attrs.push(DestinationAttr::Stats(s.to_attrs()));
        }
        if let Some(s) = &self.stats64 {
            attrs.push(DestinationAttr::Stats64(s.to_attrs64()));
        }
        attrs
    }

    /// Reads a destination the kernel described; `service_family` is its family when the
    /// kernel (before 4.x) sends no `IPVS_DEST_ATTR_ADDR_FAMILY`.
    pub fn from_attrs(
        attrs: &[DestinationAttr],
        service_family: AddressFamily,
    ) -> Result<Self, DecodeError> {
        let mut family = service_family;
        let mut raw = None;
        let mut port = None;
        for a in attrs {
            match a {
                DestinationAttr::AddressFamily(af) => family = AddressFamily::from_raw(*af)?,
                DestinationAttr::Address(a) => raw = Some(*a),
                DestinationAttr::Port(p) => port = Some(*p),
                _ => {}
            }
        }
        let raw = raw.ok_or("destination without address")?;
        let port = port.ok_or("destination without port")?;
        let mut d = Destination::new(family.address(&raw), port, ForwardMethod::Masquerade);
        d.weight = 0;
        for a in attrs {
            match a {
                DestinationAttr::ForwardMethod(v) => d.forward = ForwardMethod::from_raw(*v),
                DestinationAttr::Weight(v) => d.weight = *v,
                DestinationAttr::UpperThreshold(v) => d.upper_threshold = *v,
                DestinationAttr::LowerThreshold(v) => d.lower_threshold = *v,
                DestinationAttr::ActiveConnections(v) => d.active_connections = *v,
                DestinationAttr::InactiveConnections(v) => d.inactive_connections = *v,
                DestinationAttr::PersistentConnections(v) => d.persistent_connections = *v,
                DestinationAttr::Stats(s) => d.stats = Some(Stats::from_attrs(s)),
                DestinationAttr::Stats64(s) => d.stats64 = Some(Stats::from_attrs64(s)),
                DestinationAttr::TunnelType(v) => d.tunnel.kind = TunnelType::from_raw(*v),
                DestinationAttr::TunnelPort(v) => d.tunnel.port = *v,
                DestinationAttr::TunnelFlags(v) => {
                    d.tunnel.flags = TunnelFlags::from_bits_retain(*v)
                }
                _ => {}
            }
        }
        Ok(d)
    }
}
