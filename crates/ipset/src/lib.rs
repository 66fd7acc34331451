//! Safe Rust bindings to libipset: typed sets and entries, batched restore, atomic replace.
//!
//! # Layout
//!
//! - [`name`]: [`SetName`], validated (1 to 31 bytes, no NUL, no whitespace) before C sees it.
//! - [`entry`]: typed set elements ([`Entry`], [`Net`], [`Protocol`]) and per-entry options
//!   ([`Member`], [`EntryOptions`]), rendered to and parsed from `ipset save` syntax.
//! - [`set`]: set types, create options ([`Header`]) and whole sets ([`Set`]).
//! - [`op`]: [`Op`], one command of a batch, written in `ipset restore` syntax.
//! - [`text`]: whole `ipset save` / `ipset restore` documents ([`parse_save`],
//!   [`parse_restore`] and their renderers). `entry`, `set`, `op` and `text` are pure code.
//! - [`session`]: [`Session`], the owning libipset session: every `unsafe` FFI call of the
//!   crate, the batch (restore-mode) path, atomic replace, list/save.
//! - [`error`]: [`Error`] and [`ParseError`].
//! - `sys` (private): bindgen's declarations for libipset and for a small C shim (`csrc/`)
//!   that turns libipset's variadic output callback into a non-variadic one that copies
//!   the text into a Rust-owned buffer.
//!
//! # Quick start
//!
//! Needs root (`CAP_NET_ADMIN`) and acts on the calling thread's network namespace.
//!
//! ```no_run
//! use libipset::{Entry, Family, Header, Member, Op, Protocol, Session, Set, SetName, SetType};
//!
//! # fn main() -> libipset::Result<()> {
//! let mut session = Session::new()?;
//! let name = SetName::new("KUBE-CLUSTER-IP")?;
//! let header = Header::hash(name.clone(), SetType::HashIpPort, Family::Inet).with_maxelem(65536);
//! let vip = Entry::IpPort { ip: "10.96.0.1".parse().unwrap(), protocol: Protocol::Tcp, port: 443 };
//!
//! // One batch: many entries per netlink message.
//! session.apply(&[Op::Create(header.clone()), Op::add(&name, vip)])?;
//! assert!(session.test(&name, vip)?);
//!
//! // Replace the whole set atomically (fill a temporary set, swap, destroy).
//! let mut next = Set::new(header);
//! next.members.push(Member::new(Entry::IpPort { ip: "10.96.0.10".parse().unwrap(), protocol: Protocol::Udp, port: 53 }));
//! session.replace(&next)?;
//!
//! let current = session.save_set(&name)?;
//! print!("{current}"); // ipset save syntax
//! # Ok(())
//! # }
//! ```

//!
//! # Tests, benchmark, memory checking
//!
//! `tests/kernel.rs` runs against the host kernel (as root), each test in a fresh network
//! namespace, and cross-checks every set type, IPv4 and IPv6, with the real `ipset` tool in both
//! directions. `examples/bench-restore.rs` times `ipset restore` against this crate's restore
//! path on 100,000 entries spread over the KUBE-* set types:
//!
//! ```sh
//! cargo run --release -p libipset --example bench-restore
//! valgrind --error-exitcode=99 --leak-check=full target/debug/deps/kernel-*   # FFI paths
//! ```

#[allow(
    missing_docs,
    dead_code,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
mod sys {
    //! bindgen output for libipset and the C shim (see `build.rs`).
    include!(concat!(env!("OUT_DIR"), "/sys.rs"));
}

/// The README (the registry's page of the crate): its quick start compiles as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod entry;
pub mod error;
pub mod name;
pub mod op;
pub mod session;
pub mod set;
pub mod text;

pub use entry::{Entry, EntryOptions, Member, Net, Protocol};
pub use error::{Error, ParseError, Result};
pub use name::SetName;
pub use op::Op;
pub use session::{Session, SetInfo, temp_name};
pub use set::{Family, Header, PortRange, Set, SetType};
pub use text::{parse_restore, parse_save, render_restore, render_save};
