//! The host's addresses as the desired state reads them: which are local, which serve node
//! ports, and where the health-check node ports listen.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::resolve_node_settings;
use crate::model::kernel::LINK_NAME;
pub use crate::model::kernel::host::{Host, LocalAddress};
use crate::model::snapshot::cluster::{Cluster, Family};
use crate::model::snapshot::config::ProxyConfig;

/// Where each family's health-check node ports listen: `None` (or no entry) for every
/// address of the family, else these addresses (none at all when no node address matches
/// `nodePortAddresses`, as kube-proxy).
pub type HealthCheckAddresses = BTreeMap<Family, Option<BTreeSet<IpAddr>>>;

/// What the desired state reads of the host: its node-port and health-check addresses.
impl Host {
    /// The addresses NodePorts are served on: every local address of the family except those on
    /// `kube-ipvs0`, loopback and IPv6 link-local, limited to the family's `nodeport_addresses`
    /// when it has some.
    pub fn node_port_addresses(&self, family: Family, config: &ProxyConfig) -> BTreeSet<IpAddr> {
        let cidrs = node_port_cidrs(family, config);
        self.addresses
            .iter()
            .filter(|a| a.interface != LINK_NAME && Family::of(&a.address) == family)
            .map(|a| a.address)
            .filter(|ip| !ip.is_loopback() && !is_link_local_v6(ip))
            .filter(|ip| cidrs.is_empty() || cidrs.iter().any(|n| n.contains(ip)))
            .collect()
    }

    /// Where the health-check node ports of `family` listen: `None` for every address of the
    /// family (no `nodeport_addresses` of that family), else the local addresses the family's
    /// CIDRs match, loopback included, as kube-proxy's service health server binds them.
    /// Addresses on `kube-ipvs0` are left out: they are VIPs, not the node's.
    pub fn health_check_addresses(
        &self,
        family: Family,
        config: &ProxyConfig,
    ) -> Option<BTreeSet<IpAddr>> {
        let cidrs = node_port_cidrs(family, config);
        if cidrs.is_empty() || cidrs.iter().any(|n| n.prefix_len() == 0) {
            return None;
        }
        Some(
            self.addresses
                .iter()
                .filter(|a| a.interface != LINK_NAME)
                .map(|a| a.address)
                .filter(|ip| cidrs.iter().any(|n| n.contains(ip)))
                .collect(),
        )
    }
}

/// [`Host::health_check_addresses`] of every family `config` serves, with its node settings
/// (`primary`) resolved from the cluster's Node.
pub fn health_check_addresses(
    cluster: &Cluster,
    config: &ProxyConfig,
    host: &Host,
) -> HealthCheckAddresses {
    let config = resolve_node_settings(cluster, config);
    config
        .families
        .iter()
        .map(|f| (*f, host.health_check_addresses(*f, &config)))
        .collect()
}

/// The `nodeport_addresses` CIDRs of `family`. kube-proxy reads the list per family: a family
/// with none of its own serves node ports on all its addresses, whatever the other family's
/// CIDRs say.
fn node_port_cidrs(family: Family, config: &ProxyConfig) -> Vec<IpNet> {
    config
        .nodeport_addresses
        .iter()
        .filter(|n| Family::of(&n.addr()) == family)
        .copied()
        .collect()
}

fn is_link_local_v6(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
}
