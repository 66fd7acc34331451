//! Helpers for kernel tests, which run inside the guest.
//!
//! Every kernel test starts with [`Netns::fresh`]: the test's thread moves into a network
//! namespace of its own, so tests run in parallel without seeing each other's IPVS services,
//! links, ipsets or iptables rules. libtest runs each test on a new thread, and threads and
//! processes started from that thread (a tokio runtime, `ipvsadm`) inherit its namespace.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// True when running inside the lab VM (its kernel command line carries `lab=1`).
pub fn in_guest() -> bool {
    std::fs::read_to_string("/proc/cmdline")
        .is_ok_and(|c| c.split_whitespace().any(|w| w == "lab=1"))
}

/// Panics with a clear message unless running inside the lab VM.
pub fn require_guest() {
    assert!(
        in_guest(),
        "this is a kernel test: it runs inside the lab VM, started with `cargo run -p lab -- test`"
    );
}

/// The running kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The calling thread's own network namespace, with `lo` up.
pub struct Netns {
    _private: (),
}

impl Netns {
    /// Moves the calling thread into a new network namespace and brings `lo` up (IPVS rejects
    /// every destination as "not unicast" until it is).
    pub fn fresh() -> Netns {
        require_guest();
        unshare_net();
        sh("ip link set lo up");
        Netns { _private: () }
    }
}

/// Moves the calling thread into a new network namespace; panics with the reason (it needs
/// `CAP_SYS_ADMIN`, root on the host or in the lab) when it cannot.
pub fn unshare_net() {
    // SAFETY: unshare(2) with CLONE_NEWNET only changes the calling thread's namespace; it
    // takes no pointers.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "unshare(CLONE_NEWNET) needs root: {}",
        std::io::Error::last_os_error()
    );
}

/// Runs `body` on a new thread moved into a network namespace of its own and returns its
/// result (a panic in `body` goes on in the caller). Processes started from that thread
/// inherit the namespace. For tests and benchmarks on the host kernel as well as in the lab:
/// it needs root, not the lab VM.
pub fn in_netns<R: Send + 'static>(body: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::spawn(move || {
        unshare_net();
        body()
    })
    .join()
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// A knob of a test run: `name` from the environment (`lab test` passes the host's
/// `RELIABILITY_*`, `PEERS_*` and `HISTORY_*` into the VM), else `built`, its value when the
/// test was built (`option_env!`, for a test binary run apart). Unset or empty is `None`; a
/// value that does not parse panics, naming it, rather than run another size or seed.
pub fn knob<T: std::str::FromStr>(name: &str, built: Option<&str>) -> Option<T> {
    let value = std::env::var(name)
        .ok()
        .or(built.map(str::to_string))
        .filter(|v| !v.trim().is_empty())?;
    match value.trim().parse() {
        Ok(v) => Some(v),
        Err(_) => panic!("{name}={value:?}: not a {}", std::any::type_name::<T>()),
    }
}

/// Runs `script` with `/bin/sh -c` and returns its standard output; panics with the command,
/// its status and its standard error when it fails.
pub fn sh(script: &str) -> String {
    let out = Command::new("/bin/sh")
        .args(["-c", script])
        .output()
        .unwrap_or_else(|e| panic!("cannot run /bin/sh: {e}"));
    assert!(
        out.status.success(),
        "`{script}` failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `script` with `/bin/sh -c` and returns whether it succeeded, with its combined output.
pub fn try_sh(script: &str) -> (bool, String) {
    let out = Command::new("/bin/sh")
        .args(["-c", &format!("{script} 2>&1")])
        .output()
        .unwrap_or_else(|e| panic!("cannot run /bin/sh: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Raises this process's soft and hard limits of open files to `n` (root in the guest may):
/// for tests that hold thousands of sockets. The guest has no `prlimit`.
pub fn raise_open_files(n: u64) {
    let limit = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: setrlimit(2) with a valid, initialised struct; it changes only this process's
    // limit.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(
        rc,
        0,
        "setrlimit(RLIMIT_NOFILE, {n}): {}",
        std::io::Error::last_os_error()
    );
}

/// A named network namespace (`ip netns add`), deleted on drop: a pod or a client.
pub struct NamedNetns {
    name: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl NamedNetns {
    /// Creates a namespace whose name starts with `prefix` and is unique in the guest, with
    /// `lo` up.
    pub fn new(prefix: &str) -> NamedNetns {
        let name = format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        sh(&format!(
            "ip netns add {name} && ip -n {name} link set lo up"
        ));
        NamedNetns { name }
    }

    /// The namespace's name, for `ip -n NAME` and `ip link set ... netns NAME`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs a shell script inside the namespace and returns its output.
    pub fn sh(&self, script: &str) -> String {
        sh(&format!(
            "ip netns exec {} sh -c '{}'",
            self.name,
            script.replace('\'', "'\\''")
        ))
    }

    /// Runs `f` on a new thread that has entered this namespace (for servers and clients
    /// written in Rust).
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/run/netns/{}", self.name);
        let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        std::thread::spawn(move || {
            // SAFETY: setns(2) on a namespace file descriptor we own; it changes only the
            // calling (new) thread's network namespace.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            drop(file);
            f()
        })
    }
}

impl Drop for NamedNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::knob;

    // A name no environment sets, so only `built` speaks.
    const UNSET: &str = "LAB_GUEST_TESTS_A_KNOB_NOBODY_SETS";

    #[test]
    fn a_knob_falls_back_on_its_built_value_and_treats_empty_as_unset() {
        assert_eq!(knob::<u32>(UNSET, None), None);
        assert_eq!(knob::<u32>(UNSET, Some(" 7 ")), Some(7));
        assert_eq!(knob::<u32>(UNSET, Some("  ")), None);
        assert_eq!(knob::<String>(UNSET, Some("a,b")).as_deref(), Some("a,b"));
    }

    #[test]
    #[should_panic(expected = "LAB_GUEST_TESTS_A_KNOB_NOBODY_SETS=\"3000s\": not a u64")]
    fn a_knob_that_does_not_parse_names_itself() {
        knob::<u64>(UNSET, Some("3000s"));
    }
}
