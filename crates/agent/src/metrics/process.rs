//! The standard process metrics (`process_*`, as Prometheus client libraries expose them and
//! kube-proxy's registry does), read from `/proc` at each scrape by a `prometheus-client`
//! [`Collector`].
//!
//! `prometheus-client` has no process collector of its own; these are a handful of `/proc`
//! fields, encoded by the library as constant metrics.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Linux reports times in `/proc` in `USER_HZ` ticks, 100 a second on every architecture
/// the agent builds for (the kernel's `CONFIG_HZ` does not change it).
const USER_HZ: f64 = 100.0;

/// What the process metrics read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Process {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident memory, in bytes.
    pub resident_bytes: u64,
    /// Virtual memory, in bytes.
    pub virtual_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit of open file descriptors.
    pub max_fds: Option<u64>,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
    /// Bytes in live heap allocations ([`crate::allocator::heap_in_use`]).
    pub heap_bytes: Option<u64>,
}

impl Process {
    /// Reads this process's figures; any that cannot be read stay 0 or `None`.
    pub fn read() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let mut p = Process::default();
        let stat = read("/proc/self/stat");
        if let Some(fields) = stat_fields(&stat) {
            let tick = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
            // Fields counted from `state` (the third in proc(5)): utime is 14th, stime 15th,
            // starttime 22nd.
            let (utime, stime) = (tick(11).unwrap_or(0), tick(12).unwrap_or(0));
            p.cpu_seconds = (utime + stime) as f64 / USER_HZ;
            p.start_time_seconds = tick(19)
                .zip(boot_time(&read("/proc/stat")))
                .map(|(start, boot)| boot as f64 + start as f64 / USER_HZ);
        }
        let status = read("/proc/self/status");
        p.resident_bytes = status_kib(&status, "VmRSS:") * 1024;
        p.virtual_bytes = status_kib(&status, "VmSize:") * 1024;
        p.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        p.max_fds = max_open_files(&read("/proc/self/limits"));
        p.heap_bytes = crate::allocator::heap_in_use();
        p
    }
}

/// The fields of `/proc/PID/stat` after the command name (which may hold spaces and
/// parentheses, so the split starts after its last `)`).
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

/// `btime` of `/proc/stat`: the boot time in seconds since the epoch.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// A `kB` line of `/proc/PID/status`.
fn status_kib(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The soft limit of `Max open files` in `/proc/PID/limits` (`None` when unlimited).
fn max_open_files(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Encodes [`Process::read`] at each scrape; a figure that cannot be read is left out, as
/// before (`process_max_fds` when unlimited, `process_start_time_seconds` without `/proc/stat`).
#[derive(Debug)]
pub(super) struct Collector;

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let p = Process::read();
        let cpu = ConstCounter::new(p.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            cpu.metric_type(),
        )?)?;
        let mut gauge = |name: &str, help: &str, v: f64| -> Result<(), std::fmt::Error> {
            let g = ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
        };
        gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            p.resident_bytes as f64,
        )?;
        gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            p.virtual_bytes as f64,
        )?;
        gauge(
            "process_open_fds",
            "Number of open file descriptors.",
            p.open_fds as f64,
        )?;
        if let Some(max) = p.max_fds {
            gauge(
                "process_max_fds",
                "Maximum number of open file descriptors.",
                max as f64,
            )?;
        }
        if let Some(start) = p.start_time_seconds {
            gauge(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                start,
            )?;
        }
        if let Some(heap) = p.heap_bytes {
            gauge(
                "kube_proxy_ipvs_heap_inuse_bytes",
                "Bytes in live heap allocations, as the allocator counts them (glibc's mallinfo2).",
                heap as f64,
            )?;
        }
        Ok(())
    }
}

/// Rust's architecture names as Go (and so Kubernetes' `platform` label) spells them.
pub(super) fn go_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;

    fn now_seconds() -> f64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    }

    #[test]
    fn reads_proc_of_this_process() {
        // Spend a little CPU so the counter is not 0.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert_ne!(x, 1);
        let p = Process::read();
        assert!(p.resident_bytes > 1 << 20, "{p:?}");
        assert!(p.virtual_bytes >= p.resident_bytes, "{p:?}");
        assert!(p.open_fds >= 3, "{p:?}");
        assert!(p.max_fds.is_some_and(|m| m >= p.open_fds), "{p:?}");
        assert!(p.heap_bytes.is_some_and(|h| h > 0), "{p:?}");
        let start = p.start_time_seconds.expect("start time");
        assert!(
            start > now_seconds() - 3600.0 && start <= now_seconds() + 1.0,
            "{p:?}"
        );
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 1000 1000 10";
        let f = stat_fields(stat).unwrap();
        assert_eq!(f[0], "S");
        assert_eq!((f[11], f[12], f[19]), ("250", "50", "1000"));
        assert_eq!(
            boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
        assert_eq!(
            max_open_files(
                "Max open files            1024                 524288               files\n"
            ),
            Some(1024)
        );
        assert_eq!(
            max_open_files("Max open files  unlimited unlimited files\n"),
            None
        );
        assert_eq!(status_kib("VmRSS:\t   2048 kB\n", "VmRSS:"), 2048);
    }
}
