//! The Kubernetes edge of the agent.
//!
//! [`convert`] is the only module of the crate that names k8s-openapi types: it turns API
//! objects (wherever they come from: an API server's reflectors or the manifests of
//! [`crate::source::manifests`]) into the validated types of [`crate::model::cluster`].

pub mod convert;

pub use convert::{ConvertError, Kind, ObjectRef, Reason};
