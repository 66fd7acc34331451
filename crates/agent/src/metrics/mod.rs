//! Prometheus metrics with kube-proxy's names, types and labels (its IPVS-mode registration),
//! plus the agent's own, served on `metricsBindAddress` in the Prometheus text format 0.0.4.
//!
//! Every family is a typed `prometheus-client` metric declared once (`metrics::families`);
//! the library writes the exposition. [`Metrics`] is a recorder the sync loop
//! ([`Metrics::record`]), the source and the health servers call; [`Metrics::render`] encodes
//! it. [`serve`] answers `/metrics`, `/configz`, `/healthz` (always `ok`, as the generic
//! healthz kube-proxy mounts there) and `/proxyMode` on the shared [`crate::web`] server.
//!
//! Counters are registered without their `_total`, which the encoder appends (so
//! `kubeproxy_proxy_healthz` is exposed as `kubeproxy_proxy_healthz_total`, as kube-proxy
//! names it); `metrics::tests::baseline` checks the exposition against the one the
//! hand-written renderer gave.
//!
//! # Layout
//! - `families`: the families the agent exports, each declared once with its labels, and their
//!   kube-proxy names and help.
//! - `process`: the standard `process_*` metrics, read from `/proc` at each scrape.
//! - `traffic`: the per-virtual-server IPVS counters of the last full sync.
//! - `tests`: the recorder and the exposition, with `baseline`, the exposition against the
//!   hand-written renderer's.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::dataplane::Applied;
use crate::model::plan::drift::DriftKind;
use crate::model::plan::op_kind::OpKind;
use crate::model::plan::{Op, Plan};
use crate::model::snapshot::cluster::Family;
use crate::sync::Report;
use crate::web::{self, Request, Response};

mod api;
mod families;
mod process;
mod traffic;

pub use api::ApiMetrics;
use families::{
    CodeLabels, Families, FamilyLabels, KindLabels, NoLabels, PolicyLabels, SetLabels, TypeLabels,
    build_labels,
};

/// kube-proxy's `sync_proxy_rules_duration_seconds` buckets: 1 ms doubling to about 16 s.
pub fn sync_buckets() -> Vec<f64> {
    (0..15).map(|i| 0.001 * f64::from(1u32 << i)).collect()
}

/// kube-proxy's `network_programming_duration_seconds` buckets: 0.25 s and 0.5 s, every
/// second to 59 s, every 5 s to 115 s, every 30 s to 5 min.
pub fn network_programming_buckets() -> Vec<f64> {
    let mut b = vec![0.25, 0.5];
    b.extend((1..=59).map(f64::from));
    b.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
    b.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
    b
}

/// kube-proxy's `ip_family` label value.
pub fn family_label(f: Family) -> &'static str {
    match f {
        Family::V4 => "IPv4",
        Family::V6 => "IPv6",
    }
}

/// What one sync did, in the terms the metrics need.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncObservation {
    /// How long the sync took.
    pub duration: Duration,
    /// When it ended.
    pub at: Option<SystemTime>,
    /// Operations applied, by kind.
    pub ops: BTreeMap<OpKind, u64>,
    /// Operations that failed, by kind.
    pub failed: BTreeMap<OpKind, u64>,
    /// Families whose `iptables-restore` failed.
    pub restore_failed: BTreeSet<Family>,
    /// Kernel objects that a full sync repaired after someone else changed them, by kind
    /// (the sync loop knows which, empty if unknown).
    pub drift_repaired: BTreeMap<DriftKind, u64>,
}

impl SyncObservation {
    /// Counts `plan` and `applied` (the outcome of `plan`) by operation kind.
    pub fn from_plan(plan: &Plan, applied: &Applied, duration: Duration, at: SystemTime) -> Self {
        Self::from_counts(
            &crate::model::plan::op_kind::count(&plan.ops),
            applied.failures(plan).map(|(op, _)| op),
            duration,
            at,
        )
    }

    /// A plan's operations counted by kind (`counts`, [`crate::sync::Report::op_counts`])
    /// and those of them that `failed`.
    pub fn from_counts<'a>(
        counts: &BTreeMap<OpKind, u64>,
        failed: impl Iterator<Item = &'a Op>,
        duration: Duration,
        at: SystemTime,
    ) -> Self {
        let mut obs = SyncObservation {
            duration,
            at: Some(at),
            ops: counts.clone(),
            ..Self::default()
        };
        for op in failed {
            let kind = op.kind();
            *obs.failed.entry(kind).or_default() += 1;
            if let Some(n) = obs.ops.get_mut(&kind) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    obs.ops.remove(&kind);
                }
            }
            if let Op::WriteRules { family, .. } = op {
                obs.restore_failed.insert(*family);
            }
        }
        obs
    }

    /// True when every operation succeeded.
    pub fn succeeded(&self) -> bool {
        self.failed.is_empty()
    }
}

/// The recorder: cheap to share (`Arc<Metrics>`), every method takes `&self`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    f: Families,
    families: Vec<Family>,
    /// The per-virtual-server IPVS counters, when they are exported.
    traffic: Option<Arc<traffic::Collector>>,
    /// Held while a series set is replaced whole, and by a scrape, so that no scrape sees
    /// half of it.
    replacing: Mutex<()>,
}

/// A gauge's value from a count (saturating: a count past `i64::MAX` is not a real case).
fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Metrics {
    /// A recorder for the agent's IP families; per-family series start at zero. With
    /// `service_traffic`, the per-virtual-server IPVS counters (`kube_proxy_ipvs_service_*`)
    /// are exported too ([`Metrics::service_traffic`]).
    pub fn new(families: &[Family], service_traffic: bool) -> Self {
        let f = Families::new(families);
        let mut registry = Registry::default();
        f.register(&mut registry);
        registry.register_collector(Box::new(process::Collector));
        registry.register(
            "kubernetes_build",
            "[ALPHA] A metric with a constant '1' value labeled by major, minor, git version, compiler and platform from which the agent was built",
            Info::new(build_labels()),
        );
        let traffic = service_traffic.then(|| Arc::new(traffic::Collector::default()));
        if let Some(t) = &traffic {
            registry.register_collector(Box::new(t.clone()));
        }
        Self {
            registry,
            f,
            families: families.to_vec(),
            traffic,
            replacing: Mutex::new(()),
        }
    }

    /// Exports `api`'s families too: the API client's requests and the watches' health.
    #[must_use]
    pub fn with_api(mut self, api: &ApiMetrics) -> Self {
        api.register(&mut self.registry);
        self
    }

    fn replacing(&self) -> MutexGuard<'_, ()> {
        // A panic while holding it leaves no state behind: still good to take.
        self.replacing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a sync: its duration (every family: one sync programs them all), the
    /// operations by kind, failures, drift repaired; on success the last-sync timestamp
    /// (kube-proxy sets it only when the sync got through, so a stuck proxy shows).
    pub fn observe_sync(&self, obs: &SyncObservation, full: bool) {
        let f = &self.f;
        let secs = obs.duration.as_secs_f64();
        for family in &self.families {
            f.sync_duration
                .get_or_create(&FamilyLabels::from(*family))
                .observe(secs);
        }
        // Failure counters start at 0 for what was tried, as kube-proxy's do, so a dashboard's
        // rate() has a series before the first failure.
        for (kind, n) in &obs.ops {
            let l = KindLabels { kind: kind.label() };
            f.operations.get_or_create(&l).inc_by(*n);
            let _ = f.operation_failures.get_or_create(&l);
        }
        for (kind, n) in &obs.failed {
            f.operation_failures
                .get_or_create(&KindLabels { kind: kind.label() })
                .inc_by(*n);
        }
        for family in &obs.restore_failed {
            f.restore_failures
                .get_or_create(&FamilyLabels::from(*family))
                .inc();
        }
        for (kind, n) in &obs.drift_repaired {
            f.drift_repaired
                .get_or_create(&KindLabels { kind: kind.label() })
                .inc_by(*n);
        }
        let r#type = if full { "full" } else { "partial" };
        f.syncs.get_or_create(&TypeLabels { r#type }).inc();
        if obs.succeeded()
            && let Some(at) = obs.at
        {
            let t = unix_seconds(at);
            for family in &self.families {
                f.last_timestamp
                    .get_or_create(&FamilyLabels::from(*family))
                    .set(t);
            }
        }
    }

    /// Records everything one sync reports, at the time it ended (`now`): its observation
    /// ([`Metrics::observe_sync`]), the Local Services without local endpoints, the sets'
    /// sizes, draining real servers, IPVS connections and per-virtual-server counters, the
    /// network-programming latency of each EndpointSlice change it programmed and its
    /// conntrack passes. The changes pending since the previous sync are done.
    pub fn record(&self, report: &Report, now: SystemTime) {
        let mut obs = SyncObservation::from_counts(
            &report.op_counts,
            report.applied.failures(&report.plan).map(|(op, _)| op),
            report.duration,
            now,
        );
        obs.drift_repaired = report.drift.counts.clone();
        for (family, (internal, external)) in &report.no_local_endpoints {
            self.no_local_endpoints(*family, *internal, *external);
        }
        self.ipset_entries(report.set_sizes.iter().map(|(n, c)| (n.to_string(), *c)));
        self.observe_sync(&obs, report.full);
        self.destinations_draining(report.draining as u64);
        for (family, triggered) in &report.programmed {
            // A trigger time ahead of this clock (skew) counts as no delay.
            self.network_programming(*family, now.duration_since(*triggered).unwrap_or_default());
        }
        if let Some(n) = report.ipvs_connections {
            self.ipvs_connections(n);
        }
        if let Some(traffic) = &report.traffic {
            self.service_traffic(traffic.clone());
        }
        for c in &report.conntrack {
            self.conntrack_reconciled(c.family, c.duration, c.deleted as u64);
        }
        self.service_changes(0, 0);
        self.endpoint_changes(0, 0);
    }

    /// The source gave a snapshot with `services` Services and `slices` EndpointSlices
    /// changed: counted in the `_total`s, and pending until the next [`Metrics::record`].
    pub fn changes_seen(&self, services: u64, slices: u64) {
        let f = &self.f;
        f.service_changes.inc_by(services);
        f.service_changes_pending.inc_by(gauge_value(services));
        f.endpoint_changes.inc_by(slices);
        f.endpoint_changes_pending.inc_by(gauge_value(slices));
    }

    /// Whether the agent cannot program the kernel at all (`kube_proxy_ipvs_blocked`): the
    /// public `/healthz` says only 503, the log says why, and this gauge says it is that.
    pub fn set_blocked(&self, blocked: bool) {
        self.f.blocked.set(i64::from(blocked));
    }

    /// A sync was asked for at `at` (`sync_proxy_rules_last_queued_timestamp_seconds`).
    pub fn queued(&self, at: SystemTime) {
        let t = unix_seconds(at);
        for family in &self.families {
            self.f
                .last_queued_timestamp
                .get_or_create(&FamilyLabels::from(*family))
                .set(t);
        }
    }

    /// Endpoint changes seen by the source (`_total`) and not yet synced (`_pending`).
    pub fn endpoint_changes(&self, new: u64, pending: u64) {
        self.f.endpoint_changes.inc_by(new);
        self.f.endpoint_changes_pending.set(gauge_value(pending));
    }

    /// Service changes seen by the source (`_total`) and not yet synced (`_pending`).
    pub fn service_changes(&self, new: u64, pending: u64) {
        self.f.service_changes.inc_by(new);
        self.f.service_changes_pending.set(gauge_value(pending));
    }

    /// The time from an EndpointSlice's `endpoints.kubernetes.io/last-change-trigger-time`
    /// to the end of the sync that programmed it.
    pub fn network_programming(&self, family: Family, latency: Duration) {
        self.f
            .network_programming
            .get_or_create(&FamilyLabels::from(family))
            .observe(latency.as_secs_f64());
    }

    /// Services with a Local traffic policy and no local endpoints (while other nodes have
    /// some): `internal` for internalTrafficPolicy, `external` for externalTrafficPolicy.
    pub fn no_local_endpoints(&self, family: Family, internal: u64, external: u64) {
        let ip_family = family_label(family);
        for (traffic_policy, n) in [("internal", internal), ("external", external)] {
            self.f
                .no_local_endpoints
                .get_or_create(&PolicyLabels {
                    ip_family,
                    traffic_policy,
                })
                .set(gauge_value(n));
        }
    }

    /// A `/healthz` answer with `code`.
    pub fn healthz_response(&self, code: u16) {
        self.f.healthz.get_or_create(&CodeLabels { code }).inc();
    }

    /// A `/livez` answer with `code`.
    pub fn livez_response(&self, code: u16) {
        self.f.livez.get_or_create(&CodeLabels { code }).inc();
    }

    /// A conntrack cleanup pass: its duration and the flows it deleted.
    pub fn conntrack_reconciled(&self, family: Family, duration: Duration, deleted: u64) {
        let l = FamilyLabels::from(family);
        self.f
            .conntrack_duration
            .get_or_create(&l)
            .observe(duration.as_secs_f64());
        self.f.conntrack_deleted.get_or_create(&l).inc_by(deleted);
    }

    /// Destinations at weight 0 waiting for their connections to end.
    pub fn destinations_draining(&self, n: u64) {
        self.f.draining.set(gauge_value(n));
    }

    /// Connections IPVS tracks to the agent's real servers (active and inactive), as the
    /// last full read of the kernel found them.
    pub fn ipvs_connections(&self, n: u64) {
        self.f
            .connections
            .get_or_create(&NoLabels {})
            .set(gauge_value(n));
    }

    /// The entries of every agent-owned ipset (sets not named are dropped from the output).
    pub fn ipset_entries(&self, sets: impl IntoIterator<Item = (String, u64)>) {
        let _whole = self.replacing();
        self.f.ipset_entries.clear();
        for (set, n) in sets {
            self.f
                .ipset_entries
                .get_or_create(&SetLabels { set })
                .set(gauge_value(n));
        }
    }

    /// The IPVS counters of the agent's virtual servers as the last full sync read them
    /// (their Services' series only; a virtual server gone is dropped). Ignored unless the
    /// recorder exports them ([`Metrics::new`]'s `service_traffic`).
    pub fn service_traffic(&self, servers: Vec<crate::sync::ServiceTraffic>) {
        if let Some(t) = &self.traffic {
            t.replace(servers);
        }
    }

    /// The exposition text (the Prometheus text format 0.0.4, [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let _whole = self.replacing();
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail, and every collector here only writes.
        if let Err(e) = prometheus_text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "could not encode the metrics");
        }
        out
    }
}

/// The `Content-Type` of `/metrics`: the Prometheus text format 0.0.4, which every
/// Prometheus scrapes and kube-proxy serves by default.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The effective configuration as kube-proxy's `/configz` serves it: one key per
/// configuration group, `kubeproxy.config.k8s.io`, holding the KubeProxyConfiguration.
pub fn configz(config: &crate::config_file::KubeProxyConfiguration) -> serde_json::Result<String> {
    let mut all = serde_json::Map::new();
    all.insert(
        "kubeproxy.config.k8s.io".to_string(),
        serde_json::to_value(config)?,
    );
    serde_json::to_string(&serde_json::Value::Object(all))
}

/// The metrics server's routes: `/metrics`, `/configz` (`configz`, the JSON of
/// [`configz`]), `/healthz` (`ok`), `/proxyMode` (`ipvs`).
pub fn handle(metrics: &Metrics, configz: &str, request: &Request) -> Response {
    match request.path.as_str() {
        "/metrics" => Response::new(200, CONTENT_TYPE, metrics.render()),
        "/configz" => Response::new(200, "application/json", configz),
        "/healthz" => Response::new(200, "text/plain; charset=utf-8", "ok"),
        "/proxyMode" => Response::new(200, "text/plain; charset=utf-8", "ipvs"),
        _ => Response::not_found(),
    }
}

/// Serves [`handle`] on `addr` (`metricsBindAddress`) until dropped. A bind failure is retried
/// every 5 s, or returned when `hard_fail` (`bindAddressHardFail`).
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    configz: Arc<str>,
    hard_fail: bool,
) -> std::io::Result<()> {
    let handler = move |r: &Request| handle(&metrics, &configz, r);
    web::run(addr, Arc::new(handler), hard_fail, "metrics").await
}

#[cfg(test)]
mod tests;
