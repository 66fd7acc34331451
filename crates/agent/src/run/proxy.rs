//! The long-running proxy: the sync loop until SIGTERM or Ctrl-C, and beside it, on the
//! agent's [`Tasks`], the health, metrics and health-check servers and the followers of the
//! source.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::health_check_ports::{self, HealthCheckPorts};
use super::source::{Snapshots, Source};
use super::tasks::Tasks;
use crate::cli::Settings;
use crate::config_file::KubeProxyConfiguration;
use crate::dataplane::kernel::Kernel;
use crate::health::Health;
use crate::k8s::event_lane::EventLane;
use crate::metrics::Metrics;
use crate::model::desired::HealthCheckAddresses;
use crate::model::snapshot::changes::Published;
use crate::model::snapshot::config::ProxyConfig;
use crate::source::api;
use crate::sync::{self, Blocked, Periods, Report, Syncer};

/// Runs the proxy until SIGTERM or Ctrl-C, its tasks on `tasks` (which the caller ends).
pub async fn proxy(
    settings: &Settings,
    config: &ProxyConfig,
    mut syncer: Syncer<Kernel>,
    source: Source,
    tasks: &Tasks,
) {
    let kp = &settings.kube_proxy;
    if let Some(path) = settings.args.config.clone() {
        tasks.spawn(exit_on_config_change(path));
    }
    let mut metrics = Metrics::new(&config.families, kp.ipvs.service_metrics);
    if let Some(api) = &source.api_metrics {
        metrics = metrics.with_api(api);
    }
    let metrics = Arc::new(metrics);
    let health = Health::new(&config.families, kp.health_timeout());
    health.updated();
    if let Some(lifecycle) = source.lifecycle {
        tasks.spawn(follow_node_eligibility(lifecycle, health.clone()));
    }
    start_servers(kp, &health, &metrics, tasks);
    let health_check_addresses = health_check_ports::start(
        HealthCheckPorts {
            snapshots: source.snapshots.clone(),
            health: health.clone(),
            node: settings.node_name.clone(),
            families: config.families.clone(),
            events: source.events.clone(),
            retry_period: kp.sync_period().max(Duration::from_secs(1)),
        },
        tasks,
    );
    tasks.spawn(count_changes_seen(
        source.snapshots.clone(),
        health.clone(),
        metrics.clone(),
    ));
    let recorder = Recorder {
        node: &settings.node_name,
        metrics,
        health,
        events: source.events,
        health_check_addresses,
    };
    let periods = Periods {
        sync: kp.sync_period(),
        min_sync: kp.min_sync_period(),
    };
    sync::run(
        &mut syncer,
        source.snapshots,
        periods,
        shutdown(),
        |report| recorder.record(report),
        |blocked| recorder.blocked(blocked),
    )
    .await;
}

/// Where each sync's outcome goes.
struct Recorder<'a> {
    node: &'a str,
    metrics: Arc<Metrics>,
    health: Health,
    /// Where events go (API server only).
    events: Option<EventLane>,
    /// The addresses the health-check node ports listen on, as the last sync found them.
    health_check_addresses: watch::Sender<Option<HealthCheckAddresses>>,
}

impl Recorder<'_> {
    /// Records a sync that ran: the log, the metrics, the health, the events, and the
    /// health-check node ports' addresses.
    fn record(&self, report: &Report) {
        if report.full {
            // A full sync's read of the kernel is the agent's usual peak: its pages go back.
            let t = std::time::Instant::now();
            let trimmed = crate::allocator::give_back();
            debug!(trimmed, took = ?t.elapsed(), "freed memory given back to the system");
        }
        if !report.drift.is_empty() {
            // Once per repairing sync: the repair leaves nothing for the next one to find.
            warn!(
                "repaired kernel state changed outside the agent: {}",
                report.drift
            );
        }
        self.metrics.record(report, SystemTime::now());
        self.health.record(report);
        // A refused scheduler is said on its Service, once when the refusal starts.
        if let Some(events) = &self.events {
            for refusal in &report.scheduler_refusals {
                events.record(crate::k8s::events::scheduler_refused(self.node, refusal));
            }
        }
        self.health_check_addresses.send_if_modified(|a| {
            let new = Some(&report.health_check_addresses);
            let changed = a.as_ref() != new;
            if changed {
                *a = new.cloned();
            }
            changed
        });
    }

    /// The kernel cannot be programmed at all (`Some`), or can again. The reason is logged by
    /// the loop; the public port only says 503.
    fn blocked(&self, blocked: Option<&Blocked>) {
        self.health
            .set_blocked(blocked.map(ToString::to_string).as_deref());
        self.metrics.set_blocked(blocked.is_some());
    }
}

/// Starts the healthz server and the metrics server, each where the configuration binds it.
fn start_servers(
    kp: &KubeProxyConfiguration,
    health: &Health,
    metrics: &Arc<Metrics>,
    tasks: &Tasks,
) {
    let hard_fail = kp.bind_address_hard_fail;
    if let Some(addr) = kp.healthz_address() {
        let (health, metrics) = (health.clone(), Some(metrics.clone()));
        tasks.spawn(async move {
            if let Err(e) = crate::health::serve(addr, health, metrics, hard_fail).await {
                warn!(error = %e, "healthz server stopped");
            }
        });
    }
    if let Some(addr) = kp.metrics_address() {
        let configz = crate::metrics::configz(kp).unwrap_or_else(|e| {
            warn!(error = %e, "cannot encode the configuration; /configz serves an empty one");
            "{}".to_string()
        });
        let metrics = metrics.clone();
        tasks.spawn(async move {
            let served = crate::metrics::serve(addr, metrics, configz.into(), hard_fail).await;
            if let Err(e) = served {
                warn!(error = %e, "metrics server stopped");
            }
        });
    }
}

/// Resolves at SIGTERM or Ctrl-C.
async fn shutdown() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending().await,
            }
        } => {}
    }
    info!("shutting down; the kernel state stays in place");
}

/// A Node being deleted or drained by the autoscaler is no longer eligible (/healthz 503).
async fn follow_node_eligibility(
    mut lifecycle: watch::Receiver<api::NodeLifecycle>,
    health: Health,
) {
    loop {
        let l = *lifecycle.borrow_and_update();
        let taints: &[&str] = if l.to_be_deleted {
            &[api::TO_BE_DELETED_TAINT]
        } else {
            &[]
        };
        health.sync_node(l.deleting, taints);
        if lifecycle.changed().await.is_err() {
            break;
        }
    }
}

/// Every new snapshot is a queued update for /healthz and the metrics, with its Service and
/// EndpointSlice changes counted as the source recorded them (pending until the next sync
/// records its report): the objects that changed since the last snapshot seen, the whole
/// cluster for the first one, none when the source's log no longer reaches back.
async fn count_changes_seen(mut changes: Snapshots, health: Health, metrics: Arc<Metrics>) {
    let mut seen = changes
        .borrow_and_update()
        .as_ref()
        .map(Published::generation);
    while changes.changed().await.is_ok() {
        let Some(current) = changes.borrow_and_update().clone() else {
            continue;
        };
        let (services, slices) = count_changes(seen, &current);
        seen = Some(current.generation());
        metrics.changes_seen(services, slices);
        health.queued_update();
        metrics.queued(SystemTime::now());
    }
}

/// How many Services and EndpointSlices changed into `current` since the snapshot of
/// generation `seen` (`None`: every object of the first snapshot is new).
fn count_changes(seen: Option<u64>, current: &Published) -> (u64, u64) {
    let (services, slices) = match seen {
        None => (current.cluster.services.len(), current.cluster.slices.len()),
        Some(g) => current.changes_since(g).map_or((0, 0), |c| c.objects()),
    };
    (services as u64, slices as u64)
}

/// kube-proxy exits when its configuration file changes, so that its DaemonSet restarts it
/// with the new one; so does the agent. Polls the file every few seconds.
async fn exit_on_config_change(path: PathBuf) {
    let stamp = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let first = stamp(&path);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if stamp(&path) != first {
            warn!(path = %path.display(), "the configuration file changed; exiting to be restarted with it");
            std::process::exit(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::count_changes;
    use crate::model::snapshot::changes::{Changes, Published};
    use crate::model::snapshot::cluster::{Cluster, EndpointSlice, Family, ServiceRef, SliceRef};

    fn slice(name: &str, port: u16) -> EndpointSlice {
        EndpointSlice {
            name: name.into(),
            service: ServiceRef::new("default", "web"),
            family: Family::V4,
            ports: vec![crate::model::snapshot::cluster::EndpointPort {
                name: String::new(),
                protocol: crate::model::snapshot::cluster::Protocol::Tcp,
                port,
            }],
            endpoints: vec![],
            trigger_time: None,
        }
    }

    #[test]
    fn changes_count_added_modified_and_removed_objects() {
        let mut a = Cluster::default();
        a.slices
            .insert(SliceRef::new("default", "a"), Arc::new(slice("a", 80)));
        a.slices
            .insert(SliceRef::new("default", "b"), Arc::new(slice("b", 80)));
        let mut b = a.clone();
        b.slices
            .insert(SliceRef::new("default", "a"), Arc::new(slice("a", 81))); // modified
        b.slices.remove(&SliceRef::new("default", "b")); // removed
        b.slices
            .insert(SliceRef::new("default", "c"), Arc::new(slice("c", 80))); // added
        let first = Published::first(Arc::new(a.clone()));
        let second = first.next(Arc::new(b.clone()), Changes::between(&a, &b));
        assert_eq!(count_changes(Some(1), &second), (0, 3));
        assert_eq!(count_changes(None, &first), (0, 2));
        assert_eq!(count_changes(Some(1), &first), (0, 0));
        // A reader that skipped a snapshot counts what changed since the one it saw.
        let third = second.next(Arc::new(a.clone()), Changes::between(&b, &a));
        assert_eq!(count_changes(Some(1), &third), (0, 3));
    }
}
