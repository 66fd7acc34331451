//! What one sync looks at: the whole state, or only the keys that some Services' change moved.
//!
//! The choice is made once, where the desired state is brought up to date
//! ([`crate::model::incremental::Incremental::advance`]); the plan, the tracking of draining real
//! servers and the conntrack filter all take it from there, so they cannot disagree on it.

use std::collections::BTreeSet;
use std::time::Instant;

use ipnet::IpNet;

use crate::model::desired::Host;
use crate::model::desired::conntrack::{ConntrackFilter, conntrack_filter, conntrack_filter_of};
use crate::model::kernel::{KernelState, VsKey};
use crate::model::plan::Scope;
use crate::model::plan::drain::{DestinationKey, Draining};
use crate::model::plan::{Op, Plan, plan_draining, plan_scoped};
use crate::model::snapshot::cluster::{Cluster, ServiceRef, SlicesByService};
use crate::model::snapshot::config::ProxyConfig;

/// What a sync looks at.
#[derive(Debug)]
pub enum Reach<'a> {
    /// Everything: the first sync, a full one, one after a failure, or a change that reaches
    /// beyond its own Services.
    Whole,
    /// Only what some Services' change moved: the rest is vouched unchanged since the last
    /// plan went in whole.
    Changed {
        /// The Services that changed (their objects, their EndpointSlices, or both).
        services: BTreeSet<ServiceRef>,
        /// Their EndpointSlices in the cluster.
        slices: SlicesByService<'a>,
        /// The keys their change moved.
        scope: Scope,
    },
}

impl<'a> Reach<'a> {
    /// True when the sync looks at everything.
    pub fn is_whole(&self) -> bool {
        matches!(self, Reach::Whole)
    }

    /// The Services that changed; `None` for the whole state.
    pub fn services(&self) -> Option<&BTreeSet<ServiceRef>> {
        match self {
            Reach::Whole => None,
            Reach::Changed { services, .. } => Some(services),
        }
    }

    /// The EndpointSlices of the Services that changed; `None` for the whole state.
    pub fn slices(&self) -> Option<&SlicesByService<'a>> {
        match self {
            Reach::Whole => None,
            Reach::Changed { slices, .. } => Some(slices),
        }
    }

    /// The virtual servers the change moved; `None` for all of them.
    pub fn virtual_servers(&self) -> Option<&BTreeSet<VsKey>> {
        match self {
            Reach::Whole => None,
            Reach::Changed { scope, .. } => Some(&scope.services),
        }
    }

    /// The plan that turns `observed` into `desired` on what the sync looks at, draining
    /// removed real servers ([`plan_draining`], or [`plan_scoped`] on the change's keys).
    pub fn plan(
        &self,
        desired: &KernelState,
        observed: &KernelState,
        exclude_cidrs: &[IpNet],
        expired: &BTreeSet<DestinationKey>,
    ) -> Plan {
        match self {
            Reach::Whole => plan_draining(desired, observed, exclude_cidrs, expired),
            Reach::Changed { scope, .. } => {
                plan_scoped(desired, observed, exclude_cidrs, expired, scope)
            }
        }
    }

    /// Brings `draining` up to date at `now` on the virtual servers the sync looks at
    /// ([`Draining::track`], or [`Draining::track_keys`] on the change's).
    pub fn track(
        &self,
        draining: &mut Draining,
        desired: &KernelState,
        observed: &KernelState,
        now: Instant,
    ) {
        match self.virtual_servers() {
            None => draining.track(desired, observed, now),
            Some(keys) => draining.track_keys(desired, observed, now, keys),
        }
    }

    /// The conntrack filter of the UDP frontends the sync looks at.
    pub fn conntrack_filter(
        &self,
        cluster: &Cluster,
        config: &ProxyConfig,
        host: &Host,
    ) -> ConntrackFilter {
        match self {
            Reach::Whole => conntrack_filter(cluster, config, host),
            Reach::Changed {
                services, slices, ..
            } => conntrack_filter_of(cluster, config, host, Some((services, slices))),
        }
    }

    /// The virtual servers whose real servers may start or stop draining once `plan` is
    /// applied: the change's, or every one the plan touches.
    pub fn touched(&self, plan: &Plan) -> BTreeSet<VsKey> {
        match self.virtual_servers() {
            Some(keys) => keys.clone(),
            None => {
                // A virtual server's operations are side by side in a plan: skipping repeats
                // spares collecting (and sorting) one key per real server of a cold plan.
                let mut keys = BTreeSet::new();
                let mut last = None;
                for key in plan.ops.iter().filter_map(Op::virtual_server) {
                    if last != Some(key) {
                        keys.insert(*key);
                        last = Some(key);
                    }
                }
                keys
            }
        }
    }
}
