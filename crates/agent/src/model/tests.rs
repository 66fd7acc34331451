//! Table-driven tests of the desired state and of the plan.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::model::desired::warning::Warning;
use crate::model::desired::{LocalAddress, desired};
use crate::model::fixtures::*;
use crate::model::kernel::sets::{self, named};
use crate::model::kernel::{
    KernelState, SCHED_FLAG_FALLBACK, SCHED_FLAG_PORT, SetEntry, VirtualServer, VsKey,
};
use crate::model::plan::{Op, plan};
use crate::model::snapshot::cluster::{Family, Protocol, ServiceType};

fn key(addr: &str, protocol: Protocol, port: u16) -> VsKey {
    VsKey {
        address: ip(addr),
        protocol,
        port,
    }
}

fn dests(vs: &VirtualServer) -> Vec<String> {
    vs.destinations
        .iter()
        .map(|(d, w)| format!("{d} w{w}"))
        .collect()
}

fn entries(state: &KernelState, name: &str) -> Vec<String> {
    state.sets[&named(name)]
        .entries
        .iter()
        .map(|e| e.to_string())
        .collect()
}

#[test]
fn cluster_ip_service_gets_a_vip_a_virtual_server_and_set_entries() {
    let c = cluster(
        vec![
            svc("web")
                .cluster_ip("10.96.0.10")
                .port("http", Protocol::Tcp, 80)
                .port("dns", Protocol::Udp, 53),
        ],
        vec![
            eps("web", "http", Protocol::Tcp, 8080)
                .ready("10.244.0.2", "node-a")
                .ready("10.244.1.2", "node-b"),
            eps("web", "dns", Protocol::Udp, 5353).ready("10.244.0.2", "node-a"),
        ],
    );
    let d = desired(&c, &config(), &host()).state;
    assert_eq!(d.addresses, BTreeSet::from([ip("10.96.0.10")]));
    let http = &d.services[&key("10.96.0.10", Protocol::Tcp, 80)];
    assert_eq!(http.scheduler, "rr");
    assert_eq!(dests(http), ["10.244.0.2:8080 w1", "10.244.1.2:8080 w1"]);
    assert_eq!(
        dests(&d.services[&key("10.96.0.10", Protocol::Udp, 53)]),
        ["10.244.0.2:5353 w1"]
    );
    assert_eq!(
        entries(&d, "KUBE-CLUSTER-IP"),
        ["10.96.0.10,tcp:80", "10.96.0.10,udp:53"]
    );
    // Only the local endpoint goes into the hairpin set.
    assert_eq!(
        entries(&d, "KUBE-LOOP-BACK"),
        [
            "10.244.0.2,tcp:8080,10.244.0.2",
            "10.244.0.2,udp:5353,10.244.0.2"
        ]
    );
    assert_eq!(entries(&d, "KUBE-IPVS-IPS"), ["10.96.0.10"]);
    assert_eq!(
        entries(&d, "KUBE-IPVS-OWNED"),
        ["10.96.0.10,tcp:80", "10.96.0.10,udp:53"]
    );
}

#[test]
fn headless_and_external_name_services_get_nothing() {
    let c = cluster(
        vec![
            svc("headless").tcp(80),
            svc("alias")
                .cluster_ip("10.96.0.11")
                .tcp(80)
                .kind(ServiceType::ExternalName),
        ],
        vec![eps("headless", "", Protocol::Tcp, 80).ready("10.244.0.2", "node-a")],
    );
    let d = desired(&c, &config(), &host()).state;
    assert!(d.services.is_empty());
    assert!(d.addresses.is_empty());
}

#[test]
fn node_port_is_served_on_every_node_address_but_loopback_and_link_local() {
    let c = cluster(
        vec![svc("np").cluster_ip("10.96.0.12").tcp(80).node_port(30080)],
        vec![eps("np", "", Protocol::Tcp, 8080).ready("10.244.0.2", "node-a")],
    );
    let d = desired(&c, &config(), &host()).state;
    let keys: Vec<String> = d.services.keys().map(|k| k.to_string()).collect();
    assert_eq!(keys, ["10.96.0.12:80/tcp", "192.168.1.10:30080/tcp"]);
    assert_eq!(entries(&d, "KUBE-NODE-PORT-TCP"), ["30080"]);
    // Node addresses are not bound on kube-ipvs0.
    assert_eq!(d.addresses, BTreeSet::from([ip("10.96.0.12")]));
}

#[test]
fn nodeport_addresses_limit_the_node_addresses() {
    let c = cluster(
        vec![svc("np").cluster_ip("10.96.0.12").tcp(80).node_port(30080)],
        vec![],
    );
    let mut h = host();
    h.addresses.push(crate::model::desired::LocalAddress {
        interface: "eth1".into(),
        address: ip("172.16.0.5"),
    });
    let cfg = crate::model::snapshot::config::ProxyConfig {
        nodeport_addresses: vec!["172.16.0.0/16".parse().unwrap()],
        ..config()
    };
    let d = desired(&c, &cfg, &h).state;
    assert!(
        d.services
            .contains_key(&key("172.16.0.5", Protocol::Tcp, 30080))
    );
    assert!(
        !d.services
            .contains_key(&key("192.168.1.10", Protocol::Tcp, 30080))
    );
}

#[test]
fn nodeport_addresses_of_one_family_leave_the_other_on_all_its_addresses() {
    let c = cluster(
        vec![
            svc("np")
                .cluster_ip("10.96.0.12")
                .cluster_ip("fd00::12")
                .tcp(80)
                .node_port(30080),
        ],
        vec![],
    );
    let mut h = host();
    for (interface, address) in [
        ("eth1", "172.16.0.5"),
        ("eth0", "fd00:50::10"),
        ("eth1", "fd00:60::10"),
        ("lo", "::1"),
        ("kube-ipvs0", "172.16.0.99"),
    ] {
        h.addresses.push(crate::model::desired::LocalAddress {
            interface: interface.into(),
            address: ip(address),
        });
    }
    let cfg = crate::model::snapshot::config::ProxyConfig {
        families: vec![Family::V4, Family::V6],
        nodeport_addresses: vec!["172.16.0.0/16".parse().unwrap()],
        ..config()
    };
    let d = desired(&c, &cfg, &h).state;
    let np: Vec<String> = d
        .services
        .keys()
        .filter(|k| k.port == 30080)
        .map(|k| k.to_string())
        .collect();
    // IPv4 only where the CIDR says; IPv6, with no CIDR of its own, on every IPv6 address.
    assert_eq!(
        np,
        [
            "172.16.0.5:30080/tcp",
            "[fd00:50::10]:30080/tcp",
            "[fd00:60::10]:30080/tcp"
        ]
    );
    // Health-check ports: the matching addresses for IPv4 (loopback would count, VIPs do
    // not), every address for IPv6.
    assert_eq!(
        h.health_check_addresses(Family::V4, &cfg),
        Some(BTreeSet::from([ip("172.16.0.5")]))
    );
    assert_eq!(h.health_check_addresses(Family::V6, &cfg), None);
    let local = crate::model::snapshot::config::ProxyConfig {
        nodeport_addresses: vec!["127.0.0.0/8".parse().unwrap(), "::/0".parse().unwrap()],
        ..cfg.clone()
    };
    assert_eq!(
        h.health_check_addresses(Family::V4, &local),
        Some(BTreeSet::from([ip("127.0.0.1")]))
    );
    assert_eq!(h.health_check_addresses(Family::V6, &local), None);
    assert_eq!(h.health_check_addresses(Family::V4, &config()), None);
}

#[test]
fn sctp_node_ports_use_the_hash_set_with_node_addresses() {
    let c = cluster(
        vec![
            svc("s")
                .cluster_ip("10.96.0.13")
                .port("", Protocol::Sctp, 9)
                .node_port(30009),
        ],
        vec![],
    );
    let d = desired(&c, &config(), &host()).state;
    assert_eq!(
        entries(&d, "KUBE-NODE-PORT-SCTP-HASH"),
        ["192.168.1.10,sctp:30009"]
    );
}

#[test]
fn external_and_load_balancer_ips_are_bound_unless_already_local() {
    let c = cluster(
        vec![
            svc("lb")
                .cluster_ip("10.96.0.14")
                .tcp(443)
                .node_port(30443)
                .load_balancer("203.0.113.7")
                .external_ip("192.168.1.10"),
        ],
        vec![],
    );
    let d = desired(&c, &config(), &host()).state;
    // 192.168.1.10 is the node's own address: served, not bound.
    assert_eq!(
        d.addresses,
        BTreeSet::from([ip("10.96.0.14"), ip("203.0.113.7")])
    );
    assert!(
        d.services
            .contains_key(&key("203.0.113.7", Protocol::Tcp, 443))
    );
    assert!(
        d.services
            .contains_key(&key("192.168.1.10", Protocol::Tcp, 443))
    );
    assert_eq!(entries(&d, "KUBE-LOAD-BALANCER"), ["203.0.113.7,tcp:443"]);
    assert_eq!(entries(&d, "KUBE-EXTERNAL-IP"), ["192.168.1.10,tcp:443"]);
}

#[test]
fn session_affinity_sets_persistence_and_mh_sets_the_port_and_fallback_flags() {
    let c = cluster(
        vec![svc("sticky").cluster_ip("10.96.0.15").tcp(80).affinity(600)],
        vec![],
    );
    let cfg = crate::model::snapshot::config::ProxyConfig {
        scheduler: "mh".into(),
        ..config()
    };
    let d = desired(&c, &cfg, &host()).state;
    let vs = &d.services[&key("10.96.0.15", Protocol::Tcp, 80)];
    assert_eq!(vs.persistence, Some(Duration::from_secs(600)));
    // mh-port, and mh-fallback so that draining (weight-0) real servers are skipped (B23).
    assert_eq!(vs.sched_flags, SCHED_FLAG_PORT | SCHED_FLAG_FALLBACK);
    assert_eq!(vs.scheduler, "mh");
}

#[test]
fn external_traffic_policy_local_uses_local_endpoints_and_local_sets() {
    let c = cluster(
        vec![
            svc("l")
                .cluster_ip("10.96.0.16")
                .tcp(80)
                .node_port(30016)
                .load_balancer("203.0.113.8")
                .etp_local(),
        ],
        vec![
            eps("l", "", Protocol::Tcp, 8080)
                .ready("10.244.0.2", "node-a")
                .ready("10.244.1.2", "node-b"),
        ],
    );
    let d = desired(&c, &config(), &host()).state;
    assert_eq!(
        dests(&d.services[&key("10.96.0.16", Protocol::Tcp, 80)]).len(),
        2
    );
    assert_eq!(
        dests(&d.services[&key("192.168.1.10", Protocol::Tcp, 30016)]),
        ["10.244.0.2:8080 w1"]
    );
    assert_eq!(entries(&d, "KUBE-NODE-PORT-LOCAL-TCP"), ["30016"]);
    assert_eq!(
        entries(&d, "KUBE-LOAD-BALANCER-LOCAL"),
        ["203.0.113.8,tcp:80"]
    );
}

#[test]
fn dual_stack_uses_kube_6_sets() {
    let c = cluster(
        vec![
            svc("v6")
                .cluster_ip("10.96.0.17")
                .cluster_ip("fd00::17")
                .tcp(80),
        ],
        vec![],
    );
    let cfg = crate::model::snapshot::config::ProxyConfig {
        families: vec![Family::V4, Family::V6],
        ..config()
    };
    let d = desired(&c, &cfg, &host()).state;
    assert_eq!(entries(&d, "KUBE-6-CLUSTER-IP"), ["fd00::17,tcp:80"]);
    assert_eq!(entries(&d, "KUBE-CLUSTER-IP"), ["10.96.0.17,tcp:80"]);
    assert!(d.rules.contains_key(&Family::V6));
}

#[test]
fn two_services_wanting_one_virtual_server_keep_the_first() {
    let c = cluster(
        vec![
            svc("a")
                .cluster_ip("10.96.0.18")
                .tcp(80)
                .external_ip("198.51.100.1"),
            svc("b")
                .cluster_ip("10.96.0.19")
                .tcp(80)
                .external_ip("198.51.100.1"),
        ],
        vec![],
    );
    let d = desired(&c, &config(), &host());
    assert!(
        matches!(&d.conflicts[..], [Warning::Contested { owner, other, .. }] if &*owner.name == "a" && &*other.name == "b"),
        "{:?}",
        d.conflicts
    );
    assert_eq!(
        d.owners[&key("198.51.100.1", Protocol::Tcp, 80)]
            .id
            .name
            .as_ref(),
        "a"
    );
}

// ---- plan ----

/// Applies a plan to an in-memory kernel, the way the real dataplane would.
fn apply(state: &mut KernelState, ops: &[Op]) {
    let mut kernel = crate::dataplane::memory::Memory {
        state: std::mem::take(state),
        ..Default::default()
    };
    for op in ops {
        kernel.apply_op(op).unwrap_or_else(|e| panic!("{op}: {e}"));
    }
    *state = kernel.state;
}

fn web(endpoints: &[&str]) -> crate::model::snapshot::cluster::Cluster {
    let mut slice = eps("web", "", Protocol::Tcp, 8080);
    for e in endpoints {
        slice = slice.ready(e, "node-b");
    }
    cluster(
        vec![svc("web").cluster_ip("10.96.0.10").tcp(80)],
        vec![slice],
    )
}

#[test]
fn applying_a_plan_then_planning_again_gives_nothing() {
    let want = desired(&web(&["10.244.1.2", "10.244.1.3"]), &config(), &host()).state;
    let mut kernel = KernelState::default();
    let first = plan(&want, &kernel, &[]);
    apply(&mut kernel, &first.ops);
    let again = plan(&want, &kernel, &[]);
    assert!(again.is_empty(), "{:?}", again.ops);
}

#[test]
fn claims_come_before_services_and_addresses_before_removals() {
    let want = desired(&web(&["10.244.1.2"]), &config(), &host()).state;
    let ops = plan(&want, &KernelState::default(), &[]).ops;
    let pos = |f: &dyn Fn(&Op) -> bool| ops.iter().position(f).unwrap();
    let claim = pos(&|o| matches!(o, Op::AddEntries { set, .. } if set == sets::OWNED.name));
    let add_vs = pos(&|o| matches!(o, Op::AddService { .. }));
    let rules = pos(&|o| matches!(o, Op::WriteRules { .. }));
    assert!(claim < add_vs && rules < add_vs, "{ops:?}");
}

#[test]
fn an_endpoint_change_touches_only_that_destination() {
    let old = desired(&web(&["10.244.1.2", "10.244.1.3"]), &config(), &host()).state;
    let mut kernel = KernelState::default();
    let first = plan(&old, &kernel, &[]).ops;
    apply(&mut kernel, &first);
    let new = desired(&web(&["10.244.1.2", "10.244.1.4"]), &config(), &host()).state;
    let ops = plan(&new, &kernel, &[]).ops;
    let k = key("10.96.0.10", Protocol::Tcp, 80);
    assert_eq!(
        ops,
        vec![
            Op::AddDestination {
                key: k,
                destination: "10.244.1.4:8080".parse().unwrap(),
                weight: 1
            },
            // Its connections are unknown: it drains.
            Op::UpdateDestination {
                key: k,
                destination: "10.244.1.3:8080".parse().unwrap(),
                weight: 0
            },
        ]
    );
}

#[test]
fn foreign_virtual_servers_are_never_deleted_and_own_ones_are() {
    let want = desired(&web(&["10.244.1.2"]), &config(), &host()).state;
    let mut kernel = KernelState::default();
    let first = plan(&want, &kernel, &[]).ops;
    apply(&mut kernel, &first);
    // keepalived's service on some address, and one of ours whose Service went away.
    let foreign = key("192.0.2.50", Protocol::Tcp, 80);
    let stale = key("10.96.0.99", Protocol::Tcp, 80);
    let vs = VirtualServer {
        scheduler: "wlc".into(),
        sched_flags: 0,
        persistence: None,
        destinations: Default::default(),
        connections: Default::default(),
    };
    kernel.services.insert(foreign, vs.clone());
    kernel.services.insert(stale, vs);
    kernel
        .sets
        .get_mut(&named("KUBE-IPVS-OWNED"))
        .unwrap()
        .entries
        .insert(SetEntry::IpPort(stale.address, Protocol::Tcp, 80));
    let ops = plan(&want, &kernel, &[]).ops;
    assert!(ops.contains(&Op::DelService(stale)), "{ops:?}");
    assert!(!ops.contains(&Op::DelService(foreign)), "{ops:?}");
    // The claim goes after the service.
    let del = ops
        .iter()
        .position(|o| *o == Op::DelService(stale))
        .unwrap();
    let unclaim = ops
        .iter()
        .position(|o| matches!(o, Op::DelEntries { set, .. } if set == "KUBE-IPVS-OWNED"))
        .unwrap();
    assert!(del < unclaim);
    // Excluded CIDRs protect even owned servers.
    let ops = plan(&want, &kernel, &["10.96.0.0/24".parse().unwrap()]).ops;
    assert!(!ops.contains(&Op::DelService(stale)));
}

#[test]
fn a_set_of_the_wrong_type_is_left_alone_with_a_warning() {
    let want = desired(&web(&["10.244.1.2"]), &config(), &host()).state;
    let mut kernel = KernelState::default();
    kernel.sets.insert(
        named("KUBE-NODE-PORT-TCP"),
        crate::model::kernel::Set {
            kind: crate::model::kernel::SetKind::HashIp,
            family: Family::V4,
            entries: BTreeSet::new(),
        },
    );
    let p = plan(&want, &kernel, &[]);
    assert!(
        matches!(&p.warnings[..], [Warning::SetKind { name, found: crate::model::kernel::SetKind::HashIp, .. }] if name == "KUBE-NODE-PORT-TCP"),
        "{:?}",
        p.warnings
    );
    assert!(
        !p.ops
            .iter()
            .any(|o| matches!(o, Op::CreateSet(name) if name == "KUBE-NODE-PORT-TCP"))
    );
}

#[test]
fn cleanup_removes_only_what_the_agent_owns() {
    let want = desired(&web(&["10.244.1.2"]), &config(), &host()).state;
    let mut kernel = KernelState::default();
    let first = plan(&want, &kernel, &[]).ops;
    apply(&mut kernel, &first);
    let foreign = key("192.0.2.50", Protocol::Tcp, 80);
    kernel.services.insert(
        foreign,
        VirtualServer {
            scheduler: "wlc".into(),
            sched_flags: 0,
            persistence: None,
            destinations: Default::default(),
            connections: Default::default(),
        },
    );
    let ops = crate::model::plan::cleanup(&kernel, &[]).ops;
    assert!(ops.contains(&Op::DelService(key("10.96.0.10", Protocol::Tcp, 80))));
    assert!(!ops.contains(&Op::DelService(foreign)));
    assert!(ops.contains(&Op::DeleteLink));
    assert!(
        matches!(ops.first(), Some(Op::RemoveRules { .. })),
        "rules go first: {ops:?}"
    );
    assert!(
        matches!(ops.last(), Some(Op::DestroySet(_))),
        "sets go last: {ops:?}"
    );
}

#[test]
fn a_services_own_scheduler_overrides_the_flag() {
    let mut s = svc("hashed").cluster_ip("10.96.0.20").tcp(80);
    s.0.scheduler = Some("sh".into());
    let c = cluster(
        vec![s, svc("plain").cluster_ip("10.96.0.21").tcp(80)],
        vec![],
    );
    let d = desired(&c, &config(), &host()).state;
    assert_eq!(
        d.services[&key("10.96.0.20", Protocol::Tcp, 80)].scheduler,
        "sh"
    );
    // sh-fallback, so a client hashed to a draining real server gets another one.
    assert_eq!(
        d.services[&key("10.96.0.20", Protocol::Tcp, 80)].sched_flags,
        SCHED_FLAG_FALLBACK
    );
    assert_eq!(
        d.services[&key("10.96.0.21", Protocol::Tcp, 80)].scheduler,
        "rr"
    );
}

#[test]
fn nodeport_addresses_primary_and_node_cidr_come_from_the_node() {
    let mut c = cluster(
        vec![svc("np").cluster_ip("10.96.0.12").tcp(80).node_port(30080)],
        vec![],
    );
    let mut h = host();
    h.addresses.push(crate::model::desired::LocalAddress {
        interface: "eth1".into(),
        address: ip("172.16.0.5"),
    });
    let cfg = crate::model::snapshot::config::ProxyConfig {
        nodeport_primary: true,
        local_detector: crate::model::snapshot::config::LocalDetector::NodeCidr(vec![]),
        ..config()
    };
    // Without the Node: no NodePort anywhere.
    let d = desired(&c, &cfg, &h).state;
    assert!(
        !d.services.keys().any(|k| k.port == 30080),
        "{:?}",
        d.services.keys()
    );
    c.node = Some(crate::model::snapshot::cluster::Node {
        name: "node-a".into(),
        addresses: vec![ip("172.16.0.5")],
        pod_cidrs: vec!["10.244.7.0/24".parse().unwrap()],
        labels: Default::default(),
    });
    let d = desired(&c, &cfg, &h).state;
    let np: Vec<String> = d
        .services
        .keys()
        .filter(|k| k.port == 30080)
        .map(|k| k.to_string())
        .collect();
    assert_eq!(np, ["172.16.0.5:30080/tcp"]);
    let rules = &d.rules[&Family::V4].rules;
    assert!(
        rules.iter().any(|(_, r)| r.contains("! -s 10.244.7.0/24")),
        "{rules:?}"
    );
    // `--bind-address` is the node's IP of its family for kube-proxy (detectNodeIPs), and so
    // what "primary" serves NodePorts on, ahead of the Node's own address.
    h.addresses.push(crate::model::desired::LocalAddress {
        interface: "eth2".into(),
        address: ip("172.16.9.9"),
    });
    let bound = crate::model::snapshot::config::ProxyConfig {
        bind_address: Some(ip("172.16.9.9")),
        ..cfg.clone()
    };
    let np: Vec<String> = desired(&c, &bound, &h)
        .state
        .services
        .keys()
        .filter(|k| k.port == 30080)
        .map(|k| k.to_string())
        .collect();
    assert_eq!(np, ["172.16.9.9:30080/tcp"]);
    // Before the Node is known, the bind address alone is enough.
    c.node = None;
    let np: Vec<String> = desired(&c, &bound, &h)
        .state
        .services
        .keys()
        .filter(|k| k.port == 30080)
        .map(|k| k.to_string())
        .collect();
    assert_eq!(np, ["172.16.9.9:30080/tcp"]);
}

/// The endpoints of the Service "web"'s port "" (TCP) in `c`, as "address:port ready".
fn web_port_endpoints(c: &crate::model::snapshot::cluster::Cluster) -> Vec<String> {
    use crate::model::snapshot::endpoints::{Topology, port_endpoints};
    let slices: Vec<&crate::model::snapshot::cluster::EndpointSlice> =
        c.slices.values().map(|s| &**s).collect();
    let service = &c.services.values().next().expect("one Service");
    port_endpoints(
        &slices,
        &service.ports[0],
        Family::V4,
        &Topology {
            node: "node-a",
            ..Topology::default()
        },
    )
    .iter()
    .map(|e| {
        format!(
            "{} {}",
            e.address,
            if e.ready { "ready" } else { "not-ready" }
        )
    })
    .collect()
}

#[test]
fn one_address_with_two_port_numbers_is_two_endpoints() {
    // Two host-network pods of one node whose named target port resolves to 8080 and 8081:
    // kube-proxy keys endpoints by address and port, and makes two real servers.
    let mut second = eps("web", "", Protocol::Tcp, 8081).ready("192.168.1.10", "node-a");
    second.0.name = "web-second".into();
    let c = cluster(
        vec![svc("web").cluster_ip("10.96.0.10").tcp(80)],
        vec![
            eps("web", "", Protocol::Tcp, 8080).ready("192.168.1.10", "node-a"),
            second,
        ],
    );
    assert_eq!(
        web_port_endpoints(&c),
        ["192.168.1.10:8080 ready", "192.168.1.10:8081 ready"]
    );
}

#[test]
fn a_reused_pod_ip_is_the_pod_that_is_not_terminating() {
    // The pod network gave a terminating pod's IP to a new pod that is not ready yet. As
    // kube-proxy, the new pod's entry wins in either slice order, so the old pod's serving
    // fallback does not send traffic to an IP the new pod owns.
    for old_first in [true, false] {
        let old =
            eps("web", "", Protocol::Tcp, 8080).endpoint("10.244.0.2", "node-a", false, true, true);
        let mut new = eps("web", "", Protocol::Tcp, 8080).endpoint(
            "10.244.0.2",
            "node-a",
            false,
            false,
            false,
        );
        // The slice names decide the order the slices are read in.
        let (a, b) = if old_first {
            ("web-a", "web-b")
        } else {
            ("web-b", "web-a")
        };
        let mut old = old;
        old.0.name = a.into();
        new.0.name = b.into();
        let c = cluster(
            vec![svc("web").cluster_ip("10.96.0.10").tcp(80)],
            vec![old, new],
        );
        assert_eq!(web_port_endpoints(&c), ["10.244.0.2:8080 not-ready"]);
        let d = desired(&c, &config(), &host()).state;
        let vs = d
            .services
            .iter()
            .find(|(k, _)| k.to_string() == "10.96.0.10:80/tcp")
            .map(|(_, v)| v)
            .expect("the cluster IP's virtual server");
        assert!(
            vs.destinations.is_empty(),
            "old pod first: {old_first}: {vs:?}"
        );
    }
}

#[test]
fn a_health_check_counts_only_endpoints_traffic_can_reach() {
    let mut lb = svc("lb")
        .cluster_ip("10.96.0.50")
        .port("http", Protocol::Tcp, 80)
        .node_port(30050)
        .load_balancer("203.0.113.50")
        .etp_local();
    lb.0.health_check_node_port = Some(32000);
    // A pod without the Service's named target port: the EndpointSlice controller lists it
    // in a slice without ports, and kube-proxy's endpoints map never holds it.
    let mut portless = eps("lb", "http", Protocol::Tcp, 8080).ready("10.244.0.2", "node-a");
    portless.0.ports.clear();
    let count = |slices: Vec<crate::model::fixtures::Eps>| {
        let c = cluster(vec![lb.clone()], slices);
        crate::model::snapshot::endpoints::health_checks(&c, "node-a", &[Family::V4])
            .iter()
            .map(|h| h.local_endpoints)
            .collect::<Vec<_>>()
    };
    assert_eq!(count(vec![portless.clone()]), [0]);
    // Ready and terminating (publishNotReadyAddresses keeps terminating pods ready): kube-proxy
    // counts what is ready.
    let mut published =
        eps("lb", "http", Protocol::Tcp, 8080).endpoint("10.244.0.3", "node-a", true, true, true);
    published.0.name = "lb-published".into();
    assert_eq!(count(vec![portless, published]), [1]);
}

#[test]
fn load_balancer_source_ranges_fill_the_firewall_sets_and_filter_the_node() {
    let mut s = svc("fw")
        .cluster_ip("10.96.0.30")
        .tcp(443)
        .node_port(30443)
        .load_balancer("203.0.113.9");
    s.0.load_balancer_source_ranges = vec!["198.51.100.0/24".parse().unwrap()];
    let mut open = svc("open")
        .cluster_ip("10.96.0.31")
        .tcp(443)
        .node_port(30444)
        .load_balancer("203.0.113.10");
    open.0.load_balancer_source_ranges = vec!["0.0.0.0/0".parse().unwrap()];
    let mut mine = svc("mine")
        .cluster_ip("10.96.0.32")
        .tcp(443)
        .node_port(30445)
        .load_balancer("203.0.113.11");
    mine.0.load_balancer_source_ranges = vec!["192.168.1.0/24".parse().unwrap()];
    // A range that holds another address of the host, not the node's IP.
    let mut side = svc("side")
        .cluster_ip("10.96.0.33")
        .tcp(443)
        .node_port(30446)
        .load_balancer("203.0.113.12");
    side.0.load_balancer_source_ranges = vec!["10.1.0.0/16".parse().unwrap()];
    let mut c = cluster(vec![s, open, mine, side], vec![]);
    c.node = Some(crate::model::snapshot::cluster::Node {
        name: "node-a".into(),
        addresses: vec![ip("192.168.1.10")],
        ..Default::default()
    });
    let mut h = host();
    h.addresses.push(LocalAddress {
        interface: "eth1".into(),
        address: ip("10.1.2.3"),
    });
    let d = desired(&c, &config(), &h).state;
    assert_eq!(
        entries(&d, "KUBE-LOAD-BALANCER-FW"),
        [
            "203.0.113.9,tcp:443",
            "203.0.113.11,tcp:443",
            "203.0.113.12,tcp:443"
        ]
    );
    assert_eq!(
        entries(&d, "KUBE-LOAD-BALANCER-SOURCE-CIDR"),
        [
            "203.0.113.9,tcp:443,198.51.100.0/24",
            "203.0.113.11,tcp:443,192.168.1.0/24",
            "203.0.113.12,tcp:443,10.1.0.0/16"
        ]
    );
    // The node's IP (192.168.1.10) is inside mine's range: it may reach it; not fw's, nor
    // side's, whose range holds only another address of the host (as kube-proxy).
    assert_eq!(
        entries(&d, "KUBE-LOAD-BALANCER-SOURCE-IP"),
        ["203.0.113.11,tcp:443,203.0.113.11"]
    );
    let rules = &d.rules[&Family::V4].rules;
    let out: Vec<&String> = rules
        .iter()
        .filter(|(_, r)| r.starts_with("-A KUBE-IPVS-OUT-FILTER"))
        .map(|(_, r)| r)
        .collect();
    assert_eq!(
        out,
        [
            "-A KUBE-IPVS-OUT-FILTER -s 203.0.113.9 -m ipvs --vaddr 203.0.113.9 --vproto tcp --vport 443 -j DROP",
            "-A KUBE-IPVS-OUT-FILTER -s 203.0.113.12 -m ipvs --vaddr 203.0.113.12 --vproto tcp --vport 443 -j DROP"
        ]
    );
}

/// One virtual server of `protocol` that wants `10.244.1.2:8080` at weight 1, and an
/// observation of it that also holds `10.244.1.3:8080` at `weight` with `counts`.
fn draining_case(
    protocol: Protocol,
    weight: u32,
    counts: Option<(u32, u32)>,
) -> (
    KernelState,
    KernelState,
    VsKey,
    crate::model::kernel::RealServer,
) {
    let k = key("10.96.0.10", protocol, 80);
    let kept: crate::model::kernel::RealServer = "10.244.1.2:8080".parse().unwrap();
    let gone: crate::model::kernel::RealServer = "10.244.1.3:8080".parse().unwrap();
    let want_vs = VirtualServer {
        scheduler: "rr".into(),
        destinations: [(kept, 1)].into(),
        ..VirtualServer::default()
    };
    let mut have_vs = want_vs.clone();
    have_vs.destinations.insert(gone, weight);
    if let Some((active, inactive)) = counts {
        have_vs
            .connections
            .insert(gone, crate::model::kernel::Connections { active, inactive });
    }
    let mut want = KernelState::default();
    want.services.insert(k, want_vs);
    let mut have = KernelState::default();
    have.services.insert(k, have_vs);
    (want, have, k, gone)
}

#[test]
fn removed_real_servers_drain_by_protocol_connections_and_bound() {
    use Protocol::{Sctp, Tcp, Udp};
    // (protocol, observed weight, connection counts read now, past the bound, expected op)
    type Case = (Protocol, u32, Option<(u32, u32)>, bool, &'static str);
    let table: &[Case] = &[
        // Counts unknown (between full syncs): never delete, drain.
        (Tcp, 1, None, false, "weight 0"),
        // Read now and idle: nothing to wait for (kube-proxy does the same).
        (Tcp, 1, Some((0, 0)), false, "delete"),
        (Tcp, 1, Some((1, 0)), false, "weight 0"),
        (Tcp, 1, Some((0, 3)), false, "weight 0"),
        // Already draining.
        (Tcp, 0, Some((2, 1)), false, "nothing"),
        (Tcp, 0, None, false, "nothing"),
        (Tcp, 0, Some((0, 0)), false, "delete"),
        // The bound ends a drain whatever its connections.
        (Tcp, 0, Some((5, 0)), true, "delete"),
        (Tcp, 0, None, true, "delete"),
        // Datagrams do not drain (expire_nodest_conn ends their flows).
        (Udp, 1, Some((0, 4)), false, "delete"),
        (Udp, 1, None, false, "delete"),
        (Sctp, 1, Some((1, 0)), false, "delete"),
    ];
    for (i, (protocol, weight, counts, past_bound, want_op)) in table.iter().enumerate() {
        let (want, have, k, gone) = draining_case(*protocol, *weight, *counts);
        let expired = if *past_bound {
            BTreeSet::from([(k, gone)])
        } else {
            BTreeSet::new()
        };
        let ops = crate::model::plan::plan_draining(&want, &have, &[], &expired).ops;
        let got = match ops.as_slice() {
            [] => "nothing",
            [Op::DelDestination { destination, .. }] if *destination == gone => "delete",
            [
                Op::UpdateDestination {
                    destination,
                    weight: 0,
                    ..
                },
            ] if *destination == gone => "weight 0",
            _ => panic!("case {i}: {ops:?}"),
        };
        assert_eq!(got, *want_op, "case {i}: {protocol:?} w{weight} {counts:?}");
    }
}

#[test]
fn a_returning_endpoint_gets_its_weight_back_and_a_deleted_service_goes_at_once() {
    // The endpoint comes back while its real server drains: weight 1 again, in place, so the
    // connections that were draining to it survive (kube-proxy deletes and re-adds it).
    let (mut want, have, k, gone) = draining_case(Protocol::Tcp, 0, Some((3, 0)));
    want.services
        .get_mut(&k)
        .unwrap()
        .destinations
        .insert(gone, 1);
    assert_eq!(
        plan(&want, &have, &[]).ops,
        [Op::UpdateDestination {
            key: k,
            destination: gone,
            weight: 1
        }]
    );
    // The whole Service goes: its virtual server is deleted at once, draining or not.
    let (_, mut have, k, _) = draining_case(Protocol::Tcp, 0, Some((3, 0)));
    have.addresses.insert(k.address);
    let mut want = KernelState::default();
    want.addresses.insert(ip("10.96.0.99"));
    let ops = plan(&want, &have, &[]).ops;
    assert!(ops.contains(&Op::DelService(k)), "{ops:?}");
    assert!(
        !ops.iter()
            .any(|o| matches!(o, Op::UpdateDestination { .. } | Op::DelDestination { .. })),
        "{ops:?}"
    );
}

#[test]
fn the_drain_record_starts_clocks_keeps_them_and_forgets_what_is_gone() {
    use crate::model::plan::drain::Draining;
    let t0 = std::time::Instant::now();
    let bound = Duration::from_secs(600);
    let (want, have, k, gone) = draining_case(Protocol::Tcp, 0, None);
    let mut d = Draining::default();
    // A restart finds a weight-0 real server nobody wants: it keeps draining, from now.
    d.track(&want, &have, t0);
    assert_eq!(d.len(), 1);
    assert_eq!(d.since(&(k, gone)), Some(t0));
    assert!(d.expired(t0, bound).is_empty());
    assert_eq!(d.next_deadline(bound), Some(t0 + bound));
    // Later syncs keep the first start.
    let t1 = t0 + Duration::from_secs(599);
    d.track(&want, &have, t1);
    assert_eq!(d.since(&(k, gone)), Some(t0));
    assert!(d.expired(t1, bound).is_empty());
    assert_eq!(d.keys().collect::<Vec<_>>(), [&(k, gone)]);
    let t2 = t0 + bound;
    assert_eq!(d.expired(t2, bound), BTreeSet::from([(k, gone)]));
    // A zero bound expires every drain at once.
    assert_eq!(d.expired(t0, Duration::ZERO).len(), 1);
    // Deleted, or wanted again: forgotten.
    d.track(&want, &want, t2);
    assert!(d.is_empty());
    // UDP real servers never drain.
    let (want, have, _, _) = draining_case(Protocol::Udp, 0, None);
    d.track(&want, &have, t2);
    assert!(d.is_empty());
}

#[test]
fn topology_hints_pick_endpoints_by_the_nodes_zone_label_and_node_name() {
    let slices = || {
        vec![
            eps("web", "", Protocol::Tcp, 8080)
                .hinted("10.244.0.2", "node-a", &["z1"], &["node-a"])
                .hinted("10.244.1.2", "node-b", &["z1"], &["node-b"])
                .hinted("10.244.2.2", "node-c", &["z2"], &["node-c"]),
        ]
    };
    let vs_dests = |zone: Option<&str>, gate: bool| {
        let mut c = cluster(vec![svc("web").cluster_ip("10.96.0.10").tcp(80)], slices());
        c.node = Some(node_in(zone));
        let cfg = crate::model::snapshot::config::ProxyConfig {
            prefer_same_node: gate,
            ..config()
        };
        dests(&desired(&c, &cfg, &host()).state.services[&key("10.96.0.10", Protocol::Tcp, 80)])
    };
    // PreferSameNode: this node's own endpoint.
    assert_eq!(vs_dests(Some("z1"), true), ["10.244.0.2:8080 w1"]);
    // Without the gate, PreferSameZone: the zone's endpoints.
    assert_eq!(
        vs_dests(Some("z1"), false),
        ["10.244.0.2:8080 w1", "10.244.1.2:8080 w1"]
    );
    // A zone nobody hinted, or no zone label: every endpoint.
    let all = [
        "10.244.0.2:8080 w1",
        "10.244.1.2:8080 w1",
        "10.244.2.2:8080 w1",
    ];
    assert_eq!(vs_dests(Some("z9"), false), all);
    assert_eq!(vs_dests(None, false), all);
}

#[test]
fn health_check_node_ports_count_local_ready_endpoints() {
    let mut lb = svc("lb")
        .cluster_ip("10.96.0.50")
        .tcp(80)
        .node_port(30050)
        .load_balancer("203.0.113.50")
        .etp_local();
    lb.0.health_check_node_port = Some(32000);
    let mut cluster_policy = svc("plain")
        .cluster_ip("10.96.0.51")
        .tcp(80)
        .node_port(30051)
        .load_balancer("203.0.113.51");
    cluster_policy.0.health_check_node_port = Some(32001);
    let c = cluster(
        vec![lb, cluster_policy],
        vec![
            eps("lb", "", Protocol::Tcp, 8080)
                .ready("10.244.0.2", "node-a")
                .ready("10.244.1.2", "node-b")
                .endpoint("10.244.0.3", "node-a", false, true, true),
        ],
    );
    let hc =
        crate::model::snapshot::endpoints::health_checks(&c, "node-a", &[Family::V4, Family::V6]);
    assert_eq!(
        hc,
        vec![crate::model::snapshot::endpoints::HealthCheck {
            family: Family::V4,
            port: 32000,
            service: crate::model::snapshot::cluster::ServiceRef::new("default", "lb"),
            local_endpoints: 1,
        }]
    );
}

#[test]
fn a_dual_stack_health_check_counts_each_familys_endpoints_apart() {
    let mut lb = svc("lb")
        .cluster_ip("10.96.0.50")
        .cluster_ip("fd00::50")
        .tcp(80)
        .node_port(30050)
        .load_balancer("203.0.113.50")
        .etp_local();
    lb.0.health_check_node_port = Some(32000);
    let mut v6 = eps("lb", "", Protocol::Tcp, 8080)
        .ready("fd00:244::2", "node-a")
        .ready("fd00:244::3", "node-a");
    v6.0.name = "lb-v6".into();
    v6.0.family = Family::V6;
    let c = cluster(
        vec![lb],
        vec![
            eps("lb", "", Protocol::Tcp, 8080).ready("10.244.1.2", "node-b"),
            v6,
        ],
    );
    let counts = |families: &[Family]| -> Vec<(Family, usize)> {
        crate::model::snapshot::endpoints::health_checks(&c, "node-a", families)
            .into_iter()
            .map(|h| (h.family, h.local_endpoints))
            .collect()
    };
    // The IPv4 health check says no local endpoint although the node has IPv6 ones: a load
    // balancer probing over IPv4 must not send IPv4 traffic here.
    assert_eq!(
        counts(&[Family::V4, Family::V6]),
        [(Family::V4, 0), (Family::V6, 2)]
    );
    assert_eq!(counts(&[Family::V4]), [(Family::V4, 0)]);
}

#[test]
fn local_policies_without_local_endpoints_are_counted() {
    let mut itp = svc("itp").cluster_ip("10.96.0.60").tcp(80);
    itp.0.internal_traffic_policy = crate::model::snapshot::cluster::TrafficPolicy::Local;
    let etp = svc("etp")
        .cluster_ip("10.96.0.61")
        .tcp(80)
        .node_port(30061)
        .etp_local();
    let c = cluster(
        vec![itp, etp],
        vec![
            eps("itp", "", Protocol::Tcp, 8080).ready("10.244.1.2", "node-b"),
            eps("etp", "", Protocol::Tcp, 8080).ready("10.244.1.3", "node-b"),
        ],
    );
    let d = desired(&c, &config(), &host());
    assert_eq!(d.no_local_endpoints.get(&Family::V4), Some(&(1, 1)));
}

/// internalTrafficPolicy Local with no local endpoint: the cluster IP falls back to the
/// cluster-wide endpoints when the Service is reachable from outside (kube-proxy computes
/// them for it), and gets none otherwise. Found by the differential corpus (011).
#[test]
fn internal_local_without_local_endpoints_falls_back_only_when_externally_reachable() {
    let mut reachable = svc("np")
        .cluster_ip("10.96.0.70")
        .tcp(80)
        .node_port(30070)
        .etp_local();
    reachable.0.internal_traffic_policy = crate::model::snapshot::cluster::TrafficPolicy::Local;
    let mut internal_only = svc("ci").cluster_ip("10.96.0.71").tcp(80);
    internal_only.0.internal_traffic_policy = crate::model::snapshot::cluster::TrafficPolicy::Local;
    let c = cluster(
        vec![reachable, internal_only],
        vec![
            eps("np", "", Protocol::Tcp, 8080).ready("10.244.1.2", "node-b"),
            eps("ci", "", Protocol::Tcp, 8080).ready("10.244.1.3", "node-b"),
        ],
    );
    let d = desired(&c, &config(), &host());
    let reals = |k: VsKey| d.state.services[&k].destinations.len();
    assert_eq!(reals(key("10.96.0.70", Protocol::Tcp, 80)), 1);
    assert_eq!(reals(key("10.96.0.71", Protocol::Tcp, 80)), 0);
}

/// --nodeport-addresses matching no node address: no node-port virtual server and no entry
/// in the node-port sets, as kube-proxy (found by the differential corpus, 036).
#[test]
fn node_ports_without_a_matching_node_address_leave_no_set_entry() {
    let np = svc("np").cluster_ip("10.96.0.80").tcp(80).node_port(30080);
    let c = cluster(
        vec![np],
        vec![eps("np", "", Protocol::Tcp, 8080).ready("10.244.1.2", "node-b")],
    );
    let cfg = crate::model::snapshot::config::ProxyConfig {
        nodeport_addresses: vec!["172.31.0.0/16".parse().unwrap()],
        ..config()
    };
    let d = desired(&c, &cfg, &host());
    let entries = |name: &str| {
        d.state
            .sets
            .get(&named(name))
            .map(|s| s.entries.len())
            .unwrap_or(0)
    };
    assert_eq!(entries("KUBE-NODE-PORT-TCP"), 0);
    assert!(
        d.state.services.keys().all(|k| k.port != 30080),
        "{:?}",
        d.state.services.keys()
    );
    let d = desired(&c, &config(), &host());
    assert_eq!(
        d.state
            .sets
            .get(&named("KUBE-NODE-PORT-TCP"))
            .map(|s| s.entries.len()),
        Some(1)
    );
}

#[test]
fn ipvs_sysctls_and_strict_arp() {
    let plain = crate::model::desired::sysctls(&config());
    for key in [
        "net/ipv4/vs/conntrack",
        "net/ipv4/vs/expire_nodest_conn",
        "net/ipv4/vs/expire_quiescent_template",
        "net/ipv4/ip_forward",
    ] {
        assert_eq!(plain.get(key).map(String::as_str), Some("1"), "{key}");
    }
    assert!(!plain.contains_key("net/ipv4/conf/all/arp_ignore"));
    assert!(!plain.contains_key("net/ipv4/vs/conn_reuse_mode"));
    let strict = crate::model::desired::sysctls(&crate::model::snapshot::config::ProxyConfig {
        strict_arp: true,
        ..config()
    });
    assert_eq!(
        strict
            .get("net/ipv4/conf/all/arp_ignore")
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(
        strict
            .get("net/ipv4/conf/all/arp_announce")
            .map(String::as_str),
        Some("2")
    );
}

#[test]
fn conn_reuse_mode_follows_kube_proxys_kernel_rule() {
    use crate::model::snapshot::config::{ConnReuse, KernelVersion, ProxyConfig};
    let parse = |r: &str| KernelVersion::parse(r).unwrap_or_else(|| panic!("{r}"));
    assert_eq!(
        parse("6.1.0-56-cloud-amd64"),
        KernelVersion { major: 6, minor: 1 }
    );
    assert_eq!(
        parse("5.4.17-2136.el8uek.x86_64"),
        KernelVersion { major: 5, minor: 4 }
    );
    assert_eq!(
        parse("4.19"),
        KernelVersion {
            major: 4,
            minor: 19
        }
    );
    assert_eq!(KernelVersion::parse("garbage"), None);
    assert_eq!(KernelVersion::parse("6"), None);
    let mode = |release: &str| {
        let config = ProxyConfig {
            kernel_version: KernelVersion::parse(release),
            ..config()
        };
        crate::model::desired::sysctls(&config)
            .get("net/ipv4/vs/conn_reuse_mode")
            .cloned()
    };
    // 4.1 <= kernel < 5.9: set to 0; from 5.9, and below 4.1, and unknown: left alone.
    for (release, want) in [
        ("3.10.0-1160.el7.x86_64", None),
        ("4.0.9", None),
        ("4.1.0", Some("0")),
        ("4.19.0-26-amd64", Some("0")),
        ("5.8.18", Some("0")),
        ("5.9.0", None),
        ("6.1.0-56-cloud-amd64", None),
        ("10.0.0", None),
        ("", None),
    ] {
        assert_eq!(mode(release).as_deref(), want, "{release}");
    }
    assert_eq!(ConnReuse::for_kernel(None), ConnReuse::Unknown);
    assert_eq!(
        ConnReuse::for_kernel(Some(parse("3.10"))),
        ConnReuse::Unsupported
    );
}

/// What kube-proxy left on a node for Services deleted before the agent's first sync: node
/// ports on the node's own address (not on `kube-ipvs0`), an external IP and a load-balancer
/// IP, each named by kube-proxy's sets. The agent deletes them, as kube-proxy would on its
/// restart, and leaves a foreign virtual server on a node address alone.
#[test]
fn a_takeover_deletes_what_kube_proxys_sets_prove_it_made() {
    use crate::model::kernel::{Set, SetKind};
    let empty = VirtualServer {
        scheduler: "rr".into(),
        sched_flags: 0,
        persistence: None,
        destinations: Default::default(),
        connections: Default::default(),
    };
    let mut kernel = KernelState::default();
    let mut set = |name: &str, kind: SetKind, family: Family, entries: Vec<SetEntry>| {
        kernel.sets.insert(
            named(name),
            Set {
                kind,
                family,
                entries: entries.into_iter().collect(),
            },
        );
    };
    set(
        "KUBE-NODE-PORT-TCP",
        SetKind::BitmapPort,
        Family::V4,
        vec![SetEntry::Port(31364)],
    );
    set(
        "KUBE-NODE-PORT-UDP",
        SetKind::BitmapPort,
        Family::V4,
        vec![SetEntry::Port(31365)],
    );
    set(
        "KUBE-NODE-PORT-SCTP-HASH",
        SetKind::HashIpPort,
        Family::V4,
        vec![SetEntry::IpPort(ip("192.168.1.10"), Protocol::Sctp, 31366)],
    );
    set(
        "KUBE-EXTERNAL-IP",
        SetKind::HashIpPort,
        Family::V4,
        vec![SetEntry::IpPort(ip("192.0.2.68"), Protocol::Tcp, 80)],
    );
    set(
        "KUBE-LOAD-BALANCER-LOCAL",
        SetKind::HashIpPort,
        Family::V4,
        vec![SetEntry::IpPort(ip("203.0.113.68"), Protocol::Tcp, 80)],
    );
    set(
        "KUBE-6-NODE-PORT-TCP",
        SetKind::BitmapPort,
        Family::V6,
        vec![SetEntry::Port(31364)],
    );
    let kube_proxys = [
        key("192.168.1.10", Protocol::Tcp, 31364),
        key("192.168.1.10", Protocol::Udp, 31365),
        key("192.168.1.10", Protocol::Sctp, 31366),
        key("192.0.2.68", Protocol::Tcp, 80),
        key("203.0.113.68", Protocol::Tcp, 80),
        key("fd00::10", Protocol::Tcp, 31364),
    ];
    let foreign = [
        // Another port on the node's address, the same port in another protocol, another
        // port on the external IP.
        key("192.168.1.10", Protocol::Tcp, 8443),
        key("192.168.1.10", Protocol::Sctp, 31364),
        key("192.0.2.68", Protocol::Tcp, 443),
    ];
    for k in kube_proxys.iter().chain(&foreign) {
        kernel.services.insert(*k, empty.clone());
    }
    let want = desired(&cluster(vec![], vec![]), &config(), &host()).state;
    for ops in [
        plan(&want, &kernel, &[]).ops,
        crate::model::plan::cleanup(&kernel, &[]).ops,
    ] {
        for k in &kube_proxys {
            assert!(ops.contains(&Op::DelService(*k)), "{k} stays");
        }
        for k in &foreign {
            assert!(!ops.contains(&Op::DelService(*k)), "{k} deleted");
        }
    }
}
