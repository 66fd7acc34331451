//! Connection counting: the connections IPVS tracks to the agent's real servers
//! (`kube_proxy_ipvs_connections`), and the traffic it counted per Service port, from each
//! full read.
//!
//! Connection counts come only with a read of the kernel (the shadow forgets them after each
//! sync), and a periodic pass reads the real servers of some virtual servers alone
//! ([`crate::model::kernel::rolling`]), so the others keep the counts they last had.

use std::collections::{BTreeMap, BTreeSet};

use super::Syncer;
use super::traffic::{ServiceTraffic, service_traffic};
use crate::dataplane::Dataplane;
use crate::model::kernel::{KernelState, VsKey};

/// Open connections per virtual server, as last read (none kept for idle ones).
#[derive(Debug, Default)]
pub(super) struct Connections(BTreeMap<VsKey, u64>);

impl Connections {
    /// Takes in the counts of `observed`, just read: the virtual servers whose real servers
    /// were not read (`unread`) keep their last counts, and those `observed` lacks go.
    fn count(&mut self, observed: &KernelState, unread: &BTreeSet<VsKey>) {
        for (key, vs) in &observed.services {
            if unread.contains(key) {
                continue;
            }
            let open: u64 = vs
                .connections
                .values()
                .map(|c| u64::from(c.active) + u64::from(c.inactive))
                .sum();
            if open == 0 {
                self.0.remove(key);
            } else {
                self.0.insert(*key, open);
            }
        }
        self.0.retain(|key, _| observed.services.contains_key(key));
    }

    /// The open connections to the virtual servers `desired` holds.
    fn to(&self, desired: &KernelState) -> u64 {
        self.0
            .iter()
            .filter(|(key, _)| desired.services.contains_key(key))
            .map(|(_, open)| open)
            .sum()
    }
}

/// What a full sync reports of IPVS's counts.
#[derive(Debug)]
pub(super) struct Counted {
    /// The connections to the agent's real servers, active and inactive.
    pub(super) connections: u64,
    /// What IPVS counted per virtual server of the agent's, by Service port.
    pub(super) traffic: Vec<ServiceTraffic>,
}

impl<D: Dataplane> Syncer<D> {
    /// The counts of a full sync, from the kernel it has just read (the real servers of
    /// `unread` were not) and the desired state it computed. The traffic the read counted is
    /// taken: the next full read brings new counts, and a large node's are not kept twice.
    pub(super) fn count(&mut self, unread: &BTreeSet<VsKey>) -> Counted {
        let observed = &self.shadow.as_ref().expect("observed before").state;
        let want = self.incremental.desired().expect("computed before");
        self.connections.count(observed, unread);
        Counted {
            connections: self.connections.to(&want.state),
            traffic: service_traffic(&std::mem::take(&mut self.traffic), &want.owners),
        }
    }
}
