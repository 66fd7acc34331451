//! IPVS through ipvs-netlink: reading the virtual servers with their real servers, sending
//! the plan's IPVS operations in batches, and the conversions between the model and the
//! library.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ipvs_netlink::{Destination, ForwardMethod, Scheduler, Service, ServiceFlags, ServiceKey};
use tracing::{debug, warn};

use super::Kernel;
use crate::dataplane::{Applied, Error};
use crate::model::cluster::Protocol;
use crate::model::kernel::{Connections, VirtualServer, VsKey};
use crate::model::plan::Op;

/// IPVS operations per batch: a batch holds every request encoded (twice for
/// add-or-update), so a cold sync sends its tens of thousands in slices of this many.
const IPVS_CHUNK: usize = 512;

/// Destination dumps in flight while observing: the kernel runs one dump per socket at a time.
const DUMP_CONCURRENCY: usize = 1;
/// Service dumps made at most to get two in a row that agree: IPVS resumes a long dump by a
/// position counted over every network namespace's services, so another namespace's changes
/// can make one dump repeat or skip ours (a skipped leftover would never be deleted).
const SERVICE_DUMPS: usize = 8;

impl Kernel {
    pub(super) async fn observe_services(&self) -> Result<BTreeMap<VsKey, VirtualServer>, Error> {
        let services = match self.ipvs.services().list_consistent(SERVICE_DUMPS).await {
            Ok(services) => services,
            // Another namespace kept changing IPVS through every dump: what any dump listed
            // (a service of ours is missing only if every dump skipped it).
            Err(ipvs_netlink::Error::Unsettled { dumps, seen }) => {
                warn!(
                    dumps,
                    "the IPVS service list did not settle (another network namespace kept changing IPVS); using every service the dumps listed"
                );
                seen
            }
            Err(e) => return Err(ipvs_error("list IPVS services", e)),
        };
        let ours: Vec<(VsKey, Service)> = services
            .into_iter()
            .filter_map(|s| vs_key(&s.key).map(|k| (k, s)))
            .collect();
        let ipvs = self.ipvs.clone();
        let with_dests: Vec<Result<(VsKey, VirtualServer), Error>> = futures::stream::iter(ours)
            .map(|(key, svc)| {
                let ipvs = ipvs.clone();
                async move {
                    let dests = ipvs
                        .destinations(&svc.key)
                        .list()
                        .await
                        .map_err(|e| ipvs_error(&format!("list destinations of {key}"), e))?;
                    Ok((key, virtual_server(&svc, &dests)))
                }
            })
            .buffer_unordered(DUMP_CONCURRENCY)
            .collect()
            .await;
        with_dests.into_iter().collect()
    }

    /// Sends IPVS operations in batches of [`IPVS_CHUNK`].
    pub(super) async fn apply_ipvs(&self, ops: &[(usize, &Op)], applied: &mut Applied) {
        let batches = ops.len().div_ceil(IPVS_CHUNK);
        for (n, chunk) in ops.chunks(IPVS_CHUNK).enumerate() {
            let t = Instant::now();
            let mut batch = self.ipvs.batch();
            let mut queued: Vec<usize> = Vec::with_capacity(chunk.len());
            for (i, op) in chunk {
                match op {
                    Op::AddService { key, service } => {
                        // Planned because the observation did not list it; it may still exist
                        // (a large dump that another namespace's changes made skip it, or one
                        // made since): then it is set to what was asked, as an update would.
                        batch.add_or_update_service(&ipvs_service(key, service));
                    }
                    Op::UpdateService { key, service } => {
                        batch.set_service(&ipvs_service(key, service));
                    }
                    Op::DelService(key) => {
                        batch.del_service_if_exists(&ipvs_key(key));
                    }
                    Op::AddDestination {
                        key,
                        destination,
                        weight,
                    } => {
                        batch.add_or_update_destination(
                            &ipvs_key(key),
                            &ipvs_destination(destination, *weight),
                        );
                    }
                    Op::UpdateDestination {
                        key,
                        destination,
                        weight,
                    } => {
                        batch.set_destination(
                            &ipvs_key(key),
                            &ipvs_destination(destination, *weight),
                        );
                    }
                    Op::DelDestination { key, destination } => {
                        batch.del_destination_if_exists(
                            &ipvs_key(key),
                            &destination.ip(),
                            destination.port(),
                        );
                    }
                    _ => continue,
                }
                queued.push(*i);
            }
            match batch.send().await {
                Ok(outcome) => {
                    applied.messages += queued.len();
                    for (i, r) in queued.iter().zip(outcome.into_results()) {
                        match r {
                            Ok(()) => applied.done += 1,
                            Err(e) => applied.failed.push((*i, e.into())),
                        }
                    }
                }
                Err(e) => {
                    let e = Arc::new(Error::from(e));
                    for i in queued {
                        applied.failed.push((i, Error::Shared(e.clone())));
                    }
                }
            }
            // The progress of a long apply (a cold sync sends tens of batches).
            debug!(batch = n + 1, of = batches, ops = chunk.len(), elapsed = ?t.elapsed(), "sent an IPVS batch");
        }
    }
}

fn vs_key(key: &ServiceKey) -> Option<VsKey> {
    match key {
        ServiceKey::Inet {
            protocol,
            address,
            port,
        } => {
            let protocol = match protocol {
                ipvs_netlink::Protocol::Tcp => Protocol::Tcp,
                ipvs_netlink::Protocol::Udp => Protocol::Udp,
                ipvs_netlink::Protocol::Sctp => Protocol::Sctp,
                _ => return None,
            };
            Some(VsKey {
                address: *address,
                protocol,
                port: *port,
            })
        }
        ServiceKey::Fwmark { .. } => None,
    }
}

fn ipvs_key(key: &VsKey) -> ServiceKey {
    match key.protocol {
        Protocol::Tcp => ServiceKey::tcp(key.address, key.port),
        Protocol::Udp => ServiceKey::udp(key.address, key.port),
        Protocol::Sctp => ServiceKey::sctp(key.address, key.port),
    }
}

fn virtual_server(svc: &Service, dests: &[Destination]) -> VirtualServer {
    let sched_mask = ServiceFlags::SCHED1 | ServiceFlags::SCHED2 | ServiceFlags::SCHED3;
    VirtualServer {
        scheduler: svc.scheduler.name().to_string(),
        sched_flags: (svc.flags & sched_mask).bits(),
        persistence: svc
            .flags
            .contains(ServiceFlags::PERSISTENT)
            .then_some(svc.timeout),
        destinations: dests
            .iter()
            .map(|d| (std::net::SocketAddr::new(d.address, d.port), d.weight))
            .collect(),
        connections: dests
            .iter()
            .map(|d| {
                let c = Connections {
                    active: d.active_connections,
                    inactive: d.inactive_connections,
                };
                (std::net::SocketAddr::new(d.address, d.port), c)
            })
            .collect(),
    }
}

fn ipvs_service(key: &VsKey, vs: &VirtualServer) -> Service {
    let mut svc = Service::new(ipvs_key(key), Scheduler::from_name(&vs.scheduler));
    if let Some(timeout) = vs.persistence {
        svc = svc.persistent(timeout.max(Duration::from_secs(1)));
    }
    svc.flags |= ServiceFlags::from_bits_truncate(vs.sched_flags);
    svc
}

fn ipvs_destination(addr: &std::net::SocketAddr, weight: u32) -> Destination {
    let mut d = Destination::new(addr.ip(), addr.port(), ForwardMethod::Masquerade);
    d.weight = weight;
    d
}

/// `e` as the failure of `what`, a request that is no operation of a plan.
pub(super) fn ipvs_error(what: &str, e: ipvs_netlink::Error) -> Error {
    Error::request(what, e)
}
