//! What the model finds wrong and works around: each a [`Warning`] the sync loop logs, which
//! tests tell apart by variant, not by its text.

use crate::model::desired::scheduler::Refusal;
use crate::model::kernel::{SetKind, SetName, VsKey};
use crate::model::snapshot::cluster::ServiceRef;

/// Something the desired state or the plan could not do as asked, and what it did instead.
/// Its `Display` is the line the log shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Warning {
    /// Two Services want one virtual server: the first keeps it.
    #[error("{key} is wanted by {owner} and {other}; {owner} keeps it")]
    Contested {
        /// The virtual server.
        key: VsKey,
        /// The Service that keeps it.
        owner: ServiceRef,
        /// The Service that asked for it later.
        other: ServiceRef,
    },
    /// A set the agent wants exists with another type: it is left as it is, entries
    /// included (kube-proxy #77265).
    #[error(
        "ipset {name} exists as {} but must be {}; it is left as is",
        found.as_str(),
        wanted.as_str()
    )]
    SetKind {
        /// The set.
        name: SetName,
        /// The type it has.
        found: SetKind,
        /// The type the agent wants.
        wanted: SetKind,
    },
    /// The desired state kept change by change differed from the one built whole from the
    /// same cluster; the whole one replaces it.
    #[error(
        "the desired state kept change by change differed from the one built whole from the same cluster; the whole one replaces it (a fault of the agent: please report it with this log)"
    )]
    Diverged,
    /// A Service's own scheduler was refused: its virtual servers get the node's.
    #[error("Service {service}: {0}", service = .0.service)]
    SchedulerRefused(Refusal),
}

impl Warning {
    /// The variant's name in kebab-case (`set-kind`), for a refused scheduler the refusal's
    /// reason (`not-a-scheduler`, `loads-under-lock`): a stable machine key for the log
    /// (`warning=`), unlike the text.
    pub fn kind(&self) -> &'static str {
        match self {
            Warning::Contested { .. } => "contested",
            Warning::SetKind { .. } => "set-kind",
            Warning::Diverged => "diverged",
            Warning::SchedulerRefused(r) => r.why.kind(),
        }
    }
}
