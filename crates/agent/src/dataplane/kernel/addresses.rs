//! The VIPs on `kube-ipvs0` through rtnetlink, bound as addresses or as `local` routes
//! according to `--vip-binding` ([`crate::dataplane::vip`]): reading the bindings, carrying
//! out the plan's VIP operations (many in flight, on the agent's socket or a worker's), and
//! moving every VIP into the binding's form.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use tracing::{debug, warn};

use super::Kernel;
use crate::dataplane::link::{Address, BRIDGE_ROUTE_METRIC, Links, VIP_ROUTE_METRIC};
use crate::dataplane::vip::{self, Bindings, Step};
use crate::dataplane::{Applied, Error};
use crate::model::kernel::LINK_NAME;
use crate::model::plan::Op;

impl Kernel {
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
    pub(super) async fn read_bindings(
        &mut self,
    ) -> Result<(BTreeMap<u32, String>, Vec<Address>), Error> {
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
                self.bound.insert(a.ip, *a);
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
                    .copied()
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
            rebound.messages += jobs.len();
            run_jobs(&self.links, jobs, |n, r| {
                if let Err(e) = r {
                    rebound.failed.push((sent[n], e));
                }
            })
            .await;
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

    /// The VIP jobs of `ops` (owned, so a worker can run them), and the VIPs that must go
    /// through [`Kernel::converge`] instead, with their operations' indices; failures when
    /// `kube-ipvs0` is missing. The known bindings are updated as if every job succeeded
    /// (a failure makes the sync read the kernel again).
    pub(super) fn address_jobs(
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

    pub(super) async fn apply_addresses(&mut self, ops: &[(usize, &Op)], applied: &mut Applied) {
        if let Some((jobs, gone)) = self.address_jobs(ops, applied) {
            applied.merge(run_addresses(&self.links, jobs).await);
            if !gone.is_empty() {
                let more = self.converge_for(&gone).await;
                applied.merge(more);
            }
        }
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
pub(super) enum Action {
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
pub(super) type AddressJob = (usize, Vec<Action>);

/// Runs VIP jobs, 64 in flight on `links`, and hands each job's result to `done` in the
/// order of `jobs` (as it comes: a cold sync's tens of thousands are not held together).
async fn run_jobs(
    links: &Links,
    jobs: Vec<AddressJob>,
    mut done: impl FnMut(usize, Result<(), Error>),
) {
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
        .for_each(|(i, r)| {
            done(i, r);
            std::future::ready(())
        })
        .await
}

/// Runs VIP jobs, 64 in flight on `links`.
async fn run_addresses(links: &Links, jobs: Vec<AddressJob>) -> Applied {
    let mut applied = Applied {
        messages: jobs.len(),
        ..Applied::default()
    };
    run_jobs(links, jobs, |i, r| match r {
        Ok(()) => applied.done += 1,
        Err(e) => applied.failed.push((i, e)),
    })
    .await;
    applied
}

/// Binds VIPs on a worker thread with a runtime and an rtnetlink socket of its own.
pub(super) fn address_worker(jobs: Vec<AddressJob>) -> Applied {
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
