//! Virtual services (`ipvsadm -A/-E/-D/-L`): wire attributes, typed model, and one file per
//! verb.

pub mod attr;
pub mod model;

mod add;
mod del;
mod dump;
mod get;
mod handle;
mod set;

pub use attr::{FlagsAttr, ServiceAttr};
pub use dump::Listing;
pub use handle::ServiceHandle;
pub use model::{AddressFamily, Netmask, Protocol, Scheduler, Service, ServiceFlags, ServiceKey};

pub(crate) use add::add_request;
pub(crate) use del::del_request;
pub(crate) use set::set_request;
