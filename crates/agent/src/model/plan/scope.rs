//! The keys a change touched ([`Scope`]): what a scoped plan compares, found by the kept
//! state when it moves Service by Service and passed through the plan, its tracking and the
//! conntrack filter.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::model::kernel::{SetEntry, SetName, VsKey};
use crate::model::snapshot::cluster::Family;

/// The keys a change touched: the plan compares the desired and the observed state on these
/// alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Virtual servers.
    pub services: BTreeSet<VsKey>,
    /// Set entries, by set name.
    pub entries: BTreeMap<SetName, BTreeSet<SetEntry>>,
    /// VIPs on `kube-ipvs0`.
    pub addresses: BTreeSet<IpAddr>,
    /// Families whose rules changed.
    pub rules: BTreeSet<Family>,
}

impl Scope {
    /// True when the change moved nothing.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
            && self.entries.is_empty()
            && self.addresses.is_empty()
            && self.rules.is_empty()
    }
}
