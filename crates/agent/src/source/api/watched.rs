//! The kinds the source watches (Services, EndpointSlices, the own Node) and what each object
//! becomes in the model.

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use kube::Resource;

use super::NodeLifecycle;
use crate::k8s::convert::{self, ConvertError};
use crate::model::snapshot::cluster;

/// An API type the source watches, with its conversion to the model.
pub(super) trait Watched: Resource + Clone + Debug {
    /// What one object becomes.
    type Model: Clone + PartialEq + Debug;
    /// The kind's name in logs.
    const KIND: &'static str;
    /// The object's model (`None` when it is left out) and, when rejected, why.
    fn convert(&self) -> (Option<Self::Model>, Option<ConvertError>);
}

fn from_result<M>(r: Result<Option<M>, ConvertError>) -> (Option<M>, Option<ConvertError>) {
    match r {
        Ok(m) => (m, None),
        Err(e) => (None, Some(e)),
    }
}

impl Watched for core::Service {
    // Shared with every snapshot: an object is held once, however many snapshots hold it.
    type Model = Arc<cluster::Service>;
    const KIND: &'static str = "Service";
    fn convert(&self) -> (Option<Self::Model>, Option<ConvertError>) {
        from_result(convert::service(self).map(|m| m.map(Arc::new)))
    }
}

impl Watched for discovery::EndpointSlice {
    type Model = Arc<cluster::EndpointSlice>;
    const KIND: &'static str = "EndpointSlice";
    fn convert(&self) -> (Option<Self::Model>, Option<ConvertError>) {
        from_result(convert::endpoint_slice(self).map(|m| m.map(Arc::new)))
    }
}

/// The own Node's model and lifecycle: the lifecycle is known even when the rest is rejected.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct OwnNode {
    pub(super) node: Option<cluster::Node>,
    pub(super) lifecycle: NodeLifecycle,
}

impl Watched for core::Node {
    type Model = OwnNode;
    const KIND: &'static str = "Node";
    fn convert(&self) -> (Option<Self::Model>, Option<ConvertError>) {
        let lifecycle = NodeLifecycle::of(self);
        let (node, rejected) = match convert::node(self) {
            Ok(n) => (Some(n), None),
            Err(e) => (None, Some(e)),
        };
        (Some(OwnNode { node, lifecycle }), rejected)
    }
}
