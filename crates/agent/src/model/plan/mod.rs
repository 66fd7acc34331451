//! The difference between the desired and the observed kernel state, as an ordered list of
//! operations.
//!
//! The order keeps traffic flowing while the state changes: everything new is added before
//! anything old is removed, claims on virtual servers (the ownership set) are recorded before
//! the servers are made and dropped after they are deleted, and only virtual servers the agent
//! owns are ever deleted. The order is written once, in the plan builder's phases; the whole
//! plan ([`plan_draining`]) and the scoped one ([`plan_scoped`]) differ only in which objects
//! they compare.
//!
//! # Layout
//! - `op`: [`Op`], one change to the kernel.
//! - `phases`: the plan builder: what each object needs, put in its phase, and the phases
//!   joined in plan order.
//! - `ownership`: [`owns`], which observed virtual servers are the agent's to delete.
//! - `scope`: [`Scope`], the keys a change touched: all a scoped plan compares.
//! - [`op_kind`]: what kind of change an operation is and which kernel object it changes, the
//!   one classification metrics, the kernel's routing and drift read.
//! - [`drift`]: what a full sync repaired that someone else had changed, by kind of object.
//! - [`drain`]: graceful termination, which removed real servers drain and since when.
//! - [`priority`]: the Services a node needs first, planned ahead of the full state on a cold
//!   start.
//! - [`leftovers`]: what kube-proxy's other modes leave on a node, and the input that removes it.
//! - `tests`: the plan's order and scope.

pub mod drain;
pub mod drift;
pub mod leftovers;
mod op;
pub mod op_kind;
mod ownership;
mod phases;
pub mod priority;
mod scope;

use std::collections::BTreeSet;

use ipnet::IpNet;

use crate::model::desired::warning::Warning;
use crate::model::kernel::{KernelState, Set, SetEntry, VsKey};
use drain::DestinationKey;
pub use op::Op;
pub use ownership::owns;
use phases::Phases;
pub use scope::Scope;

/// An ordered list of operations, and what could not be planned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The operations, in order.
    pub ops: Vec<Op>,
    /// Problems the plan works around (a set of the wrong type that it must not replace:
    /// [`Warning::SetKind`]).
    pub warnings: Vec<Warning>,
}

impl Plan {
    /// True when nothing needs to change.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Plans the changes that turn `observed` into `desired`. Virtual servers inside
/// `exclude_cidrs` are never deleted. Removed real servers drain as [`plan_draining`] says,
/// none of them past its bound.
pub fn plan(desired: &KernelState, observed: &KernelState, exclude_cidrs: &[IpNet]) -> Plan {
    plan_draining(desired, observed, exclude_cidrs, &BTreeSet::new())
}

/// Plans the changes that turn `observed` into `desired`, draining removed real servers
/// (graceful termination, see [`crate::model::plan::drain`]).
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
    let mut p = Phases::default();
    p.link(desired, observed);
    p.sysctls(desired, observed);
    // Sets the agent does not want are not its to touch.
    for (name, want) in &desired.sets {
        let have = observed.sets.get(name);
        if p.set(*name, want, have) {
            let (add, del) = entry_changes(want, have);
            p.entries(*name, add, del);
        }
    }
    for ip in desired.addresses.symmetric_difference(&observed.addresses) {
        p.address(
            *ip,
            desired.addresses.contains(ip),
            observed.addresses.contains(ip),
        );
    }
    for (family, want) in &desired.rules {
        p.rules(*family, want, observed.rules.get(family));
    }
    p.reserve_virtual_servers(desired, observed);
    for (key, want) in &desired.services {
        p.virtual_server(key, want, observed.services.get(key), expired);
    }
    for key in observed.services.keys() {
        if !desired.services.contains_key(key) {
            p.unwanted_virtual_server(key, observed, exclude_cidrs);
        }
    }
    p.finish()
}

/// [`plan_draining`] on the keys of `scope` alone: what a change of some Services needs,
/// without walking the rest of the state. The caller vouches that nothing outside the scope
/// changed since the last plan was applied (the full syncs check the rest, sysctls among
/// them). Real servers that drain past their bound (`expired`) are deleted whatever the scope.
pub fn plan_scoped(
    desired: &KernelState,
    observed: &KernelState,
    exclude_cidrs: &[IpNet],
    expired: &BTreeSet<DestinationKey>,
    scope: &Scope,
) -> Plan {
    let mut p = Phases::default();
    p.link(desired, observed);
    // A set of the wrong type warns here too, when the change has entries for it.
    for (name, entries) in &scope.entries {
        let Some(want) = desired.sets.get(name) else {
            continue;
        };
        let have = observed.sets.get(name);
        if p.set(*name, want, have) {
            let (add, del) = entry_changes_among(entries, want, have);
            p.entries(*name, add, del);
        }
    }
    for ip in &scope.addresses {
        p.address(
            *ip,
            desired.addresses.contains(ip),
            observed.addresses.contains(ip),
        );
    }
    for family in &scope.rules {
        if let Some(want) = desired.rules.get(family) {
            p.rules(*family, want, observed.rules.get(family));
        }
    }
    // Expired drains too: the bound runs out whether or not their Service changed.
    let keys: BTreeSet<VsKey> = scope
        .services
        .iter()
        .copied()
        .chain(expired.iter().map(|(k, _)| *k))
        .collect();
    for key in &keys {
        match (desired.services.get(key), observed.services.get(key)) {
            (Some(want), have) => p.virtual_server(key, want, have, expired),
            (None, Some(_)) => p.unwanted_virtual_server(key, observed, exclude_cidrs),
            (None, None) => {}
        }
    }
    p.finish()
}

/// The entries to add to and remove from a set the plan wants as `want`.
fn entry_changes(want: &Set, have: Option<&Set>) -> (Vec<SetEntry>, Vec<SetEntry>) {
    let empty = BTreeSet::new();
    let have = have.map(|h| &h.entries).unwrap_or(&empty);
    (
        want.entries.difference(have).copied().collect(),
        have.difference(&want.entries).copied().collect(),
    )
}

/// [`entry_changes`] among `entries` alone.
fn entry_changes_among(
    entries: &BTreeSet<SetEntry>,
    want: &Set,
    have: Option<&Set>,
) -> (Vec<SetEntry>, Vec<SetEntry>) {
    let has = |e: &SetEntry| have.is_some_and(|h| h.entries.contains(e));
    let wants = |e: &SetEntry| want.entries.contains(e);
    (
        entries
            .iter()
            .filter(|e| wants(e) && !has(e))
            .copied()
            .collect(),
        entries
            .iter()
            .filter(|e| !wants(e) && has(e))
            .copied()
            .collect(),
    )
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
                rules: Box::new(rules.clone()),
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
        p.ops.push(Op::DestroySet(*name));
    }
    p
}

#[cfg(test)]
mod tests;
