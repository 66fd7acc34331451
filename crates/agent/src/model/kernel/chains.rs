//! The agent's chains and the jumps from the built-in chains into them: the iptables state
//! the agent owns, which the kernel view reads and the desired rules fill.

use super::{Jump, Table};

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

/// Jumps from built-in chains, prepended in this order.
pub const JUMPS: &[Jump] = &[
    jump(
        Table::Nat,
        "OUTPUT",
        "kubernetes service portals",
        "KUBE-SERVICES",
    ),
    jump(
        Table::Nat,
        "PREROUTING",
        "kubernetes service portals",
        "KUBE-SERVICES",
    ),
    jump(
        Table::Nat,
        "POSTROUTING",
        "kubernetes postrouting rules",
        "KUBE-POSTROUTING",
    ),
    jump(
        Table::Filter,
        "FORWARD",
        "kubernetes forwarding rules",
        "KUBE-FORWARD",
    ),
    jump(
        Table::Filter,
        "INPUT",
        "kubernetes health check rules",
        "KUBE-NODE-PORT",
    ),
    jump(
        Table::Filter,
        "INPUT",
        "kube-proxy firewall rules",
        "KUBE-PROXY-FIREWALL",
    ),
    jump(
        Table::Filter,
        "FORWARD",
        "kube-proxy firewall rules",
        "KUBE-PROXY-FIREWALL",
    ),
    jump(
        Table::Filter,
        "INPUT",
        "kubernetes ipvs access filter",
        "KUBE-IPVS-FILTER",
    ),
    jump(
        Table::Filter,
        "OUTPUT",
        "kubernetes ipvs access filter",
        "KUBE-IPVS-OUT-FILTER",
    ),
];

const fn jump(
    table: Table,
    chain: &'static str,
    comment: &'static str,
    target: &'static str,
) -> Jump {
    Jump {
        table,
        chain,
        comment,
        target,
    }
}
