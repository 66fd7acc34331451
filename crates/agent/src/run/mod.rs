//! The agent's modes (`--write-config-to`, `--dry-run`, `--cleanup`, `--init-only`, `--once`,
//! the long-running proxy), wiring a source (manifests or the API server), the sync loop, the
//! dataplane, and the health and metrics servers.
//!
//! # Layout
//! - `source`: where snapshots come from: manifests or the API server.
//! - `start`: the kernel connected and the host prepared as kube-proxy does at start.
//! - `proxy`: the long-running proxy: the sync loop until SIGTERM, the servers beside it.
//! - `health_check_ports`: the health-check node ports, following the snapshots.
//! - `dry_run`: `--dry-run`'s plan, printed.
//! - `tasks`: every task started beside the sync loop, all ended before the agent exits.

mod dry_run;
mod health_check_ports;
mod proxy;
mod source;
mod start;
mod tasks;

use std::process::ExitCode;

use tracing::{info, warn};

use self::source::{Snapshots, Source, first_snapshot};
use self::tasks::Tasks;
use crate::cli::Settings;
use crate::dataplane::kernel::Kernel;
use crate::dataplane::{Dataplane, Observation, families};
use crate::model::plan;
use crate::model::snapshot::config::ProxyConfig;
use crate::sync::Syncer;

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
    let tasks = Tasks::default();
    let outcome = serve(&settings, &tasks).await;
    // Whatever the mode and however it ended, nothing it started outlives it.
    tasks.end().await;
    outcome
}

/// The modes that read a source: `--dry-run`, `--init-only`, `--once` and the long-running
/// proxy, whose tasks run on `tasks`.
async fn serve(settings: &Settings, tasks: &Tasks) -> anyhow::Result<ExitCode> {
    let args = &settings.args;
    let daemon = !(args.dry_run || args.once);
    let mut source = Source::start(settings, daemon, tasks).await?;
    if args.dry_run {
        let first = first_snapshot(&mut source.snapshots).await?;
        return dry_run::dry_run(&first, &settings.proxy).await;
    }
    let (mut kernel, config) = start::prepare_kernel(settings).await?;
    if args.init_only {
        start::init_only(&mut kernel, &config).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut syncer = Syncer::new(kernel, config.clone());
    // A plan that went in whole moves into the shadow; the reports count it.
    syncer.keep_plans(false);
    if args.once {
        return once(&mut syncer, &mut source.snapshots).await;
    }
    proxy::proxy(settings, &config, syncer, source, tasks).await;
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

/// `--once`: one full sync of the source's first complete snapshot; failure when any
/// operation failed.
async fn once(syncer: &mut Syncer<Kernel>, snapshots: &mut Snapshots) -> anyhow::Result<ExitCode> {
    let first = first_snapshot(snapshots).await?;
    let report = syncer.sync(&first, true).await?;
    for w in &report.warnings {
        warn!(warning = w.kind(), "{w}");
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
