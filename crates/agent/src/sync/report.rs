//! Report assembly: what one sync did, for the log, the metrics and `/healthz`, and the parts
//! of it the sync puts together from several steps (its warnings, the counts the desired
//! state and the shadow hold after it).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::traffic::ServiceTraffic;
use super::{Planned, Syncer, Warning};
use crate::dataplane::conntrack::Cleaned;
use crate::dataplane::{Applied, Dataplane};
use crate::model::desired::HealthCheckAddresses;
use crate::model::desired::scheduler::Refusal;
use crate::model::desired::warning as model;
use crate::model::incremental::computed::Computed;
use crate::model::kernel::SetName;
use crate::model::plan::Plan;
use crate::model::plan::drift::Drift;
use crate::model::plan::op_kind::OpKind;
use crate::model::snapshot::cluster::Family;

/// What one sync did.
#[derive(Debug, Default)]
pub struct Report {
    /// Whether the kernel was read first.
    pub full: bool,
    /// The plan applied: whole when it had a failure, or when the syncer keeps plans
    /// ([`Syncer::keep_plans`]); else empty, as it moved into the shadow.
    pub plan: Plan,
    /// The operations of the plan by kind, counted before it was applied, whether or not it
    /// is kept.
    pub op_counts: BTreeMap<OpKind, u64>,
    /// What applying it did.
    pub applied: Applied,
    /// Conflicts and warnings of the desired state and the plan, and of the reads and the
    /// cleanup the sync made beside it.
    pub warnings: Vec<Warning>,
    /// How long the sync took, reading the kernel included (a read made apart counts with
    /// its own time).
    pub duration: Duration,
    /// Real servers left at weight 0, waiting for their connections to end (the
    /// `kube_proxy_ipvs_destinations_draining` gauge).
    pub draining: usize,
    /// When draining needs the next full sync sooner than the sync period: it is due at the
    /// latest this long after the sync.
    pub recheck_in: Option<Duration>,
    /// The conntrack cleanup passes of this sync, one per family (none when no UDP endpoint
    /// changed).
    pub conntrack: Vec<Cleaned>,
    /// What a full sync repaired: the desired state had not changed since the previous sync,
    /// which had applied everything, so the kernel had been changed by someone else.
    pub drift: Drift,
    /// Entries of each agent set after the sync.
    pub set_sizes: Vec<(SetName, u64)>,
    /// Per family, `(internal, external)` Local-policy Service ports without local endpoints.
    pub no_local_endpoints: BTreeMap<Family, (u64, u64)>,
    /// The EndpointSlice changes this sync put in the kernel, by family, with their trigger
    /// times (`kubeproxy_network_programming_duration_seconds`).
    pub programmed: Vec<(Family, SystemTime)>,
    /// On a full sync, the connections IPVS tracks to the agent's real servers (active and
    /// inactive), from the kernel just read (`kube_proxy_ipvs_connections`).
    pub ipvs_connections: Option<u64>,
    /// Where the health-check node ports belong, from the host's addresses as last read.
    pub health_check_addresses: HealthCheckAddresses,
    /// Virtual servers whose real servers this full sync did not read (a periodic pass reads
    /// one share of them; [`crate::model::kernel::rolling`]).
    pub unread: usize,
    /// Services whose own scheduler was refused since the last sync (each also a warning):
    /// one entry when a refusal starts, none while it lasts, for an event on the Service.
    pub scheduler_refusals: Vec<Refusal>,
    /// On a full sync, what IPVS counted for each of the agent's virtual servers, from the
    /// service list the read made; empty unless the dataplane keeps the counts
    /// (`kube_proxy_ipvs_service_*`).
    pub traffic: Option<Vec<ServiceTraffic>>,
}

impl Report {
    /// How many operations the plan had.
    pub fn ops(&self) -> u64 {
        self.op_counts.values().sum()
    }
}

impl<D: Dataplane> Syncer<D> {
    /// The warnings of a sync before it applies its plan: the desired state's conflicts, a
    /// kept state found wrong, the refusals that start, the plan's, a failed read (taken
    /// from `planned`).
    pub(super) fn warnings(&self, computed: &Computed<'_>, planned: &mut Planned) -> Vec<Warning> {
        let want = self.incremental.desired().expect("computed before");
        let mut warnings: Vec<Warning> = want.conflicts.iter().cloned().map(Into::into).collect();
        if computed.diverged {
            warnings.push(model::Warning::Diverged.into());
        }
        warnings.extend(
            computed
                .refusals
                .iter()
                .map(|r| model::Warning::SchedulerRefused(r.clone()).into()),
        );
        warnings.extend(planned.plan.warnings.iter().cloned().map(Into::into));
        warnings.extend(planned.losing.error.take().map(Warning::UnreadConnections));
        warnings
    }

    /// Entries of each agent set, as the shadow holds them after the sync.
    pub(super) fn set_sizes(&self) -> Vec<(SetName, u64)> {
        self.shadow
            .as_ref()
            .map(|s| {
                s.state
                    .sets
                    .iter()
                    .map(|(n, set)| (*n, set.entries.len() as u64))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The Local-policy Service ports without local endpoints of the desired state, for
    /// every family served, so that a count that fell to nothing reads 0.
    pub(super) fn no_local_endpoints(&self) -> BTreeMap<Family, (u64, u64)> {
        let want = self.incremental.desired().expect("computed before");
        self.config
            .families
            .iter()
            .map(|f| {
                (
                    *f,
                    want.no_local_endpoints.get(f).copied().unwrap_or_default(),
                )
            })
            .collect()
    }
}
