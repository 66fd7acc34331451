//! Which observed virtual servers are the agent's to delete: those it claimed, and those
//! kube-proxy left (so that the agent can take a node over from it).

use crate::model::kernel::sets::{self, SetName};
use crate::model::kernel::{KernelState, SetEntry, VsKey};
use crate::model::snapshot::cluster::{Family, Protocol};

/// True when the agent owns the observed virtual server `key`: it is recorded in the ownership
/// set, its address is bound on `kube-ipvs0` (as kube-proxy binds cluster, external and
/// load-balancer IPs), or kube-proxy's own sets name it (node ports by `KUBE-NODE-PORT-*`,
/// external and load-balancer IPs by `KUBE-EXTERNAL-IP*` and `KUBE-LOAD-BALANCER*`). The last
/// two let the agent take over a node from kube-proxy, leftovers included.
pub fn owns(observed: &KernelState, key: &VsKey) -> bool {
    let family = Family::of(&key.address);
    let claimed = observed
        .sets
        .get(&SetName::new(&sets::OWNED, family))
        .is_some_and(|s| {
            s.entries
                .contains(&SetEntry::IpPort(key.address, key.protocol, key.port))
        });
    claimed || observed.addresses.contains(&key.address) || in_service_sets(observed, key)
}

/// Whether the sets kube-proxy fills beside its virtual servers name `key`: its port in the
/// node-port set of its protocol (`KUBE-NODE-PORT-TCP`, `-UDP`; the address and port in
/// `KUBE-NODE-PORT-SCTP-HASH`), or its address and port in `KUBE-EXTERNAL-IP` or
/// `KUBE-LOAD-BALANCER` (each with its `-LOCAL` twin, and the `KUBE-6-` names for IPv6).
/// Node-port virtual servers sit on the node's own addresses, never on `kube-ipvs0`, so
/// without this a node port whose Service went away while no proxy ran (between kube-proxy's
/// stop and the agent's first sync) would stay forever. The agent fills these sets the same
/// way, so its own virtual servers pass too (they are claimed anyway).
fn in_service_sets(observed: &KernelState, key: &VsKey) -> bool {
    let family = Family::of(&key.address);
    let has = |def: &sets::SetDef, entry: &SetEntry| {
        observed
            .sets
            .get(&SetName::new(def, family))
            .is_some_and(|s| s.entries.contains(entry))
    };
    let ip_port = SetEntry::IpPort(key.address, key.protocol, key.port);
    let port = SetEntry::Port(key.port);
    let node_port = match key.protocol {
        Protocol::Tcp => [&sets::NODE_PORT_TCP, &sets::NODE_PORT_LOCAL_TCP]
            .iter()
            .any(|d| has(d, &port)),
        Protocol::Udp => [&sets::NODE_PORT_UDP, &sets::NODE_PORT_LOCAL_UDP]
            .iter()
            .any(|d| has(d, &port)),
        Protocol::Sctp => [&sets::NODE_PORT_SCTP, &sets::NODE_PORT_LOCAL_SCTP]
            .iter()
            .any(|d| has(d, &ip_port)),
    };
    node_port
        || [
            &sets::EXTERNAL_IP,
            &sets::EXTERNAL_IP_LOCAL,
            &sets::LOAD_BALANCER,
            &sets::LOAD_BALANCER_LOCAL,
        ]
        .iter()
        .any(|d| has(d, &ip_port))
}
