//! The operations a plan is made of, one change to the kernel each.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::model::kernel::{
    Jump, LINK_NAME, RealServer, Rules, SetEntry, SetName, VirtualServer, VsKey,
};
use crate::model::snapshot::cluster::Family;

/// One change to the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create the `kube-ipvs0` dummy link (left down).
    CreateLink,
    /// Write a sysctl.
    SetSysctl {
        /// Path below `/proc/sys`.
        key: Box<str>,
        /// Value.
        value: Box<str>,
    },
    /// Create a set, with its catalogue type, in its family.
    CreateSet(SetName),
    /// Add entries to a set.
    AddEntries {
        /// The set.
        set: SetName,
        /// The entries, shared: the set worker takes its own handle on them, not a copy.
        entries: Arc<[SetEntry]>,
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
        missing_jumps: Vec<Jump>,
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
        destination: RealServer,
        /// Its weight.
        weight: u32,
    },
    /// Change a real server's weight.
    UpdateDestination {
        /// The virtual server.
        key: VsKey,
        /// The real server.
        destination: RealServer,
        /// Its weight.
        weight: u32,
    },
    /// Remove a real server.
    DelDestination {
        /// The virtual server.
        key: VsKey,
        /// The real server.
        destination: RealServer,
    },
    /// Delete a virtual server the agent owns.
    DelService(VsKey),
    /// Unbind an address from `kube-ipvs0`.
    DelAddress(IpAddr),
    /// Remove entries from a set.
    DelEntries {
        /// The set.
        set: SetName,
        /// The entries, shared as [`Op::AddEntries`]'.
        entries: Arc<[SetEntry]>,
    },
    /// Remove the agent's jumps and chains of one family (`--cleanup`).
    RemoveRules {
        /// The family.
        family: Family,
        /// The rules as observed: their chains and the jumps that exist (boxed, as in
        /// [`Op::WriteRules`]).
        rules: Box<Rules>,
    },
    /// Destroy a set (`--cleanup`).
    DestroySet(SetName),
    /// Delete the `kube-ipvs0` link with its addresses (`--cleanup`).
    DeleteLink,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::CreateLink => write!(f, "create link {}", LINK_NAME),
            Op::SetSysctl { key, value } => write!(f, "sysctl {key}={value}"),
            Op::CreateSet(name) => {
                let (kind, family) = (name.kind(), name.family());
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
            Op::DeleteLink => write!(f, "delete link {}", LINK_NAME),
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

#[cfg(test)]
mod tests {
    /// A cold plan holds one operation per real server: at 10,000 Services of 5 endpoints
    /// each byte here is about 60 KB of the cold sync's peak. The large variants are boxed.
    #[test]
    fn an_operation_is_48_bytes() {
        assert_eq!(std::mem::size_of::<super::Op>(), 48);
    }
}
