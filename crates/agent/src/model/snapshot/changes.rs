//! What changed between two snapshots of the cluster, as the source saw it happen, and the
//! snapshots as the source publishes them: each with the changes into it.
//!
//! A change is kept as kube-proxy's change trackers keep one: each changed object with the
//! version the earlier snapshot held. The Services a change concerns follow from the objects
//! recorded and cannot be named apart from them: a slice that moves between Services names
//! both. The earlier versions are what an incremental update takes out of the state it
//! keeps, so it needs no copy of the earlier snapshot ([`Changes::old_service`],
//! [`Changes::old_slices`]).
//!
//! [`Published`] is what the source sends on its channel: the cluster, its generation, and a
//! short log of the changes into the last snapshots, so that a reader that skipped some (a
//! `watch` channel keeps the newest alone) merges what it missed
//! ([`Published::changes_since`]); one that fell behind the log is told it cannot know.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::cluster::{
    Cluster, EndpointSlice, Service, ServiceRef, SliceRef, SlicesByService, each_difference_by_key,
};

/// What changed from one snapshot to a later one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// The Services whose object or EndpointSlices changed, deleted ones included; both
    /// Services of a slice that moved.
    services: BTreeSet<ServiceRef>,
    /// Each changed Service object as the earlier snapshot held it (`None`: it had none).
    service_objects: BTreeMap<ServiceRef, Option<Arc<Service>>>,
    /// Each changed EndpointSlice as the earlier snapshot held it.
    slices: BTreeMap<SliceRef, Option<Arc<EndpointSlice>>>,
    /// Whether the Node changed.
    node: bool,
}

impl Changes {
    /// Records that the Service `id` changed; `old` is its object before this change. A
    /// Service recorded before keeps its first `old`: the earlier snapshot's.
    pub fn service(&mut self, id: &ServiceRef, old: Option<&Arc<Service>>) {
        self.services.insert(id.clone());
        self.service_objects
            .entry(id.clone())
            .or_insert_with(|| old.cloned());
    }

    /// Records that the EndpointSlice `id` changed from `old` to `new`: both their Services
    /// changed.
    pub fn slice(
        &mut self,
        id: &SliceRef,
        old: Option<&Arc<EndpointSlice>>,
        new: Option<&Arc<EndpointSlice>>,
    ) {
        for s in [old, new].into_iter().flatten() {
            self.services.insert(s.service.clone());
        }
        self.slices
            .entry(id.clone())
            .or_insert_with(|| old.cloned());
    }

    /// Records that the Node changed.
    pub fn node(&mut self) {
        self.node = true;
    }

    /// Takes in the changes that came after these: the union, each object keeping the
    /// version the earliest snapshot held.
    pub fn merge(&mut self, later: &Changes) {
        self.services.extend(later.services.iter().cloned());
        for (id, old) in &later.service_objects {
            self.service_objects
                .entry(id.clone())
                .or_insert_with(|| old.clone());
        }
        for (id, old) in &later.slices {
            self.slices.entry(id.clone()).or_insert_with(|| old.clone());
        }
        self.node |= later.node;
    }

    /// What changed from `before` to `after`, by one diff of the two (the manifest source's
    /// two loads, and tests). Costs what changed when the snapshots share their unchanged
    /// parts, and a walk of both when they share nothing.
    pub fn between(before: &Cluster, after: &Cluster) -> Changes {
        let mut changes = Changes::default();
        each_difference_by_key(&before.services, &after.services, |id, b, _| {
            changes.service(id, b);
        });
        each_difference_by_key(&before.slices, &after.slices, |id, b, a| {
            changes.slice(id, b, a);
        });
        if before.node != after.node {
            changes.node();
        }
        changes
    }

    /// The Services whose object or EndpointSlices changed (deleted ones included).
    pub fn services(&self) -> &BTreeSet<ServiceRef> {
        &self.services
    }

    /// Whether the Node changed.
    pub fn node_changed(&self) -> bool {
        self.node
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty() && !self.node
    }

    /// How many Service objects and EndpointSlices changed.
    pub fn objects(&self) -> (usize, usize) {
        (self.service_objects.len(), self.slices.len())
    }

    /// How many objects the changes hold (the bound of [`Published`]'s log).
    fn held(&self) -> usize {
        self.service_objects.len() + self.slices.len() + 1
    }

    /// The changed Service `id` as the earlier snapshot held it, given the later snapshot
    /// `now`: the version recorded, or, when only its slices changed, the object `now` holds.
    pub fn old_service<'a>(
        &'a self,
        id: &ServiceRef,
        now: &'a Cluster,
    ) -> Option<&'a Arc<Service>> {
        match self.service_objects.get(id) {
            Some(old) => old.as_ref(),
            None => now.services.get(id),
        }
    }

    /// The EndpointSlices of the changed Services as the earlier snapshot held them, grouped
    /// by Service, given the later snapshot's slices of the same Services (`now`): those of
    /// `now` that did not change, and the earlier versions of those that did.
    pub fn old_slices<'a>(&'a self, now: &SlicesByService<'a>) -> SlicesByService<'a> {
        let mut by = BTreeMap::<&'a ServiceRef, Vec<&'a EndpointSlice>>::new();
        for slice in now.all() {
            if !self.slices.contains_key(&slice.id()) {
                by.entry(&slice.service).or_default().push(slice);
            }
        }
        for old in self.slices.values().flatten() {
            if self.services.contains(&old.service) {
                by.entry(&old.service).or_default().push(old);
            }
        }
        // In the order of the snapshot's map, as a build sees them.
        for slices in by.values_mut() {
            slices.sort_by(|a, b| a.name.cmp(&b.name));
        }
        SlicesByService::from_groups(by)
    }
}

/// The most snapshots whose changes [`Published`] keeps: at the source's 100 ms pace, over
/// a minute and a half of changes without a pause.
const LOG_SNAPSHOTS: usize = 1024;

/// The most changed objects the log holds (each keeps an earlier version alive); beyond
/// them, a reader that far behind builds its state whole.
const LOG_OBJECTS: usize = 65_536;

/// A snapshot as the source publishes it: the cluster, its generation, and the changes into
/// the last snapshots. Cloning it costs two counts and a persistent vector's clone.
#[derive(Debug, Clone)]
pub struct Published {
    /// The cluster.
    pub cluster: Arc<Cluster>,
    /// Counts the snapshots published, from 1.
    generation: u64,
    /// The changes into each of the last snapshots, oldest first: the last entry is what
    /// changed from `generation - 1` to `generation`.
    log: imbl::Vector<Arc<Changes>>,
    /// The objects the log holds.
    held: usize,
}

impl Published {
    /// The first snapshot a source publishes: nothing before it to change from.
    pub fn first(cluster: Arc<Cluster>) -> Self {
        Self {
            cluster,
            generation: 1,
            log: imbl::Vector::new(),
            held: 0,
        }
    }

    /// The snapshot after this one: `cluster`, into which `changes` changed this one's.
    #[must_use]
    pub fn next(&self, cluster: Arc<Cluster>, changes: Changes) -> Self {
        let mut log = self.log.clone();
        let mut held = self.held + changes.held();
        log.push_back(Arc::new(changes));
        while log.len() > LOG_SNAPSHOTS || (held > LOG_OBJECTS && log.len() > 1) {
            if let Some(dropped) = log.pop_front() {
                held -= dropped.held();
            }
        }
        Self {
            cluster,
            generation: self.generation + 1,
            log,
            held,
        }
    }

    /// Which snapshot this is: the first published is 1.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// What changed from the snapshot of `generation` to this one, merged; `None` when it is
    /// not known: the log no longer reaches back to it, or it is not an earlier snapshot of
    /// this source.
    pub fn changes_since(&self, generation: u64) -> Option<Changes> {
        let back = usize::try_from(self.generation.checked_sub(generation)?).ok()?;
        if back > self.log.len() || generation == 0 {
            return None;
        }
        let mut merged = Changes::default();
        for changes in self.log.iter().skip(self.log.len() - back) {
            merged.merge(changes);
        }
        Some(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::{cluster, eps, svc};
    use crate::model::snapshot::cluster::Protocol;

    fn names(set: &BTreeSet<ServiceRef>) -> Vec<String> {
        set.iter().map(|s| s.name.to_string()).collect()
    }

    #[test]
    fn a_slice_that_moves_names_both_services_and_keeps_its_old_version() {
        let before = cluster(
            vec![svc("a").cluster_ip("10.96.0.1").tcp(80), svc("b")],
            vec![eps("a", "", Protocol::Tcp, 8080).ready("10.244.0.1", "n")],
        );
        let mut after = before.clone();
        let key = SliceRef::new("default", "a--abc");
        Arc::make_mut(after.slices.get_mut(&key).unwrap()).service =
            ServiceRef::new("default", "b");
        let changes = Changes::between(&before, &after);
        assert_eq!(names(changes.services()), ["a", "b"]);
        assert_eq!(changes.objects(), (0, 1));
        let now = after.slices_of_services(changes.services());
        let old = changes.old_slices(&now);
        assert_eq!(
            old.of(&ServiceRef::new("default", "a")).len(),
            1,
            "a had it"
        );
        assert!(
            old.of(&ServiceRef::new("default", "b")).is_empty(),
            "b had none"
        );
        assert_eq!(now.of(&ServiceRef::new("default", "b")).len(), 1);
    }

    #[test]
    fn merged_changes_keep_the_earliest_version() {
        let c0 = cluster(vec![svc("a").cluster_ip("10.96.0.1").tcp(80)], vec![]);
        let mut c1 = c0.clone();
        let a = ServiceRef::new("default", "a");
        c1.services.insert(
            a.clone(),
            Arc::new(svc("a").cluster_ip("10.96.0.2").tcp(80).0),
        );
        let mut c2 = c1.clone();
        c2.services.remove(&a);
        let mut merged = Changes::between(&c0, &c1);
        merged.merge(&Changes::between(&c1, &c2));
        assert_eq!(merged.old_service(&a, &c2), c0.services.get(&a));
        assert!(!merged.is_empty());
    }

    #[test]
    fn a_reader_merges_what_it_skipped_or_learns_it_cannot_know() {
        let c0 = Arc::new(cluster(vec![svc("a")], vec![]));
        let first = Published::first(c0.clone());
        assert_eq!(first.changes_since(1), Some(Changes::default()));
        assert_eq!(first.changes_since(0), None, "nothing before the first");
        let mut p = first.clone();
        for i in 0..3 {
            let mut c = (*p.cluster).clone();
            let s = svc(&format!("s{i}"));
            c.services.insert(s.0.id.clone(), Arc::new(s.0));
            let changes = Changes::between(&p.cluster, &c);
            p = p.next(Arc::new(c), changes);
        }
        assert_eq!(p.generation(), 4);
        assert_eq!(names(p.changes_since(2).unwrap().services()), ["s1", "s2"]);
        assert_eq!(p.changes_since(5), None, "not an earlier snapshot");
        // A log past its bound forgets its oldest changes.
        let mut q = first;
        for _ in 0..=LOG_SNAPSHOTS {
            q = q.next(c0.clone(), Changes::default());
        }
        assert_eq!(q.changes_since(1), None);
        assert!(q.changes_since(3).is_some());
    }
}
