//! What each Service put in the desired state, so that it can be taken out again alone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use crate::model::desired::iptables::OutFilter;
use crate::model::kernel::{SetEntry, SetName, VsKey};
use crate::model::snapshot::cluster::Family;

/// What one Service put in the desired state, by key only (the content lives in the composed
/// state): its claims on virtual servers, its set entries, its VIPs, its out filters and its
/// Local-policy ports without local endpoints. [`crate::model::incremental`] takes a Service out of
/// the state by its footprint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Footprint {
    /// Virtual servers it asked for, won or not.
    pub vs: Vec<VsKey>,
    /// Set entries, by set.
    pub entries: Vec<(SetName, SetEntry)>,
    /// Addresses it bound on `kube-ipvs0`.
    pub addresses: Vec<IpAddr>,
    /// Load-balancer out filters.
    pub out_filters: Vec<OutFilter>,
    /// Per family, `(internal, external)` ports without local endpoints.
    pub no_local: BTreeMap<Family, (u64, u64)>,
}

impl Footprint {
    /// Sorts each list and drops repeats (a Service may put one key in twice).
    pub(super) fn dedup(&mut self) {
        self.vs.sort_unstable();
        self.vs.dedup();
        self.entries.sort_unstable();
        self.entries.dedup();
        self.addresses.sort_unstable();
        self.addresses.dedup();
        self.out_filters.sort_unstable();
        self.out_filters.dedup();
    }
}

/// How many Services put in each set entry, VIP and out filter, and the virtual servers more
/// than one Service wants.
#[derive(Debug, Clone, Default)]
pub(crate) struct Footprints {
    /// Set entries, keyed by set and entry.
    pub entries: HashMap<(SetName, SetEntry), u32>,
    /// VIPs on `kube-ipvs0`.
    pub addresses: HashMap<IpAddr, u32>,
    /// Load-balancer out filters.
    pub out_filters: BTreeMap<OutFilter, u32>,
    /// Virtual servers wanted by two Services or more (a conflict: the first keeps it).
    pub contested: BTreeSet<VsKey>,
}

impl Footprints {
    /// Counts `f`'s set entries, VIPs and out filters once more.
    pub(super) fn count(&mut self, f: &Footprint) {
        for entry in &f.entries {
            *self.entries.entry(*entry).or_default() += 1;
        }
        for a in &f.addresses {
            *self.addresses.entry(*a).or_default() += 1;
        }
        for o in &f.out_filters {
            *self.out_filters.entry(o.clone()).or_default() += 1;
        }
    }
}
