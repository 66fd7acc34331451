//! The families the agent exports, each declared once: its type and labels here, its exposed
//! name and kube-proxy's help text in [`Families::register`].

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family as Series;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{family_label, network_programming_buckets, process, sync_buckets};
use crate::model::snapshot::cluster::Family;

/// `{ip_family}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct FamilyLabels {
    pub(super) ip_family: &'static str,
}

impl From<Family> for FamilyLabels {
    fn from(f: Family) -> Self {
        Self {
            ip_family: family_label(f),
        }
    }
}

/// `{ip_family, traffic_policy}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct PolicyLabels {
    pub(super) ip_family: &'static str,
    pub(super) traffic_policy: &'static str,
}

/// `{code}`: an HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct CodeLabels {
    pub(super) code: u16,
}

/// `{kind}`: an operation or drift kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct KindLabels {
    pub(super) kind: &'static str,
}

/// `{type}`: full or partial.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct TypeLabels {
    pub(super) r#type: &'static str,
}

/// No labels: a family of at most one series, for a gauge with no value until known.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct NoLabels {}

/// `{set}`: an ipset's name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct SetLabels {
    pub(super) set: String,
}

/// kube-proxy's `kubernetes_build_info` labels, with the agent's version and commit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct BuildLabels {
    pub(super) build_date: &'static str,
    pub(super) compiler: &'static str,
    pub(super) git_commit: &'static str,
    pub(super) git_version: String,
    pub(super) major: &'static str,
    pub(super) minor: &'static str,
    pub(super) platform: String,
}

/// A histogram family whose series all have the same buckets.
pub(super) type Histograms = Series<FamilyLabels, Histogram, fn() -> Histogram>;

/// A gauge holding a time or another fraction.
pub(super) type FloatGauge = Gauge<f64, AtomicU64>;

/// The typed families, each registered once.
#[derive(Debug)]
pub(super) struct Families {
    pub(super) sync_duration: Histograms,
    pub(super) network_programming: Histograms,
    pub(super) last_timestamp: Series<FamilyLabels, FloatGauge>,
    pub(super) last_queued_timestamp: Series<FamilyLabels, FloatGauge>,
    pub(super) endpoint_changes_pending: Gauge,
    pub(super) endpoint_changes: Counter,
    pub(super) service_changes_pending: Gauge,
    pub(super) service_changes: Counter,
    pub(super) no_local_endpoints: Series<PolicyLabels, Gauge>,
    pub(super) restore_failures: Series<FamilyLabels, Counter>,
    pub(super) healthz: Series<CodeLabels, Counter>,
    pub(super) livez: Series<CodeLabels, Counter>,
    pub(super) conntrack_duration: Histograms,
    pub(super) conntrack_deleted: Series<FamilyLabels, Counter>,
    pub(super) operations: Series<KindLabels, Counter>,
    pub(super) operation_failures: Series<KindLabels, Counter>,
    pub(super) syncs: Series<TypeLabels, Counter>,
    pub(super) drift_repaired: Series<KindLabels, Counter>,
    pub(super) blocked: Gauge,
    pub(super) draining: Gauge,
    /// No series until a full sync has read the kernel: an unknown count is not 0.
    pub(super) connections: Series<NoLabels, Gauge>,
    pub(super) ipset_entries: Series<SetLabels, Gauge>,
}

fn sync_histogram() -> Histogram {
    Histogram::new(sync_buckets())
}

fn network_programming_histogram() -> Histogram {
    Histogram::new(network_programming_buckets())
}

impl Families {
    /// Every family, empty but for the series that exist from the start: per-family ones at
    /// zero for `families`, and one per drift kind.
    pub(super) fn new(families: &[Family]) -> Self {
        let f = Self {
            sync_duration: Series::new_with_constructor(sync_histogram as fn() -> Histogram),
            network_programming: Series::new_with_constructor(
                network_programming_histogram as fn() -> Histogram,
            ),
            last_timestamp: Series::default(),
            last_queued_timestamp: Series::default(),
            endpoint_changes_pending: Gauge::default(),
            endpoint_changes: Counter::default(),
            service_changes_pending: Gauge::default(),
            service_changes: Counter::default(),
            no_local_endpoints: Series::default(),
            restore_failures: Series::default(),
            healthz: Series::default(),
            livez: Series::default(),
            conntrack_duration: Series::new_with_constructor(sync_histogram as fn() -> Histogram),
            conntrack_deleted: Series::default(),
            operations: Series::default(),
            operation_failures: Series::default(),
            syncs: Series::default(),
            drift_repaired: Series::default(),
            blocked: Gauge::default(),
            draining: Gauge::default(),
            connections: Series::default(),
            ipset_entries: Series::default(),
        };
        // Per-family series exist from the start, at zero, as kube-proxy's.
        for family in families {
            let l = FamilyLabels::from(*family);
            let _ = f.sync_duration.get_or_create(&l);
            let _ = f.network_programming.get_or_create(&l);
            let _ = f.last_timestamp.get_or_create(&l);
            let _ = f.last_queued_timestamp.get_or_create(&l);
            let _ = f.restore_failures.get_or_create(&l);
            let _ = f.conntrack_duration.get_or_create(&l);
            let _ = f.conntrack_deleted.get_or_create(&l);
            for policy in ["internal", "external"] {
                let _ = f.no_local_endpoints.get_or_create(&PolicyLabels {
                    ip_family: l.ip_family,
                    traffic_policy: policy,
                });
            }
        }
        // Every kind from the start, so that a rate over any of them is defined.
        for kind in crate::model::plan::drift::DriftKind::ALL {
            let _ = f
                .drift_repaired
                .get_or_create(&KindLabels { kind: kind.label() });
        }
        f
    }

    /// Registers every family under its exposed name (counters without `_total`, which the
    /// encoder appends) and kube-proxy's help text, in the order of the exposition.
    pub(super) fn register(&self, r: &mut Registry) {
        self.register_sync(r);
        self.register_health(r);
        self.register_agent(r);
    }

    /// kube-proxy's sync families: latencies, timestamps and pending changes.
    fn register_sync(&self, r: &mut Registry) {
        r.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "[ALPHA] SyncProxyRules latency in seconds",
            self.sync_duration.clone(),
        );
        r.register(
            "kubeproxy_network_programming_duration_seconds",
            "[ALPHA] In Cluster Network Programming Latency in seconds",
            self.network_programming.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "[ALPHA] The last time proxy rules were successfully synced",
            self.last_timestamp.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "[ALPHA] The last time a sync of proxy rules was queued",
            self.last_queued_timestamp.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "[ALPHA] Pending proxy rules Endpoint changes",
            self.endpoint_changes_pending.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "[ALPHA] Cumulative proxy rules Endpoint changes",
            self.endpoint_changes.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "[ALPHA] Pending proxy rules Service changes",
            self.service_changes_pending.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_service_changes",
            "[ALPHA] Cumulative proxy rules Service changes",
            self.service_changes.clone(),
        );
    }

    /// kube-proxy's other families: Local policies without endpoints, restore failures,
    /// health answers and conntrack cleanup.
    fn register_health(&self, r: &mut Registry) {
        // A gauge named `_total`, as kube-proxy registers it.
        r.register(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "[ALPHA] Number of services with a Local traffic policy and no endpoints",
            self.no_local_endpoints.clone(),
        );
        r.register(
            "kubeproxy_sync_proxy_rules_iptables_restore_failures",
            "[ALPHA] Cumulative proxy iptables restore failures",
            self.restore_failures.clone(),
        );
        r.register(
            "kubeproxy_proxy_healthz",
            "[ALPHA] Cumulative proxy healthz HTTP status",
            self.healthz.clone(),
        );
        r.register(
            "kubeproxy_proxy_livez",
            "[ALPHA] Cumulative proxy livez HTTP status",
            self.livez.clone(),
        );
        r.register(
            "kubeproxy_conntrack_reconciler_sync_duration_seconds",
            "[ALPHA] ReconcileConntrackFlowsLatency latency in seconds",
            self.conntrack_duration.clone(),
        );
        r.register(
            "kubeproxy_conntrack_reconciler_deleted_entries",
            "[ALPHA] Cumulative conntrack flows deleted by conntrack reconciler",
            self.conntrack_deleted.clone(),
        );
    }

    /// The agent's own families (`kube_proxy_ipvs_*`).
    fn register_agent(&self, r: &mut Registry) {
        r.register(
            "kube_proxy_ipvs_operations",
            "Kernel operations applied by the sync loop, by kind",
            self.operations.clone(),
        );
        r.register(
            "kube_proxy_ipvs_operation_failures",
            "Kernel operations that failed (retried at the next sync), by kind",
            self.operation_failures.clone(),
        );
        r.register(
            "kube_proxy_ipvs_syncs",
            "Syncs, by type: full (kernel read back) or partial",
            self.syncs.clone(),
        );
        r.register(
            "kube_proxy_ipvs_drift_repaired",
            "Kernel objects changed outside the agent and repaired by a full sync, by kind \
             (virtual_server, real_server, set, set_entry, chain, jump, address, link, sysctl); \
             sum over kind for the total",
            self.drift_repaired.clone(),
        );
        r.register(
            "kube_proxy_ipvs_blocked",
            "1 while the agent cannot program the kernel at all (no rules written, or no virtual server made); the log says why",
            self.blocked.clone(),
        );
        r.register(
            "kube_proxy_ipvs_destinations_draining",
            "IPVS destinations at weight 0 waiting for their connections to end",
            self.draining.clone(),
        );
        r.register(
            "kube_proxy_ipvs_connections",
            "Connections IPVS tracks to the agent's real servers (active and inactive) at the last full read of the kernel",
            self.connections.clone(),
        );
        r.register(
            "kube_proxy_ipvs_ipset_entries",
            "Entries in each ipset the agent owns",
            self.ipset_entries.clone(),
        );
    }
}

/// The build this agent is: its crate version and the commit it was built from (`build.rs`).
pub(super) fn build_labels() -> BuildLabels {
    BuildLabels {
        build_date: env!("KUBE_PROXY_IPVS_BUILD_DATE"),
        compiler: "rustc",
        git_commit: env!("KUBE_PROXY_IPVS_GIT_COMMIT"),
        git_version: format!("v{}", env!("CARGO_PKG_VERSION")),
        major: env!("CARGO_PKG_VERSION_MAJOR"),
        minor: env!("CARGO_PKG_VERSION_MINOR"),
        platform: format!(
            "{}/{}",
            std::env::consts::OS,
            process::go_arch(std::env::consts::ARCH)
        ),
    }
}
