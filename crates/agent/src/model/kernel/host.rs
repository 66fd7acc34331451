//! The host the agent runs on as the kernel shows it: the addresses on its interfaces, read
//! each full sync, which the desired state depends on.

use std::net::IpAddr;

use super::LINK_NAME;

/// An address configured on one of the host's interfaces.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LocalAddress {
    /// The interface's name.
    pub interface: String,
    /// The address.
    pub address: IpAddr,
}

/// Facts about the host the desired state depends on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Host {
    /// Every address on every interface but `kube-ipvs0`, as the kernel read them. The VIPs
    /// there are the agent's doing, not the node's, and nothing reads them as the host's: kept
    /// here, a VIP bound or unbound made the host differ, so the next pass built the desired
    /// state whole, and each of the 11,200 at N = 10,000 cost 100 bytes in every copy.
    pub addresses: Vec<LocalAddress>,
}

impl Host {
    /// True when `ip` is configured on an interface other than `kube-ipvs0`.
    pub fn is_local(&self, ip: &IpAddr) -> bool {
        self.addresses
            .iter()
            .any(|a| a.address == *ip && a.interface != LINK_NAME)
    }
}
