//! kube-proxy-ipvs: a Kubernetes Service proxy node agent on Linux IPVS.
//!
//! # Layout
//! - [`model`]: pure: the cluster snapshot, the desired kernel state, the plan.
#![forbid(unsafe_code)]

pub mod dataplane;
pub mod k8s;
pub mod model;
pub mod source;
pub mod sync;
