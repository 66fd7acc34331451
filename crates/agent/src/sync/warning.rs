//! A sync's warnings: the model's, and those of the kernel reads and cleanups the sync makes
//! beside its plan. Each is logged as its `Display`; tests tell them apart by variant.

use crate::dataplane::Error;
use crate::model::desired::warning;

/// Something a sync could not do, or did otherwise than asked.
#[derive(Debug, thiserror::Error)]
pub enum Warning {
    /// What the desired state or the plan works around.
    #[error(transparent)]
    Model(#[from] warning::Warning),
    /// The UDP conntrack cleanup failed: the pass is tried again at the next sync.
    #[error("conntrack cleanup failed; retrying: {0}")]
    Conntrack(#[source] Error),
    /// The connection counts of the real servers a sync of changes removes could not be read:
    /// they drain until the kernel is read.
    #[error(
        "could not read the connections of the real servers to remove (they drain until the kernel is read): {0}"
    )]
    UnreadConnections(#[source] Error),
}

impl Warning {
    /// The variant's name in kebab-case, the model's for its warnings
    /// ([`warning::Warning::kind`]): a stable machine key for the log (`warning=`), unlike
    /// the text.
    pub fn kind(&self) -> &'static str {
        match self {
            Warning::Model(w) => w.kind(),
            Warning::Conntrack(_) => "conntrack-cleanup",
            Warning::UnreadConnections(_) => "unread-connections",
        }
    }
}
