//! An in-memory kernel: applies plans to a [`KernelState`] exactly as the real dataplane
//! would, for tests of the sync loop.

use std::collections::BTreeSet;

use super::conntrack::Cleaned;
use super::{Applied, Dataplane, Error, Observation};
use crate::model::conntrack::ConntrackFilter;
use crate::model::desired::Host;
use crate::model::kernel::{KernelState, Set, VirtualServer};
use crate::model::plan::{Op, Plan};

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
    /// The filter of every conntrack cleanup asked for.
    pub conntrack_cleanups: Vec<ConntrackFilter>,
    /// Operations the kernel refuses: those whose description contains one of these. IPVS
    /// refuses with `ENOENT`, as a kernel without some scheduler module refuses its virtual
    /// servers; the others with [`Error::Refused`].
    pub refuse: Vec<String>,
    /// When set, reading the kernel fails as it does without the IPVS module.
    pub unavailable: bool,
}

/// Why the in-memory kernel refused an operation: what the kernel would answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The object to make exists already.
    #[error("{0} exists")]
    Exists(String),
    /// The object to change or delete does not exist.
    #[error("no {0}")]
    Missing(String),
}

impl Memory {
    /// Applies one operation; fails like the kernel would (missing object, duplicate).
    pub fn apply_op(&mut self, op: &Op) -> Result<(), Refusal> {
        let s = &mut self.state;
        match op {
            Op::CreateLink => s.link = true,
            Op::SetSysctl { key, value } => {
                s.sysctls.insert(key.clone(), value.clone());
            }
            Op::CreateSet { name, kind, family } => {
                if s.sets.contains_key(name) {
                    return Err(Refusal::Exists(format!("set {name}")));
                }
                s.sets.insert(
                    name.clone(),
                    Set {
                        kind: *kind,
                        family: *family,
                        entries: BTreeSet::new(),
                    },
                );
            }
            Op::AddEntries { set, entries } => {
                let set = s
                    .sets
                    .get_mut(set)
                    .ok_or_else(|| Refusal::Missing(format!("set {set}")))?;
                set.entries.extend(entries.iter().copied());
            }
            Op::DelEntries { set, entries } => {
                let set = s
                    .sets
                    .get_mut(set)
                    .ok_or_else(|| Refusal::Missing(format!("set {set}")))?;
                for e in entries {
                    set.entries.remove(e);
                }
            }
            Op::AddAddress(ip) => {
                if !s.link {
                    return Err(Refusal::Missing("link".into()));
                }
                s.addresses.insert(*ip);
            }
            Op::DelAddress(ip) => {
                s.addresses.remove(ip);
            }
            Op::WriteRules { family, rules, .. } => {
                // Holds every jump afterwards, as the kernel does.
                s.rules.insert(*family, rules.clone());
            }
            Op::AddService { key, service } => {
                if s.services.insert(*key, service.clone()).is_some() {
                    return Err(Refusal::Exists(key.to_string()));
                }
            }
            Op::UpdateService { key, service } => {
                let vs = s
                    .services
                    .get_mut(key)
                    .ok_or_else(|| Refusal::Missing(format!("service {key}")))?;
                let destinations = std::mem::take(&mut vs.destinations);
                let connections = std::mem::take(&mut vs.connections);
                *vs = VirtualServer {
                    destinations,
                    connections,
                    ..service.clone()
                };
            }
            Op::AddDestination {
                key,
                destination,
                weight,
            }
            | Op::UpdateDestination {
                key,
                destination,
                weight,
            } => {
                let vs = s
                    .services
                    .get_mut(key)
                    .ok_or_else(|| Refusal::Missing(format!("service {key}")))?;
                vs.destinations.insert(*destination, *weight);
            }
            Op::DelDestination { key, destination } => {
                let vs = s
                    .services
                    .get_mut(key)
                    .ok_or_else(|| Refusal::Missing(format!("service {key}")))?;
                vs.destinations
                    .remove(destination)
                    .ok_or_else(|| Refusal::Missing(format!("destination {destination}")))?;
                vs.connections.remove(destination);
            }
            Op::DelService(key) => {
                s.services
                    .remove(key)
                    .ok_or_else(|| Refusal::Missing(format!("service {key}")))?;
            }
            Op::RemoveRules { family, .. } => {
                s.rules.remove(family);
            }
            Op::DestroySet(name) => {
                s.sets
                    .remove(name)
                    .ok_or_else(|| Refusal::Missing(format!("set {name}")))?;
            }
            Op::DeleteLink => {
                s.link = false;
                s.addresses.clear();
            }
        }
        Ok(())
    }
}

impl Memory {
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
    match op {
        Op::AddService { .. }
        | Op::UpdateService { .. }
        | Op::DelService(_)
        | Op::AddDestination { .. }
        | Op::UpdateDestination { .. }
        | Op::DelDestination { .. } => ipvs_netlink::Error::from_errno(libc::ENOENT).into(),
        _ => Error::Refused,
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
