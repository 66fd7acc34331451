//! Removes what kube-proxy's iptables and nftables modes left on the node (see
//! [`crate::model::plan::leftovers`] for what and why), once per family, at the agent's first
//! write of its rules.

use std::process::Command;

use tracing::{info, warn};

use crate::model::plan::leftovers::{NFTABLES_MODE_TABLE, Sweep, nftables_mode_table, sweep};
use crate::model::snapshot::cluster::Family;

use super::Error;
use super::iptables::{self, Backend};

/// What one pass removed.
#[derive(Debug, Default)]
pub struct Removed {
    /// iptables mode's chains and jumps deleted.
    pub iptables: Sweep,
    /// Whether one of nftables mode's tables was deleted.
    pub nftables_table: bool,
    /// Whether a chain of iptables mode is still there because one of the agent's own chains
    /// jumps to it: the pass is to be repeated after the agent's next write.
    pub again: bool,
}

/// Removes iptables mode's chains of `family` (on `backend`: the rules another mode wrote
/// live where the node's iptables does) and nftables mode's `kube-proxy` tables, of both
/// families as kube-proxy's IPVS mode removes them (nftables mode may have served a family
/// the agent does not).
pub fn remove(backend: Backend, family: Family) -> Result<Removed, Error> {
    let save = iptables::save(backend, family, None)?;
    let swept = sweep(&save);
    // Chains the agent's own still jump to go at the pass after its first write; any other
    // jump to one is another program's, which the agent does not touch.
    if !swept.waits_for_the_agent() {
        for (table, chain, from) in &swept.kept {
            warn!(%table, %chain, referred_by = %from, ?family, "kube-proxy iptables mode's chain left in place: another chain jumps to it");
        }
    }
    if !swept.is_empty() {
        iptables::restore(backend, family, &swept.restore_input())?;
        info!(
            ?family,
            chains = swept.chains.len(),
            jumps = swept.jumps.len(),
            "removed kube-proxy iptables mode's leftovers"
        );
    }
    let nftables_table = remove_nftables_tables()?;
    Ok(Removed {
        again: swept.waits_for_the_agent(),
        iptables: swept,
        nftables_table,
    })
}

/// Deletes `table ip kube-proxy` and `table ip6 kube-proxy`, nftables mode's, those listed;
/// whether one was. No `nft` to ask deletes nothing (then nftables mode cannot have run from
/// this image either, but it can from kube-proxy's: say so).
fn remove_nftables_tables() -> Result<bool, Error> {
    let Some(list) = nft(&["list", "tables"])? else {
        warn!("no nft program: a kube-proxy nftables mode's table, if any, is left in place");
        return Ok(false);
    };
    let mut removed = false;
    for name in ["ip", "ip6"] {
        if nftables_mode_table(&list, name) {
            nft(&["delete", "table", name, NFTABLES_MODE_TABLE])?;
            info!(table = %format!("{name} {NFTABLES_MODE_TABLE}"), "removed kube-proxy nftables mode's table");
            removed = true;
        }
    }
    Ok(removed)
}

/// Runs `nft` with `args`: its output, or `None` when there is no `nft` program.
fn nft(args: &[&str]) -> Result<Option<String>, Error> {
    let out = match Command::new("nft").args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Exec {
                program: "nft".into(),
                source: e,
            });
        }
    };
    if !out.status.success() {
        return Err(Error::Tool {
            program: "nft".into(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
}
