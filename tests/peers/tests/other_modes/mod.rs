//! The swap from a stock cluster: upstream kube-proxy in iptables mode, then in nftables mode,
//! programs the agent's namespace and is killed there; the agent starts on what it left. None
//! of that mode's rules may remain (iptables mode's chains and jumps, nftables mode's
//! `kube-proxy` table), and the agent's state must be what upstream kube-proxy's IPVS mode
//! builds on a clean node beside it.

use peers::compare;
use peers::scenario::{self, Scenario};
use peers::state::Sections;

use super::{Pair, connect};

/// A NodePort Service with endpoints, one without (iptables mode REJECTs it in filter
/// `KUBE-SERVICES`), and a LoadBalancer with `externalTrafficPolicy: Local` and source ranges
/// (its `KUBE-SVL-`, `KUBE-EXT-`, `KUBE-FW-` chains and a health-check node port).
fn swapped_from(mode: &str) -> Scenario {
    let text = format!(
        r#"
description: a node kube-proxy ran in {mode} mode
takeover: true
takeover_mode: {mode}
objects: |
  apiVersion: v1
  kind: Service
  metadata: {{name: web}}
  spec:
    type: NodePort
    clusterIP: 10.96.201.10
    ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 31201}}]
  ---
  apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{name: web-1, labels: {{kubernetes.io/service-name: web}}}}
  addressType: IPv4
  ports: [{{name: http, port: 8080, protocol: TCP}}]
  endpoints:
  - {{addresses: [10.244.1.2], conditions: {{ready: true}}}}
  - {{addresses: [10.244.1.3], conditions: {{ready: true}}}}
  ---
  apiVersion: v1
  kind: Service
  metadata: {{name: empty}}
  spec:
    clusterIP: 10.96.201.20
    ports: [{{name: http, port: 80}}]
  ---
  apiVersion: v1
  kind: Service
  metadata: {{name: lb}}
  spec:
    type: LoadBalancer
    externalTrafficPolicy: Local
    healthCheckNodePort: 32201
    loadBalancerSourceRanges: [198.51.100.0/24]
    clusterIP: 10.96.201.30
    ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 31202}}]
  status:
    loadBalancer: {{ingress: [{{ip: 203.0.113.201, ipMode: VIP}}]}}
  ---
  apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{name: lb-1, labels: {{kubernetes.io/service-name: lb}}}}
  addressType: IPv4
  ports: [{{name: http, port: 8080, protocol: TCP}}]
  endpoints:
  - {{addresses: [10.244.1.4], nodeName: NODE, conditions: {{ready: true}}}}
"#
    );
    let id = format!("other-mode-{mode}");
    // The endpoint is local to the scenario's node, named after the scenario.
    let text = text.replace("NODE", &format!("peers-{id}"));
    scenario::parse(&id, &text).expect("the scenario")
}

/// Lines of the iptables sections that only kube-proxy's iptables mode writes.
fn iptables_mode_lines(state: &Sections) -> Vec<String> {
    const ANYWHERE: &[&str] = &[
        "KUBE-SVC-",
        "KUBE-SVL-",
        "KUBE-SEP-",
        "KUBE-FW-",
        "KUBE-EXT-",
        "KUBE-NODEPORTS",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-PROXY-CANARY",
        "kubernetes load balancer firewall",
    ];
    let mut out = Vec::new();
    for (section, lines) in state {
        if !section.contains("tables") {
            continue;
        }
        let mut table = "";
        for l in lines {
            if let Some(t) = l.strip_prefix('*') {
                table = t;
            }
            // The filter table's KUBE-SERVICES is iptables mode's (IPVS mode's is in nat).
            let filter_services = table == "filter" && l.contains("KUBE-SERVICES");
            if filter_services || ANYWHERE.iter().any(|n| l.contains(n)) {
                out.push(format!("{section} *{table}: {l}"));
            }
        }
    }
    out
}

#[test]
fn a_node_kube_proxy_ran_in_iptables_or_nftables_mode_keeps_nothing_of_that_mode() {
    let (_guard, cp, cluster, _ns) = connect();
    let known = compare::known(peers::embedded::README).expect("README's peers-diff markers");
    for (mode, said) in [
        ("iptables", "removed kube-proxy iptables mode's leftovers"),
        ("nftables", "removed kube-proxy nftables mode's table"),
    ] {
        let s = swapped_from(mode);
        let pair = Pair::start(&cp, &cluster, &s, true).unwrap_or_else(|e| panic!("{mode}: {e:#}"));
        // The takeover's kube-proxy did leave its rules, and the agent found them.
        let log = pair.agent_log();
        assert!(log.contains(said), "{mode}: the agent's log lacks {said:?}");

        let left = iptables_mode_lines(&pair.ag.state());
        assert!(
            left.is_empty(),
            "{mode}: iptables mode's rules left:\n{}",
            left.join("\n")
        );
        let tables = pair.ag.ns.sh("nft list tables");
        assert!(
            !tables
                .lines()
                .any(|l| l.split_whitespace().last() == Some("kube-proxy")),
            "{mode}: nftables mode's table left:\n{tables}"
        );

        // The agent's state is IPVS mode's: what the other mode left on purpose, or could
        // not remove, is explained by the README's markers for these scenarios.
        let diffs = pair.compare();
        let (unlisted, _) = compare::classify(&diffs, &known, &s.id);
        let unlisted: Vec<String> = unlisted.into_iter().map(|d| d.to_string()).collect();
        assert!(
            unlisted.is_empty(),
            "{mode}: the agent's state differs from kube-proxy's IPVS mode:\n{}",
            unlisted.join("\n")
        );
        println!("other modes: {mode}: nothing left, the agent's state is IPVS mode's");
    }
    let _ = cluster.clear();
}
