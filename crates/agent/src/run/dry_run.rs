//! `--dry-run`: the plan from an empty kernel and the iptables-restore input, printed.

use std::io::Write as _;
use std::process::ExitCode;

use crate::dataplane::host;
use crate::model::desired::desired;
use crate::model::desired::iptables::restore_input;
use crate::model::kernel::KernelState;
use crate::model::plan::{self, Op};
use crate::model::snapshot::cluster::Cluster;
use crate::model::snapshot::config::ProxyConfig;

/// Prints the plan from an empty kernel and the iptables-restore input, touching nothing.
pub async fn dry_run(cluster: &Cluster, config: &ProxyConfig) -> anyhow::Result<ExitCode> {
    // Reading addresses needs no privilege; without rtnetlink, plan with none.
    let host = host::facts().await;
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
                for e in entries.iter() {
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
