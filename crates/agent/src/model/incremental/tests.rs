//! For random sequences of changes, the state kept by [`Kept::update`] is the state
//! [`desired`] computes from scratch, and every key that moved is in the returned scope.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::model::desired::desired;
use crate::model::fixtures::{cluster, config, eps, host, svc};
use crate::model::kernel::{KernelState, SetEntry};
use crate::model::plan::{Scope, plan, plan_draining, plan_scoped};
use crate::model::snapshot::cluster::{Protocol, ServiceType, SliceRef, TrafficPolicy};

/// `state` with the plan from it to `want` applied, as the kernel would hold it.
fn programmed(state: &KernelState, ops: &[crate::model::plan::Op]) -> KernelState {
    let mut kernel = crate::dataplane::memory::Memory {
        state: state.clone(),
        ..Default::default()
    };
    for op in ops {
        kernel.apply_op(op).unwrap_or_else(|e| panic!("{op}: {e}"));
    }
    kernel.state
}

/// One change: a Service (re)made or deleted, a slice (re)made or deleted. Small pools of
/// names and addresses make Services share external IPs, endpoints and, now and then, a
/// virtual server (a conflict).
#[derive(Debug, Clone)]
pub(crate) enum Change {
    Service {
        which: u8,
        kind: u8,
        ip: u8,
        ports: u8,
        external: Option<u8>,
        lb: Option<u8>,
        local: u8,
        ranges: bool,
    },
    DeleteService(u8),
    Slice {
        which: u8,
        slice: u8,
        endpoints: Vec<(u8, u8, u8)>,
    },
    DeleteSlice(u8, u8),
}

pub(crate) fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (0..6u8, 0..3u8, 0..8u8, 1..4u8, proptest::option::of(0..3u8), proptest::option::of(0..3u8), 0..4u8, any::<bool>())
            .prop_map(|(which, kind, ip, ports, external, lb, local, ranges)| Change::Service {
                which, kind, ip, ports, external, lb, local, ranges,
            }),
        1 => (0..6u8).prop_map(Change::DeleteService),
        4 => (0..6u8, 0..2u8, proptest::collection::vec((0..6u8, 0..2u8, 0..4u8), 0..4))
            .prop_map(|(which, slice, endpoints)| Change::Slice { which, slice, endpoints }),
        1 => (0..6u8, 0..2u8).prop_map(|(w, s)| Change::DeleteSlice(w, s)),
    ]
}

fn name(which: u8) -> String {
    format!("s{which}")
}

/// Applies `c` to `cl`; returns the Service it concerns.
pub(crate) fn apply(cl: &mut Cluster, c: &Change) -> ServiceRef {
    match c {
        Change::Service {
            which,
            kind,
            ip,
            ports,
            external,
            lb,
            local,
            ranges,
        } => {
            // Cluster IPs from a pool of 8 for 6 Services: two may want one virtual server.
            let mut s = svc(&name(*which)).cluster_ip(&format!("10.96.0.{}", 10 + ip));
            for p in 0..*ports {
                let proto = if p == 1 { Protocol::Udp } else { Protocol::Tcp };
                s = s.port(&format!("p{p}"), proto, 80 + u16::from(p));
                if *kind >= 1 {
                    s = s.node_port(30000 + u16::from(*which) * 10 + u16::from(p));
                }
            }
            if let Some(e) = external {
                s = s.external_ip(&format!("198.51.100.{e}"));
            }
            if *kind == 2 {
                s = s.kind(ServiceType::LoadBalancer);
                if let Some(l) = lb {
                    s = s.load_balancer(&format!("203.0.113.{l}"));
                }
                if *ranges {
                    s.0.load_balancer_source_ranges = vec!["192.0.2.0/24".parse().unwrap()];
                }
            }
            if local & 1 == 1 {
                s.0.external_traffic_policy = TrafficPolicy::Local;
            }
            if local & 2 == 2 {
                s.0.internal_traffic_policy = TrafficPolicy::Local;
            }
            let id = s.0.id.clone();
            cl.services.insert(id.clone(), std::sync::Arc::new(s.0));
            id
        }
        Change::DeleteService(which) => {
            let id = ServiceRef::new("default", name(*which));
            cl.services.remove(&id);
            id
        }
        Change::Slice {
            which,
            slice,
            endpoints,
        } => {
            let mut e = eps(&name(*which), &format!("p{slice}"), Protocol::Tcp, 8080);
            e.0.name = format!("{}-{slice}", name(*which)).into();
            for (addr, node, state) in endpoints {
                let node = if *node == 0 { "node-a" } else { "node-b" };
                let (ready, serving, terminating) = match state {
                    0 => (true, true, false),
                    1 => (false, true, true),
                    2 => (false, false, true),
                    _ => (false, false, false),
                };
                e = e.endpoint(
                    &format!("10.244.0.{addr}"),
                    node,
                    ready,
                    serving,
                    terminating,
                );
            }
            let id = e.0.service.clone();
            cl.slices.insert(
                SliceRef::new("default", e.0.name.clone()),
                std::sync::Arc::new(e.0),
            );
            id
        }
        Change::DeleteSlice(which, slice) => {
            cl.slices.remove(&SliceRef::new(
                "default",
                format!("{}-{slice}", name(*which)),
            ));
            ServiceRef::new("default", name(*which))
        }
    }
}

/// The keys that differ between two states, as a scope.
fn moved(a: &KernelState, b: &KernelState) -> Scope {
    let mut s = Scope::default();
    for k in a.services.keys().chain(b.services.keys()) {
        if a.services.get(k) != b.services.get(k) {
            s.services.insert(*k);
        }
    }
    for (name, set) in a.sets.iter().chain(b.sets.iter()) {
        let (x, y) = (
            a.sets.get(name).map(|s| &s.entries),
            b.sets.get(name).map(|s| &s.entries),
        );
        let empty = BTreeSet::new();
        let (x, y) = (x.unwrap_or(&empty), y.unwrap_or(&empty));
        let diff: BTreeSet<SetEntry> = x.symmetric_difference(y).copied().collect();
        let _ = set;
        if !diff.is_empty() {
            s.entries.entry(*name).or_default().extend(diff);
        }
    }
    s.addresses = a
        .addresses
        .symmetric_difference(&b.addresses)
        .copied()
        .collect();
    for f in a.rules.keys().chain(b.rules.keys()) {
        if a.rules.get(f) != b.rules.get(f) {
            s.rules.insert(*f);
        }
    }
    s
}

fn covers(scope: &Scope, needed: &Scope) -> bool {
    needed.services.is_subset(&scope.services)
        && needed.addresses.is_subset(&scope.addresses)
        && needed.rules.is_subset(&scope.rules)
        && needed
            .entries
            .iter()
            .all(|(n, e)| scope.entries.get(n).is_some_and(|have| e.is_subset(have)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn updates_reach_the_state_a_build_computes(
        start in proptest::collection::vec(change(), 0..8),
        changes in proptest::collection::vec(proptest::collection::vec(change(), 1..3), 1..12),
    ) {
        let cfg = config();
        let h = host();
        let mut cl = cluster(vec![], vec![]);
        for c in &start {
            apply(&mut cl, c);
        }
        let mut inc = Kept::build(&cl, &cfg, &h);
        prop_assert_eq!(&inc.desired().state, &desired(&cl, &cfg, &h).state);
        prop_assert!(inc.is_at(&cl, &h));
        // The kernel as the plans leave it: a scoped plan must leave it as a full one would.
        let mut kernel = programmed(&KernelState::default(), &plan(&inc.desired().state, &KernelState::default(), &[]).ops);
        for (i, batch) in changes.iter().enumerate() {
            let before = inc.desired().state.clone();
            let changed: BTreeSet<ServiceRef> = batch.iter().map(|c| apply(&mut cl, c)).collect();
            let want = desired(&cl, &cfg, &h);
            // A state that says it is what these objects build must be (a full sync keeps it).
            if inc.is_at(&cl, &h) {
                prop_assert_eq!(&inc.desired().state, &want.state, "kept after {:?}", batch);
            }
            // The changes as the loop names them, or as the state finds them itself (what a
            // full sync does).
            let updated = if i % 2 == 0 { inc.update(&cl, &h, &changed) } else { inc.bring_to(&cl, &h) };
            match updated {
                Some(scope) => {
                    prop_assert!(inc.is_at(&cl, &h), "updated to this cluster");
                    let got = inc.desired();
                    prop_assert_eq!(&got.state, &want.state, "after {:?}", batch);
                    prop_assert_eq!(&got.owners, &want.owners);
                    let counts = |d: &Desired| d.no_local_endpoints.iter()
                        .filter(|(_, c)| **c != (0, 0)).map(|(f, c)| (*f, *c)).collect::<Vec<_>>();
                    prop_assert_eq!(counts(got), counts(&want));
                    let needed = moved(&before, &want.state);
                    prop_assert!(covers(&scope, &needed), "scope {:?} misses {:?}", scope, needed);
                    let none = BTreeSet::new();
                    let full = programmed(&kernel, &plan_draining(&want.state, &kernel, &[], &none).ops);
                    let scoped = programmed(&kernel, &plan_scoped(&got.state, &kernel, &[], &none, &scope).ops);
                    prop_assert_eq!(&scoped, &full, "scoped plan after {:?}", batch);
                    kernel = full;
                }
                // Declined (a conflict): nothing was touched, and a build takes over.
                None => {
                    prop_assert_eq!(&inc.desired().state, &before);
                    inc = Kept::build(&cl, &cfg, &h);
                    let none = BTreeSet::new();
                    kernel = programmed(&kernel, &plan_draining(&inc.desired().state, &kernel, &[], &none).ops);
                }
            }
        }
    }
}

#[test]
fn one_endpoint_change_moves_one_real_server_and_nothing_else() {
    let cfg = config();
    let h = host();
    let mut cl = cluster(
        vec![
            svc("a").cluster_ip("10.96.0.1").tcp(80),
            svc("b").cluster_ip("10.96.0.2").tcp(80),
        ],
        vec![
            eps("a", "", Protocol::Tcp, 8080).ready("10.244.0.1", "node-b"),
            eps("b", "", Protocol::Tcp, 8080).ready("10.244.0.2", "node-b"),
        ],
    );
    let mut inc = Kept::build(&cl, &cfg, &h);
    let key = SliceRef::new("default", "a--abc");
    std::sync::Arc::make_mut(cl.slices.get_mut(&key).unwrap()).endpoints[0].address =
        "10.244.0.9".parse().unwrap();
    let scope = inc
        .update(&cl, &h, &BTreeSet::from([ServiceRef::new("default", "a")]))
        .expect("no conflict");
    assert_eq!(inc.desired().state, desired(&cl, &cfg, &h).state);
    assert_eq!(
        scope
            .services
            .iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>(),
        ["10.96.0.1:80/tcp"]
    );
    assert!(scope.addresses.is_empty() && scope.rules.is_empty());
    // The Node changing is beyond one Service.
    cl.node = Some(crate::model::fixtures::node_in(Some("z")));
    assert!(inc.update(&cl, &h, &BTreeSet::new()).is_none());
}

#[test]
fn a_state_knows_the_cluster_it_is_for_and_brings_itself_to_another() {
    let cfg = config();
    let h = host();
    let mut cl = cluster(
        vec![svc("a").cluster_ip("10.96.0.1").tcp(80)],
        vec![eps("a", "", Protocol::Tcp, 8080).ready("10.244.0.1", "node-b")],
    );
    let mut inc = Kept::build(&cl, &cfg, &h);
    assert!(inc.is_at(&cl, &h));
    // A snapshot sharing the objects is the same input, and so are equal objects made anew.
    assert!(inc.is_at(&cl.clone(), &h));
    let mut anew = cl.clone();
    anew.slices = anew
        .slices
        .iter()
        .map(|(k, s)| (k.clone(), std::sync::Arc::new((**s).clone())))
        .collect();
    assert!(inc.is_at(&anew, &h));
    let mut fewer = cl.clone();
    fewer.slices.clear();
    assert!(!inc.is_at(&fewer, &h));
    let mut other_node = cl.clone();
    other_node.node = Some(crate::model::fixtures::node_in(Some("z")));
    assert!(!inc.is_at(&other_node, &h));
    assert!(
        inc.bring_to(&other_node, &h).is_none(),
        "the Node reaches every Service: a build"
    );
    let mut other_host = h.clone();
    other_host
        .addresses
        .push(crate::model::desired::LocalAddress {
            interface: "eth1".into(),
            address: "192.168.9.9".parse().unwrap(),
        });
    assert!(!inc.is_at(&cl, &other_host));
    assert!(inc.bring_to(&cl, &other_host).is_none());
    // A new Service found by the state itself, against the snapshot it holds.
    cl.services.insert(
        ServiceRef::new("default", "b"),
        std::sync::Arc::new(svc("b").cluster_ip("10.96.0.2").tcp(80).0),
    );
    let scope = inc.bring_to(&cl, &h).expect("one Service more");
    assert_eq!(
        scope
            .services
            .iter()
            .map(|k| k.to_string())
            .collect::<Vec<_>>(),
        ["10.96.0.2:80/tcp"]
    );
    assert!(inc.is_at(&cl, &h));
    assert_eq!(inc.desired().state, desired(&cl, &cfg, &h).state);
    assert!(
        inc.bring_to(&cl, &h).expect("nothing changed").is_empty(),
        "brought to the cluster it is for, nothing moves"
    );
    // An update told of one Service of two that changed takes that one alone in; the other
    // stays a difference, which the next full sync's `bring_to` finds.
    for (name, ip) in [("a", "10.96.0.11"), ("b", "10.96.0.12")] {
        cl.services.insert(
            ServiceRef::new("default", name),
            std::sync::Arc::new(svc(name).cluster_ip(ip).tcp(80).0),
        );
    }
    inc.update(&cl, &h, &BTreeSet::from([ServiceRef::new("default", "a")]))
        .expect("no conflict");
    assert!(!inc.is_at(&cl, &h));
    let scope = inc.bring_to(&cl, &h).expect("the other one");
    assert!(
        scope
            .services
            .iter()
            .any(|k| k.to_string() == "10.96.0.12:80/tcp")
    );
    assert!(inc.is_at(&cl, &h));
    assert_eq!(inc.desired().state, desired(&cl, &cfg, &h).state);
}
