//! Reliability: refusals (being written).
