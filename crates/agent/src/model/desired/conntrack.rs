//! Which UDP conntrack entries are stale, as kube-proxy's `CleanStaleEntries` decides.
//!
//! A UDP flow has no end: its conntrack entry (and the IPVS connection behind it) keeps sending
//! a client's datagrams to the endpoint it first reached for as long as the client keeps
//! sending, long after that endpoint left the Service (kube-proxy #71514, #76664). So after
//! UDP Services or endpoints change, every conntrack entry whose original destination is a UDP
//! Service frontend, but whose reply comes from no serving endpoint (address and port) of that
//! Service port, is deleted; the next datagram then makes a new entry and IPVS schedules it
//! afresh.
//!
//! The filter follows kube-proxy 1.37: endpoints count when they are serving (ready or not,
//! terminating or not: traffic policies and topology do not matter, so a flow that already
//! runs is never cut because of them), by address and port (a changed target port makes the
//! old flows stale). A cluster, external or load-balancer IP with no serving endpoint left
//! has every flow stale: a one-way sender would otherwise stay sent to a deleted pod for as
//! long as it sends (kubernetes#139628). A node port with no serving endpoint is left alone,
//! as kube-proxy leaves it. kube-proxy matches a node port on any
//! destination address; here it must also be one of the addresses NodePorts are served on, so
//! a flow that leaves the node for a remote port of the same number is not touched.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use crate::model::desired::{Host, resolve_node_settings};
use crate::model::snapshot::cluster::{Cluster, Family, Protocol, ServiceType};
use crate::model::snapshot::config::ProxyConfig;
use crate::model::snapshot::endpoints::{Topology, port_endpoints};

/// The serving endpoints of every UDP Service frontend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConntrackFilter {
    /// Service IP and port (cluster, external and load-balancer IPs) to its serving endpoints
    /// (empty when it has none: then every flow to it is stale).
    pub frontends: BTreeMap<SocketAddr, BTreeSet<SocketAddr>>,
    /// Node port (per family) to its serving endpoints (only node ports that have some).
    pub node_ports: BTreeMap<(Family, u16), BTreeSet<SocketAddr>>,
    /// The local addresses NodePorts are served on.
    pub node_addresses: BTreeSet<IpAddr>,
}

impl ConntrackFilter {
    /// True when a flow of `protocol` sent to `original_destination` and answered from
    /// `reply_source` should be deleted: it is a UDP flow to a frontend, and its answers come
    /// from none of that frontend's serving endpoints.
    pub fn is_stale(
        &self,
        protocol: Protocol,
        original_destination: SocketAddr,
        reply_source: SocketAddr,
    ) -> bool {
        if protocol != Protocol::Udp {
            return false;
        }
        let stale_for = |serving: &BTreeSet<SocketAddr>| !serving.contains(&reply_source);
        if self
            .frontends
            .get(&original_destination)
            .is_some_and(stale_for)
        {
            return true;
        }
        let family = Family::of(&original_destination.ip());
        self.node_addresses.contains(&original_destination.ip())
            && self
                .node_ports
                .get(&(family, original_destination.port()))
                .is_some_and(stale_for)
    }

    /// The families that have a frontend to clean (the conntrack table is read per family).
    pub fn families(&self) -> BTreeSet<Family> {
        self.frontends
            .keys()
            .map(|a| Family::of(&a.ip()))
            .chain(self.node_ports.keys().map(|(f, _)| *f))
            .collect()
    }

    /// True when no flow can be stale.
    pub fn is_empty(&self) -> bool {
        self.frontends.is_empty() && self.node_ports.is_empty()
    }

    /// The part of the filter that decides which flows are stale, without the node's
    /// addresses: when it is unchanged since the last cleanup no new flow became stale.
    pub fn same_endpoints(&self, other: &ConntrackFilter) -> bool {
        self.frontends == other.frontends && self.node_ports == other.node_ports
    }
}

/// The conntrack filter of `cluster` on the host `host`, for the families of `config`.
pub fn conntrack_filter(cluster: &Cluster, config: &ProxyConfig, host: &Host) -> ConntrackFilter {
    conntrack_filter_of(cluster, config, host, None)
}

/// [`conntrack_filter`] for the Services `only` with their slices (all when `None`): the
/// frontends of the Services a change touched.
pub fn conntrack_filter_of(
    cluster: &Cluster,
    config: &ProxyConfig,
    host: &Host,
    only: Option<(
        &std::collections::BTreeSet<crate::model::snapshot::cluster::ServiceRef>,
        &crate::model::snapshot::cluster::SlicesByService<'_>,
    )>,
) -> ConntrackFilter {
    let config = &resolve_node_settings(cluster, config);
    let mut out = ConntrackFilter::default();
    // Topology does not narrow the serving set; it only has to be given.
    let topology = Topology {
        node: &config.node_name,
        ..Topology::default()
    };
    for family in &config.families {
        out.node_addresses
            .extend(host.node_port_addresses(*family, config));
    }
    let all;
    let (slices, services): (
        _,
        Box<dyn Iterator<Item = &crate::model::snapshot::cluster::Service>>,
    ) = match only {
        Some((ids, slices)) => (
            slices,
            Box::new(
                ids.iter()
                    .filter_map(|id| cluster.services.get(id).map(|s| &**s)),
            ),
        ),
        None => {
            all = cluster.slices_by_service();
            (&all, Box::new(cluster.services.values().map(|s| &**s)))
        }
    };
    for service in services {
        if service.kind == ServiceType::ExternalName {
            continue;
        }
        for &cluster_ip in &service.cluster_ips {
            let family = Family::of(&cluster_ip);
            if !config.families.contains(&family) {
                continue;
            }
            let load_balancer_ips: &[IpAddr] = if service.kind == ServiceType::LoadBalancer {
                &service.load_balancer_ips
            } else {
                &[]
            };
            let frontend_ips: Vec<IpAddr> = std::iter::once(cluster_ip)
                .chain(service.external_ips.iter().copied())
                .chain(load_balancer_ips.iter().copied())
                .filter(|ip| Family::of(ip) == family)
                .collect();
            for port in service.ports.iter().filter(|p| p.protocol == Protocol::Udp) {
                let serving: BTreeSet<SocketAddr> =
                    port_endpoints(slices.of(&service.id), port, family, &topology)
                        .iter()
                        .filter(|e| e.serving)
                        .map(|e| e.address)
                        .collect();
                for ip in &frontend_ips {
                    // Two Services on one frontend: the first keeps it, as in the desired state.
                    out.frontends
                        .entry(SocketAddr::new(*ip, port.port))
                        .or_insert_with(|| serving.clone());
                }
                if let (Some(node_port), ServiceType::NodePort | ServiceType::LoadBalancer, false) =
                    (port.node_port, service.kind, serving.is_empty())
                {
                    out.node_ports.entry((family, node_port)).or_insert(serving);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn set(ips: &[&str]) -> BTreeSet<IpAddr> {
        ips.iter().map(|s| ip(s)).collect()
    }

    fn sas(addrs: &[&str]) -> BTreeSet<SocketAddr> {
        addrs.iter().map(|s| sa(s)).collect()
    }

    #[test]
    fn udp_frontends_map_to_their_serving_endpoints() {
        let c = cluster(
            vec![
                svc("dns")
                    .cluster_ip("10.96.0.10")
                    .port("dns", Protocol::Udp, 53)
                    .node_port(30053)
                    .load_balancer("203.0.113.7")
                    .external_ip("198.51.100.1"),
                // TCP only: nothing to clean.
                svc("web").cluster_ip("10.96.0.20").tcp(80),
                // No serving endpoint: every flow to its cluster IP is stale, its node port
                // is left alone.
                svc("empty")
                    .cluster_ip("10.96.0.30")
                    .port("", Protocol::Udp, 53)
                    .node_port(30054),
                svc("alias")
                    .cluster_ip("10.96.0.40")
                    .port("", Protocol::Udp, 53)
                    .kind(ServiceType::ExternalName),
            ],
            vec![
                eps("dns", "dns", Protocol::Udp, 5353)
                    .ready("10.244.0.2", "node-a")
                    // Terminating but serving: still counts.
                    .endpoint("10.244.1.2", "node-b", false, true, true)
                    // Neither: its flows are stale.
                    .endpoint("10.244.1.3", "node-b", false, false, true),
                eps("web", "", Protocol::Tcp, 8080).ready("10.244.0.5", "node-a"),
                eps("empty", "", Protocol::Udp, 5353).endpoint(
                    "10.244.0.6",
                    "node-a",
                    false,
                    false,
                    true,
                ),
                eps("alias", "", Protocol::Udp, 5353).ready("10.244.0.7", "node-a"),
            ],
        );
        let f = conntrack_filter(&c, &config(), &host());
        let serving = sas(&["10.244.0.2:5353", "10.244.1.2:5353"]);
        assert_eq!(
            f.frontends,
            [
                (sa("10.96.0.10:53"), serving.clone()),
                (sa("10.96.0.30:53"), BTreeSet::new()),
                (sa("198.51.100.1:53"), serving.clone()),
                (sa("203.0.113.7:53"), serving.clone()),
            ]
            .into_iter()
            .collect()
        );
        assert_eq!(
            f.node_ports,
            [((Family::V4, 30053), serving)].into_iter().collect()
        );
        assert_eq!(f.node_addresses, set(&["192.168.1.10"]));
        assert_eq!(f.families(), [Family::V4].into_iter().collect());
    }

    #[test]
    fn stale_flows_are_those_answered_by_no_serving_endpoint() {
        let c = cluster(
            vec![
                svc("dns")
                    .cluster_ip("10.96.0.10")
                    .port("", Protocol::Udp, 53)
                    .node_port(30053),
            ],
            vec![eps("dns", "", Protocol::Udp, 5353).ready("10.244.0.2", "node-a")],
        );
        let f = conntrack_filter(&c, &config(), &host());
        let udp = Protocol::Udp;
        // (protocol, original destination, reply source, stale)
        let table = [
            (udp, "10.96.0.10:53", "10.244.0.2:5353", false),
            (udp, "10.96.0.10:53", "10.244.0.3:5353", true),
            // The endpoint's old port (the target port changed, the pod kept its IP).
            (udp, "10.96.0.10:53", "10.244.0.2:53", true),
            // Not NATed at all (sent before the Service had endpoints).
            (udp, "10.96.0.10:53", "10.96.0.10:53", true),
            // Another port of the VIP, or TCP: not ours.
            (udp, "10.96.0.10:54", "10.244.0.3:5353", false),
            (Protocol::Tcp, "10.96.0.10:53", "10.244.0.3:5353", true),
            // The node port on a NodePort address, and elsewhere.
            (udp, "192.168.1.10:30053", "10.244.0.3:5353", true),
            (udp, "192.168.1.10:30053", "10.244.0.2:5353", false),
            (udp, "127.0.0.1:30053", "10.244.0.3:5353", false),
            (udp, "8.8.8.8:30053", "10.244.0.3:5353", false),
        ];
        for (protocol, dst, reply, stale) in table {
            let want = stale && protocol == Protocol::Udp;
            assert_eq!(
                f.is_stale(protocol, sa(dst), sa(reply)),
                want,
                "{protocol} {dst} answered by {reply}"
            );
        }
    }

    #[test]
    fn families_follow_the_config_and_nothing_means_nothing_to_clean() {
        let c = cluster(
            vec![
                svc("dns6")
                    .cluster_ip("fd00::10")
                    .port("", Protocol::Udp, 53),
            ],
            vec![eps("dns6", "", Protocol::Udp, 5353).ready("fd00:244::2", "node-a")],
        );
        let f = conntrack_filter(&c, &config(), &host());
        assert!(f.is_empty(), "IPv6 is not served: {f:?}");
        let dual = ProxyConfig {
            families: vec![Family::V4, Family::V6],
            ..config()
        };
        let f = conntrack_filter(&c, &dual, &host());
        assert_eq!(f.families(), [Family::V6].into_iter().collect());
        assert!(f.is_stale(Protocol::Udp, sa("[fd00::10]:53"), sa("[fd00:244::3]:5353")));
        assert!(!f.is_stale(Protocol::Udp, sa("[fd00::10]:53"), sa("[fd00:244::2]:5353")));
    }

    #[test]
    fn the_same_endpoints_ignore_the_node_addresses() {
        let c = cluster(
            vec![
                svc("dns")
                    .cluster_ip("10.96.0.10")
                    .port("", Protocol::Udp, 53),
            ],
            vec![eps("dns", "", Protocol::Udp, 5353).ready("10.244.0.2", "node-a")],
        );
        let a = conntrack_filter(&c, &config(), &host());
        let b = conntrack_filter(&c, &config(), &Host::default());
        assert!(a.same_endpoints(&b));
        let moved = cluster(
            vec![
                svc("dns")
                    .cluster_ip("10.96.0.10")
                    .port("", Protocol::Udp, 53),
            ],
            vec![eps("dns", "", Protocol::Udp, 5353).ready("10.244.0.3", "node-a")],
        );
        assert!(!a.same_endpoints(&conntrack_filter(&moved, &config(), &host())));
    }
}
