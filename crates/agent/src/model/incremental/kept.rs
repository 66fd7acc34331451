//! The desired state kept up to date Service by Service, so that a change costs what it
//! changes rather than what the cluster holds.
//!
//! [`Kept::build`] computes the whole state once, as [`crate::model::desired::desired`] does.
//! [`Kept::update`] is handed what changed since ([`Changes`], as the source recorded it): it
//! takes the changed Services out by their old footprints (the keys each put in: virtual
//! servers, set entries, VIPs, out filters), computed again from the objects the change
//! recorded as they were, puts them back as they are now, and returns the [`Scope`] of keys
//! that moved, so that the plan looks at those alone. Entries and VIPs two Services share
//! are counted, so one Service leaving does not take the other's away. What a Service
//! cannot be moved alone for (the Node, the host's addresses, a virtual server two Services
//! want) makes `update` decline, and the caller builds from scratch. The state holds no copy
//! of the snapshot it is for: the changes carry the earlier objects. The property test of
//! [`super`] checks that updates land on the state a build computes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use crate::model::desired::iptables::OutFilter;
use crate::model::desired::{
    Desired, Footprint, Host, build, family_rules, footprints_of, resolve_node_settings,
};
use crate::model::kernel::sets::{self, SetName};
use crate::model::kernel::{SetEntry, VsKey};
use crate::model::plan::Scope;
use crate::model::snapshot::changes::Changes;
use crate::model::snapshot::cluster::{
    Cluster, EndpointSlice, Family, Node, Service, ServiceRef, SlicesByService,
};
use crate::model::snapshot::config::ProxyConfig;

/// A set entry as the sharing counts key it.
type EntryKey = (SetName, SetEntry);

/// The desired state with what it takes to change it one Service at a time.
#[derive(Debug, Clone)]
pub struct Kept {
    config: ProxyConfig,
    host: Host,
    desired: Desired,
    /// Virtual servers two Services want.
    contested: BTreeSet<VsKey>,
    /// Entries more than one Service put in: how many more than one.
    shared_entries: HashMap<EntryKey, u32>,
    /// VIPs more than one Service bound: how many more than one.
    shared_addresses: HashMap<IpAddr, u32>,
    /// Out filters and how many Services want each.
    out_filters: BTreeMap<OutFilter, u32>,
    /// The Node the state was made for: its zone, addresses and pod CIDRs reach every
    /// Service.
    node: Option<Node>,
}

impl Kept {
    /// The whole desired state of `cluster`.
    pub fn build(cluster: &Cluster, config: &ProxyConfig, host: &Host) -> Self {
        let (desired, prints) = build(cluster, config, host, true);
        Kept {
            config: config.clone(),
            host: host.clone(),
            desired,
            contested: prints.contested,
            shared_entries: more(prints.entries),
            shared_addresses: more(prints.addresses),
            out_filters: prints.out_filters,
            node: cluster.node.clone(),
        }
    }

    /// The desired state.
    pub fn desired(&self) -> &Desired {
        &self.desired
    }

    /// The desired state, to be made wrong (tests of what finds a kept state wrong).
    #[cfg(test)]
    pub(crate) fn desired_mut(&mut self) -> &mut Desired {
        &mut self.desired
    }

    /// Brings the state to `cluster` on `host`, into which `changes` changed the snapshot of
    /// the last build or update. Returns the keys that moved, or `None` when a change
    /// reaches beyond its Services (the Node, the host's addresses, a virtual server two
    /// Services want): then nothing was changed, and the caller builds again.
    pub fn update(&mut self, cluster: &Cluster, host: &Host, changes: &Changes) -> Option<Scope> {
        let slices = cluster.slices_of_services(changes.services());
        self.update_with(cluster, host, changes, &slices)
    }

    /// [`Kept::update`] with the slices of the changed Services in `cluster` already found.
    pub fn update_with(
        &mut self,
        cluster: &Cluster,
        host: &Host,
        changes: &Changes,
        slices: &SlicesByService<'_>,
    ) -> Option<Scope> {
        if changes.node_changed() || cluster.node != self.node || *host != self.host {
            return None;
        }
        let changed = changes.services();
        let present: Vec<(&Arc<Service>, Vec<&EndpointSlice>)> = changed
            .iter()
            .filter_map(|id| cluster.services.get(id))
            .map(|svc| (svc, slices.of(&svc.id).to_vec()))
            .collect();
        let (mut fresh, prints) = footprints_of(cluster, &self.config, &self.host, &present);
        if !fresh.conflicts.is_empty() {
            return None;
        }
        // What the changed Services put in before, computed again from their objects as the
        // changes recorded them (the Node and the host are those the state was made for, so
        // this is what they put in): kept, the footprints of every Service were a fifth of
        // the desired state's memory.
        let old_slices = changes.old_slices(slices);
        let old_present: Vec<(&Arc<Service>, Vec<&EndpointSlice>)> = changed
            .iter()
            .filter_map(|id| changes.old_service(id, cluster))
            .map(|svc| (svc, old_slices.of(&svc.id).to_vec()))
            .collect();
        let (_, old_prints) = footprints_of(cluster, &self.config, &self.host, &old_present);
        let olds: Vec<(&ServiceRef, Footprint)> = old_present
            .iter()
            .map(|(svc, _)| &svc.id)
            .zip(old_prints)
            .collect();
        let old_contested = olds
            .iter()
            .any(|(_, f)| f.vs.iter().any(|k| self.contested.contains(k)));
        let new_conflict = prints.iter().flat_map(|f| &f.vs).any(|k| {
            self.desired
                .owners
                .get(k)
                .is_some_and(|o| !changed.contains(&o.id))
        });
        if old_contested || new_conflict {
            return None;
        }

        // From here on the state moves.
        let mut scope = Scope::default();
        // Virtual servers no changed Service wants any more go; the others are replaced
        // below. Shared keys are added before the old ones are dropped, so that a Service
        // that keeps an entry or a VIP does not take it out and put it back.
        let mut rules_may_change = self.drop_unwanted(&olds, &prints, &mut scope);
        for ((svc, _), f) in present.iter().zip(&prints) {
            rules_may_change |= self.put_in(svc, f, &mut fresh, &mut scope);
        }
        for (_, f) in &olds {
            rules_may_change |= self.take_out(f, &mut scope);
        }
        if rules_may_change {
            self.refresh_rules(cluster, &mut scope);
        }
        Some(scope)
    }

    /// Takes out the virtual servers of the changed Services' old footprints (`olds`) that
    /// none of their new ones (`prints`) wants. True when the rules may change.
    fn drop_unwanted(
        &mut self,
        olds: &[(&ServiceRef, Footprint)],
        prints: &[Footprint],
        scope: &mut Scope,
    ) -> bool {
        let mut rules_may_change = false;
        let wanted: BTreeSet<&VsKey> = prints.iter().flat_map(|f| &f.vs).collect();
        for (id, f) in olds {
            for k in &f.vs {
                if !wanted.contains(k) && self.desired.owners.get(k).is_some_and(|o| o.id == **id) {
                    self.desired.owners.remove(k);
                    self.desired.state.services.remove(k);
                    rules_may_change |= self.derived(owned(k), false, scope);
                    scope.services.insert(*k);
                }
            }
        }
        rules_may_change
    }

    /// Puts in what `svc` wants now (its footprint `f`): its virtual servers, taken from
    /// `fresh`, and its set entries, VIPs, out filters and counts. True when the rules may
    /// change.
    fn put_in(
        &mut self,
        svc: &Arc<Service>,
        f: &Footprint,
        fresh: &mut Desired,
        scope: &mut Scope,
    ) -> bool {
        let mut rules_may_change = false;
        for k in &f.vs {
            if let Some(vs) = fresh.state.services.remove(k) {
                if self.desired.state.services.get(k) != Some(&vs) {
                    scope.services.insert(*k);
                }
                self.desired.state.services.insert(*k, vs);
                self.desired.owners.insert(*k, Arc::clone(svc));
                rules_may_change |= self.derived(owned(k), true, scope);
            }
        }
        for (name, e) in &f.entries {
            rules_may_change |= self.add_entry(*name, *e, scope);
        }
        for a in &f.addresses {
            rules_may_change |= self.add_address(*a, scope);
        }
        for o in &f.out_filters {
            rules_may_change = true;
            *self.out_filters.entry(o.clone()).or_default() += 1;
        }
        for (family, (i, e)) in &f.no_local {
            let c = self.desired.no_local_endpoints.entry(*family).or_default();
            c.0 += i;
            c.1 += e;
        }
        rules_may_change
    }

    /// Takes out what a changed Service put in before (its old footprint `f`), but for its
    /// virtual servers ([`Kept::drop_unwanted`]): set entries, VIPs, out filters and counts,
    /// each as far as no other Service shares it. True when the rules may change.
    fn take_out(&mut self, f: &Footprint, scope: &mut Scope) -> bool {
        let mut rules_may_change = false;
        for (name, e) in &f.entries {
            rules_may_change |= self.remove_entry(*name, *e, scope);
        }
        for a in &f.addresses {
            rules_may_change |= self.remove_address(*a, scope);
        }
        for o in &f.out_filters {
            rules_may_change = true;
            if let Some(n) = self.out_filters.get_mut(o) {
                *n -= 1;
                if *n == 0 {
                    self.out_filters.remove(o);
                }
            }
        }
        for (family, (i, e)) in &f.no_local {
            if let Some(c) = self.desired.no_local_endpoints.get_mut(family) {
                c.0 -= i;
                c.1 -= e;
            }
        }
        rules_may_change
    }

    /// Computes the rules of every family again, and adds to `scope` the families whose
    /// rules changed.
    fn refresh_rules(&mut self, cluster: &Cluster, scope: &mut Scope) {
        let config = resolve_node_settings(cluster, &self.config);
        let filters: BTreeSet<OutFilter> = self.out_filters.keys().cloned().collect();
        for family in &config.families {
            let rules = family_rules(*family, &config, &self.desired.state, &filters);
            if self.desired.state.rules.get(family) != Some(&rules) {
                self.desired.state.rules.insert(*family, rules);
                scope.rules.insert(*family);
            }
        }
    }

    /// Adds (or removes) an entry only the state derives (ownership, VIPs), never shared.
    /// True when its set became empty or stopped being so.
    fn derived(&mut self, (name, e): (SetName, SetEntry), add: bool, scope: &mut Scope) -> bool {
        let Some(set) = self.desired.state.sets.get_mut(&name) else {
            return false;
        };
        let was_empty = set.entries.is_empty();
        let moved = if add {
            set.entries.insert(e)
        } else {
            set.entries.remove(&e)
        };
        let flipped = was_empty != set.entries.is_empty();
        if moved {
            scope.entries.entry(name).or_default().insert(e);
        }
        flipped
    }

    fn add_entry(&mut self, name: SetName, e: SetEntry, scope: &mut Scope) -> bool {
        let present = self
            .desired
            .state
            .sets
            .get(&name)
            .is_some_and(|s| s.entries.contains(&e));
        if present {
            *self.shared_entries.entry((name, e)).or_default() += 1;
            return false;
        }
        self.derived((name, e), true, scope)
    }

    fn remove_entry(&mut self, name: SetName, e: SetEntry, scope: &mut Scope) -> bool {
        let key = (name, e);
        if let Some(n) = self.shared_entries.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.shared_entries.remove(&key);
            }
            return false;
        }
        self.derived((name, e), false, scope)
    }

    fn add_address(&mut self, ip: IpAddr, scope: &mut Scope) -> bool {
        if !self.desired.state.addresses.insert(ip) {
            *self.shared_addresses.entry(ip).or_default() += 1;
            return false;
        }
        scope.addresses.insert(ip);
        self.derived(vip(ip), true, scope)
    }

    fn remove_address(&mut self, ip: IpAddr, scope: &mut Scope) -> bool {
        if let Some(n) = self.shared_addresses.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.shared_addresses.remove(&ip);
            }
            return false;
        }
        self.desired.state.addresses.remove(&ip);
        scope.addresses.insert(ip);
        self.derived(vip(ip), false, scope)
    }
}

/// The counts above one, less one: how many more than one holder each shared key has.
fn more<K: std::hash::Hash + Eq>(m: HashMap<K, u32>) -> HashMap<K, u32> {
    m.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(k, n)| (k, n - 1))
        .collect()
}

/// The ownership-set entry of a virtual server.
/// The ownership set's entry for the virtual server `k`.
fn owned(k: &VsKey) -> (SetName, SetEntry) {
    (
        SetName::new(&sets::OWNED, Family::of(&k.address)),
        SetEntry::IpPort(k.address, k.protocol, k.port),
    )
}

/// The VIP set's entry for the address `ip`.
fn vip(ip: IpAddr) -> (SetName, SetEntry) {
    (
        SetName::new(&sets::IPVS_IPS, Family::of(&ip)),
        SetEntry::Ip(ip),
    )
}
