//! Prometheus metrics with kube-proxy's names, types and labels (its IPVS-mode registration),
//! plus the agent's own, in the text exposition format, served on `metricsBindAddress`.
//!
//! [`Metrics`] is a recorder the sync loop ([`Metrics::record`]), the source and the health
//! servers call; [`Metrics::render`] writes the exposition text. [`serve`] answers
//! `/metrics`, `/healthz` (always `ok`, as the generic healthz kube-proxy mounts there) and
//! `/proxyMode` on the shared [`crate::web`] server.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::dataplane::Applied;
use crate::model::cluster::Family;
use crate::model::plan::{Op, Plan};
use crate::sync::Report;
use crate::web::{self, Request, Response};

mod process;

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

/// A cumulative histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram with these upper bounds (ascending).
    pub fn new(bounds: Vec<f64>) -> Self {
        Self {
            counts: vec![0; bounds.len()],
            bounds,
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one value.
    pub fn observe(&mut self, v: f64) {
        for (bound, count) in self.bounds.iter().zip(&mut self.counts) {
            if v <= *bound {
                *count += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }
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
    pub ops: BTreeMap<&'static str, u64>,
    /// Operations that failed, by kind.
    pub failed: BTreeMap<&'static str, u64>,
    /// Families whose `iptables-restore` failed.
    pub restore_failed: BTreeSet<Family>,
    /// Kernel objects that a full sync repaired after someone else changed them, by kind
    /// (one of [`crate::sync::DRIFT_KINDS`]; the sync loop knows which, empty if unknown).
    pub drift_repaired: BTreeMap<&'static str, u64>,
}

impl SyncObservation {
    /// Counts `plan` and `applied` (the outcome of `plan`) by operation kind.
    pub fn from_plan(plan: &Plan, applied: &Applied, duration: Duration, at: SystemTime) -> Self {
        Self::from_counts(
            &crate::model::op_kind::count(&plan.ops),
            applied.failures(plan).map(|(op, _)| op),
            duration,
            at,
        )
    }

    /// A plan's operations counted by kind (`counts`, [`crate::sync::Report::op_counts`])
    /// and those of them that `failed`.
    pub fn from_counts<'a>(
        counts: &BTreeMap<&'static str, u64>,
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
            let kind = op.kind().label();
            *obs.failed.entry(kind).or_default() += 1;
            if let Some(n) = obs.ops.get_mut(kind) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    obs.ops.remove(kind);
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

#[derive(Debug)]
struct State {
    families: Vec<Family>,
    sync_duration: BTreeMap<Family, Histogram>,
    network_programming: BTreeMap<Family, Histogram>,
    last_timestamp: BTreeMap<Family, f64>,
    last_queued_timestamp: BTreeMap<Family, f64>,
    endpoint_changes_pending: u64,
    endpoint_changes_total: u64,
    service_changes_pending: u64,
    service_changes_total: u64,
    no_local_endpoints: BTreeMap<(&'static str, Family), u64>,
    restore_failures: BTreeMap<Family, u64>,
    healthz: BTreeMap<u16, u64>,
    livez: BTreeMap<u16, u64>,
    conntrack_duration: BTreeMap<Family, Histogram>,
    conntrack_deleted: BTreeMap<Family, u64>,
    operations: BTreeMap<&'static str, u64>,
    operation_failures: BTreeMap<&'static str, u64>,
    syncs: BTreeMap<&'static str, u64>,
    drift_repaired: BTreeMap<&'static str, u64>,
    draining: u64,
    connections: Option<u64>,
    ipset_entries: BTreeMap<String, u64>,
    blocked: bool,
}

/// The recorder: cheap to share (`Arc<Metrics>`), every method takes `&self`.
#[derive(Debug)]
pub struct Metrics {
    state: Mutex<State>,
}

impl Metrics {
    /// A recorder for the agent's IP families; per-family series start at zero.
    pub fn new(families: &[Family]) -> Self {
        let per_family = |b: fn() -> Vec<f64>| {
            families
                .iter()
                .map(|f| (*f, Histogram::new(b())))
                .collect::<BTreeMap<_, _>>()
        };
        let zero = || families.iter().map(|f| (*f, 0)).collect::<BTreeMap<_, _>>();
        let mut no_local = BTreeMap::new();
        for f in families {
            no_local.insert(("internal", *f), 0);
            no_local.insert(("external", *f), 0);
        }
        Self {
            state: Mutex::new(State {
                families: families.to_vec(),
                sync_duration: per_family(sync_buckets),
                network_programming: per_family(network_programming_buckets),
                last_timestamp: families.iter().map(|f| (*f, 0.0)).collect(),
                last_queued_timestamp: families.iter().map(|f| (*f, 0.0)).collect(),
                endpoint_changes_pending: 0,
                endpoint_changes_total: 0,
                service_changes_pending: 0,
                service_changes_total: 0,
                no_local_endpoints: no_local,
                restore_failures: zero(),
                healthz: BTreeMap::new(),
                livez: BTreeMap::new(),
                conntrack_duration: per_family(sync_buckets),
                conntrack_deleted: zero(),
                operations: BTreeMap::new(),
                operation_failures: BTreeMap::new(),
                syncs: BTreeMap::new(),
                // Every kind from the start, so that a rate over any of them is defined.
                drift_repaired: crate::sync::DRIFT_KINDS.iter().map(|k| (*k, 0)).collect(),
                draining: 0,
                connections: None,
                ipset_entries: BTreeMap::new(),
                blocked: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain counters behind: still good to read.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a sync: its duration (every family: one sync programs them all), the
    /// operations by kind, failures, drift repaired; on success the last-sync timestamp
    /// (kube-proxy sets it only when the sync got through, so a stuck proxy shows).
    pub fn observe_sync(&self, obs: &SyncObservation, full: bool) {
        let mut s = self.lock();
        let secs = obs.duration.as_secs_f64();
        for h in s.sync_duration.values_mut() {
            h.observe(secs);
        }
        // Failure counters start at 0 for what was tried, as kube-proxy's do, so a dashboard's
        // rate() has a series before the first failure.
        for (kind, n) in &obs.ops {
            *s.operations.entry(kind).or_default() += n;
            s.operation_failures.entry(kind).or_default();
        }
        let families = s.families.clone();
        for f in families {
            s.restore_failures.entry(f).or_default();
        }
        if full {
            for kind in crate::sync::DRIFT_KINDS {
                s.drift_repaired.entry(kind).or_default();
            }
        }
        for (kind, n) in &obs.failed {
            *s.operation_failures.entry(kind).or_default() += n;
        }
        for f in &obs.restore_failed {
            *s.restore_failures.entry(*f).or_default() += 1;
        }
        for (kind, n) in &obs.drift_repaired {
            *s.drift_repaired.entry(kind).or_default() += n;
        }
        *s.syncs
            .entry(if full { "full" } else { "partial" })
            .or_default() += 1;
        if obs.succeeded()
            && let Some(at) = obs.at
        {
            let t = unix_seconds(at);
            let families = s.families.clone();
            for f in families {
                s.last_timestamp.insert(f, t);
            }
        }
    }

    /// Records everything one sync reports, at the time it ended (`now`): its observation
    /// ([`Metrics::observe_sync`]), the Local Services without local endpoints, the sets'
    /// sizes, draining real servers, IPVS connections, the network-programming latency of
    /// each EndpointSlice change it programmed and its conntrack passes. The changes pending
    /// since the previous sync are done.
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
        for c in &report.conntrack {
            self.conntrack_reconciled(c.family, c.duration, c.deleted as u64);
        }
        self.service_changes(0, 0);
        self.endpoint_changes(0, 0);
    }

    /// The source gave a snapshot with `services` Services and `slices` EndpointSlices
    /// changed: counted in the `_total`s, and pending until the next [`Metrics::record`].
    pub fn changes_seen(&self, services: u64, slices: u64) {
        let mut s = self.lock();
        s.service_changes_total += services;
        s.service_changes_pending += services;
        s.endpoint_changes_total += slices;
        s.endpoint_changes_pending += slices;
    }

    /// Whether the agent cannot program the kernel at all (`kube_proxy_ipvs_blocked`): the
    /// public `/healthz` says only 503, the log says why, and this gauge says it is that.
    pub fn set_blocked(&self, blocked: bool) {
        self.lock().blocked = blocked;
    }

    /// A sync was asked for at `at` (`sync_proxy_rules_last_queued_timestamp_seconds`).
    pub fn queued(&self, at: SystemTime) {
        let mut s = self.lock();
        let t = unix_seconds(at);
        let families = s.families.clone();
        for f in families {
            s.last_queued_timestamp.insert(f, t);
        }
    }

    /// Endpoint changes seen by the source (`_total`) and not yet synced (`_pending`).
    pub fn endpoint_changes(&self, new: u64, pending: u64) {
        let mut s = self.lock();
        s.endpoint_changes_total += new;
        s.endpoint_changes_pending = pending;
    }

    /// Service changes seen by the source (`_total`) and not yet synced (`_pending`).
    pub fn service_changes(&self, new: u64, pending: u64) {
        let mut s = self.lock();
        s.service_changes_total += new;
        s.service_changes_pending = pending;
    }

    /// The time from an EndpointSlice's `endpoints.kubernetes.io/last-change-trigger-time`
    /// to the end of the sync that programmed it.
    pub fn network_programming(&self, family: Family, latency: Duration) {
        let mut s = self.lock();
        s.network_programming
            .entry(family)
            .or_insert_with(|| Histogram::new(network_programming_buckets()))
            .observe(latency.as_secs_f64());
    }

    /// Services with a Local traffic policy and no local endpoints (while other nodes have
    /// some): `internal` for internalTrafficPolicy, `external` for externalTrafficPolicy.
    pub fn no_local_endpoints(&self, family: Family, internal: u64, external: u64) {
        let mut s = self.lock();
        s.no_local_endpoints.insert(("internal", family), internal);
        s.no_local_endpoints.insert(("external", family), external);
    }

    /// A `/healthz` answer with `code`.
    pub fn healthz_response(&self, code: u16) {
        *self.lock().healthz.entry(code).or_default() += 1;
    }

    /// A `/livez` answer with `code`.
    pub fn livez_response(&self, code: u16) {
        *self.lock().livez.entry(code).or_default() += 1;
    }

    /// A conntrack cleanup pass: its duration and the flows it deleted.
    pub fn conntrack_reconciled(&self, family: Family, duration: Duration, deleted: u64) {
        let mut s = self.lock();
        s.conntrack_duration
            .entry(family)
            .or_insert_with(|| Histogram::new(sync_buckets()))
            .observe(duration.as_secs_f64());
        *s.conntrack_deleted.entry(family).or_default() += deleted;
    }

    /// Destinations at weight 0 waiting for their connections to end.
    pub fn destinations_draining(&self, n: u64) {
        self.lock().draining = n;
    }

    /// Connections IPVS tracks to the agent's real servers (active and inactive), as the
    /// last full read of the kernel found them.
    pub fn ipvs_connections(&self, n: u64) {
        self.lock().connections = Some(n);
    }

    /// The entries of every agent-owned ipset (sets not named are dropped from the output).
    pub fn ipset_entries(&self, sets: impl IntoIterator<Item = (String, u64)>) {
        self.lock().ipset_entries = sets.into_iter().collect();
    }

    /// The exposition text (`text/plain; version=0.0.4`).
    pub fn render(&self) -> String {
        let s = self.lock();
        let mut out = String::with_capacity(16 * 1024);
        let fam = |f: &Family| vec![("ip_family", family_label(*f).to_string())];

        let h = "kubeproxy_sync_proxy_rules_duration_seconds";
        header(
            &mut out,
            h,
            "histogram",
            "[ALPHA] SyncProxyRules latency in seconds",
        );
        for (f, hist) in &s.sync_duration {
            histogram(&mut out, h, &fam(f), hist);
        }
        let h = "kubeproxy_network_programming_duration_seconds";
        header(
            &mut out,
            h,
            "histogram",
            "[ALPHA] In Cluster Network Programming Latency in seconds",
        );
        for (f, hist) in &s.network_programming {
            histogram(&mut out, h, &fam(f), hist);
        }
        let h = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
        header(
            &mut out,
            h,
            "gauge",
            "[ALPHA] The last time proxy rules were successfully synced",
        );
        for (f, v) in &s.last_timestamp {
            sample(&mut out, h, &fam(f), *v);
        }
        let h = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds";
        header(
            &mut out,
            h,
            "gauge",
            "[ALPHA] The last time a sync of proxy rules was queued",
        );
        for (f, v) in &s.last_queued_timestamp {
            sample(&mut out, h, &fam(f), *v);
        }
        for (name, kind, help, v) in [
            (
                "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
                "gauge",
                "[ALPHA] Pending proxy rules Endpoint changes",
                s.endpoint_changes_pending,
            ),
            (
                "kubeproxy_sync_proxy_rules_endpoint_changes_total",
                "counter",
                "[ALPHA] Cumulative proxy rules Endpoint changes",
                s.endpoint_changes_total,
            ),
            (
                "kubeproxy_sync_proxy_rules_service_changes_pending",
                "gauge",
                "[ALPHA] Pending proxy rules Service changes",
                s.service_changes_pending,
            ),
            (
                "kubeproxy_sync_proxy_rules_service_changes_total",
                "counter",
                "[ALPHA] Cumulative proxy rules Service changes",
                s.service_changes_total,
            ),
        ] {
            header(&mut out, name, kind, help);
            sample(&mut out, name, &[], v as f64);
        }
        let h = "kubeproxy_sync_proxy_rules_no_local_endpoints_total";
        header(
            &mut out,
            h,
            "gauge",
            "[ALPHA] Number of services with a Local traffic policy and no endpoints",
        );
        for ((policy, f), v) in &s.no_local_endpoints {
            let labels = vec![
                ("ip_family", family_label(*f).to_string()),
                ("traffic_policy", policy.to_string()),
            ];
            sample(&mut out, h, &labels, *v as f64);
        }
        let h = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total";
        header(
            &mut out,
            h,
            "counter",
            "[ALPHA] Cumulative proxy iptables restore failures",
        );
        for (f, v) in &s.restore_failures {
            sample(&mut out, h, &fam(f), *v as f64);
        }
        for (name, help, counts) in [
            (
                "kubeproxy_proxy_healthz_total",
                "[ALPHA] Cumulative proxy healthz HTTP status",
                &s.healthz,
            ),
            (
                "kubeproxy_proxy_livez_total",
                "[ALPHA] Cumulative proxy livez HTTP status",
                &s.livez,
            ),
        ] {
            header(&mut out, name, "counter", help);
            for (code, v) in counts {
                sample(&mut out, name, &[("code", code.to_string())], *v as f64);
            }
        }
        let h = "kubeproxy_conntrack_reconciler_sync_duration_seconds";
        header(
            &mut out,
            h,
            "histogram",
            "[ALPHA] ReconcileConntrackFlowsLatency latency in seconds",
        );
        for (f, hist) in &s.conntrack_duration {
            histogram(&mut out, h, &fam(f), hist);
        }
        let h = "kubeproxy_conntrack_reconciler_deleted_entries_total";
        header(
            &mut out,
            h,
            "counter",
            "[ALPHA] Cumulative conntrack flows deleted by conntrack reconciler",
        );
        for (f, v) in &s.conntrack_deleted {
            sample(&mut out, h, &fam(f), *v as f64);
        }

        let h = "kube_proxy_ipvs_operations_total";
        header(
            &mut out,
            h,
            "counter",
            "Kernel operations applied by the sync loop, by kind",
        );
        for (kind, v) in &s.operations {
            sample(&mut out, h, &[("kind", kind.to_string())], *v as f64);
        }
        let h = "kube_proxy_ipvs_operation_failures_total";
        header(
            &mut out,
            h,
            "counter",
            "Kernel operations that failed (retried at the next sync), by kind",
        );
        for (kind, v) in &s.operation_failures {
            sample(&mut out, h, &[("kind", kind.to_string())], *v as f64);
        }
        let h = "kube_proxy_ipvs_syncs_total";
        header(
            &mut out,
            h,
            "counter",
            "Syncs, by type: full (kernel read back) or partial",
        );
        for (kind, v) in &s.syncs {
            sample(&mut out, h, &[("type", kind.to_string())], *v as f64);
        }
        let h = "kube_proxy_ipvs_drift_repaired_total";
        header(
            &mut out,
            h,
            "counter",
            "Kernel objects changed outside the agent and repaired by a full sync, by kind \
             (virtual_server, real_server, set, set_entry, chain, jump, address, link, sysctl); \
             sum over kind for the total",
        );
        for (kind, v) in &s.drift_repaired {
            sample(&mut out, h, &[("kind", kind.to_string())], *v as f64);
        }
        let h = "kube_proxy_ipvs_blocked";
        header(
            &mut out,
            h,
            "gauge",
            "1 while the agent cannot program the kernel at all (no rules written, or no virtual server made); the log says why",
        );
        sample(&mut out, h, &[], if s.blocked { 1.0 } else { 0.0 });
        let h = "kube_proxy_ipvs_destinations_draining";
        header(
            &mut out,
            h,
            "gauge",
            "IPVS destinations at weight 0 waiting for their connections to end",
        );
        sample(&mut out, h, &[], s.draining as f64);
        if let Some(n) = s.connections {
            let h = "kube_proxy_ipvs_connections";
            header(
                &mut out,
                h,
                "gauge",
                "Connections IPVS tracks to the agent's real servers (active and inactive) at the last full read of the kernel",
            );
            sample(&mut out, h, &[], n as f64);
        }
        let h = "kube_proxy_ipvs_ipset_entries";
        header(&mut out, h, "gauge", "Entries in each ipset the agent owns");
        for (set, v) in &s.ipset_entries {
            sample(&mut out, h, &[("set", set.clone())], *v as f64);
        }
        drop(s);
        render_process(&mut out);
        out
    }
}

/// The process metrics and the build information.
fn render_process(out: &mut String) {
    let p = process::Process::read();
    let h = "process_cpu_seconds_total";
    header(
        out,
        h,
        "counter",
        "Total user and system CPU time spent in seconds.",
    );
    sample(out, h, &[], p.cpu_seconds);
    let h = "process_resident_memory_bytes";
    header(out, h, "gauge", "Resident memory size in bytes.");
    sample(out, h, &[], p.resident_bytes as f64);
    let h = "process_virtual_memory_bytes";
    header(out, h, "gauge", "Virtual memory size in bytes.");
    sample(out, h, &[], p.virtual_bytes as f64);
    let h = "process_open_fds";
    header(out, h, "gauge", "Number of open file descriptors.");
    sample(out, h, &[], p.open_fds as f64);
    if let Some(max) = p.max_fds {
        let h = "process_max_fds";
        header(out, h, "gauge", "Maximum number of open file descriptors.");
        sample(out, h, &[], max as f64);
    }
    if let Some(start) = p.start_time_seconds {
        let h = "process_start_time_seconds";
        header(
            out,
            h,
            "gauge",
            "Start time of the process since unix epoch in seconds.",
        );
        sample(out, h, &[], start);
    }
    let h = "kubernetes_build_info";
    header(
        out,
        h,
        "gauge",
        "[ALPHA] A metric with a constant '1' value labeled by major, minor, git version, compiler and platform from which the agent was built.",
    );
    sample(out, h, &process::build_labels(), 1.0);
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn labels_text(labels: &[(&str, String)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        // Rust prints integral floats without a fraction and others in shortest form,
        // both of which Prometheus parses.
        format!("{v}")
    }
}

fn sample(out: &mut String, name: &str, labels: &[(&str, String)], v: f64) {
    let _ = writeln!(out, "{name}{} {}", labels_text(labels), number(v));
}

fn histogram(out: &mut String, name: &str, labels: &[(&str, String)], h: &Histogram) {
    let bucket = format!("{name}_bucket");
    for (bound, count) in h.bounds.iter().zip(&h.counts) {
        let mut l = labels.to_vec();
        l.push(("le", number(*bound)));
        sample(out, &bucket, &l, *count as f64);
    }
    let mut l = labels.to_vec();
    l.push(("le", "+Inf".into()));
    sample(out, &bucket, &l, h.count as f64);
    sample(out, &format!("{name}_sum"), labels, h.sum);
    sample(out, &format!("{name}_count"), labels, h.count as f64);
}

/// The metrics server's routes: `/metrics`, `/healthz` (`ok`), `/proxyMode` (`ipvs`).
pub fn handle(metrics: &Metrics, request: &Request) -> Response {
    match request.path.as_str() {
        "/metrics" => Response::new(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
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
    hard_fail: bool,
) -> std::io::Result<()> {
    let handler = move |r: &Request| handle(&metrics, r);
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
        let m = Metrics::new(&[Family::V4, Family::V6]);
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
        let m = Metrics::new(&[Family::V4]);
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
        assert_eq!(obs.ops.get("add_address"), Some(&2));
        assert_eq!(obs.failed.get("del_address"), Some(&1));
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
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 0",
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"} 1700000000",
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
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1700000000\n"
        ));
    }

    #[test]
    fn restore_failures_count_per_family() {
        let m = Metrics::new(&[Family::V4, Family::V6]);
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
        let m = Metrics::new(&[Family::V4]);
        let text = m.render();
        for kind in crate::sync::DRIFT_KINDS {
            let line = format!("kube_proxy_ipvs_drift_repaired_total{{kind=\"{kind}\"}} 0");
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        let sync = |drift: &[(&'static str, u64)]| SyncObservation {
            drift_repaired: drift.iter().copied().collect(),
            ..SyncObservation::default()
        };
        m.observe_sync(&sync(&[("virtual_server", 1), ("real_server", 2)]), true);
        m.observe_sync(&sync(&[("real_server", 1), ("jump", 1)]), true);
        m.observe_sync(&sync(&[]), true);
        let text = m.render();
        assert_well_formed(&text);
        let series = lines_of(&text, "kube_proxy_ipvs_drift_repaired_total");
        assert_eq!(series.len(), crate::sync::DRIFT_KINDS.len(), "{series:?}");
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
        assert_eq!(
            labels_text(&[("set", "a\"b\\c\nd".into())]),
            "{set=\"a\\\"b\\\\c\\nd\"}"
        );
    }

    #[test]
    fn a_report_is_recorded_whole_and_ends_the_pending_changes() {
        let m = Metrics::new(&[Family::V4]);
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
        report.drift.counts.insert("virtual_server", 1);
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
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1700000100",
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

    #[test]
    fn routes() {
        let m = Metrics::new(&[Family::V4]);
        let get = |path: &str| {
            handle(
                &m,
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
        assert_eq!(get("/proxyMode").body, "ipvs");
        assert_eq!(get("/healthz").body, "ok");
        assert_eq!(get("/debug/pprof/").status, 404);
    }
}
