//! The sync loop: level-triggered. Source events only wake it; each sync recomputes the desired
//! state from the latest cluster snapshot, diffs it against the kernel and applies the plan.
//!
//! The kernel is read once at start and at every full sync (`--ipvs-sync-period`), which also
//! repairs drift (on a large node each periodic pass reads the real servers of one share of
//! the virtual servers, in turn: [`crate::model::rolling`]); in between, the agent diffs against its own record of what it applied, so an
//! endpoint change costs only the operations it needs. The read of a periodic pass runs
//! apart, on a task of its own, while changes keep syncing against the shadow; what they
//! apply meanwhile is replayed on what it read (`sync::reading`), then the pass plans as usual
//! (the first sync and the retry after a failure read the kernel themselves). Syncs are at least
//! `--ipvs-min-sync-period` apart. No kernel change happens before the source has a complete
//! snapshot: an empty cache must never mean "delete everything".
//!
//! Removed TCP real servers drain (see [`crate::model::drain`]): a sync that removes real
//! servers reads the connection counts of their virtual servers alone (as kube-proxy checks a
//! real server's connections before deleting it), so an idle one goes in the same sync and a
//! busy one is left at weight 0. Full syncs read the counts again and delete what has gone
//! idle; when a drain's bound is near, or a read failed, the loop makes the next full sync
//! come sooner than the period.

mod failures;
mod programming;
mod reading;
#[cfg(test)]
mod reading_tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::dataplane::conntrack::Cleaned;
use crate::dataplane::{Applied, Dataplane, Error, Observation, Traffic};
use crate::model::cluster::{Cluster, ServiceRef, changed_services};
use crate::model::config::ProxyConfig;
use crate::model::conntrack::{ConntrackFilter, conntrack_filter, conntrack_filter_of};
use crate::model::drain::{DestinationKey, Draining};
use crate::model::incremental::Incremental;
use crate::model::kernel::{KernelState, VsKey};
use crate::model::plan::{Op, Plan, plan_draining, plan_scoped};
use crate::model::priority::priority_plan;
use crate::model::rolling::{Part, READ_SHARE};
use crate::model::scheduler::{self, Refusal};
use crate::model::shadow::Shadow;
use reading::Reading;

pub use crate::model::drift::{DRIFT_KINDS, Drift};
pub use failures::{Backoff, FailureLog, cannot_program};

/// Timing of the loop.
#[derive(Debug, Clone, Copy)]
pub struct Periods {
    /// Full re-read and repair period.
    pub sync: Duration,
    /// Minimum time between two syncs.
    pub min_sync: Duration,
}

/// What one sync did.
#[derive(Debug, Default)]
pub struct Report {
    /// Whether the kernel was read first.
    pub full: bool,
    /// The plan applied: whole when it had a failure, or when the syncer keeps plans
    /// ([`Syncer::keep_plans`]); else empty, as it moved into the shadow.
    pub plan: Plan,
    /// The operations of the plan by kind ([`crate::model::op_kind::OpKind::label`]),
    /// counted before it was applied, whether or not it is kept.
    pub op_counts: BTreeMap<&'static str, u64>,
    /// What applying it did.
    pub applied: Applied,
    /// Conflicts and warnings of the desired state and the plan.
    pub warnings: Vec<String>,
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
    pub set_sizes: Vec<(String, u64)>,
    /// Per family, `(internal, external)` Local-policy Service ports without local endpoints.
    pub no_local_endpoints: BTreeMap<crate::model::cluster::Family, (u64, u64)>,
    /// The EndpointSlice changes this sync put in the kernel, by family, with their trigger
    /// times (`kubeproxy_network_programming_duration_seconds`).
    pub programmed: Vec<(crate::model::cluster::Family, std::time::SystemTime)>,
    /// On a full sync, the connections IPVS tracks to the agent's real servers (active and
    /// inactive), from the kernel just read (`kube_proxy_ipvs_connections`).
    pub ipvs_connections: Option<u64>,
    /// Where the health-check node ports belong, from the host's addresses as last read.
    pub health_check_addresses: crate::model::desired::HealthCheckAddresses,
    /// Virtual servers whose real servers this full sync did not read (a periodic pass reads
    /// one share of them; [`crate::model::rolling`]).
    pub unread: usize,
    /// Services whose own scheduler was refused since the last sync (each also a warning):
    /// one entry when a refusal starts, none while it lasts, for an event on the Service.
    pub scheduler_refusals: Vec<Refusal>,
    /// On a full sync, what IPVS counted for each of the agent's virtual servers, from the
    /// service list the read made; empty unless the dataplane keeps the counts
    /// (`kube_proxy_ipvs_service_*`).
    pub traffic: Option<Vec<ServiceTraffic>>,
}

/// What IPVS counted for one of the agent's virtual servers, with the Service port it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceTraffic {
    /// The Service.
    pub service: ServiceRef,
    /// The name of its port (empty for a single unnamed port).
    pub port_name: String,
    /// The virtual server.
    pub key: VsKey,
    /// The counts.
    pub traffic: Traffic,
}

/// The counts of the virtual servers `owners` gives a Service to; foreign ones are left out.
fn service_traffic(
    counted: &BTreeMap<VsKey, Traffic>,
    owners: &BTreeMap<VsKey, Arc<crate::model::cluster::Service>>,
) -> Vec<ServiceTraffic> {
    counted
        .iter()
        .filter_map(|(key, traffic)| {
            let svc = owners.get(key)?;
            Some(ServiceTraffic {
                service: svc.id.clone(),
                port_name: port_name(svc, key).to_string(),
                key: *key,
                traffic: *traffic,
            })
        })
        .collect()
}

/// The name of the port of `svc` that virtual server `key` serves: its service port on one of
/// the Service's own addresses, else its node port (on a node address).
fn port_name<'a>(svc: &'a crate::model::cluster::Service, key: &VsKey) -> &'a str {
    let own = svc
        .cluster_ips
        .iter()
        .chain(&svc.external_ips)
        .chain(&svc.load_balancer_ips)
        .any(|a| *a == key.address);
    let same = |p: &&crate::model::cluster::ServicePort| p.protocol == key.protocol;
    let found = if own {
        svc.ports.iter().filter(same).find(|p| p.port == key.port)
    } else {
        svc.ports
            .iter()
            .filter(same)
            .find(|p| p.node_port == Some(key.port))
    };
    found.map_or("", |p| p.name.as_str())
}

impl Report {
    /// How many operations the plan had.
    pub fn ops(&self) -> u64 {
        self.op_counts.values().sum()
    }
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
    incremental: Option<Incremental>,
    /// Whether the last sync applied its whole plan: after a failure, what a sync changes
    /// is a retry, not drift.
    settled: bool,
    /// The EndpointSlice changes already counted as programmed.
    triggers: programming::TriggerTimes,
    /// Periodic passes made over a shadow: which share the next reads.
    pass: u64,
    /// Virtual servers whose real servers one periodic pass reads at most.
    read_share: usize,
    /// Open connections per virtual server, as last read (none kept for idle ones).
    connections: BTreeMap<VsKey, u64>,
    /// What IPVS counted per virtual server at the last full read, until a report takes it.
    traffic: BTreeMap<VsKey, Traffic>,
    /// The Services' own schedulers refused at the last sync.
    refused: BTreeSet<Refusal>,
    /// Full syncs since the desired state was last built whole.
    kept_passes: u32,
    /// Whether the next sync of the whole state builds it whole ([`Syncer::build_next`]).
    build_next: bool,
    /// Whether reports carry the plans applied whole ([`Syncer::keep_plans`]).
    keep_plans: bool,
}

/// Full syncs that keep the desired state (brought up to date Service by Service) between
/// two that build it whole: at the default 30 s period, a whole build every 5.5 minutes.
const REBUILD_EVERY: u32 = 10;

/// A fingerprint of a desired state: equal states have equal fingerprints, and different ones
/// differ but for a 64-bit collision (which would only count a repair as a change).
fn fingerprint(state: &KernelState) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    state.hash(&mut h);
    h.finish()
}

impl<D: Dataplane> Syncer<D> {
    /// A syncer for `config` over `dataplane`.
    pub fn new(dataplane: D, config: ProxyConfig) -> Self {
        Self {
            dataplane,
            reading: None,
            config,
            shadow: None,
            draining: Draining::default(),
            unread: false,
            conntrack: None,
            incremental: None,
            settled: false,
            refused: BTreeSet::new(),
            triggers: programming::TriggerTimes::new(std::time::SystemTime::now()),
            pass: 0,
            read_share: READ_SHARE,
            connections: BTreeMap::new(),
            traffic: BTreeMap::new(),
            kept_passes: 0,
            build_next: false,
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
        self.build_next = true;
    }

    /// How many virtual servers the desired state of the last sync holds.
    pub fn desired_virtual_servers(&self) -> usize {
        self.incremental
            .as_ref()
            .map_or(0, |d| d.desired().state.services.len())
    }

    /// The real servers that drain, and since when.
    pub fn draining(&self) -> &Draining {
        &self.draining
    }

    /// The dataplane (for tests and cleanup).
    pub fn dataplane(&mut self) -> &mut D {
        &mut self.dataplane
    }

    /// The refusals of Services' own schedulers in `cluster` that the last sync did not have,
    /// so that each is logged and recorded once when it starts rather than at every sync.
    /// The refusals that start with this sync; with `only`, the Services that changed are
    /// looked at alone (the others' refusals stand as they were).
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

    /// Starts the kernel read of the next full sync apart ([`Dataplane::read_apart`]): it
    /// runs on a task of its own while syncs of changes go on against the shadow, which
    /// record what they apply; the next [`Syncer::sync`] with `full` takes what it found in.
    /// Returns false, starting nothing, when there is no shadow to sync changes against
    /// (the first sync, or one after a failure): the full sync then reads the kernel itself.
    /// Spawns the read on the current tokio runtime.
    pub fn start_read(&mut self) -> bool {
        if self.reading.is_some() {
            return true;
        }
        if self.shadow.is_none() || self.incremental.is_none() || !self.settled {
            return false;
        }
        let part = self.next_part();
        self.reading = Some(Reading::start(self.dataplane.read_apart(part)));
        true
    }

    /// Whether a read started apart waits to be taken in by a full sync.
    pub fn reading(&self) -> bool {
        self.reading.is_some()
    }

    /// Whether a read started apart has ended, so a full sync would not wait for it.
    pub fn read_ended(&self) -> bool {
        self.reading.as_ref().is_some_and(Reading::is_done)
    }

    /// Waits until the read started apart ends; never, when none runs. Cancel-safe.
    pub async fn read_end(&mut self) {
        match &mut self.reading {
            Some(reading) => reading.wait().await,
            None => std::future::pending().await,
        }
    }

    /// The shadow: what the agent believes the kernel holds (for tests).
    pub fn shadow(&self) -> Option<&Shadow> {
        self.shadow.as_ref()
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

    /// One sync of `cluster`, its desired state computed whole. With `full`, or when the last
    /// apply had failures, the kernel is read first (or, after [`Syncer::start_read`], what
    /// the read apart found is taken in, waiting for it if it runs still).
    pub async fn sync(&mut self, cluster: &Cluster, full: bool) -> Result<Report, Error> {
        self.sync_inner(cluster, full, None).await
    }

    /// One sync of `cluster` when only the Services `changed` (their objects or their
    /// EndpointSlices) differ from the cluster of the last sync: their part of the desired
    /// state is recomputed and planned, and the rest is not looked at. Falls back to a whole
    /// sync when that cannot be done (the first sync, a failure before, the Node changed, a
    /// virtual server two Services want).
    pub async fn sync_changed(
        &mut self,
        cluster: &Cluster,
        changed: &BTreeSet<ServiceRef>,
    ) -> Result<Report, Error> {
        self.sync_inner(cluster, false, Some(changed)).await
    }

    async fn sync_inner(
        &mut self,
        cluster: &Cluster,
        full: bool,
        changed: Option<&BTreeSet<ServiceRef>>,
    ) -> Result<Report, Error> {
        let started = std::time::Instant::now();
        // The loop's clock, which tests can pause.
        let now = Instant::now().into_std();
        let full = full || self.shadow.is_none();
        let (unread, read_apart) = if full {
            self.read_kernel().await?
        } else {
            (BTreeSet::new(), Duration::ZERO)
        };
        // The first sync of this process programs the priority Services (the API server's,
        // the cluster DNS) before computing and applying everything else.
        let first = if self.incremental.is_none() {
            self.program_priority(cluster).await?
        } else {
            None
        };
        let shadow = self.shadow.as_mut().expect("observed above");
        // Only the changed Services, when the last plan went in whole and the kernel was not
        // read again (a read may find drift anywhere); else the whole state.
        let changed_slices = changed.map(|c| cluster.slices_of_services(c));
        let scope = match (changed, &changed_slices, self.incremental.as_mut()) {
            (Some(changed), Some(slices), Some(inc)) if !full && self.settled => {
                inc.update_with(cluster, &shadow.host, changed, slices)
            }
            _ => None,
        };
        // What the rest of the sync looks at when only some Services changed.
        let only = changed
            .zip(changed_slices.as_ref())
            .filter(|_| scope.is_some());
        // A sync of the whole state (a periodic pass, a change after a failure) brings the
        // state it keeps to `cluster` by the Services that changed since, as a change does:
        // building it whole took the periodic pass as long as the cold sync's computation,
        // and every change that came meanwhile waited for it. Every REBUILD_EVERY-th full sync
        // builds it whole all the same, the check that the kept state is what the cluster
        // builds. Drift needs to know whether the desired state moved since the last sync.
        let mut unchanged = false;
        let mut diverged = false;
        if scope.is_none() {
            let rebuild = self.build_next || (full && self.kept_passes >= REBUILD_EVERY);
            let brought = self
                .incremental
                .as_mut()
                .and_then(|inc| inc.bring_to(cluster, &shadow.host));
            match brought {
                Some(moved) if !rebuild => {
                    unchanged = moved.is_empty();
                    self.kept_passes += u32::from(full);
                }
                brought => {
                    // Its fingerprint is kept, not the state, which goes before the new one is
                    // built (two whole desired states at once were the peak of a full resync).
                    let before = self
                        .incremental
                        .take()
                        .map(|inc| fingerprint(&inc.desired().state));
                    let built = Incremental::build(cluster, &self.config, &shadow.host);
                    let now = fingerprint(&built.desired().state);
                    self.incremental = Some(built);
                    self.kept_passes = 0;
                    self.build_next = false;
                    // Brought to this very cluster, the kept state had to be the one built.
                    diverged = brought.is_some() && before != Some(now);
                    unchanged = before == Some(now) && brought.is_none_or(|m| m.is_empty());
                }
            }
        }
        let want = self.incremental.as_ref().expect("built above").desired();
        let health_check_addresses =
            crate::model::desired::health_check_addresses(cluster, &self.config, &shadow.host);
        // Read only with the kernel (counts are cleared from the shadow after each sync); a
        // periodic pass reads some virtual servers' counts, so the others' last are kept.
        if full {
            for (key, vs) in &shadow.state.services {
                if unread.contains(key) {
                    continue;
                }
                let open: u64 = vs
                    .connections
                    .values()
                    .map(|c| u64::from(c.active) + u64::from(c.inactive))
                    .sum();
                if open == 0 {
                    self.connections.remove(key);
                } else {
                    self.connections.insert(*key, open);
                }
            }
            self.connections
                .retain(|key, _| shadow.state.services.contains_key(key));
        }
        // Taken: the next full read brings new counts, and a large node's are not kept twice.
        let traffic =
            full.then(|| service_traffic(&std::mem::take(&mut self.traffic), &want.owners));
        let ipvs_connections = full.then(|| {
            self.connections
                .iter()
                .filter(|(key, _)| want.state.services.contains_key(key))
                .map(|(_, open)| open)
                .sum()
        });
        let conntrack = match only {
            Some(only) => conntrack_filter_of(cluster, &self.config, &shadow.host, Some(only)),
            None => conntrack_filter(cluster, &self.config, &shadow.host),
        };
        // A real server this sync removes (or that drains) goes at once when idle, as
        // kube-proxy's graceful termination decides: the connection counts come from a read
        // of those virtual servers alone (a full sync has just read them all).
        let mut read = Vec::new();
        let mut read_failed = None;
        if !full {
            let keys = shadow.losing_real_servers(&want.state, scope.as_ref().map(|s| &s.services));
            if !keys.is_empty() {
                match self.dataplane.observe_real_servers(&keys).await {
                    Ok(found) => {
                        shadow.refresh(found);
                        read = keys;
                    }
                    Err(e) => {
                        read_failed = Some(format!(
                            "could not read the connections of the real servers to remove (they drain until the kernel is read): {e}"
                        ))
                    }
                }
            }
        }
        let timeout = self.config.graceful_termination_timeout;
        let drained_before: BTreeSet<DestinationKey> = self.draining.keys().copied().collect();
        let track = |draining: &mut Draining, shadow: &KernelState| match &scope {
            Some(scope) => draining.track_keys(&want.state, shadow, now, &scope.services),
            None => draining.track(&want.state, shadow, now),
        };
        track(&mut self.draining, &shadow.state);
        let expired = self.draining.expired(now, timeout);
        let p = match &scope {
            Some(scope) => plan_scoped(
                &want.state,
                &shadow.state,
                &self.config.exclude_cidrs,
                &expired,
                scope,
            ),
            None => plan_draining(
                &want.state,
                &shadow.state,
                &self.config.exclude_cidrs,
                &expired,
            ),
        };
        // With the desired state unchanged and the last plan applied whole, what a full sync
        // still changes was changed behind the agent's back.
        let drift = if full && self.settled && unchanged {
            Drift::of(&p, &shadow.state)
        } else {
            Drift::default()
        };
        // Every family served, so that a count that fell to nothing reads 0.
        let no_local_endpoints = self
            .config
            .families
            .iter()
            .map(|f| {
                (
                    *f,
                    want.no_local_endpoints.get(f).copied().unwrap_or_default(),
                )
            })
            .collect();
        let mut warnings = want.conflicts.clone();
        if diverged {
            warnings.push(
                "the desired state kept change by change differed from the one built whole from the same cluster; the whole one replaces it (a fault of the agent: please report it with this log)"
                    .into(),
            );
        }
        let scheduler_refusals = self.new_refusals(cluster, only.map(|(changed, _)| changed));
        warnings.extend(
            scheduler_refusals
                .iter()
                .map(|r| format!("Service {}: {r}", r.service)),
        );
        warnings.extend(p.warnings.iter().cloned());
        warnings.extend(read_failed.iter().cloned());
        // Until the plan is known to be applied whole (an error leaves it half done).
        self.settled = false;
        let applied = if p.is_empty() {
            Applied::default()
        } else {
            self.dataplane.apply(&p).await?
        };
        self.settled = applied.failed.is_empty();
        // Slice changes count as programmed once a plan went in whole; after a failure they
        // wait for the retry that succeeds.
        let programmed = if self.settled {
            self.triggers
                .programmed(cluster, only.map(|(_, slices)| slices))
        } else {
            Vec::new()
        };
        // Counted before a plan applied whole moves into the shadow.
        let mut op_counts = crate::model::op_kind::count(&p.ops);
        // Only the virtual servers the plan changed can have started or stopped draining
        // since the record was brought up to date above.
        let touched: BTreeSet<VsKey> = match &scope {
            Some(scope) => scope.services.clone(),
            None => p
                .ops
                .iter()
                .filter_map(Op::virtual_server)
                .copied()
                .collect(),
        };
        let mut p = p;
        if applied.failed.is_empty() {
            if self.keep_plans {
                self.record(&p.ops);
            } else {
                self.record_moving(&mut p.ops);
            }
        } else {
            // Something failed: the kernel is not what we think; read it again next time.
            self.forget_shadow();
        }
        if let Some(shadow) = &mut self.shadow {
            // Connection counts change without the agent: they are only good for the sync
            // that read them.
            if full {
                for vs in shadow.state.services.values_mut() {
                    vs.connections.clear();
                }
            } else {
                shadow.forget_connections(&read);
            }
            let want = &self
                .incremental
                .as_ref()
                .expect("built above")
                .desired()
                .state;
            self.draining.track_keys(want, &shadow.state, now, &touched);
        }
        let conntrack = if scope.is_some() {
            self.clean_changed_conntrack(conntrack, &mut warnings).await
        } else {
            self.clean_conntrack(conntrack, &mut warnings).await
        };
        let (p, applied) = match first {
            Some((first, mut first_applied)) => {
                for (kind, n) in crate::model::op_kind::count(&first.ops) {
                    *op_counts.entry(kind).or_default() += n;
                }
                // The report's plan is the two plans in turn: the second's indices move.
                let offset = first.ops.len();
                first_applied.merge(Applied {
                    failed: applied
                        .failed
                        .into_iter()
                        .map(|(i, e)| (i + offset, e))
                        .collect(),
                    ..applied
                });
                // In place: a collected copy of a cold plan doubled its peak memory. A plan
                // that moved into the shadow is reported by its counts alone.
                if self.keep_plans || !first_applied.failed.is_empty() {
                    p.ops.splice(0..0, first.ops);
                }
                (p, first_applied)
            }
            None => (p, applied),
        };
        // Real servers that began to drain unread (the read failed) need the kernel read soon.
        self.unread = !full
            && (self.unread
                || (read_failed.is_some()
                    && self.draining.keys().any(|k| !drained_before.contains(k))));
        Ok(Report {
            full,
            plan: p,
            op_counts,
            applied,
            warnings,
            duration: started.elapsed() + read_apart,
            draining: self.draining.len(),
            recheck_in: self.recheck_in(now),
            conntrack,
            drift,
            set_sizes: self
                .shadow
                .as_ref()
                .map(|s| {
                    s.state
                        .sets
                        .iter()
                        .map(|(n, set)| (n.clone(), set.entries.len() as u64))
                        .collect()
                })
                .unwrap_or_default(),
            no_local_endpoints,
            programmed,
            ipvs_connections,
            health_check_addresses,
            unread: unread.len(),
            scheduler_refusals,
            traffic,
        })
    }

    /// Reads the kernel for a full sync: whole at the first sync, after a failure and on small
    /// nodes, else the periodic pass ([`crate::model::rolling`]), whose unread real servers
    /// keep what the shadow knew of them; or takes in the read started apart. Returns the
    /// virtual servers whose real servers were not read, and how long the read apart took
    /// (the sync's time includes its read).
    async fn read_kernel(&mut self) -> Result<(BTreeSet<VsKey>, Duration), Error> {
        let (observation, unread, journal, took) = match self.reading.take() {
            Some(reading) => {
                let (found, took, journal) = reading.finish().await;
                let (observation, unread) = self.dataplane.finish_read(found?).await?;
                (observation, unread, journal, took)
            }
            None => {
                let Some(part) = self.next_part() else {
                    // The old shadow goes before the kernel is read: never two copies of its
                    // state.
                    self.shadow = None;
                    let Observation {
                        state,
                        host,
                        traffic,
                    } = self.dataplane.observe().await?;
                    self.shadow = Some(Shadow { state, host });
                    self.traffic = traffic;
                    return Ok((BTreeSet::new(), Duration::ZERO));
                };
                let (observation, unread) = self.dataplane.observe_part(&part).await?;
                (observation, unread, Vec::new(), Duration::ZERO)
            }
        };
        Ok((self.take_in(observation, unread, &journal).await?, took))
    }

    /// The part of the kernel the next periodic pass reads (counting the pass); `None` to
    /// read it whole.
    fn next_part(&mut self) -> Option<Part> {
        let shadow = self.shadow.as_ref()?;
        let always = self.draining.keys().map(|(key, _)| *key).collect();
        let part = Part::of_pass(
            self.pass,
            shadow.state.services.len(),
            self.read_share,
            always,
        )?;
        self.pass += 1;
        Some(part)
    }

    /// Makes what a read found the shadow: the real servers it did not read keep what the
    /// shadow knew of them, and `journal`, the operations applied while it ran, is replayed
    /// on it (whichever of them it saw, each object ends as they left it). Returns the
    /// virtual servers whose real servers are still unread.
    async fn take_in(
        &mut self,
        observation: Observation,
        mut unread: BTreeSet<VsKey>,
        journal: &[Op],
    ) -> Result<BTreeSet<VsKey>, Error> {
        let Observation {
            mut state,
            host,
            traffic,
        } = observation;
        self.traffic = traffic;
        let mut old = self.shadow.take();
        let mut unknown = Vec::new();
        for key in &unread {
            let was = old.as_mut().and_then(|o| o.state.services.get_mut(key));
            match (was, state.services.get_mut(key)) {
                // The shadow's real servers of this one: those the journal changed included.
                (Some(was), Some(now)) => now.destinations = std::mem::take(&mut was.destinations),
                _ => unknown.push(*key),
            }
        }
        drop(old);
        let mut shadow = Shadow { state, host };
        shadow.replay(journal);
        // Counts read before a real server changed (a drain that began meanwhile) must not
        // end its drain: they are left unknown until the next read.
        for op in journal {
            if let Op::AddDestination {
                key, destination, ..
            }
            | Op::UpdateDestination {
                key, destination, ..
            } = op
                && let Some(vs) = shadow.state.services.get_mut(key)
            {
                vs.connections.remove(destination);
            }
        }
        // Gone with the journal: nothing left to read.
        unread.retain(|key| shadow.state.services.contains_key(key));
        unknown.retain(|key| unread.contains(key));
        if !unknown.is_empty() {
            // Virtual servers the shadow did not know (someone else's, made since): read now.
            shadow.refresh(self.dataplane.observe_real_servers(&unknown).await?);
            for key in &unknown {
                unread.remove(key);
            }
        }
        debug!(
            unread = unread.len(),
            replayed = journal.len(),
            "read the kernel"
        );
        self.shadow = Some(shadow);
        Ok(unread)
    }

    /// Sets how many virtual servers' real servers a periodic pass reads at most
    /// ([`crate::model::rolling::READ_SHARE`] by default; `usize::MAX` reads everything).
    pub fn set_read_share(&mut self, per_pass: usize) {
        self.read_share = per_pass;
    }

    /// Applies the additive plan of the priority Services ([`priority_plan`]) on the kernel
    /// just observed, and records it in the shadow. Returns the plan and its outcome when it
    /// did something and all of it; after a failure the kernel is read again, and the full
    /// plan retries (and reports) what failed.
    async fn program_priority(
        &mut self,
        cluster: &Cluster,
    ) -> Result<Option<(Plan, Applied)>, Error> {
        let shadow = self.shadow.as_mut().expect("observed before");
        let first = priority_plan(cluster, &self.config, &shadow.host, &shadow.state);
        if first.is_empty() {
            return Ok(None);
        }
        let applied = self.dataplane.apply(&first).await?;
        if applied.failed.is_empty() {
            self.record(&first.ops);
            debug!(ops = first.ops.len(), "programmed the priority Services");
            return Ok(Some((first, applied)));
        }
        debug!(
            failed = applied.failed.len(),
            "the priority Services failed; the full sync retries them"
        );
        self.forget_shadow();
        let Observation {
            state,
            host,
            traffic,
        } = self.dataplane.observe().await?;
        self.shadow = Some(Shadow { state, host });
        self.traffic = traffic;
        Ok(None)
    }

    /// kube-proxy's `ConntrackCleanupRequired`: once the kernel holds the new real servers,
    /// and when the serving endpoints of some UDP frontend changed since the last pass (or on
    /// the first sync, for flows left by an earlier run), deletes the UDP conntrack entries
    /// answered by no serving endpoint, so their next datagram is scheduled afresh. A failed
    /// pass is tried again at the next sync.
    async fn clean_conntrack(
        &mut self,
        filter: ConntrackFilter,
        warnings: &mut Vec<String>,
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
                    warnings.push(format!("conntrack cleanup failed; retrying: {e}"));
                    return Vec::new();
                }
            }
        };
        self.conntrack = Some(filter);
        cleaned
    }

    /// The conntrack pass of a sync that changed some Services: the flows to their UDP
    /// frontends answered by none of their serving endpoints. The whole-cluster filter of the
    /// last full pass is left as it is; the next full sync compares against it.
    async fn clean_changed_conntrack(
        &mut self,
        filter: ConntrackFilter,
        warnings: &mut Vec<String>,
    ) -> Vec<Cleaned> {
        if filter.is_empty() {
            return Vec::new();
        }
        match self.dataplane.clean_conntrack(&filter).await {
            Ok(cleaned) => cleaned,
            Err(e) => {
                warnings.push(format!("conntrack cleanup failed; retrying: {e}"));
                // The next full sync does the whole pass again.
                self.conntrack = None;
                Vec::new()
            }
        }
    }

    /// How soon draining needs a full sync: at once when a real server started draining with
    /// its counts unread (the targeted read failed; most are already idle), else when the
    /// first bound runs out (no read needed then, but a sync is).
    fn recheck_in(&self, now: std::time::Instant) -> Option<Duration> {
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

/// Runs until `shutdown` resolves: syncs whenever `snapshots` changes (debounced by
/// `min_sync`) and fully every `sync` period. `snapshots` holds `None` until the source has
/// listed everything once.
///
/// When the kernel refuses something, the loop reads it again and retries with exponential
/// backoff (from `min_sync`, at least 1 s, up to the sync period); each distinct failure is
/// logged once, and once more when it ends. `on_report` sees every sync that ran;
/// `on_blocked` is told after every pass why nothing at all could be programmed (`Some`), or
/// that something could (`None`).
pub async fn run<D: Dataplane>(
    syncer: &mut Syncer<D>,
    mut snapshots: watch::Receiver<Option<Arc<Cluster>>>,
    periods: Periods,
    shutdown: impl Future<Output = ()>,
    mut on_report: impl FnMut(&Report),
    mut on_blocked: impl FnMut(Option<&str>),
) {
    tokio::pin!(shutdown);
    let mut next_full = Instant::now();
    let mut last_sync: Option<Instant> = None;
    let mut backoff = Backoff::new(periods.min_sync, periods.sync);
    let mut failure_log = FailureLog::default();
    let mut last_blocked: Option<String> = None;
    // The first pass syncs at once; later ones wait for a change or the full-sync timer.
    let mut wait = false;
    let mut previous: Option<Arc<Cluster>> = None;
    // Whether the last pass failed: its retry reads the kernel itself, whole.
    let mut failing = false;
    loop {
        if wait {
            // While the read of a periodic pass runs apart, the pass waits for its end.
            let reading = syncer.reading();
            tokio::select! {
                _ = &mut shutdown => return,
                changed = snapshots.changed() => {
                    if changed.is_err() {
                        // The source is gone; keep the last state and stop.
                        return;
                    }
                }
                _ = tokio::time::sleep_until(next_full), if !reading => {}
                _ = syncer.read_end(), if reading => {}
            }
        }
        // Debounce.
        if let Some(last) = last_sync {
            let earliest = last + periods.min_sync;
            if Instant::now() < earliest {
                tokio::select! {
                    _ = &mut shutdown => return,
                    _ = tokio::time::sleep_until(earliest) => {}
                }
            }
        }
        let Some(cluster) = snapshots.borrow_and_update().clone() else {
            debug!("waiting for the source's first complete snapshot");
            wait = true;
            next_full = Instant::now() + periods.sync;
            continue;
        };
        // A periodic pass reads the kernel apart and runs once the read ends; the changes
        // that come meanwhile sync at once against the shadow (a read at scale takes seconds).
        let due = Instant::now() >= next_full && !syncer.reading();
        let started = due && !failing && syncer.start_read();
        let full = syncer.read_ended() || (due && !started);
        wait = true;
        // Between full syncs, only the Services that changed since the last snapshot synced.
        let changed = previous
            .as_deref()
            .filter(|_| !full)
            .and_then(|p| changed_services(p, &cluster));
        if started && changed.as_ref().is_some_and(BTreeSet::is_empty) {
            // The timer started the read, and nothing changed: nothing to sync until it ends.
            continue;
        }
        last_sync = Some(Instant::now());
        previous = Some(cluster.clone());
        let result = match &changed {
            Some(changed) => syncer.sync_changed(&cluster, changed).await,
            None => syncer.sync(&cluster, full).await,
        };
        let (failed, blocked) = match result {
            Ok(report) => {
                for w in &report.warnings {
                    warn!("{w}");
                }
                if report.ops() > 0 {
                    info!(
                        full = report.full,
                        ops = report.ops(),
                        failed = report.applied.failed.len(),
                        "synced"
                    );
                }
                if report.applied.failed.is_empty() && full {
                    next_full = Instant::now() + periods.sync;
                }
                if let Some(recheck) = report.recheck_in {
                    next_full = next_full.min(Instant::now() + recheck);
                }
                let blocked = cannot_program(&report, syncer.desired_virtual_servers());
                on_report(&report);
                (failures::failures(&report), blocked)
            }
            Err(e) => {
                let error = e.to_string();
                (vec![("sync".to_string(), error.clone())], Some(error))
            }
        };
        let changes = failure_log.update(failed.clone());
        for (what, error) in &changes.new {
            warn!(op = %what, error = %error, "the kernel refused; retrying with backoff");
        }
        for what in &changes.ended {
            info!(op = %what, "no longer failing");
        }
        failing = !failed.is_empty();
        if failed.is_empty() {
            backoff.succeeded();
        } else {
            // Retry with the kernel read again, later each time it fails again.
            let delay = backoff.failed();
            debug!(
                failures = failed.len(),
                repeated = changes.repeated,
                retry_in = ?delay,
                "sync had failures"
            );
            next_full = Instant::now() + delay;
        }
        if blocked != last_blocked {
            match &blocked {
                Some(reason) => {
                    warn!(reason = %reason, "cannot program the kernel at all; /healthz is 503 and kube_proxy_ipvs_blocked 1")
                }
                None if last_blocked.is_some() => info!("the kernel can be programmed again"),
                None => {}
            }
            last_blocked = blocked.clone();
        }
        on_blocked(blocked.as_deref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::memory::Memory;
    use crate::model::cluster::Protocol;
    use crate::model::desired::Host;
    use crate::model::desired::desired;
    use crate::model::fixtures::{added_vips, cluster, eps, kubernetes, svc};
    use crate::model::plan::Op;

    /// `default/web` on 10.96.0.10:80 with ready endpoints on another node.
    fn web(endpoints: &[&str]) -> Cluster {
        let slice = endpoints
            .iter()
            .fold(eps("web", "", Protocol::Tcp, 8080), |s, a| {
                s.ready(a, "other")
            });
        cluster(
            vec![svc("web").cluster_ip("10.96.0.10").tcp(80)],
            vec![slice],
        )
    }

    /// `web` with the API server's Service, `default/kubernetes` on 10.96.0.1:443.
    fn with_kubernetes(mut c: Cluster) -> Cluster {
        let (api, slice) = kubernetes("cp");
        let api = cluster(vec![api], vec![slice]);
        c.services.extend(api.services);
        c.slices.extend(api.slices);
        c
    }

    #[tokio::test]
    async fn a_full_sync_reports_the_counts_of_its_own_virtual_servers_by_service_port() {
        let c = cluster(
            vec![
                svc("web")
                    .cluster_ip("10.96.0.10")
                    .port("http", Protocol::Tcp, 80)
                    .port("dns", Protocol::Udp, 53)
                    .node_port(30053),
            ],
            vec![
                eps("web", "http", Protocol::Tcp, 8080).ready("10.244.1.5", "other"),
                eps("web", "dns", Protocol::Udp, 53).ready("10.244.1.5", "other"),
            ],
        );
        let vs = |a: &str, protocol, port| VsKey {
            address: a.parse().unwrap(),
            protocol,
            port,
        };
        let http = vs("10.96.0.10", Protocol::Tcp, 80);
        let node_dns = vs("192.168.1.10", Protocol::Udp, 30053);
        let foreign = vs("10.1.1.1", Protocol::Tcp, 80);
        let counted = |n| Traffic {
            connections: n,
            in_packets: 2 * n,
            out_packets: 3 * n,
            in_bytes: 4 * n,
            out_bytes: 5 * n,
        };
        let mut s = Syncer::new(
            Memory {
                host: crate::model::fixtures::host(),
                ..Memory::default()
            },
            ProxyConfig::default(),
        );
        // The first sync makes the virtual servers; the kernel counts on them afterwards.
        s.sync(&c, true).await.unwrap();
        let mut foreign_vs = s.dataplane().state.services[&http].clone();
        foreign_vs.destinations = Default::default();
        s.dataplane().state.services.insert(foreign, foreign_vs);
        s.dataplane().traffic = [
            (http, counted(1)),
            (node_dns, counted(7)),
            (foreign, counted(9)),
        ]
        .into();
        let r = s.sync(&c, true).await.unwrap();
        let traffic = r.traffic.expect("a full sync reports the counts");
        let found: Vec<_> = traffic
            .iter()
            .map(|t| {
                (
                    t.key,
                    t.service.name.as_str(),
                    t.port_name.as_str(),
                    t.traffic,
                )
            })
            .collect();
        // Ours only, each with its Service port: the node port's by its node port.
        assert!(
            found.contains(&(http, "web", "http", counted(1))),
            "{found:?}"
        );
        assert!(
            found.contains(&(node_dns, "web", "dns", counted(7))),
            "{found:?}"
        );
        assert!(!found.iter().any(|f| f.0 == foreign), "{found:?}");
        let changed = s.sync(&c, false).await.unwrap();
        assert_eq!(changed.traffic, None, "a partial sync reads no counts");
    }

    #[tokio::test]
    async fn a_change_looks_at_its_own_services_refusals_and_keeps_the_others() {
        let mut c = cluster(
            vec![
                svc("web").cluster_ip("10.96.0.10").tcp(80),
                svc("api").cluster_ip("10.96.0.11").tcp(80),
            ],
            vec![
                eps("web", "", Protocol::Tcp, 8080).ready("10.244.0.2", "node-b"),
                eps("api", "", Protocol::Tcp, 8080).ready("10.244.0.3", "node-b"),
            ],
        );
        let set = |c: &mut Cluster, name: &str, sched: Option<&str>| {
            let id = ServiceRef::new("default", name);
            Arc::make_mut(c.services.get_mut(&id).unwrap()).scheduler = sched.map(Into::into);
            BTreeSet::from([id])
        };
        let refused = |r: &Report| {
            r.scheduler_refusals
                .iter()
                .map(|r| r.service.to_string())
                .collect::<Vec<_>>()
        };
        set(&mut c, "web", Some("lblc"));
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        let r = s.sync(&c, true).await.unwrap();
        assert_eq!(refused(&r), ["default/web"]);
        // api's change: its refusal is new, web's stands and is not told again.
        let changed = set(&mut c, "api", Some("lblcr"));
        let r = s.sync_changed(&c, &changed).await.unwrap();
        assert!(!r.full);
        assert_eq!(refused(&r), ["default/api"]);
        // web's ends, then starts again: a new spell.
        let changed = set(&mut c, "web", None);
        assert!(refused(&s.sync_changed(&c, &changed).await.unwrap()).is_empty());
        let changed = set(&mut c, "web", Some("lblc"));
        let r = s.sync_changed(&c, &changed).await.unwrap();
        assert_eq!(refused(&r), ["default/web"]);
        // A full sync looks at every Service and finds what the changes kept: nothing new.
        let r = s.sync(&c, true).await.unwrap();
        assert!(refused(&r).is_empty(), "{:?}", refused(&r));
    }

    #[tokio::test]
    async fn a_refused_scheduler_is_programmed_as_the_nodes_and_reported_once_per_spell() {
        let mut c = web(&["10.244.0.2"]);
        let set = |c: &mut Cluster, sched: Option<&str>| {
            let id = c.services.keys().next().unwrap().clone();
            Arc::make_mut(c.services.get_mut(&id).unwrap()).scheduler = sched.map(Into::into);
        };
        set(&mut c, Some("lblc"));
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        let r = s.sync(&c, true).await.unwrap();
        let vs: Vec<_> = s.dataplane().state.services.values().collect();
        assert_eq!(vs.len(), 1);
        assert_eq!(vs[0].scheduler, "rr", "the node's scheduler, not lblc");
        assert_eq!(r.scheduler_refusals.len(), 1);
        assert_eq!(r.scheduler_refusals[0].asked, "lblc");
        assert!(
            r.warnings
                .iter()
                .any(|w| w.starts_with("Service default/web: scheduler \"lblc\"")),
            "{:?}",
            r.warnings
        );
        // Still refused: not reported again.
        let r = s.sync(&c, true).await.unwrap();
        assert!(r.scheduler_refusals.is_empty() && r.warnings.is_empty());
        // Ended (the annotation changed), then back: a new spell, reported again.
        set(&mut c, Some("sh"));
        let r = s.sync(&c, true).await.unwrap();
        assert!(r.scheduler_refusals.is_empty());
        assert_eq!(
            s.dataplane()
                .state
                .services
                .values()
                .next()
                .unwrap()
                .scheduler,
            "sh"
        );
        set(&mut c, Some("lblcr"));
        let r = s.sync(&c, true).await.unwrap();
        assert_eq!(r.scheduler_refusals.len(), 1);
        // Allowed by the operator: programmed as asked.
        let allowed = ProxyConfig {
            allowed_schedulers: ["lblcr".to_string()].into(),
            ..ProxyConfig::default()
        };
        let mut s = Syncer::new(Memory::default(), allowed);
        let r = s.sync(&c, true).await.unwrap();
        assert!(r.scheduler_refusals.is_empty());
        assert_eq!(
            s.dataplane()
                .state
                .services
                .values()
                .next()
                .unwrap()
                .scheduler,
            "lblcr"
        );
    }

    #[tokio::test]
    async fn a_change_synced_alone_programs_what_a_whole_sync_does() {
        let mut c = with_kubernetes(web(&["10.244.0.2"]));
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        s.sync(&c, true).await.unwrap();
        let before = c.clone();
        let key = slice_key_of(&c, "web");
        let slice = Arc::make_mut(c.slices.get_mut(&key).unwrap());
        let mut endpoint = slice.endpoints[0].clone();
        endpoint.address = "10.244.0.9".parse().unwrap();
        slice.endpoints.push(endpoint);
        let changed = changed_services(&before, &c).unwrap();
        assert_eq!(changed, BTreeSet::from([ServiceRef::new("default", "web")]));
        let r = s.sync_changed(&c, &changed).await.unwrap();
        assert!(!r.full);
        let ops: Vec<String> = r.plan.ops.iter().map(|o| o.to_string()).collect();
        assert_eq!(ops, ["add 10.244.0.9:8080 to 10.96.0.10:80/tcp weight 1"]);
        let mut whole = Syncer::new(Memory::default(), ProxyConfig::default());
        whole.sync(&c, true).await.unwrap();
        assert_eq!(s.dataplane().state, whole.dataplane().state);
        // Nothing changed: nothing planned, and the next full sync finds no drift.
        let r = s.sync_changed(&c, &BTreeSet::new()).await.unwrap();
        assert!(r.plan.is_empty());
        let r = s.sync(&c, true).await.unwrap();
        assert!(r.plan.is_empty() && r.drift.is_empty());
    }

    #[tokio::test]
    async fn the_first_sync_programs_the_api_server_service_before_the_rest() {
        let c = with_kubernetes(web(&["10.244.0.2"]));
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        let r = s.sync(&c, false).await.unwrap();
        let applied = &s.dataplane().applied;
        assert_eq!(applied.len(), 2, "{applied:#?}");
        assert_eq!(added_vips(&applied[0]), ["10.96.0.1:443"]);
        assert_eq!(added_vips(&applied[1]), ["10.96.0.10:80"]);
        // The report covers both, each operation once.
        assert_eq!(added_vips(&r.plan), ["10.96.0.1:443", "10.96.0.10:80"]);
        assert_eq!(r.applied.done, applied[0].ops.len() + applied[1].ops.len());
        assert_eq!(
            s.dataplane().state,
            desired(&c, &ProxyConfig::default(), &Host::default()).state
        );

        // A restarted agent finds it all programmed: one full read, nothing applied.
        let kernel = std::mem::take(&mut s.dataplane().state);
        let mut again = Syncer::new(
            Memory {
                state: kernel,
                ..Memory::default()
            },
            ProxyConfig::default(),
        );
        let r = again.sync(&c, true).await.unwrap();
        assert!(r.plan.is_empty(), "{:?}", r.plan.ops);
        assert!(again.dataplane().applied.is_empty());
        // Later syncs never take the priority path again.
        again.sync(&web(&["10.244.0.2"]), false).await.unwrap();
        again.sync(&c, false).await.unwrap();
        let applied = &again.dataplane().applied;
        assert_eq!(applied.len(), 2, "{applied:#?}");
        assert!(added_vips(&applied[1]).contains(&"10.96.0.1:443".to_string()));
    }

    #[tokio::test]
    async fn a_refused_priority_service_reads_the_kernel_again_and_the_full_sync_reports_it() {
        let c = with_kubernetes(web(&["10.244.0.2"]));
        let kernel = Memory {
            refuse: vec!["10.96.0.1:443".into()],
            ..Memory::default()
        };
        let mut s = Syncer::new(kernel, ProxyConfig::default());
        let r = s.sync(&c, false).await.unwrap();
        assert_eq!(s.dataplane().observed, 2, "read again after the failure");
        assert_eq!(s.dataplane().applied.len(), 2);
        // Only the full plan's refusals are reported, once each.
        let failed: Vec<String> = r
            .applied
            .failures(&r.plan)
            .map(|(op, _)| op.to_string())
            .collect();
        assert!(!failed.is_empty());
        assert_eq!(
            failed.len(),
            r.applied.failed.len(),
            "every index in the plan"
        );
        assert!(
            failed.iter().all(|op| op.contains("10.96.0.1:443")),
            "{failed:?}"
        );
        let unique: BTreeSet<&String> = failed.iter().collect();
        assert_eq!(unique.len(), failed.len(), "{failed:?}");
        assert_eq!(added_vips(&r.plan), ["10.96.0.1:443", "10.96.0.10:80"]);
        assert!(s.dataplane().state.services.keys().any(|k| k.port == 80));
    }

    #[tokio::test]
    async fn incremental_syncs_read_the_kernel_only_when_full() {
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        let r = s.sync(&web(&["10.244.0.2"]), false).await.unwrap();
        assert!(r.full, "the first sync reads the kernel");
        let r = s
            .sync(&web(&["10.244.0.2", "10.244.0.3"]), false)
            .await
            .unwrap();
        assert!(!r.full);
        assert_eq!(r.plan.ops.len(), 1, "{:?}", r.plan.ops);
        assert!(matches!(r.plan.ops[0], Op::AddDestination { .. }));
        assert_eq!(s.dataplane().observed, 1);
        // Nothing changed: nothing sent.
        let r = s
            .sync(&web(&["10.244.0.2", "10.244.0.3"]), true)
            .await
            .unwrap();
        assert!(r.plan.is_empty(), "{:?}", r.plan.ops);
        assert_eq!(s.dataplane().observed, 2);
    }

    #[tokio::test]
    async fn a_full_sync_repairs_drift() {
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
        // Someone deletes our service behind our back.
        s.dataplane().state.services.clear();
        let r = s.sync(&web(&["10.244.0.2"]), false).await.unwrap();
        assert!(r.plan.is_empty(), "an incremental sync trusts its record");
        let r = s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
        assert!(
            r.plan
                .ops
                .iter()
                .any(|o| matches!(o, Op::AddService { .. })),
            "{:?}",
            r.plan.ops
        );
        // Nothing in the cluster changed: the service and its real server were drift.
        assert_eq!(r.drift.total(), 2, "{:?}", r.plan.ops);
        assert_eq!(
            r.drift.to_string(),
            "1 real_server (10.244.0.2:8080 of 10.96.0.10:80/tcp missing), \
             1 virtual_server (10.96.0.10:80/tcp missing)"
        );
        // A change of the cluster is not drift.
        let r = s
            .sync(&web(&["10.244.0.2", "10.244.0.3"]), true)
            .await
            .unwrap();
        assert!(r.drift.is_empty(), "{:?}", r.drift);
        assert!(
            r.set_sizes
                .iter()
                .any(|(n, len)| n == "KUBE-CLUSTER-IP" && *len == 1),
            "{:?}",
            r.set_sizes
        );
    }

    #[tokio::test]
    async fn a_plan_that_moves_into_the_shadow_is_reported_by_its_counts_and_a_failed_one_whole() {
        let mut kept = Syncer::new(Memory::default(), ProxyConfig::default());
        let mut moved = Syncer::new(Memory::default(), ProxyConfig::default());
        moved.keep_plans(false);
        for c in [
            with_kubernetes(web(&["10.244.0.2"])),
            with_kubernetes(web(&["10.244.0.2", "10.244.0.3"])),
        ] {
            let a = kept.sync(&c, true).await.unwrap();
            let b = moved.sync(&c, true).await.unwrap();
            assert!(b.plan.is_empty() && !a.plan.is_empty());
            assert_eq!(b.op_counts, crate::model::op_kind::count(&a.plan.ops));
            assert_eq!(b.ops(), a.plan.ops.len() as u64);
            assert_eq!(moved.shadow(), kept.shadow());
            assert_eq!(moved.dataplane().state, kept.dataplane().state);
        }
        // A failure keeps the plan whole, its failures pointing into it.
        moved.dataplane().refuse = vec!["add 10.244.0.4:8080".into()];
        let r = moved
            .sync(&with_kubernetes(web(&["10.244.0.2", "10.244.0.4"])), false)
            .await
            .unwrap();
        assert_eq!(r.plan.ops.len() as u64, r.ops());
        let failed: Vec<String> = r
            .applied
            .failures(&r.plan)
            .map(|(op, _)| op.to_string())
            .collect();
        assert_eq!(
            failed,
            ["add 10.244.0.4:8080 to 10.96.0.10:80/tcp weight 1"]
        );
    }

    #[tokio::test]
    async fn full_syncs_keep_the_state_changes_brought_and_build_it_whole_every_eleventh() {
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
        // A full sync after a change brings the kept state to the cluster: the change's real
        // server goes in, and the state is not built again.
        let r = s
            .sync(&web(&["10.244.0.2", "10.244.0.3"]), true)
            .await
            .unwrap();
        assert_eq!(r.plan.ops.len(), 1, "{:?}", r.plan.ops);
        assert_eq!(s.kept_passes, 1);
        // A fault that left the kept state wrong (a virtual server missing from it): the
        // passes that keep it plan from it, until the one that builds it whole finds the
        // fault, says so and repairs the kernel.
        let vip: VsKey = VsKey {
            address: "10.96.0.10".parse().unwrap(),
            protocol: Protocol::Tcp,
            port: 80,
        };
        let inc = s.incremental.as_mut().unwrap();
        inc.desired_mut().state.services.remove(&vip);
        let mut found = None;
        for pass in 2..=REBUILD_EVERY + 1 {
            let r = s
                .sync(&web(&["10.244.0.2", "10.244.0.3"]), true)
                .await
                .unwrap();
            let has_vip = s.dataplane().state.services.contains_key(&vip);
            if r.warnings
                .iter()
                .any(|w| w.contains("differed from the one built whole"))
            {
                assert!(has_vip, "the build repairs the kernel");
                found = Some(pass);
                break;
            }
            assert!(!has_vip, "pass {pass} planned from the kept state");
        }
        assert_eq!(found, Some(REBUILD_EVERY + 1));
        assert_eq!(s.kept_passes, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn no_kernel_change_before_the_first_snapshot_and_debounced_after() {
        let (tx, rx) = watch::channel(None);
        let mut syncer = Syncer::new(Memory::default(), ProxyConfig::default());
        let periods = Periods {
            sync: Duration::from_secs(30),
            min_sync: Duration::from_secs(1),
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let driver = async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            tx.send(Some(Arc::new(web(&["10.244.0.2"])))).unwrap();
            // A burst of changes inside one min-sync period...
            for n in 3..8 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let eps: Vec<String> = (2..n).map(|i| format!("10.244.0.{i}")).collect();
                let refs: Vec<&str> = eps.iter().map(String::as_str).collect();
                tx.send(Some(Arc::new(web(&refs)))).unwrap();
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            stop_tx.send(()).unwrap();
            tx
        };
        let mut reports = Vec::new();
        let run_loop = run(
            &mut syncer,
            rx,
            periods,
            async { stop_rx.await.unwrap_or(()) },
            |r| reports.push(r.plan.ops.len()),
            |_| {},
        );
        let (_tx, ()) = tokio::join!(driver, run_loop);
        // ...is applied in at most two syncs: the first snapshot, then the rest together.
        assert!(reports.len() <= 2, "{reports:?}");
        assert_eq!(
            syncer
                .dataplane()
                .state
                .services
                .values()
                .next()
                .unwrap()
                .destinations
                .len(),
            5
        );
        // Nothing was applied while the snapshot was None.
        assert!(syncer.dataplane().applied.iter().all(|p| !p.is_empty()));
    }

    fn conns(active: u32, inactive: u32) -> crate::model::kernel::Connections {
        crate::model::kernel::Connections { active, inactive }
    }

    #[tokio::test(start_paused = true)]
    async fn a_removed_real_server_goes_at_once_when_idle_and_drains_while_busy() {
        let vip = crate::model::kernel::VsKey {
            address: "10.96.0.10".parse().unwrap(),
            protocol: Protocol::Tcp,
            port: 80,
        };
        let gone: std::net::SocketAddr = "10.244.0.3:8080".parse().unwrap();
        let two = || web(&["10.244.0.2", "10.244.0.3"]);
        let one = || web(&["10.244.0.2"]);
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        s.sync(&two(), true).await.unwrap();
        // Idle: deleted by the change's own sync, which read that virtual server alone.
        let r = s.sync(&one(), false).await.unwrap();
        let deleted = Op::DelDestination {
            key: vip,
            destination: gone,
        };
        assert_eq!(r.plan.ops, std::slice::from_ref(&deleted));
        assert_eq!((r.draining, r.recheck_in), (0, None));
        assert_eq!(s.dataplane().observed, 1);
        assert_eq!(s.dataplane().real_server_reads, [vec![vip]]);
        // Busy: weight 0, and it drains until the bound at the latest.
        s.sync(&two(), false).await.unwrap();
        let kernel_vs = s.dataplane().state.services.get_mut(&vip).unwrap();
        kernel_vs.connections.insert(gone, conns(1, 0));
        let r = s.sync(&one(), false).await.unwrap();
        let drained = Op::UpdateDestination {
            key: vip,
            destination: gone,
            weight: 0,
        };
        assert_eq!(r.plan.ops, std::slice::from_ref(&drained));
        assert_eq!(r.draining, 1);
        assert_eq!(r.recheck_in, Some(Duration::from_secs(15 * 60)));
        tokio::time::advance(Duration::from_secs(60)).await;
        let r = s.sync(&one(), true).await.unwrap();
        assert!(r.plan.is_empty(), "{:?}", r.plan.ops);
        assert_eq!(r.recheck_in, Some(Duration::from_secs(14 * 60)));
        // It closes: the next sync that reads it deletes it.
        let kernel_vs = s.dataplane().state.services.get_mut(&vip).unwrap();
        kernel_vs.connections.insert(gone, conns(0, 0));
        let r = s.sync(&one(), false).await.unwrap();
        assert_eq!(r.plan.ops, [deleted]);
        assert_eq!((r.draining, r.recheck_in), (0, None));
        assert_eq!(s.dataplane().observed, 2);
        // The read fails: it drains with unknown counts, and the kernel is read at once.
        s.sync(&two(), false).await.unwrap();
        s.dataplane().unavailable = true;
        let r = s.sync(&one(), false).await.unwrap();
        assert_eq!(r.plan.ops, [drained]);
        assert_eq!((r.draining, r.recheck_in), (1, Some(Duration::ZERO)));
        assert!(
            r.warnings.iter().any(|w| w.contains("could not read")),
            "{:?}",
            r.warnings
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_ends_at_the_bound_and_a_returning_endpoint_keeps_its_connections() {
        let vip = crate::model::kernel::VsKey {
            address: "10.96.0.10".parse().unwrap(),
            protocol: Protocol::Tcp,
            port: 80,
        };
        let gone: std::net::SocketAddr = "10.244.0.3:8080".parse().unwrap();
        let config = ProxyConfig {
            graceful_termination_timeout: Duration::from_secs(120),
            ..ProxyConfig::default()
        };
        let mut s = Syncer::new(Memory::default(), config);
        s.sync(&web(&["10.244.0.2", "10.244.0.3"]), true)
            .await
            .unwrap();
        s.dataplane()
            .state
            .services
            .get_mut(&vip)
            .unwrap()
            .connections
            .insert(gone, conns(3, 1));
        s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
        // It comes back: weight 1 again, in place.
        let r = s
            .sync(&web(&["10.244.0.2", "10.244.0.3"]), false)
            .await
            .unwrap();
        assert_eq!(
            r.plan.ops,
            [Op::UpdateDestination {
                key: vip,
                destination: gone,
                weight: 1
            }]
        );
        assert_eq!(r.draining, 0);
        // It goes again and its connections never end: deleted at the bound, without a read.
        let r = s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
        assert_eq!(r.recheck_in, Some(Duration::from_secs(120)));
        tokio::time::advance(Duration::from_secs(119)).await;
        assert!(
            s.sync(&web(&["10.244.0.2"]), false)
                .await
                .unwrap()
                .plan
                .is_empty()
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        let r = s.sync(&web(&["10.244.0.2"]), false).await.unwrap();
        assert_eq!(
            r.plan.ops,
            [Op::DelDestination {
                key: vip,
                destination: gone
            }]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_keeps_undesired_weight_0_destinations_draining() {
        let vip = crate::model::kernel::VsKey {
            address: "10.96.0.10".parse().unwrap(),
            protocol: Protocol::Tcp,
            port: 80,
        };
        let mut first = Syncer::new(Memory::default(), ProxyConfig::default());
        first
            .sync(&web(&["10.244.0.2", "10.244.0.3"]), true)
            .await
            .unwrap();
        let vs = first.dataplane().state.services.get_mut(&vip).unwrap();
        vs.connections
            .insert("10.244.0.3:8080".parse().unwrap(), conns(2, 0));
        first.sync(&web(&["10.244.0.2"]), false).await.unwrap();
        // A new agent over the same kernel: the draining one has connections, and another
        // wanted one was left at weight 0 by someone.
        let mut kernel = first.dataplane().clone();
        let vs = kernel.state.services.get_mut(&vip).unwrap();
        vs.destinations
            .insert("10.244.0.2:8080".parse().unwrap(), 0);
        let mut s = Syncer::new(kernel, ProxyConfig::default());
        let r = s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
        assert_eq!(
            r.plan.ops,
            [Op::UpdateDestination {
                key: vip,
                destination: "10.244.0.2:8080".parse().unwrap(),
                weight: 1
            }]
        );
        assert_eq!(r.draining, 1);
    }

    /// `web` with its one port on UDP 53.
    fn dns(endpoints: &[&str]) -> Cluster {
        let mut c = web(endpoints);
        c.services = c
            .services
            .iter()
            .map(|(id, s)| {
                let mut s = (**s).clone();
                s.ports[0].protocol = Protocol::Udp;
                s.ports[0].port = 53;
                (id.clone(), Arc::new(s))
            })
            .collect();
        c.slices = c
            .slices
            .iter()
            .map(|(key, s)| {
                let mut s = (**s).clone();
                s.ports[0].protocol = Protocol::Udp;
                (key.clone(), Arc::new(s))
            })
            .collect();
        c
    }

    /// The key of the first slice of the Service named `name`.
    fn slice_key_of(c: &Cluster, name: &str) -> (String, String) {
        c.slices
            .iter()
            .find(|(_, s)| s.service.name == name)
            .unwrap()
            .0
            .clone()
    }

    #[tokio::test]
    async fn conntrack_is_cleaned_when_udp_endpoints_change() {
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        // The first sync cleans what an earlier run may have left.
        s.sync(&dns(&["10.244.0.2"]), false).await.unwrap();
        assert_eq!(s.dataplane().conntrack_cleanups.len(), 1);
        // Unchanged, or a TCP change: no pass.
        s.sync(&dns(&["10.244.0.2"]), true).await.unwrap();
        s.sync(&web(&["10.244.0.2"]), false).await.unwrap();
        s.sync(&web(&["10.244.0.3"]), false).await.unwrap();
        assert_eq!(s.dataplane().conntrack_cleanups.len(), 1);
        // The UDP endpoint moves: one pass, after the real servers changed.
        s.sync(&dns(&["10.244.0.2"]), false).await.unwrap();
        let cleanups = s.dataplane().conntrack_cleanups.len();
        let r = s.sync(&dns(&["10.244.0.3"]), false).await.unwrap();
        assert!(!r.plan.is_empty());
        let last = s.dataplane().conntrack_cleanups.last().unwrap().clone();
        assert_eq!(s.dataplane().conntrack_cleanups.len(), cleanups + 1);
        let vip: std::net::SocketAddr = "10.96.0.10:53".parse().unwrap();
        assert!(last.is_stale(Protocol::Udp, vip, "10.244.0.2".parse().unwrap()));
        assert!(!last.is_stale(Protocol::Udp, vip, "10.244.0.3".parse().unwrap()));
        // No endpoint left: nothing to clean, and no pass.
        s.sync(&dns(&[]), false).await.unwrap();
        assert_eq!(s.dataplane().conntrack_cleanups.len(), cleanups + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_removes_an_idle_real_server_without_reading_the_whole_kernel() {
        let (tx, rx) = watch::channel(Some(Arc::new(web(&["10.244.0.2", "10.244.0.3"]))));
        let mut syncer = Syncer::new(Memory::default(), ProxyConfig::default());
        let periods = Periods {
            sync: Duration::from_secs(30),
            min_sync: Duration::from_secs(1),
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let driver = async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            tx.send(Some(Arc::new(web(&["10.244.0.2"])))).unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            stop_tx.send(()).unwrap();
            tx
        };
        let mut reports = Vec::new();
        let run_loop = run(
            &mut syncer,
            rx,
            periods,
            async { stop_rx.await.unwrap_or(()) },
            |r| reports.push((r.full, r.plan.ops.len(), r.draining)),
            |_| {},
        );
        let (_tx, ()) = tokio::join!(driver, run_loop);
        // The first sync, then the removal, which finds it idle and deletes it: no drain, and
        // no full read of the kernel until the sync period.
        assert_eq!(reports.len(), 2, "{reports:?}");
        assert_eq!(reports[1], (false, 1, 0));
        assert_eq!(syncer.dataplane().observed, 1);
    }

    /// `n` Services `s0..`, each on its own ClusterIP with two ready endpoints.
    fn many(n: usize) -> Cluster {
        let (services, slices) = (0..n)
            .map(|i| {
                let name = format!("s{i}");
                let service = svc(&name).cluster_ip(&format!("10.96.1.{i}")).tcp(80);
                let slice = eps(&name, "", Protocol::Tcp, 8080)
                    .ready(&format!("10.244.1.{i}"), "other")
                    .ready(&format!("10.244.2.{i}"), "other");
                (service, slice)
            })
            .unzip();
        cluster(services, slices)
    }

    #[tokio::test]
    async fn periodic_passes_read_the_real_servers_of_one_share_each_and_repair_them_in_turn() {
        let c = many(10);
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        s.set_read_share(4);
        // The first sync reads everything.
        let r = s.sync(&c, true).await.unwrap();
        assert_eq!(r.unread, 0);
        // Someone deletes one real server of every virtual server behind the agent's back.
        for vs in s.dataplane().state.services.values_mut() {
            let first = *vs.destinations.keys().next().unwrap();
            vs.destinations.remove(&first);
        }
        // Each pass reads one of the three shares and repairs what it read, nothing else.
        let mut repaired = 0;
        for pass in 0..3 {
            let r = s.sync(&c, true).await.unwrap();
            assert_eq!(
                r.unread + r.plan.ops.len(),
                10,
                "pass {pass}: {:?}",
                r.plan.ops
            );
            assert!(
                r.unread > 0 && r.unread < 10,
                "pass {pass} read all or nothing"
            );
            assert!(
                r.plan
                    .ops
                    .iter()
                    .all(|op| matches!(op, Op::AddDestination { .. })),
                "{:?}",
                r.plan.ops
            );
            repaired += r.plan.ops.len();
        }
        // One round repaired every virtual server, each once; the kernel is whole again.
        assert_eq!(repaired, 10);
        let want = desired(&c, &ProxyConfig::default(), &Host::default());
        assert_eq!(s.dataplane().state.services, want.state.services);
        // An endpoint change between passes still goes in at once, against the shadow.
        let r = s.sync(&many(11), false).await.unwrap();
        assert!(!r.plan.is_empty());
    }

    #[tokio::test]
    async fn a_periodic_pass_reads_the_draining_and_the_unknown_virtual_servers_whole() {
        let c = many(10);
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        s.set_read_share(4);
        s.sync(&c, true).await.unwrap();
        // s0 loses a busy endpoint: it drains.
        let mut fewer = c.clone();
        let key = slice_key_of(&fewer, "s0");
        Arc::make_mut(fewer.slices.get_mut(&key).unwrap())
            .endpoints
            .pop();
        let s0 = *s
            .dataplane()
            .state
            .services
            .keys()
            .find(|k| k.address == "10.96.1.0".parse::<std::net::IpAddr>().unwrap())
            .unwrap();
        let busy: std::net::SocketAddr = "10.244.2.0:8080".parse().unwrap();
        let vs = s.dataplane().state.services.get_mut(&s0).unwrap();
        vs.connections.insert(busy, conns(1, 0));
        let r = s.sync(&fewer, false).await.unwrap();
        assert_eq!(r.draining, 1);
        // Someone else makes a virtual server: the pass reads its real servers too.
        let foreign = crate::model::kernel::VsKey {
            address: "192.0.2.1".parse().unwrap(),
            protocol: Protocol::Tcp,
            port: 80,
        };
        let mut theirs = crate::model::kernel::VirtualServer {
            scheduler: "rr".into(),
            ..Default::default()
        };
        theirs
            .destinations
            .insert("192.0.2.2:80".parse().unwrap(), 1);
        s.dataplane().state.services.insert(foreign, theirs);
        // Three passes: in each, the draining one is read (it goes once idle)...
        for pass in 0..3 {
            let r = s.sync(&fewer, true).await.unwrap();
            assert_eq!(r.draining, 1, "pass {pass}");
        }
        let vs = s.dataplane().state.services.get_mut(&s0).unwrap();
        vs.connections.clear();
        let r = s.sync(&fewer, true).await.unwrap();
        assert_eq!(
            r.plan.ops,
            [Op::DelDestination {
                key: s0,
                destination: busy
            }]
        );
        // ...and the foreign one's real servers were read at the first pass that did not
        // select it (the shadow had nothing to keep for it), not taken as none.
        assert!(r.unread > 0);
        let reads = &s.dataplane().real_server_reads;
        assert!(
            reads.iter().any(|keys| keys.contains(&foreign)),
            "{reads:?}"
        );
    }

    /// Tampers with the in-memory kernel, then runs a full sync of an unchanged cluster.
    async fn repair(
        s: &mut Syncer<Memory>,
        c: &Cluster,
        tamper: impl FnOnce(&mut KernelState),
    ) -> Report {
        tamper(&mut s.dataplane().state);
        s.sync(c, true).await.unwrap()
    }

    fn counts(d: &Drift) -> Vec<(&'static str, u64)> {
        d.counts.iter().map(|(k, n)| (*k, *n)).collect()
    }

    #[tokio::test]
    async fn drift_is_counted_by_kind_and_only_once() {
        use crate::model::cluster::Family;
        let c = cluster(
            vec![
                svc("web").cluster_ip("10.96.0.10").tcp(80),
                svc("api").cluster_ip("10.96.0.11").tcp(443),
            ],
            vec![
                eps("web", "", Protocol::Tcp, 8080)
                    .ready("10.244.0.2", "other")
                    .ready("10.244.0.3", "other"),
                eps("api", "", Protocol::Tcp, 8443).ready("10.244.0.4", "other"),
            ],
        );
        let web = crate::model::kernel::VsKey {
            address: "10.96.0.10".parse().unwrap(),
            protocol: Protocol::Tcp,
            port: 80,
        };
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        s.sync(&c, true).await.unwrap();
        let clean = s.dataplane().state.clone();
        /// What is done, the tampering, the drift expected by kind.
        type Case = (
            &'static str,
            Box<dyn FnOnce(&mut KernelState)>,
            Vec<(&'static str, u64)>,
        );
        let cases: Vec<Case> = vec![
            (
                "ipvsadm -D",
                Box::new(move |k| {
                    k.services.remove(&web);
                }),
                vec![("real_server", 2), ("virtual_server", 1)],
            ),
            (
                "ipvsadm -e -w 5",
                Box::new(move |k| {
                    let vs = k.services.get_mut(&web).unwrap();
                    vs.destinations
                        .insert("10.244.0.3:8080".parse().unwrap(), 5);
                }),
                vec![("real_server", 1)],
            ),
            (
                "ipset flush",
                Box::new(|k| k.sets.get_mut("KUBE-CLUSTER-IP").unwrap().entries.clear()),
                vec![("set_entry", 2)],
            ),
            (
                "ipset destroy",
                Box::new(|k| {
                    k.sets.remove("KUBE-IPVS-OWNED");
                }),
                vec![("set", 1), ("set_entry", 2)],
            ),
            (
                "ipset add",
                Box::new(|k| {
                    let set = k.sets.get_mut("KUBE-CLUSTER-IP").unwrap();
                    set.entries.insert(crate::model::kernel::SetEntry::IpPort(
                        "10.96.9.9".parse().unwrap(),
                        Protocol::Tcp,
                        9,
                    ));
                }),
                vec![("set_entry", 1)],
            ),
            (
                "iptables -X",
                Box::new(|k| {
                    let r = k.rules.get_mut(&Family::V4).unwrap();
                    let chain = ("nat".to_string(), "KUBE-POSTROUTING".to_string());
                    r.chains.remove(&chain);
                    r.rules
                        .retain(|(_, rule)| !rule.starts_with("-A KUBE-POSTROUTING "));
                    r.jumps.retain(|(_, j)| !j.ends_with("-j KUBE-POSTROUTING"));
                }),
                vec![("chain", 1), ("jump", 1)],
            ),
            (
                "iptables -F",
                Box::new(|k| {
                    let r = k.rules.get_mut(&Family::V4).unwrap();
                    r.rules
                        .retain(|(_, rule)| !rule.starts_with("-A KUBE-FORWARD "));
                }),
                vec![("chain", 1)],
            ),
            (
                "ip addr del",
                Box::new(|k| {
                    k.addresses.remove(&"10.96.0.11".parse().unwrap());
                }),
                vec![("address", 1)],
            ),
            (
                "ip link del",
                Box::new(|k| {
                    k.link = false;
                    k.addresses.clear();
                }),
                vec![("address", 2), ("link", 1)],
            ),
            (
                "sysctl -w",
                Box::new(|k| {
                    k.sysctls.insert("net/ipv4/vs/conntrack".into(), "0".into());
                }),
                vec![("sysctl", 1)],
            ),
        ];
        for (what, tamper, want) in cases {
            let r = repair(&mut s, &c, tamper).await;
            assert_eq!(counts(&r.drift), want, "{what}: {}", r.drift);
            assert_eq!(s.dataplane().state, clean, "{what} repaired");
            // Repaired: the next full sync finds nothing, so the drift is reported once.
            let r = s.sync(&c, true).await.unwrap();
            assert!(r.drift.is_empty(), "{what} again: {}", r.drift);
        }
        // The log line names what was repaired.
        let r = repair(&mut s, &c, |k| {
            k.sysctls.insert("net/ipv4/vs/conntrack".into(), "0".into());
            k.addresses.clear();
        })
        .await;
        assert_eq!(
            r.drift.to_string(),
            "2 address (10.96.0.10 missing, 10.96.0.11 missing), \
             1 sysctl (net/ipv4/vs/conntrack 0 -> 1)"
        );
    }

    #[tokio::test]
    async fn retries_and_changes_are_not_drift() {
        let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
        // The first sync of a new agent makes everything: not drift.
        let r = s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
        assert!(!r.plan.is_empty());
        assert!(r.drift.is_empty());
        // The kernel refuses the new real server: the retries are not drift either...
        s.dataplane().refuse = vec!["add 10.244.0.3:8080".into()];
        let two = web(&["10.244.0.2", "10.244.0.3"]);
        let r = s.sync(&two, false).await.unwrap();
        assert_eq!(r.applied.failed.len(), 1);
        let r = s.sync(&two, true).await.unwrap();
        assert_eq!(r.applied.failed.len(), 1);
        assert!(r.drift.is_empty(), "{}", r.drift);
        s.dataplane().refuse.clear();
        let r = s.sync(&two, true).await.unwrap();
        assert!(r.applied.failed.is_empty() && !r.plan.is_empty());
        assert!(r.drift.is_empty(), "{}", r.drift);
        // ...and a drain that starts, or ends, is the agent's own doing.
        let busy: std::net::SocketAddr = "10.244.0.3:8080".parse().unwrap();
        let vs = s.dataplane().state.services.values_mut().next().unwrap();
        vs.connections.insert(busy, conns(1, 0));
        let r = s.sync(&web(&["10.244.0.2"]), false).await.unwrap();
        assert_eq!(r.draining, 1);
        let vs = s.dataplane().state.services.values_mut().next().unwrap();
        vs.connections.clear();
        let r = s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
        assert_eq!(r.draining, 0, "{:?}", r.plan.ops);
        assert!(r.drift.is_empty(), "{}", r.drift);
        // Once settled, someone else's change is.
        let r = repair(&mut s, &web(&["10.244.0.2"]), |k| k.addresses.clear()).await;
        assert_eq!(counts(&r.drift), [("address", 1)]);
    }
}
