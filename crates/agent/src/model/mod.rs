//! The pure part of the agent: cluster snapshot types, the desired kernel state and the plan
//! that reaches it. Nothing here knows of tokio, kube or netlink; time and host facts are
//! arguments, so every function is deterministic and tested as a table.
//!
//! # Layout
//! - [`snapshot`]: what the model is given: the cluster snapshot ([`snapshot::cluster`]), the
//!   configuration ([`snapshot::config`]) and the endpoints that receive traffic on this node
//!   ([`snapshot::endpoints`]).
//! - [`desired`]: the desired kernel state built from them (and [`desired::warning`], what it
//!   and the plan find wrong and work around): virtual servers and VIPs, the
//!   KUBE-* ipsets' entries and iptables catalogue ([`desired::iptables`]), the
//!   schedulers ([`desired::scheduler`]) and the stale UDP conntrack entries
//!   ([`desired::conntrack`]).
//! - [`kernel`]: the kernel state as plain data (desired or observed): the host's addresses,
//!   the chains and the KUBE-* ipsets ([`kernel::sets`]) the agent owns, the one spelling
//!   rules are compared in, and the rolling read of real servers.
//! - [`plan`]: the ordered operations from the observed to the desired state, their kinds and
//!   the drift they repair, the draining of removed real servers, the priority Services of a cold start, and the removal
//!   of what other kube-proxy modes left.
//! - [`incremental`]: one sync's computation: the desired state kept from sync to sync, what a
//!   sync derives from the snapshot ([`incremental::computed`]), what it looks at
//!   ([`incremental::reach`]) and the kernel as the agent believes it between reads
//!   ([`incremental::shadow`]).
//! - `fixtures` (tests): small builders of snapshots; `tests`: table-driven tests of the
//!   desired state and the plan together.

pub mod desired;
pub mod incremental;
pub mod kernel;
pub mod plan;
pub mod snapshot;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;
