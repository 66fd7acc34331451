//! Typed sync daemons and their pure conversions to and from [`DaemonAttr`] lists.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_core::DecodeError;

use super::attr::DaemonAttr;

/// The role of a sync daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DaemonState {
    /// Sends connection state (`IP_VS_STATE_MASTER`).
    Master,
    /// Receives it (`IP_VS_STATE_BACKUP`).
    Backup,
}

impl DaemonState {
    /// The kernel's value.
    pub fn to_raw(self) -> u32 {
        match self {
            DaemonState::Master => 1,
            DaemonState::Backup => 2,
        }
    }

    /// From the kernel's value.
    pub fn from_raw(v: u32) -> Result<Self, DecodeError> {
        match v {
            1 => Ok(DaemonState::Master),
            2 => Ok(DaemonState::Backup),
            other => Err(DecodeError::from(format!("unknown daemon state {other}"))),
        }
    }

    /// ipvsadm's name.
    pub fn name(self) -> &'static str {
        match self {
            DaemonState::Master => "master",
            DaemonState::Backup => "backup",
        }
    }
}

/// A sync daemon. Options left `None` take the kernel's defaults on start (max length
/// 1472, group 224.0.0.81, port 8848, ttl 1); the kernel reports them all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncDaemon {
    /// Master or backup.
    pub state: DaemonState,
    /// The multicast interface (`--mcast-interface`).
    pub interface: String,
    /// The sync id (`--syncid`, 0-255).
    pub sync_id: u32,
    /// Maximum sync message length (`--sync-maxlen`).
    pub max_length: Option<u16>,
    /// Multicast group (`--mcast-group`).
    pub group: Option<IpAddr>,
    /// Multicast port (`--mcast-port`).
    pub port: Option<u16>,
    /// Multicast TTL (`--mcast-ttl`).
    pub ttl: Option<u8>,
}

impl SyncDaemon {
    /// A daemon with the kernel's defaults.
    pub fn new(state: DaemonState, interface: impl Into<String>, sync_id: u32) -> Self {
        SyncDaemon {
            state,
            interface: interface.into(),
            sync_id,
            max_length: None,
            group: None,
            port: None,
            ttl: None,
        }
    }

    /// The attributes `--start-daemon` sends, in ipvsadm's order.
    pub fn to_attrs(&self) -> Vec<DaemonAttr> {
        let mut attrs = vec![
            DaemonAttr::State(self.state.to_raw()),
            DaemonAttr::Interface(self.interface.clone()),
            DaemonAttr::SyncId(self.sync_id),
        ];
        if let Some(v) = self.max_length {
            attrs.push(DaemonAttr::MaxLength(v));
        }
        match self.group {
            Some(IpAddr::V4(g)) => attrs.push(DaemonAttr::Group(g.octets())),
            Some(IpAddr::V6(g)) => attrs.push(DaemonAttr::Group6(g.octets())),
            None => {}
        }
        if let Some(v) = self.port {
            attrs.push(DaemonAttr::Port(v));
        }
        if let Some(v) = self.ttl {
            attrs.push(DaemonAttr::Ttl(v));
        }
        attrs
    }

    /// Reads a daemon the kernel described.
    pub fn from_attrs(attrs: &[DaemonAttr]) -> Result<Self, DecodeError> {
        let mut state = None;
        let mut d = SyncDaemon::new(DaemonState::Master, String::new(), 0);
        for a in attrs {
            match a {
                DaemonAttr::State(s) => state = Some(DaemonState::from_raw(*s)?),
                DaemonAttr::Interface(i) => d.interface = i.clone(),
                DaemonAttr::SyncId(v) => d.sync_id = *v,
                DaemonAttr::MaxLength(v) => d.max_length = Some(*v),
                DaemonAttr::Group(g) => d.group = Some(IpAddr::V4(Ipv4Addr::from(*g))),
                DaemonAttr::Group6(g) => d.group = Some(IpAddr::V6(Ipv6Addr::from(*g))),
                DaemonAttr::Port(v) => d.port = Some(*v),
                DaemonAttr::Ttl(v) => d.ttl = Some(*v),
                DaemonAttr::Other(_) => {}
            }
        }
        d.state = state.ok_or("daemon without state")?;
        Ok(d)
    }
}
