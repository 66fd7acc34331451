//! The tools the agent runs as child processes die with it.
//!
//! A write the agent started must not outlive it: `iptables-restore` killed with the agent
//! commits nothing, while one left running would commit after the agent's death, over what
//! the agent's next run wrote meanwhile (its jumps into the built-in chains are inserted, so a
//! late commit doubles them). A supervisor that kills the whole process group or cgroup does
//! this anyway; `kill -9` of the agent alone, or the OOM killer, does not.
//!
//! This is the agent's only `unsafe` code: `pre_exec`, whose closure runs between `fork` and
//! `exec`.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the process `command` spawns receive `SIGKILL` when the agent's thread that spawns
/// it ends (the thread waits for the tool, so that is when the agent dies). A child whose
/// parent is already gone when it starts does not run the tool.
#[allow(unsafe_code)]
pub fn dies_with_agent(command: &mut Command) -> &mut Command {
    let agent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe functions may be called: it calls `prctl` and `getppid`, and builds
    // an `io::Error` from an OS error code, which does not allocate.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The agent died before the line above: the signal will never come.
            if libc::getppid() != agent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        })
    }
}
