//! kube-proxy-ipvs: a Kubernetes Service proxy node agent on Linux IPVS.
//!
//! The data flows one way: a source (manifests, later the API server) gives a [`Cluster`]
//! snapshot; [`model::desired`] turns it into the kernel state kube-proxy's IPVS mode would
//! build; [`model::plan`] diffs that against what the kernel holds into an ordered list of
//! operations; a [`dataplane::Dataplane`] applies them.
//!
//! # Layout
//! - [`model`]: pure: the cluster snapshot, the KUBE-* catalogue, the desired state, the plan.
//! - [`k8s`]: the only module that knows the Kubernetes API types; converts and validates them.
//! - [`source`]: where snapshots come from (`--manifests` files).
//! - [`dataplane`]: the kernel edge (IPVS, ipset, rtnetlink, iptables, sysctls) and an
//!   in-memory kernel for tests.
//! - [`sync`]: the level-triggered sync loop.
//! - [`cli`] and [`run`]: kube-proxy's flags and the agent's modes.
//!
//! [`Cluster`]: model::cluster::Cluster
#![deny(unsafe_code)] // one exception: dataplane::child's pre_exec

pub mod cli;
pub mod config_file;
pub mod dataplane;
pub mod health;
pub mod k8s;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod run;
pub mod source;
pub mod sync;
pub mod web;
