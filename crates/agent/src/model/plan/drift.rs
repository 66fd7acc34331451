//! Drift: what a full sync repaired that someone else had changed. Counted by the kind of
//! kernel object ([`crate::model::plan::op_kind::Object`]; the rules split into chains and
//! jumps) with a few examples each for the log.

use std::collections::BTreeMap;
use std::fmt;

use crate::model::kernel::canonical::canonical;
use crate::model::kernel::{Jump, KernelState, LINK_NAME, Rules};
use crate::model::plan::op_kind::{Object, OpKind};
use crate::model::plan::{Op, Plan};
use crate::model::snapshot::cluster::Family;

/// The kinds of kernel object whose drift is counted: the objects operations change
/// ([`Object`]), the rules split into their chains and jumps.
///
/// Declared in the order of their labels: the log lists a drift's kinds in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DriftKind {
    /// A VIP on `kube-ipvs0`.
    Address,
    /// One of the agent's chains.
    Chain,
    /// A jump from a built-in chain into the agent's.
    Jump,
    /// `kube-ipvs0` itself.
    Link,
    /// An IPVS real server.
    RealServer,
    /// A set itself.
    Set,
    /// An entry of a set.
    SetEntry,
    /// A sysctl.
    Sysctl,
    /// An IPVS virtual server.
    VirtualServer,
}

impl DriftKind {
    /// Every kind, as `kube_proxy_ipvs_drift_repaired_total` lists them.
    pub const ALL: [DriftKind; 9] = [
        DriftKind::VirtualServer,
        DriftKind::RealServer,
        DriftKind::Set,
        DriftKind::SetEntry,
        DriftKind::Chain,
        DriftKind::Jump,
        DriftKind::Address,
        DriftKind::Link,
        DriftKind::Sysctl,
    ];

    /// The `kind` label of `kube_proxy_ipvs_drift_repaired_total`, and the kind's name in
    /// the log.
    pub fn label(self) -> &'static str {
        match self {
            DriftKind::Address => "address",
            DriftKind::Chain => "chain",
            DriftKind::Jump => "jump",
            DriftKind::Link => "link",
            DriftKind::RealServer => "real_server",
            DriftKind::Set => "set",
            DriftKind::SetEntry => "set_entry",
            DriftKind::Sysctl => "sysctl",
            DriftKind::VirtualServer => "virtual_server",
        }
    }
}

/// The kind an object's drift counts as: the rules, when not split into chains and jumps,
/// as a rewrite of the agent's chains.
impl From<Object> for DriftKind {
    fn from(object: Object) -> Self {
        match object {
            Object::Link => DriftKind::Link,
            Object::Sysctl => DriftKind::Sysctl,
            Object::Set => DriftKind::Set,
            Object::SetEntry => DriftKind::SetEntry,
            Object::Address => DriftKind::Address,
            Object::Rules => DriftKind::Chain,
            Object::VirtualServer => DriftKind::VirtualServer,
            Object::RealServer => DriftKind::RealServer,
        }
    }
}

impl fmt::Display for DriftKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// How many examples of each kind [`Drift`] keeps for its log line.
const DRIFT_EXAMPLES: usize = 3;

/// Kernel objects a full sync put back after someone else changed them, by
/// [`DriftKind`]: a virtual server deleted or re-scheduled, a real server deleted or
/// re-weighted, a set destroyed, set entries removed or added, a chain deleted or its rules
/// changed, a jump from a built-in chain deleted, an address of `kube-ipvs0` removed or
/// added, the link deleted, a sysctl changed. Real servers that drain, or end draining, are
/// the agent's own doing and never drift.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drift {
    /// Objects repaired, by kind.
    pub counts: BTreeMap<DriftKind, u64>,
    /// The first few objects of each kind, named for the log.
    pub examples: BTreeMap<DriftKind, Vec<String>>,
}

impl Drift {
    /// The objects `plan` repairs in `observed` (the kernel as read by the full sync that made
    /// the plan), by kind.
    pub fn of(plan: &Plan, observed: &KernelState) -> Drift {
        let mut d = Drift::default();
        for op in plan.ops.iter().filter(|op| repairs(op)) {
            match op {
                Op::WriteRules {
                    family,
                    rules,
                    missing_jumps,
                } => d.add_rules(*family, rules, missing_jumps, observed),
                _ => d.add(op.kind().object().into(), objects(op), || {
                    example(op, observed)
                }),
            }
        }
        d
    }

    /// Every object repaired, all kinds together.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// True when nothing was repaired.
    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    fn add(&mut self, kind: DriftKind, n: u64, example: impl FnOnce() -> String) {
        if n == 0 {
            return;
        }
        *self.counts.entry(kind).or_default() += n;
        let examples = self.examples.entry(kind).or_default();
        if examples.len() < DRIFT_EXAMPLES {
            examples.push(example());
        }
    }

    /// A rewrite of the rules of `family`: each chain that differs, each jump missing.
    fn add_rules(
        &mut self,
        family: Family,
        rules: &Rules,
        missing_jumps: &[Jump],
        observed: &KernelState,
    ) {
        let suffix = match family {
            Family::V4 => "",
            Family::V6 => " (IPv6)",
        };
        let have = observed.rules.get(&family).cloned().unwrap_or_default();
        let (want_chains, have_chains) = (canonical(rules, family), canonical(&have, family));
        let mut counted = false;
        for (chain, lines) in &want_chains {
            if have_chains.get(chain) != Some(lines) {
                counted = true;
                let missing = !have_chains.contains_key(chain);
                self.add(DriftKind::Chain, 1, || {
                    let how = if missing { "missing" } else { "changed" };
                    format!("{} {} {how}{suffix}", chain.0, chain.1)
                });
            }
        }
        for jump in missing_jumps {
            counted = true;
            self.add(DriftKind::Jump, 1, || {
                format!("{} {}{suffix}", jump.table, jump_name(jump))
            });
        }
        if !counted {
            // Planned for a difference the canonical form does not show: still a rewrite of
            // the agent's chains.
            self.add(DriftKind::Chain, 1, || format!("rules{suffix}"));
        }
    }
}

/// False for the operations that put back nothing someone else changed: a real server's
/// drain (weight 0) and its end (deletion) are the agent's own doing, and only `--cleanup`
/// removes rules, sets or the link.
fn repairs(op: &Op) -> bool {
    !matches!(
        op,
        Op::UpdateDestination { weight: 0, .. } | Op::DelDestination { .. }
    ) && !matches!(
        op.kind(),
        OpKind::RemoveRules | OpKind::DestroySet | OpKind::DeleteLink
    )
}

/// How many objects `op` repairs: each set entry counts.
fn objects(op: &Op) -> u64 {
    match op {
        Op::AddEntries { entries, .. } | Op::DelEntries { entries, .. } => entries.len() as u64,
        _ => 1,
    }
}

/// The object `op` repairs, named for the log, with what was wrong with it.
fn example(op: &Op, observed: &KernelState) -> String {
    match op {
        Op::CreateLink => LINK_NAME.into(),
        Op::SetSysctl { key, value } => {
            let was = observed.sysctls.get(&**key).map_or("unset", String::as_str);
            format!("{key} {was} -> {value}")
        }
        Op::CreateSet(name) => name.to_string(),
        Op::AddEntries { set, entries } | Op::DelEntries { set, entries } => {
            let how = if op.kind() == OpKind::AddEntries {
                "missing"
            } else {
                "foreign"
            };
            let first = entries.first().map(ToString::to_string).unwrap_or_default();
            format!("{set} {first} {how}")
        }
        Op::AddAddress(ip) => format!("{ip} missing"),
        Op::DelAddress(ip) => format!("{ip} foreign"),
        Op::AddService { key, .. } => format!("{key} missing"),
        Op::UpdateService { key, service } => {
            let was = observed
                .services
                .get(key)
                .map_or("?", |vs| vs.scheduler.as_str());
            format!("{key} scheduler {was} -> {}", service.scheduler)
        }
        Op::DelService(key) => format!("{key} foreign"),
        Op::AddDestination {
            key, destination, ..
        } => format!("{destination} of {key} missing"),
        Op::UpdateDestination {
            key,
            destination,
            weight,
        } => {
            let was = observed
                .services
                .get(key)
                .and_then(|vs| vs.destinations.get(destination))
                .map_or("?".to_string(), ToString::to_string);
            format!("{destination} of {key} weight {was} -> {weight}")
        }
        other => other.to_string(),
    }
}

/// A jump named for the log: `PREROUTING -> KUBE-SERVICES`.
fn jump_name(jump: &Jump) -> String {
    format!("{} -> {}", jump.chain, jump.target)
}

/// `1 virtual_server (10.96.0.10:80/TCP missing), 2 real_server (a, b)`: counts by kind with
/// a few examples each, `, ...` when there were more.
impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (kind, n) in &self.counts {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{n} {kind}")?;
            let examples = self.examples.get(kind).map(Vec::as_slice).unwrap_or(&[]);
            if !examples.is_empty() {
                let more = if (examples.len() as u64) < *n {
                    ", ..."
                } else {
                    ""
                };
                write!(f, " ({}{more})", examples.join(", "))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernel::sets::named;

    #[test]
    fn a_long_drift_is_cut_to_a_few_examples() {
        let mut d = Drift::default();
        for i in 0..5 {
            d.add(DriftKind::Address, 1, || format!("10.96.0.{i} missing"));
        }
        let prerouting = crate::model::kernel::chains::JUMPS
            .iter()
            .find(|j| j.chain == "PREROUTING")
            .unwrap();
        d.add(DriftKind::Jump, 1, || {
            format!("nat {}", jump_name(prerouting))
        });
        assert_eq!(d.total(), 6);
        assert_eq!(
            d.to_string(),
            "5 address (10.96.0.0 missing, 10.96.0.1 missing, 10.96.0.2 missing, ...), \
             1 jump (nat PREROUTING -> KUBE-SERVICES)"
        );
        assert!(Drift::default().is_empty());
        assert_eq!(Drift::default().to_string(), "");
    }

    #[test]
    fn kinds_are_listed_once_and_ordered_as_their_labels() {
        let labels: Vec<&str> = {
            let mut kinds = DriftKind::ALL;
            kinds.sort();
            kinds.iter().map(|k| k.label()).collect()
        };
        let mut sorted = labels.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(labels, sorted);
        assert_eq!(DriftKind::from(Object::Rules), DriftKind::Chain);
    }

    #[test]
    fn drains_and_cleanup_repair_nothing() {
        let key = crate::model::kernel::VsKey {
            address: "10.96.0.10".parse().unwrap(),
            protocol: crate::model::snapshot::cluster::Protocol::Tcp,
            port: 80,
        };
        let destination = "10.244.0.2:8080".parse().unwrap();
        let plan = Plan {
            ops: vec![
                Op::UpdateDestination {
                    key,
                    destination,
                    weight: 0,
                },
                Op::DelDestination { key, destination },
                Op::DestroySet(named("KUBE-CLUSTER-IP")),
                Op::DeleteLink,
                Op::UpdateDestination {
                    key,
                    destination,
                    weight: 1,
                },
            ],
            warnings: Vec::new(),
        };
        let d = Drift::of(&plan, &KernelState::default());
        assert_eq!(
            d.to_string(),
            "1 real_server (10.244.0.2:8080 of 10.96.0.10:80/tcp weight ? -> 1)"
        );
    }
}
