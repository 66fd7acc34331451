//! The host's set-up at start, as kube-proxy makes it once (IPVS timeouts, conntrack sysctls,
//! the OOM score), and the host's facts as a read without privilege finds them.

use std::path::Path;

use super::link::Links;
use super::{Error, sysctl};
use crate::model::desired::Host;

/// What kube-proxy sets up on the host once at start, whatever the Services.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostSetup {
    /// The IPVS connection timeouts; `None` leaves the kernel's (all three zero in the
    /// configuration, as kube-proxy).
    pub ipvs_timeouts: Option<ipvs_netlink::Timeouts>,
    /// Sysctls as (key below `/proc/sys`, value), written in order: conntrack's.
    pub sysctls: Vec<(String, String)>,
    /// The agent's own `oom_score_adj`.
    pub oom_score_adj: i32,
}

/// One step of a [`HostSetup`], named when it fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostStep {
    /// Setting the IPVS timeouts.
    IpvsTimeouts,
    /// Writing this sysctl.
    Sysctl(String),
    /// Writing the OOM score adjustment.
    OomScoreAdj,
}

/// Writes the sysctls of `setup`, then its OOM score; each failure is reported and the
/// steps after it still run (the agent serves without any of them).
pub fn write_files(setup: &HostSetup) -> Vec<(HostStep, Error)> {
    let mut failed = Vec::new();
    for (key, value) in &setup.sysctls {
        if let Err(e) = sysctl::write(key, value) {
            failed.push((HostStep::Sysctl(key.clone()), e));
        }
    }
    let oom = Path::new("/proc/self/oom_score_adj");
    if let Err(e) = std::fs::write(oom, setup.oom_score_adj.to_string()) {
        failed.push((HostStep::OomScoreAdj, Error::OomScoreAdj(e)));
    }
    failed
}

/// The host's addresses, which need no privilege to read; none when rtnetlink cannot be
/// reached (`--dry-run` then plans without them).
pub async fn facts() -> Host {
    let Ok(links) = Links::connect() else {
        return Host::default();
    };
    match (links.interfaces().await, links.addresses().await) {
        (Ok(i), Ok(a)) => Host {
            addresses: Links::local_addresses(&i, &a),
        },
        _ => Host::default(),
    }
}
