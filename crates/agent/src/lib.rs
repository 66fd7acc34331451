//! kube-proxy-ipvs: a Kubernetes Service proxy node agent on Linux IPVS.
//!
//! The data flows one way: a source (an API server's watches, or manifest files) gives a
//! [`Cluster`] snapshot; [`model::desired`] turns it into the kernel state kube-proxy's IPVS
//! mode would build; [`model::plan`] diffs that against what the kernel holds into an ordered
//! list of operations; a [`dataplane::Dataplane`] applies them. Each sync's [`sync::Report`]
//! feeds [`metrics::Metrics`] and [`health::Health`], which the HTTP servers answer from.
//!
//! # Layout
//! - [`model`]: pure, one folder per part: the cluster snapshot and configuration
//!   ([`model::snapshot`]), the desired state with its KUBE-* ipsets and iptables catalogue
//!   ([`model::desired`]), the kernel state and the agent's view of the kernel
//!   ([`model::kernel`]), the plan ([`model::plan`]), and one sync's computation
//!   ([`model::incremental`]).
//! - [`k8s`]: conversion and validation of the Kubernetes API types into the model, and the
//!   agent's events.
//! - [`source`]: where snapshots come from: the API server's watches (`api`) or `--manifests`
//!   files.
//! - [`dataplane`]: the kernel edge (IPVS, ipset, rtnetlink, iptables, sysctls) and an
//!   in-memory kernel for tests.
//! - [`sync`]: the level-triggered sync loop.
//! - [`health`] and [`metrics`]: kube-proxy's health state and metrics, recorded from each
//!   sync; [`web`]: the HTTP servers they and the health-check node ports answer on.
//! - [`allocator`]: glibc's allocator set to one arena, for a lower peak of memory.
//! - [`cli`], [`config_file`] and [`run`]: kube-proxy's flags and configuration file, and the
//!   agent's modes; [`logging`]: the log on standard error.
//!
//! [`Cluster`]: model::snapshot::cluster::Cluster
#![deny(unsafe_code)] // exceptions: dataplane::child's pre_exec, allocator's mallopt, mallinfo2, malloc_trim

pub mod allocator;
pub mod cli;
pub mod config_file;
pub mod dataplane;
pub mod health;
pub mod k8s;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod run;
pub mod sloppy_ip;
pub mod source;
pub mod sync;
pub mod web;
