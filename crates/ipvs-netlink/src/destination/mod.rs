//! Destinations, the real servers of a service (`ipvsadm -a/-e/-d`): wire attributes, typed
//! model, and one file per verb.

pub mod attr;
pub mod model;

mod add;
mod del;
mod dump;
mod handle;
mod set;

pub use attr::DestinationAttr;
pub use handle::DestinationHandle;
pub use model::{Destination, ForwardMethod, Tunnel, TunnelFlags, TunnelType};

pub(crate) use add::add_request;
pub(crate) use del::del_request;
pub(crate) use set::set_request;
