//! Reliability: restart (being written).
