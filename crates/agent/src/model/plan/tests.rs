//! The scoped plan against the whole one: over every key, they are one plan.

use std::collections::BTreeSet;

use super::*;
use crate::model::desired::desired;
use crate::model::desired::warning::Warning;
use crate::model::fixtures::{cluster, config, eps, host, svc};
use crate::model::kernel::SetKind;
use crate::model::kernel::sets::named;
use crate::model::snapshot::cluster::Protocol;

/// `state` with `ops` applied, as the kernel would hold it.
fn programmed(state: &KernelState, ops: &[Op]) -> KernelState {
    let mut kernel = crate::dataplane::memory::Memory {
        state: state.clone(),
        ..Default::default()
    };
    for op in ops {
        kernel.apply_op(op).unwrap_or_else(|e| panic!("{op}: {e}"));
    }
    kernel.state
}

/// Every key of both states: the scope of a change that touched everything.
fn everything(a: &KernelState, b: &KernelState) -> Scope {
    let mut scope = Scope::default();
    for state in [a, b] {
        scope.services.extend(state.services.keys().copied());
        for (name, set) in &state.sets {
            let entries = scope.entries.entry(*name).or_default();
            entries.extend(set.entries.iter().copied());
        }
        scope.addresses.extend(state.addresses.iter().copied());
        scope.rules.extend(state.rules.keys().copied());
    }
    scope
}

#[test]
fn a_scope_over_every_key_plans_what_the_whole_plan_plans() {
    // Before: three Services, each with a node port and an endpoint on another node.
    let old = cluster(
        ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                svc(name)
                    .cluster_ip(&format!("10.96.0.{}", 10 + i))
                    .tcp(80)
                    .node_port(30080 + i as u16)
            })
            .collect(),
        ["a", "b", "c"]
            .iter()
            .map(|name| eps(name, "", Protocol::Tcp, 8080).ready("10.244.1.2", "node-b"))
            .collect(),
    );
    // After: `a` moved its endpoint, `b` and `c` are gone, `d` is new.
    let new = cluster(
        vec![
            svc("a").cluster_ip("10.96.0.10").tcp(80).node_port(30080),
            svc("d").cluster_ip("10.96.0.20").tcp(80),
        ],
        vec![
            eps("a", "", Protocol::Tcp, 8080).ready("10.244.1.3", "node-b"),
            eps("d", "", Protocol::Tcp, 8080).ready("10.244.1.4", "node-b"),
        ],
    );
    let none = KernelState::default();
    let mut kernel = programmed(
        &none,
        &plan(&desired(&old, &config(), &host()).state, &none, &[]).ops,
    );
    // A set of the wrong type, which neither plan may touch.
    kernel
        .sets
        .get_mut(&named("KUBE-NODE-PORT-TCP"))
        .unwrap()
        .kind = SetKind::HashIp;
    let want = desired(&new, &config(), &host()).state;
    // Sysctls are outside any scope: the full syncs keep them.
    kernel.sysctls = want.sysctls.clone();

    let expired = BTreeSet::new();
    let whole = plan_draining(&want, &kernel, &[], &expired);
    let scoped = plan_scoped(&want, &kernel, &[], &expired, &everything(&want, &kernel));
    assert_eq!(scoped, whole);
    assert!(
        matches!(&whole.warnings[..], [Warning::SetKind { name, found: SetKind::HashIp, .. }] if name == "KUBE-NODE-PORT-TCP"),
        "{:?}",
        whole.warnings
    );
    let deleted = whole
        .ops
        .iter()
        .filter(|op| matches!(op, Op::DelService(_)))
        .count();
    assert_eq!(
        deleted, 4,
        "two cluster IPs and two node ports: {:?}",
        whole.ops
    );
}

#[test]
fn a_cold_plan_is_allocated_at_its_size() {
    // Twenty Services of three endpoints each: a plan grown an operation at a time would
    // end with room for a power of two.
    let names: Vec<String> = (0..20).map(|i| format!("s{i}")).collect();
    let c = cluster(
        names
            .iter()
            .enumerate()
            .map(|(i, n)| svc(n).cluster_ip(&format!("10.96.0.{}", 10 + i)).tcp(80))
            .collect(),
        names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                eps(n, "", Protocol::Tcp, 8080)
                    .ready(&format!("10.244.1.{i}"), "node-b")
                    .ready(&format!("10.244.2.{i}"), "node-b")
                    .ready(&format!("10.244.3.{i}"), "node-b")
            })
            .collect(),
    );
    let p = plan(
        &desired(&c, &config(), &host()).state,
        &KernelState::default(),
        &[],
    );
    assert!(p.ops.len() > 80, "{}", p.ops.len());
    assert_eq!(p.ops.capacity(), p.ops.len());
}
