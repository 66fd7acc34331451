//! Drift: what a full sync repaired that someone else had changed. Counted by the kind of
//! kernel object ([`super::op_kind::Object`]; the rules split into chains and jumps) with a
//! few examples each for the log.

use std::collections::BTreeMap;
use std::fmt;

use super::cluster::Family;
use super::iptables::canonical;
use super::kernel::{KernelState, LINK_NAME, Rules};
use super::op_kind::OpKind;
use super::plan::{Op, Plan};

/// The kinds of kernel object whose drift is counted, as the `kind` label of
/// `kube_proxy_ipvs_drift_repaired_total` names them.
pub const DRIFT_KINDS: &[&str] = &[
    "virtual_server",
    "real_server",
    "set",
    "set_entry",
    "chain",
    "jump",
    "address",
    "link",
    "sysctl",
];

/// How many examples of each kind [`Drift`] keeps for its log line.
const DRIFT_EXAMPLES: usize = 3;

/// Kernel objects a full sync put back after someone else changed them, by kind (one of
/// [`DRIFT_KINDS`]): a virtual server deleted or re-scheduled, a real server deleted or
/// re-weighted, a set destroyed, set entries removed or added, a chain deleted or its rules
/// changed, a jump from a built-in chain deleted, an address of `kube-ipvs0` removed or
/// added, the link deleted, a sysctl changed. Real servers that drain, or end draining, are
/// the agent's own doing and never drift.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drift {
    /// Objects repaired, by kind.
    pub counts: BTreeMap<&'static str, u64>,
    /// The first few objects of each kind, named for the log.
    pub examples: BTreeMap<&'static str, Vec<String>>,
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
                _ => d.add(op.kind().object().label(), objects(op), || {
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

    fn add(&mut self, kind: &'static str, n: u64, example: impl FnOnce() -> String) {
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
        missing_jumps: &[(String, String)],
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
                self.add("chain", 1, || {
                    let how = if missing { "missing" } else { "changed" };
                    format!("{} {} {how}{suffix}", chain.0, chain.1)
                });
            }
        }
        for (table, jump) in missing_jumps {
            counted = true;
            self.add("jump", 1, || format!("{table} {}{suffix}", jump_name(jump)));
        }
        if !counted {
            // Planned for a difference the canonical form does not show: still a rewrite of
            // the agent's chains.
            self.add("chain", 1, || format!("rules{suffix}"));
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
            let was = observed.sysctls.get(key).map_or("unset", String::as_str);
            format!("{key} {was} -> {value}")
        }
        Op::CreateSet { name, .. } => name.clone(),
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

/// `-A PREROUTING -m comment --comment "..." -j KUBE-SERVICES` as `PREROUTING -> KUBE-SERVICES`.
fn jump_name(rule: &str) -> String {
    let chain = rule
        .strip_prefix("-A ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or("?");
    let target = rule.rsplit_once("-j ").map_or("?", |(_, t)| t.trim());
    format!("{chain} -> {target}")
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
    use crate::model::op_kind::Object;

    #[test]
    fn a_long_drift_is_cut_to_a_few_examples() {
        let mut d = Drift::default();
        for i in 0..5 {
            d.add("address", 1, || format!("10.96.0.{i} missing"));
        }
        d.add("jump", 1, || {
            format!(
                "nat {}",
                jump_name("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES")
            )
        });
        assert_eq!(d.total(), 6);
        assert_eq!(
            d.to_string(),
            "5 address (10.96.0.0 missing, 10.96.0.1 missing, 10.96.0.2 missing, ...), \
             1 jump (nat PREROUTING -> KUBE-SERVICES)"
        );
        assert!(Drift::default().is_empty());
        assert_eq!(Drift::default().to_string(), "");
        for kind in d.counts.keys() {
            assert!(DRIFT_KINDS.contains(kind));
        }
    }

    #[test]
    fn every_object_an_operation_repairs_is_a_drift_kind() {
        // The rules count as their chains and jumps.
        for object in [
            Object::Link,
            Object::Sysctl,
            Object::Set,
            Object::SetEntry,
            Object::Address,
            Object::VirtualServer,
            Object::RealServer,
        ] {
            assert!(DRIFT_KINDS.contains(&object.label()), "{object:?}");
        }
        assert!(!DRIFT_KINDS.contains(&Object::Rules.label()));
    }

    #[test]
    fn drains_and_cleanup_repair_nothing() {
        let key = crate::model::kernel::VsKey {
            address: "10.96.0.10".parse().unwrap(),
            protocol: crate::model::cluster::Protocol::Tcp,
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
                Op::DestroySet("KUBE-CLUSTER-IP".into()),
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
