//! Generic-netlink client for Linux IPVS (the kernel's layer-4 load balancer): virtual
//! services, destinations, timeouts, sync daemons and counters, on tokio.
//!
//! # Layout
//! - [`message`]: a whole IPVS message on the wire: [`Command`] and top-level
//!   [`MessageAttr`]s, [`IpvsMessage`] (usable with `netlink_packet_generic::GenlMessage`).
//! - [`service`]: virtual services. `service::attr` is the wire layer ([`ServiceAttr`]),
//!   `service::model` the typed layer ([`Service`], [`ServiceKey`], [`Scheduler`],
//!   [`ServiceFlags`]); one file per verb (add, set, del, get, dump).
//! - [`destination`]: real servers, the same way ([`DestinationAttr`], [`Destination`],
//!   [`ForwardMethod`], [`Tunnel`]).
//! - [`stats`]: counters of both ([`Stats`]).
//! - [`timeout`], [`info`], [`daemon`]: timeouts, version and table size, sync daemons.
//! - [`ipvsadm`]: ipvsadm's text formats (`-Sn`, `-Ln`, restore input), byte for byte.
//! - [`batch`]: many requests in one `sendmsg`, each one's result collected ([`Batch`]).
//! - [`connection`] and [`Handle`]: the socket (netlink-proto) and the handle tree
//!   (`handle.services().add(&svc)`, `handle.destinations(&key).dump()`).
//! - [`Error`]: kernel refusals keep their errno.
//!
//! # Quick start
//! ```no_run
//! use futures::TryStreamExt;
//! use ipvs_netlink::{Destination, ForwardMethod, Scheduler, Service, ServiceKey};
//!
//! # async fn demo() -> ipvs_netlink::Result<()> {
//! let handle = ipvs_netlink::connect().await?; // fails with FamilyMissing without ip_vs
//! let key = ServiceKey::tcp("10.96.0.10".parse().unwrap(), 80);
//! handle.services().add_or_update(&Service::new(key, Scheduler::RoundRobin)).await?;
//! let pod = Destination::new("10.244.0.2".parse().unwrap(), 8080, ForwardMethod::Masquerade);
//! handle.destinations(&key).add(&pod).await?;
//!
//! let services: Vec<Service> = handle.services().dump().try_collect().await?;
//! for svc in &services {
//!     println!("{} {}", svc.key, svc.scheduler);
//! }
//! handle.services().del_if_exists(&key).await?;
//! # Ok(()) }
//! ```
//!
//! # Listing on a shared kernel
//! IPVS resumes a service dump that spans several netlink messages by a position it counts
//! over the services of every network namespace. While another namespace adds or deletes
//! services, a plain dump of this one can repeat or skip entries. A tool that acts on what
//! is missing from a listing (deletes leftovers, for one) should use
//! [`ServiceHandle::list_consistent`], which dumps until two dumps in a row agree
//! ([`ServiceHandle::list_consistent_with`] keeps only what the caller makes of each service).
#![forbid(unsafe_code)]

/// The README (the registry's page of the crate): its quick start compiles as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod batch;
pub mod connection;
pub mod daemon;
pub mod destination;
mod error;
mod handle;
pub mod info;
pub mod ipvsadm;
pub mod message;
mod nla;
mod paced;
pub mod service;
pub mod stats;
pub mod timeout;

pub use batch::{Batch, BatchOutcome};
pub use connection::{Connection, RawMessage, connect, new_connection};
pub use daemon::{DaemonHandle, DaemonState, SyncDaemon};
pub use destination::{
    Destination, DestinationAttr, DestinationHandle, ForwardMethod, Tunnel, TunnelFlags, TunnelType,
};
pub use error::{Error, Result};
pub use handle::Handle;
pub use info::{Info, Version};
pub use message::{Command, IpvsMessage, MessageAttr};
pub use service::{
    AddressFamily, Listing, Netmask, Protocol, Scheduler, Service, ServiceAttr, ServiceFlags,
    ServiceHandle, ServiceKey,
};
pub use stats::{Stats, Stats64Attr, StatsAttr};
pub use timeout::{TimeoutHandle, Timeouts};
