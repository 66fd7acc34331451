//! Connection-synchronisation daemons (`ipvsadm --start-daemon/--stop-daemon/-L --daemon`).

pub mod attr;
pub mod model;

mod handle;

pub use attr::DaemonAttr;
pub use handle::DaemonHandle;
pub use model::{DaemonState, SyncDaemon};
