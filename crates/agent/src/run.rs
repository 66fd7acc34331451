//! The agent's modes (`--write-config-to`, `--dry-run`, `--cleanup`, `--once`, the long-running
//! proxy), wiring a source (manifests or the API server), the sync loop, the dataplane, and the
//! health and metrics servers.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::cli::Settings;
use crate::dataplane::kernel::Kernel;
use crate::dataplane::link::Links;
use crate::dataplane::{Dataplane, Observation, families, sysctl};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::model::cluster::{Cluster, Family};
use crate::model::config::{ConnReuse, KernelVersion, ProxyConfig};
use crate::model::desired::{HealthCheckAddresses, Host, desired, sysctls};
use crate::model::iptables::restore_input;
use crate::model::kernel::KernelState;
use crate::model::plan::{self, Op};
use crate::source::{api, manifests};
use crate::sync::{self, Periods, Syncer};

/// Snapshots of the cluster: `None` until the source has listed everything once.
type Snapshots = watch::Receiver<Option<Arc<Cluster>>>;

/// The running kernel's version, with what that means for `conn_reuse_mode` logged.
fn kernel_version() -> Option<KernelVersion> {
    let release = sysctl::kernel_release();
    let version = release.as_deref().and_then(KernelVersion::parse);
    let release = release.unwrap_or_default();
    match ConnReuse::for_kernel(version) {
        ConnReuse::Unsupported => warn!(
            %release,
            "net/ipv4/vs/conn_reuse_mode cannot be set: the kernel is older than 4.1"
        ),
        ConnReuse::SetZero => info!(
            %release,
            "net/ipv4/vs/conn_reuse_mode set to 0: kernels before 5.9 delay a reused connection's first SYN by 1 s"
        ),
        ConnReuse::LeftAsIs => info!(
            %release,
            "net/ipv4/vs/conn_reuse_mode left as the node has it (kernel 5.9 or later, as kube-proxy)"
        ),
        ConnReuse::Unknown => warn!(
            %release,
            "the kernel's version is unknown: net/ipv4/vs/conn_reuse_mode left as the node has it"
        ),
    }
    version
}

/// Runs the mode the command line asks for: `--write-config-to`, `--cleanup`, `--dry-run`,
/// `--init-only`, `--once`, or the long-running proxy.
pub async fn main(settings: Settings) -> anyhow::Result<ExitCode> {
    for w in &settings.warnings {
        warn!("{w}");
    }
    let args = &settings.args;
    if let Some(path) = &args.write_config_to {
        settings.kube_proxy.write_to(path)?;
        info!(path = %path.display(), "effective configuration written");
        return Ok(ExitCode::SUCCESS);
    }
    if args.cleanup {
        return cleanup(&settings.proxy).await;
    }
    let daemon = !(args.dry_run || args.once);
    let mut source = Source::start(&settings, daemon).await?;
    if args.dry_run {
        let first = first_snapshot(&mut source.snapshots).await?;
        return dry_run(&first, &settings.proxy).await;
    }
    let (kernel, config) = prepare_kernel(&settings).await?;
    if args.init_only {
        for (key, value) in sysctls(&config) {
            sysctl::write(&key, &value).with_context(|| format!("--init-only: sysctl {key}"))?;
        }
        info!("host set up (--init-only)");
        return Ok(ExitCode::SUCCESS);
    }
    let mut syncer = Syncer::new(kernel, config.clone());
    // A plan that went in whole moves into the shadow; the reports count it.
    syncer.keep_plans(false);
    if args.once {
        return once(&mut syncer, &mut source.snapshots).await;
    }
    proxy(&settings, &config, syncer, source).await;
    Ok(ExitCode::SUCCESS)
}

/// `--cleanup`: removes everything the agent owns, in both families whatever the flags say,
/// as kube-proxy's cleanup does.
async fn cleanup(config: &ProxyConfig) -> anyhow::Result<ExitCode> {
    let mut kernel = Kernel::connect(config.families.clone(), Vec::new()).await?;
    kernel.set_families(families::usable(kernel.backend()));
    let Observation { state, .. } = kernel.observe().await?;
    let p = plan::cleanup(&state, &config.exclude_cidrs);
    let applied = kernel.apply(&p).await?;
    for (op, e) in applied.failures(&p) {
        warn!(op = %op, error = %e, "cleanup step failed");
    }
    info!(
        done = applied.done,
        failed = applied.failed.len(),
        "cleanup finished"
    );
    Ok(if applied.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Where the cluster comes from: manifests, or the API server (which also tells the Node's
/// lifecycle and takes the agent's events).
struct Source {
    snapshots: Snapshots,
    /// The Node being deleted or drained (API server only).
    lifecycle: Option<watch::Receiver<api::NodeLifecycle>>,
    /// Where events go (API server, long-running proxy only).
    events: Option<kube::Client>,
}

impl Source {
    /// Starts reading the manifests or watching the API server. A `daemon` (the long-running
    /// proxy) records its start as an event on its Node and keeps a client for later events.
    async fn start(settings: &Settings, daemon: bool) -> anyhow::Result<Source> {
        if let Some(path) = &settings.args.manifests {
            return Ok(Source {
                snapshots: manifest_source(path.clone(), settings.node_name.clone())?,
                lifecycle: None,
                events: None,
            });
        }
        if !daemon {
            info!("waiting for the API server's first complete list");
        }
        let kp = &settings.kube_proxy;
        let options = api::ClientOptions {
            kubeconfig: Some(kp.client_connection.kubeconfig.clone())
                .filter(|k| !k.is_empty())
                .map(Into::into),
            master: settings.args.master.clone(),
            qps: kp.client_connection.qps,
            burst: u32::try_from(kp.client_connection.burst).unwrap_or(0),
        };
        let client = api::client(&options)
            .await
            .context("cannot build the API client")?;
        let events = daemon.then(|| {
            let event = crate::k8s::events::node_starting(&settings.node_name);
            tokio::spawn(crate::k8s::events::record(client.clone(), event));
            client.clone()
        });
        let (tx, snapshots) = watch::channel(None);
        let (life_tx, lifecycle) = watch::channel(api::NodeLifecycle::default());
        let watches = api::Watches::new(client, settings.node_name.clone())
            .node_lifecycle(life_tx)
            .page_size(Some(settings.args.api_list_page_size).filter(|n| *n > 0));
        tokio::spawn(async move {
            if let Err(e) = watches.run(tx).await {
                warn!(error = %e, "the API source stopped");
            }
        });
        Ok(Source {
            snapshots,
            lifecycle: Some(lifecycle),
            events,
        })
    }
}

/// Connects to the kernel and prepares the host as kube-proxy does at start (the families
/// whose iptables works, IPVS timeouts, conntrack sysctls, OOM score, the scheduler probe,
/// VIPs moved to the configured binding). The configuration comes back with what the host
/// decided (kernel version, families).
async fn prepare_kernel(settings: &Settings) -> anyhow::Result<(Kernel, ProxyConfig)> {
    let args = &settings.args;
    let mut config = settings.proxy.clone();
    config.kernel_version = kernel_version();
    let sysctl_keys: Vec<String> = sysctls(&config).into_keys().collect();
    let mut kernel = Kernel::connect(config.families.clone(), sysctl_keys)
        .await
        .context("cannot reach the kernel's IPVS (is the ip_vs module loaded?)")?;
    config.families = families::usable(kernel.backend());
    kernel.set_families(config.families.clone());
    kernel.set_vip_binding(config.vip_binding);
    // The per-virtual-server counts are kept only when they are exported (cardinality).
    kernel.count_traffic(settings.kube_proxy.ipvs.service_metrics);
    info!(families = ?config.families, "serving these IP families (each one whose iptables works on the host, as kube-proxy)");
    info!(backend = ?kernel.backend(), node = %settings.node_name, "kube-proxy-ipvs starting");
    host_setup(settings, &kernel).await;
    if args.init_only {
        return Ok((kernel, config));
    }
    if let Err(e) = probe_scheduler(&kernel, &config.scheduler).await {
        // A name the kernel's tree does not have is a configuration error; a known scheduler
        // whose module is missing may come back (a module installed, a kernel package
        // fixed): the daemon stays up, retries with backoff, and /healthz is 503 meanwhile.
        let known = !matches!(
            ipvs_netlink::Scheduler::from_name(&config.scheduler),
            ipvs_netlink::Scheduler::Other(_)
        );
        if args.once || !known {
            return Err(e);
        }
        warn!(error = %format!("{e:#}"), "starting anyway: Services cannot be programmed until the scheduler is available");
    }
    // A node switched to the other binding moves its VIPs before the first sync, keeping
    // each one local throughout (established connections through it go on).
    match kernel.rebind_vips().await {
        Ok(rebound) => {
            for (step, e) in &rebound.failed {
                warn!(op = %step, error = %e, "rebinding a VIP failed");
            }
            if rebound.messages > 0 {
                info!(binding = %config.vip_binding, requests = rebound.messages, failed = rebound.failed.len(), "VIPs rebound");
            }
        }
        Err(e) => warn!(error = %e, "cannot read the VIPs' bindings; the sync will"),
    }
    Ok((kernel, config))
}

/// `--once`: one full sync of the source's first complete snapshot; failure when any
/// operation failed.
async fn once(syncer: &mut Syncer<Kernel>, snapshots: &mut Snapshots) -> anyhow::Result<ExitCode> {
    let first = first_snapshot(snapshots).await?;
    let report = syncer.sync(&first, true).await?;
    for w in &report.warnings {
        warn!("{w}");
    }
    for (op, e) in report.applied.failures(&report.plan) {
        warn!(op = %op, error = %e, "operation failed");
    }
    info!(
        ops = report.ops(),
        messages = report.applied.messages,
        failed = report.applied.failed.len(),
        took = ?report.duration,
        "synced once"
    );
    for c in &report.conntrack {
        info!(family = ?c.family, scanned = c.scanned, deleted = c.deleted, took = ?c.duration, "conntrack reconciled");
    }
    Ok(if report.applied.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The long-running proxy: the health, metrics and health-check servers and the source's
/// bookkeeping as tasks of their own, and the sync loop here until SIGTERM or Ctrl-C.
async fn proxy(
    settings: &Settings,
    config: &ProxyConfig,
    mut syncer: Syncer<Kernel>,
    source: Source,
) {
    let kp = &settings.kube_proxy;
    if let Some(path) = settings.args.config.clone() {
        tokio::spawn(exit_on_config_change(path));
    }
    let metrics = Arc::new(Metrics::new(&config.families, kp.ipvs.service_metrics));
    let health = Health::new(&config.families, kp.health_timeout());
    health.updated();
    if let Some(lifecycle) = source.lifecycle {
        spawn_node_eligibility(lifecycle, health.clone());
    }
    if let Some(addr) = kp.healthz_address() {
        spawn_healthz_server(
            addr,
            health.clone(),
            metrics.clone(),
            kp.bind_address_hard_fail,
        );
    }
    if let Some(addr) = kp.metrics_address() {
        let configz = crate::metrics::configz(kp).unwrap_or_else(|e| {
            warn!(error = %e, "cannot encode the configuration; /configz serves an empty one");
            "{}".to_string()
        });
        spawn_metrics_server(
            addr,
            metrics.clone(),
            configz.into(),
            kp.bind_address_hard_fail,
        );
    }
    let events = source.events;
    let health_check_addresses = spawn_health_check_ports(HealthCheckPorts {
        snapshots: source.snapshots.clone(),
        health: health.clone(),
        node: settings.node_name.clone(),
        families: config.families.clone(),
        events: events.clone(),
        retry_period: kp.sync_period().max(Duration::from_secs(1)),
    });
    spawn_change_counter(source.snapshots.clone(), health.clone(), metrics.clone());
    let periods = Periods {
        sync: kp.sync_period(),
        min_sync: kp.min_sync_period(),
    };
    sync::run(
        &mut syncer,
        source.snapshots,
        periods,
        shutdown(),
        |report| {
            if !report.drift.is_empty() {
                // Once per repairing sync: the repair leaves nothing for the next one to find.
                warn!(
                    "repaired kernel state changed outside the agent: {}",
                    report.drift
                );
            }
            metrics.record(report, SystemTime::now());
            health.record(report);
            // A refused scheduler is said on its Service, once when the refusal starts.
            if let Some(client) = &events {
                for refusal in &report.scheduler_refusals {
                    let event = crate::k8s::events::scheduler_refused(&settings.node_name, refusal);
                    tokio::spawn(crate::k8s::events::record(client.clone(), event));
                }
            }
            health_check_addresses.send_if_modified(|a| {
                let new = Some(&report.health_check_addresses);
                let changed = a.as_ref() != new;
                if changed {
                    *a = new.cloned();
                }
                changed
            });
        },
        |blocked| {
            // The reason is logged by the loop; the public port only says 503.
            health.set_blocked(blocked);
            metrics.set_blocked(blocked.is_some());
        },
    )
    .await;
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
fn spawn_node_eligibility(mut lifecycle: watch::Receiver<api::NodeLifecycle>, health: Health) {
    tokio::spawn(async move {
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
    });
}

/// `/healthz`, `/livez` and `/readyz` on `healthzBindAddress`.
fn spawn_healthz_server(addr: SocketAddr, health: Health, metrics: Arc<Metrics>, hard_fail: bool) {
    tokio::spawn(async move {
        if let Err(e) = crate::health::serve(addr, health, Some(metrics), hard_fail).await {
            warn!(error = %e, "healthz server stopped");
        }
    });
}

/// `/metrics` and `/configz` on `metricsBindAddress`.
fn spawn_metrics_server(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    configz: Arc<str>,
    hard_fail: bool,
) {
    tokio::spawn(async move {
        if let Err(e) = crate::metrics::serve(addr, metrics, configz, hard_fail).await {
            warn!(error = %e, "metrics server stopped");
        }
    });
}

/// What the health-check node ports follow.
struct HealthCheckPorts {
    snapshots: Snapshots,
    health: Health,
    node: String,
    families: Vec<Family>,
    /// Where a port that cannot be bound is reported (API server only).
    events: Option<kube::Client>,
    /// How often a port that could not be bound is tried again.
    retry_period: Duration,
}

/// The health-check node ports of `externalTrafficPolicy: Local` load balancers follow the
/// snapshots, on the addresses each sync finds for them (none before the first, which the
/// returned sender gives).
fn spawn_health_check_ports(
    ports: HealthCheckPorts,
) -> watch::Sender<Option<HealthCheckAddresses>> {
    let (addresses_tx, mut addresses) = watch::channel(None);
    let HealthCheckPorts {
        snapshots: mut changes,
        health,
        node,
        families,
        events,
        retry_period,
    } = ports;
    let mut servers = crate::health::ServiceHealthServers::new(Default::default(), health);
    tokio::spawn(async move {
        // Ports already reported, so a port that stays unbindable is one event, not one per
        // change.
        let mut reported = BTreeSet::new();
        loop {
            let current = addresses.borrow_and_update().clone();
            if let Some(current) = current {
                servers.set_addresses(current);
                let wanted = changes
                    .borrow_and_update()
                    .as_ref()
                    .map(|c| crate::model::endpoints::health_checks(c, &node, &families))
                    .unwrap_or_default();
                let mut failing = BTreeSet::new();
                for (check, e) in servers.sync(&wanted) {
                    let key = (check.family, check.port, check.service.clone());
                    failing.insert(key.clone());
                    if reported.contains(&key) {
                        continue;
                    }
                    warn!(port = check.port, family = ?check.family, service = %check.service, error = %e, "FailedToStartServiceHealthcheck");
                    if let Some(client) = &events {
                        let event = crate::k8s::events::health_check_failed(
                            &node,
                            &check.service,
                            check.port,
                            &e.to_string(),
                        );
                        tokio::spawn(crate::k8s::events::record(client.clone(), event));
                    }
                }
                reported = failing;
            }
            // A port that failed is tried again at the sync period, as kube-proxy's syncs
            // retry it, even when nothing changes.
            let retry = async {
                if reported.is_empty() {
                    std::future::pending().await
                } else {
                    tokio::time::sleep(retry_period).await
                }
            };
            tokio::select! {
                r = changes.changed() => if r.is_err() { break },
                r = addresses.changed() => if r.is_err() { break },
                () = retry => {}
            }
        }
    });
    addresses_tx
}

/// Every new snapshot is a queued update for /healthz and the metrics, with its Service and
/// EndpointSlice changes counted (pending until the next sync records its report).
fn spawn_change_counter(mut changes: Snapshots, health: Health, metrics: Arc<Metrics>) {
    tokio::spawn(async move {
        let mut previous = changes.borrow_and_update().clone();
        while changes.changed().await.is_ok() {
            let current = changes.borrow_and_update().clone();
            let (services, slices) = count_changes(previous.as_deref(), current.as_deref());
            previous = current;
            metrics.changes_seen(services, slices);
            health.queued_update();
            metrics.queued(SystemTime::now());
        }
    });
}

/// How many Services and EndpointSlices differ between two snapshots.
fn count_changes(before: Option<&Cluster>, after: Option<&Cluster>) -> (u64, u64) {
    use crate::model::cluster::ObjectMap;
    fn diff<K: Ord + Clone, V: PartialEq>(
        a: Option<&ObjectMap<K, V>>,
        b: Option<&ObjectMap<K, V>>,
    ) -> u64 {
        let empty = ObjectMap::new();
        let mut n = 0;
        crate::model::cluster::each_difference(a.unwrap_or(&empty), b.unwrap_or(&empty), |_, _| {
            n += 1
        });
        n
    }
    (
        diff(before.map(|c| &c.services), after.map(|c| &c.services)),
        diff(before.map(|c| &c.slices), after.map(|c| &c.slices)),
    )
}

/// Waits for the source's first complete snapshot.
async fn first_snapshot(snapshots: &mut Snapshots) -> anyhow::Result<Arc<Cluster>> {
    let first = snapshots
        .wait_for(Option::is_some)
        .await
        .map_err(|_| anyhow::anyhow!("the source stopped before its first list"))?;
    match first.clone() {
        Some(c) => Ok(c),
        None => bail!("the source gave no snapshot"),
    }
}

/// Loads the manifests once and reloads them whenever the path changes.
fn manifest_source(path: std::path::PathBuf, node: String) -> anyhow::Result<Snapshots> {
    let first = load(&path, &node)?;
    let (tx, rx) = watch::channel(Some(Arc::new(first)));
    let (changed_tx, mut changes) = tokio::sync::mpsc::channel(1);
    tokio::spawn(manifests::watch(
        path.clone(),
        Duration::from_millis(500),
        changed_tx,
    ));
    tokio::spawn(async move {
        while changes.recv().await.is_some() {
            match load(&path, &node) {
                Ok(c) => {
                    let _ = tx.send(Some(Arc::new(c)));
                }
                Err(e) => warn!(error = %e, "manifests not reloaded"),
            }
        }
    });
    Ok(rx)
}

/// Loads the manifests (rejected objects are logged by the loader).
fn load(path: &Path, node: &str) -> anyhow::Result<Cluster> {
    let loaded =
        manifests::load(path, node).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(loaded.cluster)
}

/// Checks that the kernel knows the scheduler, as kube-proxy does at start: a probe virtual
/// server on TEST-NET-2 (198.51.100.0:20000) is made with it and deleted. Skipped when a
/// virtual server already uses it. An unknown scheduler is a clear error, not a failure per
/// Service at every sync.
async fn probe_scheduler(kernel: &Kernel, scheduler: &str) -> anyhow::Result<()> {
    use ipvs_netlink::{Scheduler, Service, ServiceKey};
    let ipvs = kernel.ipvs();
    let services = ipvs
        .services()
        .list()
        .await
        .context("cannot list IPVS services")?;
    if services.iter().any(|s| s.scheduler.name() == scheduler) {
        return Ok(());
    }
    kernel.prepare_scheduler(scheduler).await;
    let key = ServiceKey::tcp(std::net::Ipv4Addr::new(198, 51, 100, 0).into(), 20000);
    let probe = Service::new(key, Scheduler::from_name(scheduler));
    match ipvs.services().add(&probe).await {
        Ok(()) => {
            let _ = ipvs.services().del_if_exists(&key).await;
            Ok(())
        }
        Err(e) if e.is_exists() => Ok(()),
        Err(e) => bail!(
            "the kernel refused IPVS scheduler {scheduler:?} ({e}): is the module ip_vs_{scheduler} available? (--ipvs-scheduler / ipvs.scheduler)"
        ),
    }
}

/// kube-proxy exits when its configuration file changes, so that its DaemonSet restarts it
/// with the new one; so does the agent. Polls the file every few seconds.
async fn exit_on_config_change(path: std::path::PathBuf) {
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

/// What kube-proxy sets up once at start: IPVS timeouts, conntrack sysctls, OOM score.
async fn host_setup(settings: &Settings, kernel: &Kernel) {
    let kp = &settings.kube_proxy;
    let (tcp, tcpfin, udp) = kp.ipvs_timeouts();
    if !(tcp.is_zero() && tcpfin.is_zero() && udp.is_zero()) {
        let timeouts = ipvs_netlink::Timeouts {
            tcp,
            tcp_fin: tcpfin,
            udp,
        };
        if let Err(e) = kernel.ipvs().timeouts().set(&timeouts).await {
            warn!(error = %e, "cannot set the IPVS timeouts");
        }
    }
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    for (key, value) in kp.conntrack_sysctls(cpus) {
        if let Err(e) = sysctl::write(&key, &value) {
            warn!(error = %e, "cannot set a conntrack sysctl");
        }
    }
    if let Err(e) = crate::config_file::write_oom_score_adj(kp.oom_score_adj.unwrap_or(-999)) {
        warn!(error = %e, "cannot set the OOM score adjustment");
    }
}

/// Prints the plan from an empty kernel and the iptables-restore input, touching nothing.
async fn dry_run(cluster: &Cluster, config: &ProxyConfig) -> anyhow::Result<ExitCode> {
    // Reading addresses needs no privilege; without rtnetlink, plan with none.
    let host = match Links::connect() {
        Ok(links) => match (links.interfaces().await, links.addresses().await) {
            (Ok(i), Ok(a)) => Host {
                addresses: Links::local_addresses(&i, &a),
            },
            _ => Host::default(),
        },
        Err(_) => Host::default(),
    };
    let want = desired(cluster, config, &host);
    let p = plan::plan(&want.state, &KernelState::default(), &config.exclude_cidrs);
    let mut out = std::io::stdout().lock();
    for w in want.conflicts.iter().chain(&p.warnings) {
        writeln!(out, "# warning: {w}")?;
    }
    for op in &p.ops {
        writeln!(out, "{op}")?;
        match op {
            Op::AddEntries { entries, .. } => {
                for e in entries {
                    writeln!(out, "    {e}")?;
                }
            }
            Op::AddService { service, .. } => {
                if let Some(t) = service.persistence {
                    writeln!(out, "    persistent {}s", t.as_secs())?;
                }
            }
            Op::WriteRules {
                rules,
                missing_jumps,
                ..
            } => {
                for line in restore_input(rules, missing_jumps).lines() {
                    writeln!(out, "    {line}")?;
                }
            }
            _ => {}
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::count_changes;
    use crate::model::cluster::{Cluster, EndpointSlice, Family, ServiceRef, SliceRef};

    fn slice(name: &str, port: u16) -> EndpointSlice {
        EndpointSlice {
            name: name.into(),
            service: ServiceRef::new("default", "web"),
            family: Family::V4,
            ports: vec![crate::model::cluster::EndpointPort {
                name: String::new(),
                protocol: crate::model::cluster::Protocol::Tcp,
                port,
            }],
            endpoints: vec![],
            trigger_time: None,
        }
    }

    #[test]
    fn changes_count_added_modified_and_removed_objects() {
        let mut a = Cluster::default();
        a.slices.insert(
            SliceRef::new("default", "a"),
            std::sync::Arc::new(slice("a", 80)),
        );
        a.slices.insert(
            SliceRef::new("default", "b"),
            std::sync::Arc::new(slice("b", 80)),
        );
        let mut b = a.clone();
        b.slices.insert(
            SliceRef::new("default", "a"),
            std::sync::Arc::new(slice("a", 81)),
        ); // modified
        b.slices.remove(&SliceRef::new("default", "b")); // removed
        b.slices.insert(
            SliceRef::new("default", "c"),
            std::sync::Arc::new(slice("c", 80)),
        ); // added
        assert_eq!(count_changes(Some(&a), Some(&b)), (0, 3));
        assert_eq!(count_changes(None, Some(&a)), (0, 2));
        assert_eq!(count_changes(Some(&a), Some(&a)), (0, 0));
    }
}
