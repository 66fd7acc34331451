//! The reliability suite: the agent killed, restarted, starved of its API server, its kernel
//! state tampered with, fed garbage and refused by the kernel. Each test adds a row to the
//! summary table `lab test` prints at the end (see [`lab::report`]).
mod api_faults;
mod bad_input;
mod crash;
mod drift;
mod injection;
mod privilege;
mod refusals;
mod restart;

/// A size the test command scales down (`RELIABILITY_*`), else `default`.
fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    lab::guest::knob(name, None).unwrap_or(default)
}
