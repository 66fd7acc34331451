//! Graceful termination in the loop ([`crate::model::plan::drain`] decides what drains): a sync of
//! changes that removes real servers first reads the connection counts of their virtual
//! servers alone (as kube-proxy checks a real server's connections before deleting it), so an
//! idle one goes in the same sync and a busy one is left at weight 0. A full sync has just
//! read them all. When a drain's bound is near, or that read failed, the next full sync comes
//! sooner than the period.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::Syncer;
use crate::dataplane::{Dataplane, Error};
use crate::model::incremental::reach::Reach;
use crate::model::kernel::VsKey;
use crate::model::plan::drain::DestinationKey;

/// The read of the connections of the real servers a sync of changes removes.
#[derive(Debug, Default)]
pub(super) struct LosingRead {
    /// The virtual servers whose real servers were read.
    pub(super) read: Vec<VsKey>,
    /// When the read failed, the real servers that drained before it: those that start
    /// draining now drain with their counts unread.
    pub(super) failed: Option<BTreeSet<DestinationKey>>,
    /// Why it failed, until the sync's warnings take it.
    pub(super) error: Option<Error>,
}

impl<D: Dataplane> Syncer<D> {
    /// Reads into the shadow the connection counts of the real servers that the desired
    /// state removes from the virtual servers `reach` looks at.
    pub(super) async fn read_losing(&mut self, reach: &Reach<'_>) -> LosingRead {
        let want = &self.incremental.desired().expect("computed before").state;
        let shadow = self.shadow.as_mut().expect("observed before");
        let keys = shadow.losing_real_servers(want, reach.virtual_servers());
        if keys.is_empty() {
            return LosingRead::default();
        }
        match self.dataplane.observe_real_servers(&keys).await {
            Ok(found) => {
                shadow.refresh(found);
                LosingRead {
                    read: keys,
                    ..LosingRead::default()
                }
            }
            Err(e) => LosingRead {
                read: Vec::new(),
                failed: Some(self.draining.keys().copied().collect()),
                error: Some(e),
            },
        }
    }

    /// Notes whether real servers began to drain unread (`losing` failed): the kernel needs
    /// reading soon ([`Syncer::recheck_in`]). A full sync has read them all.
    pub(super) fn note_unread(&mut self, full: bool, losing: &LosingRead) {
        let began_unread = losing
            .failed
            .as_ref()
            .is_some_and(|before| self.draining.keys().any(|k| !before.contains(k)));
        self.unread = !full && (self.unread || began_unread);
    }

    /// How soon draining needs a full sync: at once when a real server started draining with
    /// its counts unread (the targeted read failed; most are already idle), else when the
    /// first bound runs out (no read needed then, but a sync is).
    pub(super) fn recheck_in(&self, now: Instant) -> Option<Duration> {
        let deadline = self
            .draining
            .next_deadline(self.config.graceful_termination_timeout)
            .map(|d| d.saturating_duration_since(now));
        if self.unread && !self.draining.is_empty() {
            Some(Duration::ZERO)
        } else {
            deadline
        }
    }
}
