//! The agent's chains, the jumps from the built-in chains into them, and the one rule that is
//! not fixed: a load-balancer IP the node itself may not reach.

/// The agent's chains, by table.
pub const NAT_CHAINS: &[&str] = &[
    "KUBE-SERVICES",
    "KUBE-POSTROUTING",
    "KUBE-NODE-PORT",
    "KUBE-LOAD-BALANCER",
    "KUBE-MARK-MASQ",
];
/// The agent's chains in the filter table.
pub const FILTER_CHAINS: &[&str] = &[
    "KUBE-FORWARD",
    "KUBE-NODE-PORT",
    "KUBE-PROXY-FIREWALL",
    "KUBE-SOURCE-RANGES-FIREWALL",
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
];

/// Jumps from built-in chains: (table, chain, comment, target), prepended in this order.
pub const JUMPS: &[(&str, &str, &str, &str)] = &[
    (
        "nat",
        "OUTPUT",
        "kubernetes service portals",
        "KUBE-SERVICES",
    ),
    (
        "nat",
        "PREROUTING",
        "kubernetes service portals",
        "KUBE-SERVICES",
    ),
    (
        "nat",
        "POSTROUTING",
        "kubernetes postrouting rules",
        "KUBE-POSTROUTING",
    ),
    (
        "filter",
        "FORWARD",
        "kubernetes forwarding rules",
        "KUBE-FORWARD",
    ),
    (
        "filter",
        "INPUT",
        "kubernetes health check rules",
        "KUBE-NODE-PORT",
    ),
    (
        "filter",
        "INPUT",
        "kube-proxy firewall rules",
        "KUBE-PROXY-FIREWALL",
    ),
    (
        "filter",
        "FORWARD",
        "kube-proxy firewall rules",
        "KUBE-PROXY-FIREWALL",
    ),
    (
        "filter",
        "INPUT",
        "kubernetes ipvs access filter",
        "KUBE-IPVS-FILTER",
    ),
    (
        "filter",
        "OUTPUT",
        "kubernetes ipvs access filter",
        "KUBE-IPVS-OUT-FILTER",
    ),
];

/// The jump rule for one entry of [`JUMPS`], in `-A CHAIN ...` form.
pub fn jump_rule(chain: &str, comment: &str, target: &str) -> String {
    format!("-A {chain} -m comment --comment \"{comment}\" -j {target}")
}

/// A node-originated filter rule of `KUBE-IPVS-OUT-FILTER` (load-balancer source ranges that
/// do not include the node).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OutFilter {
    /// The load-balancer IP.
    pub address: std::net::IpAddr,
    /// Its protocol.
    pub protocol: crate::model::cluster::Protocol,
    /// Its port.
    pub port: u16,
}
