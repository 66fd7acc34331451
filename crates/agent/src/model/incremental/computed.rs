//! What one sync derives from the cluster snapshot, computed once
//! ([`super::Incremental::advance`]): the sync then plans, applies and reports from it without
//! going back to the snapshot.

use crate::model::desired::HealthCheckAddresses;
use crate::model::desired::conntrack::ConntrackFilter;
use crate::model::desired::scheduler::Refusal;
use crate::model::incremental::reach::Reach;

/// What one sync computed; the desired state itself stays with
/// [`crate::model::incremental::Incremental`], which keeps it for the next sync.
#[derive(Debug)]
pub struct Computed<'a> {
    /// What the sync looks at: the whole state, or what some Services' change moved.
    pub reach: Reach<'a>,
    /// Whether the desired state is the one of the last sync: when that sync applied its whole
    /// plan, what a full sync still changes was changed behind the agent's back (drift).
    pub unchanged: bool,
    /// Whether the desired state kept change by change differed from the one built whole
    /// from the same cluster, which replaced it: a fault of the agent, to be reported.
    pub diverged: bool,
    /// The conntrack filter of the UDP frontends the sync looks at.
    pub conntrack: ConntrackFilter,
    /// Where the health-check node ports belong, from the host's addresses.
    pub health_check_addresses: HealthCheckAddresses,
    /// The refusals of Services' own schedulers that start with this sync (those that last
    /// are not repeated).
    pub refusals: Vec<Refusal>,
}
