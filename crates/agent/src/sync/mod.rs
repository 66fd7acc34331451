//! The sync loop: level-triggered. Source events only wake it; each sync recomputes the desired
//! state from the latest cluster snapshot, diffs it against the kernel and applies the plan.
//!
//! The kernel is read once at start and at every full sync (`--ipvs-sync-period`), which also
//! repairs drift (on a large node each periodic pass reads the real servers of one share of
//! the virtual servers, in turn: [`crate::model::kernel::rolling`]); in between, the agent diffs
//! against its own record of what it applied, so an endpoint change costs only the
//! operations it needs. The read of a periodic pass runs apart, on a task of its own, while
//! changes keep syncing against the shadow; what they apply meanwhile is replayed on what it
//! read (`sync::reading`), then the pass plans as usual (the first sync and the retry after a
//! failure read the kernel themselves). Syncs are at least `--ipvs-min-sync-period` apart. No kernel change happens before the source has a complete
//! snapshot: an empty cache must never mean "delete everything".
//!
//! Removed TCP real servers drain (see [`crate::model::plan::drain`]): a sync that removes real
//! servers reads the connection counts of their virtual servers alone (as kube-proxy checks a
//! real server's connections before deleting it), so an idle one goes in the same sync and a
//! busy one is left at weight 0. Full syncs read the counts again and delete what has gone
//! idle; when a drain's bound is near, or a read failed, the loop makes the next full sync
//! come sooner than the period.
//!
//! One sync ([`Syncer::sync_with`], [`Syncer::sync`]) reads, computes (one call into the
//! model, [`Incremental::advance`]), plans, applies, records and reports. The parts:
//! - `full_read`: the kernel read of a full sync, whole, a periodic pass's share, or made
//!   apart (`reading`) and taken in;
//! - `priority`: the priority Services the first sync programs before everything else;
//! - `draining`: the connection counts of the real servers a sync removes, and how soon
//!   draining needs a full sync;
//! - `connections`: connection counting, and `traffic`: what IPVS counted per Service port;
//! - `conntrack`: the UDP conntrack cleanup after a sync;
//! - `programming`: which EndpointSlice changes a sync put in the kernel;
//! - `report`: report assembly, with `warning`: [`Warning`], what a sync warns of;
//! - `run_loop`: [`run`], the loop that decides when to sync and what follows a failure,
//!   with `failures`: its backoff and failure log;
//! - `tests`: the syncs against the in-memory dataplane and the loop in paused time, with
//!   `tests::reading` for the reads made apart and `tests::failures` for the loop over a
//!   kernel that refuses.

mod connections;
mod conntrack;
mod draining;
mod failures;
mod full_read;
mod priority;
mod programming;
mod reading;
mod report;
mod run_loop;
mod traffic;
mod warning;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use crate::dataplane::{Applied, Dataplane, Error, Traffic};
use crate::model::desired::conntrack::ConntrackFilter;
use crate::model::incremental::computed::Computed;
use crate::model::incremental::shadow::Shadow;
use crate::model::incremental::{Incremental, Pass};
use crate::model::kernel::VsKey;
use crate::model::kernel::rolling::READ_SHARE;
use crate::model::plan::drain::Draining;
use crate::model::plan::op_kind;
use crate::model::plan::{Op, Plan};
use crate::model::snapshot::changes::Changes;
use crate::model::snapshot::cluster::Cluster;
use crate::model::snapshot::config::ProxyConfig;
use connections::Connections;
use draining::LosingRead;
use reading::Reading;

pub use crate::model::plan::drift::{Drift, DriftKind};
pub use failures::{Backoff, Blocked, Explained, FailureLog, SyncError, cannot_program};
pub use report::Report;
pub use run_loop::run;
pub use traffic::ServiceTraffic;
pub use warning::Warning;

/// Timing of the loop.
#[derive(Debug, Clone, Copy)]
pub struct Periods {
    /// Full re-read and repair period.
    pub sync: Duration,
    /// Minimum time between two syncs.
    pub min_sync: Duration,
}

/// Runs syncs against a dataplane.
pub struct Syncer<D: Dataplane> {
    dataplane: D,
    /// The read of the next full sync, when it runs apart ([`Syncer::start_read`]).
    reading: Option<Reading<D::Read>>,
    config: ProxyConfig,
    /// What the agent believes the kernel holds: the last observation with every applied
    /// plan replayed on it.
    shadow: Option<Shadow>,
    /// The real servers that drain, and since when.
    draining: Draining,
    /// Whether a real server started draining with its connection counts unread (its
    /// targeted read failed).
    unread: bool,
    /// The conntrack filter of the last cleanup; `None` before the first.
    conntrack: Option<ConntrackFilter>,
    /// The desired state of the last sync, kept per Service so that a change recomputes only
    /// its Services; also what tells drift from change.
    incremental: Incremental,
    /// Whether the last sync applied its whole plan: after a failure, what a sync changes
    /// is a retry, not drift.
    settled: bool,
    /// The EndpointSlice changes already counted as programmed.
    triggers: programming::TriggerTimes,
    /// Periodic passes made over a shadow: which share the next reads.
    pass: u64,
    /// Virtual servers whose real servers one periodic pass reads at most.
    read_share: usize,
    /// Open connections per virtual server, as last read.
    connections: Connections,
    /// What IPVS counted per virtual server at the last full read, until a report takes it.
    traffic: BTreeMap<VsKey, Traffic>,
    /// Whether reports carry the plans applied whole ([`Syncer::keep_plans`]).
    keep_plans: bool,
}

/// A sync's plan, with what the sync learnt making it.
#[derive(Debug)]
struct Planned {
    plan: Plan,
    /// What the plan repairs that someone else changed (on a full sync).
    drift: Drift,
    /// The virtual servers whose real servers may start or stop draining once it is applied.
    touched: BTreeSet<VsKey>,
    /// The read of the connections of the real servers it removes (a sync of changes).
    losing: LosingRead,
}

impl<D: Dataplane> Syncer<D> {
    /// A syncer for `config` over `dataplane`.
    pub fn new(dataplane: D, config: ProxyConfig) -> Self {
        Self {
            dataplane,
            reading: None,
            incremental: Incremental::new(config.clone()),
            config,
            shadow: None,
            draining: Draining::default(),
            unread: false,
            conntrack: None,
            settled: false,
            triggers: programming::TriggerTimes::new(std::time::SystemTime::now()),
            pass: 0,
            read_share: READ_SHARE,
            connections: Connections::default(),
            traffic: BTreeMap::new(),
            keep_plans: true,
        }
    }

    /// Whether the reports of syncs whose plan went in whole carry that plan (the default:
    /// tests and tools look at it), or only its counts ([`Report::op_counts`]): then the
    /// shadow takes the plan's operations as it replays them, and a cold sync's plan is not
    /// held beside the shadow it builds (the agent's choice). A plan with a failure is
    /// reported whole either way.
    pub fn keep_plans(&mut self, keep: bool) {
        self.keep_plans = keep;
    }

    /// Makes the next sync that is not of some changed Services alone build the desired
    /// state whole, as every eleventh full sync does, rather than bring the kept one up to
    /// date (what the benchmarks compare with).
    pub fn build_next(&mut self) {
        self.incremental.build_next();
    }

    /// How many virtual servers the desired state of the last sync holds.
    pub fn desired_virtual_servers(&self) -> usize {
        self.incremental
            .desired()
            .map_or(0, |d| d.state.services.len())
    }

    /// The real servers that drain, and since when.
    pub fn draining(&self) -> &Draining {
        &self.draining
    }

    /// The dataplane (for tests and cleanup).
    pub fn dataplane(&mut self) -> &mut D {
        &mut self.dataplane
    }

    /// The shadow: what the agent believes the kernel holds (for tests).
    pub fn shadow(&self) -> Option<&Shadow> {
        self.shadow.as_ref()
    }

    /// One sync of `cluster`, without knowing what changed since the last one: the desired
    /// state is built whole. With `full`, or when the last apply had failures, the kernel is
    /// read first (or, after [`Syncer::start_read`], what the read apart found is taken in,
    /// waiting for it if it runs still).
    pub async fn sync(&mut self, cluster: &Cluster, full: bool) -> Result<Report, Error> {
        self.sync_inner(cluster, full, None).await
    }

    /// One sync of `cluster`, into which `changes` changed the snapshot of the last sync (as
    /// the source recorded it): what the sync loop does. The desired state is brought up to
    /// date by the changed Services; unless `full`, only their part is planned and the rest
    /// is not looked at. Falls back to the whole state when that cannot be done (the first
    /// sync, a failure before, the Node changed, a virtual server two Services want).
    pub async fn sync_with(
        &mut self,
        cluster: &Cluster,
        full: bool,
        changes: &Changes,
    ) -> Result<Report, Error> {
        self.sync_inner(cluster, full, Some(changes)).await
    }

    /// [`Syncer::sync_with`] of a sync of changes (not full).
    pub async fn sync_changed(
        &mut self,
        cluster: &Cluster,
        changes: &Changes,
    ) -> Result<Report, Error> {
        self.sync_with(cluster, false, changes).await
    }

    /// One sync, in its steps: read, compute, plan, apply, record, report.
    async fn sync_inner(
        &mut self,
        cluster: &Cluster,
        full: bool,
        changes: Option<&Changes>,
    ) -> Result<Report, Error> {
        // Before anything can fail: a sync that ends early leaves its changes to the next.
        self.incremental.note(changes);
        let started = std::time::Instant::now();
        // The loop's clock, which tests can pause.
        let now = Instant::now().into_std();
        // Read: the kernel on a full sync, and on any without a shadow to diff against.
        let full = full || self.shadow.is_none();
        let (unread, read_apart) = if full {
            self.read_kernel().await?
        } else {
            (BTreeSet::new(), Duration::ZERO)
        };
        // The first sync of this process programs the priority Services (the API server's,
        // the cluster DNS) before computing and applying everything else.
        let first = self.program_priority(cluster).await?;
        // Compute: the desired state, and all the sync derives from the snapshot, at once.
        let host = &self.shadow.as_ref().expect("observed above").host;
        let pass = Pass {
            full,
            settled: self.settled,
        };
        let computed = self.incremental.advance(cluster, host, pass);
        let counted = full.then(|| self.count(&unread));
        // Plan.
        let mut planned = self.plan(&computed, full, now).await;
        let mut warnings = self.warnings(&computed, &mut planned);
        // Apply.
        let mut applied = self.apply(&planned.plan).await?;
        // Record, the plan's operations counted before the shadow may take them.
        let mut op_counts = op_kind::count(&planned.plan.ops);
        self.record_applied(&mut planned, &applied, full, now);
        let programmed = self.programmed(cluster, &computed.reach);
        let conntrack = self
            .clean_conntrack(computed.conntrack, &computed.reach, &mut warnings)
            .await;
        self.note_unread(full, &planned.losing);
        // Report.
        self.report_priority_first(first, &mut planned.plan, &mut applied, &mut op_counts);
        Ok(Report {
            full,
            plan: planned.plan,
            op_counts,
            applied,
            warnings,
            duration: started.elapsed() + read_apart,
            draining: self.draining.len(),
            recheck_in: self.recheck_in(now),
            conntrack,
            drift: planned.drift,
            set_sizes: self.set_sizes(),
            no_local_endpoints: self.no_local_endpoints(),
            programmed,
            ipvs_connections: counted.as_ref().map(|c| c.connections),
            health_check_addresses: computed.health_check_addresses,
            unread: unread.len(),
            scheduler_refusals: computed.refusals,
            traffic: counted.map(|c| c.traffic),
        })
    }

    /// Plans a sync from the shadow to the desired state just computed: a sync of changes
    /// first reads the connection counts of the real servers it would remove (a full one has
    /// just read them all), then draining is brought up to date, and the real servers that
    /// drained past their bound go.
    async fn plan(
        &mut self,
        computed: &Computed<'_>,
        full: bool,
        now: std::time::Instant,
    ) -> Planned {
        let losing = if full {
            LosingRead::default()
        } else {
            self.read_losing(&computed.reach).await
        };
        let want = &self.incremental.desired().expect("computed before").state;
        let observed = &self.shadow.as_ref().expect("observed before").state;
        let reach = &computed.reach;
        reach.track(&mut self.draining, want, observed, now);
        let expired = self
            .draining
            .expired(now, self.config.graceful_termination_timeout);
        let plan = reach.plan(want, observed, &self.config.exclude_cidrs, &expired);
        // With the desired state unchanged and the last plan applied whole, what a full sync
        // still changes was changed behind the agent's back.
        let drift = if full && self.settled && computed.unchanged {
            Drift::of(&plan, observed)
        } else {
            Drift::default()
        };
        Planned {
            touched: reach.touched(&plan),
            plan,
            drift,
            losing,
        }
    }

    /// Applies `plan`: the syncer is unsettled until the plan is known to be applied whole (an
    /// error leaves it half done).
    async fn apply(&mut self, plan: &Plan) -> Result<Applied, Error> {
        self.settled = false;
        let applied = if plan.is_empty() {
            Applied::default()
        } else {
            self.dataplane.apply(plan).await?
        };
        self.settled = applied.failed.is_empty();
        Ok(applied)
    }

    /// Records a plan just applied: when it went in whole, in the shadow (which takes its
    /// operations unless plans are kept) and in the journal of a read made apart; else the
    /// shadow is forgotten, and the next sync reads the kernel. Then the connection counts
    /// the sync read leave the shadow, and draining is tracked again where the plan touched.
    fn record_applied(
        &mut self,
        planned: &mut Planned,
        applied: &Applied,
        full: bool,
        now: std::time::Instant,
    ) {
        if !applied.failed.is_empty() {
            // Something failed: the kernel is not what we think; read it again next time.
            self.forget_shadow();
        } else if self.keep_plans {
            self.record(&planned.plan.ops);
        } else {
            self.record_moving(&mut planned.plan.ops);
        }
        let Some(shadow) = &mut self.shadow else {
            return;
        };
        // Connection counts change without the agent: they are only good for the sync that
        // read them.
        if full {
            for vs in shadow.state.services.values_mut() {
                vs.connections.clear();
            }
        } else {
            shadow.forget_connections(&planned.losing.read);
        }
        let want = &self.incremental.desired().expect("computed before").state;
        self.draining
            .track_keys(want, &shadow.state, now, &planned.touched);
    }

    /// [`Syncer::record`], the shadow taking the operations: each is freed once replayed, so
    /// a cold sync's plan (an operation per real server) is not held beside the shadow it
    /// builds.
    fn record_moving(&mut self, ops: &mut Vec<Op>) {
        if let Some(reading) = &mut self.reading {
            reading.record(ops);
        }
        let ops = std::mem::take(ops);
        if let Some(shadow) = &mut self.shadow {
            shadow.replay_moving(ops);
        }
    }

    /// Records `ops`, just applied whole, in the shadow and, while a read runs apart, in its
    /// journal.
    fn record(&mut self, ops: &[Op]) {
        if let Some(shadow) = &mut self.shadow {
            shadow.replay(ops);
        }
        if let Some(reading) = &mut self.reading {
            reading.record(ops);
        }
    }

    /// Forgets the shadow after a failure (and gives up a read made apart): the next sync
    /// reads the kernel whole.
    fn forget_shadow(&mut self) {
        self.shadow = None;
        self.reading = None;
    }

    /// Reads the kernel whole into a new shadow. The old one goes first: never two copies
    /// of its state.
    async fn observe_whole(&mut self) -> Result<(), Error> {
        self.forget_shadow();
        let crate::dataplane::Observation {
            state,
            host,
            traffic,
        } = self.dataplane.observe().await?;
        self.shadow = Some(crate::model::incremental::shadow::Shadow { state, host });
        self.traffic = traffic;
        Ok(())
    }
}
