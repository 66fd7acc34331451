//! Long random histories against the real kernel: the agent runs as a daemon on a manifest
//! file that a seeded random history replaces step by step, and after each step its kernel
//! state must be what a fresh `--once` agent builds from the same manifests in an empty
//! network namespace set up the same way ([`Node::new`], the same flags): `ipvsadm -Sn`, the
//! KUBE-* sets of `ipset save`, the KUBE-* chains and rules of `iptables-save` and the
//! addresses of `kube-ipvs0` ([`State`]). The daemon's full pass is an hour away
//! (`--ipvs-sync-period 1h`), so a state its changes left wrong stays wrong and is seen.
//!
//! Each step makes one to three of the changes a cluster makes ([`World::change`]): Services
//! made, deleted (their slices staying) and made again, retyped, their ports renamed,
//! renumbered, added and removed, session affinity and both traffic policies flipped,
//! external IPs, load-balancer ingress and source ranges added and removed, taken by another
//! proxy; EndpointSlices made, deleted and relabelled to another Service (also to one that is
//! absent, or never made), their ports made to match their Service's or not, their endpoints
//! added, removed, moved between this node and others, their conditions and zone hints
//! flipped; the Node's zone, address and pod CIDR changed. Pools are small, so Services share
//! external and load-balancer IPs and endpoints and now and then contend for a virtual
//! server. Half the histories (by seed) run with `--nodeport-addresses primary
//! --detect-local-mode NodeCIDR`, where the Node's address and pod CIDR reach the kernel.
//!
//! The lab test command runs one short history (14 steps, seed 1). The long test (four
//! histories of 50 steps, seeds from the clock) is `#[ignore]`d:
//!
//! ```sh
//! cargo run -p lab -- test --release -p kube-proxy-ipvs-agent -- history --ignored --nocapture
//! ```
//!
//! `HISTORY_SEED=N` (passed into the VM by `lab test`) runs history `N` alone in either test;
//! a failure names its seed, its step, that step's changes and a diff of what differs.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lab::guest::{sh, try_sh};

use crate::node::{Node, stable_ipvs_dump, try_http_get};

/// How long the daemon has to reach a step's state: far more than a sync of a few Services
/// takes under emulation, and with the full pass an hour away a wrong state never heals.
const SYNC_TIMEOUT: Duration = Duration::from_secs(20);

/// How long after a write that changed nothing the agent models (no sync follows it) the
/// states must have been equal: the manifests are polled every 500 ms.
const UNSYNCED_GRACE: Duration = Duration::from_secs(3);

/// A small deterministic generator (splitmix64): a history is replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Services `s0`..`s6`; slices may also name `s7`, which is never made.
const SERVICES: usize = 7;
/// EndpointSlices `e0`..`e7`.
const SLICES: usize = 8;
/// Endpoint addresses 10.244.0.10 upwards.
const ADDRESSES: usize = 6;
/// External IPs 198.51.100.1 upwards and ingress IPs 203.0.113.1 upwards.
const VIPS: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ClusterIp,
    NodePort,
    LoadBalancer,
    /// `clusterIP: None`: nothing for kube-proxy.
    Headless,
    /// Nothing for kube-proxy either.
    ExternalName,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Tcp,
    Udp,
    Sctp,
}

impl Proto {
    fn random(rng: &mut Rng) -> Proto {
        match rng.below(20) {
            0..=13 => Proto::Tcp,
            14..=18 => Proto::Udp,
            _ => Proto::Sctp,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
            Proto::Sctp => "SCTP",
        }
    }
}

/// A port name: `p0`..`p2`, or 3 for none (`p3` when the Service has several ports, as the
/// API requires names then).
type PortName = u8;

#[derive(Debug, Clone)]
struct ServicePort {
    name: PortName,
    port: u16,
    proto: Proto,
    node_port: u16,
}

impl ServicePort {
    fn random(rng: &mut Rng, service: usize) -> ServicePort {
        ServicePort {
            name: rng.below(4) as u8,
            port: rng.pick(&[80, 81, 53, 443]),
            proto: Proto::random(rng),
            // Now and then two ports of a Service share a node port.
            node_port: 30000 + service as u16 * 10 + rng.below(8) as u16,
        }
    }
}

#[derive(Debug, Clone)]
struct Service {
    exists: bool,
    kind: Kind,
    /// 10.96.5.(10 + ip): a Service's own index, but another's now and then.
    ip: u8,
    ports: Vec<ServicePort>,
    /// ClientIP affinity: `Some(0)` without a timeout, else the timeout.
    affinity: Option<u32>,
    etp_local: bool,
    itp_local: bool,
    external_ips: BTreeSet<u8>,
    ingress: BTreeSet<u8>,
    /// `loadBalancerSourceRanges`: none, one holding the node addresses, one not.
    source_ranges: u8,
    /// Labelled for another proxy (`service.kubernetes.io/service-proxy-name`).
    other_proxy: bool,
}

impl Service {
    fn random(rng: &mut Rng, index: usize) -> Service {
        Service {
            exists: true,
            kind: match rng.below(10) {
                0..=3 => Kind::ClusterIp,
                4..=5 => Kind::NodePort,
                _ => Kind::LoadBalancer,
            },
            ip: index as u8,
            ports: (0..1 + rng.below(2))
                .map(|_| ServicePort::random(rng, index))
                .collect(),
            affinity: rng.chance(20).then(|| rng.pick(&[0, 60, 10800])),
            etp_local: rng.chance(30),
            itp_local: rng.chance(20),
            external_ips: (0..rng.below(3)).map(|_| rng.below(VIPS) as u8).collect(),
            ingress: (0..rng.below(3)).map(|_| rng.below(VIPS) as u8).collect(),
            source_ranges: if rng.chance(20) {
                1 + rng.below(2) as u8
            } else {
                0
            },
            other_proxy: false,
        }
    }
}

#[derive(Debug, Clone)]
struct Endpoint {
    /// 10.244.0.(10 + address).
    address: u8,
    /// node-a (this node), node-b, or no node name.
    node: u8,
    /// ready/serving/terminating: see [`World::yaml`].
    conditions: u8,
    /// `hints.forZones`: zone-0 or zone-1.
    zone: Option<u8>,
}

impl Endpoint {
    fn random(rng: &mut Rng, address: u8, hinted: bool) -> Endpoint {
        Endpoint {
            address,
            node: match rng.below(10) {
                0..=4 => 0,
                5..=8 => 1,
                _ => 2,
            },
            conditions: if rng.chance(60) {
                0
            } else {
                rng.below(5) as u8
            },
            zone: hinted.then(|| rng.below(2) as u8),
        }
    }
}

#[derive(Debug, Clone)]
struct Slice {
    exists: bool,
    /// Labelled for `s{service}`.
    service: u8,
    /// (name, target port, protocol).
    ports: Vec<(PortName, u16, Proto)>,
    endpoints: Vec<Endpoint>,
}

/// The cluster a history has reached.
struct World {
    services: Vec<Service>,
    slices: Vec<Slice>,
    /// The Node's `topology.kubernetes.io/zone`: zone-0, zone-1 or none.
    zone: Option<u8>,
    /// The Node's InternalIP: [`NODE_ADDRESSES`].
    node_address: usize,
    /// Its pod CIDR: 10.244.(pod_cidr).0/24.
    pod_cidr: u8,
}

/// The Node's InternalIP: the address facing the outside client, the pod bridge's, or one the
/// node does not have.
const NODE_ADDRESSES: [&str; 3] = ["192.168.100.1", "10.244.0.1", "192.168.100.9"];

impl World {
    /// A first cluster: a few Services, slices, the Node.
    fn new(rng: &mut Rng) -> World {
        let mut w = World {
            services: (0..SERVICES)
                .map(|i| Service {
                    exists: false,
                    ..Service::random(rng, i)
                })
                .collect(),
            slices: (0..SLICES)
                .map(|i| Slice {
                    exists: false,
                    service: (i % SERVICES) as u8,
                    ports: Vec::new(),
                    endpoints: Vec::new(),
                })
                .collect(),
            zone: rng.chance(50).then(|| rng.below(2) as u8),
            node_address: 0,
            pod_cidr: 0,
        };
        for s in 0..SERVICES {
            w.services[s].exists = rng.chance(60);
        }
        for e in 0..SLICES {
            if rng.chance(70) {
                w.make_slice(rng, e);
            }
        }
        w
    }

    fn existing_service(&self, rng: &mut Rng) -> Option<usize> {
        let live: Vec<usize> = (0..SERVICES).filter(|s| self.services[*s].exists).collect();
        (!live.is_empty()).then(|| rng.pick(&live))
    }

    fn existing_slice(&self, rng: &mut Rng) -> Option<usize> {
        let live: Vec<usize> = (0..SLICES).filter(|e| self.slices[*e].exists).collect();
        (!live.is_empty()).then(|| rng.pick(&live))
    }

    /// Makes slice `e` anew, for its Service's ports most of the time.
    fn make_slice(&mut self, rng: &mut Rng, e: usize) {
        let service = self.slices[e].service;
        let ports = match self.services.get(usize::from(service)) {
            Some(s) if rng.chance(75) => s
                .ports
                .iter()
                .take(2)
                .map(|p| (p.name, rng.pick(&[8080, 5353]), p.proto))
                .collect(),
            _ => vec![(rng.below(4) as u8, 8080, Proto::random(rng))],
        };
        let hinted = rng.chance(25);
        let mut endpoints: Vec<Endpoint> = Vec::new();
        for _ in 0..rng.below(4) {
            let address = rng.below(ADDRESSES) as u8;
            if endpoints.iter().all(|ep| ep.address != address) {
                endpoints.push(Endpoint::random(rng, address, hinted));
            }
        }
        self.slices[e] = Slice {
            exists: true,
            service,
            ports,
            endpoints,
        };
    }

    /// Makes one random change and says what it was.
    fn change(&mut self, rng: &mut Rng) -> String {
        match rng.below(32) {
            0..=2 => {
                let s = rng.below(SERVICES);
                self.change_service_presence(rng, s)
            }
            what @ 3..=16 => match self.existing_service(rng) {
                Some(s) => self.change_service(rng, s, what),
                None => {
                    let s = rng.below(SERVICES);
                    self.change_service_presence(rng, s)
                }
            },
            17 | 18 => {
                let e = rng.below(SLICES);
                self.make_slice(rng, e);
                format!("e{e} (re)made: {:?}", self.slices[e])
            }
            what @ 19..=28 => match self.existing_slice(rng) {
                Some(e) => self.change_slice(rng, e, what),
                None => {
                    let e = rng.below(SLICES);
                    self.make_slice(rng, e);
                    format!("e{e} made: {:?}", self.slices[e])
                }
            },
            29 => {
                self.zone = match self.zone {
                    Some(_) if rng.chance(30) => None,
                    _ => Some(rng.below(2) as u8),
                };
                format!("the Node's zone now {:?}", self.zone)
            }
            30 => {
                self.node_address = (self.node_address + 1 + rng.below(2)) % NODE_ADDRESSES.len();
                format!(
                    "the Node's address now {}",
                    NODE_ADDRESSES[self.node_address]
                )
            }
            _ => {
                self.pod_cidr = 1 - self.pod_cidr;
                format!("the Node's pod CIDR now 10.244.{}.0/24", self.pod_cidr)
            }
        }
    }

    /// Change `what` (3 to 16) of [`World::change`] to Service `s`.
    fn change_service(&mut self, rng: &mut Rng, s: usize, what: usize) -> String {
        let svc = &mut self.services[s];
        match what {
            3 | 4 => {
                let from = svc.kind;
                while svc.kind == from {
                    svc.kind = match rng.below(12) {
                        0..=3 => Kind::ClusterIp,
                        4..=6 => Kind::NodePort,
                        7..=9 => Kind::LoadBalancer,
                        10 => Kind::Headless,
                        _ => Kind::ExternalName,
                    };
                }
                format!("s{s} retyped {from:?} -> {:?}", svc.kind)
            }
            5 => {
                let p = rng.below(svc.ports.len());
                svc.ports[p].name = rng.below(4) as u8;
                format!("s{s} port {p} renamed to p{}", svc.ports[p].name)
            }
            6 => {
                let p = rng.below(svc.ports.len());
                let port = &mut svc.ports[p];
                port.port = rng.pick(&[80, 81, 53, 443]);
                if rng.chance(30) {
                    port.proto = Proto::random(rng);
                }
                if rng.chance(30) {
                    port.node_port = 30000 + s as u16 * 10 + rng.below(8) as u16;
                }
                format!("s{s} port {p} renumbered: {port:?}")
            }
            7 => {
                if svc.ports.len() > 1 && rng.chance(50) {
                    let p = rng.below(svc.ports.len());
                    svc.ports.remove(p);
                    format!("s{s} port {p} removed")
                } else {
                    let port = ServicePort::random(rng, s);
                    let said = format!("s{s} port added: {port:?}");
                    svc.ports.push(port);
                    said
                }
            }
            8 => {
                svc.affinity = match svc.affinity {
                    Some(_) if rng.chance(60) => None,
                    _ => Some(rng.pick(&[0, 60, 10800])),
                };
                format!("s{s} session affinity now {:?}", svc.affinity)
            }
            9 | 10 => {
                svc.etp_local = !svc.etp_local;
                format!("s{s} externalTrafficPolicy Local: {}", svc.etp_local)
            }
            11 => {
                svc.itp_local = !svc.itp_local;
                format!("s{s} internalTrafficPolicy Local: {}", svc.itp_local)
            }
            12 | 13 => {
                let ip = rng.below(VIPS) as u8;
                if !svc.external_ips.remove(&ip) {
                    svc.external_ips.insert(ip);
                }
                format!("s{s} external IPs now {:?}", svc.external_ips)
            }
            14 | 15 => {
                let ip = rng.below(VIPS) as u8;
                if !svc.ingress.remove(&ip) {
                    svc.ingress.insert(ip);
                }
                format!("s{s} load-balancer ingress now {:?}", svc.ingress)
            }
            _ => match rng.below(3) {
                0 => {
                    svc.source_ranges = rng.below(3) as u8;
                    format!("s{s} source ranges now {}", svc.source_ranges)
                }
                1 => {
                    svc.other_proxy = !svc.other_proxy;
                    format!("s{s} for another proxy: {}", svc.other_proxy)
                }
                _ => {
                    // Another Service's cluster IP now and then: they contend for it.
                    svc.ip = if rng.chance(50) {
                        s as u8
                    } else {
                        rng.below(SERVICES) as u8
                    };
                    format!("s{s} cluster IP now 10.96.5.{}", 10 + svc.ip)
                }
            },
        }
    }

    /// Change `what` (19 to 28) of [`World::change`] to slice `e`.
    fn change_slice(&mut self, rng: &mut Rng, e: usize, what: usize) -> String {
        match what {
            19 => {
                self.slices[e].exists = false;
                format!("e{e} deleted")
            }
            20 | 21 => {
                let from = self.slices[e].service;
                let to = (usize::from(from) + 1 + rng.below(SERVICES)) % (SERVICES + 1);
                self.slices[e].service = to as u8;
                let absent = self.services.get(to).is_none_or(|s| !s.exists);
                let absent = if absent { " (absent)" } else { "" };
                format!("e{e} relabelled s{from} -> s{to}{absent}")
            }
            22 => {
                // Its Service's port name (matching again) or any.
                let names: Vec<PortName> = self
                    .services
                    .get(usize::from(self.slices[e].service))
                    .map(|s| s.ports.iter().map(|p| p.name).collect())
                    .unwrap_or_default();
                let slice = &mut self.slices[e];
                let p = rng.below(slice.ports.len());
                slice.ports[p].0 = if !names.is_empty() && rng.chance(50) {
                    rng.pick(&names)
                } else {
                    rng.below(4) as u8
                };
                format!("e{e} port {p} renamed to p{}", slice.ports[p].0)
            }
            23 => {
                let slice = &mut self.slices[e];
                let p = rng.below(slice.ports.len());
                slice.ports[p].1 = rng.pick(&[8080, 5353, 9090]);
                if rng.chance(30) {
                    slice.ports[p].2 = Proto::random(rng);
                }
                format!("e{e} port {p} now {:?}", slice.ports[p])
            }
            24 | 25 => {
                let slice = &mut self.slices[e];
                let address = rng.below(ADDRESSES) as u8;
                if let Some(i) = slice.endpoints.iter().position(|ep| ep.address == address) {
                    slice.endpoints.remove(i);
                    format!("e{e} lost endpoint 10.244.0.{}", 10 + address)
                } else {
                    let hinted = slice.endpoints.first().is_some_and(|ep| ep.zone.is_some());
                    let ep = Endpoint::random(rng, address, hinted);
                    let said = format!("e{e} gained endpoint {ep:?}");
                    slice.endpoints.push(ep);
                    said
                }
            }
            26 | 27 => {
                let slice = &mut self.slices[e];
                if slice.endpoints.is_empty() {
                    let address = rng.below(ADDRESSES) as u8;
                    let ep = Endpoint::random(rng, address, false);
                    let said = format!("e{e} gained endpoint {ep:?}");
                    slice.endpoints.push(ep);
                    return said;
                }
                let i = rng.below(slice.endpoints.len());
                let ep = &mut slice.endpoints[i];
                if what == 26 {
                    ep.node = (ep.node + 1 + rng.below(2) as u8) % 3;
                    format!("e{e} endpoint {ep:?} moved")
                } else {
                    ep.conditions = (ep.conditions + 1 + rng.below(4) as u8) % 5;
                    format!("e{e} endpoint {ep:?}: conditions flipped")
                }
            }
            _ => {
                // Zone hints on every endpoint of the slice, or on none.
                let slice = &mut self.slices[e];
                let hinted = !slice.endpoints.iter().any(|ep| ep.zone.is_some());
                for ep in &mut slice.endpoints {
                    ep.zone = hinted.then(|| rng.below(2) as u8);
                }
                format!("e{e} zone hints now {:?}", slice.endpoints)
            }
        }
    }

    /// Service `s` deleted (its slices stay), or made: as it was before now and then, else
    /// anew.
    fn change_service_presence(&mut self, rng: &mut Rng, s: usize) -> String {
        let svc = &mut self.services[s];
        if svc.exists && rng.chance(50) {
            svc.exists = false;
            format!("s{s} deleted (its slices stay)")
        } else if !svc.exists && rng.chance(50) {
            svc.exists = true;
            format!("s{s} made again as it was: {svc:?}")
        } else {
            *svc = Service::random(rng, s);
            format!("s{s} made: {svc:?}")
        }
    }

    /// The cluster's manifests, as one YAML stream.
    fn yaml(&self) -> String {
        let mut y = String::new();
        let labels = self
            .zone
            .map(|z| format!(", labels: {{topology.kubernetes.io/zone: zone-{z}}}"))
            .unwrap_or_default();
        let cidr = format!("10.244.{}.0/24", self.pod_cidr);
        writeln!(
            y,
            "apiVersion: v1\nkind: Node\nmetadata: {{name: node-a{labels}}}\n\
             spec: {{podCIDR: {cidr}, podCIDRs: [{cidr}]}}\n\
             status: {{addresses: [{{type: InternalIP, address: {}}}, {{type: Hostname, address: node-a}}]}}",
            NODE_ADDRESSES[self.node_address]
        )
        .unwrap();
        for (i, s) in self.services.iter().enumerate().filter(|(_, s)| s.exists) {
            service_yaml(&mut y, i, s);
        }
        for (i, e) in self.slices.iter().enumerate().filter(|(_, e)| e.exists) {
            slice_yaml(&mut y, i, e);
        }
        y
    }
}

/// Appends Service `s{i}`, as the API would hold it: fields only where its type has them,
/// port names and (port, protocol) pairs unique.
fn service_yaml(y: &mut String, i: usize, s: &Service) {
    let node_ports = matches!(s.kind, Kind::NodePort | Kind::LoadBalancer);
    let mut ports = Vec::new();
    let mut seen = BTreeSet::new();
    for p in &s.ports {
        let name = match p.name {
            3 if s.ports.len() == 1 => String::new(),
            n => format!("p{n}"),
        };
        if !seen.insert(name.clone()) || !seen.insert(format!("{}/{:?}", p.port, p.proto)) {
            continue;
        }
        // Node ports unique too, else the API (and the agent) refuses the Service.
        let mut node_port = p.node_port;
        while !seen.insert(format!("node {node_port}/{:?}", p.proto)) {
            node_port += 1;
        }
        let mut port = String::from("{");
        if !name.is_empty() {
            write!(port, "name: {name}, ").unwrap();
        }
        write!(
            port,
            "protocol: {}, port: {}, targetPort: 8080",
            p.proto.name(),
            p.port
        )
        .unwrap();
        if node_ports {
            write!(port, ", nodePort: {node_port}").unwrap();
        }
        port.push('}');
        ports.push(port);
    }
    let labels = if s.other_proxy {
        ", labels: {service.kubernetes.io/service-proxy-name: other}"
    } else {
        ""
    };
    write!(
        y,
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: t{labels}}}\nspec:\n"
    )
    .unwrap();
    let kind = match s.kind {
        Kind::ClusterIp | Kind::Headless => "ClusterIP",
        Kind::NodePort => "NodePort",
        Kind::LoadBalancer => "LoadBalancer",
        Kind::ExternalName => "ExternalName",
    };
    writeln!(y, "  type: {kind}").unwrap();
    match s.kind {
        Kind::ExternalName => writeln!(y, "  externalName: s{i}.example.com").unwrap(),
        Kind::Headless => writeln!(y, "  clusterIP: None").unwrap(),
        _ => writeln!(y, "  clusterIP: 10.96.5.{}", 10 + s.ip).unwrap(),
    }
    writeln!(y, "  ports: [{}]", ports.join(", ")).unwrap();
    match s.affinity {
        None => {}
        Some(0) => writeln!(y, "  sessionAffinity: ClientIP").unwrap(),
        Some(t) => writeln!(
            y,
            "  sessionAffinity: ClientIP\n  sessionAffinityConfig: {{clientIP: {{timeoutSeconds: {t}}}}}"
        )
        .unwrap(),
    }
    if node_ports && s.etp_local {
        writeln!(y, "  externalTrafficPolicy: Local").unwrap();
        if s.kind == Kind::LoadBalancer {
            writeln!(y, "  healthCheckNodePort: {}", 32000 + i).unwrap();
        }
    }
    if s.itp_local {
        writeln!(y, "  internalTrafficPolicy: Local").unwrap();
    }
    if !s.external_ips.is_empty() {
        let ips: Vec<String> = s
            .external_ips
            .iter()
            .map(|e| format!("198.51.100.{}", e + 1))
            .collect();
        writeln!(y, "  externalIPs: [{}]", ips.join(", ")).unwrap();
    }
    if s.kind == Kind::LoadBalancer {
        match s.source_ranges {
            1 => writeln!(
                y,
                "  loadBalancerSourceRanges: [192.168.100.0/24, 10.244.0.0/16]"
            ),
            2 => writeln!(y, "  loadBalancerSourceRanges: [203.0.113.0/24]"),
            _ => Ok(()),
        }
        .unwrap();
        if !s.ingress.is_empty() {
            let ips: Vec<String> = s
                .ingress
                .iter()
                .map(|e| format!("{{ip: 203.0.113.{}}}", e + 1))
                .collect();
            writeln!(
                y,
                "status: {{loadBalancer: {{ingress: [{}]}}}}",
                ips.join(", ")
            )
            .unwrap();
        }
    }
}

/// Appends EndpointSlice `e{i}`.
fn slice_yaml(y: &mut String, i: usize, e: &Slice) {
    let mut names = BTreeSet::new();
    let ports: Vec<String> = e
        .ports
        .iter()
        // Names unique, else the API (and the agent) refuses the slice.
        .filter(|(name, _, _)| names.insert(*name))
        .map(|(name, port, proto)| {
            let name = if *name == 3 {
                String::new()
            } else {
                format!("name: p{name}, ")
            };
            format!("{{{name}protocol: {}, port: {port}}}", proto.name())
        })
        .collect();
    write!(
        y,
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: e{i}, namespace: t, labels: {{kubernetes.io/service-name: s{}}}}}\n\
         addressType: IPv4\nports: [{}]\nendpoints:",
        e.service,
        ports.join(", ")
    )
    .unwrap();
    if e.endpoints.is_empty() {
        y.push_str(" []\n");
        return;
    }
    y.push('\n');
    for ep in &e.endpoints {
        let conditions = match ep.conditions {
            0 => "{ready: true, serving: true, terminating: false}",
            1 => "{ready: false, serving: true, terminating: true}",
            2 => "{ready: false, serving: false, terminating: true}",
            3 => "{ready: false, serving: false, terminating: false}",
            // None said: ready.
            _ => "{}",
        };
        let node = match ep.node {
            0 => ", nodeName: node-a",
            1 => ", nodeName: node-b",
            _ => "",
        };
        let hints = ep
            .zone
            .map(|z| format!(", hints: {{forZones: [{{name: zone-{z}}}]}}"))
            .unwrap_or_default();
        writeln!(
            y,
            "  - {{addresses: [10.244.0.{}]{node}, conditions: {conditions}{hints}}}",
            10 + ep.address
        )
        .unwrap();
    }
}

/// The kernel state compared, by section: the virtual and real servers (`ipvsadm -Sn`,
/// sorted), the KUBE-* sets (`ipset save`, sorted, without the random hash seed), the KUBE-*
/// chains and rules of each table in `iptables-save`'s order (a rule's place matters), and
/// the addresses of `kube-ipvs0` (sorted: the kernel lists them in the order they were
/// added, which a history changes).
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    sections: [(&'static str, Vec<String>); 4],
}

impl State {
    /// Reads the state of the calling thread's network namespace.
    fn read() -> State {
        let mut ipvs: Vec<String> = stable_ipvs_dump().lines().map(str::to_string).collect();
        ipvs.sort();
        let mut sets: Vec<String> = sh("ipset save")
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|n| n.starts_with("KUBE-"))
            })
            .map(|l| l.split(" initval ").next().unwrap_or(l).to_string())
            .collect();
        sets.sort();
        let mut rules = Vec::new();
        let mut table = "";
        let save = sh("iptables-save");
        for line in save.lines() {
            if let Some(t) = line.strip_prefix('*') {
                table = t;
            } else if line.contains("KUBE-") {
                // A chain's counters are not state.
                let line = line.split(" [").next().unwrap_or(line);
                rules.push(format!("{table}: {line}"));
            }
        }
        let (exists, addr) = try_sh("ip -o addr show dev kube-ipvs0");
        let mut addresses: Vec<String> = if exists {
            addr.lines()
                .filter_map(|l| {
                    let mut words = l.split_whitespace();
                    words.find(|w| *w == "inet" || *w == "inet6")?;
                    words.next().map(str::to_string)
                })
                .collect()
        } else {
            vec!["(no kube-ipvs0)".into()]
        };
        addresses.sort();
        State {
            sections: [
                ("ipvsadm -Sn", ipvs),
                ("ipset save", sets),
                ("iptables-save", rules),
                ("kube-ipvs0", addresses),
            ],
        }
    }

    /// What differs from `want`, section by section: a unified diff, `-` for lines only the
    /// fresh build has and `+` for lines only the running agent has.
    fn difference(&self, want: &State) -> String {
        let mut out = String::new();
        for ((name, got), (_, want)) in self.sections.iter().zip(&want.sections) {
            if got != want {
                writeln!(
                    out,
                    "--- {name}, fresh --once build\n+++ {name}, running agent"
                )
                .unwrap();
                out.push_str(&unified_diff(want, got));
            }
        }
        out
    }
}

/// A unified diff of `old` to `new` (a longest common subsequence), with two lines of
/// context around each change and `...` between hunks; at most 80 lines.
fn unified_diff(old: &[String], new: &[String]) -> String {
    let (n, m) = (old.len(), new.len());
    let mut common = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            common[i][j] = if old[i] == new[j] {
                common[i + 1][j + 1] + 1
            } else {
                common[i + 1][j].max(common[i][j + 1])
            };
        }
    }
    let mut lines: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && old[i] == new[j] {
            lines.push((' ', &old[i]));
            (i, j) = (i + 1, j + 1);
        } else if j < m && (i == n || common[i][j + 1] >= common[i + 1][j]) {
            lines.push(('+', &new[j]));
            j += 1;
        } else {
            lines.push(('-', &old[i]));
            i += 1;
        }
    }
    let near_change = |k: usize| {
        lines[k.saturating_sub(2)..(k + 3).min(lines.len())]
            .iter()
            .any(|(c, _)| *c != ' ')
    };
    let mut out = String::new();
    let mut shown = 0;
    let mut skipped = false;
    for (k, (c, line)) in lines.iter().enumerate() {
        if !near_change(k) {
            skipped = true;
            continue;
        }
        if shown == 80 {
            out.push_str("... (more)\n");
            break;
        }
        if skipped && shown > 0 {
            out.push_str("...\n");
        }
        skipped = false;
        writeln!(out, "{c}{line}").unwrap();
        shown += 1;
    }
    out
}

/// The agent as a daemon on a node's manifests, its log in a file; killed when dropped.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(node: &Node, flags: &[&str], log: PathBuf) -> Daemon {
        let file = std::fs::File::create(&log).unwrap();
        let child = node
            .command(flags)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start the agent");
        Daemon { child, log }
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// The last `n` lines of its log.
    fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// When the daemon's last sync ended (`kubeproxy_sync_proxy_rules_last_timestamp_seconds`,
/// Unix seconds); 0 before any.
fn last_sync() -> f64 {
    let Ok((200, metrics)) = try_http_get("127.0.0.1:10249", "/metrics") else {
        return 0.0;
    };
    metrics
        .lines()
        .filter(|l| l.starts_with("kubeproxy_sync_proxy_rules_last_timestamp_seconds{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, f64::max)
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Replaces the manifest file at once, by a rename: the agent never reads half of it (the
/// temporary file is hidden, so not a manifest).
fn replace(node: &Node, yaml: &str) {
    let tmp = node.dir.join(".cluster.yaml.tmp");
    std::fs::write(&tmp, yaml).unwrap();
    std::fs::rename(&tmp, node.dir.join("cluster.yaml")).unwrap();
}

/// An empty network namespace set up as the daemon's ([`Node::new`]), made ahead on a thread
/// of its own while the previous step runs, where a fresh `--once` agent builds the
/// manifests [`FreshNode::build`] gives it.
struct FreshNode {
    manifests: mpsc::Sender<String>,
    state: JoinHandle<Option<State>>,
}

impl FreshNode {
    /// Starts making node `name`, whose agent will run with `flags`.
    fn start(name: String, flags: Vec<String>) -> FreshNode {
        let (manifests, yaml) = mpsc::channel::<String>();
        let state = std::thread::spawn(move || {
            let node = Node::new(&name, 0);
            // No manifests: the history ended first.
            let yaml = yaml.recv().ok()?;
            node.write("cluster.yaml", &yaml);
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            node.once(&flags);
            Some(State::read())
        });
        FreshNode { manifests, state }
    }

    /// Gives the node `yaml` to build; [`FreshNode::built`] waits for the result.
    fn build(&self, yaml: &str) {
        let _ = self.manifests.send(yaml.to_string());
    }

    /// The state the fresh agent built, or why that failed (its panic's message).
    fn built(self) -> Result<State, String> {
        let FreshNode { manifests, state } = self;
        // A node never given manifests stops waiting for them.
        drop(manifests);
        match state.join() {
            Ok(state) => state.ok_or_else(|| "no manifests given".to_string()),
            Err(panic) => Err(panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()),
        }
    }
}

/// Whether the daemon is done with the manifests written at `written`: a sync ended after
/// it, or the manifests have been polled several times since without one (a write that
/// changes nothing the agent models queues no sync). Nothing the agent serves says which
/// manifests a sync read (the sync's end and the queued change's time are recorded by
/// different tasks, in either order), so the caller also waits for the states to be equal.
fn synced_since(written: SystemTime) -> bool {
    last_sync() > unix_seconds(written) || written.elapsed().unwrap_or_default() >= UNSYNCED_GRACE
}

/// Runs history `seed` for `steps` steps on a node of its own: after each, the daemon's state
/// must be the fresh build's. Panics naming the seed, the step, its changes and the
/// difference.
fn history(seed: u64, steps: usize) {
    let started = Instant::now();
    let mut rng = Rng(seed);
    // Odd seeds: node ports on the Node's address and pods told by its CIDR.
    let flags: Vec<String> = if seed % 2 == 1 {
        [
            "--nodeport-addresses",
            "primary",
            "--detect-local-mode",
            "NodeCIDR",
        ]
        .map(String::from)
        .to_vec()
    } else {
        Vec::new()
    };
    println!("history {seed} (HISTORY_SEED={seed}): {steps} steps, flags {flags:?}");
    let mut world = World::new(&mut rng);
    let name = format!("history-{seed}");
    let node = Node::new(&name, 0);
    replace(&node, &world.yaml());
    let mut daemon_flags: Vec<&str> =
        vec!["--ipvs-sync-period", "1h", "--ipvs-min-sync-period", "0s"];
    daemon_flags.extend(flags.iter().map(String::as_str));
    let mut written = SystemTime::now();
    let log = std::env::temp_dir().join(format!("{name}.log"));
    let mut daemon = Daemon::start(&node, &daemon_flags, log);
    let mut slowest = Duration::ZERO;
    let mut want = None;
    // Two at most at a time (this step's, the next's): they alternate names.
    let mut fresh = FreshNode::start(format!("{name}-f0"), flags.clone());
    for step in 0..=steps {
        let changes: Vec<String> = if step == 0 {
            vec!["the first cluster".into()]
        } else {
            (0..1 + rng.below(3))
                .map(|_| world.change(&mut rng))
                .collect()
        };
        let yaml = world.yaml();
        if step > 0 {
            replace(&node, &yaml);
            written = SystemTime::now();
        }
        let fail = |why: String| -> ! {
            panic!(
                "history {seed} (HISTORY_SEED={seed}, flags {flags:?}), step {step} of {steps}, \
                 changes {changes:#?}:\n{why}\nthe manifests:\n{yaml}"
            )
        };
        let check_alive = |daemon: &mut Daemon| {
            if let Some(status) = daemon.exited() {
                fail(format!(
                    "the agent exited ({status}); its log ends:\n{}",
                    daemon.log_tail(40)
                ));
            }
        };
        fresh.build(&yaml);
        let build = std::mem::replace(
            &mut fresh,
            FreshNode::start(format!("{name}-f{}", (step + 1) % 2), flags.clone()),
        );
        let building = Instant::now();
        while !synced_since(written) && building.elapsed() < SYNC_TIMEOUT {
            check_alive(&mut daemon);
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut got = State::read();
        let step_want = build
            .built()
            .unwrap_or_else(|e| fail(format!("the fresh --once build failed: {e}")));
        let built_at = Instant::now();
        // The daemon's full pass is an hour away: a state that is not equal by now will
        // only become so through a sync still under way.
        while got != step_want || !synced_since(written) {
            check_alive(&mut daemon);
            if built_at.elapsed() > SYNC_TIMEOUT {
                fail(format!(
                    "after {:.1?}, the running agent's kernel state is not what a fresh --once \
                     agent builds:\n{}\nthe agent's log ends:\n{}",
                    building.elapsed(),
                    got.difference(&step_want),
                    daemon.log_tail(30)
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
            got = State::read();
        }
        slowest = slowest.max(built_at.elapsed());
        println!(
            "  step {step} (fresh build {:.1?}, equal {:.1?} later): {changes:?}",
            built_at - building,
            built_at.elapsed()
        );
        want = Some(step_want);
    }
    let _ = fresh.built();
    // A sync still under way after the last step could move the state: it must stay.
    std::thread::sleep(Duration::from_secs(2));
    let got = State::read();
    let want = want.expect("a step ran");
    assert!(
        got == want,
        "history {seed} (HISTORY_SEED={seed}): the state moved after the last step:\n{}",
        got.difference(&want)
    );
    println!(
        "history {seed}: {steps} steps, each equal to a fresh build, in {:.1?} (slowest wait \
         after a build {:.1?})",
        started.elapsed(),
        slowest
    );
}

/// `HISTORY_SEED`, if set.
fn seed_from_env() -> Option<u64> {
    lab::guest::knob("HISTORY_SEED", option_env!("HISTORY_SEED"))
}

#[test]
fn a_random_history_equals_a_fresh_build() {
    history(seed_from_env().unwrap_or(1), 12);
}

#[test]
#[ignore = "four histories of 50 steps: 11 minutes under emulation, alone on the host (2026-11-29)"]
fn long_random_histories_equal_a_fresh_build() {
    let seeds = match seed_from_env() {
        Some(seed) => vec![seed],
        None => {
            let now = unix_seconds(SystemTime::now()) as u64;
            (0..4).map(|i| now * 4 + i).collect()
        }
    };
    println!("long histories: seeds {seeds:?}");
    for seed in seeds {
        history(seed, 50);
    }
}
