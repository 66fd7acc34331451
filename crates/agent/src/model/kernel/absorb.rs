//! Taking a fresh read of the kernel into the state already held, in place: what the read
//! found equal is dropped, and the held copy (its allocations) stays.
//!
//! Every full sync reads the kernel, and the shadow used to become that read whole: a new
//! copy of every virtual server, set and rule, made while the old one still lived and while
//! watch events allocated around both. The old copy's space, once freed, was left holding
//! the few long-lived blocks made meanwhile, so under churn the heap's resident pages grew
//! while its bytes in use stayed flat (the soak's anonymous RSS, `tests/peers/tests/soak`).
//! Absorbed in place, a read that finds what the shadow holds frees itself whole.

use std::collections::{BTreeMap, BTreeSet};

use super::host::Host;
use super::{KernelState, Rules, Set, VirtualServer};

impl KernelState {
    /// Makes this state equal to `read`, keeping every part of it that already is.
    pub fn absorb(&mut self, read: KernelState) {
        let KernelState {
            link,
            addresses,
            services,
            sets,
            rules,
            sysctls,
        } = read;
        self.link = link;
        absorb_set(&mut self.addresses, addresses);
        absorb_map(&mut self.services, services, VirtualServer::absorb);
        absorb_map(&mut self.sets, sets, Set::absorb);
        absorb_map(&mut self.rules, rules, Rules::absorb);
        absorb_map(&mut self.sysctls, sysctls, keep_if_equal);
    }
}

impl VirtualServer {
    /// Makes this virtual server equal to `read`, keeping its real servers if equal.
    fn absorb(&mut self, read: VirtualServer) {
        let VirtualServer {
            scheduler,
            sched_flags,
            persistence,
            destinations,
            connections,
        } = read;
        self.scheduler = scheduler;
        self.sched_flags = sched_flags;
        self.persistence = persistence;
        keep_if_equal(&mut self.destinations, destinations);
        // Counts change without the agent and are forgotten after the sync that read them.
        self.connections = connections;
    }
}

impl Set {
    /// Makes this set equal to `read`, keeping the entries it already holds.
    fn absorb(&mut self, read: Set) {
        self.kind = read.kind;
        self.family = read.family;
        absorb_set(&mut self.entries, read.entries);
    }
}

impl Rules {
    /// Makes these rules equal to `read`, keeping each part that already is.
    fn absorb(&mut self, read: Rules) {
        absorb_set(&mut self.chains, read.chains);
        keep_if_equal(&mut self.rules, read.rules);
        keep_if_equal(&mut self.jumps, read.jumps);
    }
}

impl Host {
    /// Makes these facts equal to `read`, keeping the addresses if equal.
    pub fn absorb(&mut self, read: Host) {
        keep_if_equal(&mut self.addresses, read.addresses);
    }
}

/// Takes `read` unless it equals what `held` is.
fn keep_if_equal<T: PartialEq>(held: &mut T, read: T) {
    if *held != read {
        *held = read;
    }
}

/// Makes `held` equal to `read`; the elements in both stay as `held` has them.
fn absorb_set<T: Ord>(held: &mut BTreeSet<T>, read: BTreeSet<T>) {
    if *held == read {
        return;
    }
    held.retain(|e| read.contains(e));
    for e in read {
        // An equal element already held stays; `insert` drops the read one.
        held.insert(e);
    }
}

/// Makes `held` equal to `read`, each value in both absorbed by `absorb`.
fn absorb_map<K: Ord, V>(
    held: &mut BTreeMap<K, V>,
    read: BTreeMap<K, V>,
    absorb: impl Fn(&mut V, V),
) {
    held.retain(|k, _| read.contains_key(k));
    for (k, v) in read {
        match held.get_mut(&k) {
            Some(h) => absorb(h, v),
            None => {
                held.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::model::kernel::{RealServer, VsKey};
    use crate::model::snapshot::cluster::Protocol;

    fn vs(reals: &[u8]) -> VirtualServer {
        let mut v = VirtualServer::default();
        for r in reals {
            let ip = IpAddr::V4(Ipv4Addr::new(10, 244, 0, *r));
            v.destinations.insert(RealServer::new(ip, 8080), 1);
        }
        v
    }

    fn key(last: u8) -> VsKey {
        VsKey {
            address: IpAddr::V4(Ipv4Addr::new(10, 96, 0, last)),
            protocol: Protocol::Tcp,
            port: 80,
        }
    }

    fn first_real(v: &VirtualServer) -> *const RealServer {
        v.destinations.keys().next().unwrap()
    }

    #[test]
    fn a_read_becomes_the_state_and_what_it_found_equal_keeps_its_place() {
        let mut held = KernelState::default();
        held.services.insert(key(1), vs(&[1, 2]));
        held.services.insert(key(2), vs(&[3]));
        held.services.insert(key(3), vs(&[4]));
        held.addresses.insert(key(1).address);
        let kept = first_real(&held.services[&key(1)]);

        let mut read = KernelState::default();
        read.services.insert(key(1), vs(&[1, 2]));
        read.services.insert(key(2), vs(&[3, 5]));
        read.services.insert(key(4), vs(&[6]));
        held.services.get_mut(&key(1)).unwrap().sched_flags = 8;
        read.addresses.insert(key(4).address);
        let expected = read.clone();

        held.absorb(read);
        assert_eq!(held, expected);
        assert_eq!(
            first_real(&held.services[&key(1)]),
            kept,
            "the equal real servers were replaced by the read's copy"
        );
    }

    #[test]
    fn connection_counts_come_from_the_read() {
        let mut held = KernelState::default();
        held.services.insert(key(1), vs(&[1]));
        let mut read = held.clone();
        let real = *held.services[&key(1)].destinations.keys().next().unwrap();
        read.services
            .get_mut(&key(1))
            .unwrap()
            .connections
            .insert(real, Default::default());
        let expected = read.clone();
        held.absorb(read);
        assert_eq!(held, expected);
    }
}
