//! Reading the kernel: what a full sync reads, on the agent's sockets or, for the read made
//! apart ([`crate::dataplane::Dataplane::read_apart`]), on sockets of its own, so that the
//! periodic pass reads on a task of its own while changes are applied. The VIP bindings
//! are read last, by the [`Kernel`] itself, which keeps track of them to change them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use tracing::debug;

use super::ipvs::{self, ipvs_error};
use super::{Kernel, blocking, sets};
use crate::dataplane::iptables::{self, Backend, Seen};
use crate::dataplane::link::Links;
use crate::dataplane::{Error, Observation, Traffic, sysctl};
use crate::model::desired::Host;
use crate::model::kernel::rolling::Part;
use crate::model::kernel::{KernelState, Set, SetName, VirtualServer, VsKey};
use crate::model::snapshot::cluster::Family;

/// What a read of the kernel found but for the VIP bindings, the rules as the backend
/// printed them (the [`Kernel`] knows how its own writes print).
pub struct Found {
    services: BTreeMap<VsKey, VirtualServer>,
    /// What IPVS counted per virtual server, when asked.
    traffic: BTreeMap<VsKey, Traffic>,
    /// Virtual servers whose real servers were not read.
    unread: BTreeSet<VsKey>,
    sets: BTreeMap<SetName, Set>,
    rules: Vec<(Family, Seen)>,
    sysctls: BTreeMap<String, String>,
}

/// What a read needs beside its sockets, owned so that the read borrows nothing.
pub(super) struct Reader {
    families: Vec<Family>,
    backend: Backend,
    sysctl_keys: Vec<String>,
    traffic: bool,
}

impl Reader {
    /// Reads IPVS over `ipvs` and `dumpers` (the real servers of the virtual servers `part`
    /// selects alone, when there is a part), the sets, the rules and the sysctls.
    async fn read(
        self,
        ipvs: &ipvs_netlink::Handle,
        dumpers: &[ipvs_netlink::Handle],
        part: Option<&Part>,
    ) -> Result<Found, Error> {
        // IPVS on the agent's netlink sockets, the rest on the blocking pool: the two reads
        // take different kernel locks, so they overlap (a no-op full resync's read at 50,000
        // is mostly IPVS's real servers and the sets).
        let Reader {
            families,
            backend,
            sysctl_keys,
            traffic,
        } = self;
        let ipvs_read = async {
            let t = Instant::now();
            let read = ipvs::observe_services(ipvs, dumpers, part, traffic).await?;
            debug!(services = read.0.len(), unread = read.1.len(), elapsed = ?t.elapsed(), "observed IPVS");
            Ok::<_, Error>(read)
        };
        let rest = async move {
            let t = Instant::now();
            let sets = sets::observe_sets(families.clone()).await?;
            debug!(elapsed = ?t.elapsed(), "observed sets");
            let mut rules = Vec::with_capacity(families.len());
            for family in families {
                let seen = blocking("iptables", move || iptables::read(backend, family)).await??;
                rules.push((family, seen));
            }
            let sysctls = blocking("sysctl", move || sysctl::read(&sysctl_keys)).await?;
            Ok::<_, Error>((sets, rules, sysctls))
        };
        let ((services, unread, traffic), (sets, rules, sysctls)) =
            futures::try_join!(ipvs_read, rest)?;
        Ok(Found {
            services,
            traffic,
            unread,
            sets,
            rules,
            sysctls,
        })
    }

    /// [`Reader::read`] over sockets of its own: a dump on the agent's sockets would meet
    /// the dumps of its changes' targeted reads, and the kernel runs one dump per socket.
    pub(super) async fn read_apart(self, part: Option<Part>) -> Result<Found, Error> {
        let ipvs = ipvs_netlink::connect()
            .await
            .map_err(|e| ipvs_error("connect to IPVS", e))?;
        let dumpers = ipvs::connect_sockets().await?;
        self.read(&ipvs, &dumpers, part.as_ref()).await
    }
}

impl Kernel {
    /// A reader of what this kernel serves.
    pub(super) fn reader(&self) -> Reader {
        Reader {
            families: self.families.clone(),
            backend: self.backend,
            sysctl_keys: self.sysctl_keys.clone(),
            traffic: self.traffic,
        }
    }

    /// The kernel state the agent manages, the real servers of the virtual servers `part`
    /// selects alone when there is a part, read on the agent's own sockets.
    pub(super) async fn read(
        &mut self,
        part: Option<&Part>,
    ) -> Result<(Observation, BTreeSet<VsKey>), Error> {
        let found = self.reader().read(&self.ipvs, &self.dumpers, part).await?;
        self.complete(found).await
    }

    /// Completes what a read found with the VIP bindings, read now.
    pub(super) async fn complete(
        &mut self,
        found: Found,
    ) -> Result<(Observation, BTreeSet<VsKey>), Error> {
        let (interfaces, addresses) = self.read_bindings().await?;
        let host = Host {
            addresses: Links::local_addresses(&interfaces, &addresses),
        };
        let state = KernelState {
            link: self.link_index.is_some(),
            addresses: self.vips.vips(),
            services: found.services,
            sets: found.sets,
            rules: found
                .rules
                .iter()
                .map(|(family, seen)| (*family, self.written.observed(*family, seen)))
                .collect(),
            sysctls: found.sysctls,
        };
        let observation = Observation {
            state,
            host,
            traffic: found.traffic,
        };
        Ok((observation, found.unread))
    }
}
