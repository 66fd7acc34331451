//! The desired kernel state: a pure function of the cluster, the configuration and the host's
//! own addresses.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use super::cluster::{
    Cluster, EndpointSlice, Family, Node, Protocol, Service, ServiceType, TrafficPolicy,
};
use super::config::{ConnReuse, LocalDetector, ProxyConfig};
use super::endpoints::{Topology, ZONE_LABEL, choose, port_endpoints};
use super::iptables::{self, OutFilter};
use super::kernel::{
    KernelState, LINK_NAME, SCHED_FLAG_FALLBACK, SCHED_FLAG_PORT, Set, SetEntry, VirtualServer,
    VsKey,
};
use super::sets::{self, SetDef, set_name};
use ipnet::IpNet;

/// Where each family's health-check node ports listen: `None` (or no entry) for every
/// address of the family, else these addresses (none at all when no node address matches
/// `nodePortAddresses`, as kube-proxy).
pub type HealthCheckAddresses = BTreeMap<Family, Option<BTreeSet<IpAddr>>>;

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
    /// Every address on every interface.
    pub addresses: Vec<LocalAddress>,
}

impl Host {
    /// True when `ip` is configured on an interface other than `kube-ipvs0`.
    pub fn is_local(&self, ip: &IpAddr) -> bool {
        self.addresses
            .iter()
            .any(|a| a.address == *ip && a.interface != LINK_NAME)
    }

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

/// The desired state, with notes on what it could not include.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    /// The kernel state to reach.
    pub state: KernelState,
    /// Virtual servers by the Service they serve (the cluster's own object, shared: a copy
    /// of its namespace and name per virtual server was a tenth of the state).
    pub owners: BTreeMap<VsKey, std::sync::Arc<Service>>,
    /// Conflicts found (two Services wanting one virtual server); the first one wins.
    pub conflicts: Vec<String>,
    /// Per family, Service ports whose Local traffic policy found no endpoint on this node
    /// while the cluster has some: `(internal, external)` (kube-proxy's
    /// `sync_proxy_rules_no_local_endpoints_total`).
    pub no_local_endpoints: BTreeMap<Family, (u64, u64)>,
}

/// Computes the kernel state for `cluster`.
pub fn desired(cluster: &Cluster, config: &ProxyConfig, host: &Host) -> Desired {
    build(cluster, config, host, false).0
}

/// What one Service put in the desired state, by key only (the content lives in the composed
/// state): its claims on virtual servers, its set entries, its VIPs, its out filters and its
/// Local-policy ports without local endpoints. [`super::incremental`] takes a Service out of
/// the state by its footprint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Footprint {
    /// Virtual servers it asked for, won or not.
    pub vs: Vec<VsKey>,
    /// Set entries, by set (definition and family).
    pub entries: Vec<(&'static SetDef, Family, SetEntry)>,
    /// Addresses it bound on `kube-ipvs0`.
    pub addresses: Vec<IpAddr>,
    /// Load-balancer out filters.
    pub out_filters: Vec<OutFilter>,
    /// Per family, `(internal, external)` ports without local endpoints.
    pub no_local: BTreeMap<Family, (u64, u64)>,
}

impl Footprint {
    fn dedup(&mut self) {
        self.vs.sort_unstable();
        self.vs.dedup();
        self.entries
            .sort_unstable_by(|a, b| (a.0.name, a.1, a.2).cmp(&(b.0.name, b.1, b.2)));
        self.entries
            .dedup_by(|a, b| (a.0.name, a.1, a.2) == (b.0.name, b.1, b.2));
        self.addresses.sort_unstable();
        self.addresses.dedup();
        self.out_filters.sort_unstable();
        self.out_filters.dedup();
    }
}

/// The desired state, and with `record` what the Services' [`Footprint`]s share (each
/// footprint is counted, then dropped: an update recomputes the old one from the snapshot
/// the state is for) and the virtual servers two Services want.
pub(crate) fn build(
    cluster: &Cluster,
    config: &ProxyConfig,
    host: &Host,
    record: bool,
) -> (Desired, Footprints) {
    let config = &resolve_node_settings(cluster, config);
    let mut out = Builder::new(config, host);
    let slices = cluster.slices_by_service();
    let mut footprints = Footprints::default();
    for service in cluster.services.values() {
        if record {
            out.record = Some(Footprint::default());
        }
        out.service(cluster, slices.of(&service.id), service);
        if let Some(mut f) = out.record.take() {
            f.dedup();
            footprints.count(&f);
        }
    }
    footprints.contested = std::mem::take(&mut out.contested);
    (out.finish(), footprints)
}

/// How many Services put in each set entry, VIP and out filter, and the virtual servers more
/// than one Service wants.
#[derive(Debug, Clone, Default)]
pub(crate) struct Footprints {
    /// Set entries, keyed by set name, family and entry.
    pub entries: std::collections::HashMap<(&'static str, Family, SetEntry), u32>,
    /// VIPs on `kube-ipvs0`.
    pub addresses: std::collections::HashMap<IpAddr, u32>,
    /// Load-balancer out filters.
    pub out_filters: BTreeMap<OutFilter, u32>,
    /// Virtual servers wanted by two Services or more (a conflict: the first keeps it).
    pub contested: BTreeSet<VsKey>,
}

impl Footprints {
    fn count(&mut self, f: &Footprint) {
        for (def, family, e) in &f.entries {
            *self.entries.entry((def.name, *family, *e)).or_default() += 1;
        }
        for a in &f.addresses {
            *self.addresses.entry(*a).or_default() += 1;
        }
        for o in &f.out_filters {
            *self.out_filters.entry(o.clone()).or_default() += 1;
        }
    }
}

/// Computes the footprints of `services` alone, against the empty state: what each would put
/// in, whatever the others hold. `slices` are those of the Services.
pub(crate) fn footprints_of(
    cluster: &Cluster,
    config: &ProxyConfig,
    host: &Host,
    services: &[(&std::sync::Arc<Service>, Vec<&EndpointSlice>)],
) -> (Desired, Vec<Footprint>) {
    let config = &resolve_node_settings(cluster, config);
    let mut out = Builder::new(config, host);
    let mut prints = Vec::new();
    for (service, slices) in services {
        out.record = Some(Footprint::default());
        out.service(cluster, slices, service);
        let mut f = out.record.take().unwrap_or_default();
        f.dedup();
        prints.push(f);
    }
    (out.d, prints)
}

/// The rules of `family` for the sets of `state` and the out filters.
pub(crate) fn family_rules(
    family: Family,
    config: &ProxyConfig,
    state: &KernelState,
    out_filters: &BTreeSet<OutFilter>,
) -> super::kernel::Rules {
    iptables::rules(
        family,
        config,
        &state.sets,
        &out_filters
            .iter()
            .filter(|f| Family::of(&f.address) == family)
            .cloned()
            .collect::<Vec<_>>(),
    )
}

/// Fills the settings that come from the Node object: `--nodeport-addresses=primary` (the
/// Node's first address of each family, as a host prefix) and `--detect-local-mode=NodeCIDR`
/// (the Node's pod CIDRs). Without a Node they stay empty: NodePorts are then served nowhere
/// rather than everywhere, and no pod traffic is told apart.
pub(crate) fn resolve_node_settings(cluster: &Cluster, config: &ProxyConfig) -> ProxyConfig {
    let mut c = config.clone();
    let node = cluster.node.as_ref();
    if config.nodeport_primary {
        c.nodeport_addresses = [Family::V4, Family::V6]
            .into_iter()
            .filter_map(|f| node.and_then(|n| n.addresses.iter().find(|a| Family::of(a) == f)))
            .map(|ip| IpNet::from(*ip))
            .collect();
        // A family without a node IP gets no CIDR and so serves on all its addresses, as
        // kube-proxy's "primary" skips it; until the Node is known, an impossible prefix per
        // family keeps node ports off every address.
        if node.is_none_or(|n| n.addresses.is_empty()) {
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

/// The sysctls IPVS mode needs.
pub fn sysctls(config: &ProxyConfig) -> BTreeMap<String, String> {
    let mut s: BTreeMap<String, String> = [
        // Without it IPVS detaches its packets from conntrack and MASQUERADE never applies.
        ("net/ipv4/vs/conntrack", "1"),
        ("net/ipv4/vs/expire_nodest_conn", "1"),
        ("net/ipv4/vs/expire_quiescent_template", "1"),
        ("net/ipv4/ip_forward", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    // IPv6 forwarding is left as the node has it, as kube-proxy leaves it (the differential
    // corpus showed kube-proxy never writes it; the CNI or the node's setup owns it).
    if ConnReuse::for_kernel(config.kernel_version) == ConnReuse::SetZero {
        s.insert("net/ipv4/vs/conn_reuse_mode".into(), "0".into());
    }
    if config.strict_arp {
        s.insert("net/ipv4/conf/all/arp_ignore".into(), "1".into());
        s.insert("net/ipv4/conf/all/arp_announce".into(), "2".into());
    }
    s
}

struct Builder<'a> {
    config: &'a ProxyConfig,
    host: &'a Host,
    d: Desired,
    /// Load-balancer entries whose source ranges leave the node out.
    out_filters: BTreeSet<OutFilter>,
    /// The footprint of the Service being built, when asked for.
    record: Option<Footprint>,
    /// Virtual servers two Services want.
    contested: BTreeSet<VsKey>,
}

impl<'a> Builder<'a> {
    /// A builder whose state has the link and every set of the configured families.
    fn new(config: &'a ProxyConfig, host: &'a Host) -> Self {
        let mut out = Builder {
            config,
            host,
            d: Desired::default(),
            out_filters: BTreeSet::new(),
            record: None,
            contested: BTreeSet::new(),
        };
        out.d.state.link = true;
        for family in &config.families {
            for def in sets::ALL {
                out.d.state.sets.insert(
                    set_name(def, *family),
                    Set {
                        kind: def.kind,
                        family: *family,
                        entries: BTreeSet::new(),
                    },
                );
            }
        }
        out
    }

    /// The state of every Service built so far, with what derives from all of them: the
    /// VIP and ownership sets, the rules, the sysctls.
    fn finish(mut self) -> Desired {
        let config = self.config;
        // Addresses bound on kube-ipvs0, and ownership of every virtual server.
        let addresses: Vec<IpAddr> = self.d.state.addresses.iter().copied().collect();
        for ip in addresses {
            self.add_entry(&sets::IPVS_IPS, Family::of(&ip), SetEntry::Ip(ip));
        }
        let keys: Vec<VsKey> = self.d.state.services.keys().copied().collect();
        for k in keys {
            self.add_entry(
                &sets::OWNED,
                Family::of(&k.address),
                SetEntry::IpPort(k.address, k.protocol, k.port),
            );
        }
        for family in &config.families {
            let rules = family_rules(*family, config, &self.d.state, &self.out_filters);
            self.d.state.rules.insert(*family, rules);
        }
        self.d.state.sysctls = sysctls(config);
        self.d
    }

    fn add_entry(&mut self, def: &'static SetDef, family: Family, entry: SetEntry) {
        if let Some(set) = self.d.state.sets.get_mut(&set_name(def, family)) {
            set.entries.insert(entry);
            if let Some(r) = &mut self.record {
                r.entries.push((def, family, entry));
            }
        }
    }

    fn add_vs(
        &mut self,
        service: &std::sync::Arc<Service>,
        key: VsKey,
        destinations: &[SocketAddr],
    ) {
        if let Some(r) = &mut self.record {
            r.vs.push(key);
        }
        if let Some(owner) = self.d.owners.get(&key) {
            if owner.id != service.id {
                let owner = &owner.id;
                self.d.conflicts.push(format!(
                    "{key} is wanted by {owner} and {}; {owner} keeps it",
                    service.id
                ));
                self.contested.insert(key);
            }
            return;
        }
        // A refused annotation is reported once per sync by the syncer, not per virtual server.
        let (scheduler, _) = super::scheduler::resolve(service, self.config);
        // `mh` hashes the port too (kube-proxy B24). `sh` and `mh` skip weight-0 (draining)
        // real servers only with the fallback flag; without it a client hashed to one gets no
        // real server at all (kube-proxy B23).
        let sched_flags = match scheduler.as_str() {
            "mh" => SCHED_FLAG_PORT | SCHED_FLAG_FALLBACK,
            "sh" => SCHED_FLAG_FALLBACK,
            _ => 0,
        };
        let vs = VirtualServer {
            scheduler,
            sched_flags,
            persistence: service.session_affinity,
            destinations: destinations.iter().map(|d| (*d, 1)).collect(),
            connections: Default::default(),
        };
        self.d.owners.insert(key, service.clone());
        self.d.state.services.insert(key, vs);
    }

    /// Binds `ip` on kube-ipvs0 unless the host already has it elsewhere.
    fn bind(&mut self, ip: IpAddr) {
        if !self.host.is_local(&ip) {
            self.d.state.addresses.insert(ip);
            if let Some(r) = &mut self.record {
                r.addresses.push(ip);
            }
        }
    }

    fn service(
        &mut self,
        cluster: &Cluster,
        slices: &[&EndpointSlice],
        service: &std::sync::Arc<Service>,
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
            if !self.config.families.contains(&family) {
                continue;
            }
            let of_family = |ips: &[IpAddr]| -> Vec<IpAddr> {
                ips.iter()
                    .copied()
                    .filter(|ip| Family::of(ip) == family)
                    .collect()
            };
            let external_ips = of_family(&service.external_ips);
            let lb_ips = of_family(&service.load_balancer_ips);
            let etp_local = service.external_traffic_policy == TrafficPolicy::Local;
            let itp_local = service.internal_traffic_policy == TrafficPolicy::Local;
            // The node addresses that serve node ports, once per Service and family (only
            // NodePort and LoadBalancer Services have node ports to serve).
            let node_ips = match service.kind {
                ServiceType::NodePort | ServiceType::LoadBalancer => {
                    self.host.node_port_addresses(family, self.config)
                }
                _ => BTreeSet::new(),
            };
            for port in &service.ports {
                let eps = port_endpoints(slices, port, family, &topology);
                let chosen = choose(&eps, topology.node_hints);
                if !chosen.cluster.is_empty() && chosen.local.is_empty() {
                    let add = (u64::from(itp_local), u64::from(etp_local));
                    let counts = self.d.no_local_endpoints.entry(family).or_default();
                    counts.0 += add.0;
                    counts.1 += add.1;
                    if let Some(r) = &mut self.record {
                        let c = r.no_local.entry(family).or_default();
                        c.0 += add.0;
                        c.1 += add.1;
                    }
                }
                // internalTrafficPolicy=Local uses local endpoints; when there are none, an
                // externally reachable Service falls back to the cluster-wide ones, which
                // kube-proxy computes for it (its UsesClusterEndpoints), and any other gets none.
                let externally_reachable =
                    port.node_port.is_some() || !external_ips.is_empty() || !lb_ips.is_empty();
                let internal = if itp_local && (!chosen.local.is_empty() || !externally_reachable) {
                    &chosen.local
                } else {
                    &chosen.cluster
                };
                // externalTrafficPolicy=Local uses local endpoints, and falls back to all of them
                // when the node has none so that local pods still reach the Service (kube-proxy
                // PR #97081).
                let external = if etp_local && !chosen.local.is_empty() {
                    &chosen.local
                } else {
                    &chosen.cluster
                };
                let proto = port.protocol;

                // ClusterIP
                let key = VsKey {
                    address: cluster_ip,
                    protocol: proto,
                    port: port.port,
                };
                self.add_vs(service, key, internal);
                self.bind(cluster_ip);
                self.add_entry(
                    &sets::CLUSTER_IP,
                    family,
                    SetEntry::IpPort(cluster_ip, proto, port.port),
                );
                for ep in &chosen.all_local {
                    self.add_entry(
                        &sets::LOOP_BACK,
                        family,
                        SetEntry::IpPortIp(ep.ip(), proto, ep.port(), ep.ip()),
                    );
                }

                // externalIPs
                for &ip in &external_ips {
                    self.add_vs(
                        service,
                        VsKey {
                            address: ip,
                            protocol: proto,
                            port: port.port,
                        },
                        external,
                    );
                    self.bind(ip);
                    let set = if etp_local {
                        &sets::EXTERNAL_IP_LOCAL
                    } else {
                        &sets::EXTERNAL_IP
                    };
                    self.add_entry(set, family, SetEntry::IpPort(ip, proto, port.port));
                }

                // Load-balancer ingress IPs
                if service.kind == ServiceType::LoadBalancer {
                    for &ip in &lb_ips {
                        self.add_vs(
                            service,
                            VsKey {
                                address: ip,
                                protocol: proto,
                                port: port.port,
                            },
                            external,
                        );
                        self.bind(ip);
                        let entry = SetEntry::IpPort(ip, proto, port.port);
                        self.add_entry(&sets::LOAD_BALANCER, family, entry);
                        if etp_local {
                            self.add_entry(&sets::LOAD_BALANCER_LOCAL, family, entry);
                        }
                        let ranges: Vec<_> = service
                            .load_balancer_source_ranges
                            .iter()
                            .filter(|r| Family::of(&r.addr()) == family)
                            .collect();
                        // A zero prefix allows everyone: no firewall at all (and a hash set
                        // cannot hold a /0).
                        if !ranges.is_empty() && !ranges.iter().any(|r| r.prefix_len() == 0) {
                            self.add_entry(&sets::LOAD_BALANCER_FW, family, entry);
                            for r in &ranges {
                                self.add_entry(
                                    &sets::LOAD_BALANCER_SOURCE_CIDR,
                                    family,
                                    SetEntry::IpPortNet(ip, proto, port.port, **r),
                                );
                            }
                            // The node's own traffic to the LB IP has that IP as its source: let
                            // it in when a range holds the node's IP, else drop it on the way
                            // out (kube-proxy #119656). Only the node's IP of the family counts,
                            // as in kube-proxy's every mode, not its other addresses.
                            let node_allowed = self
                                .config
                                .node_ips
                                .iter()
                                .filter(|a| Family::of(a) == family)
                                .any(|a| ranges.iter().any(|r| r.contains(a)));
                            if node_allowed {
                                self.add_entry(
                                    &sets::LOAD_BALANCER_SOURCE_IP,
                                    family,
                                    SetEntry::IpPortIp(ip, proto, port.port, ip),
                                );
                            } else {
                                let filter = OutFilter {
                                    address: ip,
                                    protocol: proto,
                                    port: port.port,
                                };
                                if let Some(r) = &mut self.record {
                                    r.out_filters.push(filter.clone());
                                }
                                self.out_filters.insert(filter);
                            }
                        }
                    }
                }

                // NodePorts
                if let (Some(node_port), ServiceType::NodePort | ServiceType::LoadBalancer) =
                    (port.node_port, service.kind)
                {
                    for ip in &node_ips {
                        self.add_vs(
                            service,
                            VsKey {
                                address: *ip,
                                protocol: proto,
                                port: node_port,
                            },
                            external,
                        );
                    }
                    match proto {
                        // No node address to serve node ports on (--nodeport-addresses matches
                        // none): kube-proxy skips the node port entirely, set entries too.
                        _ if node_ips.is_empty() => {}
                        Protocol::Tcp | Protocol::Udp => {
                            let (all, local) = if proto == Protocol::Tcp {
                                (&sets::NODE_PORT_TCP, &sets::NODE_PORT_LOCAL_TCP)
                            } else {
                                (&sets::NODE_PORT_UDP, &sets::NODE_PORT_LOCAL_UDP)
                            };
                            self.add_entry(all, family, SetEntry::Port(node_port));
                            if etp_local {
                                self.add_entry(local, family, SetEntry::Port(node_port));
                            }
                        }
                        Protocol::Sctp => {
                            for ip in &node_ips {
                                let e = SetEntry::IpPort(*ip, proto, node_port);
                                self.add_entry(&sets::NODE_PORT_SCTP, family, e);
                                if etp_local {
                                    self.add_entry(&sets::NODE_PORT_LOCAL_SCTP, family, e);
                                }
                            }
                        }
                    }
                }
            }
            if let Some(hc) = service.health_check_node_port
                && etp_local
                && service.kind == ServiceType::LoadBalancer
                // As the node ports above: nothing when no node address serves them.
                && !node_ips.is_empty()
            {
                self.add_entry(&sets::HEALTH_CHECK_NODE_PORT, family, SetEntry::Port(hc));
            }
        }
    }
}
