//! The real kernel: IPVS over generic netlink (ipvs-netlink), the KUBE-* sets over libipset
//! (ipset), `kube-ipvs0` and the VIPs over rtnetlink, the rules with one `iptables-restore`
//! per family, and sysctls.
//!
//! - `schedule`: the order a plan is carried out in (what travels together, what goes to a
//!   worker, where the plan waits), pure and unit-tested.
//! - `ipvs`, `sets`, `addresses`: one kernel object each, read and changed, with the
//!   conversions between the model and its library.
//! - `reader`: what a full sync reads, on the agent's sockets or on its own ones.
//! - `worker`: work on a thread of its own while the plan goes on.
//! - `setup`: the scheduler probe and the host's set-up, once at start.
//!
//! Nothing here blocks the runtime's threads, which also serve `/healthz` and the
//! health-check node ports: programs (`iptables-restore`, which may wait for the xtables
//! lock, `iptables-save`), libipset and `/proc/sys` run on tokio's blocking pool
//! (`blocking`) or on a worker thread.

mod addresses;
mod ipvs;
mod reader;
mod schedule;
mod sets;
mod setup;
mod worker;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Instant;

use futures::future::BoxFuture;
use tracing::{debug, warn};

use self::ipvs::ipvs_error;
use self::schedule::{Route, Stage, schedule};
use self::worker::Worker;
use super::host::{HostSetup, HostStep};
use super::iptables::{self, Backend, Written};
use super::link::{Address, BRIDGE_ROUTE_METRIC, Links};
use super::modules::Preloader;
use super::probe::ProbeFailure;
use super::vip::Bindings;
use super::{Applied, Dataplane, Error, Observation, RealServers, sysctl};
use crate::model::desired::iptables::{removal_input, restore_input};
use crate::model::kernel::rolling::Part;
use crate::model::kernel::{LINK_NAME, VsKey};
use crate::model::plan::{Op, Plan};
use crate::model::snapshot::cluster::Family;
use crate::model::snapshot::config::VipBinding;

pub use self::addresses::Rebound;
pub use self::reader::Found;

/// Runs `work` on tokio's blocking pool (whose threads inherit the network namespace of the
/// thread that starts them, as worker threads do) and waits for it without blocking the
/// runtime. A panic in `work` is the `what` worker stopping.
async fn blocking<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| Error::WorkerStopped(what))
}

/// The real kernel.
pub struct Kernel {
    ipvs: ipvs_netlink::Handle,
    /// Sockets the agent's thread reads real servers over (see `ipvs::DUMP_SOCKETS`).
    dumpers: Vec<ipvs_netlink::Handle>,
    links: Links,
    backend: Backend,
    families: Vec<Family>,
    sysctl_keys: Vec<String>,
    written: Written,
    link_index: Option<u32>,
    /// `lo`'s index, for the bridge routes of a switch of binding.
    lo_index: Option<u32>,
    /// Whether reads keep what IPVS counted per virtual server ([`Kernel::count_traffic`]).
    traffic: bool,
    /// `kube-ipvs0`'s addresses as last observed, to delete them by message.
    bound: BTreeMap<IpAddr, Address>,
    /// How new VIPs are bound.
    vip_binding: VipBinding,
    /// The VIPs' bindings as last observed, kept up to date by the changes sent since.
    vips: Bindings,
    /// Scheduler modules loaded before IPVS's first use of them.
    modules: Preloader,
    /// Families whose leftovers of kube-proxy's other modes are gone (see
    /// [`super::leftovers`]).
    swept: BTreeSet<Family>,
}

impl Kernel {
    /// Connects to the kernel: resolves the IPVS family (fails with a hint when `ip_vs` is
    /// not loaded) and picks the iptables backend the node uses.
    pub async fn connect(families: Vec<Family>, sysctl_keys: Vec<String>) -> Result<Kernel, Error> {
        let ipvs = ipvs_netlink::connect()
            .await
            .map_err(|e| ipvs_error("connect to IPVS", e))?;
        let dumpers = ipvs::connect_sockets().await?;
        let links = Links::connect()?;
        let backend = blocking("iptables", Backend::detect).await??;
        debug!(?backend, "iptables backend");
        Ok(Kernel {
            ipvs,
            dumpers,
            links,
            backend,
            families,
            sysctl_keys,
            written: Written::default(),
            link_index: None,
            lo_index: None,
            traffic: false,
            bound: BTreeMap::new(),
            vip_binding: VipBinding::default(),
            vips: Bindings::default(),
            modules: Preloader::default(),
            swept: BTreeSet::new(),
        })
    }

    /// Serves `families` from now on (the host's usable families, known once the backend
    /// is).
    pub fn set_families(&mut self, families: Vec<Family>) {
        self.families = families;
    }

    /// Whether full reads from now on keep what IPVS counted per virtual server
    /// ([`crate::dataplane::Observation::traffic`]): off by default, as a node's every
    /// virtual server then costs its counts in memory at each read.
    pub fn count_traffic(&mut self, on: bool) {
        self.traffic = on;
    }

    /// Binds new VIPs as `mode` says from now on (see [`Kernel::rebind_vips`] for those
    /// already bound).
    pub fn set_vip_binding(&mut self, mode: VipBinding) {
        self.vip_binding = mode;
    }

    /// Removes what kube-proxy's iptables and nftables modes left in `family`, until a pass
    /// finds nothing left that waits for the agent's own rules (a failure is logged and tried
    /// again at the next write: the agent serves with or without it).
    async fn sweep_other_modes(&mut self, family: Family) {
        if self.swept.contains(&family) {
            return;
        }
        let backend = self.backend;
        let removed = blocking("leftovers", move || {
            super::leftovers::remove(backend, family)
        })
        .await;
        match removed {
            Ok(Ok(removed)) if !removed.again => {
                self.swept.insert(family);
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                warn!(error = %e, ?family, "cannot remove kube-proxy's other modes' leftovers; trying again at the next sync")
            }
            Err(e) => {
                warn!(error = %e, ?family, "cannot remove kube-proxy's other modes' leftovers; trying again at the next sync")
            }
        }
    }

    /// The iptables backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Applies the operations of `plan` at `indices`, of `route`, now, on the agent's own
    /// sockets.
    async fn run(&mut self, route: Route, plan: &Plan, indices: &[usize], applied: &mut Applied) {
        match route {
            // Picked a batch at a time: a cold sync's are most of the plan.
            Route::Ipvs => self.apply_ipvs(plan, indices, applied).await,
            Route::Sets => self.apply_sets(&pick(plan, indices), applied).await,
            Route::Addresses => self.apply_addresses(&pick(plan, indices), applied).await,
            Route::One => {
                for (i, op) in pick(plan, indices) {
                    match self.apply_one(op).await {
                        Ok(()) => applied.done += 1,
                        Err(e) => applied.failed.push((i, e)),
                    }
                    applied.messages += 1;
                }
            }
        }
    }

    /// Starts `ops` of `route` on a worker thread.
    fn start(&mut self, route: Route, ops: &[(usize, &Op)], applied: &mut Applied) -> Started {
        let started = match route {
            Route::Sets => {
                let job = sets::set_job(ops);
                Worker::start("sets", job.indices(), move || sets::run_sets(job))
            }
            Route::Addresses => match self.address_jobs(ops, applied) {
                Some((jobs, gone)) if gone.is_empty() => {
                    let indices = jobs.iter().map(|j| j.0).collect();
                    Worker::start("addresses", indices, move || {
                        addresses::address_worker(jobs)
                    })
                }
                // Only removals go through the VIPs' convergence, and they never start here.
                Some(_) => None,
                None => return Started::Failed,
            },
            Route::Ipvs | Route::One => None,
        };
        started.map_or(Started::No, Started::Worker)
    }

    async fn apply_one(&mut self, op: &Op) -> Result<(), Error> {
        match op {
            Op::CreateLink => {
                self.link_index = Some(self.links.create_dummy(LINK_NAME).await?);
                Ok(())
            }
            Op::SetSysctl { key, value } => {
                let (key, value) = (key.clone(), value.clone());
                blocking("sysctl", move || sysctl::write(&key, &value)).await?
            }
            Op::WriteRules {
                family,
                rules,
                missing_jumps,
            } => {
                let (backend, family) = (self.backend, *family);
                let input = restore_input(rules, missing_jumps);
                // Read back at once: remember how the backend prints what we wrote, to tell
                // drift from quirks.
                let seen = blocking("iptables", move || {
                    iptables::restore(backend, family, &input)?;
                    iptables::read(backend, family)
                })
                .await??;
                self.written.record(family, (**rules).clone(), &seen);
                // At the first write of a family, once our chains no longer jump to iptables
                // mode's. Another mode that ran here always left our chains different from
                // what we want (iptables mode rewrote the shared ones, nftables mode deleted
                // them), so its leftovers never go unnoticed. Not on `--cleanup`, which
                // removes only what the agent owns.
                self.sweep_other_modes(family).await;
                Ok(())
            }
            Op::RemoveRules { family, rules } => {
                let (backend, family, input) = (self.backend, *family, removal_input(rules));
                blocking("iptables", move || {
                    iptables::restore(backend, family, &input)
                })
                .await?
            }
            Op::DestroySet(name) => {
                let name = *name;
                blocking("sets", move || sets::destroy(name)).await?
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

/// What [`Kernel::start`] did.
enum Started {
    /// The work runs on this worker.
    Worker(Worker),
    /// Nothing can run (the operations are reported failed).
    Failed,
    /// No worker: the caller runs the work itself.
    No,
}

/// The operations of `plan` at `indices`, with their indices.
fn pick<'a>(plan: &'a Plan, indices: &[usize]) -> Vec<(usize, &'a Op)> {
    indices.iter().map(|&i| (i, &plan.ops[i])).collect()
}

impl Dataplane for Kernel {
    async fn observe(&mut self) -> Result<Observation, Error> {
        Ok(self.read(None).await?.0)
    }

    async fn observe_part(&mut self, part: &Part) -> Result<(Observation, BTreeSet<VsKey>), Error> {
        self.read(Some(part)).await
    }

    type Read = Found;

    fn read_apart(&mut self, part: Option<Part>) -> BoxFuture<'static, Result<Found, Error>> {
        Box::pin(self.reader().read_apart(part))
    }

    async fn finish_read(&mut self, found: Found) -> Result<(Observation, BTreeSet<VsKey>), Error> {
        self.complete(found).await
    }

    async fn observe_real_servers(
        &mut self,
        keys: &[VsKey],
    ) -> Result<Vec<(VsKey, Option<RealServers>)>, Error> {
        self.read_real_servers(keys).await
    }

    async fn apply(&mut self, plan: &Plan) -> Result<Applied, Error> {
        for op in &plan.ops {
            if let Op::AddService { service, .. } | Op::UpdateService { service, .. } = op {
                self.modules.prepare(service.scheduler.as_str()).await;
            }
        }
        let mut applied = Applied::default();
        let mut workers: Vec<Worker> = Vec::new();
        for stage in schedule(&plan.ops) {
            let t = Instant::now();
            match stage {
                Stage::Join => {
                    for w in workers.drain(..) {
                        w.finish(&mut applied).await;
                    }
                }
                Stage::Run(route, indices) => {
                    self.run(route, plan, &indices, &mut applied).await;
                    debug!(?route, ops = indices.len(), elapsed = ?t.elapsed(), "applied a group");
                }
                Stage::Start(route, indices) => {
                    let ops = pick(plan, &indices);
                    match self.start(route, &ops, &mut applied) {
                        Started::Worker(w) => workers.push(w),
                        Started::Failed => {}
                        Started::No => self.run(route, plan, &indices, &mut applied).await,
                    }
                }
            }
        }
        for w in workers {
            w.finish(&mut applied).await;
        }
        Ok(applied)
    }

    async fn clean_conntrack(
        &mut self,
        filter: &crate::model::desired::conntrack::ConntrackFilter,
    ) -> Result<Vec<super::conntrack::Cleaned>, Error> {
        Ok(super::conntrack::clean(filter.clone()).await?)
    }

    async fn probe_scheduler(&mut self, scheduler: &str) -> Result<(), ProbeFailure> {
        self.probe(scheduler).await
    }

    async fn set_up_host(&mut self, setup: &HostSetup) -> Vec<(HostStep, Error)> {
        self.set_up(setup).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::web::{self, Request, Response};

    /// On a runtime of one thread, as the agent's tasks would share one: work that waits (a
    /// stand-in for `iptables-restore` waiting for the xtables lock) leaves a server on the
    /// same runtime answering at once.
    #[tokio::test]
    async fn blocking_work_leaves_the_runtime_free_to_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handler: Arc<dyn web::Handler> =
            Arc::new(|_: &Request| Response::new(200, "text/plain", "ok"));
        let server = tokio::spawn(web::serve(listener, handler, web::Limits::default()));
        let work = tokio::spawn(super::blocking("test", || {
            std::thread::sleep(Duration::from_secs(2))
        }));
        tokio::task::yield_now().await;
        let t = std::time::Instant::now();
        let (status, _, _) = web::get(addr, "/healthz").await.unwrap();
        assert_eq!(status, 200);
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(!work.is_finished());
        work.await.unwrap().unwrap();
        server.abort();
    }
}
