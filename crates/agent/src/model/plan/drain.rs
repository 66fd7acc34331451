//! Graceful termination: which removed real servers are draining and since when.
//!
//! A TCP real server whose endpoint goes away is not deleted at once: deleting it breaks its
//! open connections (`expire_nodest_conn=1`). The plan sets its weight to 0, so it gets no new
//! connection, and deletes it once IPVS tracks no connection to it, or once it has drained for
//! the bound (`--ipvs-graceful-termination-timeout`). UDP and SCTP real servers are deleted at
//! once, as kube-proxy does: a datagram flow has no end to wait for, and a stuck one is what
//! sends DNS queries to a dead pod (kube-proxy #71514).
//!
//! The record lives in the sync loop, not in the kernel: a real server is draining when it sits
//! in a virtual server the agent wants but is not wanted itself. After a restart the clock of
//! such a server starts again at the first sync, so a drain can last up to one bound more.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::model::kernel::{KernelState, RealServer, VsKey};
use crate::model::snapshot::cluster::Protocol;

/// One real server of one virtual server.
pub type DestinationKey = (VsKey, RealServer);

/// When each draining real server started draining.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Draining {
    since: BTreeMap<DestinationKey, Instant>,
}

impl Draining {
    /// Brings the record up to date at `now`: every TCP real server that `observed` holds in a
    /// virtual server `desired` wants, but that `desired` does not want, is draining (since
    /// `now` if it was not already); everything else is forgotten.
    pub fn track(&mut self, desired: &KernelState, observed: &KernelState, now: Instant) {
        let mut since = BTreeMap::new();
        for (key, have) in &observed.services {
            if key.protocol != Protocol::Tcp {
                continue;
            }
            let Some(want) = desired.services.get(key) else {
                continue;
            };
            for d in have.destinations.keys() {
                if !want.destinations.contains_key(d) {
                    let started = self.since.get(&(*key, *d)).copied().unwrap_or(now);
                    since.insert((*key, *d), started);
                }
            }
        }
        self.since = since;
    }

    /// [`Draining::track`] for the virtual servers `keys` alone (the others are unchanged
    /// since the last call).
    pub fn track_keys(
        &mut self,
        desired: &KernelState,
        observed: &KernelState,
        now: Instant,
        keys: &BTreeSet<VsKey>,
    ) {
        let before = std::mem::take(&mut self.since);
        let (mut kept, old): (BTreeMap<_, _>, BTreeMap<_, _>) = before
            .into_iter()
            .partition(|((k, _), _)| !keys.contains(k));
        for key in keys {
            let (Some(have), Some(want)) = (observed.services.get(key), desired.services.get(key))
            else {
                continue;
            };
            if key.protocol != Protocol::Tcp {
                continue;
            }
            for d in have.destinations.keys() {
                if !want.destinations.contains_key(d) {
                    let started = old.get(&(*key, *d)).copied().unwrap_or(now);
                    kept.insert((*key, *d), started);
                }
            }
        }
        self.since = kept;
    }

    /// The draining real servers that have drained for `timeout` or longer at `now`; with a
    /// zero `timeout`, every one of them.
    pub fn expired(&self, now: Instant, timeout: Duration) -> BTreeSet<DestinationKey> {
        self.since
            .iter()
            .filter(|(_, started)| now.saturating_duration_since(**started) >= timeout)
            .map(|(k, _)| *k)
            .collect()
    }

    /// When the next draining real server reaches `timeout`, if any drains.
    pub fn next_deadline(&self, timeout: Duration) -> Option<Instant> {
        self.since.values().min().map(|t| *t + timeout)
    }

    /// The draining real servers.
    pub fn keys(&self) -> impl Iterator<Item = &DestinationKey> {
        self.since.keys()
    }

    /// How many real servers drain.
    pub fn len(&self) -> usize {
        self.since.len()
    }

    /// True when nothing drains.
    pub fn is_empty(&self) -> bool {
        self.since.is_empty()
    }

    /// When `destination` started draining, if it drains.
    pub fn since(&self, destination: &DestinationKey) -> Option<Instant> {
        self.since.get(destination).copied()
    }
}
