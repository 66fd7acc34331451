//! Small builders for tests: `svc("web").cluster_ip("10.96.0.10").tcp(80)`.

use std::net::IpAddr;
use std::time::Duration;

use crate::model::desired::{Host, LocalAddress};
use crate::model::snapshot::cluster::*;
use crate::model::snapshot::config::ProxyConfig;

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[derive(Clone)]
pub struct Svc(pub Service);

pub fn svc(name: &str) -> Svc {
    Svc(Service {
        id: ServiceRef::new("default", name),
        kind: ServiceType::ClusterIp,
        cluster_ips: vec![],
        ports: vec![],
        external_ips: vec![],
        load_balancer_ips: vec![],
        session_affinity: None,
        external_traffic_policy: TrafficPolicy::Cluster,
        internal_traffic_policy: TrafficPolicy::Cluster,
        health_check_node_port: None,
        load_balancer_source_ranges: vec![],
        scheduler: None,
    })
}

impl Svc {
    pub fn cluster_ip(mut self, s: &str) -> Self {
        self.0.cluster_ips.push(ip(s));
        self
    }
    pub fn port(mut self, name: &str, protocol: Protocol, port: u16) -> Self {
        self.0.ports.push(ServicePort {
            name: name.into(),
            protocol,
            port,
            node_port: None,
        });
        self
    }
    pub fn tcp(self, port: u16) -> Self {
        self.port("", Protocol::Tcp, port)
    }
    pub fn node_port(mut self, node_port: u16) -> Self {
        if self.0.kind == ServiceType::ClusterIp {
            self.0.kind = ServiceType::NodePort;
        }
        self.0.ports.last_mut().expect("a port first").node_port = Some(node_port);
        self
    }
    pub fn load_balancer(mut self, ingress: &str) -> Self {
        self.0.kind = ServiceType::LoadBalancer;
        self.0.load_balancer_ips.push(ip(ingress));
        self
    }
    pub fn external_ip(mut self, s: &str) -> Self {
        self.0.external_ips.push(ip(s));
        self
    }
    pub fn affinity(mut self, secs: u64) -> Self {
        self.0.session_affinity = Some(Duration::from_secs(secs));
        self
    }
    pub fn etp_local(mut self) -> Self {
        self.0.external_traffic_policy = TrafficPolicy::Local;
        self
    }
    pub fn kind(mut self, kind: ServiceType) -> Self {
        self.0.kind = kind;
        self
    }
}

#[derive(Clone)]
pub struct Eps(pub EndpointSlice);

/// A slice of Service `name` with one port.
pub fn eps(name: &str, port_name: &str, protocol: Protocol, port: u16) -> Eps {
    Eps(EndpointSlice {
        name: format!("{name}-{port_name}-abc").into(),
        service: ServiceRef::new("default", name),
        family: Family::V4,
        ports: vec![EndpointPort {
            name: port_name.into(),
            protocol,
            port,
        }],
        endpoints: vec![],
        trigger_time: None,
    })
}

impl Eps {
    pub fn ready(self, addr: &str, node: &str) -> Self {
        self.endpoint(addr, node, true, true, false)
    }
    pub fn endpoint(
        mut self,
        addr: &str,
        node: &str,
        ready: bool,
        serving: bool,
        terminating: bool,
    ) -> Self {
        let address = ip(addr);
        if address.is_ipv6() {
            self.0.family = Family::V6;
        }
        self.0.endpoints.push(Endpoint {
            address,
            ready,
            serving,
            terminating,
            node_name: Some(crate::model::snapshot::cluster::intern(node)),
            zone: None,
            hints: None,
        });
        self
    }
}

impl Eps {
    /// A ready endpoint on `node` with topology hints.
    pub fn hinted(mut self, addr: &str, node: &str, zones: &[&str], nodes: &[&str]) -> Self {
        self = self.ready(addr, node);
        let ep = self.0.endpoints.last_mut().expect("just added");
        ep.hints = Some(Box::new(crate::model::snapshot::cluster::EndpointHints {
            zones: zones.iter().map(|z| z.to_string()).collect(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
        }));
        self
    }
}

/// The agent's Node, `node-a`, in `zone` (unlabelled when `None`).
pub fn node_in(zone: Option<&str>) -> Node {
    Node {
        name: "node-a".into(),
        labels: zone
            .map(|z| ("topology.kubernetes.io/zone".to_string(), z.to_string()))
            .into_iter()
            .collect(),
        ..Node::default()
    }
}

pub fn cluster(services: Vec<Svc>, slices: Vec<Eps>) -> Cluster {
    let mut c = Cluster::default();
    for s in services {
        c.services.insert(s.0.id.clone(), std::sync::Arc::new(s.0));
    }
    for e in slices {
        c.slices.insert(e.0.id(), std::sync::Arc::new(e.0));
    }
    c
}

pub fn config() -> ProxyConfig {
    ProxyConfig {
        node_name: "node-a".into(),
        ..ProxyConfig::default()
    }
}

pub fn host() -> Host {
    Host {
        addresses: vec![
            LocalAddress {
                interface: "lo".into(),
                address: ip("127.0.0.1"),
            },
            LocalAddress {
                interface: "eth0".into(),
                address: ip("192.168.1.10"),
            },
            LocalAddress {
                interface: "eth0".into(),
                address: ip("fe80::1"),
            },
        ],
    }
}

/// The API server's Service, `default/kubernetes` on 10.96.0.1:443, and its slice: one
/// endpoint, 192.168.1.10:6443 on node `node`.
pub fn kubernetes(node: &str) -> (Svc, Eps) {
    (
        svc("kubernetes")
            .cluster_ip("10.96.0.1")
            .port("https", Protocol::Tcp, 443),
        eps("kubernetes", "https", Protocol::Tcp, 6443).ready("192.168.1.10", node),
    )
}

/// The virtual servers a plan adds, as `address:port`, in order.
pub fn added_vips(p: &crate::model::plan::Plan) -> Vec<String> {
    p.ops
        .iter()
        .filter_map(|op| match op {
            crate::model::plan::Op::AddService { key, .. } => {
                Some(format!("{}:{}", key.address, key.port))
            }
            _ => None,
        })
        .collect()
}
