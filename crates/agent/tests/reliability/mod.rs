//! The reliability suite: the agent killed, restarted, starved of its API server, its kernel
//! state tampered with, fed garbage and refused by the kernel. Each test adds a row to the
//! summary table `lab test` prints at the end (see [`lab::report`]).
mod crash;
mod restart;
mod drift;
mod api_faults;
mod refusals;
mod privilege;
mod injection;
mod bad_input;
