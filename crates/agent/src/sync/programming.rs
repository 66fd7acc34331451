//! Network-programming latency: which EndpointSlice changes a successful sync has just put
//! in the kernel, by their `endpoints.kubernetes.io/last-change-trigger-time`.
//!
//! kube-proxy records a slice's trigger time when its watch delivers the change, if the time
//! is later than the proxy's start, and observes `now - trigger` for each after the next sync.
//! Here the sync sees snapshots, so a slice changed twice between two syncs counts once, with
//! its latest trigger time.

use std::collections::HashMap;
use std::time::SystemTime;

use super::Syncer;
use crate::dataplane::Dataplane;
use crate::model::incremental::reach::Reach;
use crate::model::snapshot::cluster::{Cluster, EndpointSlice, Family, SliceRef, SlicesByService};

/// The trigger times already observed, per slice.
#[derive(Debug)]
pub struct TriggerTimes {
    /// Changes triggered before this are the state the agent started on, not its work.
    start: SystemTime,
    /// Per slice, the trigger time last observed.
    seen: HashMap<SliceRef, SystemTime>,
}

impl TriggerTimes {
    /// A tracker that ignores changes triggered before `start`.
    pub fn new(start: SystemTime) -> Self {
        Self {
            start,
            seen: HashMap::new(),
        }
    }

    /// The trigger times of `cluster` not observed yet (with their slice's family), marked as
    /// observed: call it once the sync that programmed `cluster` has applied its whole plan.
    /// With `only`, the slices of those Services alone (a sync that changed just them), and
    /// deleted slices are forgotten at the next whole pass.
    pub fn programmed(
        &mut self,
        cluster: &Cluster,
        only: Option<&SlicesByService<'_>>,
    ) -> Vec<(Family, SystemTime)> {
        let mut out = Vec::new();
        let slices: Box<dyn Iterator<Item = &EndpointSlice>> = match only {
            Some(only) => Box::new(only.all()),
            None => Box::new(cluster.slices.values().map(|s| &**s)),
        };
        for slice in slices {
            let Some(t) = slice.trigger_time.filter(|t| *t > self.start) else {
                continue;
            };
            let key = slice.id();
            if self.seen.get(&key) != Some(&t) {
                out.push((slice.family, t));
                self.seen.insert(key, t);
            }
        }
        if only.is_some() {
            return out;
        }
        // Deleted slices are forgotten, so the map never outgrows the cluster.
        self.seen.retain(|k, t| {
            cluster
                .slices
                .get(k)
                .is_some_and(|s| s.trigger_time == Some(*t))
        });
        out
    }
}

impl<D: Dataplane> Syncer<D> {
    /// The EndpointSlice changes of `cluster` that the sync that looked at `reach` has just
    /// put in the kernel: none unless its plan went in whole (after a failure they wait for
    /// the retry that succeeds).
    pub(super) fn programmed(
        &mut self,
        cluster: &Cluster,
        reach: &Reach<'_>,
    ) -> Vec<(Family, SystemTime)> {
        if !self.settled {
            return Vec::new();
        }
        self.triggers.programmed(cluster, reach.slices())
    }
}

#[cfg(test)]
impl TriggerTimes {
    fn programmed_all(&mut self, cluster: &Cluster) -> Vec<(Family, SystemTime)> {
        self.programmed(cluster, None)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::fixtures::{cluster, eps, svc};
    use crate::model::snapshot::cluster::Protocol;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn with_trigger(t: Option<SystemTime>, family: Family) -> Cluster {
        let mut slice = eps("web", "http", Protocol::Tcp, 8080);
        slice.0.trigger_time = t;
        slice.0.family = family;
        cluster(
            vec![svc("web").cluster_ip("10.96.0.10").tcp(80)],
            vec![slice],
        )
    }

    #[test]
    fn each_trigger_time_is_observed_once_and_only_after_the_start() {
        let mut times = TriggerTimes::new(at(100));
        // Triggered before the agent started: the state it found, not its work.
        assert_eq!(
            times.programmed_all(&with_trigger(Some(at(50)), Family::V4)),
            vec![]
        );
        assert_eq!(
            times.programmed_all(&with_trigger(None, Family::V4)),
            vec![]
        );
        assert_eq!(
            times.programmed_all(&with_trigger(Some(at(150)), Family::V6)),
            vec![(Family::V6, at(150))]
        );
        // The same change synced again (a full resync) is not observed twice.
        assert_eq!(
            times.programmed_all(&with_trigger(Some(at(150)), Family::V6)),
            vec![]
        );
        assert_eq!(
            times.programmed_all(&with_trigger(Some(at(160)), Family::V6)),
            vec![(Family::V6, at(160))]
        );
        // A slice deleted and made again with the same time counts again.
        assert_eq!(times.programmed_all(&cluster(vec![], vec![])), vec![]);
        assert_eq!(
            times.programmed_all(&with_trigger(Some(at(160)), Family::V4)),
            vec![(Family::V4, at(160))]
        );
    }
}
