//! kube-proxy's `ConntrackCleanupRequired` in the loop: once the kernel holds the new real
//! servers, the UDP conntrack entries answered by no serving endpoint are deleted, so their
//! next datagram is scheduled afresh ([`crate::model::desired::conntrack`] says which).

use super::{Syncer, Warning};
use crate::dataplane::Dataplane;
use crate::dataplane::conntrack::Cleaned;
use crate::model::desired::conntrack::ConntrackFilter;
use crate::model::incremental::reach::Reach;

impl<D: Dataplane> Syncer<D> {
    /// Cleans the flows `filter` finds stale, for a sync that looked at `reach`; a failure is
    /// added to `warnings`, and the pass is tried again at the next sync.
    pub(super) async fn clean_conntrack(
        &mut self,
        filter: ConntrackFilter,
        reach: &Reach<'_>,
        warnings: &mut Vec<Warning>,
    ) -> Vec<Cleaned> {
        if reach.is_whole() {
            self.clean_whole_conntrack(filter, warnings).await
        } else {
            self.clean_changed_conntrack(filter, warnings).await
        }
    }

    /// The pass of a sync of the whole state: when the serving endpoints of some UDP frontend
    /// changed since the last pass (or on the first sync, for flows left by an earlier run).
    async fn clean_whole_conntrack(
        &mut self,
        filter: ConntrackFilter,
        warnings: &mut Vec<Warning>,
    ) -> Vec<Cleaned> {
        if self
            .conntrack
            .as_ref()
            .is_some_and(|last| last.same_endpoints(&filter))
        {
            return Vec::new();
        }
        let cleaned = if filter.is_empty() {
            Vec::new()
        } else {
            match self.dataplane.clean_conntrack(&filter).await {
                Ok(cleaned) => cleaned,
                Err(e) => {
                    warnings.push(Warning::Conntrack(e));
                    return Vec::new();
                }
            }
        };
        self.conntrack = Some(filter);
        cleaned
    }

    /// The pass of a sync that changed some Services: the flows to their UDP frontends
    /// answered by none of their serving endpoints. The whole-cluster filter of the last full
    /// pass is left as it is; the next full sync compares against it.
    async fn clean_changed_conntrack(
        &mut self,
        filter: ConntrackFilter,
        warnings: &mut Vec<Warning>,
    ) -> Vec<Cleaned> {
        if filter.is_empty() {
            return Vec::new();
        }
        match self.dataplane.clean_conntrack(&filter).await {
            Ok(cleaned) => cleaned,
            Err(e) => {
                warnings.push(Warning::Conntrack(e));
                // The next full sync does the whole pass again.
                self.conntrack = None;
                Vec::new()
            }
        }
    }
}
