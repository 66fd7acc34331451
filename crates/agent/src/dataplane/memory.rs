//! An in-memory kernel for tests of the sync loop: applies plans to a [`KernelState`] with
//! the model's shadow ([`KernelState::apply`]), exactly as the real dataplane would.

use std::collections::BTreeSet;

use super::conntrack::Cleaned;
use super::{Applied, Dataplane, Error, Observation, RealServers};
use crate::model::conntrack::ConntrackFilter;
use crate::model::desired::Host;
use crate::model::kernel::{KernelState, VsKey};
use crate::model::plan::{Op, Plan};
use crate::model::rolling::Part;

pub use crate::model::shadow::Refusal;

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
    /// servers; the others with [`Error::Refused`].
    pub refuse: Vec<String>,
    /// When set, reading the kernel fails as it does without the IPVS module.
    pub unavailable: bool,
}

impl Memory {
    /// Applies one operation; fails like the kernel would (missing object, duplicate).
    pub fn apply_op(&mut self, op: &Op) -> Result<(), Refusal> {
        self.state.apply(op)
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
        self.observed += 1;
        if self.unavailable {
            let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
            return Err(Error::request(
                "list IPVS services",
                ipvs_netlink::Error::FamilyMissing(missing),
            ));
        }
        let mut state = self.state.clone();
        // The kernel reports counts for every real server: none recorded means none open.
        for vs in state.services.values_mut() {
            for d in vs.destinations.keys() {
                vs.connections.entry(*d).or_default();
            }
        }
        Ok(Observation {
            state,
            host: self.host.clone(),
        })
    }

    async fn observe_part(&mut self, part: &Part) -> Result<(Observation, BTreeSet<VsKey>), Error> {
        let mut observation = self.observe().await?;
        let mut unread = BTreeSet::new();
        for (key, vs) in &mut observation.state.services {
            if !part.reads(key) {
                vs.destinations = Default::default();
                vs.connections.clear();
                unread.insert(*key);
            }
        }
        Ok((observation, unread))
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
}
