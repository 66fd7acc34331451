//! Reliability: crash (being written).
