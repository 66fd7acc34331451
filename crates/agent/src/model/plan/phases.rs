//! The plan builder: each object's operations go to their phase, and the phases are joined in
//! the one order that keeps traffic flowing, whichever objects a plan looks at.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use super::ownership::owns;
use super::{Op, Plan};
use crate::model::desired::warning::Warning;
use crate::model::kernel::canonical::canonical;
use crate::model::kernel::{
    Jump, KernelState, Rules, Set, SetEntry, SetName, VirtualServer, VsKey,
};
use crate::model::plan::drain::DestinationKey;
use crate::model::snapshot::cluster::{Family, Protocol};

/// Where an operation goes in a plan. The variants are in plan order: everything new or
/// changed (early), then the real servers that go, then what is no longer wanted (late), the
/// things that name others before the things they name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// `kube-ipvs0`, which the addresses go on.
    Link,
    /// The sysctls IPVS needs before it carries traffic.
    Sysctls,
    /// Sets created and filled, before the rules that match them and before the virtual
    /// servers their ownership entries claim.
    Sets,
    /// VIPs bound.
    Addresses,
    /// The agent's chains rewritten.
    Rules,
    /// Virtual servers and real servers added or changed, draining ones set to weight 0.
    VirtualServers,
    /// Real servers removed, once every addition has given their traffic somewhere to go.
    RealServerDeletions,
    /// Virtual servers no longer wanted, while the sets still claim them.
    VirtualServerDeletions,
    /// VIPs unbound, once nothing is served on them.
    AddressDeletions,
    /// Set entries removed last: ownership claims outlive the servers they claim.
    EntryDeletions,
}

impl Phase {
    /// How many phases there are.
    const COUNT: usize = Phase::EntryDeletions as usize + 1;
}

/// A plan in the making. Each method compares one object (or one kind of object) and puts
/// what it needs in its [`Phase`]; [`Phases::finish`] joins them. The order the caller walks
/// objects in matters only within a phase.
#[derive(Debug, Default)]
pub(super) struct Phases {
    /// Operations by phase, indexed by [`Phase`] (so in plan order).
    ops: [Vec<Op>; Phase::COUNT],
    warnings: Vec<Warning>,
}

impl Phases {
    fn push(&mut self, phase: Phase, op: Op) {
        self.ops[phase as usize].push(op);
    }

    /// The plan: every phase's operations, phase after phase.
    pub(super) fn finish(mut self) -> Plan {
        // The others join the largest phase where it lies (a cold plan's real servers): a
        // new vector for all of them would hold every operation twice at the plan's peak.
        let largest = (0..Phase::COUNT)
            .max_by_key(|&i| self.ops[i].len())
            .unwrap_or(0);
        let mut ops = std::mem::take(&mut self.ops[largest]);
        let (before, after) = self.ops.split_at_mut(largest);
        let before: Vec<Op> = before.iter_mut().flat_map(std::mem::take).collect();
        // Exact: a doubling here would leave up to half a cold plan's vector unused.
        ops.reserve_exact(before.len() + after.iter().map(Vec::len).sum::<usize>());
        ops.splice(0..0, before);
        for phase in after {
            ops.append(phase);
        }
        Plan {
            ops,
            warnings: self.warnings,
        }
    }

    /// Makes room for the virtual servers `desired` has and `observed` lacks, each with its
    /// real servers, and for the operations of every other phase so far: a cold plan's
    /// largest phase, which the others join, is then allocated once at its size. Grown an
    /// operation at a time, its vector doubled past 65,536 operations to room for 131,072
    /// (6 MiB at 10,000 Services, half of it unused, at the plan's peak).
    pub(super) fn reserve_virtual_servers(
        &mut self,
        desired: &KernelState,
        observed: &KernelState,
    ) {
        let new: usize = desired
            .services
            .iter()
            .filter(|(key, _)| !observed.services.contains_key(key))
            .map(|(_, vs)| 1 + vs.destinations.len())
            .sum();
        if new == 0 {
            return;
        }
        let others: usize = self.ops.iter().map(Vec::len).sum();
        self.ops[Phase::VirtualServers as usize].reserve_exact(new + others);
    }

    /// The link, when it is wanted and missing.
    pub(super) fn link(&mut self, desired: &KernelState, observed: &KernelState) {
        if desired.link && !observed.link {
            self.push(Phase::Link, Op::CreateLink);
        }
    }

    /// Every sysctl whose value differs.
    pub(super) fn sysctls(&mut self, desired: &KernelState, observed: &KernelState) {
        for (key, value) in &desired.sysctls {
            if observed.sysctls.get(key) != Some(value) {
                self.push(
                    Phase::Sysctls,
                    Op::SetSysctl {
                        key: key.as_str().into(),
                        value: value.as_str().into(),
                    },
                );
            }
        }
    }

    /// The set `name`, created when missing. False when it exists with another type: it is
    /// left as it is, entries included, and the plan says so.
    pub(super) fn set(&mut self, name: SetName, want: &Set, have: Option<&Set>) -> bool {
        match have {
            None => self.push(Phase::Sets, Op::CreateSet(name)),
            Some(h) if h.kind != want.kind => {
                // Never change the type of an existing set (kube-proxy #77265): leave it and say so.
                self.warnings.push(Warning::SetKind {
                    name,
                    found: h.kind,
                    wanted: want.kind,
                });
                return false;
            }
            Some(_) => {}
        }
        true
    }

    /// Entries of the set `name` to add (early) and to remove (last).
    pub(super) fn entries(&mut self, name: SetName, add: Vec<SetEntry>, del: Vec<SetEntry>) {
        if !add.is_empty() {
            self.push(
                Phase::Sets,
                Op::AddEntries {
                    set: name,
                    entries: add.into(),
                },
            );
        }
        if !del.is_empty() {
            self.push(
                Phase::EntryDeletions,
                Op::DelEntries {
                    set: name,
                    entries: del.into(),
                },
            );
        }
    }

    /// The VIP `ip`, bound or unbound as `wanted` says against `bound`.
    pub(super) fn address(&mut self, ip: IpAddr, wanted: bool, bound: bool) {
        match (wanted, bound) {
            (true, false) => self.push(Phase::Addresses, Op::AddAddress(ip)),
            (false, true) => self.push(Phase::AddressDeletions, Op::DelAddress(ip)),
            _ => {}
        }
    }

    /// The rules of `family`, rewritten whole when a chain differs or a jump is missing.
    pub(super) fn rules(&mut self, family: Family, want: &Rules, have: Option<&Rules>) {
        let none = Rules::default();
        let have = have.unwrap_or(&none);
        let missing: Vec<Jump> = want
            .jumps
            .iter()
            .filter(|j| !have.jumps.contains(j))
            .copied()
            .collect();
        if !same_chains(want, have, family) || !missing.is_empty() {
            self.push(
                Phase::Rules,
                Op::WriteRules {
                    family,
                    rules: Box::new(want.clone()),
                    missing_jumps: missing,
                },
            );
        }
    }

    /// The wanted virtual server `key`, made or brought to `want`; its removed real servers
    /// drain as [`super::plan_draining`] says.
    pub(super) fn virtual_server(
        &mut self,
        key: &VsKey,
        want: &VirtualServer,
        have: Option<&VirtualServer>,
        expired: &BTreeSet<DestinationKey>,
    ) {
        let Some(have) = have else {
            self.push(
                Phase::VirtualServers,
                Op::AddService {
                    key: *key,
                    service: Box::new(without_destinations(want)),
                },
            );
            for (d, w) in &want.destinations {
                self.push(
                    Phase::VirtualServers,
                    Op::AddDestination {
                        key: *key,
                        destination: *d,
                        weight: *w,
                    },
                );
            }
            return;
        };
        if want.settings_differ(have) {
            self.push(
                Phase::VirtualServers,
                Op::UpdateService {
                    key: *key,
                    service: Box::new(without_destinations(want)),
                },
            );
        }
        self.wanted_real_servers(key, want, have);
        self.removed_real_servers(key, want, have, expired);
    }

    /// The real servers `want` holds, added or given their weight (a draining one gets it
    /// back: kube-proxy deletes and re-adds it, which breaks the connections draining to it).
    fn wanted_real_servers(&mut self, key: &VsKey, want: &VirtualServer, have: &VirtualServer) {
        for (d, w) in &want.destinations {
            let op = match have.destinations.get(d) {
                None => Op::AddDestination {
                    key: *key,
                    destination: *d,
                    weight: *w,
                },
                Some(hw) if hw != w => Op::UpdateDestination {
                    key: *key,
                    destination: *d,
                    weight: *w,
                },
                Some(_) => continue,
            };
            self.push(Phase::VirtualServers, op);
        }
    }

    /// The real servers `have` holds and `want` does not: deleted when nothing can drain
    /// (UDP, SCTP, no connection left, or drained for the whole bound: `expired`), else set
    /// to weight 0.
    fn removed_real_servers(
        &mut self,
        key: &VsKey,
        want: &VirtualServer,
        have: &VirtualServer,
        expired: &BTreeSet<DestinationKey>,
    ) {
        for (d, weight) in &have.destinations {
            if want.destinations.contains_key(d) {
                continue;
            }
            let gone_at_once = key.protocol != Protocol::Tcp
                || expired.contains(&(*key, *d))
                || have.connections.get(d).is_some_and(|c| c.is_idle());
            if gone_at_once {
                self.push(
                    Phase::RealServerDeletions,
                    Op::DelDestination {
                        key: *key,
                        destination: *d,
                    },
                );
            } else if *weight != 0 {
                self.push(
                    Phase::VirtualServers,
                    Op::UpdateDestination {
                        key: *key,
                        destination: *d,
                        weight: 0,
                    },
                );
            }
        }
    }

    /// The observed virtual server `key` that is not wanted: deleted when the agent owns it
    /// and it is outside `exclude_cidrs`.
    pub(super) fn unwanted_virtual_server(
        &mut self,
        key: &VsKey,
        observed: &KernelState,
        exclude_cidrs: &[IpNet],
    ) {
        if owns(observed, key) && !exclude_cidrs.iter().any(|c| c.contains(&key.address)) {
            self.push(Phase::VirtualServerDeletions, Op::DelService(*key));
        }
    }
}

/// `vs` without its real servers: the settings an `AddService` or `UpdateService` carries.
fn without_destinations(vs: &VirtualServer) -> VirtualServer {
    VirtualServer {
        scheduler: vs.scheduler.clone(),
        sched_flags: vs.sched_flags,
        persistence: vs.persistence,
        destinations: Default::default(),
        connections: Default::default(),
    }
}

/// Whether two rule sets hold the same chains with the same rules, however each was spelled.
fn same_chains(a: &Rules, b: &Rules, family: Family) -> bool {
    a.chains == b.chains && canonical(a, family) == canonical(b, family)
}
