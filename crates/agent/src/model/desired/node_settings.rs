//! The settings kube-proxy reads from the Node object: the node's IPs, `primary` node-port
//! addresses and the `NodeCIDR` local detector.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::snapshot::cluster::{Cluster, Family, Node};
use crate::model::snapshot::config::{LocalDetector, ProxyConfig};

/// Fills the settings that come from the Node object: `--nodeport-addresses=primary` (the
/// node's IP of each family as kube-proxy detects it, `--bind-address` ahead of the Node's
/// first address, as a host prefix) and `--detect-local-mode=NodeCIDR`
/// (the Node's pod CIDRs). Without a Node they stay empty: NodePorts are then served nowhere
/// rather than everywhere, and no pod traffic is told apart.
pub(crate) fn resolve_node_settings(cluster: &Cluster, config: &ProxyConfig) -> ProxyConfig {
    let mut c = config.clone();
    let node = cluster.node.as_ref();
    if config.nodeport_primary {
        // kube-proxy's nodeIPs: a family with none is loopback there, and "primary" skips it.
        c.nodeport_addresses = [Family::V4, Family::V6]
            .into_iter()
            .map(|f| primary_node_ip(node, config.bind_address, f))
            .filter(|ip| !ip.is_loopback())
            .map(IpNet::from)
            .collect();
        // A family without a node IP gets no CIDR and so serves on all its addresses, as
        // kube-proxy's "primary" skips it; until the Node (or a bind address) is known, an
        // impossible prefix per family keeps node ports off every address.
        if c.nodeport_addresses.is_empty() {
            c.nodeport_addresses = vec![
                IpNet::from(IpAddr::from([0, 0, 0, 0])),
                IpNet::from(IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED)),
            ];
        }
    }
    c.node_ips = [Family::V4, Family::V6]
        .into_iter()
        .map(|f| primary_node_ip(node, config.bind_address, f))
        .collect();
    if let LocalDetector::NodeCidr(cidrs) = &mut c.local_detector
        && cidrs.is_empty()
    {
        *cidrs = node.map(|n| n.pod_cidrs.clone()).unwrap_or_default();
    }
    c
}

/// The node's IP of `family` as kube-proxy detects it: `--bind-address` when it names an
/// address of that family, else the Node's first address of it, else loopback.
fn primary_node_ip(node: Option<&Node>, bind_address: Option<IpAddr>, family: Family) -> IpAddr {
    bind_address
        .filter(|ip| Family::of(ip) == family)
        .or_else(|| {
            node.and_then(|n| {
                n.addresses
                    .iter()
                    .copied()
                    .find(|a| Family::of(a) == family)
            })
        })
        .unwrap_or(match family {
            Family::V4 => IpAddr::from(std::net::Ipv4Addr::LOCALHOST),
            Family::V6 => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        })
}
