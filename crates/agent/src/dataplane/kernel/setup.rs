//! What the agent asks of the real kernel once at start: the scheduler probe and the host's
//! set-up.

use std::sync::Arc;

use super::{Kernel, blocking};
use crate::dataplane::Error;
use crate::dataplane::host::{self, HostSetup, HostStep};
use crate::dataplane::probe::{ProbeFailure, probe_key};

impl Kernel {
    /// See [`crate::dataplane::Dataplane::probe_scheduler`]. Skipped when a virtual server
    /// already uses the scheduler; the probe's is deleted at once.
    pub(super) async fn probe(&self, scheduler: &str) -> Result<(), ProbeFailure> {
        use ipvs_netlink::{Scheduler, Service};
        let services = self.ipvs.services().list().await;
        let services = services.map_err(|e| ProbeFailure::Unread(e.into()))?;
        if services.iter().any(|s| s.scheduler.name() == scheduler) {
            return Ok(());
        }
        self.modules.prepare(scheduler).await;
        let key = probe_key();
        let probe = Service::new(key, Scheduler::from_name(scheduler));
        match self.ipvs.services().add(&probe).await {
            Ok(()) => {
                let _ = self.ipvs.services().del_if_exists(&key).await;
                Ok(())
            }
            // Another agent's probe at the same moment: the scheduler is there.
            Err(e) if e.is_exists() => Ok(()),
            Err(e) => Err(ProbeFailure::Refused(e.into())),
        }
    }

    /// See [`crate::dataplane::Dataplane::set_up_host`]: the IPVS timeouts over netlink, then
    /// the files below `/proc` on the blocking pool.
    pub(super) async fn set_up(&self, setup: &HostSetup) -> Vec<(HostStep, Error)> {
        let mut failed = Vec::new();
        if let Some(timeouts) = &setup.ipvs_timeouts
            && let Err(e) = self.ipvs.timeouts().set(timeouts).await
        {
            failed.push((HostStep::IpvsTimeouts, e.into()));
        }
        let files = setup.clone();
        match blocking("host set-up", move || host::write_files(&files)).await {
            Ok(more) => failed.extend(more),
            Err(e) => {
                // Each file step went with the worker.
                let e = Arc::new(e);
                let steps = setup
                    .sysctls
                    .iter()
                    .map(|(k, _)| HostStep::Sysctl(k.clone()));
                for step in steps.chain([HostStep::OomScoreAdj]) {
                    failed.push((step, Error::Shared(Arc::clone(&e))));
                }
            }
        }
        failed
    }
}
