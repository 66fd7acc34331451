//! Generic-netlink client for Linux IPVS.
//!
//! Work in progress: see the project's issue for this crate.
#![forbid(unsafe_code)]
