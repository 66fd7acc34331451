//! Proxy health.
