//! glibc's allocator set for a long-lived agent: one arena for every thread and a fixed mmap
//! threshold ([`configure`]), freed pages given back after full syncs ([`give_back`]), and
//! its count of the heap ([`heap_in_use`]).
//!
//! glibc gives a thread that meets contention an arena of its own (up to eight per core), and
//! memory freed in an arena serves only that arena's later allocations. The agent's work
//! moves between its runtime's two workers, the blocking pool and the kernel reader's thread,
//! so each arena grew to a peak of its own: beside the real API server at 10,000 Services the
//! agent's peak RSS was 112-114 MiB with glibc's default and 93 MiB with one arena, its syncs
//! no slower (BENCHMARKS.md, "Open targets", memory). jemalloc and mimalloc as the global
//! allocator held more (137 and 122 MiB). No crate wraps `mallopt`, hence the calls here.

/// Blocks of this size and more get mappings of their own, whatever was freed before: glibc's
/// starting threshold, which it otherwise raises to the size of each mapped block freed (up to
/// 32 MiB). Past that, a full sync's large buffers come from the heap, and small objects that
/// live on (the churn's Services and slices) can be carved out of their holes, pages
/// `malloc_trim` cannot give back while one object holds them. In the soak's hour at 5,000
/// Services (RELIABILITY.md) the anonymous RSS rose 1.4 MiB (+6.3%) from minute 10 without
/// this setting and 0.9 MiB (+4.0%) with it, the bytes in use flat in both: one run each.
pub const MMAP_THRESHOLD: usize = 128 << 10;

/// What [`configure`] made glibc take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Configured {
    /// One arena for all threads (`M_ARENA_MAX` 1).
    pub one_arena: bool,
    /// The mmap threshold fixed at [`MMAP_THRESHOLD`] (`M_MMAP_THRESHOLD`).
    pub fixed_mmap_threshold: bool,
}

/// Makes glibc's `malloc` use one arena for all threads and map blocks of
/// [`MMAP_THRESHOLD`] and more on their own. Call it first in `main`, before any thread
/// starts. Off glibc it sets nothing and says so.
#[allow(unsafe_code)]
pub fn configure() -> Configured {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` sets an allocator parameter; it takes plain integers, touches no
        // memory of ours, and is safe to call at any time (glibc locks its arenas for it).
        unsafe {
            Configured {
                one_arena: libc::mallopt(libc::M_ARENA_MAX, 1) == 1,
                fixed_mmap_threshold: libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as i32)
                    == 1,
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        Configured {
            one_arena: false,
            fixed_mmap_threshold: false,
        }
    }
}

/// Gives the pages of freed memory back to the system (`malloc_trim(0)`), wherever they lie
/// in the heap; returns whether any were. Call it after a full sync, off any hot path.
///
/// glibc hands memory back on its own only from the top of its heap. A peak in the middle of
/// the agent's life (a relist holds the old and the new objects for a moment) then stays
/// resident for good: in the soak, two API server restarts raised the RSS 6.9% while the
/// heap moved 2.9%. Trimming after full syncs keeps the RSS to what the agent holds, which
/// is what kubelet and the OOM killer see.
#[allow(unsafe_code)]
pub fn give_back() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` only releases free pages of the allocator's arenas (under
        // their locks); it touches no memory in use.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Bytes in live allocations, as glibc's allocator counts them (`mallinfo2`: the chunks in
/// use in every arena and the blocks it mapped on its own); `None` off glibc.
///
/// The agent's heap, for `kube_proxy_ipvs_heap_inuse_bytes` and the soak's leak check: RSS
/// alone hides a leak behind the pages the allocator keeps. The allocator's own count costs
/// nothing per allocation, where a counting global allocator (as `examples/scale.rs` has)
/// would add two atomic operations to each one for the agent's whole life.
#[allow(unsafe_code)]
pub fn heap_in_use() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallinfo2` only reads the allocator's counters (under its arena locks) and
        // returns them by value.
        let m = unsafe { libc::mallinfo2() };
        Some((m.uordblks + m.hblkhd) as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_both_settings() {
        let c = super::configure();
        assert!(c.one_arena && c.fixed_mmap_threshold, "{c:?}");
    }

    /// Blocks glibc has mapped on their own, and the bytes they hold.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn mapped() -> (usize, usize) {
        #[allow(unsafe_code)]
        // SAFETY: as in `heap_in_use`.
        let m = unsafe { libc::mallinfo2() };
        (m.hblks, m.hblkhd)
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn a_large_block_is_mapped_on_its_own_after_one_was_freed() {
        // Without the fixed threshold, freeing the first mapped block of 4 MiB raises glibc's
        // threshold past 4 MiB and the second comes from the heap (hblks does not move).
        super::configure();
        const BLOCK: usize = 4 << 20;
        let first = vec![1u8; BLOCK];
        drop(std::hint::black_box(first));
        let (blocks, bytes) = mapped();
        let second = std::hint::black_box(vec![1u8; BLOCK]);
        let (blocks_with, bytes_with) = mapped();
        assert!(
            blocks_with > blocks && bytes_with >= bytes + BLOCK,
            "the second block was not mapped: {blocks} blocks ({bytes} B), then {blocks_with} ({bytes_with} B)"
        );
        drop(second);
    }

    /// Resident memory of this process, in bytes.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn rss() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib << 10)
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_pages_in_the_middle_of_the_heap_go_back() {
        // 128 MiB in 4 KiB blocks, written; then all but every 64th freed, so that what is
        // free lies between blocks in use and glibc keeps it resident on its own.
        const BLOCKS: usize = 32 << 10;
        let mut blocks: Vec<Vec<u8>> = (0..BLOCKS).map(|i| vec![i as u8 | 1; 4096]).collect();
        let mut i = 0;
        blocks.retain(|_| {
            i += 1;
            i % 64 == 0
        });
        let before = rss();
        assert!(super::give_back(), "nothing given back");
        let after = rss();
        assert!(
            after + (64 << 20) <= before,
            "RSS {} MiB before, {} MiB after",
            before >> 20,
            after >> 20
        );
        drop(std::hint::black_box(blocks));
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn the_heap_count_follows_an_allocation_and_its_release() {
        // Large beside what other tests allocate meanwhile in this process.
        const BLOCK: u64 = 256 << 20;
        const SLACK: u64 = 64 << 20;
        let before = super::heap_in_use().expect("glibc counts its heap");
        let block = vec![0u8; BLOCK as usize];
        let during = super::heap_in_use().unwrap();
        assert!(during + SLACK >= before + BLOCK, "{before} then {during}");
        drop(std::hint::black_box(block));
        let after = super::heap_in_use().unwrap();
        assert!(after + BLOCK <= during + SLACK, "{during} then {after}");
    }
}
