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
//! names it); `metrics::baseline` checks the exposition against the one the hand-written
//! renderer gave.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::dataplane::Applied;
use crate::model::kernel::drift::DriftKind;
use crate::model::plan::op_kind::OpKind;
use crate::model::plan::{Op, Plan};
use crate::model::snapshot::cluster::Family;
use crate::sync::Report;
use crate::web::{self, Request, Response};

#[cfg(test)]
mod baseline;
mod families;
mod process;
mod traffic;

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
        self.ipset_entries(report.set_sizes.iter().cloned());
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
mod tests {
    use super::*;
    use crate::model::plan::Plan;

    fn lines_of<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .collect()
    }

    /// Every sample line is `name{labels} value` with a declared name and a number.
    fn assert_well_formed(text: &str) {
        let mut declared = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(
                    declared
                        .insert(name.to_string(), kind.to_string())
                        .is_none(),
                    "{name} twice"
                );
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert!(value == "+Inf" || value.parse::<f64>().is_ok(), "{line}");
            let name = series.split('{').next().unwrap();
            assert!(
                name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                "{line}"
            );
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|b| declared.get(*b).is_some_and(|k| k == "histogram"))
                })
                .unwrap_or(name);
            assert!(declared.contains_key(base), "{name} has no TYPE");
            if let Some(labels) = series.strip_prefix(name)
                && !labels.is_empty()
            {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
            }
        }
    }

    #[test]
    fn kube_proxy_names_and_types() {
        let m = Metrics::new(&[Family::V4, Family::V6], false);
        // A family without a series is left out, as client_golang leaves out an empty
        // vector: no answer yet, no `kubeproxy_proxy_healthz_total`.
        assert!(!m.render().contains("kubeproxy_proxy_healthz_total"));
        m.healthz_response(200);
        m.livez_response(200);
        let obs = SyncObservation {
            ops: [(OpKind::AddService, 1)].into(),
            ..SyncObservation::default()
        };
        m.observe_sync(&obs, true);
        m.ipset_entries([("KUBE-CLUSTER-IP".to_string(), 0)]);
        let text = m.render();
        assert_well_formed(&text);
        for (name, kind) in [
            ("kubeproxy_sync_proxy_rules_duration_seconds", "histogram"),
            (
                "kubeproxy_network_programming_duration_seconds",
                "histogram",
            ),
            ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge"),
            (
                "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
                "gauge",
            ),
            (
                "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
                "gauge",
            ),
            (
                "kubeproxy_sync_proxy_rules_endpoint_changes_total",
                "counter",
            ),
            (
                "kubeproxy_sync_proxy_rules_service_changes_pending",
                "gauge",
            ),
            (
                "kubeproxy_sync_proxy_rules_service_changes_total",
                "counter",
            ),
            (
                "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
                "gauge",
            ),
            (
                "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
                "counter",
            ),
            ("kubeproxy_proxy_healthz_total", "counter"),
            ("kubeproxy_proxy_livez_total", "counter"),
            (
                "kubeproxy_conntrack_reconciler_sync_duration_seconds",
                "histogram",
            ),
            (
                "kubeproxy_conntrack_reconciler_deleted_entries_total",
                "counter",
            ),
            ("kube_proxy_ipvs_operations_total", "counter"),
            ("kube_proxy_ipvs_drift_repaired_total", "counter"),
            ("kube_proxy_ipvs_destinations_draining", "gauge"),
            ("kube_proxy_ipvs_ipset_entries", "gauge"),
            ("kube_proxy_ipvs_blocked", "gauge"),
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n")),
                "{name} {kind}"
            );
        }
        // Per-family series exist from the start, at zero.
        assert!(text.contains(
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv6\"} 0\n"
        ));
        assert!(text.contains(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"external\"} 0\n"
        ));
        assert_eq!(
            lines_of(&text, "kubeproxy_sync_proxy_rules_duration_seconds_bucket").len(),
            2 * 16
        );
        assert_eq!(
            lines_of(
                &text,
                "kubeproxy_network_programming_duration_seconds_bucket"
            )
            .len(),
            2 * (network_programming_buckets().len() + 1)
        );
    }

    #[test]
    fn buckets_are_kube_proxys() {
        let b = sync_buckets();
        assert_eq!((b.len(), b[0], b[14]), (15, 0.001, 16.384));
        let b = network_programming_buckets();
        assert_eq!(b.len(), 2 + 59 + 12 + 7);
        assert_eq!(
            (b[0], b[1], b[2], b[60], b[61], b[72], b[73], b[79]),
            (0.25, 0.5, 1.0, 59.0, 60.0, 115.0, 120.0, 300.0)
        );
        assert!(b.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_sync_is_recorded() {
        let m = Metrics::new(&[Family::V4], false);
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let plan = Plan {
            ops: vec![
                Op::CreateLink,
                Op::AddAddress("10.96.0.1".parse().unwrap()),
                Op::AddAddress("10.96.0.2".parse().unwrap()),
                Op::DelAddress("10.96.0.3".parse().unwrap()),
            ],
            warnings: Vec::new(),
        };
        let applied = Applied {
            done: 3,
            failed: vec![(3, ipvs_netlink::Error::from_errno(16).into())],
            messages: 4,
        };
        let obs = SyncObservation::from_plan(&plan, &applied, Duration::from_millis(3), at);
        assert_eq!(obs.ops.get(&OpKind::AddAddress), Some(&2));
        assert_eq!(obs.failed.get(&OpKind::DelAddress), Some(&1));
        m.observe_sync(&obs, true);
        m.queued(at);
        m.healthz_response(200);
        m.healthz_response(503);
        m.healthz_response(200);
        m.ipset_entries([("KUBE-CLUSTER-IP".to_string(), 7)]);
        let text = m.render();
        assert_well_formed(&text);
        for line in [
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.002\"} 0",
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.004\"} 1",
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"+Inf\"} 1",
            "kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family=\"IPv4\"} 0.003",
            "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 1",
            // A failed sync leaves the last-success timestamp alone.
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 0.0",
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"} 1700000000.0",
            "kube_proxy_ipvs_operations_total{kind=\"add_address\"} 2",
            "kube_proxy_ipvs_operations_total{kind=\"create_link\"} 1",
            "kube_proxy_ipvs_operation_failures_total{kind=\"del_address\"} 1",
            "kube_proxy_ipvs_syncs_total{type=\"full\"} 1",
            "kubeproxy_proxy_healthz_total{code=\"200\"} 2",
            "kubeproxy_proxy_healthz_total{code=\"503\"} 1",
            "kube_proxy_ipvs_ipset_entries{set=\"KUBE-CLUSTER-IP\"} 7",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        let ok =
            SyncObservation::from_plan(&Plan::default(), &Applied::default(), Duration::ZERO, at);
        m.observe_sync(&ok, false);
        assert!(m.render().contains(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1700000000.0\n"
        ));
    }

    #[test]
    fn restore_failures_count_per_family() {
        let m = Metrics::new(&[Family::V4, Family::V6], false);
        let write = Op::WriteRules {
            family: Family::V6,
            rules: Default::default(),
            missing_jumps: Vec::new(),
        };
        let plan = Plan {
            ops: vec![write.clone()],
            warnings: Vec::new(),
        };
        let applied = Applied {
            done: 0,
            failed: vec![(
                0,
                crate::dataplane::Error::Tool {
                    program: "ip6tables-restore".into(),
                    message: "exit 1".into(),
                },
            )],
            messages: 0,
        };
        m.observe_sync(
            &SyncObservation::from_plan(&plan, &applied, Duration::ZERO, UNIX_EPOCH),
            true,
        );
        let text = m.render();
        assert!(text.contains(
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv6\"} 1\n"
        ));
        assert!(text.contains(
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv4\"} 0\n"
        ));
    }

    #[test]
    fn drift_is_counted_by_kind() {
        let m = Metrics::new(&[Family::V4], false);
        let text = m.render();
        for kind in DriftKind::ALL {
            let line = format!("kube_proxy_ipvs_drift_repaired_total{{kind=\"{kind}\"}} 0");
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        let sync = |drift: &[(DriftKind, u64)]| SyncObservation {
            drift_repaired: drift.iter().copied().collect(),
            ..SyncObservation::default()
        };
        m.observe_sync(
            &sync(&[(DriftKind::VirtualServer, 1), (DriftKind::RealServer, 2)]),
            true,
        );
        m.observe_sync(
            &sync(&[(DriftKind::RealServer, 1), (DriftKind::Jump, 1)]),
            true,
        );
        m.observe_sync(&sync(&[]), true);
        let text = m.render();
        assert_well_formed(&text);
        let series = lines_of(&text, "kube_proxy_ipvs_drift_repaired_total");
        assert_eq!(series.len(), DriftKind::ALL.len(), "{series:?}");
        for line in [
            "kube_proxy_ipvs_drift_repaired_total{kind=\"virtual_server\"} 1",
            "kube_proxy_ipvs_drift_repaired_total{kind=\"real_server\"} 3",
            "kube_proxy_ipvs_drift_repaired_total{kind=\"jump\"} 1",
            "kube_proxy_ipvs_drift_repaired_total{kind=\"set_entry\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::new(&[Family::V4], false);
        m.ipset_entries([("a\"b\\c\nd".to_string(), 1)]);
        let text = m.render();
        assert!(
            text.lines()
                .any(|l| l == "kube_proxy_ipvs_ipset_entries{set=\"a\\\"b\\\\c\\nd\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn a_report_is_recorded_whole_and_ends_the_pending_changes() {
        let m = Metrics::new(&[Family::V4], false);
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_100);
        m.changes_seen(2, 3);
        m.changes_seen(0, 1);
        let text = m.render();
        for line in [
            "kubeproxy_sync_proxy_rules_service_changes_pending 2",
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending 4",
            "kubeproxy_sync_proxy_rules_endpoint_changes_total 4",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        let mut report = Report {
            full: true,
            duration: Duration::from_millis(3),
            draining: 2,
            ipvs_connections: Some(5),
            set_sizes: vec![("KUBE-CLUSTER-IP".into(), 9)],
            programmed: vec![(Family::V4, now - Duration::from_secs(1))],
            ..Report::default()
        };
        report.no_local_endpoints.insert(Family::V4, (1, 2));
        report.drift.counts.insert(DriftKind::VirtualServer, 1);
        report.conntrack.push(crate::dataplane::conntrack::Cleaned {
            family: Family::V4,
            scanned: 10,
            undecoded: 0,
            deleted: 4,
            vanished: 0,
            duration: Duration::from_millis(1),
        });
        m.record(&report, now);
        m.set_blocked(true);
        let text = m.render();
        assert_well_formed(&text);
        for line in [
            "kubeproxy_sync_proxy_rules_service_changes_pending 0",
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending 0",
            "kubeproxy_sync_proxy_rules_endpoint_changes_total 4",
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1700000100.0",
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"external\"} 2",
            "kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv4\"} 1",
            "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"} 4",
            "kube_proxy_ipvs_syncs_total{type=\"full\"} 1",
            "kube_proxy_ipvs_drift_repaired_total{kind=\"virtual_server\"} 1",
            "kube_proxy_ipvs_destinations_draining 2",
            "kube_proxy_ipvs_connections 5",
            "kube_proxy_ipvs_ipset_entries{set=\"KUBE-CLUSTER-IP\"} 9",
            "kube_proxy_ipvs_blocked 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        m.set_blocked(false);
        assert!(m.render().lines().any(|l| l == "kube_proxy_ipvs_blocked 0"));
    }

    fn served(name: &str, key: &str, n: u64) -> crate::sync::ServiceTraffic {
        let (address, port) = key.rsplit_once(':').unwrap();
        crate::sync::ServiceTraffic {
            service: crate::model::snapshot::cluster::ServiceRef::new("shop", name),
            port_name: "http".into(),
            key: crate::model::kernel::VsKey {
                address: address.trim_matches(['[', ']']).parse().unwrap(),
                protocol: crate::model::snapshot::cluster::Protocol::Tcp,
                port: port.parse().unwrap(),
            },
            traffic: crate::dataplane::Traffic {
                connections: n,
                in_packets: 10 * n,
                out_packets: 20 * n,
                in_bytes: 1000 * n,
                out_bytes: 2000 * n,
            },
        }
    }

    #[test]
    fn per_virtual_server_counters_are_exported_only_when_asked() {
        let off = Metrics::new(&[Family::V4], false);
        off.service_traffic(vec![served("web", "10.96.0.10:80", 1)]);
        assert!(!off.render().contains("kube_proxy_ipvs_service_"));

        let m = Metrics::new(&[Family::V4], true);
        m.service_traffic(vec![
            served("web", "10.96.0.10:80", 3),
            served("web", "[fd00::10]:80", 1),
        ]);
        let text = m.render();
        assert_well_formed(&text);
        for line in [
            "# TYPE kube_proxy_ipvs_service_connections_total counter",
            "kube_proxy_ipvs_service_connections_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"10.96.0.10:80\"} 3",
            "kube_proxy_ipvs_service_in_packets_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"10.96.0.10:80\"} 30",
            "kube_proxy_ipvs_service_out_packets_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"10.96.0.10:80\"} 60",
            "kube_proxy_ipvs_service_in_bytes_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"10.96.0.10:80\"} 3000",
            "kube_proxy_ipvs_service_out_bytes_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"[fd00::10]:80\"} 2000",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        // The next full sync's snapshot replaces the last: a virtual server gone is gone.
        m.service_traffic(vec![served("web", "10.96.0.10:80", 4)]);
        let text = m.render();
        assert!(!text.contains("fd00::10"), "{text}");
        assert_eq!(
            lines_of(&text, "kube_proxy_ipvs_service_connections_total"),
            [
                "kube_proxy_ipvs_service_connections_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"10.96.0.10:80\"} 4"
            ]
        );
    }

    #[test]
    fn the_build_is_named_by_version_and_commit() {
        let text = Metrics::new(&[Family::V4], false).render();
        let line = lines_of(&text, "kubernetes_build_info");
        assert_eq!(line.len(), 1, "{text}");
        let commit = env!("KUBE_PROXY_IPVS_GIT_COMMIT");
        // A 40-digit commit in a git checkout, "unknown" outside one.
        assert!(
            commit == "unknown"
                || (commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
            "{commit}"
        );
        for label in [
            format!("git_commit=\"{commit}\""),
            format!("git_version=\"v{}\"", env!("CARGO_PKG_VERSION")),
            "compiler=\"rustc\"".to_string(),
            "build_date=\"".to_string(),
        ] {
            assert!(line[0].contains(&label), "{label} in {}", line[0]);
        }
        assert!(line[0].ends_with("} 1"), "{}", line[0]);
    }

    #[test]
    fn configz_is_kube_proxys_one_group_with_the_effective_configuration() {
        let flags = crate::config_file::FlagOverrides::new()
            .with("ipvs-scheduler", "wrr")
            .with("ipvs-service-metrics", "true");
        let loaded =
            crate::config_file::load(None, &flags, crate::config_file::Decoding::Lenient).unwrap();
        let text = configz(&loaded.config).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let groups = v.as_object().unwrap();
        assert_eq!(groups.len(), 1, "{text}");
        let c = &groups["kubeproxy.config.k8s.io"];
        assert_eq!(c["kind"], "KubeProxyConfiguration", "{text}");
        assert_eq!(c["ipvs"]["scheduler"], "wrr", "{text}");
        assert_eq!(c["ipvs"]["serviceMetrics"], true, "{text}");
        assert_eq!(c["metricsBindAddress"], "127.0.0.1:10249", "{text}");
        assert_eq!(c["ipvs"]["syncPeriod"], "30s", "{text}");
    }

    #[test]
    fn routes() {
        let m = Metrics::new(&[Family::V4], false);
        let get = |path: &str| {
            handle(
                &m,
                "{\"kubeproxy.config.k8s.io\":{}}",
                &Request {
                    method: "GET".into(),
                    path: path.into(),
                },
            )
        };
        let r = get("/metrics");
        assert_eq!(r.status, 200);
        assert!(
            r.body
                .contains("# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram")
        );
        assert_eq!(
            r.headers,
            [(
                "Content-Type",
                "text/plain; version=0.0.4; charset=utf-8".to_string()
            )]
        );
        let c = get("/configz");
        assert_eq!(
            (c.status, c.body.as_str()),
            (200, "{\"kubeproxy.config.k8s.io\":{}}")
        );
        assert_eq!(c.headers[0].1, "application/json");
        assert_eq!(get("/proxyMode").body, "ipvs");
        assert_eq!(get("/healthz").body, "ok");
        assert_eq!(get("/debug/pprof/").status, 404);
    }
}
