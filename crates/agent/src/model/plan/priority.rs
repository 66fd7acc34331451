//! The Services a node needs before all others: on a cold start they are programmed first,
//! ahead of the full state.
//!
//! A cold sync of 10,000 Services takes tens of seconds, and the pods on a node that is
//! starting (or whose agent restarted after its kernel state was lost) cannot reach the API
//! server or resolve a name until their Services are programmed. So the first sync of a
//! process first applies a small plan for [`PRIORITY`] alone, then the full one.
//!
//! That first plan only adds: it is computed from a cluster holding nothing but the priority
//! Services, so everything else would look unwanted to it. It keeps what creates and adds,
//! drops what updates or deletes (the full plan right after does both), and writes the
//! agent's iptables rules only when the kernel holds none of them yet (rules computed from a
//! few Services would otherwise replace the full rules of a running node for a moment).

use crate::model::desired::{Host, desired};
use crate::model::kernel::{KernelState, Set};
use crate::model::plan::{Op, Plan, plan};
use crate::model::snapshot::cluster::{Cluster, ServiceRef};
use crate::model::snapshot::config::ProxyConfig;

/// The Services programmed first, as namespace and name: the API server's and the cluster
/// DNS (`kube-dns` is the name kubeadm, kops and most distributions give CoreDNS's Service).
pub const PRIORITY: [(&str, &str); 2] = [("default", "kubernetes"), ("kube-system", "kube-dns")];

/// The cluster reduced to the [`PRIORITY`] Services, their EndpointSlices and the Node;
/// `None` when it holds none of them.
pub fn priority_cluster(cluster: &Cluster) -> Option<Cluster> {
    let mut out = Cluster {
        node: cluster.node.clone(),
        ..Cluster::default()
    };
    for (namespace, name) in PRIORITY {
        let id = ServiceRef::new(namespace, name);
        let Some(service) = cluster.services.get(&id) else {
            continue;
        };
        for slice in cluster.slices_of(&id) {
            out.slices
                .insert(slice.id(), std::sync::Arc::new(slice.clone()));
        }
        out.services.insert(id, service.clone());
    }
    (!out.services.is_empty()).then_some(out)
}

/// The additive plan that programs the [`PRIORITY`] Services of `cluster` on `observed`:
/// empty when the cluster has none of them or the kernel already serves them as wanted.
pub fn priority_plan(
    cluster: &Cluster,
    config: &ProxyConfig,
    host: &Host,
    observed: &KernelState,
) -> Plan {
    let Some(first) = priority_cluster(cluster) else {
        return Plan::default();
    };
    let want = desired(&first, config, host);
    let full = plan(
        &want.state,
        &within(observed, &want.state),
        &config.exclude_cidrs,
    );
    let ops = full
        .ops
        .into_iter()
        .filter(|op| match op {
            Op::CreateLink
            | Op::SetSysctl { .. }
            | Op::CreateSet { .. }
            | Op::AddEntries { .. }
            | Op::AddAddress(_)
            | Op::AddService { .. }
            | Op::AddDestination { .. } => true,
            Op::WriteRules { family, .. } => observed
                .rules
                .get(family)
                .is_none_or(|r| r.chains.is_empty() && r.jumps.is_empty()),
            Op::UpdateService { .. }
            | Op::UpdateDestination { .. }
            | Op::DelDestination { .. }
            | Op::DelService(_)
            | Op::DelAddress(_)
            | Op::DelEntries { .. }
            | Op::RemoveRules { .. }
            | Op::DestroySet(_)
            | Op::DeleteLink => false,
        })
        .collect();
    Plan {
        ops,
        warnings: full.warnings,
    }
}

/// What `observed` holds of `want`: its virtual servers, addresses and set entries, all of
/// the rules. Planned against it, `want` gives what planning against the whole observed
/// state gives, less the deletions of everything else (which the priority plan drops), at a
/// cost that does not grow with the node's state.
fn within(observed: &KernelState, want: &KernelState) -> KernelState {
    KernelState {
        link: observed.link,
        addresses: want
            .addresses
            .intersection(&observed.addresses)
            .copied()
            .collect(),
        services: want
            .services
            .keys()
            .filter_map(|k| observed.services.get_key_value(k))
            .map(|(k, vs)| (*k, vs.clone()))
            .collect(),
        sets: want
            .sets
            .iter()
            .filter_map(|(name, w)| {
                let have = observed.sets.get(name)?;
                Some((
                    *name,
                    Set {
                        kind: have.kind,
                        family: have.family,
                        entries: w.entries.intersection(&have.entries).copied().collect(),
                    },
                ))
            })
            .collect(),
        rules: observed.rules.clone(),
        sysctls: observed.sysctls.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::*;
    use crate::model::snapshot::cluster::Protocol;

    fn kubernetes_and_web() -> Cluster {
        // The fixtures' namespace is `default`.
        let (api, api_slice) = kubernetes("node-a");
        cluster(
            vec![
                api,
                svc("web").cluster_ip("10.96.0.10").tcp(80).node_port(30080),
            ],
            vec![
                api_slice,
                eps("web", "", Protocol::Tcp, 80).ready("10.244.0.2", "node-a"),
            ],
        )
    }

    #[test]
    fn a_cold_kernel_gets_only_the_priority_services_with_what_they_need() {
        let p = priority_plan(
            &kubernetes_and_web(),
            &config(),
            &host(),
            &KernelState::default(),
        );
        assert_eq!(added_vips(&p), ["10.96.0.1:443"], "{:#?}", p.ops);
        let has = |f: fn(&Op) -> bool| p.ops.iter().any(f);
        assert!(has(|op| matches!(op, Op::CreateLink)));
        assert!(has(
            |op| matches!(op, Op::AddAddress(a) if a.to_string() == "10.96.0.1")
        ));
        assert!(has(|op| matches!(op, Op::WriteRules { .. })));
        assert!(has(|op| matches!(
            op,
            Op::AddDestination { destination, .. } if destination.to_string() == "192.168.1.10:6443"
        )));
        assert!(!has(
            |op| matches!(op, Op::AddAddress(a) if a.to_string() == "10.96.0.10")
        ));
    }

    #[test]
    fn a_programmed_kernel_is_only_added_to_never_changed_or_emptied() {
        let c = kubernetes_and_web();
        let full = desired(&c, &config(), &host()).state;
        assert!(priority_plan(&c, &config(), &host(), &full).is_empty());

        // The kubernetes Service lost from a running node: it comes back, and the rest (which
        // a plan for the priority Services alone would delete) and the rules stay.
        let mut lost = full.clone();
        let api = *lost
            .services
            .keys()
            .find(|k| k.port == 443)
            .expect("the API server's virtual server");
        lost.services.remove(&api);
        // A changed setting is left to the full plan.
        lost.services
            .values_mut()
            .for_each(|vs| vs.scheduler = "wrr".into());
        let p = priority_plan(&c, &config(), &host(), &lost);
        assert_eq!(added_vips(&p), ["10.96.0.1:443"], "{:#?}", p.ops);
        assert!(
            p.ops
                .iter()
                .all(|op| matches!(op, Op::AddService { .. } | Op::AddDestination { .. })),
            "{:#?}",
            p.ops
        );
    }

    /// Planning against what the kernel holds of the priority Services gives the plan that
    /// planning against all of it gives, without its deletions.
    #[test]
    fn planning_within_the_priority_state_is_planning_against_all_of_it() {
        let c = kubernetes_and_web();
        let full = desired(&c, &config(), &host()).state;
        let first = priority_cluster(&c).expect("kubernetes");
        let want = desired(&first, &config(), &host()).state;
        let mut kernels = vec![KernelState::default(), full.clone()];
        let mut partial = full.clone();
        partial.services.retain(|k, _| k.port != 443);
        partial.addresses.clear();
        partial.sets.values_mut().for_each(|s| {
            s.entries.pop_first();
        });
        kernels.push(partial);
        for observed in &kernels {
            let additive = |p: Plan| -> Vec<Op> {
                p.ops
                    .into_iter()
                    .filter(|op| {
                        !matches!(
                            op,
                            Op::DelService(_) | Op::DelAddress(_) | Op::DelEntries { .. }
                        )
                    })
                    .collect()
            };
            assert_eq!(
                additive(plan(&want, &within(observed, &want), &[])),
                additive(plan(&want, observed, &[])),
            );
        }
    }

    #[test]
    fn a_cluster_without_them_has_no_priority_plan() {
        let mut c = kubernetes_and_web();
        c.services = c
            .services
            .iter()
            .filter(|(id, _)| &*id.name == "web")
            .map(|(id, s)| (id.clone(), s.clone()))
            .collect();
        assert!(priority_cluster(&c).is_none());
        assert!(priority_plan(&c, &config(), &host(), &KernelState::default()).is_empty());
    }

    #[test]
    fn the_dns_service_is_a_priority_one_and_keeps_its_slices() {
        let mut dns = svc("kube-dns")
            .cluster_ip("10.96.0.10")
            .port("dns", Protocol::Udp, 53);
        dns.0.id = ServiceRef::new("kube-system", "kube-dns");
        let mut slice = eps("kube-dns", "dns", Protocol::Udp, 53).ready("10.244.0.5", "node-a");
        slice.0.service = dns.0.id.clone();
        let c = cluster(
            vec![dns, svc("web").cluster_ip("10.96.0.20").tcp(80)],
            vec![slice],
        );
        let first = priority_cluster(&c).expect("kube-dns");
        assert_eq!(first.services.len(), 1);
        assert_eq!(first.slices.len(), 1);
        let p = priority_plan(&c, &config(), &host(), &KernelState::default());
        assert_eq!(added_vips(&p), ["10.96.0.10:53"]);
    }
}
