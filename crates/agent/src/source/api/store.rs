//! The converted objects of each kind (relists kept apart until whole, each version converted
//! once) and the snapshot's maps kept up to date with them, one object at a time.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use kube::ResourceExt;
use kube::runtime::watcher::Event;
use tracing::{debug, info, warn};

use super::NodeLifecycle;
use super::stream::WatchResult;
use super::watched::{OwnNode, Watched};
use crate::model::snapshot::changes::Changes;
use crate::model::snapshot::cluster::{self, Cluster, ObjectMap, ServiceRef, SliceRef};

/// One item from one of the three watchers (boxed: the API objects are large and unequal).
pub(super) enum Update {
    Service(Box<WatchResult<core::Service>>),
    Slice(Box<WatchResult<discovery::EndpointSlice>>),
    Node(Box<WatchResult<core::Node>>),
}

/// Namespace (empty for a Node) and name.
pub(super) type Key = (String, String);

/// One object as converted, with the version it was converted at.
#[derive(Debug, Clone)]
pub(super) struct Entry<M> {
    pub(super) version: String,
    pub(super) model: Option<M>,
    /// The last relist that found this version ([`Store::relists`]; 0: none).
    pub(super) seen: u64,
}

/// The converted objects of one kind.
#[derive(Debug)]
pub(super) struct Store<K: Watched> {
    /// What the snapshots are built from.
    pub(super) live: BTreeMap<Key, Entry<K::Model>>,
    /// A relist in progress: the objects it found at a version `live` does not hold, taken
    /// into `live` at `InitDone`. Those `live` holds at the same version are only marked
    /// seen: a relist reallocates nothing of what is unchanged, so the long-lived memory
    /// stays where it was, and the list's passing decode opens no holes in it.
    pub(super) relist: Option<BTreeMap<Key, Entry<K::Model>>>,
    /// Counts the relists begun (the first list is 1).
    pub(super) relists: u64,
    /// Whether a list has completed once.
    pub(super) listed: bool,
    /// How many object versions were rejected.
    pub(super) rejected: u64,
}

impl<K: Watched> Default for Store<K> {
    fn default() -> Self {
        Self {
            live: BTreeMap::new(),
            relist: None,
            relists: 0,
            listed: false,
            rejected: 0,
        }
    }
}

impl<K: Watched> Store<K> {
    pub(super) fn key(obj: &K) -> Key {
        (obj.namespace().unwrap_or_default(), obj.name_any())
    }

    /// The entry for `obj`, reusing the live one when its version is the same, so each
    /// version is converted (and a rejection logged) once.
    pub(super) fn entry(&mut self, key: &Key, obj: &K) -> Entry<K::Model> {
        let version = obj.resource_version().unwrap_or_default();
        if !version.is_empty()
            && let Some(e) = self.live.get(key).filter(|e| e.version == version)
        {
            return e.clone();
        }
        let (model, rejected) = obj.convert();
        if let Some(e) = rejected {
            self.rejected += 1;
            warn!(version = %version, reason = %e.reason, rejection = e.reason.kind(), "{}: left out", e.object);
        } else if model.is_none() {
            debug!(kind = K::KIND, namespace = %key.0, name = %key.1, "not proxied");
        }
        Entry {
            version,
            model,
            seen: 0,
        }
    }

    /// Applies one watcher event, and says what of the snapshot it changed.
    pub(super) fn apply(&mut self, event: Event<K>) -> Changed<K::Model> {
        match event {
            Event::Init => {
                if self.listed {
                    info!(
                        kind = K::KIND,
                        "relisting; snapshots keep the previous list"
                    );
                }
                self.relists += 1;
                self.relist = Some(BTreeMap::new());
                Changed::Nothing
            }
            Event::InitApply(obj) => {
                let key = Self::key(&obj);
                let version = obj.resource_version().unwrap_or_default();
                if let Some(e) = self
                    .live
                    .get_mut(&key)
                    .filter(|e| !version.is_empty() && e.version == version)
                {
                    e.seen = self.relists;
                    return Changed::Nothing;
                }
                let entry = self.entry(&key, &obj);
                self.relist.get_or_insert_default().insert(key, entry);
                Changed::Nothing
            }
            Event::InitDone => {
                let found = self.relist.take().unwrap_or_default();
                let first = !self.listed;
                self.listed = true;
                // What the list did not find is gone; what it found anew replaces or joins.
                let (relist, mut changed) = (self.relists, first);
                self.live.retain(|key, e| {
                    let kept = e.seen == relist || found.contains_key(key);
                    changed |= !kept && e.model.is_some();
                    kept
                });
                for (key, entry) in found {
                    let new = entry.model.clone();
                    changed |= self.live.insert(key, entry).and_then(|e| e.model) != new;
                }
                if first {
                    debug!(kind = K::KIND, objects = self.live.len(), "listed");
                }
                if changed {
                    Changed::All
                } else {
                    Changed::Nothing
                }
            }
            Event::Apply(obj) => {
                let key = Self::key(&obj);
                let entry = self.entry(&key, &obj);
                let old = self.live.get(&key).and_then(|e| e.model.clone());
                let new = entry.model.clone();
                self.live.insert(key, entry);
                Changed::one(old, new)
            }
            Event::Delete(obj) => {
                let old = self.live.remove(&Self::key(&obj)).and_then(|e| e.model);
                Changed::one(old, None)
            }
        }
    }

    pub(super) fn models(&self) -> impl Iterator<Item = &K::Model> {
        self.live.values().filter_map(|e| e.model.as_ref())
    }
}

/// What one watcher event changed of the snapshot.
#[derive(Debug)]
pub(super) enum Changed<M> {
    Nothing,
    /// One object's model: made (`old` none), changed, or gone (`new` none).
    One {
        old: Option<M>,
        new: Option<M>,
    },
    /// Maybe every model of the kind (a list or relist).
    All,
}

impl<M: PartialEq> Changed<M> {
    pub(super) fn one(old: Option<M>, new: Option<M>) -> Self {
        if old == new {
            Changed::Nothing
        } else {
            Changed::One { old, new }
        }
    }

    pub(super) fn any(&self) -> bool {
        !matches!(self, Changed::Nothing)
    }
}

/// Brings one of the snapshot's maps to what `changed` says, keying each model by `key`,
/// and tells `record` each key whose object changed, with its object before and after. A
/// list or relist is taken by one diff against the map it lists (a rare event).
fn follow<K: Ord + Clone, V: PartialEq>(
    map: &mut ObjectMap<K, V>,
    changed: &Changed<Arc<V>>,
    key: impl Fn(&V) -> K,
    all: impl FnOnce() -> ObjectMap<K, V>,
    mut record: impl FnMut(&K, Option<&Arc<V>>, Option<&Arc<V>>),
) {
    match changed {
        Changed::Nothing => {}
        Changed::One { old, new } => {
            if let Some(old) = old {
                map.remove(&key(old));
            }
            if let Some(new) = new {
                map.insert(key(new), new.clone());
            }
            let k = key(old.as_deref().or(new.as_deref()).expect("old or new"));
            record(&k, old.as_ref(), new.as_ref());
        }
        Changed::All if map.is_empty() => {
            let listed = all();
            cluster::each_difference_by_key(map, &listed, &mut record);
            *map = listed;
        }
        // A relist changes the map in place, where it differs: the entries it keeps stay
        // where they are in memory (a map built whole would move every key).
        Changed::All => {
            let listed = all();
            let mut differ = Vec::new();
            cluster::each_difference_by_key(map, &listed, |k, old, new| {
                record(k, old, new);
                differ.push((k.clone(), new.cloned()));
            });
            for (k, new) in differ {
                match new {
                    Some(v) => map.insert(k, v),
                    None => map.remove(&k),
                };
            }
        }
    }
}

/// The three stores, and the snapshot's maps kept up to date with them one object at a time
/// (a snapshot then costs a clone of two persistent maps, not a rebuild of the cluster), with
/// what changed in them since the last snapshot taken ([`Stores::take_changes`]).
#[derive(Default)]
pub(super) struct Stores {
    pub(super) services: Store<core::Service>,
    pub(super) slices: Store<discovery::EndpointSlice>,
    pub(super) nodes: Store<core::Node>,
    pub(super) snapshot_services: ObjectMap<ServiceRef, cluster::Service>,
    pub(super) snapshot_slices: ObjectMap<SliceRef, cluster::EndpointSlice>,
    /// What changed in the snapshot's maps and the Node since the last snapshot taken;
    /// `None` before the first (every object of the initial lists is new: recording them
    /// would cost a map of the whole cluster at the peak of the cold start).
    changes: Option<Changes>,
}

impl Stores {
    pub(super) fn ready(&self) -> bool {
        self.services.listed && self.slices.listed && self.nodes.listed
    }

    /// Applies one update; true when the snapshot changes.
    pub(super) fn apply(&mut self, update: Update) -> bool {
        match update {
            Update::Service(e) => {
                let changed = apply_result(&mut self.services, *e);
                let (store, changes) = (&self.services, &mut self.changes);
                follow(
                    &mut self.snapshot_services,
                    &changed,
                    |s| s.id.clone(),
                    || store.models().map(|s| (s.id.clone(), s.clone())).collect(),
                    |id, old, _| {
                        if let Some(c) = changes {
                            c.service(id, old);
                        }
                    },
                );
                changed.any()
            }
            Update::Slice(e) => {
                let changed = apply_result(&mut self.slices, *e);
                let (store, changes) = (&self.slices, &mut self.changes);
                follow(
                    &mut self.snapshot_slices,
                    &changed,
                    cluster::EndpointSlice::id,
                    || store.models().map(|s| (s.id(), s.clone())).collect(),
                    |id, old, new| {
                        if let Some(c) = changes {
                            c.slice(id, old, new);
                        }
                    },
                );
                changed.any()
            }
            Update::Node(e) => {
                let before = self.own_node().map(|n| n.node.clone());
                let changed = apply_result(&mut self.nodes, *e).any();
                if self.own_node().map(|n| &n.node) != before.as_ref()
                    && let Some(c) = &mut self.changes
                {
                    c.node();
                }
                changed
            }
        }
    }

    /// What changed since the last call: the changes into the snapshot [`Stores::cluster`]
    /// takes now (nothing at the first call: the first snapshot has nothing before it).
    pub(super) fn take_changes(&mut self) -> Changes {
        self.changes.replace(Changes::default()).unwrap_or_default()
    }

    pub(super) fn own_node(&self) -> Option<&OwnNode> {
        self.nodes.models().next()
    }

    pub(super) fn lifecycle(&self) -> NodeLifecycle {
        self.own_node().map(|n| n.lifecycle).unwrap_or_default()
    }

    /// The snapshot: two persistent maps cloned, and the Node.
    pub(super) fn cluster(&self) -> Cluster {
        Cluster {
            services: self.snapshot_services.clone(),
            slices: self.snapshot_slices.clone(),
            node: self.own_node().and_then(|n| n.node.clone()),
        }
    }
}

fn apply_result<K: Watched>(store: &mut Store<K>, event: WatchResult<K>) -> Changed<K::Model> {
    match event {
        Ok(event) => store.apply(event),
        Err(e) => {
            warn!(kind = K::KIND, error = %e, "watch failed; retrying with backoff");
            Changed::Nothing
        }
    }
}
