//! The kernel connected and the host prepared as kube-proxy does at start, all through the
//! dataplane: the families whose iptables works, the host's set-up, the scheduler probe, the
//! VIPs moved to the configured binding.

use anyhow::Context;
use tracing::{info, warn};

use crate::cli::Settings;
use crate::config_file::KubeProxyConfiguration;
use crate::dataplane::host::{HostSetup, HostStep};
use crate::dataplane::kernel::Kernel;
use crate::dataplane::probe::ProbeFailure;
use crate::dataplane::{Dataplane, families, sysctl};
use crate::model::desired::sysctls;
use crate::model::plan::{Op, Plan};
use crate::model::snapshot::config::{ConnReuse, KernelVersion, ProxyConfig};

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

/// Connects to the kernel and prepares the host as kube-proxy does at start (the families
/// whose iptables works, IPVS timeouts, conntrack sysctls, OOM score, the scheduler probe,
/// VIPs moved to the configured binding). The configuration comes back with what the host
/// decided (kernel version, families).
pub async fn prepare_kernel(settings: &Settings) -> anyhow::Result<(Kernel, ProxyConfig)> {
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
    set_up_host(&mut kernel, &settings.kube_proxy).await;
    if args.init_only {
        return Ok((kernel, config));
    }
    check_scheduler(&mut kernel, &config.scheduler, args.once).await?;
    rebind_vips(&mut kernel, &config).await;
    Ok((kernel, config))
}

/// What kube-proxy sets up once at start, from its configuration on a node with `cpus` CPUs:
/// the IPVS timeouts (left alone when all three are zero), conntrack's sysctls, the OOM score
/// (-999 unless configured).
pub fn host_setup(kp: &KubeProxyConfiguration, cpus: u32) -> HostSetup {
    let (tcp, tcp_fin, udp) = kp.ipvs_timeouts();
    let timeouts = ipvs_netlink::Timeouts { tcp, tcp_fin, udp };
    HostSetup {
        ipvs_timeouts: Some(timeouts).filter(|t| *t != ipvs_netlink::Timeouts::default()),
        sysctls: kp.conntrack_sysctls(cpus),
        oom_score_adj: kp.oom_score_adj.unwrap_or(-999),
    }
}

/// Sets the host up ([`host_setup`]); a step that fails is logged and the agent goes on, as
/// kube-proxy does.
async fn set_up_host(kernel: &mut impl Dataplane, kp: &KubeProxyConfiguration) {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    for (step, e) in kernel.set_up_host(&host_setup(kp, cpus)).await {
        match step {
            HostStep::IpvsTimeouts => warn!(error = %e, "cannot set the IPVS timeouts"),
            HostStep::Sysctl(_) => warn!(error = %e, "cannot set a conntrack sysctl"),
            HostStep::OomScoreAdj => warn!(error = %e, "cannot set the OOM score adjustment"),
        }
    }
}

/// Probes the configured scheduler. A name the kernel's tree does not have is a configuration
/// error; a known scheduler whose module is missing may come back (a module installed, a
/// kernel package fixed): the daemon stays up, retries with backoff, and /healthz is 503
/// meanwhile. `--once` has no later to wait for.
pub async fn check_scheduler(
    kernel: &mut impl Dataplane,
    scheduler: &str,
    once: bool,
) -> anyhow::Result<()> {
    let Err(failure) = kernel.probe_scheduler(scheduler).await else {
        return Ok(());
    };
    let e = match failure {
        ProbeFailure::Unread(e) => anyhow::Error::new(e).context("cannot list IPVS services"),
        ProbeFailure::Refused(e) => anyhow::anyhow!(
            "the kernel refused IPVS scheduler {scheduler:?} ({e}): is the module ip_vs_{scheduler} available? (--ipvs-scheduler / ipvs.scheduler)"
        ),
    };
    let known = !matches!(
        ipvs_netlink::Scheduler::from_name(scheduler),
        ipvs_netlink::Scheduler::Other(_)
    );
    if once || !known {
        return Err(e);
    }
    warn!(error = %format!("{e:#}"), "starting anyway: Services cannot be programmed until the scheduler is available");
    Ok(())
}

/// A node switched to the other binding moves its VIPs before the first sync, keeping each
/// one local throughout (established connections through it go on).
async fn rebind_vips(kernel: &mut Kernel, config: &ProxyConfig) {
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
}

/// `--init-only`: writes the IPVS sysctls the sync would, as operations of the dataplane one
/// at a time, and stops at the first that fails.
pub async fn init_only(kernel: &mut impl Dataplane, config: &ProxyConfig) -> anyhow::Result<()> {
    for (key, value) in sysctls(config) {
        let plan = Plan {
            ops: vec![Op::SetSysctl {
                key: key.as_str().into(),
                value: value.into(),
            }],
            ..Plan::default()
        };
        let applied = kernel.apply(&plan).await?;
        if let Some((_, e)) = applied.failed.into_iter().next() {
            return Err(anyhow::Error::new(e).context(format!("--init-only: sysctl {key}")));
        }
    }
    info!("host set up (--init-only)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::memory::Memory;

    #[tokio::test]
    async fn an_unknown_scheduler_stops_the_agent_and_a_missing_module_does_not() {
        let mut kernel = Memory {
            refuse: vec!["nosuch".into(), "mh".into()],
            ..Memory::default()
        };
        // "nosuch" is no scheduler of the kernel's tree: a configuration error.
        assert!(check_scheduler(&mut kernel, "nosuch", false).await.is_err());
        check_scheduler(&mut kernel, "mh", false).await.unwrap();
        assert!(check_scheduler(&mut kernel, "mh", true).await.is_err());
        check_scheduler(&mut kernel, "rr", true).await.unwrap();
        assert_eq!(kernel.probed, ["nosuch", "mh", "mh", "rr"]);
    }

    #[tokio::test]
    async fn a_kernel_without_ipvs_fails_the_probe_with_the_read_error_kept() {
        let mut kernel = Memory {
            unavailable: true,
            ..Memory::default()
        };
        let e = check_scheduler(&mut kernel, "rr", true).await.unwrap_err();
        let read = e.downcast_ref::<crate::dataplane::Error>();
        assert!(
            read.is_some_and(|e| e.errno() == Some(libc::ENOENT)),
            "{e:#}"
        );
    }

    #[tokio::test]
    async fn init_only_writes_the_sysctls_through_the_dataplane() {
        let mut kernel = Memory::default();
        let config = ProxyConfig::default();
        init_only(&mut kernel, &config).await.unwrap();
        let written: Vec<Op> = kernel.applied.iter().flat_map(|p| p.ops.clone()).collect();
        let want: Vec<Op> = sysctls(&config)
            .into_iter()
            .map(|(key, value)| Op::SetSysctl {
                key: key.into(),
                value: value.into(),
            })
            .collect();
        assert!(!want.is_empty());
        assert_eq!(written, want);
        assert!(kernel.applied.iter().all(|p| p.ops.len() == 1));
    }

    #[tokio::test]
    async fn the_host_set_up_follows_the_configuration() {
        let mut kp = KubeProxyConfiguration::defaults();
        let setup = host_setup(&kp, 2);
        assert_eq!(setup.oom_score_adj, -999);
        assert_eq!(setup.sysctls, kp.conntrack_sysctls(2));
        kp.oom_score_adj = Some(-5);
        assert_eq!(host_setup(&kp, 2).oom_score_adj, -5);
        let mut kernel = Memory::default();
        set_up_host(&mut kernel, &kp).await;
        assert_eq!(kernel.host_setups.len(), 1);
    }
}
