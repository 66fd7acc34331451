//! Which IP families the node serves, decided as kube-proxy decides it
//! (`cmd/kube-proxy/app`, `platformCheckSupported`): a family is served when its iptables
//! works on the host (the `nat` table's POSTROUTING chain can be listed), and IPv6 also needs
//! the kernel's IPv6 (`/proc/net/if_inet6`, `net.ipv6.conf.all.disable_ipv6` not 1). With both,
//! the node is dual-stack; the flags' CIDRs (`--cluster-cidr` of one family) turn no family
//! off. kube-proxy's primary family (from the node IP) orders its two proxiers and its log
//! lines; both families' state is programmed either way.

use std::process::Command;

use crate::model::snapshot::cluster::Family;

use super::iptables::Backend;

/// A family and whether it can be served, with the reason when not.
fn check(backend: Backend, family: Family) -> Result<(), String> {
    if family == Family::V6 {
        if !std::path::Path::new("/proc/net/if_inet6").exists() {
            return Err("the kernel has no IPv6 (/proc/net/if_inet6)".into());
        }
        let disabled = std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/disable_ipv6")
            .is_ok_and(|v| v.trim() == "1");
        if disabled {
            return Err("net.ipv6.conf.all.disable_ipv6 is 1".into());
        }
    }
    let tool = backend.tool(family, "");
    match Command::new(&tool)
        .args(["-w", "5", "-t", "nat", "-S", "POSTROUTING"])
        .output()
    {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{tool} cannot list nat POSTROUTING: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run {tool}: {e}")),
    }
}

/// The families the host can serve, each refusal logged with its reason; IPv4 alone (with an
/// error logged) when neither works, so the failure shows where the rules are written.
pub fn usable(backend: Backend) -> Vec<Family> {
    let mut out = Vec::new();
    for family in [Family::V4, Family::V6] {
        match check(backend, family) {
            Ok(()) => out.push(family),
            Err(why) => tracing::info!(?family, reason = %why, "not serving this IP family"),
        }
    }
    if out.is_empty() {
        tracing::error!("neither IP family is usable on this host; trying IPv4");
        out.push(Family::V4);
    }
    out
}
