//! The one rule that is not fixed: a load-balancer IP the node itself may not reach.

/// A node-originated filter rule of `KUBE-IPVS-OUT-FILTER` (load-balancer source ranges that
/// do not include the node).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OutFilter {
    /// The load-balancer IP.
    pub address: std::net::IpAddr,
    /// Its protocol.
    pub protocol: crate::model::snapshot::cluster::Protocol,
    /// Its port.
    pub port: u16,
}
