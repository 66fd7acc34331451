//! Safe Rust bindings to libipset.
//!
//! Work in progress: see the project's issue for this crate.
