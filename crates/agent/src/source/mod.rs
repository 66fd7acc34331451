//! Where the cluster snapshot comes from.
//!
//! [`api`] lists and watches Services, EndpointSlices and the agent's Node on an API server;
//! [`manifests`] reads Services, EndpointSlices and Nodes from YAML or JSON files, converts
//! them with [`crate::k8s::convert`], and watches the files so that a change triggers a
//! new sync.

pub mod api;
pub mod manifests;

pub use manifests::{Loaded, Rejection, load, watch};
