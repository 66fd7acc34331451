//! IPVS through ipvs-netlink: reading the virtual servers with their real servers, sending
//! the plan's IPVS operations in batches, and the conversions between the model and the
//! library.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use futures::{StreamExt, TryStreamExt};
use ipvs_netlink::{Destination, ForwardMethod, Scheduler, Service, ServiceFlags, ServiceKey};
use tracing::{debug, warn};

use super::Kernel;
use crate::dataplane::{Applied, Error, RealServers, Traffic};
use crate::model::kernel::rolling::Part;
use crate::model::kernel::{Connections, RealServer, VirtualServer, VsKey};
use crate::model::plan::{Op, Plan};
use crate::model::snapshot::cluster::Protocol;

/// IPVS operations per batch: a batch holds every request encoded (twice for
/// add-or-update), so a cold sync sends its tens of thousands in slices of this many.
const IPVS_CHUNK: usize = 512;

/// Sockets each reader of real servers dumps over, one dump in flight on each (the kernel
/// runs one dump per socket at a time): while the reader decodes one reply, the kernel fills
/// the next.
pub(super) const DUMP_SOCKETS: usize = 2;
/// Threads that read real servers beside the agent's own, each with its own runtime and
/// sockets: the reading of a full sync (one dump per virtual server) uses a second core.
const DUMP_THREADS: usize = 1;
/// Virtual servers from which the reading is shared with threads: below, a thread and its
/// sockets cost more than they save.
const SHARED_FROM: usize = 256;
/// Service dumps made at most to get two in a row that agree: IPVS resumes a long dump by a
/// position counted over every network namespace's services, so another namespace's changes
/// can make one dump repeat or skip ours (a skipped leftover would never be deleted).
const SERVICE_DUMPS: usize = 8;

impl Kernel {
    /// Reads the real servers of `keys` over the dump sockets, one dump in flight on each.
    pub(super) async fn read_real_servers(
        &self,
        keys: &[VsKey],
    ) -> Result<Vec<(VsKey, Option<RealServers>)>, Error> {
        let sockets: &[ipvs_netlink::Handle] = if self.dumpers.is_empty() {
            std::slice::from_ref(&self.ipvs)
        } else {
            &self.dumpers
        };
        let n = sockets.len();
        futures::stream::iter(keys.iter().copied().enumerate())
            .map(|(j, key)| {
                let ipvs = sockets[j % n].clone();
                async move {
                    match ipvs.destinations(&ipvs_key(&key)).list().await {
                        Ok(dests) => Ok((key, Some(real_servers(&dests)))),
                        // Deleted behind the agent's back: the plan adds it again.
                        Err(e) if e.is_not_found() => Ok((key, None)),
                        Err(e) => Err(ipvs_error(&format!("list destinations of {key}"), e)),
                    }
                }
            })
            .buffered(n)
            .try_collect()
            .await
    }

    /// Sends the IPVS operations of `plan` at `indices` in batches of [`IPVS_CHUNK`].
    pub(super) async fn apply_ipvs(&self, plan: &Plan, indices: &[usize], applied: &mut Applied) {
        let batches = indices.len().div_ceil(IPVS_CHUNK);
        for (n, chunk) in indices.chunks(IPVS_CHUNK).enumerate() {
            let t = Instant::now();
            let mut batch = self.ipvs.batch();
            let mut queued: Vec<usize> = Vec::with_capacity(chunk.len());
            for i in chunk {
                match &plan.ops[*i] {
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
    let RealServers {
        destinations,
        connections,
    } = real_servers(dests);
    VirtualServer {
        scheduler: svc.scheduler.name().into(),
        sched_flags: (svc.flags & sched_mask).bits(),
        persistence: svc
            .flags
            .contains(ServiceFlags::PERSISTENT)
            .then_some(svc.timeout),
        destinations,
        connections,
    }
}

fn real_servers(dests: &[Destination]) -> RealServers {
    let addr = |d: &Destination| RealServer::new(d.address, d.port);
    RealServers {
        destinations: dests.iter().map(|d| (addr(d), d.weight)).collect(),
        connections: dests
            .iter()
            .map(|d| {
                let c = Connections {
                    active: d.active_connections,
                    inactive: d.inactive_connections,
                };
                (addr(d), c)
            })
            .collect(),
    }
}

fn ipvs_service(key: &VsKey, vs: &VirtualServer) -> Service {
    let mut svc = Service::new(ipvs_key(key), Scheduler::from_name(vs.scheduler.as_str()));
    if let Some(timeout) = vs.persistence {
        svc = svc.persistent(timeout.max(Duration::from_secs(1)));
    }
    svc.flags |= ServiceFlags::from_bits_truncate(vs.sched_flags);
    svc
}

fn ipvs_destination(addr: &RealServer, weight: u32) -> Destination {
    let mut d = Destination::new(addr.ip(), addr.port(), ForwardMethod::Masquerade);
    d.weight = weight;
    d
}

/// Real servers read, each with its virtual server's position in the list.
type Read = Vec<(usize, Result<(VsKey, VirtualServer), Error>)>;

/// A virtual server to read the real servers of: its position in the list, its key, and the
/// virtual server as listed, without them.
type ToRead = (usize, VsKey, VirtualServer);

/// What a listing keeps of each IPVS service: the virtual server without its real servers
/// and, when asked, what IPVS counted (a third of the 300 bytes the library's service takes).
struct Kept {
    vs: VirtualServer,
    traffic: Option<Traffic>,
}

/// Every IPVS virtual server of ours, listed over `ipvs`, with the real servers of those
/// `part` selects (all without one) dumped over `dumpers`; the keys of those whose real
/// servers were not read come second; with `traffic`, what IPVS counted for each, from the
/// list (every virtual server's, whatever `part` reads), third.
pub(super) async fn observe_services(
    ipvs: &ipvs_netlink::Handle,
    dumpers: &[ipvs_netlink::Handle],
    part: Option<&Part>,
    traffic: bool,
) -> Result<
    (
        BTreeMap<VsKey, VirtualServer>,
        BTreeSet<VsKey>,
        BTreeMap<VsKey, Traffic>,
    ),
    Error,
> {
    let keep = |s: Service| Kept {
        vs: virtual_server(&s, &[]),
        traffic: traffic.then(|| counts(&s)),
    };
    let listing = ipvs
        .services()
        .list_consistent_with(SERVICE_DUMPS, keep)
        .await
        .map_err(|e| ipvs_error("list IPVS services", e))?;
    if !listing.settled {
        // Another namespace kept changing IPVS through every dump: what any dump listed
        // (a service of ours is missing only if every dump skipped it).
        warn!(
            dumps = listing.dumps,
            "the IPVS service list did not settle (another network namespace kept changing IPVS); using every service the dumps listed"
        );
    }
    let mut counted = Vec::new();
    let (mut ours, mut unread) = (Vec::new(), Vec::new());
    for (key, kept) in listing.services {
        let Some(key) = vs_key(&key) else { continue };
        if let Some(traffic) = kept.traffic {
            counted.push((key, traffic));
        }
        if part.is_none_or(|p| p.reads(&key)) {
            ours.push((key, kept.vs));
        } else {
            unread.push((key, kept.vs));
        }
    }
    // Virtual server i is read by reader i % readers: the shares are alike in size
    // and mix large and small servers.
    let readers = if ours.len() >= SHARED_FROM {
        DUMP_THREADS + 1
    } else {
        1
    };
    let mut shares: Vec<Vec<ToRead>> = (0..readers)
        .map(|_| Vec::with_capacity(ours.len().div_ceil(readers)))
        .collect();
    for (i, (key, vs)) in ours.into_iter().enumerate() {
        shares[i % readers].push((i, key, vs));
    }
    let mut here = shares.remove(0);
    let mut threads = Vec::new();
    for share in shares {
        match spawn_reader(share) {
            Ok(thread) => threads.push(thread),
            // No thread: this one reads that share too.
            Err(share) => here.extend(share),
        }
    }
    let mut read = read_destinations(dumpers, here).await;
    for thread in threads {
        match thread.await {
            Ok(more) => read.extend(more),
            Err(_) => return Err(Error::WorkerStopped("IPVS reader")),
        }
    }
    // The first failure in the services' order, whatever reader met it.
    read.sort_unstable_by_key(|(i, _)| *i);
    let mut services = Vec::with_capacity(read.len() + unread.len());
    for (_, r) in read {
        services.push(r?);
    }
    let keys = unread.iter().map(|(key, _)| *key).collect();
    services.extend(unread);
    // Collected whole, the maps are built packed (inserted one by one, half full).
    Ok((
        services.into_iter().collect(),
        keys,
        counted.into_iter().collect(),
    ))
}

/// What IPVS counted for `svc`: its 64-bit counters, or the 32-bit ones from a kernel
/// without them (before 4.1), or nothing counted.
fn counts(svc: &Service) -> Traffic {
    let s = svc.stats64.or(svc.stats).unwrap_or_default();
    Traffic {
        connections: s.conns,
        in_packets: s.in_packets,
        out_packets: s.out_packets,
        in_bytes: s.in_bytes,
        out_bytes: s.out_bytes,
    }
}

/// Reads the real servers of `services` over `sockets`, one dump in flight on each.
async fn read_destinations(sockets: &[ipvs_netlink::Handle], services: Vec<ToRead>) -> Read {
    let n = sockets.len().max(1);
    // `buffered` keeps at most n consecutive services in flight, so the socket of service
    // j (j % n) is never asked twice at once.
    futures::stream::iter(services.into_iter().enumerate())
        .map(|(j, (i, key, mut vs))| {
            let ipvs = sockets[j % n].clone();
            async move {
                let read = ipvs
                    .destinations(&ipvs_key(&key))
                    .list()
                    .await
                    .map(|dests| {
                        let read = real_servers(&dests);
                        vs.destinations = read.destinations;
                        vs.connections = read.connections;
                        (key, vs)
                    })
                    .map_err(|e| ipvs_error(&format!("list destinations of {key}"), e));
                (i, read)
            }
        })
        .buffered(n)
        .collect()
        .await
}

/// Starts a thread (in the caller's network namespace) that reads the real servers of
/// `services` over sockets of its own; gives the services back when no thread can start.
fn spawn_reader(services: Vec<ToRead>) -> Result<oneshot::Receiver<Read>, Vec<ToRead>> {
    // The services go over once the thread runs, so a failed start keeps them here.
    let (work_tx, work_rx) = std::sync::mpsc::channel();
    let (tx, rx) = oneshot::channel();
    let started = std::thread::Builder::new()
        .name("kernel-ipvs-reader".into())
        .spawn(move || {
            if let Ok(services) = work_rx.recv() {
                let _ = tx.send(read_on_thread(services));
            }
        });
    match started {
        Ok(_) => match work_tx.send(services) {
            Ok(()) => Ok(rx),
            Err(std::sync::mpsc::SendError(services)) => Err(services),
        },
        Err(_) => Err(services),
    }
}

/// The work of a reader thread: a runtime and sockets of its own, then the dumps.
fn read_on_thread(services: Vec<ToRead>) -> Read {
    let fail = |services: Vec<ToRead>, e: Error| {
        let e = Arc::new(e);
        services
            .into_iter()
            .map(|(i, _, _)| (i, Err(Error::Shared(e.clone()))))
            .collect()
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(source) => {
            let what = "start the IPVS reader's runtime";
            return fail(services, Error::Io { what, source });
        }
    };
    rt.block_on(async {
        match connect_sockets().await {
            Ok(sockets) => read_destinations(&sockets, services).await,
            Err(e) => fail(services, e),
        }
    })
}

/// [`DUMP_SOCKETS`] connections to IPVS.
pub(super) async fn connect_sockets() -> Result<Vec<ipvs_netlink::Handle>, Error> {
    let mut sockets = Vec::with_capacity(DUMP_SOCKETS);
    for _ in 0..DUMP_SOCKETS {
        let socket = ipvs_netlink::connect()
            .await
            .map_err(|e| ipvs_error("connect to IPVS", e))?;
        sockets.push(socket);
    }
    Ok(sockets)
}

/// `e` as the failure of `what`, a request that is no operation of a plan.
pub(super) fn ipvs_error(what: &str, e: ipvs_netlink::Error) -> Error {
    Error::request(what, e)
}
