//! Reliability: api_faults (being written).
