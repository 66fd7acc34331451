//! Reliability: injection (being written).
