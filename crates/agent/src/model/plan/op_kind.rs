//! What kind of change an operation is, and which kernel object it changes: the one
//! classification the metrics' labels, the kernel's routing and drift all read.

use crate::model::plan::Op;

/// The kind of an [`Op`], without its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    /// [`Op::CreateLink`]
    CreateLink,
    /// [`Op::SetSysctl`]
    SetSysctl,
    /// [`Op::CreateSet`]
    CreateSet,
    /// [`Op::AddEntries`]
    AddEntries,
    /// [`Op::AddAddress`]
    AddAddress,
    /// [`Op::WriteRules`]
    WriteRules,
    /// [`Op::AddService`]
    AddService,
    /// [`Op::UpdateService`]
    UpdateService,
    /// [`Op::AddDestination`]
    AddDestination,
    /// [`Op::UpdateDestination`]
    UpdateDestination,
    /// [`Op::DelDestination`]
    DelDestination,
    /// [`Op::DelService`]
    DelService,
    /// [`Op::DelAddress`]
    DelAddress,
    /// [`Op::DelEntries`]
    DelEntries,
    /// [`Op::RemoveRules`]
    RemoveRules,
    /// [`Op::DestroySet`]
    DestroySet,
    /// [`Op::DeleteLink`]
    DeleteLink,
}

/// The kernel objects the agent changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Object {
    /// `kube-ipvs0`.
    Link,
    /// A sysctl.
    Sysctl,
    /// A KUBE-* set itself.
    Set,
    /// Entries of a set.
    SetEntry,
    /// A VIP bound on `kube-ipvs0`.
    Address,
    /// The agent's iptables chains and jumps of one family.
    Rules,
    /// An IPVS virtual server.
    VirtualServer,
    /// An IPVS real server.
    RealServer,
}

impl OpKind {
    /// Every kind, in the order a plan uses them.
    pub const ALL: [OpKind; 17] = [
        OpKind::CreateLink,
        OpKind::SetSysctl,
        OpKind::CreateSet,
        OpKind::AddEntries,
        OpKind::AddAddress,
        OpKind::WriteRules,
        OpKind::AddService,
        OpKind::UpdateService,
        OpKind::AddDestination,
        OpKind::UpdateDestination,
        OpKind::DelDestination,
        OpKind::DelService,
        OpKind::DelAddress,
        OpKind::DelEntries,
        OpKind::RemoveRules,
        OpKind::DestroySet,
        OpKind::DeleteLink,
    ];

    /// The `kind` label of `kube_proxy_ipvs_operations_total`.
    pub fn label(self) -> &'static str {
        match self {
            OpKind::CreateLink => "create_link",
            OpKind::SetSysctl => "set_sysctl",
            OpKind::CreateSet => "create_set",
            OpKind::AddEntries => "add_set_entries",
            OpKind::AddAddress => "add_address",
            OpKind::WriteRules => "write_rules",
            OpKind::AddService => "add_service",
            OpKind::UpdateService => "update_service",
            OpKind::AddDestination => "add_destination",
            OpKind::UpdateDestination => "update_destination",
            OpKind::DelDestination => "del_destination",
            OpKind::DelService => "del_service",
            OpKind::DelAddress => "del_address",
            OpKind::DelEntries => "del_set_entries",
            OpKind::RemoveRules => "remove_rules",
            OpKind::DestroySet => "destroy_set",
            OpKind::DeleteLink => "delete_link",
        }
    }

    /// The kernel object the operation changes.
    pub fn object(self) -> Object {
        match self {
            OpKind::CreateLink | OpKind::DeleteLink => Object::Link,
            OpKind::SetSysctl => Object::Sysctl,
            OpKind::CreateSet | OpKind::DestroySet => Object::Set,
            OpKind::AddEntries | OpKind::DelEntries => Object::SetEntry,
            OpKind::AddAddress | OpKind::DelAddress => Object::Address,
            OpKind::WriteRules | OpKind::RemoveRules => Object::Rules,
            OpKind::AddService | OpKind::UpdateService | OpKind::DelService => {
                Object::VirtualServer
            }
            OpKind::AddDestination | OpKind::UpdateDestination | OpKind::DelDestination => {
                Object::RealServer
            }
        }
    }

    /// True when the operation takes something away (deletes or removes): the plan puts
    /// these after every addition, and the kernel keeps that order.
    pub fn removes(self) -> bool {
        matches!(
            self,
            OpKind::DelDestination
                | OpKind::DelService
                | OpKind::DelAddress
                | OpKind::DelEntries
                | OpKind::RemoveRules
                | OpKind::DestroySet
                | OpKind::DeleteLink
        )
    }
}

impl Object {
    /// The object's name in labels and logs (`virtual_server`, `set_entry`...).
    pub fn label(self) -> &'static str {
        match self {
            Object::Link => "link",
            Object::Sysctl => "sysctl",
            Object::Set => "set",
            Object::SetEntry => "set_entry",
            Object::Address => "address",
            Object::Rules => "rules",
            Object::VirtualServer => "virtual_server",
            Object::RealServer => "real_server",
        }
    }

    /// True for the objects IPVS holds.
    pub fn is_ipvs(self) -> bool {
        matches!(self, Object::VirtualServer | Object::RealServer)
    }
}

impl Op {
    /// The operation's kind.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::CreateLink => OpKind::CreateLink,
            Op::SetSysctl { .. } => OpKind::SetSysctl,
            Op::CreateSet { .. } => OpKind::CreateSet,
            Op::AddEntries { .. } => OpKind::AddEntries,
            Op::AddAddress(_) => OpKind::AddAddress,
            Op::WriteRules { .. } => OpKind::WriteRules,
            Op::AddService { .. } => OpKind::AddService,
            Op::UpdateService { .. } => OpKind::UpdateService,
            Op::AddDestination { .. } => OpKind::AddDestination,
            Op::UpdateDestination { .. } => OpKind::UpdateDestination,
            Op::DelDestination { .. } => OpKind::DelDestination,
            Op::DelService(_) => OpKind::DelService,
            Op::DelAddress(_) => OpKind::DelAddress,
            Op::DelEntries { .. } => OpKind::DelEntries,
            Op::RemoveRules { .. } => OpKind::RemoveRules,
            Op::DestroySet(_) => OpKind::DestroySet,
            Op::DeleteLink => OpKind::DeleteLink,
        }
    }
}

/// `ops` counted by kind.
pub fn count(ops: &[Op]) -> std::collections::BTreeMap<OpKind, u64> {
    let mut counts = std::collections::BTreeMap::new();
    for op in ops {
        *counts.entry(op.kind()).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::model::kernel::sets::named;

    #[test]
    fn labels_are_distinct_and_every_kind_is_listed_once() {
        let labels: BTreeSet<&str> = OpKind::ALL.iter().map(|k| k.label()).collect();
        assert_eq!(labels.len(), OpKind::ALL.len());
        let kinds: BTreeSet<OpKind> = OpKind::ALL.into_iter().collect();
        assert_eq!(kinds.len(), OpKind::ALL.len());
    }

    #[test]
    fn removals_are_exactly_the_deletions() {
        for kind in OpKind::ALL {
            let label = kind.label();
            let deletes = ["del_", "remove_", "destroy_", "delete_"]
                .iter()
                .any(|p| label.starts_with(p));
            assert_eq!(kind.removes(), deletes, "{label}");
        }
    }

    #[test]
    fn each_operation_names_its_object() {
        let key = crate::model::kernel::VsKey {
            address: "10.96.0.10".parse().unwrap(),
            protocol: crate::model::snapshot::cluster::Protocol::Tcp,
            port: 80,
        };
        let cases = [
            (Op::DelService(key), Object::VirtualServer),
            (
                Op::UpdateDestination {
                    key,
                    destination: "10.244.0.2:8080".parse().unwrap(),
                    weight: 0,
                },
                Object::RealServer,
            ),
            (Op::DestroySet(named("KUBE-CLUSTER-IP")), Object::Set),
            (
                Op::AddAddress("10.96.0.10".parse().unwrap()),
                Object::Address,
            ),
            (Op::DeleteLink, Object::Link),
        ];
        for (op, object) in cases {
            assert_eq!(op.kind().object(), object, "{op}");
        }
        assert!(Object::RealServer.is_ipvs() && !Object::Address.is_ipvs());
    }
}
