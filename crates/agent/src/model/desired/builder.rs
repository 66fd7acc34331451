//! The desired state in the making: the set-up every state starts from, the few ways a
//! Service adds to it (a virtual server, a VIP, a set entry, an out filter), and what derives
//! from all the Services at the end.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::{Desired, Footprint, Host, family_rules, sysctls};
use crate::model::desired::iptables::OutFilter;
use crate::model::desired::warning::Warning;
use crate::model::kernel::sets::{self, SetDef, SetName};
use crate::model::kernel::{
    RealServer, SCHED_FLAG_FALLBACK, SCHED_FLAG_PORT, Set, SetEntry, VirtualServer, VsKey,
};
use crate::model::snapshot::cluster::{Family, Service};
use crate::model::snapshot::config::ProxyConfig;

/// The desired state built Service by Service.
pub(super) struct Builder<'a> {
    /// The configuration, node settings resolved.
    pub(super) config: &'a ProxyConfig,
    /// The host's addresses.
    pub(super) host: &'a Host,
    /// The state so far.
    pub(super) d: Desired,
    /// Load-balancer entries whose source ranges leave the node out.
    out_filters: BTreeSet<OutFilter>,
    /// The footprint of the Service being built, when asked for.
    pub(super) record: Option<Footprint>,
    /// Virtual servers two Services want.
    pub(super) contested: BTreeSet<VsKey>,
}

impl<'a> Builder<'a> {
    /// A builder whose state has the link and every set of the configured families.
    pub(super) fn new(config: &'a ProxyConfig, host: &'a Host) -> Self {
        let mut out = Builder {
            config,
            host,
            d: Desired::default(),
            out_filters: BTreeSet::new(),
            record: None,
            contested: BTreeSet::new(),
        };
        out.d.state.link = true;
        for family in &config.families {
            for def in sets::ALL {
                out.d.state.sets.insert(
                    SetName::new(def, *family),
                    Set {
                        kind: def.kind,
                        family: *family,
                        entries: BTreeSet::new(),
                    },
                );
            }
        }
        out
    }

    /// The state of every Service built so far, with what derives from all of them: the
    /// VIP and ownership sets, the rules, the sysctls.
    pub(super) fn finish(mut self) -> Desired {
        let config = self.config;
        // Addresses bound on kube-ipvs0, and ownership of every virtual server.
        let addresses: Vec<IpAddr> = self.d.state.addresses.iter().copied().collect();
        for ip in addresses {
            self.add_entry(&sets::IPVS_IPS, Family::of(&ip), SetEntry::Ip(ip));
        }
        let keys: Vec<VsKey> = self.d.state.services.keys().copied().collect();
        for k in keys {
            self.add_entry(
                &sets::OWNED,
                Family::of(&k.address),
                SetEntry::IpPort(k.address, k.protocol, k.port),
            );
        }
        for family in &config.families {
            let rules = family_rules(*family, config, &self.d.state, &self.out_filters);
            self.d.state.rules.insert(*family, rules);
        }
        self.d.state.sysctls = sysctls(config);
        self.d
    }

    /// Adds `entry` to the set `def` of `family` (when the family is served).
    pub(super) fn add_entry(&mut self, def: &'static SetDef, family: Family, entry: SetEntry) {
        let name = SetName::new(def, family);
        if let Some(set) = self.d.state.sets.get_mut(&name) {
            set.entries.insert(entry);
            if let Some(r) = &mut self.record {
                r.entries.push((name, entry));
            }
        }
    }

    /// Asks for the virtual server `key` for `service`, sending to `destinations`: the first
    /// Service to ask keeps it, and a later one is a conflict.
    pub(super) fn add_vs(
        &mut self,
        service: &Arc<Service>,
        key: VsKey,
        destinations: &[SocketAddr],
    ) {
        if let Some(r) = &mut self.record {
            r.vs.push(key);
        }
        if let Some(owner) = self.d.owners.get(&key) {
            if owner.id != service.id {
                self.d.conflicts.push(Warning::Contested {
                    key,
                    owner: owner.id.clone(),
                    other: service.id.clone(),
                });
                self.contested.insert(key);
            }
            return;
        }
        // A refused annotation is reported once per sync by the syncer, not per virtual server.
        let (scheduler, _) = crate::model::desired::scheduler::resolve(service, self.config);
        // `mh` hashes the port too (kube-proxy B24). `sh` and `mh` skip weight-0 (draining)
        // real servers only with the fallback flag; without it a client hashed to one gets no
        // real server at all (kube-proxy B23).
        let sched_flags = match scheduler.as_str() {
            "mh" => SCHED_FLAG_PORT | SCHED_FLAG_FALLBACK,
            "sh" => SCHED_FLAG_FALLBACK,
            _ => 0,
        };
        let vs = VirtualServer {
            scheduler,
            sched_flags,
            persistence: service.session_affinity,
            destinations: destinations
                .iter()
                .map(|d| (RealServer::from(*d), 1))
                .collect(),
            connections: Default::default(),
        };
        self.d.owners.insert(key, service.clone());
        self.d.state.services.insert(key, vs);
    }

    /// Binds `ip` on kube-ipvs0 unless the host already has it elsewhere.
    pub(super) fn bind(&mut self, ip: IpAddr) {
        if !self.host.is_local(&ip) {
            self.d.state.addresses.insert(ip);
            if let Some(r) = &mut self.record {
                r.addresses.push(ip);
            }
        }
    }

    /// Drops the node's own traffic to a load-balancer IP whose source ranges leave it out.
    pub(super) fn add_out_filter(&mut self, filter: OutFilter) {
        if let Some(r) = &mut self.record {
            r.out_filters.push(filter.clone());
        }
        self.out_filters.insert(filter);
    }

    /// Counts a Service port of `family` whose Local policies (internal, external) found no
    /// endpoint on this node while the cluster has some.
    pub(super) fn count_no_local(&mut self, family: Family, internal: bool, external: bool) {
        let add = (u64::from(internal), u64::from(external));
        let counts = self.d.no_local_endpoints.entry(family).or_default();
        counts.0 += add.0;
        counts.1 += add.1;
        if let Some(r) = &mut self.record {
            let c = r.no_local.entry(family).or_default();
            c.0 += add.0;
            c.1 += add.1;
        }
    }
}
