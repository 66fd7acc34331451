//! An in-memory kernel for tests of the sync loop: applies plans to a [`KernelState`] with
//! the model's shadow ([`KernelState::apply`]), exactly as the real dataplane would. A
//! [`ReadGate`] holds its reads made apart, so that tests can sync while a periodic pass reads.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::conntrack::Cleaned;
use super::host::{HostSetup, HostStep};
use super::probe::ProbeFailure;
use super::{Applied, Dataplane, Error, Observation, RealServers, Traffic};
use crate::model::desired::Host;
use crate::model::desired::conntrack::ConntrackFilter;
use crate::model::kernel::rolling::Part;
use crate::model::kernel::{KernelState, VsKey};
use crate::model::plan::{Op, Plan};

pub use crate::model::incremental::shadow::Refusal;

/// The in-memory kernel.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    /// The current state.
    pub state: KernelState,
    /// The host facts reported by `observe`.
    pub host: Host,
    /// Every plan applied so far.
    pub applied: Vec<Plan>,
    /// Number of `observe` calls.
    pub observed: usize,
    /// The virtual servers of every `observe_real_servers` call.
    pub real_server_reads: Vec<Vec<VsKey>>,
    /// The filter of every conntrack cleanup asked for.
    pub conntrack_cleanups: Vec<ConntrackFilter>,
    /// Operations the kernel refuses: those whose description contains one of these. IPVS
    /// refuses with `ENOENT`, as a kernel without some scheduler module refuses its virtual
    /// servers; the others with [`Error::Refused`]. A scheduler named here is refused by
    /// [`Dataplane::probe_scheduler`] too.
    pub refuse: Vec<String>,
    /// The schedulers probed so far.
    pub probed: Vec<String>,
    /// Every host set-up asked for.
    pub host_setups: Vec<HostSetup>,
    /// When set, reading the kernel fails as it does without the IPVS module.
    pub unavailable: bool,
    /// When set, reads made apart ([`Dataplane::read_apart`]) wait for this gate to open.
    pub gate: Option<ReadGate>,
    /// What IPVS counted per virtual server, reported by reads for those in [`Memory::state`].
    pub traffic: BTreeMap<VsKey, Traffic>,
}

/// Holds the reads made apart of a [`Memory`] kernel until the test lets them go, so that a
/// test can sync changes while a full pass reads. Clones share the gate.
#[derive(Debug, Clone)]
pub struct ReadGate(Arc<Gate>);

#[derive(Debug)]
struct Gate {
    open: watch::Sender<bool>,
    started: watch::Sender<usize>,
    /// What the next read let go finds instead of the kernel as it was when it started.
    shown: Mutex<Option<KernelState>>,
}

impl Default for ReadGate {
    fn default() -> Self {
        Self::closed()
    }
}

impl ReadGate {
    /// A closed gate.
    pub fn closed() -> ReadGate {
        ReadGate(Arc::new(Gate {
            open: watch::channel(false).0,
            started: watch::channel(0).0,
            shown: Mutex::new(None),
        }))
    }

    /// Lets the held reads go, and the later ones through.
    pub fn open(&self) {
        self.0.open.send_replace(true);
    }

    /// Reads made apart started so far.
    pub fn started(&self) -> usize {
        *self.0.started.borrow()
    }

    /// Waits until `n` reads have started.
    pub async fn wait_started(&self, n: usize) {
        let mut started = self.0.started.subscribe();
        // The sender lives in `self`: the wait cannot fail.
        let _ = started.wait_for(|s| *s >= n).await;
    }

    /// Makes the next read let go find `state`: a read that saw some of the plans applied
    /// while it ran (a real one sees each object at some moment of its own).
    pub fn show(&self, state: KernelState) {
        *self.0.shown.lock().expect("not poisoned") = Some(state);
    }

    /// Counts a read, holds it until the gate opens, and gives what it is to find, if the
    /// test said.
    async fn pass(&self) -> Option<KernelState> {
        self.0.started.send_modify(|n| *n += 1);
        let mut open = self.0.open.subscribe();
        let _ = open.wait_for(|o| *o).await;
        self.0.shown.lock().expect("not poisoned").take()
    }
}

/// `state` as a read finds it: the kernel reports counts for every real server, so none
/// recorded means none open.
fn as_read(mut state: KernelState) -> KernelState {
    for vs in state.services.values_mut() {
        for d in vs.destinations.keys() {
            vs.connections.get_or_default(*d);
        }
    }
    state
}

/// `observation` with the real servers of the virtual servers `part` does not select left
/// out, their keys second.
fn only_part(mut observation: Observation, part: Option<&Part>) -> (Observation, BTreeSet<VsKey>) {
    let mut unread = BTreeSet::new();
    if let Some(part) = part {
        for (key, vs) in &mut observation.state.services {
            if !part.reads(key) {
                vs.destinations = Default::default();
                vs.connections.clear();
                unread.insert(*key);
            }
        }
    }
    (observation, unread)
}

impl Memory {
    /// Applies one operation; fails like the kernel would (missing object, duplicate).
    pub fn apply_op(&mut self, op: &Op) -> Result<(), Refusal> {
        self.state.apply(op)
    }

    /// A read of the kernel (counted in [`Memory::observed`]).
    fn observe_now(&mut self) -> Result<Observation, Error> {
        self.observed += 1;
        if self.unavailable {
            let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
            return Err(Error::request(
                "list IPVS services",
                ipvs_netlink::Error::FamilyMissing(missing),
            ));
        }
        let traffic = self
            .traffic
            .iter()
            .filter(|(key, _)| self.state.services.contains_key(key))
            .map(|(key, t)| (*key, *t))
            .collect();
        Ok(Observation {
            state: as_read(self.state.clone()),
            host: self.host.clone(),
            traffic,
        })
    }

    /// Whether the test asked to refuse `op` (its description names one of [`Memory::refuse`]).
    fn refuses(&self, op: &Op) -> bool {
        if self.refuse.is_empty() {
            return false;
        }
        let text = op.to_string();
        self.refuse.iter().any(|p| text.contains(p.as_str()))
    }
}

/// The error of an operation the test asked to refuse.
fn refusal(op: &Op) -> Error {
    if op.kind().object().is_ipvs() {
        ipvs_netlink::Error::from_errno(libc::ENOENT).into()
    } else {
        Error::Refused
    }
}

impl Dataplane for Memory {
    async fn observe(&mut self) -> Result<Observation, Error> {
        self.observe_now()
    }

    async fn observe_part(&mut self, part: &Part) -> Result<(Observation, BTreeSet<VsKey>), Error> {
        Ok(only_part(self.observe().await?, Some(part)))
    }

    type Read = (Observation, BTreeSet<VsKey>);

    fn read_apart(&mut self, part: Option<Part>) -> BoxFuture<'static, Result<Self::Read, Error>> {
        // The kernel as it is now; a gate may make the read find a later one.
        let read = self.observe_now();
        let gate = self.gate.clone();
        Box::pin(async move {
            let mut observation = read?;
            let shown = match gate {
                Some(gate) => gate.pass().await,
                None => None,
            };
            if let Some(shown) = shown {
                observation.state = as_read(shown);
            }
            Ok(only_part(observation, part.as_ref()))
        })
    }

    async fn finish_read(&mut self, read: Self::Read) -> Result<Self::Read, Error> {
        Ok(read)
    }

    async fn observe_real_servers(
        &mut self,
        keys: &[VsKey],
    ) -> Result<Vec<(VsKey, Option<RealServers>)>, Error> {
        self.real_server_reads.push(keys.to_vec());
        if self.unavailable {
            let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
            return Err(Error::request(
                "list IPVS destinations",
                ipvs_netlink::Error::FamilyMissing(missing),
            ));
        }
        Ok(keys
            .iter()
            .map(|key| {
                let read = self.state.services.get(key).map(|vs| RealServers {
                    destinations: vs.destinations.clone(),
                    // None recorded means none open, as in `observe`.
                    connections: vs
                        .destinations
                        .keys()
                        .map(|d| (*d, vs.connections.get(d).copied().unwrap_or_default()))
                        .collect(),
                });
                (*key, read)
            })
            .collect())
    }

    async fn apply(&mut self, plan: &Plan) -> Result<Applied, Error> {
        let mut applied = Applied::default();
        for (i, op) in plan.ops.iter().enumerate() {
            if self.refuses(op) {
                applied.failed.push((i, refusal(op)));
                continue;
            }
            match self.apply_op(op) {
                Ok(()) => applied.done += 1,
                Err(e) => applied.failed.push((i, e.into())),
            }
        }
        self.applied.push(plan.clone());
        Ok(applied)
    }

    async fn clean_conntrack(&mut self, filter: &ConntrackFilter) -> Result<Vec<Cleaned>, Error> {
        // No conntrack table: only remember that a pass was asked for.
        self.conntrack_cleanups.push(filter.clone());
        Ok(Vec::new())
    }

    async fn probe_scheduler(&mut self, scheduler: &str) -> Result<(), ProbeFailure> {
        self.probed.push(scheduler.to_string());
        if self.unavailable {
            let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
            return Err(ProbeFailure::Unread(
                ipvs_netlink::Error::FamilyMissing(missing).into(),
            ));
        }
        if self.refuse.iter().any(|r| r == scheduler) {
            let missing = ipvs_netlink::Error::from_errno(libc::ENOENT);
            return Err(ProbeFailure::Refused(missing.into()));
        }
        Ok(())
    }

    async fn set_up_host(&mut self, setup: &HostSetup) -> Vec<(HostStep, Error)> {
        // No host: remember what was asked.
        self.host_setups.push(setup.clone());
        Vec::new()
    }
}
