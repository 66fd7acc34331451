//! glibc's allocator set for a long-lived agent: one arena for every thread.
//!
//! glibc gives a thread that meets contention an arena of its own (up to eight per core), and
//! memory freed in an arena serves only that arena's later allocations. The agent's work
//! moves between its runtime's two workers, the blocking pool and the kernel reader's thread,
//! so each arena grew to a peak of its own: beside the real API server at 10,000 Services the
//! agent's peak RSS was 112-114 MiB with glibc's default and 93 MiB with one arena, its syncs
//! no slower (BENCHMARKS.md, "Open targets", memory). jemalloc and mimalloc as the global
//! allocator held more (137 and 122 MiB). No crate wraps `mallopt`, hence the call here.

/// Makes glibc's `malloc` use one arena for all threads. Call it first in `main`, before any
/// thread starts. Returns whether the allocator took the setting (always false off glibc).
#[allow(unsafe_code)]
pub fn one_arena() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` sets an allocator parameter; it takes plain integers, touches no
        // memory of ours, and is safe to call at any time (glibc locks its arenas for it).
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_one_arena() {
        assert!(super::one_arena());
    }
}
