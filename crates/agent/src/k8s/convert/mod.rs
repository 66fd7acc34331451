//! Pure conversions from the k8s-openapi types to the model, with kube-proxy's semantics.
//!
//! The API types are `Option`-heavy and a manifest need not have passed API validation, so
//! every function here checks what the model relies on and answers with a [`ConvertError`]
//! that names the object and the field instead of guessing or panicking. Defaults are the
//! ones the API server applies (a missing `protocol` is TCP, a missing `ready` condition is
//! true, ...), so an object read from a file means what it would mean in a cluster.
//!
//! Objects kube-proxy does not look at are a distinct, non-error outcome: `Ok(None)`.
//!
//! # Layout
//!
//! One module per kind of object, each with the constants of its API: `service`
//! ([`service()`]), `endpoint_slice` ([`endpoint_slice()`]) and `node` ([`node()`]). What
//! they share: `error` (the [`ConvertError`] and its [`Reason`]), `names` (the API's checks
//! of names and labels, and [`printable`]) and `parse` (field values into model types).
//! Everything public is re-exported here, so the paths are `k8s::convert::...`. `tests` holds
//! the conversions' tests, every kind's together.

mod endpoint_slice;
mod error;
mod names;
mod node;
mod parse;
mod service;

pub use endpoint_slice::{
    HEADLESS_LABEL, MAX_SLICE_ENDPOINTS, MAX_SLICE_PORTS, SERVICE_NAME_LABEL,
    TRIGGER_TIME_ANNOTATION, endpoint_slice,
};
pub use error::{ConvertError, FamilyName, Kind, ObjectRef, Reason};
pub use names::{DEFAULT_NAMESPACE, PRINTABLE_MAX, printable};
pub use node::node;
pub use service::{
    DEFAULT_AFFINITY_TIMEOUT, MAX_AFFINITY_TIMEOUT_SECONDS, SERVICE_PROXY_NAME_LABEL, service,
};

#[cfg(test)]
mod tests;
