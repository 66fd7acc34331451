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
    /// Operations the kernel refuses: those whose description contains one of these (as
    /// a kernel without some scheduler module refuses its virtual servers).
    pub refuse: Vec<String>,
    /// When set, reading the kernel fails with this message (as without the IPVS module).
    pub unavailable: Option<String>,
}

impl Memory {
    /// Applies one operation; fails like the kernel would (missing object, duplicate).
    pub fn apply_op(&mut self, op: &Op) -> Result<(), String> {
        let s = &mut self.state;
        match op {
            Op::CreateLink => s.link = true,
            Op::SetSysctl { key, value } => {
                s.sysctls.insert(key.clone(), value.clone());
            }
            Op::CreateSet { name, kind, family } => {
                if s.sets.contains_key(name) {
                    return Err(format!("set {name} exists"));
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
                let set = s.sets.get_mut(set).ok_or_else(|| format!("no set {set}"))?;
                set.entries.extend(entries.iter().copied());
            }
            Op::DelEntries { set, entries } => {
                let set = s.sets.get_mut(set).ok_or_else(|| format!("no set {set}"))?;
                for e in entries {
                    set.entries.remove(e);
                }
            }
            Op::AddAddress(ip) => {
                if !s.link {
                    return Err("no link".into());
                }
                s.addresses.insert(*ip);
            }
            Op::DelAddress(ip) => {
                s.addresses.remove(ip);
            }
            Op::WriteRules { family, rules, .. } => {
                // Holds every jump afterwards, as the kernel does.
                s.rules.insert(*family, (**rules).clone());
            }
            Op::AddService { key, service } => {
                if s.services.insert(*key, (**service).clone()).is_some() {
                    return Err(format!("{key} exists"));
                }
            }
            Op::UpdateService { key, service } => {
                let vs = s
                    .services
                    .get_mut(key)
                    .ok_or_else(|| format!("no service {key}"))?;
                let destinations = std::mem::take(&mut vs.destinations);
                let connections = std::mem::take(&mut vs.connections);
                *vs = VirtualServer {
                    destinations,
                    connections,
                    ..(**service).clone()
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
                    .ok_or_else(|| format!("no service {key}"))?;
                vs.destinations.insert(*destination, *weight);
            }
            Op::DelDestination { key, destination } => {
                let vs = s
                    .services
                    .get_mut(key)
                    .ok_or_else(|| format!("no service {key}"))?;
                vs.destinations
                    .remove(destination)
                    .ok_or_else(|| format!("no destination {destination}"))?;
                vs.connections.remove(destination);
            }
            Op::DelService(key) => {
                s.services
                    .remove(key)
                    .ok_or_else(|| format!("no service {key}"))?;
            }
            Op::RemoveRules { family, .. } => {
                s.rules.remove(family);
            }
            Op::DestroySet(name) => {
                s.sets
                    .remove(name)
                    .ok_or_else(|| format!("no set {name}"))?;
            }
            Op::DeleteLink => {
                s.link = false;
                s.addresses.clear();
            }
        }
        Ok(())
    }
}

impl Dataplane for Memory {
    async fn observe(&mut self) -> Result<Observation, Error> {
        self.observed += 1;
        if let Some(message) = &self.unavailable {
            return Err(Error::Netlink {
                what: "list IPVS services".into(),
                message: message.clone(),
            });
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
        for op in &plan.ops {
            let text = op.to_string();
            if self.refuse.iter().any(|p| text.contains(p.as_str())) {
                applied.failed.push((text, "refused".into()));
                continue;
            }
            match self.apply_op(op) {
                Ok(()) => applied.done += 1,
                Err(e) => applied.failed.push((op.to_string(), e)),
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
