//! The pure part of the agent: cluster snapshot types, the desired kernel state and the plan
//! that reaches it. Nothing here knows of tokio, kube or netlink; time and host facts are
//! arguments, so every function is deterministic and tested as a table.

pub mod cluster;
pub mod computed;
pub mod config;
pub mod conntrack;
pub mod desired;
pub mod drain;
pub mod drift;
pub mod endpoints;
pub mod incremental;
pub mod iptables;
pub mod kernel;
pub mod leftovers;
pub mod op_kind;
pub mod plan;
pub mod priority;
pub mod reach;
pub mod rolling;
pub mod scheduler;
pub mod sets;
pub mod shadow;
pub mod sorted_map;
pub mod warning;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;
