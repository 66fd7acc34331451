//! Reliability: privilege (being written).
