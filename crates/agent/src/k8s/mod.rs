//! The Kubernetes edge of the agent.
//!
//! The only place of the crate that names k8s-openapi types. [`convert`] turns API objects
//! (wherever they come from: an API server's reflectors or the manifests of
//! [`crate::source::manifests`]) into the validated types of [`crate::model::cluster`];
//! [`events`] records the agent's events on its Node.

pub mod convert;
pub mod events;

pub use convert::{ConvertError, Kind, ObjectRef, Reason};
