//! Reliability: drift (being written).
