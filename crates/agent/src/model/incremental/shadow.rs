//! The kernel-state shadow: what the agent believes the kernel holds, kept between reads by
//! replaying on the last observation every plan the kernel applied whole. Plans are made
//! against it; the in-memory kernel of the tests applies plans with it too.

use std::collections::BTreeSet;

use crate::model::kernel::host::Host;
use crate::model::kernel::{
    KernelState, RealServer, RealServers, Set, SetName, VirtualServer, VsKey,
};
use crate::model::plan::Op;
use crate::model::snapshot::cluster::Protocol;

/// The kernel as last read, with every plan applied since replayed on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shadow {
    /// The kernel state the agent manages.
    pub state: KernelState,
    /// The host's facts as last read.
    pub host: Host,
}

impl Shadow {
    /// Replays `ops`, which the kernel applied whole. They were planned against this shadow,
    /// so none is refused; one that were would leave the state as it is, as the kernel
    /// would.
    pub fn replay(&mut self, ops: &[Op]) {
        for op in ops {
            let _ = self.state.apply(op);
        }
    }

    /// [`Shadow::replay`], each operation freed once replayed, and the plan's own buffer
    /// given back half by half: a cold plan (an operation per real server) and the shadow it
    /// builds are then never both whole at once, the largest part of the cold sync's peak.
    pub fn replay_moving(&mut self, mut ops: Vec<Op>) {
        while !ops.is_empty() {
            let half = ops.len().div_ceil(2);
            for op in ops.drain(..half) {
                let _ = self.state.apply(&op);
            }
            // Shrinking in place frees the tail for the allocations the replay goes on with.
            ops.shrink_to_fit();
        }
    }

    /// The TCP virtual servers, among `keys` (all when `None`), that `desired` wants and
    /// whose real servers here include one `desired` does not want: a real server that is
    /// removed now or drains. Whether it may go depends on its connections, which only a
    /// read of the kernel tells.
    pub fn losing_real_servers<'a>(
        &self,
        desired: &KernelState,
        keys: Option<impl IntoIterator<Item = &'a VsKey>>,
    ) -> Vec<VsKey> {
        let losing = |key: &VsKey| {
            key.protocol == Protocol::Tcp
                && match (self.state.services.get(key), desired.services.get(key)) {
                    (Some(have), Some(want)) => have
                        .destinations
                        .keys()
                        .any(|d| !want.destinations.contains_key(d)),
                    _ => false,
                }
        };
        match keys {
            Some(keys) => keys.into_iter().filter(|k| losing(k)).copied().collect(),
            None => self
                .state
                .services
                .keys()
                .filter(|k| losing(k))
                .copied()
                .collect(),
        }
    }

    /// Takes in what a targeted read of some virtual servers found: their real servers and
    /// connection counts replace what the shadow held; one the kernel no longer holds goes.
    pub fn refresh(&mut self, read: Vec<(VsKey, Option<RealServers>)>) {
        for (key, found) in read {
            match found {
                Some(RealServers {
                    destinations,
                    connections,
                }) => {
                    if let Some(vs) = self.state.services.get_mut(&key) {
                        vs.destinations = destinations;
                        vs.connections = connections;
                    }
                }
                None => {
                    self.state.services.remove(&key);
                }
            }
        }
    }

    /// Forgets the connection counts of `keys` (they are good only for the sync that read
    /// them).
    pub fn forget_connections<'a>(&mut self, keys: impl IntoIterator<Item = &'a VsKey>) {
        for key in keys {
            if let Some(vs) = self.state.services.get_mut(key) {
                vs.connections.clear();
            }
        }
    }
}

/// Why an operation cannot apply to a state: what the kernel would answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The object to make exists already.
    #[error("{0} exists")]
    Exists(String),
    /// The object to change or delete does not exist.
    #[error("no {0}")]
    Missing(String),
}

impl KernelState {
    /// Applies one operation as the kernel does, or refuses it as the kernel would (an
    /// object made twice, or changed while missing) and leaves the state as it was.
    pub fn apply(&mut self, op: &Op) -> Result<(), Refusal> {
        match op {
            Op::CreateLink => self.link = true,
            Op::SetSysctl { key, value } => {
                self.sysctls.insert(key.to_string(), value.to_string());
            }
            Op::CreateSet(name) => self.create_set(*name)?,
            Op::AddEntries { set, entries } => {
                let set = self.set_mut(set)?;
                set.entries.extend(entries.iter().copied());
            }
            Op::DelEntries { set, entries } => {
                let set = self.set_mut(set)?;
                for e in entries.iter() {
                    set.entries.remove(e);
                }
            }
            Op::AddAddress(ip) => {
                if !self.link {
                    return Err(Refusal::Missing("link".into()));
                }
                self.addresses.insert(*ip);
            }
            Op::DelAddress(ip) => {
                self.addresses.remove(ip);
            }
            Op::WriteRules { family, rules, .. } => {
                // Holds every jump afterwards, as the kernel does.
                self.rules.insert(*family, (**rules).clone());
            }
            Op::AddService { key, service } => self.add_service(key, service)?,
            Op::UpdateService { key, service } => self.update_service(key, service)?,
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
                self.service_mut(key)?
                    .destinations
                    .insert(*destination, *weight);
            }
            Op::DelDestination { key, destination } => self.del_destination(key, destination)?,
            Op::DelService(key) => {
                self.services
                    .remove(key)
                    .ok_or_else(|| Refusal::Missing(format!("service {key}")))?;
            }
            Op::RemoveRules { family, .. } => {
                self.rules.remove(family);
            }
            Op::DestroySet(name) => {
                self.sets
                    .remove(name)
                    .ok_or_else(|| Refusal::Missing(format!("set {name}")))?;
            }
            Op::DeleteLink => {
                self.link = false;
                self.addresses.clear();
            }
        }
        Ok(())
    }

    /// The set `name`, or the refusal a missing set gets.
    fn set_mut(&mut self, name: &SetName) -> Result<&mut Set, Refusal> {
        self.sets
            .get_mut(name)
            .ok_or_else(|| Refusal::Missing(format!("set {name}")))
    }

    /// The virtual server `key`, or the refusal a missing one gets.
    fn service_mut(&mut self, key: &VsKey) -> Result<&mut VirtualServer, Refusal> {
        self.services
            .get_mut(key)
            .ok_or_else(|| Refusal::Missing(format!("service {key}")))
    }

    /// Makes an empty set, unless one of that name exists.
    fn create_set(&mut self, name: SetName) -> Result<(), Refusal> {
        if self.sets.contains_key(&name) {
            return Err(Refusal::Exists(format!("set {name}")));
        }
        self.sets.insert(
            name,
            Set {
                kind: name.kind(),
                family: name.family(),
                entries: BTreeSet::new(),
            },
        );
        Ok(())
    }

    /// Makes a virtual server, unless one with that key exists.
    fn add_service(&mut self, key: &VsKey, service: &VirtualServer) -> Result<(), Refusal> {
        if self.services.contains_key(key) {
            return Err(Refusal::Exists(key.to_string()));
        }
        self.services.insert(*key, service.clone());
        Ok(())
    }

    /// Changes a virtual server's settings; its real servers and their connections stay, as
    /// the kernel's edit of a service leaves its destinations.
    fn update_service(&mut self, key: &VsKey, service: &VirtualServer) -> Result<(), Refusal> {
        let vs = self.service_mut(key)?;
        let destinations = std::mem::take(&mut vs.destinations);
        let connections = std::mem::take(&mut vs.connections);
        *vs = VirtualServer {
            destinations,
            connections,
            ..service.clone()
        };
        Ok(())
    }

    /// Removes a real server and its connection count.
    fn del_destination(&mut self, key: &VsKey, destination: &RealServer) -> Result<(), Refusal> {
        let vs = self.service_mut(key)?;
        vs.destinations
            .remove(destination)
            .ok_or_else(|| Refusal::Missing(format!("destination {destination}")))?;
        vs.connections.remove(destination);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernel::VsKey;
    use crate::model::kernel::sets::named;

    fn key() -> VsKey {
        VsKey {
            address: "10.96.0.10".parse().unwrap(),
            protocol: crate::model::snapshot::cluster::Protocol::Tcp,
            port: 80,
        }
    }

    #[test]
    fn a_refused_operation_leaves_the_state_as_it_was() {
        let mut state = KernelState::default();
        let add = |scheduler: &str| Op::AddService {
            key: key(),
            service: Box::new(VirtualServer {
                scheduler: scheduler.into(),
                ..VirtualServer::default()
            }),
        };
        state.apply(&add("rr")).unwrap();
        let destination = "10.244.0.2:8080".parse().unwrap();
        state
            .apply(&Op::AddDestination {
                key: key(),
                destination,
                weight: 1,
            })
            .unwrap();
        let before = state.clone();
        assert_eq!(
            state.apply(&add("sh")),
            Err(Refusal::Exists("10.96.0.10:80/tcp".into()))
        );
        assert_eq!(
            state.apply(&Op::AddAddress("10.96.0.10".parse().unwrap())),
            Err(Refusal::Missing("link".into()))
        );
        assert_eq!(
            state.apply(&Op::AddEntries {
                set: named("KUBE-CLUSTER-IP"),
                entries: Vec::new().into(),
            }),
            Err(Refusal::Missing("set KUBE-CLUSTER-IP".into()))
        );
        assert_eq!(state, before);
    }

    #[test]
    fn an_update_keeps_the_real_servers_and_a_replay_reaches_the_plans_state() {
        let mut shadow = Shadow::default();
        let destination = "10.244.0.2:8080".parse().unwrap();
        shadow.replay(&[
            Op::CreateLink,
            Op::AddAddress("10.96.0.10".parse().unwrap()),
            Op::AddService {
                key: key(),
                service: Box::new(VirtualServer {
                    scheduler: "rr".into(),
                    ..VirtualServer::default()
                }),
            },
            Op::AddDestination {
                key: key(),
                destination,
                weight: 1,
            },
            Op::UpdateService {
                key: key(),
                service: Box::new(VirtualServer {
                    scheduler: "sh".into(),
                    ..VirtualServer::default()
                }),
            },
        ]);
        let vs = &shadow.state.services[&key()];
        assert_eq!(vs.scheduler, "sh");
        assert_eq!(vs.destinations.get(&destination), Some(&1));
        assert!(shadow.state.link && shadow.state.addresses.len() == 1);
        shadow.replay(&[Op::DeleteLink]);
        assert!(!shadow.state.link && shadow.state.addresses.is_empty());
    }
}
