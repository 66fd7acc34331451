//! What the model is given: the cluster as the agent sees it and the configuration that shapes
//! the desired state, and which endpoints of the snapshot receive traffic on this node.
//!
//! # Layout
//! - [`cluster`]: the snapshot: Services, EndpointSlices and the agent's own Node, validated
//!   and converted from the API types.
//! - [`changes`]: what changed from one snapshot to the next, as the source saw it, and the
//!   snapshots as the source publishes them.
//! - [`config`]: the part of the configuration that shapes the desired kernel state.
//! - [`endpoints`]: which endpoints of a Service port receive traffic on this node, as
//!   kube-proxy's `CategorizeEndpoints` decides.

pub mod changes;
pub mod cluster;
pub mod config;
pub mod endpoints;
