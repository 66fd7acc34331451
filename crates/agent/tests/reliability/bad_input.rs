//! Reliability: bad_input (being written).
