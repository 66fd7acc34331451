//! The real kernel: IPVS over generic netlink (ipvs-netlink), the KUBE-* sets over libipset
//! (ipset), `kube-ipvs0` over rtnetlink, the rules with one `iptables-restore` per family, and
//! sysctls. Operations of one kind that follow each other in a plan travel together: IPVS
//! changes in one netlink batch, set changes in libipset's restore mode, address changes
//! concurrently.
//!
//! Additions of different kinds also overlap: a run of address bindings (slow: the kernel
//! walks the link's address list for every insert) and a run of set-entry additions each go to
//! a worker thread with its own socket while the plan goes on with the rules and the IPVS
//! batch, which lets a cold sync use a second core and programs the first Services early.
//! Every removal, and every operation that is not an addition, waits for the workers first, so
//! "everything new is added before anything old is removed" still holds.
//!
//! The VIPs ("addresses" in the plan) are bound as addresses or as `local` routes according
//! to `--vip-binding` ([`super::vip`]); both forms are read as the link's addresses.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::oneshot;
use ipvs_netlink::{Destination, ForwardMethod, Scheduler, Service, ServiceFlags, ServiceKey};
use std::time::Instant;
use tracing::{debug, warn};

use super::iptables::{self, Backend, Written};
use super::link::{Address, BRIDGE_ROUTE_METRIC, Links, VIP_ROUTE_METRIC};
use super::modules::Preloader;
use super::vip::{self, Bindings, Step};
use super::{Applied, Dataplane, Error, Observation, sysctl};
use crate::model::cluster::{Family, Protocol};
use crate::model::config::VipBinding;
use crate::model::desired::Host;
use crate::model::iptables::{removal_input, restore_input};
use crate::model::kernel::{
    Connections, KernelState, LINK_NAME, Set, SetEntry, SetKind, VirtualServer, VsKey,
};
use crate::model::plan::{Op, Plan};
use crate::model::sets::{self, set_name};

/// IPVS operations per batch: a batch holds every request encoded (twice for
/// add-or-update), so a cold sync sends its tens of thousands in slices of this many.
const IPVS_CHUNK: usize = 512;

/// Destination dumps in flight while observing: the kernel runs one dump per socket at a time.
const DUMP_CONCURRENCY: usize = 1;
/// Service dumps made at most to get two in a row that agree: IPVS resumes a long dump by a
/// position counted over every network namespace's services, so another namespace's changes
/// can make one dump repeat or skip ours (a skipped leftover would never be deleted).
const SERVICE_DUMPS: usize = 8;

/// The real kernel.
pub struct Kernel {
    ipvs: ipvs_netlink::Handle,
    links: Links,
    backend: Backend,
    families: Vec<Family>,
    sysctl_keys: Vec<String>,
    written: Written,
    link_index: Option<u32>,
    /// `lo`'s index, for the bridge routes of a switch of binding.
    lo_index: Option<u32>,
    /// `kube-ipvs0`'s addresses as last observed, to delete them by message.
    bound: BTreeMap<IpAddr, Address>,
    /// How new VIPs are bound.
    vip_binding: VipBinding,
    /// The VIPs' bindings as last observed, kept up to date by the changes sent since.
    vips: Bindings,
    /// Scheduler modules loaded before IPVS's first use of them.
    modules: Preloader,
}

impl Kernel {
    /// Connects to the kernel: resolves the IPVS family (fails with a hint when `ip_vs` is
    /// not loaded) and picks the iptables backend the node uses.
    pub async fn connect(families: Vec<Family>, sysctl_keys: Vec<String>) -> Result<Kernel, Error> {
        let ipvs = ipvs_netlink::connect()
            .await
            .map_err(|e| ipvs_error("connect to IPVS", e))?;
        let links = Links::connect()?;
        let backend = Backend::detect()?;
        debug!(?backend, "iptables backend");
        Ok(Kernel {
            ipvs,
            links,
            backend,
            families,
            sysctl_keys,
            written: Written::default(),
            link_index: None,
            lo_index: None,
            bound: BTreeMap::new(),
            vip_binding: VipBinding::default(),
            vips: Bindings::default(),
            modules: Preloader::default(),
        })
    }

    /// Serves `families` from now on (the host's usable families, known once the backend
    /// is).
    pub fn set_families(&mut self, families: Vec<Family>) {
        self.families = families;
    }

    /// Binds new VIPs as `mode` says from now on (see [`Kernel::rebind_vips`] for those
    /// already bound).
    pub fn set_vip_binding(&mut self, mode: VipBinding) {
        self.vip_binding = mode;
    }

    /// Moves every VIP bound on `kube-ipvs0` into the form of the binding set with
    /// [`Kernel::set_vip_binding`] (addresses to routes or back), so that a node switches
    /// binding at the agent's start without a moment in which a VIP is not local. Finishes
    /// a switch that was cut short. Failures are reported, not returned.
    pub async fn rebind_vips(&mut self) -> Result<Rebound, Error> {
        self.read_bindings().await?;
        Ok(self.converge(&BTreeSet::new()).await)
    }

    /// Reads `kube-ipvs0`, `lo`, every address and the agent's routes; returns the
    /// interfaces and addresses for the host's facts.
    async fn read_bindings(&mut self) -> Result<(BTreeMap<u32, String>, Vec<Address>), Error> {
        let interfaces = self.links.interfaces().await?;
        let addresses = self.links.addresses().await?;
        let routes = self.links.vip_routes().await?;
        let index_of = |name: &str| interfaces.iter().find(|(_, n)| *n == name).map(|(i, _)| *i);
        self.link_index = index_of(LINK_NAME);
        self.lo_index = index_of("lo");
        self.bound.clear();
        self.vips = Bindings::default();
        for a in &addresses {
            if Some(a.index) == self.link_index {
                self.vips.addresses.insert(a.ip);
                self.bound.insert(a.ip, a.clone());
            }
        }
        for r in routes {
            if Some(r.index) == self.link_index && r.metric == VIP_ROUTE_METRIC {
                self.vips.routes.insert(r.ip);
            } else if Some(r.index) == self.lo_index && r.metric == BRIDGE_ROUTE_METRIC {
                self.vips.bridges.insert(r.ip);
            }
        }
        Ok((interfaces, addresses))
    }

    /// The kernel requests of `step`; `None` when a link it needs is missing.
    fn action(&self, step: &Step) -> Option<Action> {
        let link = self.link_index;
        Some(match *step {
            Step::BindAddress(ip) => Action::AddAddress(link?, ip),
            Step::UnbindAddress(ip) => Action::DelAddress(
                self.bound
                    .get(&ip)
                    .cloned()
                    .unwrap_or_else(|| Links::address_on(link.unwrap_or(0), ip)),
            ),
            Step::AddRoute(ip) => Action::AddRoute(link?, ip, VIP_ROUTE_METRIC),
            Step::DelRoute(ip) => Action::DelRoute(link?, ip, VIP_ROUTE_METRIC),
            Step::AddBridge(ip) => Action::AddRoute(self.lo_index?, ip, BRIDGE_ROUTE_METRIC),
            Step::DelBridge(ip) => Action::DelRoute(self.lo_index?, ip, BRIDGE_ROUTE_METRIC),
        })
    }

    /// Runs [`vip::converge`] from the bindings known: every VIP into the mode's form, those
    /// of `gone` unbound. Reports every failed step.
    async fn converge(&mut self, gone: &BTreeSet<IpAddr>) -> Rebound {
        let mut rebound = Rebound::default();
        let phases = if self.link_index.is_some() {
            vip::converge(self.vip_binding, &self.vips, gone)
        } else {
            // No link, so nothing bound on it; only bridges may be left.
            vec![
                self.vips
                    .bridges
                    .iter()
                    .map(|ip| Step::DelBridge(*ip))
                    .collect(),
            ]
        };
        for phase in phases {
            let t = Instant::now();
            let mut jobs = Vec::with_capacity(phase.len());
            let mut sent = Vec::with_capacity(phase.len());
            for step in &phase {
                match self.action(step) {
                    Some(action) => {
                        jobs.push((sent.len(), vec![action]));
                        sent.push(*step);
                    }
                    None => rebound.failed.push((*step, Error::NoLink)),
                }
                self.vips.record(step);
            }
            let results = run_jobs(&self.links, jobs).await;
            rebound.messages += results.len();
            for (n, r) in results {
                if let Err(e) = r {
                    rebound.failed.push((sent[n], e));
                }
            }
            debug!(steps = phase.len(), elapsed = ?t.elapsed(), "rebound VIPs");
        }
        if !rebound.failed.is_empty() {
            // What the kernel holds is not known now: the next observation reads it.
            warn!(
                failed = rebound.failed.len(),
                "some VIP bindings could not be changed"
            );
        }
        rebound
    }

    /// Unbinds the VIPs of `gone` (each with its operation's index in the plan) through
    /// [`Kernel::converge`]. A step that failed for another VIP is reported against the
    /// first of these operations, which needed it.
    async fn converge_for(&mut self, gone: &BTreeMap<IpAddr, usize>) -> Applied {
        let ips: BTreeSet<IpAddr> = gone.keys().copied().collect();
        let rebound = self.converge(&ips).await;
        let mut applied = Applied {
            messages: rebound.messages,
            ..Applied::default()
        };
        let first = gone.values().min().copied();
        let mut failed: BTreeSet<usize> = BTreeSet::new();
        for (step, e) in rebound.failed {
            match (gone.get(&step.ip()), first) {
                (Some(i), _) if failed.insert(*i) => applied.failed.push((*i, e)),
                (Some(_), _) => {}
                (None, Some(first)) => {
                    failed.insert(first);
                    let source = Box::new(e);
                    applied.failed.push((first, Error::Rebind { step, source }));
                }
                (None, None) => {}
            }
        }
        applied.done = gone.values().filter(|i| !failed.contains(i)).count();
        applied
    }

    /// The iptables backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The IPVS handle (for timeouts and cleanup).
    pub fn ipvs(&self) -> &ipvs_netlink::Handle {
        &self.ipvs
    }

    /// Loads the module of `scheduler` before IPVS first needs it, when IPVS loading it could
    /// deadlock (see [`super::modules`]).
    pub async fn prepare_scheduler(&self, scheduler: &str) {
        self.modules.prepare(scheduler).await;
    }

    /// The rtnetlink handle (for cleanup).
    pub fn links(&self) -> &Links {
        &self.links
    }

    async fn observe_services(&self) -> Result<BTreeMap<VsKey, VirtualServer>, Error> {
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

    fn observe_sets(&self) -> Result<BTreeMap<String, Set>, Error> {
        let mut session =
            ipset::Session::new().map_err(|e| ipset_error("open an ipset session", e))?;
        let mut out = BTreeMap::new();
        for family in &self.families {
            for def in sets::ALL {
                let name = set_name(def, *family);
                let set_name =
                    ipset::SetName::new(name.clone()).map_err(|e| ipset_error(&name, e))?;
                if session
                    .header(&set_name)
                    .map_err(|e| ipset_error(&name, e))?
                    .is_none()
                {
                    continue;
                }
                let set = session
                    .save_set(&set_name)
                    .map_err(|e| ipset_error(&name, e))?;
                let Some(kind) = set_kind(set.header.set_type) else {
                    // A foreign type under one of our names: report it as a type we never use
                    // so the plan leaves it alone and says so.
                    out.insert(
                        name,
                        Set {
                            kind: SetKind::HashIp,
                            family: *family,
                            entries: Default::default(),
                        },
                    );
                    continue;
                };
                let entries = set
                    .members
                    .iter()
                    .filter_map(|m| set_entry(&m.entry))
                    .collect();
                out.insert(
                    name,
                    Set {
                        kind,
                        family: *family,
                        entries,
                    },
                );
            }
        }
        Ok(out)
    }

    /// The VIP jobs of `ops` (owned, so a worker can run them), and the VIPs that must go
    /// through [`Kernel::converge`] instead, with their operations' indices; failures when
    /// `kube-ipvs0` is missing. The known bindings are updated as if every job succeeded
    /// (a failure makes the sync read the kernel again).
    fn address_jobs(
        &mut self,
        ops: &[(usize, &Op)],
        applied: &mut Applied,
    ) -> Option<(Vec<AddressJob>, BTreeMap<IpAddr, usize>)> {
        if self.link_index.is_none() {
            for (i, _) in ops {
                applied.failed.push((*i, Error::NoLink));
            }
            return None;
        }
        let mut jobs = Vec::with_capacity(ops.len());
        let mut gone = BTreeMap::new();
        for (i, op) in ops {
            let steps = match op {
                Op::AddAddress(ip) => vec![vip::bind(self.vip_binding, *ip)],
                Op::DelAddress(ip) => match vip::unbind(self.vip_binding, &self.vips, *ip) {
                    Some(steps) => steps,
                    None => {
                        gone.insert(*ip, *i);
                        continue;
                    }
                },
                _ => continue,
            };
            // The link exists, so every step has its requests.
            let actions = steps.iter().filter_map(|s| self.action(s)).collect();
            for step in &steps {
                self.vips.record(step);
            }
            jobs.push((*i, actions));
        }
        Some((jobs, gone))
    }

    async fn apply_addresses(&mut self, ops: &[(usize, &Op)], applied: &mut Applied) {
        if let Some((jobs, gone)) = self.address_jobs(ops, applied) {
            applied.merge(run_addresses(&self.links, jobs).await);
            if !gone.is_empty() {
                let more = self.converge_for(&gone).await;
                applied.merge(more);
            }
        }
    }

    /// Sends IPVS operations in batches of [`IPVS_CHUNK`].
    async fn apply_ipvs(&self, ops: &[(usize, &Op)], applied: &mut Applied) {
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

    fn apply_sets(&self, ops: &[(usize, &Op)], applied: &mut Applied) {
        applied.merge(run_sets(set_job(ops)));
    }
}

/// What moving the VIPs into the binding's form did ([`Kernel::rebind_vips`]).
#[derive(Debug, Default)]
pub struct Rebound {
    /// Kernel requests sent.
    pub messages: usize,
    /// The steps that failed, with their errors.
    pub failed: Vec<(Step, Error)>,
}

/// One kernel request binding or unbinding a VIP, with the links it names.
#[derive(Debug, Clone)]
enum Action {
    /// Add an address on a link.
    AddAddress(u32, IpAddr),
    /// Delete an address.
    DelAddress(Address),
    /// Add or replace the agent's local route through a link, with a metric.
    AddRoute(u32, Ipv4Addr, u32),
    /// Delete the agent's local route through a link, with a metric.
    DelRoute(u32, Ipv4Addr, u32),
}

/// A VIP operation ready to run: its index (in the plan, or among the steps run) and its
/// requests, sent one after the other.
type AddressJob = (usize, Vec<Action>);

/// Runs VIP jobs, 64 in flight on `links`, and returns each job's result in the order of
/// `jobs`.
async fn run_jobs(links: &Links, jobs: Vec<AddressJob>) -> Vec<(usize, Result<(), Error>)> {
    futures::stream::iter(jobs)
        .map(|(i, actions)| {
            let links = links.clone();
            async move {
                for action in actions {
                    let r = match action {
                        Action::AddAddress(index, ip) => links.add_address(index, ip).await,
                        Action::DelAddress(a) => links.del_address(&a).await,
                        Action::AddRoute(index, ip, metric) => {
                            links.add_vip_route(index, ip, metric).await
                        }
                        Action::DelRoute(index, ip, metric) => {
                            links.del_vip_route(index, ip, metric).await
                        }
                    };
                    if let Err(e) = r {
                        return (i, Err(e));
                    }
                }
                (i, Ok(()))
            }
        })
        .buffered(64)
        .collect()
        .await
}

/// Runs VIP jobs, 64 in flight on `links`.
async fn run_addresses(links: &Links, jobs: Vec<AddressJob>) -> Applied {
    let mut applied = Applied::default();
    let results = run_jobs(links, jobs).await;
    applied.messages += results.len();
    for (i, r) in results {
        match r {
            Ok(()) => applied.done += 1,
            Err(e) => applied.failed.push((i, e)),
        }
    }
    applied
}

/// Set operations converted for libipset, with the plan operation each came from.
struct SetJob {
    /// The plan operations' indices in the plan.
    ops: Vec<usize>,
    /// The library's operations.
    lib_ops: Vec<ipset::Op>,
    /// For each library operation, the position in `ops` of its plan operation.
    owner: Vec<usize>,
    /// Plan operations that could not be converted, by index in the plan.
    bad: Vec<(usize, Error)>,
}

fn set_job(ops: &[(usize, &Op)]) -> SetJob {
    let mut job = SetJob {
        ops: Vec::with_capacity(ops.len()),
        lib_ops: Vec::new(),
        owner: Vec::new(),
        bad: Vec::new(),
    };
    for (i, op) in ops {
        match to_ipset_ops(op) {
            Ok(v) => {
                job.owner
                    .extend(std::iter::repeat_n(job.ops.len(), v.len()));
                job.ops.push(*i);
                job.lib_ops.extend(v);
            }
            Err(e) => job.bad.push((*i, e.into())),
        }
    }
    job
}

/// Applies set operations in libipset's restore mode, going on after a failed one.
fn run_sets(job: SetJob) -> Applied {
    let SetJob {
        ops,
        lib_ops,
        owner,
        bad,
    } = job;
    let mut applied = Applied::default();
    let mut failed_ops: Vec<Option<Error>> =
        std::iter::repeat_with(|| None).take(ops.len()).collect();
    match ipset::Session::new() {
        Err(e) => {
            let e = Arc::new(Error::from(e));
            for f in failed_ops.iter_mut() {
                *f = Some(Error::Shared(e.clone()));
            }
        }
        Ok(mut session) => {
            // Adding what exists and removing what is missing are not errors here: the
            // agent converges, it does not insist.
            session.set_exist(true);
            let mut start = 0;
            while start < lib_ops.len() {
                match session.apply(&lib_ops[start..]) {
                    Ok(()) => break,
                    Err(ipset::Error::Batch { index, source }) => {
                        let at = start + index;
                        failed_ops[owner[at]].get_or_insert_with(|| Error::Ipset(*source));
                        start = at + 1;
                    }
                    Err(e) => {
                        let e = Arc::new(Error::from(e));
                        for i in owner[start..].iter() {
                            failed_ops[*i].get_or_insert_with(|| Error::Shared(e.clone()));
                        }
                        break;
                    }
                }
            }
        }
    }
    applied.messages += lib_ops.len().div_ceil(64).max(1);
    for (i, failed) in ops.into_iter().zip(failed_ops) {
        match failed {
            None => applied.done += 1,
            Some(e) => applied.failed.push((i, e)),
        }
    }
    applied.failed.extend(bad);
    applied
}

/// Work running on a worker thread while the plan goes on.
struct Worker {
    what: &'static str,
    /// The operations' indices in the plan, to report them failed if the worker dies.
    ops: Vec<usize>,
    result: oneshot::Receiver<Applied>,
}

impl Worker {
    /// Starts `work` on a thread (which inherits the caller's network namespace). `None` when
    /// no thread can be started: the caller then runs the work itself.
    fn start(
        what: &'static str,
        ops: Vec<usize>,
        work: impl FnOnce() -> Applied + Send + 'static,
    ) -> Option<Worker> {
        let (tx, rx) = oneshot::channel();
        std::thread::Builder::new()
            .name(format!("kernel-{what}"))
            .spawn(move || {
                let _ = tx.send(work());
            })
            .ok()?;
        Some(Worker {
            what,
            ops,
            result: rx,
        })
    }

    async fn finish(self, applied: &mut Applied) {
        let t = Instant::now();
        match self.result.await {
            Ok(more) => applied.merge(more),
            Err(_) => {
                for i in self.ops {
                    applied.failed.push((i, Error::WorkerStopped(self.what)));
                }
            }
        }
        debug!(what = self.what, waited = ?t.elapsed(), "worker joined");
    }
}

/// Binds VIPs on a worker thread with a runtime and an rtnetlink socket of its own.
fn address_worker(jobs: Vec<AddressJob>) -> Applied {
    let ops: Vec<usize> = jobs.iter().map(|j| j.0).collect();
    let fail = |e: Error| {
        let e = Arc::new(e);
        Applied {
            failed: ops.iter().map(|i| (*i, Error::Shared(e.clone()))).collect(),
            ..Applied::default()
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(source) => {
            return fail(Error::Io {
                what: "start the addresses worker's runtime",
                source,
            });
        }
    };
    rt.block_on(async {
        match Links::connect() {
            Ok(links) => run_addresses(&links, jobs).await,
            Err(e) => fail(e),
        }
    })
}

/// True for operations that only add or update and may run while other additions are in
/// flight on workers.
fn overlaps(op: &Op) -> bool {
    matches!(
        op,
        Op::AddService { .. }
            | Op::UpdateService { .. }
            | Op::AddDestination { .. }
            | Op::UpdateDestination { .. }
            | Op::WriteRules { .. }
            | Op::SetSysctl { .. }
            | Op::CreateSet { .. }
            | Op::AddEntries { .. }
            | Op::AddAddress(_)
    )
}

impl Dataplane for Kernel {
    async fn observe(&mut self) -> Result<Observation, Error> {
        let (interfaces, addresses) = self.read_bindings().await?;
        let mut state = KernelState {
            link: self.link_index.is_some(),
            addresses: self.vips.vips(),
            ..KernelState::default()
        };
        let host = Host {
            addresses: Links::local_addresses(&interfaces, &addresses),
        };
        let t = Instant::now();
        state.services = self.observe_services().await?;
        debug!(services = state.services.len(), elapsed = ?t.elapsed(), "observed IPVS");
        let t = Instant::now();
        state.sets = self.observe_sets()?;
        debug!(elapsed = ?t.elapsed(), "observed sets");
        for family in &self.families {
            let seen = iptables::read(self.backend, *family)?;
            state
                .rules
                .insert(*family, self.written.observed(*family, &seen));
        }
        state.sysctls = sysctl::read(&self.sysctl_keys);
        Ok(Observation { state, host })
    }

    async fn apply(&mut self, plan: &Plan) -> Result<Applied, Error> {
        for op in &plan.ops {
            if let Op::AddService { service, .. } | Op::UpdateService { service, .. } = op {
                self.modules.prepare(&service.scheduler).await;
            }
        }
        let mut applied = Applied::default();
        let mut workers: Vec<Worker> = Vec::new();
        let mut i = 0;
        while i < plan.ops.len() {
            let kind = op_kind(&plan.ops[i]);
            let mut j = i;
            while j < plan.ops.len() && op_kind(&plan.ops[j]) == kind {
                j += 1;
            }
            let group: Vec<(usize, &Op)> = (i..j).zip(&plan.ops[i..j]).collect();
            i = j;
            if !group.iter().all(|(_, op)| overlaps(op)) {
                // A removal (or a one-off) waits for every addition before it.
                for w in workers.drain(..) {
                    w.finish(&mut applied).await;
                }
            }
            let t = Instant::now();
            match kind {
                Kind::Ipvs => self.apply_ipvs(&group, &mut applied).await,
                Kind::Sets => {
                    // Sets are created here (the rules name them); their entries may follow
                    // on a worker when the group only adds.
                    let split = group
                        .iter()
                        .position(|(_, op)| !matches!(op, Op::CreateSet { .. }))
                        .unwrap_or(group.len());
                    let (create, rest) = group.split_at(split);
                    if !create.is_empty() {
                        self.apply_sets(create, &mut applied);
                    }
                    // Claims on virtual servers must be in the kernel before the servers
                    // are made (a crash in between must not leave an unowned server): when
                    // the entries go to a worker, the ownership set's stay here.
                    let only_adds = rest
                        .iter()
                        .all(|(_, op)| matches!(op, Op::AddEntries { .. }));
                    type Ops<'a> = Vec<(usize, &'a Op)>;
                    let (claims, rest): (Ops, Ops) = if only_adds {
                        rest.iter().partition(|(_, op)| is_claim(op))
                    } else {
                        (Vec::new(), rest.to_vec())
                    };
                    if !claims.is_empty() {
                        self.apply_sets(&claims, &mut applied);
                    }
                    let rest = rest.as_slice();
                    let background = rest.len() > 1
                        && rest
                            .iter()
                            .all(|(_, op)| matches!(op, Op::AddEntries { .. }));
                    let job = set_job(rest);
                    let ops = job.ops.clone();
                    if background && let Some(w) = Worker::start("sets", ops, move || run_sets(job))
                    {
                        workers.push(w);
                    } else if !rest.is_empty() {
                        self.apply_sets(rest, &mut applied);
                    }
                }
                Kind::Addresses => {
                    let adds_only = group.iter().all(|(_, op)| matches!(op, Op::AddAddress(_)));
                    match self.address_jobs(&group, &mut applied) {
                        Some((jobs, gone)) if adds_only && jobs.len() > 1 && gone.is_empty() => {
                            let ops: Vec<usize> = jobs.iter().map(|j| j.0).collect();
                            match Worker::start("addresses", ops, move || address_worker(jobs)) {
                                Some(w) => workers.push(w),
                                None => self.apply_addresses(&group, &mut applied).await,
                            }
                        }
                        Some((jobs, gone)) => {
                            applied.merge(run_addresses(&self.links, jobs).await);
                            if !gone.is_empty() {
                                let more = self.converge_for(&gone).await;
                                applied.merge(more);
                            }
                        }
                        None => {}
                    }
                }
                Kind::One => {
                    for (i, op) in group.iter() {
                        match self.apply_one(op).await {
                            Ok(()) => applied.done += 1,
                            Err(e) => applied.failed.push((*i, e)),
                        }
                        applied.messages += 1;
                    }
                }
            }
            debug!(?kind, ops = group.len(), elapsed = ?t.elapsed(), "applied a group");
        }
        for w in workers {
            w.finish(&mut applied).await;
        }
        Ok(applied)
    }

    async fn clean_conntrack(
        &mut self,
        filter: &crate::model::conntrack::ConntrackFilter,
    ) -> Result<Vec<super::conntrack::Cleaned>, Error> {
        Ok(super::conntrack::clean(filter.clone()).await?)
    }
}

impl Kernel {
    async fn apply_one(&mut self, op: &Op) -> Result<(), Error> {
        match op {
            Op::CreateLink => {
                self.link_index = Some(self.links.create_dummy(LINK_NAME).await?);
                Ok(())
            }
            Op::SetSysctl { key, value } => sysctl::write(key, value),
            Op::WriteRules {
                family,
                rules,
                missing_jumps,
            } => {
                iptables::restore(self.backend, *family, &restore_input(rules, missing_jumps))?;
                // Remember how the backend prints what we wrote, to tell drift from quirks.
                let seen = iptables::read(self.backend, *family)?;
                self.written.record(*family, rules.clone(), &seen);
                Ok(())
            }
            Op::RemoveRules { family, rules } => {
                iptables::restore(self.backend, *family, &removal_input(rules))
            }
            Op::DestroySet(name) => {
                let mut session = ipset::Session::new()?;
                session.destroy(&ipset::SetName::new(name.clone())?)?;
                Ok(())
            }
            Op::DeleteLink => {
                // The kernel deletes the routes through the link with it; bridges left on
                // `lo` by a switch cut short go too.
                let mut result = match self.link_index.take() {
                    Some(index) => self.links.delete_link(index).await,
                    None => Ok(()),
                };
                if let Some(lo) = self.lo_index {
                    for ip in std::mem::take(&mut self.vips.bridges) {
                        if let Err(e) = self.links.del_vip_route(lo, ip, BRIDGE_ROUTE_METRIC).await
                        {
                            result = result.and(Err(e));
                        }
                    }
                }
                self.vips = Bindings::default();
                self.bound.clear();
                result
            }
            // The plan's batched operations never come one by one.
            _ => Err(Error::NotSingle),
        }
    }
}

/// Whether `op` adds claims to the ownership set (`KUBE-IPVS-OWNED`, `KUBE-6-IPVS-OWNED`).
fn is_claim(op: &Op) -> bool {
    matches!(op, Op::AddEntries { set, .. }
        if [Family::V4, Family::V6].iter().any(|f| *set == crate::model::sets::set_name(&crate::model::sets::OWNED, *f)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ipvs,
    Sets,
    Addresses,
    One,
}

fn op_kind(op: &Op) -> Kind {
    match op {
        Op::AddService { .. }
        | Op::UpdateService { .. }
        | Op::DelService(_)
        | Op::AddDestination { .. }
        | Op::UpdateDestination { .. }
        | Op::DelDestination { .. } => Kind::Ipvs,
        Op::CreateSet { .. } | Op::AddEntries { .. } | Op::DelEntries { .. } => Kind::Sets,
        Op::AddAddress(_) | Op::DelAddress(_) => Kind::Addresses,
        Op::CreateLink
        | Op::SetSysctl { .. }
        | Op::WriteRules { .. }
        | Op::RemoveRules { .. }
        | Op::DestroySet(_)
        | Op::DeleteLink => Kind::One,
    }
}

// ---- conversions between the model and the libraries ----

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

fn set_kind(t: ipset::SetType) -> Option<SetKind> {
    Some(match t {
        ipset::SetType::HashIp => SetKind::HashIp,
        ipset::SetType::HashIpPort => SetKind::HashIpPort,
        ipset::SetType::HashIpPortIp => SetKind::HashIpPortIp,
        ipset::SetType::HashIpPortNet => SetKind::HashIpPortNet,
        ipset::SetType::BitmapPort => SetKind::BitmapPort,
        _ => return None,
    })
}

fn lib_protocol(p: Protocol) -> ipset::Protocol {
    match p {
        Protocol::Tcp => ipset::Protocol::Tcp,
        Protocol::Udp => ipset::Protocol::Udp,
        Protocol::Sctp => ipset::Protocol::Sctp,
    }
}

fn model_protocol(p: ipset::Protocol) -> Option<Protocol> {
    match p {
        ipset::Protocol::Tcp => Some(Protocol::Tcp),
        ipset::Protocol::Udp => Some(Protocol::Udp),
        ipset::Protocol::Sctp => Some(Protocol::Sctp),
        _ => None,
    }
}

fn set_entry(e: &ipset::Entry) -> Option<SetEntry> {
    Some(match *e {
        ipset::Entry::Ip(ip) => SetEntry::Ip(ip),
        ipset::Entry::IpPort { ip, protocol, port } => {
            SetEntry::IpPort(ip, model_protocol(protocol)?, port)
        }
        ipset::Entry::IpPortIp {
            ip,
            protocol,
            port,
            ip2,
        } => SetEntry::IpPortIp(ip, model_protocol(protocol)?, port, ip2),
        ipset::Entry::IpPortNet {
            ip,
            protocol,
            port,
            net,
        } => SetEntry::IpPortNet(
            ip,
            model_protocol(protocol)?,
            port,
            ipnet::IpNet::new(net.addr(), net.prefix()).ok()?,
        ),
        ipset::Entry::Port(p) => SetEntry::Port(p),
        _ => return None,
    })
}

fn lib_entry(e: &SetEntry, set: &str) -> Result<ipset::Entry, ipset::Error> {
    Ok(match *e {
        SetEntry::Ip(ip) => ipset::Entry::Ip(ip),
        SetEntry::IpPort(ip, p, port) => ipset::Entry::IpPort {
            ip,
            protocol: lib_protocol(p),
            port,
        },
        SetEntry::IpPortIp(ip, p, port, ip2) => ipset::Entry::IpPortIp {
            ip,
            protocol: lib_protocol(p),
            port,
            ip2,
        },
        SetEntry::IpPortNet(ip, p, port, net) => ipset::Entry::IpPortNet {
            ip,
            protocol: lib_protocol(p),
            port,
            net: ipset::Net::new(net.network(), net.prefix_len()).ok_or_else(|| {
                ipset::Error::Invalid {
                    set: set.to_string(),
                    reason: format!("bad network {net}"),
                }
            })?,
        },
        SetEntry::Port(p) => ipset::Entry::Port(p),
    })
}

fn to_ipset_ops(op: &Op) -> Result<Vec<ipset::Op>, ipset::Error> {
    let name = ipset::SetName::new;
    Ok(match op {
        Op::CreateSet {
            name: n,
            kind,
            family,
        } => {
            let set_name = name(n)?;
            let fam = match family {
                Family::V4 => ipset::Family::Inet,
                Family::V6 => ipset::Family::Inet6,
            };
            let header = match kind {
                SetKind::BitmapPort => ipset::Header::bitmap_port(set_name, 0, 65535),
                SetKind::HashIp => ipset::Header::hash(set_name, ipset::SetType::HashIp, fam),
                SetKind::HashIpPort => {
                    ipset::Header::hash(set_name, ipset::SetType::HashIpPort, fam)
                }
                SetKind::HashIpPortIp => {
                    ipset::Header::hash(set_name, ipset::SetType::HashIpPortIp, fam)
                }
                SetKind::HashIpPortNet => {
                    ipset::Header::hash(set_name, ipset::SetType::HashIpPortNet, fam)
                }
            };
            let header = if *kind == SetKind::BitmapPort {
                header
            } else {
                header.with_hashsize(1024).with_maxelem(65536)
            };
            vec![ipset::Op::Create(header)]
        }
        Op::AddEntries { set, entries } => {
            let n = name(set)?;
            entries
                .iter()
                .map(|e| lib_entry(e, set).map(|e| ipset::Op::add(&n, e)))
                .collect::<Result<_, _>>()?
        }
        Op::DelEntries { set, entries } => {
            let n = name(set)?;
            entries
                .iter()
                .map(|e| lib_entry(e, set).map(|e| ipset::Op::del(&n, e)))
                .collect::<Result<_, _>>()?
        }
        _ => Vec::new(),
    })
}

fn ipvs_error(what: &str, e: ipvs_netlink::Error) -> Error {
    Error::request(what, e)
}

fn ipset_error(what: &str, e: ipset::Error) -> Error {
    Error::request(format!("ipset {what}"), e)
}
