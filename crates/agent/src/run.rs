//! The agent's modes (`--dry-run`, `--cleanup`, `--once`, the long-running proxy), wiring the
//! source, the sync loop and the dataplane.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::cli::Args;
use crate::dataplane::kernel::Kernel;
use crate::dataplane::link::Links;
use crate::dataplane::{Dataplane, Observation};
use crate::model::cluster::Cluster;
use crate::model::desired::{Host, desired, sysctls};
use crate::model::iptables::restore_input;
use crate::model::kernel::KernelState;
use crate::model::plan::{self, Op};
use crate::source::manifests;
use crate::sync::{self, Periods, Syncer};

/// Runs the mode the command line asks for.
pub async fn main(args: Arc<Args>) -> anyhow::Result<ExitCode> {
    let config = args.config()?;
    if args.cleanup {
        let mut kernel = Kernel::connect(config.families.clone(), Vec::new()).await?;
        let Observation { state, .. } = kernel.observe().await?;
        let p = plan::cleanup(&state, &config.exclude_cidrs);
        let applied = kernel.apply(&p).await?;
        for (op, e) in &applied.failed {
            warn!(op = %op, error = %e, "cleanup step failed");
        }
        info!(
            done = applied.done,
            failed = applied.failed.len(),
            "cleanup finished"
        );
        return Ok(if applied.failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let Some(path) = args.manifests.clone() else {
        bail!(
            "no source: give --manifests PATH (the API-server source arrives with the cluster issue)"
        );
    };
    let first = load(&path, &config.node_name)?;
    if args.dry_run {
        return dry_run(&first, &config).await;
    }
    let sysctl_keys = sysctls(&config).into_keys().collect();
    let kernel = Kernel::connect(config.families.clone(), sysctl_keys)
        .await
        .context("cannot reach the kernel's IPVS (is the ip_vs module loaded?)")?;
    info!(backend = ?kernel.backend(), node = %config.node_name, "kube-proxy-ipvs starting");
    let mut syncer = Syncer::new(kernel, config.clone());
    if args.once {
        let report = syncer.sync(&first, true).await?;
        for w in &report.warnings {
            warn!("{w}");
        }
        for (op, e) in &report.applied.failed {
            warn!(op = %op, error = %e, "operation failed");
        }
        info!(
            ops = report.plan.ops.len(),
            messages = report.applied.messages,
            failed = report.applied.failed.len(),
            "synced once"
        );
        return Ok(if report.applied.failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let (tx, rx) = watch::channel(Some(Arc::new(first)));
    let node = config.node_name.clone();
    let (changed_tx, mut changes) = tokio::sync::mpsc::channel(1);
    tokio::spawn(manifests::watch(
        path.clone(),
        std::time::Duration::from_millis(500),
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
    let periods = Periods {
        sync: args.ipvs_sync_period,
        min_sync: args.ipvs_min_sync_period,
    };
    let shutdown = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
        info!("shutting down; the kernel state stays in place");
    };
    sync::run(&mut syncer, rx, periods, shutdown, |_| {}).await;
    Ok(ExitCode::SUCCESS)
}

/// Loads the manifests (rejected objects are logged by the loader).
fn load(path: &Path, node: &str) -> anyhow::Result<Cluster> {
    let loaded =
        manifests::load(path, node).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(loaded.cluster)
}

/// Prints the plan from an empty kernel and the iptables-restore input, touching nothing.
async fn dry_run(
    cluster: &Cluster,
    config: &crate::model::config::ProxyConfig,
) -> anyhow::Result<ExitCode> {
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
