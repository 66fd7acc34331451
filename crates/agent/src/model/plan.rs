//! The difference between the desired and the observed kernel state, as an ordered list of
//! operations.
//!
//! The order keeps traffic flowing while the state changes: everything new is added before
//! anything old is removed, claims on virtual servers (the ownership set) are recorded before
//! the servers are made and dropped after they are deleted, and only virtual servers the agent
//! owns are ever deleted.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::cluster::{Family, Protocol};
use super::drain::DestinationKey;
use super::iptables::canonical;
use super::kernel::{KernelState, Rules, SetEntry, SetKind, VirtualServer, VsKey};
use super::sets::{self, set_name};

/// One change to the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create the `kube-ipvs0` dummy link (left down).
    CreateLink,
    /// Write a sysctl.
    SetSysctl {
        /// Path below `/proc/sys`.
        key: String,
        /// Value.
        value: String,
    },
    /// Create a set.
    CreateSet {
        /// Its name.
        name: String,
        /// Its type.
        kind: SetKind,
        /// Its family.
        family: Family,
    },
    /// Add entries to a set.
    AddEntries {
        /// The set.
        set: String,
        /// The entries.
        entries: Vec<SetEntry>,
    },
    /// Bind an address on `kube-ipvs0`.
    AddAddress(IpAddr),
    /// Rewrite the agent's chains of one family with one `iptables-restore --noflush` (its
    /// input is `iptables::restore_input(rules, missing_jumps)`).
    WriteRules {
        /// The family (iptables or ip6tables).
        family: Family,
        /// The rules to hold (boxed, as the large variants are: a cold plan holds one `Op` per
        /// real server, each as large as the largest variant).
        rules: Box<Rules>,
        /// Jumps from built-in chains to prepend, because they are missing.
        missing_jumps: Vec<(String, String)>,
    },
    /// Create a virtual server (without destinations).
    AddService {
        /// Its key.
        key: VsKey,
        /// Its settings.
        service: Box<VirtualServer>,
    },
    /// Change a virtual server's scheduler, flags or persistence.
    UpdateService {
        /// Its key.
        key: VsKey,
        /// Its new settings.
        service: Box<VirtualServer>,
    },
    /// Add a real server.
    AddDestination {
        /// The virtual server.
        key: VsKey,
        /// The real server.
        destination: SocketAddr,
        /// Its weight.
        weight: u32,
    },
    /// Change a real server's weight.
    UpdateDestination {
        /// The virtual server.
        key: VsKey,
        /// The real server.
        destination: SocketAddr,
        /// Its weight.
        weight: u32,
    },
    /// Remove a real server.
    DelDestination {
        /// The virtual server.
        key: VsKey,
        /// The real server.
        destination: SocketAddr,
    },
    /// Delete a virtual server the agent owns.
    DelService(VsKey),
    /// Unbind an address from `kube-ipvs0`.
    DelAddress(IpAddr),
    /// Remove entries from a set.
    DelEntries {
        /// The set.
        set: String,
        /// The entries.
        entries: Vec<SetEntry>,
    },
    /// Remove the agent's jumps and chains of one family (`--cleanup`).
    RemoveRules {
        /// The family.
        family: Family,
        /// The rules as observed: their chains and the jumps that exist.
        rules: Rules,
    },
    /// Destroy a set (`--cleanup`).
    DestroySet(String),
    /// Delete the `kube-ipvs0` link with its addresses (`--cleanup`).
    DeleteLink,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::CreateLink => write!(f, "create link {}", super::kernel::LINK_NAME),
            Op::SetSysctl { key, value } => write!(f, "sysctl {key}={value}"),
            Op::CreateSet { name, kind, family } => {
                write!(f, "create set {name} {} ({family:?})", kind.as_str())
            }
            Op::AddEntries { set, entries } => write!(f, "add {} entries to {set}", entries.len()),
            Op::AddAddress(ip) => write!(f, "bind {ip}"),
            Op::WriteRules {
                family,
                rules,
                missing_jumps,
            } => write!(
                f,
                "write {} rules, {} jumps ({family:?})",
                rules.rules.len(),
                missing_jumps.len()
            ),
            Op::AddService { key, service } => write!(f, "add service {key} {}", service.scheduler),
            Op::UpdateService { key, service } => {
                write!(f, "update service {key} {}", service.scheduler)
            }
            Op::AddDestination {
                key,
                destination,
                weight,
            } => write!(f, "add {destination} to {key} weight {weight}"),
            Op::UpdateDestination {
                key,
                destination,
                weight,
            } => write!(f, "set {destination} of {key} weight {weight}"),
            Op::DelDestination { key, destination } => write!(f, "remove {destination} from {key}"),
            Op::DelService(key) => write!(f, "delete service {key}"),
            Op::DelAddress(ip) => write!(f, "unbind {ip}"),
            Op::DelEntries { set, entries } => {
                write!(f, "remove {} entries from {set}", entries.len())
            }
            Op::RemoveRules { family, rules } => {
                write!(
                    f,
                    "remove {} chains and {} jumps ({family:?})",
                    rules.chains.len(),
                    rules.jumps.len()
                )
            }
            Op::DestroySet(name) => write!(f, "destroy set {name}"),
            Op::DeleteLink => write!(f, "delete link {}", super::kernel::LINK_NAME),
        }
    }
}

impl Op {
    /// The virtual server this operation makes, changes or deletes (itself or one of its real
    /// servers), if it is an IPVS operation.
    pub fn virtual_server(&self) -> Option<&VsKey> {
        match self {
            Op::AddService { key, .. }
            | Op::UpdateService { key, .. }
            | Op::AddDestination { key, .. }
            | Op::UpdateDestination { key, .. }
            | Op::DelDestination { key, .. }
            | Op::DelService(key) => Some(key),
            _ => None,
        }
    }
}

/// An ordered list of operations, and what could not be planned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The operations, in order.
    pub ops: Vec<Op>,
    /// Problems the plan works around (e.g. a set of the wrong type that it must not replace).
    pub warnings: Vec<String>,
}

impl Plan {
    /// True when nothing needs to change.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// True when the agent owns the observed virtual server `key`: it is recorded in the ownership
/// set, its address is bound on `kube-ipvs0` (as kube-proxy binds cluster, external and
/// load-balancer IPs), or kube-proxy's own sets name it (node ports by `KUBE-NODE-PORT-*`,
/// external and load-balancer IPs by `KUBE-EXTERNAL-IP*` and `KUBE-LOAD-BALANCER*`). The last
/// two let the agent take over a node from kube-proxy, leftovers included.
pub fn owns(observed: &KernelState, key: &VsKey) -> bool {
    let family = Family::of(&key.address);
    let claimed = observed
        .sets
        .get(&set_name(&sets::OWNED, family))
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
            .get(&set_name(def, family))
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

/// Plans the changes that turn `observed` into `desired`. Virtual servers inside
/// `exclude_cidrs` are never deleted. Removed real servers drain as [`plan_draining`] says,
/// none of them past its bound.
pub fn plan(desired: &KernelState, observed: &KernelState, exclude_cidrs: &[IpNet]) -> Plan {
    plan_draining(desired, observed, exclude_cidrs, &BTreeSet::new())
}

/// Plans the changes that turn `observed` into `desired`, draining removed real servers
/// (graceful termination, see [`super::drain`]).
///
/// A real server that a wanted virtual server holds but should not is deleted at once when its
/// protocol is UDP or SCTP, when the observation says IPVS tracks no connection to it, or when
/// it is in `expired` (it drained for the whole bound). Otherwise its weight goes to 0 and it
/// stays until one of those holds. A virtual server that is not wanted at all is deleted at
/// once, with its real servers. A wanted real server found at weight 0 (its endpoint came
/// back, or a restart found it draining) gets its weight back: kube-proxy deletes and re-adds
/// it, which breaks the connections that were draining to it.
pub fn plan_draining(
    desired: &KernelState,
    observed: &KernelState,
    exclude_cidrs: &[IpNet],
    expired: &BTreeSet<DestinationKey>,
) -> Plan {
    let mut p = Plan::default();
    let mut late: Vec<Op> = Vec::new();

    if desired.link && !observed.link {
        p.ops.push(Op::CreateLink);
    }
    for (key, value) in &desired.sysctls {
        if observed.sysctls.get(key) != Some(value) {
            p.ops.push(Op::SetSysctl {
                key: key.clone(),
                value: value.clone(),
            });
        }
    }

    // Sets: create, then add; removals come last.
    for (name, want) in &desired.sets {
        let have = observed.sets.get(name);
        match have {
            None => p.ops.push(Op::CreateSet {
                name: name.clone(),
                kind: want.kind,
                family: want.family,
            }),
            Some(h) if h.kind != want.kind => {
                // Never change the type of an existing set (kube-proxy #77265): leave it and say so.
                p.warnings.push(format!(
                    "ipset {name} exists as {} but must be {}; it is left as is",
                    h.kind.as_str(),
                    want.kind.as_str()
                ));
                continue;
            }
            Some(_) => {}
        }
        let empty = BTreeSet::new();
        let have_entries = have.map(|h| &h.entries).unwrap_or(&empty);
        let add: Vec<SetEntry> = want.entries.difference(have_entries).copied().collect();
        let del: Vec<SetEntry> = have_entries.difference(&want.entries).copied().collect();
        if !add.is_empty() {
            p.ops.push(Op::AddEntries {
                set: name.clone(),
                entries: add,
            });
        }
        if !del.is_empty() {
            late.push(Op::DelEntries {
                set: name.clone(),
                entries: del,
            });
        }
    }

    // Addresses.
    for ip in desired.addresses.difference(&observed.addresses) {
        p.ops.push(Op::AddAddress(*ip));
    }

    // Rules.
    for (family, want) in &desired.rules {
        let have = observed.rules.get(family).cloned().unwrap_or_default();
        let missing: Vec<(String, String)> = want
            .jumps
            .iter()
            .filter(|j| !have.jumps.contains(j))
            .cloned()
            .collect();
        if !same_chains(want, &have, *family) || !missing.is_empty() {
            p.ops.push(Op::WriteRules {
                family: *family,
                rules: Box::new(want.clone()),
                missing_jumps: missing,
            });
        }
    }

    // Virtual servers and their destinations.
    let mut dest_dels = Vec::new();
    for (key, want) in &desired.services {
        service_ops(
            key,
            want,
            observed.services.get(key),
            expired,
            &mut p,
            &mut dest_dels,
        );
    }
    p.ops.extend(dest_dels);
    for key in observed.services.keys() {
        if desired.services.contains_key(key) || !owns(observed, key) {
            continue;
        }
        if exclude_cidrs.iter().any(|c| c.contains(&key.address)) {
            continue;
        }
        p.ops.push(Op::DelService(*key));
    }
    for ip in observed.addresses.difference(&desired.addresses) {
        p.ops.push(Op::DelAddress(*ip));
    }
    p.ops.extend(late);
    p
}

/// The operations that make the observed virtual server `have` (if any) what `want` is:
/// additions and updates into `p`, real-server deletions into `dest_dels` (they go after every
/// addition).
fn service_ops(
    key: &VsKey,
    want: &VirtualServer,
    have: Option<&VirtualServer>,
    expired: &BTreeSet<DestinationKey>,
    p: &mut Plan,
    dest_dels: &mut Vec<Op>,
) {
    match have {
        None => {
            p.ops.push(Op::AddService {
                key: *key,
                service: Box::new(without_destinations(want)),
            });
            for (d, w) in &want.destinations {
                p.ops.push(Op::AddDestination {
                    key: *key,
                    destination: *d,
                    weight: *w,
                });
            }
        }
        Some(have) => {
            if want.settings_differ(have) {
                p.ops.push(Op::UpdateService {
                    key: *key,
                    service: Box::new(without_destinations(want)),
                });
            }
            for (d, w) in &want.destinations {
                match have.destinations.get(d) {
                    None => p.ops.push(Op::AddDestination {
                        key: *key,
                        destination: *d,
                        weight: *w,
                    }),
                    Some(hw) if hw != w => p.ops.push(Op::UpdateDestination {
                        key: *key,
                        destination: *d,
                        weight: *w,
                    }),
                    Some(_) => {}
                }
            }
            for (d, weight) in &have.destinations {
                if want.destinations.contains_key(d) {
                    continue;
                }
                let gone_at_once = key.protocol != Protocol::Tcp
                    || expired.contains(&(*key, *d))
                    || have.connections.get(d).is_some_and(|c| c.is_idle());
                if gone_at_once {
                    dest_dels.push(Op::DelDestination {
                        key: *key,
                        destination: *d,
                    });
                } else if *weight != 0 {
                    p.ops.push(Op::UpdateDestination {
                        key: *key,
                        destination: *d,
                        weight: 0,
                    });
                }
            }
        }
    }
}

/// [`plan_draining`] on the keys of `scope` alone: what a change of some Services needs,
/// without walking the rest of the state. The caller vouches that nothing outside the scope
/// changed since the last plan was applied (the full syncs check the rest). Real servers that
/// drain past their bound (`expired`) are deleted whatever the scope.
pub fn plan_scoped(
    desired: &KernelState,
    observed: &KernelState,
    exclude_cidrs: &[IpNet],
    expired: &BTreeSet<DestinationKey>,
    scope: &super::incremental::Scope,
) -> Plan {
    let mut p = Plan::default();
    let mut late: Vec<Op> = Vec::new();
    if desired.link && !observed.link {
        p.ops.push(Op::CreateLink);
    }
    for (name, entries) in &scope.entries {
        let (Some(want), have) = (desired.sets.get(name), observed.sets.get(name)) else {
            continue;
        };
        match have {
            None => p.ops.push(Op::CreateSet {
                name: name.clone(),
                kind: want.kind,
                family: want.family,
            }),
            Some(h) if h.kind != want.kind => continue,
            Some(_) => {}
        }
        let has = |e: &SetEntry| have.is_some_and(|h| h.entries.contains(e));
        let add: Vec<SetEntry> = entries
            .iter()
            .filter(|e| want.entries.contains(e) && !has(e))
            .copied()
            .collect();
        let del: Vec<SetEntry> = entries
            .iter()
            .filter(|e| !want.entries.contains(e) && has(e))
            .copied()
            .collect();
        if !add.is_empty() {
            p.ops.push(Op::AddEntries {
                set: name.clone(),
                entries: add,
            });
        }
        if !del.is_empty() {
            late.push(Op::DelEntries {
                set: name.clone(),
                entries: del,
            });
        }
    }
    for ip in &scope.addresses {
        if desired.addresses.contains(ip) && !observed.addresses.contains(ip) {
            p.ops.push(Op::AddAddress(*ip));
        }
    }
    for family in &scope.rules {
        let Some(want) = desired.rules.get(family) else {
            continue;
        };
        let have = observed.rules.get(family).cloned().unwrap_or_default();
        let missing: Vec<(String, String)> = want
            .jumps
            .iter()
            .filter(|j| !have.jumps.contains(j))
            .cloned()
            .collect();
        if !same_chains(want, &have, *family) || !missing.is_empty() {
            p.ops.push(Op::WriteRules {
                family: *family,
                rules: Box::new(want.clone()),
                missing_jumps: missing,
            });
        }
    }
    let mut dest_dels = Vec::new();
    // Expired drains first: the bound runs out whether or not their Service changed.
    let keys: BTreeSet<VsKey> = scope
        .services
        .iter()
        .copied()
        .chain(expired.iter().map(|(k, _)| *k))
        .collect();
    for key in &keys {
        let (want, have) = (desired.services.get(key), observed.services.get(key));
        match want {
            Some(want) => service_ops(key, want, have, expired, &mut p, &mut dest_dels),
            None => {
                if have.is_some()
                    && owns(observed, key)
                    && !exclude_cidrs.iter().any(|c| c.contains(&key.address))
                {
                    late.insert(0, Op::DelService(*key));
                }
            }
        }
    }
    p.ops.extend(dest_dels);
    // Services before addresses before set entries, as in a full plan.
    let (services, sets): (Vec<Op>, Vec<Op>) = late
        .into_iter()
        .partition(|op| matches!(op, Op::DelService(_)));
    p.ops.extend(services);
    for ip in &scope.addresses {
        if observed.addresses.contains(ip) && !desired.addresses.contains(ip) {
            p.ops.push(Op::DelAddress(*ip));
        }
    }
    p.ops.extend(sets);
    p
}

fn without_destinations(vs: &VirtualServer) -> VirtualServer {
    VirtualServer {
        scheduler: vs.scheduler.clone(),
        sched_flags: vs.sched_flags,
        persistence: vs.persistence,
        destinations: Default::default(),
        connections: Default::default(),
    }
}

/// Whether two rule sets hold the same chains with the same rules, however each was spelled.
fn same_chains(a: &Rules, b: &Rules, family: Family) -> bool {
    a.chains == b.chains && canonical(a, family) == canonical(b, family)
}

/// Plans `--cleanup`: every virtual server the agent owns (outside `exclude_cidrs`), the agent's
/// jumps and chains, its sets and `kube-ipvs0`, and nothing else. Rules go first (they
/// reference the sets), then services, the link, and the sets last.
pub fn cleanup(observed: &KernelState, exclude_cidrs: &[IpNet]) -> Plan {
    let mut p = Plan::default();
    for (family, rules) in &observed.rules {
        if !rules.chains.is_empty() || !rules.jumps.is_empty() {
            p.ops.push(Op::RemoveRules {
                family: *family,
                rules: rules.clone(),
            });
        }
    }
    for key in observed.services.keys() {
        if owns(observed, key) && !exclude_cidrs.iter().any(|c| c.contains(&key.address)) {
            p.ops.push(Op::DelService(*key));
        }
    }
    if observed.link {
        p.ops.push(Op::DeleteLink);
    }
    for name in observed.sets.keys() {
        p.ops.push(Op::DestroySet(name.clone()));
    }
    p
}
