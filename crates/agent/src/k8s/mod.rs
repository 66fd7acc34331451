//! The Kubernetes edge of the agent.
//!
//! [`convert`] turns API objects (wherever they come from: the API server's watches of
//! [`crate::source::api`] or the manifests of [`crate::source::manifests`], the two other
//! modules that name k8s-openapi types, to decode them) into the validated types of
//! [`crate::model::snapshot::cluster`], so that nothing past the source sees an API type;
//! [`events`] records the agent's events on its Node and Services.

pub mod convert;
pub mod event_lane;
pub mod events;

pub use convert::{ConvertError, Kind, ObjectRef, Reason};
