//! The kernel edge: everything that reads or changes kernel state lives here, behind the
//! [`Dataplane`] trait, so the sync loop can run against the real kernel or in memory.
//!
//! - [`link`][]: `kube-ipvs0`, the host's addresses and the VIP routes (rtnetlink).
//! - [`paced_dump`][]: rtnetlink dumps read a datagram at a time, as they are taken in.
//! - [`vip`][]: VIPs as addresses or as local routes, and switching between the two.
//! - [`child`][]: the tools run as child processes die with the agent.
//! - [`conntrack`][]: stale UDP conntrack entries, deleted over ctnetlink.
//! - [`families`][]: which IP families the host can serve.
//! - [`host`][]: the host's set-up at start (IPVS timeouts, conntrack sysctls, OOM score).
//! - [`iptables`][]: backend detection, `iptables-save` reading, `iptables-restore --noflush`.
//! - [`leftovers`][]: kube-proxy iptables and nftables modes' rules, removed at the first sync.
//! - [`modules`][]: scheduler modules IPVS must not load itself.
//! - [`probe`][]: the scheduler probe at start.
//! - [`sysctl`][]: `/proc/sys`.
//! - [`kernel`][]: the real kernel, the [`Dataplane`] the agent runs on.
//! - [`memory`][]: an in-memory kernel for tests.

pub mod child;
pub mod conntrack;
pub mod families;
pub mod host;
pub mod iptables;
pub mod kernel;
pub mod leftovers;
pub mod link;
pub mod memory;
pub mod modules;
pub mod paced_dump;
pub mod probe;
pub mod sysctl;
pub mod vip;

use std::collections::{BTreeMap, BTreeSet};

use futures::future::BoxFuture;

use self::host::{HostSetup, HostStep};
use self::probe::ProbeFailure;
use crate::model::desired::Host;
use crate::model::desired::conntrack::ConntrackFilter;
use crate::model::kernel::rolling::Part;
use crate::model::kernel::{KernelState, VsKey};
use crate::model::plan::{Op, Plan};

pub use crate::model::kernel::RealServers;

/// What reading the kernel gives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// The state the agent manages (every IPVS service, foreign ones too).
    pub state: KernelState,
    /// Facts about the host (its addresses).
    pub host: Host,
    /// What IPVS counted for each virtual server, when the dataplane was asked to keep it
    /// (`kernel::Kernel::count_traffic`); empty otherwise.
    pub traffic: BTreeMap<VsKey, Traffic>,
}

/// What IPVS counted for one virtual server since it was made (`ipvsadm -Ln --stats`), from
/// the service dump every full read already makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Traffic {
    /// Connections scheduled.
    pub connections: u64,
    /// Packets from clients.
    pub in_packets: u64,
    /// Packets to clients.
    pub out_packets: u64,
    /// Bytes from clients.
    pub in_bytes: u64,
    /// Bytes to clients.
    pub out_bytes: u64,
}

/// What applying a plan did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Operations that succeeded.
    pub done: usize,
    /// Operations that failed, each as its index in the plan's `ops` with its error; the
    /// others were still applied.
    pub failed: Vec<(usize, Error)>,
    /// Netlink messages sent.
    pub messages: usize,
}

impl Applied {
    /// The failed operations of `plan` (the plan this outcome is of), with their errors.
    pub fn failures<'a>(&'a self, plan: &'a Plan) -> impl Iterator<Item = (&'a Op, &'a Error)> {
        self.failed
            .iter()
            .filter_map(|(i, e)| plan.ops.get(*i).map(|op| (op, e)))
    }

    /// Adds the outcome of more operations of the same plan.
    pub fn merge(&mut self, more: Applied) {
        self.done += more.done;
        self.messages += more.messages;
        self.failed.extend(more.failed);
    }
}

/// A kernel (real or in memory) that the agent can read and change.
pub trait Dataplane {
    /// Reads the kernel state the agent manages.
    fn observe(&mut self) -> impl Future<Output = Result<Observation, Error>> + Send;
    /// Reads the kernel as [`Dataplane::observe`] does, but the real servers of only the
    /// virtual servers `part` selects (the periodic pass, [`crate::model::kernel::rolling`]): the
    /// others come back without real servers, their keys in the second value.
    fn observe_part(
        &mut self,
        part: &Part,
    ) -> impl Future<Output = Result<(Observation, BTreeSet<VsKey>), Error>> + Send;
    /// What a read made apart ([`Dataplane::read_apart`]) gives, for
    /// [`Dataplane::finish_read`].
    type Read: Send + 'static;
    /// Starts the read of a full pass (as [`Dataplane::observe_part`] reads, or
    /// [`Dataplane::observe`] when `part` is `None`) on handles of its own: the future borrows
    /// nothing, so it can run on a task of its own while this dataplane applies plans (a
    /// periodic pass at scale reads for seconds; changes must not wait behind it). Which of
    /// the plans applied meanwhile it sees is not known: the caller replays them on what it
    /// finds.
    fn read_apart(&mut self, part: Option<Part>) -> BoxFuture<'static, Result<Self::Read, Error>>;
    /// Completes a read made apart into what [`Dataplane::observe_part`] returns: reads what
    /// only this dataplane can (the real kernel: the VIP bindings it keeps track of).
    fn finish_read(
        &mut self,
        read: Self::Read,
    ) -> impl Future<Output = Result<(Observation, BTreeSet<VsKey>), Error>> + Send;
    /// Reads the real servers of the virtual servers `keys` alone, with their connection
    /// counts: what a sync that removes or drains real servers needs to know, without reading
    /// the whole kernel. `None` for a virtual server known not to exist (IPVS itself answers
    /// for a missing one as for one without real servers).
    fn observe_real_servers(
        &mut self,
        keys: &[VsKey],
    ) -> impl Future<Output = Result<Vec<(VsKey, Option<RealServers>)>, Error>> + Send;
    /// Applies `plan` in order. A failed operation does not stop the ones after it (another
    /// Service's changes must not wait on it); failures are reported in [`Applied::failed`].
    fn apply(&mut self, plan: &Plan) -> impl Future<Output = Result<Applied, Error>> + Send;
    /// Deletes the UDP conntrack entries `filter` calls stale (kube-proxy's conntrack
    /// reconciler), one report per family whose table was read.
    fn clean_conntrack(
        &mut self,
        filter: &ConntrackFilter,
    ) -> impl Future<Output = Result<Vec<conntrack::Cleaned>, Error>> + Send;
    /// Checks, as kube-proxy does at start, that the kernel has the IPVS scheduler named
    /// `scheduler` (see [`probe`]). The default accepts every scheduler: a dataplane with no
    /// kernel of its own (a wrapper that times or watches another) has nothing to ask.
    fn probe_scheduler(
        &mut self,
        scheduler: &str,
    ) -> impl Future<Output = Result<(), ProbeFailure>> + Send {
        let _ = scheduler;
        async { Ok(()) }
    }
    /// Sets the host up as kube-proxy does once at start; a step that fails is reported and
    /// the others still run. The default, for a dataplane with no host of its own, sets
    /// nothing.
    fn set_up_host(
        &mut self,
        setup: &HostSetup,
    ) -> impl Future<Output = Vec<(HostStep, Error)>> + Send {
        let _ = setup;
        async { Vec::new() }
    }
}

/// Errors at the kernel edge. The libraries' errors are kept whole, so callers sort them by
/// variant and errno ([`Error::errno`]) rather than by their text.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An IPVS request failed.
    #[error(transparent)]
    Ipvs(#[from] ipvs_netlink::Error),
    /// An ipset request failed (libipset's typed reason, with its message).
    #[error(transparent)]
    Ipset(#[from] ipset::Error),
    /// An rtnetlink request failed (`kube-ipvs0` and its addresses).
    #[error(transparent)]
    Rtnetlink(#[from] rtnetlink::Error),
    /// A request that is no operation of a plan (reading the kernel, connecting) failed.
    #[error("{what}: {source}")]
    Request {
        /// What was asked.
        what: String,
        /// Why it failed.
        #[source]
        source: Box<Error>,
    },
    /// One failure that stopped several operations (a batch that could not be sent, an ipset
    /// session that could not be opened), reported for each of them.
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
    /// A socket or thread could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// What was being set up.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `kube-ipvs0` does not exist, so no address can be bound to it or removed from it.
    #[error("{} does not exist", crate::model::kernel::LINK_NAME)]
    NoLink,
    /// A link was not listed right after it was made.
    #[error("create dummy link {0}: link missing after creation")]
    LinkMissing(String),
    /// A VIP had to be moved for an operation (unbinding addresses in route mode moves every
    /// VIP), and moving it failed.
    #[error("{step}: {source}")]
    Rebind {
        /// The step that failed.
        step: vip::Step,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// An operation the plan batches was given to be applied alone.
    #[error("not a single operation")]
    NotSingle,
    /// A worker thread stopped before reporting what it did.
    #[error("the {0} worker stopped")]
    WorkerStopped(&'static str),
    /// The in-memory kernel (the test double) refused an operation as the kernel would (an
    /// object made twice, or changed while missing).
    #[error(transparent)]
    Memory(#[from] memory::Refusal),
    /// The in-memory kernel was told to refuse the operation ([`memory::Memory::refuse`]).
    #[error("refused")]
    Refused,
    /// A program could not be run.
    #[error("cannot run {program}: {source}")]
    Exec {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A program failed.
    #[error("{program} failed: {message}")]
    Tool {
        /// The program.
        program: String,
        /// Its error output.
        message: String,
    },
    /// The iptables backend the node uses cannot be told.
    #[error(transparent)]
    Backend(#[from] iptables::PickError),
    /// A program gave up waiting for the xtables lock that another program holds (iptables
    /// exits with status 4, `RESOURCE_PROBLEM`, when its `-w` wait runs out): nothing was
    /// written, and the next sync tries again.
    #[error("{program} gave up waiting for the xtables lock: {message}")]
    XtablesLocked {
        /// The program.
        program: String,
        /// Its error output.
        message: String,
    },
    /// The conntrack cleanup failed.
    #[error(transparent)]
    Conntrack(#[from] conntrack::Error),
    /// The agent's `oom_score_adj` could not be written.
    #[error(transparent)]
    OomScoreAdj(std::io::Error),
    /// A sysctl could not be written.
    #[error("sysctl {key}: {source}")]
    Sysctl {
        /// The key below /proc/sys.
        key: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// `source` as the failure of `what` (a request that is no operation of a plan).
    pub fn request(what: impl Into<String>, source: impl Into<Error>) -> Error {
        Error::Request {
            what: what.into(),
            source: Box::new(source.into()),
        }
    }

    /// The errno the kernel (or the system) answered, when it answered one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Ipvs(e) => e.errno(),
            Error::Rtnetlink(rtnetlink::Error::NetlinkError(m)) => m.code.map(|c| c.get().abs()),
            Error::Request { source, .. } | Error::Rebind { source, .. } => source.errno(),
            Error::Shared(e) => e.errno(),
            Error::Io { source, .. }
            | Error::Exec { source, .. }
            | Error::Sysctl { source, .. }
            | Error::OomScoreAdj(source) => source.raw_os_error(),
            _ => None,
        }
    }

    /// The IPVS library's error, when this is one (shared or not).
    pub fn ipvs(&self) -> Option<&ipvs_netlink::Error> {
        match self {
            Error::Ipvs(e) => Some(e),
            Error::Shared(e) => e.ipvs(),
            Error::Request { source, .. } => source.ipvs(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_errno_is_found_through_context_and_sharing() {
        let exists = || Error::from(ipvs_netlink::Error::from_errno(libc::EEXIST));
        assert_eq!(exists().errno(), Some(libc::EEXIST));
        let read = Error::request("list IPVS services", exists());
        assert_eq!(read.errno(), Some(libc::EEXIST));
        assert!(
            matches!(&read, Error::Request { what, .. } if what == "list IPVS services"),
            "{read:?}"
        );
        assert!(read.ipvs().is_some_and(ipvs_netlink::Error::is_exists));
        let shared = Error::Shared(std::sync::Arc::new(read));
        assert_eq!(shared.errno(), Some(libc::EEXIST));
        // rtnetlink carries the kernel's negative errno.
        let mut nack = netlink_packet_core::ErrorMessage::default();
        nack.code = std::num::NonZeroI32::new(-libc::EADDRNOTAVAIL);
        let e = Error::from(rtnetlink::Error::NetlinkError(nack));
        assert_eq!(e.errno(), Some(libc::EADDRNOTAVAIL));
        assert!(e.ipvs().is_none());
        assert_eq!(Error::NoLink.errno(), None);
    }

    #[test]
    fn failures_are_found_by_their_index_in_the_plan() {
        let plan = Plan {
            ops: vec![Op::CreateLink, Op::AddAddress("10.96.0.1".parse().unwrap())],
            warnings: Vec::new(),
        };
        let applied = Applied {
            done: 1,
            failed: vec![(1, Error::NoLink), (7, Error::Refused)],
            messages: 2,
        };
        let failed: Vec<(&Op, &Error)> = applied.failures(&plan).collect();
        assert!(
            matches!(
                failed[..],
                [(Op::AddAddress(ip), Error::NoLink)] if ip.to_string() == "10.96.0.1"
            ),
            "{failed:?}"
        );
    }
}
