//! Which endpoints of a Service port receive traffic on this node, as kube-proxy's
//! `CategorizeEndpoints` decides: ready endpoints, or the serving terminating ones when none
//! is ready, separately for the cluster-wide and the node-local sets.
//!
//! Topology (`trafficDistribution`, topology-aware routing) narrows the cluster-wide set
//! through the hints the EndpointSlice controller writes; the Service's own field is not read,
//! as kube-proxy does not read it. When every ready endpoint has node hints and one is hinted
//! for this node, only those are used (`PreferSameNode`, behind the
//! `PreferSameTrafficDistribution` gate); otherwise, when every ready endpoint has zone hints
//! and one is hinted for this node's zone (the Node's `topology.kubernetes.io/zone` label),
//! only those (`PreferSameZone`, `PreferClose`, `topology-mode: Auto`). Otherwise every ready
//! endpoint is used. The node-local set ignores hints.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use crate::model::snapshot::cluster::{Cluster, EndpointSlice, Family, Protocol, ServicePort};

/// The Node label that names its zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Where this node is, for topology hints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Topology<'a> {
    /// The node's name.
    pub node: &'a str,
    /// Its zone, from [`ZONE_LABEL`]; `None` when unlabelled (zone hints then never apply).
    pub zone: Option<&'a str>,
    /// The `PreferSameTrafficDistribution` gate: node hints apply.
    pub node_hints: bool,
}

/// What an endpoint's hints say about this node: `None` when it has no hint of that kind,
/// else whether one names this node (or its zone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    /// `hints.forNodes`.
    pub node: Option<bool>,
    /// `hints.forZones`.
    pub zone: Option<bool>,
}

/// One endpoint of one Service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortEndpoint {
    /// Address and target port.
    pub address: SocketAddr,
    /// Runs on this node.
    pub local: bool,
    /// Ready.
    pub ready: bool,
    /// Serving (possibly while terminating).
    pub serving: bool,
    /// Terminating.
    pub terminating: bool,
    /// Its topology hints, relative to this node.
    pub hints: Hints,
}

/// The endpoints chosen for a Service port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chosen {
    /// For traffic that may go anywhere in the cluster.
    pub cluster: Vec<SocketAddr>,
    /// For traffic that must stay on this node.
    pub local: Vec<SocketAddr>,
    /// Every local endpoint, ready or not (for the hairpin set).
    pub all_local: Vec<SocketAddr>,
}

/// Every endpoint of `port` in the family's slices among `slices` (a Service's, from
/// [`crate::model::snapshot::cluster::SlicesByService::of`]), one per address and port, seen
/// from the node `topology` describes.
pub fn port_endpoints(
    slices: &[&EndpointSlice],
    port: &ServicePort,
    family: Family,
    topology: &Topology,
) -> Vec<PortEndpoint> {
    endpoints_of_port(slices, &port.name, port.protocol, family, topology)
}

/// [`port_endpoints`] by the port's name and protocol, as the slices list it.
fn endpoints_of_port(
    slices: &[&EndpointSlice],
    name: &str,
    protocol: Protocol,
    family: Family,
    topology: &Topology,
) -> Vec<PortEndpoint> {
    // Keyed by address and port, as kube-proxy keys its endpoints: two endpoints of one
    // address with different port numbers (two host-network pods of one node whose named
    // target port differs) are two real servers.
    let mut by_addr: BTreeMap<SocketAddr, PortEndpoint> = BTreeMap::new();
    for slice in slices.iter().filter(|s| s.family == family) {
        // A slice may list one name twice in different slices, never in one (API validation).
        for ep_port in slice
            .ports
            .iter()
            .filter(|p| p.name == name && p.protocol == protocol)
        {
            for ep in &slice.endpoints {
                let candidate = PortEndpoint {
                    address: SocketAddr::new(ep.address, ep_port.port),
                    local: ep.node() == Some(topology.node),
                    ready: ep.ready,
                    serving: ep.serving,
                    terminating: ep.terminating,
                    hints: Hints {
                        node: (!ep.node_hints().is_empty())
                            .then(|| ep.node_hints().iter().any(|n| n == topology.node)),
                        zone: (!ep.zone_hints().is_empty()).then(|| {
                            topology
                                .zone
                                .is_some_and(|z| ep.zone_hints().iter().any(|h| h == z))
                        }),
                    },
                };
                // The same address and port twice: an endpoint moving between slices, or a pod
                // IP reused while the old pod terminates. As kube-proxy: a terminating one never
                // replaces another; a non-terminating one replaces a terminating one. Between two
                // that are not terminating (kube-proxy's result depends on map order) the ready
                // one is kept.
                by_addr
                    .entry(candidate.address)
                    .and_modify(|e| {
                        if !candidate.terminating && (e.terminating || candidate.ready && !e.ready)
                        {
                            *e = candidate;
                        }
                    })
                    .or_insert(candidate);
            }
        }
    }
    by_addr.into_values().collect()
}

/// Which hints narrow the cluster-wide endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyMode {
    /// None: every ready endpoint.
    All,
    /// Endpoints hinted for this node.
    SameNode,
    /// Endpoints hinted for this node's zone.
    SameZone,
}

/// The topology mode of `endpoints`, as kube-proxy's `topologyModeFromHints` decides: hints
/// count only when every ready endpoint has one of the kind and one names this node (zone),
/// so a half-written set of hints or a node the hints forgot falls back to every endpoint.
pub fn topology_mode(endpoints: &[PortEndpoint], node_hints: bool) -> TopologyMode {
    let ready: Vec<&PortEndpoint> = endpoints.iter().filter(|e| e.ready).collect();
    if ready.is_empty() {
        return TopologyMode::All;
    }
    let usable = |hint: fn(&Hints) -> Option<bool>| {
        ready.iter().all(|e| hint(&e.hints).is_some())
            && ready.iter().any(|e| hint(&e.hints) == Some(true))
    };
    if node_hints && usable(|h| h.node) {
        TopologyMode::SameNode
    } else if usable(|h| h.zone) {
        TopologyMode::SameZone
    } else {
        TopologyMode::All
    }
}

/// Chooses among `endpoints` as kube-proxy does; `node_hints` is the
/// `PreferSameTrafficDistribution` gate.
pub fn choose(endpoints: &[PortEndpoint], node_hints: bool) -> Chosen {
    let mode = topology_mode(endpoints, node_hints);
    let in_topology = |e: &PortEndpoint| match mode {
        TopologyMode::All => true,
        TopologyMode::SameNode => e.hints.node == Some(true),
        TopologyMode::SameZone => e.hints.zone == Some(true),
    };
    let pick = |local_only: bool| -> Vec<SocketAddr> {
        let pool: Vec<&PortEndpoint> = endpoints
            .iter()
            .filter(|e| !local_only || e.local)
            .collect();
        // Hints narrow the cluster-wide set only; the mode was chosen so that some ready
        // endpoint remains.
        let ready: Vec<SocketAddr> = pool
            .iter()
            .filter(|e| e.ready && (local_only || in_topology(e)))
            .map(|e| e.address)
            .collect();
        if !ready.is_empty() {
            return ready;
        }
        pool.iter()
            .filter(|e| e.serving && e.terminating)
            .map(|e| e.address)
            .collect()
    };
    Chosen {
        cluster: pick(false),
        local: pick(true),
        all_local: endpoints
            .iter()
            .filter(|e| e.local)
            .map(|e| e.address)
            .collect(),
    }
}

/// One health-check node port to serve, for one IP family of its Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// The family: kube-proxy runs one health server per family, each answering with its
    /// own family's endpoints.
    pub family: crate::model::snapshot::cluster::Family,
    /// `spec.healthCheckNodePort`.
    pub port: u16,
    /// The Service.
    pub service: crate::model::snapshot::cluster::ServiceRef,
    /// Its ready endpoints of this family on this node, counted by address (kube-proxy
    /// answers 200 when it is not zero).
    pub local_endpoints: usize,
}

/// The health-check node ports to serve: for each load balancer with
/// `externalTrafficPolicy: Local` and a `healthCheckNodePort`, one per family of `families`
/// it has a cluster IP of.
pub fn health_checks(
    cluster: &Cluster,
    node: &str,
    families: &[crate::model::snapshot::cluster::Family],
) -> Vec<HealthCheck> {
    use crate::model::snapshot::cluster::{Family, ServiceType, TrafficPolicy};
    let mut out = Vec::new();
    for service in cluster.services.values() {
        let Some(port) = service.health_check_node_port else {
            continue;
        };
        if service.kind != ServiceType::LoadBalancer
            || service.external_traffic_policy != TrafficPolicy::Local
        {
            continue;
        }
        for family in families {
            if !service
                .cluster_ips
                .iter()
                .any(|ip| Family::of(ip) == *family)
            {
                continue;
            }
            // As kube-proxy's `LocalReadyEndpoints`: the distinct addresses of the local ready
            // endpoints of each port the slices list, after the same de-duplication. An
            // endpoint in a slice without ports (its pod lacks the Service's named target
            // port) counts for nothing: no traffic can reach it.
            let slices: Vec<&EndpointSlice> = cluster
                .slices_of(&service.id)
                .filter(|s| s.family == *family)
                .collect();
            let ports: std::collections::BTreeSet<(&str, Protocol)> = slices
                .iter()
                .flat_map(|s| s.ports.iter())
                .map(|p| (&*p.name, p.protocol))
                .collect();
            let topology = Topology {
                node,
                ..Topology::default()
            };
            let local: std::collections::BTreeSet<IpAddr> = ports
                .into_iter()
                .flat_map(|(name, protocol)| {
                    endpoints_of_port(&slices, name, protocol, *family, &topology)
                })
                .filter(|e| e.ready && e.local)
                .map(|e| e.address.ip())
                .collect();
            out.push(HealthCheck {
                family: *family,
                port,
                service: service.id.clone(),
                local_endpoints: local.len(),
            });
        }
    }
    out.sort_by_key(|a| (a.port, a.family));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(addr: &str, local: bool, ready: bool, serving: bool, terminating: bool) -> PortEndpoint {
        PortEndpoint {
            address: addr.parse().unwrap(),
            local,
            ready,
            serving,
            terminating,
            hints: Hints::default(),
        }
    }

    /// A ready remote endpoint with hints: `zone`/`node` are `None` (no hint of the kind),
    /// `Some(true)` (hinted for this node or zone) or `Some(false)` (hinted elsewhere).
    fn hinted(addr: &str, zone: Option<bool>, node: Option<bool>) -> PortEndpoint {
        PortEndpoint {
            hints: Hints { node, zone },
            ..ep(addr, false, true, true, false)
        }
    }

    fn addrs(v: &[SocketAddr]) -> Vec<String> {
        v.iter().map(|a| a.ip().to_string()).collect()
    }

    #[test]
    fn topology_hints_narrow_the_cluster_endpoints_as_kube_proxy_does() {
        let (y, n) = (Some(true), Some(false));
        let not_ready = PortEndpoint {
            ready: false,
            ..hinted("10.0.0.9:80", None, None)
        };
        // (case, endpoints, gate on, expected cluster endpoints)
        let table: Vec<(&str, Vec<PortEndpoint>, bool, Vec<&str>)> = vec![
            (
                "no hints: everything",
                vec![
                    hinted("10.0.0.1:80", None, None),
                    hinted("10.0.0.2:80", None, None),
                ],
                true,
                vec!["10.0.0.1", "10.0.0.2"],
            ),
            (
                "zone hints with this zone: only those",
                vec![
                    hinted("10.0.0.1:80", y, None),
                    hinted("10.0.0.2:80", n, None),
                ],
                true,
                vec!["10.0.0.1"],
            ),
            (
                "one ready endpoint without a zone hint: hints ignored",
                vec![
                    hinted("10.0.0.1:80", y, None),
                    hinted("10.0.0.2:80", None, None),
                ],
                true,
                vec!["10.0.0.1", "10.0.0.2"],
            ),
            (
                "not-ready endpoints need no hints",
                vec![
                    hinted("10.0.0.1:80", y, None),
                    hinted("10.0.0.2:80", n, None),
                    not_ready,
                ],
                true,
                vec!["10.0.0.1"],
            ),
            (
                "no hint for this zone (or the node has no zone label): everything",
                vec![
                    hinted("10.0.0.1:80", n, None),
                    hinted("10.0.0.2:80", n, None),
                ],
                true,
                vec!["10.0.0.1", "10.0.0.2"],
            ),
            (
                "node hints for this node: PreferSameNode",
                vec![hinted("10.0.0.1:80", y, y), hinted("10.0.0.2:80", y, n)],
                true,
                vec!["10.0.0.1"],
            ),
            (
                "node hints with the gate off: zone hints decide",
                vec![hinted("10.0.0.1:80", y, y), hinted("10.0.0.2:80", y, n)],
                false,
                vec!["10.0.0.1", "10.0.0.2"],
            ),
            (
                "node hints elsewhere: falls back to zone hints",
                vec![hinted("10.0.0.1:80", y, n), hinted("10.0.0.2:80", n, n)],
                true,
                vec!["10.0.0.1"],
            ),
        ];
        for (case, eps, gate, want) in table {
            assert_eq!(addrs(&choose(&eps, gate).cluster), want, "{case}");
        }
    }

    #[test]
    fn hints_never_narrow_the_local_set_nor_the_terminating_fallback() {
        let (y, n) = (Some(true), Some(false));
        let local_elsewhere = PortEndpoint {
            local: true,
            ..hinted("10.0.0.2:80", n, None)
        };
        let c = choose(&[hinted("10.0.0.1:80", y, None), local_elsewhere], true);
        assert_eq!(addrs(&c.cluster), ["10.0.0.1"]);
        assert_eq!(addrs(&c.local), ["10.0.0.2"]);
        // Nothing ready: serving terminating endpoints, whatever their hints.
        let term = PortEndpoint {
            ready: false,
            terminating: true,
            ..hinted("10.0.0.3:80", n, None)
        };
        assert_eq!(addrs(&choose(&[term], true).cluster), ["10.0.0.3"]);
    }

    #[test]
    fn ready_endpoints_win_over_terminating_ones() {
        let eps = [
            ep("10.0.0.1:80", false, true, true, false),
            ep("10.0.0.2:80", true, false, true, true),
        ];
        let c = choose(&eps, true);
        assert_eq!(c.cluster, vec!["10.0.0.1:80".parse().unwrap()]);
        // Locally nothing is ready: the serving terminating one is used.
        assert_eq!(c.local, vec!["10.0.0.2:80".parse().unwrap()]);
        assert_eq!(c.all_local, vec!["10.0.0.2:80".parse().unwrap()]);
    }

    #[test]
    fn terminating_but_not_serving_endpoints_get_nothing() {
        let eps = [ep("10.0.0.1:80", false, false, false, true)];
        assert_eq!(choose(&eps, true), Chosen::default());
    }
}
