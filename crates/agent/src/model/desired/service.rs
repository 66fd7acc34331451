//! One Service in the desired state: per family of its cluster IPs and per port, each way the
//! port is exposed (cluster IP, external IPs, load-balancer IPs, node port) adds its virtual
//! servers, VIPs and set entries.
//!
//! The order of the calls is the order Services claim virtual servers in (the first keeps a
//! contested one), so it stays: cluster IP, external IPs, load balancer, node port.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::builder::Builder;
use crate::model::desired::iptables::OutFilter;
use crate::model::kernel::sets;
use crate::model::kernel::{SetEntry, VsKey};
use crate::model::snapshot::cluster::{
    Cluster, EndpointSlice, Family, Protocol, Service, ServicePort, ServiceType, TrafficPolicy,
};
use crate::model::snapshot::endpoints::{Chosen, Topology, ZONE_LABEL, choose, port_endpoints};

/// A Service in one family: its addresses of that family and its traffic policies.
struct InFamily<'a> {
    service: &'a Arc<Service>,
    family: Family,
    cluster_ip: IpAddr,
    external_ips: Vec<IpAddr>,
    lb_ips: Vec<IpAddr>,
    etp_local: bool,
    itp_local: bool,
    /// The node addresses that serve node ports (only NodePort and LoadBalancer Services have
    /// node ports to serve).
    node_ips: BTreeSet<IpAddr>,
}

/// One port of a Service in one family, with the real servers each kind of traffic goes to.
struct Exposed<'a> {
    service: &'a Arc<Service>,
    family: Family,
    protocol: Protocol,
    port: u16,
    /// For traffic from inside the cluster (the cluster IP).
    internal: &'a [SocketAddr],
    /// For traffic from outside (external, load-balancer IPs and node ports).
    external: &'a [SocketAddr],
    etp_local: bool,
}

impl Exposed<'_> {
    /// The virtual server of this port at `address`.
    fn key(&self, address: IpAddr) -> VsKey {
        VsKey {
            address,
            protocol: self.protocol,
            port: self.port,
        }
    }
}

impl Builder<'_> {
    /// Adds everything `service` asks for; `slices` are its EndpointSlices.
    pub(super) fn service(
        &mut self,
        cluster: &Cluster,
        slices: &[&EndpointSlice],
        service: &Arc<Service>,
    ) {
        if service.kind == ServiceType::ExternalName {
            return;
        }
        let topology = Topology {
            node: &self.config.node_name,
            zone: cluster
                .node
                .as_ref()
                .and_then(|n| n.labels.get(ZONE_LABEL))
                .map(String::as_str)
                .filter(|z| !z.is_empty()),
            node_hints: self.config.prefer_same_node,
        };
        for &cluster_ip in &service.cluster_ips {
            let family = Family::of(&cluster_ip);
            if self.config.families.contains(&family) {
                let s = self.in_family(service, cluster_ip);
                self.service_in_family(&s, slices, &topology);
            }
        }
    }

    /// What the Service's exposures in the family of `cluster_ip` share.
    fn in_family<'s>(&self, service: &'s Arc<Service>, cluster_ip: IpAddr) -> InFamily<'s> {
        let family = Family::of(&cluster_ip);
        let of_family = |ips: &[IpAddr]| -> Vec<IpAddr> {
            ips.iter()
                .copied()
                .filter(|ip| Family::of(ip) == family)
                .collect()
        };
        let node_ips = match service.kind {
            ServiceType::NodePort | ServiceType::LoadBalancer => {
                self.host.node_port_addresses(family, self.config)
            }
            _ => BTreeSet::new(),
        };
        InFamily {
            service,
            family,
            cluster_ip,
            external_ips: of_family(&service.external_ips),
            lb_ips: of_family(&service.load_balancer_ips),
            etp_local: service.external_traffic_policy == TrafficPolicy::Local,
            itp_local: service.internal_traffic_policy == TrafficPolicy::Local,
            node_ips,
        }
    }

    /// Every port of the Service in one family, then its health-check node port.
    fn service_in_family(&mut self, s: &InFamily, slices: &[&EndpointSlice], topology: &Topology) {
        for port in &s.service.ports {
            let eps = port_endpoints(slices, port, s.family, topology);
            let chosen = choose(&eps, topology.node_hints);
            if !chosen.cluster.is_empty() && chosen.local.is_empty() {
                self.count_no_local(s.family, s.itp_local, s.etp_local);
            }
            self.port(s, port, &chosen);
        }
        if let Some(hc) = s.service.health_check_node_port
            && s.etp_local
            && s.service.kind == ServiceType::LoadBalancer
            // As the node ports: nothing when no node address serves them.
            && !s.node_ips.is_empty()
        {
            self.add_entry(&sets::HEALTH_CHECK_NODE_PORT, s.family, SetEntry::Port(hc));
        }
    }

    /// One port, through each way it is exposed.
    fn port(&mut self, s: &InFamily, port: &ServicePort, chosen: &Chosen) {
        // internalTrafficPolicy=Local uses local endpoints; when there are none, an
        // externally reachable Service falls back to the cluster-wide ones, which
        // kube-proxy computes for it (its UsesClusterEndpoints), and any other gets none.
        let externally_reachable =
            port.node_port.is_some() || !s.external_ips.is_empty() || !s.lb_ips.is_empty();
        let internal = if s.itp_local && (!chosen.local.is_empty() || !externally_reachable) {
            &chosen.local
        } else {
            &chosen.cluster
        };
        // externalTrafficPolicy=Local uses local endpoints, and falls back to all of them
        // when the node has none so that local pods still reach the Service (kube-proxy
        // PR #97081).
        let external = if s.etp_local && !chosen.local.is_empty() {
            &chosen.local
        } else {
            &chosen.cluster
        };
        let at = Exposed {
            service: s.service,
            family: s.family,
            protocol: port.protocol,
            port: port.port,
            internal,
            external,
            etp_local: s.etp_local,
        };
        self.cluster_ip(&at, s.cluster_ip, &chosen.all_local);
        self.external_ips(&at, &s.external_ips);
        if s.service.kind == ServiceType::LoadBalancer {
            self.load_balancer(&at, &s.lb_ips);
        }
        if let (Some(node_port), ServiceType::NodePort | ServiceType::LoadBalancer) =
            (port.node_port, s.service.kind)
        {
            self.node_port(&at, node_port, &s.node_ips);
        }
    }

    /// The cluster IP, and the hairpin entries of the port's local endpoints.
    fn cluster_ip(&mut self, at: &Exposed, cluster_ip: IpAddr, all_local: &[SocketAddr]) {
        self.add_vs(at.service, at.key(cluster_ip), at.internal);
        self.bind(cluster_ip);
        self.add_entry(
            &sets::CLUSTER_IP,
            at.family,
            SetEntry::IpPort(cluster_ip, at.protocol, at.port),
        );
        for ep in all_local {
            self.add_entry(
                &sets::LOOP_BACK,
                at.family,
                SetEntry::IpPortIp(ep.ip(), at.protocol, ep.port(), ep.ip()),
            );
        }
    }

    /// The external IPs.
    fn external_ips(&mut self, at: &Exposed, ips: &[IpAddr]) {
        let set = if at.etp_local {
            &sets::EXTERNAL_IP_LOCAL
        } else {
            &sets::EXTERNAL_IP
        };
        for &ip in ips {
            self.add_vs(at.service, at.key(ip), at.external);
            self.bind(ip);
            self.add_entry(set, at.family, SetEntry::IpPort(ip, at.protocol, at.port));
        }
    }

    /// The load-balancer ingress IPs, each with its source ranges.
    fn load_balancer(&mut self, at: &Exposed, ips: &[IpAddr]) {
        for &ip in ips {
            self.add_vs(at.service, at.key(ip), at.external);
            self.bind(ip);
            let entry = SetEntry::IpPort(ip, at.protocol, at.port);
            self.add_entry(&sets::LOAD_BALANCER, at.family, entry);
            if at.etp_local {
                self.add_entry(&sets::LOAD_BALANCER_LOCAL, at.family, entry);
            }
            self.source_ranges(at, ip, entry);
        }
    }

    /// The firewall of the load-balancer IP `ip` (whose `LOAD_BALANCER` entry is `entry`),
    /// when the Service has source ranges of its family.
    fn source_ranges(&mut self, at: &Exposed, ip: IpAddr, entry: SetEntry) {
        let ranges: Vec<_> = at
            .service
            .load_balancer_source_ranges
            .iter()
            .filter(|r| Family::of(&r.addr()) == at.family)
            .collect();
        // A zero prefix allows everyone: no firewall at all (and a hash set cannot hold a /0).
        if ranges.is_empty() || ranges.iter().any(|r| r.prefix_len() == 0) {
            return;
        }
        self.add_entry(&sets::LOAD_BALANCER_FW, at.family, entry);
        for r in &ranges {
            self.add_entry(
                &sets::LOAD_BALANCER_SOURCE_CIDR,
                at.family,
                SetEntry::IpPortNet(ip, at.protocol, at.port, **r),
            );
        }
        // The node's own traffic to the LB IP has that IP as its source: let it in when a
        // range holds the node's IP, else drop it on the way out (kube-proxy #119656). Only
        // the node's IP of the family counts, as in kube-proxy's every mode, not its other
        // addresses.
        let node_allowed = self
            .config
            .node_ips
            .iter()
            .filter(|a| Family::of(a) == at.family)
            .any(|a| ranges.iter().any(|r| r.contains(a)));
        if node_allowed {
            self.add_entry(
                &sets::LOAD_BALANCER_SOURCE_IP,
                at.family,
                SetEntry::IpPortIp(ip, at.protocol, at.port, ip),
            );
        } else {
            self.add_out_filter(OutFilter {
                address: ip,
                protocol: at.protocol,
                port: at.port,
            });
        }
    }

    /// The node port on each of `node_ips`.
    fn node_port(&mut self, at: &Exposed, node_port: u16, node_ips: &BTreeSet<IpAddr>) {
        let key = |address| VsKey {
            address,
            protocol: at.protocol,
            port: node_port,
        };
        for ip in node_ips {
            self.add_vs(at.service, key(*ip), at.external);
        }
        let family = at.family;
        match at.protocol {
            // No node address to serve node ports on (--nodeport-addresses matches none):
            // kube-proxy skips the node port entirely, set entries too.
            _ if node_ips.is_empty() => {}
            Protocol::Tcp | Protocol::Udp => {
                let (all, local) = if at.protocol == Protocol::Tcp {
                    (&sets::NODE_PORT_TCP, &sets::NODE_PORT_LOCAL_TCP)
                } else {
                    (&sets::NODE_PORT_UDP, &sets::NODE_PORT_LOCAL_UDP)
                };
                self.add_entry(all, family, SetEntry::Port(node_port));
                if at.etp_local {
                    self.add_entry(local, family, SetEntry::Port(node_port));
                }
            }
            Protocol::Sctp => {
                for ip in node_ips {
                    let e = SetEntry::IpPort(*ip, at.protocol, node_port);
                    self.add_entry(&sets::NODE_PORT_SCTP, family, e);
                    if at.etp_local {
                        self.add_entry(&sets::NODE_PORT_LOCAL_SCTP, family, e);
                    }
                }
            }
        }
    }
}
