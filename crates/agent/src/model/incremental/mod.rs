//! The desired state carried from sync to sync, and all that one sync derives from the
//! cluster snapshot.
//!
//! [`Incremental::advance`] is the computation of a sync, in one call. The syncs hand it what
//! changed since the snapshot of the last one ([`Incremental::note`], the source's
//! [`Changes`]), merged until a sync computes: so the kept state ([`Kept`]) is brought by every
//! change since the snapshot it is for, even when a sync failed before computing. After a
//! sync that applied its whole plan, a sync of changes brings the kept state to the cluster
//! by the changed Services alone, and looks at what they moved ([`Reach::Changed`]).
//! Otherwise the sync looks at everything: the kept state is brought to the cluster by the
//! same changes (building it whole took a periodic pass as long as a cold sync's
//! computation, and every change that came meanwhile waited for it), or built whole: the
//! first time, when what changed is not known, when it cannot be brought, on demand
//! ([`Incremental::build_next`]), and every [`REBUILD_EVERY`] full syncs kept, the check
//! that the kept state is what the cluster builds. The conntrack filter,
//! the health-check addresses and the scheduler refusals that start are derived in the same
//! call.
//!
//! - `kept`: the state kept up to date Service by Service ([`Kept`]), and the
//!   [`Scope`](crate::model::plan::Scope) of a change;
//! - [`computed`]: what one sync derives from the snapshot ([`Computed`]), computed once here.
//! - [`reach`]: what one sync looks at ([`Reach`]): the whole state, or only the keys some
//!   Services' change moved.
//! - [`shadow`]: what the agent believes the kernel holds between reads, kept by replaying
//!   the plans the kernel applied.
//! - `tests`: the property test that a kept state is the state a build computes.

pub mod computed;
mod kept;
pub mod reach;
pub mod shadow;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::BTreeSet;

use crate::model::desired::scheduler::{self, Refusal};
use crate::model::desired::{Desired, Host, health_check_addresses};
use crate::model::kernel::KernelState;
use crate::model::snapshot::changes::Changes;
use crate::model::snapshot::cluster::{Cluster, ServiceRef};
use crate::model::snapshot::config::ProxyConfig;
use computed::Computed;
use reach::Reach;

pub use kept::Kept;

/// Full syncs that keep the desired state (brought up to date Service by Service) between
/// two that build it whole: at the default 30 s period, a whole build every 5.5 minutes.
pub const REBUILD_EVERY: u32 = 10;

/// The desired state from sync to sync, with what decides whether the next one keeps it.
#[derive(Debug, Clone)]
pub struct Incremental {
    config: ProxyConfig,
    /// The desired state of the last sync; `None` before the first.
    kept: Option<Kept>,
    /// Full syncs since the desired state was last built whole.
    kept_passes: u32,
    /// Whether the next sync of the whole state builds it whole.
    build_next: bool,
    /// The Services' own schedulers refused at the last sync.
    refused: BTreeSet<Refusal>,
    /// Full syncs that keep the state between two whole builds ([`REBUILD_EVERY`]; tests
    /// switch it off to see a kept state that a rebuild would hide).
    rebuild_every: u32,
    /// What changed since the snapshot the kept state is for, merged from what the syncs
    /// were handed since; `None` when not known (nothing kept yet, or a sync was handed no
    /// changes): the next sync builds the state whole.
    pending: Option<Changes>,
}

/// What the sync loop knows of a sync that the model does not.
#[derive(Debug, Clone, Copy)]
pub struct Pass {
    /// Whether the kernel was read for this sync: it may hold drift anywhere, so the sync
    /// looks at everything.
    pub full: bool,
    /// Whether the last sync applied its whole plan: after a failure, a change is a retry of
    /// everything.
    pub settled: bool,
}

/// How a sync of the whole state found the kept one.
#[derive(Debug, Default)]
struct Whole {
    /// The desired state is the one of the last sync.
    unchanged: bool,
    /// The kept state differed from the one built whole from the same cluster.
    diverged: bool,
}

impl Incremental {
    /// Nothing computed yet, for `config`.
    pub fn new(config: ProxyConfig) -> Self {
        Self {
            config,
            kept: None,
            kept_passes: 0,
            build_next: false,
            refused: BTreeSet::new(),
            rebuild_every: REBUILD_EVERY,
            pending: None,
        }
    }

    /// Takes in what changed since the snapshot of the last sync (`None`: not known), before
    /// anything of the sync can fail: a sync that fails before it computes leaves its changes
    /// for the next one.
    pub fn note(&mut self, changes: Option<&Changes>) {
        match (&mut self.pending, changes) {
            (Some(pending), Some(changes)) => pending.merge(changes),
            (pending, _) => *pending = None,
        }
    }

    /// The desired state of the last sync; `None` before the first.
    pub fn desired(&self) -> Option<&Desired> {
        self.kept.as_ref().map(Kept::desired)
    }

    /// Makes the next sync of the whole state build it whole, as every
    /// [`REBUILD_EVERY`]-and-first full sync does, rather than bring the kept one up to date.
    pub fn build_next(&mut self) {
        self.build_next = true;
    }

    /// Brings the desired state to `cluster` on `host` for a sync described by `pass`, by
    /// what changed since the kept state's snapshot ([`Incremental::note`]), and derives the
    /// rest of what the sync needs from the snapshot ([`desired`](Incremental::desired) has
    /// the state afterwards).
    pub fn advance<'a>(&mut self, cluster: &'a Cluster, host: &Host, pass: Pass) -> Computed<'a> {
        // Whatever happens below, the state is for `cluster` afterwards.
        let changes = self.pending.replace(Changes::default());
        let narrow = !pass.full && pass.settled;
        let changed = changes
            .as_ref()
            .filter(|_| narrow)
            .and_then(|c| self.change(cluster, host, c));
        let (reach, whole) = match changed {
            Some(reach) => (reach, Whole::default()),
            None => (
                Reach::Whole,
                self.keep_or_build(cluster, host, pass.full, changes.as_ref()),
            ),
        };
        let refusals = self.new_refusals(cluster, reach.services());
        Computed {
            conntrack: reach.conntrack_filter(cluster, &self.config, host),
            health_check_addresses: health_check_addresses(cluster, &self.config, host),
            refusals,
            unchanged: whole.unchanged,
            diverged: whole.diverged,
            reach,
        }
    }

    /// Brings the kept state to `cluster` by the Services `changes` names, when it can (it
    /// reaches no further than its Services): a sync of changes. `None`, nothing changed,
    /// otherwise.
    fn change<'a>(
        &mut self,
        cluster: &'a Cluster,
        host: &Host,
        changes: &Changes,
    ) -> Option<Reach<'a>> {
        let kept = self.kept.as_mut()?;
        let slices = cluster.slices_of_services(changes.services());
        let scope = kept.update_with(cluster, host, changes, &slices)?;
        Some(Reach::Changed {
            services: changes.services().clone(),
            slices,
            scope,
        })
    }

    /// Brings the kept state to `cluster` by `changes`, or builds it whole (see the module's
    /// notes for when).
    fn keep_or_build(
        &mut self,
        cluster: &Cluster,
        host: &Host,
        full: bool,
        changes: Option<&Changes>,
    ) -> Whole {
        let rebuild = self.build_next || (full && self.kept_passes >= self.rebuild_every);
        let brought = match (self.kept.as_mut(), changes) {
            (Some(kept), Some(changes)) => kept.update(cluster, host, changes),
            _ => None,
        };
        if let Some(moved) = &brought
            && !rebuild
        {
            self.kept_passes += u32::from(full);
            return Whole {
                unchanged: moved.is_empty(),
                diverged: false,
            };
        }
        // Its fingerprint is kept, not the state, which goes before the new one is built (two
        // whole desired states at once were the peak of a full resync).
        let before = self
            .kept
            .take()
            .map(|kept| fingerprint(&kept.desired().state));
        let built = Kept::build(cluster, &self.config, host);
        let now = fingerprint(&built.desired().state);
        self.kept = Some(built);
        self.kept_passes = 0;
        self.build_next = false;
        Whole {
            unchanged: before == Some(now) && brought.as_ref().is_none_or(|m| m.is_empty()),
            // Brought to this very cluster, the kept state had to be the one built.
            diverged: brought.is_some() && before != Some(now),
        }
    }

    /// The refusals of Services' own schedulers in `cluster` that the last sync did not have,
    /// so that each is logged and recorded once when it starts rather than at every sync.
    /// With `only`, the Services that changed are looked at alone (the others' refusals stand
    /// as they were).
    fn new_refusals(
        &mut self,
        cluster: &Cluster,
        only: Option<&BTreeSet<ServiceRef>>,
    ) -> Vec<Refusal> {
        let now: BTreeSet<Refusal> = match only {
            None => scheduler::refusals(cluster, &self.config)
                .into_iter()
                .collect(),
            Some(changed) => self
                .refused
                .iter()
                .filter(|r| !changed.contains(&r.service))
                .cloned()
                .chain(
                    changed
                        .iter()
                        .filter_map(|id| cluster.services.get(id))
                        .filter_map(|s| scheduler::resolve(s, &self.config).1),
                )
                .collect(),
        };
        let new = now.difference(&self.refused).cloned().collect();
        self.refused = now;
        new
    }
}

#[cfg(test)]
impl Incremental {
    /// Never builds the state whole on the period: what a kept state gets wrong stays.
    pub(crate) fn never_rebuild(&mut self) {
        self.rebuild_every = u32::MAX;
    }

    /// Full syncs since the desired state was last built whole.
    pub(crate) fn kept_passes(&self) -> u32 {
        self.kept_passes
    }

    /// The kept desired state, to be made wrong (tests of what finds a kept state wrong).
    pub(crate) fn desired_mut(&mut self) -> Option<&mut Desired> {
        self.kept.as_mut().map(Kept::desired_mut)
    }
}

/// A fingerprint of a desired state: equal states have equal fingerprints, and different ones
/// differ but for a 64-bit collision (which would only count a repair as a change).
fn fingerprint(state: &KernelState) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    state.hash(&mut h);
    h.finish()
}
