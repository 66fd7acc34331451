//! Which endpoints of a Service port receive traffic on this node, as kube-proxy's
//! `CategorizeEndpoints` decides: ready endpoints, or the serving terminating ones when none
//! is ready, separately for the cluster-wide and the node-local sets.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use super::cluster::{Cluster, Family, Service, ServicePort};

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

/// Every endpoint of `port` in the family's slices of `service`, one per address.
pub fn port_endpoints(
    cluster: &Cluster,
    service: &Service,
    port: &ServicePort,
    family: Family,
    node: &str,
) -> Vec<PortEndpoint> {
    let mut by_addr: BTreeMap<IpAddr, PortEndpoint> = BTreeMap::new();
    for slice in cluster
        .slices_of(&service.id)
        .filter(|s| s.family == family)
    {
        let Some(ep_port) = slice
            .ports
            .iter()
            .find(|p| p.name == port.name && p.protocol == port.protocol)
        else {
            continue;
        };
        for ep in &slice.endpoints {
            let candidate = PortEndpoint {
                address: SocketAddr::new(ep.address, ep_port.port),
                local: ep.node_name.as_deref() == Some(node),
                ready: ep.ready,
                serving: ep.serving,
                terminating: ep.terminating,
            };
            // The same address in two slices (during a slice split): keep the readier one.
            by_addr
                .entry(ep.address)
                .and_modify(|e| {
                    if candidate.ready && !e.ready {
                        *e = candidate;
                    }
                })
                .or_insert(candidate);
        }
    }
    by_addr.into_values().collect()
}

/// Chooses among `endpoints` as kube-proxy does.
pub fn choose(endpoints: &[PortEndpoint]) -> Chosen {
    let pick = |local_only: bool| -> Vec<SocketAddr> {
        let pool: Vec<&PortEndpoint> = endpoints
            .iter()
            .filter(|e| !local_only || e.local)
            .collect();
        let ready: Vec<SocketAddr> = pool.iter().filter(|e| e.ready).map(|e| e.address).collect();
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
        }
    }

    #[test]
    fn ready_endpoints_win_over_terminating_ones() {
        let eps = [
            ep("10.0.0.1:80", false, true, true, false),
            ep("10.0.0.2:80", true, false, true, true),
        ];
        let c = choose(&eps);
        assert_eq!(c.cluster, vec!["10.0.0.1:80".parse().unwrap()]);
        // Locally nothing is ready: the serving terminating one is used.
        assert_eq!(c.local, vec!["10.0.0.2:80".parse().unwrap()]);
        assert_eq!(c.all_local, vec!["10.0.0.2:80".parse().unwrap()]);
    }

    #[test]
    fn terminating_but_not_serving_endpoints_get_nothing() {
        let eps = [ep("10.0.0.1:80", false, false, false, true)];
        assert_eq!(choose(&eps), Chosen::default());
    }
}
