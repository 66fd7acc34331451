//! The kernel edge: everything that reads or changes kernel state lives here, behind the
//! [`Dataplane`] trait, so the sync loop can run against the real kernel or in memory.
//!
//! - [`link`][]: `kube-ipvs0`, the host's addresses and the VIP routes (rtnetlink).
//! - [`vip`][]: VIPs as addresses or as local routes, and switching between the two.
//! - [`child`][]: the tools run as child processes die with the agent.
//! - [`conntrack`][]: stale UDP conntrack entries, deleted over ctnetlink.
//! - [`families`][]: which IP families the host can serve.
//! - [`iptables`][]: backend detection, `iptables-save` reading, `iptables-restore --noflush`.
//! - [`modules`][]: scheduler modules IPVS must not load itself.
//! - [`sysctl`][]: `/proc/sys`.
//! - [`memory`][]: an in-memory kernel for tests.

pub mod child;
pub mod conntrack;
pub mod families;
pub mod iptables;
pub mod kernel;
pub mod link;
pub mod memory;
pub mod modules;
pub mod sysctl;
pub mod vip;

use crate::model::conntrack::ConntrackFilter;
use crate::model::desired::Host;
use crate::model::kernel::KernelState;
use crate::model::plan::Plan;

/// What reading the kernel gives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// The state the agent manages (every IPVS service, foreign ones too).
    pub state: KernelState,
    /// Facts about the host (its addresses).
    pub host: Host,
}

/// What applying a plan did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Operations that succeeded.
    pub done: usize,
    /// Operations that failed, each with its error; the others were still applied.
    pub failed: Vec<(String, String)>,
    /// Netlink messages sent.
    pub messages: usize,
}

/// A kernel (real or in memory) that the agent can read and change.
pub trait Dataplane {
    /// Reads the kernel state the agent manages.
    fn observe(&mut self) -> impl Future<Output = Result<Observation, Error>> + Send;
    /// Applies `plan` in order. A failed operation does not stop the ones after it (another
    /// Service's changes must not wait on it); failures are reported in [`Applied::failed`].
    fn apply(&mut self, plan: &Plan) -> impl Future<Output = Result<Applied, Error>> + Send;
    /// Deletes the UDP conntrack entries `filter` calls stale (kube-proxy's conntrack
    /// reconciler), one report per family whose table was read.
    fn clean_conntrack(
        &mut self,
        filter: &ConntrackFilter,
    ) -> impl Future<Output = Result<Vec<conntrack::Cleaned>, Error>> + Send;
}

/// Errors at the kernel edge.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A netlink request failed.
    #[error("{what}: {message}")]
    Netlink {
        /// What was asked.
        what: String,
        /// The kernel's or the library's answer.
        message: String,
    },
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
    /// The conntrack cleanup failed.
    #[error(transparent)]
    Conntrack(#[from] conntrack::Error),
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
