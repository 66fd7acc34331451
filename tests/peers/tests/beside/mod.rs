//! Beside upstream kube-proxy (issue 16, item 5): upstream kube-proxy in `--proxy-mode=ipvs`,
//! upstream kube-proxy in `--proxy-mode=nftables` and the agent, each alone (one after the
//! other, each in a fresh network namespace of the same VM) against the host's real
//! kube-apiserver holding S(N, 5): N Services (10% NodePort, 2% with an external IP, 1%
//! session-affine) with 5 ready endpoints each, the shape of `scale`'s generator
//! (`crates/agent/examples/scale.rs`, `cluster(n)`), `default/kubernetes` (the API server's own)
//! counting as Service 0.
//!
//! Per program and N it measures, all on the VM's one clock:
//! - **cold sync**: from the program's start to its full state in the kernel. For IPVS, the
//!   virtual servers and real servers of its namespace (`/proc/PID/net/ip_vs`); for nftables
//!   mode, the Services' `service-*` chains and the `endpoint-*` chains of table
//!   `ip kube-proxy` (`nft list chains ip`), and, once those hold, every endpoint of S(N, 5)
//!   a DNAT destination of the table (`nft list table ip kube-proxy`, [`dnat_targets`]):
//!   kube-proxy 1.37.2 writes an endpoint chain only for a session-affine Service's
//!   endpoints (5 per affine Service: 50 at N = 1000) and DNATs the others straight from
//!   their Service's chain through a `numgen` map, so the endpoint chains are not its
//!   endpoints. The kernel is polled every second or twice a poll's own cost, whichever is
//!   longer; the full state is the first poll that saw the counts the program ends with
//!   (and, in nftables mode, after any reading of the table that found an endpoint
//!   missing), once it has reported a sync (`kubeproxy_sync_proxy_rules_last_timestamp_seconds`)
//!   and two polls in a row agree;
//! - **one endpoint change**: the fifth endpoint of one ClusterIP Service's slice moved to a
//!   new address, from just before the API write to the first poll of the kernel that shows
//!   it, watched from a thread in the program's namespace with the real tools: `ipvsadm -Ln -t
//!   VIP:80` polled back to back for IPVS (the poll's own cost is printed: it is the
//!   resolution), `nft monitor rules` for nftables mode (the new address as a map element, a
//!   lone DNAT or an endpoint chain's name in a rule it prints: [`nft_shows`]; a poll of the
//!   chain with `nft list chain` took 14.7 s at N = 10000; one monitor, started once per
//!   change phase since it loads the table before it listens, and its time to listen is
//!   printed instead); one change every 1-2 s (kube-proxy's `--min-sync-period`, 1 s in nftables
//!   mode, never delays one);
//! - **CPU**: utime + stime of the program and of the children it waited for (`iptables-restore`,
//!   `ipset`, `nft`: kube-proxy's nftables mode does its kernel work in `nft`), from
//!   `/proc/PID/stat`, for the cold sync and per change (the whole change phase, periodic
//!   resyncs included, over the changes; and each change's own window, from the write to the
//!   kernel showing it);
//! - **peak RSS**: `VmHWM` of `/proc/PID/status`, after the cold sync and at the end.
//!
//! nftables mode runs in two configurations: `nftables`, kube-proxy 1.37.2's defaults (the
//! beta gate `NFTablesNetlink` on: its listings of the table through netlink, its
//! transactions through `nft`), the one the `nftables_*_ratio_10k` results compare with; and
//! `nftables-exec`, with `--feature-gates=NFTablesNetlink=false` (listings through `nft` as
//! well, as before 1.37), run only when named in `PEERS_BESIDE_PROGRAMS`. Both write the
//! same ruleset, and both log a failed listing at their first sync of each family, before
//! their table exists ("Failed to list existing sets", with netlink's `no such file or
//! directory`; with `nft`, chains and sets, "No such file or directory"): harmless, there is
//! nothing to clean up yet.
//!
//! A program that has not reached its full state within `PEERS_BESIDE_COLD_SECS` (default
//! 1800) is reported with the counts it reached. The Services are created once per N (added
//! to those of the smaller N before), concurrently, and the seeding time is printed.
//!
//! Run by `tests/bench.sh --beside`: a benchmark, not a test, so `#[ignore]`d and selected
//! with `-- --ignored beside`. Knobs (environment, passed into the VM by `lab test`):
//! `PEERS_BESIDE_SIZES` (default `1000`), `PEERS_BESIDE_CHANGES` (100),
//! `PEERS_BESIDE_CHANGE_SECS` (time bound of one program's change phase, default 900),
//! `PEERS_BESIDE_COLD_SECS` (1800), `PEERS_BESIDE_PROGRAMS` (`agent,ipvs,nftables`; also
//! `nftables-exec`), `PEERS_BESIDE_AGENT` (the agent binary: a release build; default the one
//! built beside this test); for debugging, `PEERS_BESIDE_KUBE_PROXY_ARGS` (extra kube-proxy
//! flags, e.g. `-v=4`) and `PEERS_BESIDE_DUMP=1` (each kube-proxy's whole log and, in
//! nftables mode, its table, printed at the end of its run). The last line, `BESIDE-JSON {...}`, is what `tests/bench.sh` merges into
//! `bench/results.json`. Software emulation is about 20 times slower than a real machine:
//! read the ratios, measured in one run, not the seconds.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use peers::scenario::{self, Object};
use serde_json::{Value, json};

use super::api::Cluster;
use super::node::{NodeNs, Program};
use super::{agent, connect, kube_proxy};

/// Ready endpoints per Service.
const E: u32 = 5;
/// The node's name (the `peers-` prefix makes `Cluster::clear` remove it).
const NODE: &str = "peers-beside";
/// Parallel requests while seeding.
const SEED_PARALLEL: usize = 32;

/// One of the programs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Who {
    Agent,
    Ipvs,
    /// nftables mode as kube-proxy 1.37 runs by default (`NFTablesNetlink` on: its listings
    /// through netlink, its transactions through `nft`).
    Nftables,
    /// nftables mode with `--feature-gates=NFTablesNetlink=false`: listings through `nft`
    /// too, as before 1.37. Not run unless named.
    NftablesExec,
}

impl Who {
    /// Its key in the results.
    fn key(self) -> &'static str {
        match self {
            Who::Agent => "agent",
            Who::Ipvs => "ipvs",
            Who::Nftables => "nftables",
            Who::NftablesExec => "nftables-exec",
        }
    }

    /// Whether it is kube-proxy's nftables mode (either configuration).
    fn nft(self) -> bool {
        matches!(self, Who::Nftables | Who::NftablesExec)
    }

    fn label(self) -> &'static str {
        match self {
            Who::Agent => "the agent",
            Who::Ipvs => "kube-proxy --proxy-mode=ipvs",
            Who::Nftables => "kube-proxy --proxy-mode=nftables",
            Who::NftablesExec => {
                "kube-proxy --proxy-mode=nftables --feature-gates=NFTablesNetlink=false"
            }
        }
    }

    /// What the two kernel counts are.
    fn counted(self) -> &'static str {
        if self.nft() {
            "service chains / endpoint chains"
        } else {
            "virtual servers / real servers"
        }
    }
}

/// The run's knobs, from the environment.
struct Settings {
    sizes: Vec<usize>,
    changes: usize,
    change_limit: Duration,
    cold_limit: Duration,
    programs: Vec<Who>,
    agent: PathBuf,
    /// Extra kube-proxy flags (`PEERS_BESIDE_KUBE_PROXY_ARGS`, whitespace-separated), e.g.
    /// `-v=4`: a debugging knob.
    kube_proxy_args: Vec<String>,
    /// `PEERS_BESIDE_DUMP=1`: print each kube-proxy's whole log and, in nftables mode, its
    /// table at the end of its run.
    dump: bool,
}

fn env_or(key: &str, default: &str) -> String {
    lab::guest::knob(key, None).unwrap_or_else(|| default.into())
}

fn settings() -> Settings {
    let list = |key: &str, default: &str| -> Vec<String> {
        env_or(key, default)
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let secs = |key: &str, default: u64| {
        Duration::from_secs(lab::guest::knob(key, None).unwrap_or(default))
    };
    Settings {
        sizes: list("PEERS_BESIDE_SIZES", "1000")
            .iter()
            .map(|s| s.parse().expect("PEERS_BESIDE_SIZES: N,N,..."))
            .collect(),
        changes: lab::guest::knob("PEERS_BESIDE_CHANGES", None).unwrap_or(100),
        change_limit: secs("PEERS_BESIDE_CHANGE_SECS", 900),
        cold_limit: secs("PEERS_BESIDE_COLD_SECS", 1800),
        programs: list("PEERS_BESIDE_PROGRAMS", "agent,ipvs,nftables")
            .iter()
            .map(|p| match p.as_str() {
                "agent" => Who::Agent,
                "ipvs" => Who::Ipvs,
                "nftables" => Who::Nftables,
                "nftables-exec" => Who::NftablesExec,
                other => panic!("PEERS_BESIDE_PROGRAMS: unknown program {other}"),
            })
            .collect(),
        agent: std::env::var_os("PEERS_BESIDE_AGENT")
            .map(PathBuf::from)
            .unwrap_or_else(agent),
        kube_proxy_args: env_or("PEERS_BESIDE_KUBE_PROXY_ARGS", "")
            .split_whitespace()
            .map(String::from)
            .collect(),
        dump: env_or("PEERS_BESIDE_DUMP", "0") != "0",
    }
}

// ---- S(N, 5), as `scale`'s `cluster(n)` ----

fn v4(base: [u8; 4], offset: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::from(base)) + offset)
}

/// Service `i`'s namespace and name (`i >= 1`; 0 is `default/kubernetes`).
fn id(i: usize) -> (String, String) {
    (format!("ns{}", i / 100), format!("svc{i}"))
}

/// Service `i`'s ClusterIP.
fn vip(i: usize) -> Ipv4Addr {
    v4([10, 96, 0, 1], i as u32)
}

/// Service `i`: ClusterIP 10.96.0.1 + i, port 80 to 8080; every 10th a NodePort, every 50th
/// with an external IP, every 100th session-affine.
fn service(i: usize) -> Object {
    let (namespace, name) = id(i);
    let mut port = json!({"port": 80, "targetPort": 8080, "protocol": "TCP"});
    let mut spec = json!({"clusterIP": vip(i).to_string(), "type": "ClusterIP"});
    if i % 10 == 5 {
        spec["type"] = "NodePort".into();
        port["nodePort"] = (30000 + i / 10).into();
    }
    if i % 50 == 7 {
        spec["externalIPs"] = json!([v4([172, 16, 0, 0], i as u32).to_string()]);
    }
    if i % 100 == 3 {
        spec["sessionAffinity"] = "ClientIP".into();
    }
    spec["ports"] = json!([port]);
    Object {
        kind: "Service".into(),
        body: json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }),
        namespace,
        name,
    }
}

/// Service `i`'s one EndpointSlice: 5 ready endpoints 10.128.0.0 + 5i + j, port 8080; the
/// fifth at `fifth` instead when given (the measured change).
fn slice(i: usize, fifth: Option<Ipv4Addr>) -> Object {
    let (namespace, service) = id(i);
    let name = format!("{service}-x");
    let endpoints: Vec<Value> = (0..E)
        .map(|j| {
            let address = match fifth {
                Some(a) if j == E - 1 => a,
                _ => v4([10, 128, 0, 0], i as u32 * E + j),
            };
            json!({"addresses": [address.to_string()], "conditions": {"ready": true}, "nodeName": "node-b"})
        })
        .collect();
    Object {
        kind: "EndpointSlice".into(),
        body: json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4",
            "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
            "endpoints": endpoints,
        }),
        namespace,
        name,
    }
}

/// Creates Services `from..to` (and their slices) and their namespaces; returns how long it
/// took.
fn seed(cluster: &Cluster, from: usize, to: usize) -> Duration {
    let t = Instant::now();
    let namespaces: Vec<String> = (from / 100..=(to - 1) / 100)
        .map(|n| format!("ns{n}"))
        .collect();
    cluster.ensure_namespaces(&namespaces).expect("namespaces");
    let objects: Vec<Object> = (from.max(1)..to)
        .flat_map(|i| [service(i), slice(i, None)])
        .collect();
    cluster
        .apply_concurrently(&objects, SEED_PARALLEL)
        .expect("seeding S(N, 5)");
    t.elapsed()
}

/// The changed Service at N: a plain ClusterIP one in the middle.
fn changed(n: usize) -> usize {
    (n / 2..n)
        .find(|i| i % 10 != 5 && i % 50 != 7 && i % 100 != 3)
        .expect("a plain Service")
}

// ---- the process and the kernel, read ----

/// CPU time of the program and of the children it has waited for, in clock ticks.
fn ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15,
    // cutime 16, cstime 17.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|v| v.parse().ok())
        .collect();
    (f.len() == 4).then(|| f.iter().sum())
}

fn tick_secs(ticks: u64) -> f64 {
    // SAFETY: sysconf(3) takes no pointers.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    ticks as f64 / hz as f64
}

/// Peak resident memory (`VmHWM`), MiB.
fn hwm_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// A command run in the namespace; its standard output, empty when it fails.
fn in_ns(ns: &NodeNs, args: &[&str]) -> String {
    Command::new("ip")
        .args(["netns", "exec", ns.ns.name()])
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The two counts of what `who` has in the kernel (see [`Who::counted`]).
fn counts(who: Who, ns: &NodeNs, pid: u32) -> (usize, usize) {
    match who {
        Who::Nftables | Who::NftablesExec => {
            let text = in_ns(ns, &["nft", "list", "chains", "ip"]);
            let chains = |prefix: &str| {
                text.lines()
                    .filter(|l| l.trim_start().starts_with(prefix))
                    .count()
            };
            // `service-endpoints-check` is a base chain, not a Service's.
            (
                chains("chain service-") - chains("chain service-endpoints-check "),
                chains("chain endpoint-"),
            )
        }
        Who::Agent | Who::Ipvs => {
            // The namespace's IPVS table, read through the program's own /proc entry.
            let text =
                std::fs::read_to_string(format!("/proc/{pid}/net/ip_vs")).unwrap_or_default();
            let servers = text
                .lines()
                .filter(|l| l.starts_with("TCP") || l.starts_with("UDP") || l.starts_with("SCTP"))
                .count();
            let reals = text
                .lines()
                .filter(|l| l.starts_with("  -> ") && !l.contains("RemoteAddress"))
                .count();
            (servers, reals)
        }
    }
}

/// Every endpoint of S(n, 5): five for each of Services 1 to n - 1, and `default/kubernetes`'s one
/// (the API server).
fn expected_endpoints(n: usize) -> usize {
    (n - 1) * E as usize + 1
}

/// The endpoints nftables mode sends traffic to: the DNAT destinations of table
/// `ip kube-proxy`. kube-proxy 1.37.2's nftables mode writes an endpoint chain only for a
/// session-affine Service's endpoints (`syncProxyRules`: "We only use separate endpoint
/// chains when adding affinity rules"); any other Service's chain DNATs straight to its
/// endpoints (`dnat ip addr . port to numgen random mod 5 map { 0 :
/// 10.128.0.5 . 8080, ... }`, or `dnat to 10.128.0.5:8080` for one), so the endpoint chains
/// of S(N, 5) are 5 per affine Service, 50 at N = 1000, and the endpoints are counted here.
/// Each endpoint is one destination: an affine Service's chain jumps to its endpoint chains
/// (`vmap { 0 : goto endpoint-... }`, no `dnat`), each of which DNATs once.
fn dnat_targets(ns: &NodeNs) -> usize {
    dnat_targets_of(&in_ns(ns, &["nft", "list", "table", "ip", "kube-proxy"]))
}

fn dnat_targets_of(table: &str) -> usize {
    // The DNAT statements as `nft` 1.0.6 prints them (`dnat ip to numgen ... map`) and as
    // kube-proxy writes them (`dnat ip addr . port to`); not the hairpin rule's
    // `ct status dnat` match.
    let dnat = |l: &str| {
        [
            " dnat to ",
            " dnat ip to ",
            " dnat ip6 to ",
            " addr . port to ",
        ]
        .iter()
        .any(|s| l.contains(s))
    };
    table
        .lines()
        .filter(|l| dnat(l))
        .map(|l| match l.split_once(" map {") {
            Some((_, elements)) => elements.matches(" : ").count(),
            None => 1,
        })
        .sum()
}

/// Where endpoint `address` (port 8080) shows in nftables mode's listing of its Service's
/// chain: a map element, a lone DNAT, or the name of the endpoint chain jumped to.
fn nft_shows(listing: &str, address: Ipv4Addr) -> bool {
    [
        format!(" {address} . 8080"),
        format!(" {address}:8080"),
        format!("__{address}/8080"),
    ]
    .iter()
    .any(|n| listing.contains(n.as_str()))
}

/// `nft monitor rules`, started once in a program's namespace for its whole change phase:
/// it loads the table's cache before it listens (as long as a listing: 15 s at N = 10000),
/// so one started per change would cost that every change.
struct Monitor {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<(Instant, String)>,
    /// How long it took to listen, ms.
    listen_ms: f64,
}

impl Monitor {
    /// Starts the monitor in `ns` and returns once it listens: it says nothing when it does,
    /// so a probe rule in a table of its own is written every second until it comes out. A
    /// monitor that exits first (its cache load failing on a large table) is started again,
    /// for five minutes, and what it said is printed.
    fn start(ns: &NodeNs) -> Option<Monitor> {
        ns.ns
            .spawn(|| {
                let p = Instant::now();
                let give_up = p + Duration::from_secs(300);
                let mut monitor = None;
                while monitor.is_none() && Instant::now() < give_up {
                    monitor = Self::try_start(give_up);
                }
                let _ = Command::new("nft")
                    .args(["delete", "table", "ip", "beside-probe"])
                    .output();
                let Some(mut monitor) = monitor else {
                    println!("beside: nft monitor did not listen within 300 s");
                    return None;
                };
                monitor.listen_ms = p.elapsed().as_secs_f64() * 1e3;
                // What it printed before now (the probe's deletion) is not a change.
                std::thread::sleep(Duration::from_millis(500));
                monitor.drain();
                Some(monitor)
            })
            .join()
            .expect("the monitor's start")
    }

    /// One monitor, until it listens (`Some`), exits or `give_up` comes (`None`).
    fn try_start(give_up: Instant) -> Option<Monitor> {
        use std::io::{BufRead as _, Read as _};
        use std::process::Stdio;
        let mut child = Command::new("nft")
            .args(["monitor", "rules"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        let stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let (lines_tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines_tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let said = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut monitor = Monitor {
            child,
            lines,
            listen_ms: 0.0,
        };
        // A probe is written only once the monitor has used no CPU for two seconds: each
        // write changes the ruleset's generation, which makes a monitor still loading its
        // cache start the load again (at N = 5000 under emulation, a probe a second kept it
        // loading for good).
        let marker = "beside-monitor-ready";
        let pid = monitor.child.id();
        let mut cpu = ticks(pid);
        let mut still_since = Instant::now();
        let mut probed: Option<Instant> = None;
        loop {
            match monitor.lines.recv_timeout(Duration::from_millis(500)) {
                Ok((_, line)) if line.contains(marker) => return Some(monitor),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    let status = monitor.child.wait();
                    println!(
                        "beside: nft monitor exited before it listened ({status:?}): {}",
                        said.join().unwrap_or_default().trim()
                    );
                    return None;
                }
                Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
            if Instant::now() >= give_up {
                return None;
            }
            let now = ticks(pid);
            if now != cpu {
                cpu = now;
                still_since = Instant::now();
                continue;
            }
            let due = probed.is_none_or(|at| at.elapsed() > Duration::from_secs(5));
            if still_since.elapsed() >= Duration::from_secs(2) && due {
                let _ = Command::new("nft")
                    .arg(format!(
                        "add table ip beside-probe; add chain ip beside-probe c; \
                         add rule ip beside-probe c counter comment \"{marker}\""
                    ))
                    .output();
                probed = Some(Instant::now());
            }
        }
    }

    /// Forgets what was printed so far, so that only rules after now are looked at.
    fn drain(&self) {
        while self.lines.try_recv().is_ok() {}
    }

    /// When a rule it printed showed `address` ([`nft_shows`]); `None` after `limit`.
    fn until(&self, address: Ipv4Addr, limit: Duration) -> Option<Instant> {
        let deadline = Instant::now() + limit;
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok((at, line)) if nft_shows(&line, address) => return Some(at),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the VM's CPUs are idle (90% over a second) or a minute has passed, so that
/// the namespace teardown of one run does not count against the next.
fn wait_quiet() -> Duration {
    let read = || -> (u64, u64) {
        let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let v: Vec<u64> = s
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
        (idle, v.iter().sum())
    };
    let t = Instant::now();
    let mut last = read();
    while t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_secs(1));
        let now = read();
        let (idle, total) = (now.0 - last.0, now.1 - last.1);
        last = now;
        if total > 0 && idle * 10 >= total * 9 {
            break;
        }
    }
    t.elapsed()
}

// ---- one program at one N ----

/// What one program did at one N.
#[derive(Default)]
struct Run {
    /// Start to full state, s (`None`: not reached within the bound).
    cold: Option<f64>,
    cold_cpu: f64,
    /// The counts it reached (the final ones, or how far it got).
    counts: (usize, usize),
    /// nftables mode: the endpoints its table DNATs to, when last read ([`dnat_targets`]).
    endpoints: Option<usize>,
    /// Each change's latency, ms (only the ones the kernel showed).
    latencies: Vec<f64>,
    /// Changes written whose result the kernel never showed in time.
    lost: usize,
    /// CPU of the whole change phase over the changes, ms.
    change_cpu_ms: f64,
    /// Mean CPU of each change's own window (write to kernel), ms.
    change_window_cpu_ms: f64,
    /// How long the change phase took, s.
    change_phase: f64,
    /// The median cost of one poll of the kernel during the changes, ms.
    poll_ms: f64,
    rss_cold: f64,
    rss_peak: f64,
    note: String,
}

impl Run {
    fn median(&self) -> f64 {
        percentile(&self.latencies, 0.5)
    }
    fn p99(&self) -> f64 {
        percentile(&self.latencies, 0.99)
    }

    /// The distribution of the changes' latencies, ms: the nearest-rank p10, p20, ... p90,
    /// p99 and the slowest (null when no change was seen). `bench/plot.py` draws it.
    fn percentiles(&self) -> Value {
        if self.latencies.is_empty() {
            return Value::Null;
        }
        let round = |v: f64| json!((v * 1e4).round() / 1e4);
        let mut m = serde_json::Map::new();
        for d in 1..=9 {
            let q = f64::from(d) / 10.0;
            m.insert(
                format!("p{}", d * 10),
                round(percentile(&self.latencies, q)),
            );
        }
        m.insert("p99".into(), round(self.p99()));
        m.insert("max".into(), round(percentile(&self.latencies, 1.0)));
        Value::Object(m)
    }

    fn json(&self) -> Value {
        let num = |v: f64| {
            if v.is_finite() {
                json!((v * 1e4).round() / 1e4)
            } else {
                Value::Null
            }
        };
        json!({
            "cold_s": self.cold.map_or(Value::Null, num),
            "cold_cpu_s": num(self.cold_cpu),
            "counts": [self.counts.0, self.counts.1],
            "endpoints_dnated": self.endpoints,
            "changes": self.latencies.len(),
            "changes_lost": self.lost,
            "change_median_ms": num(self.median()),
            "change_p99_ms": num(self.p99()),
            "change_percentiles_ms": self.percentiles(),
            "change_cpu_ms": num(self.change_cpu_ms),
            "change_window_cpu_ms": num(self.change_window_cpu_ms),
            "change_phase_s": num(self.change_phase),
            "poll_ms": num(self.poll_ms),
            "rss_cold_mib": num(self.rss_cold),
            "rss_peak_mib": num(self.rss_peak),
            "note": self.note,
        })
    }
}

/// The nearest-rank percentile (NaN when empty).
fn percentile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The change counter across runs: every change moves the endpoint to an address no run has
/// seen, so a real server IPVS keeps draining is never taken for the new one.
static CHANGE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Starts `who` alone in a fresh namespace on the seeded S(n, 5), measures it, stops it and
/// clears its namespace.
fn run_one(
    cp: &lab::controlplane::ControlPlane,
    cluster: &Cluster,
    who: Who,
    n: usize,
    set: &Settings,
) -> Run {
    let node = scenario::parse(
        "beside",
        "description: beside\nnode: {addresses: [192.168.100.10/24], pod_cidrs: [10.244.0.0/24]}\n",
    )
    .expect("the node");
    let ns = NodeNs::new(&format!("beside-{}", who.key()), &node);
    let forward = cp.forward_into(ns.ns.name());
    let (bin, kubeconfig, mode) = match who {
        Who::Agent => (set.agent.clone(), cp.agent_kubeconfig(), "ipvs"),
        Who::Ipvs => (kube_proxy(), cp.kube_proxy_kubeconfig(), "ipvs"),
        Who::Nftables | Who::NftablesExec => (kube_proxy(), cp.kube_proxy_kubeconfig(), "nftables"),
    };
    let mut args: Vec<String> = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--hostname-override={NODE}"),
        format!("--proxy-mode={mode}"),
        "--healthz-bind-address=0.0.0.0:10256".into(),
        "--metrics-bind-address=127.0.0.1:10249".into(),
        // The conntrack table size is global to the kernel: no program may touch it here.
        "--conntrack-max-per-core=0".into(),
        "--cluster-cidr=10.244.0.0/16".into(),
    ];
    if who == Who::NftablesExec {
        args.push("--feature-gates=NFTablesNetlink=false".into());
    }
    if who != Who::Agent {
        args.extend(set.kube_proxy_args.iter().cloned());
    }
    let dir = PathBuf::from("/tmp/beside");
    std::fs::create_dir_all(&dir).expect("/tmp/beside");
    let log = dir.join(format!("{}-{n}.log", who.key()));
    let mut run = Run::default();

    let since = SystemTime::now();
    let t0 = Instant::now();
    let mut program = ns.start(&bin, &args, &log).expect("starting the program");
    let pid = program.pid();
    // (seconds since start, counts, CPU ticks) per poll.
    let mut polls: Vec<(f64, (usize, usize), u64)> = Vec::new();
    let mut last_progress = Instant::now();
    // nftables mode: every endpoint of S(n, 5) must be a DNAT destination of its table
    // before it is at its full state, whatever its metrics say; the table is read once the
    // chain counts hold (the last count read, and when it was last read short).
    let want = expected_endpoints(n);
    let mut short_at = f64::NEG_INFINITY;
    let finished = loop {
        if !program.running() {
            run.note = format!("exited during the cold sync:\n{}", program.tail(20));
            break false;
        }
        let p0 = Instant::now();
        let c = counts(who, &ns, pid);
        let at = t0.elapsed().as_secs_f64();
        let cpu = ticks(pid).unwrap_or(0);
        let cost = p0.elapsed();
        if polls.last().is_none_or(|l| l.1 != c) {
            last_progress = Instant::now();
        }
        let stable = polls.last().is_some_and(|l| l.1 == c) && c.0 > 0;
        polls.push((at, c, cpu));
        if stable && ns.sync_status(since).0 {
            let whole = !who.nft() || {
                let t = dnat_targets(&ns);
                if run.endpoints != Some(t) {
                    last_progress = Instant::now();
                }
                run.endpoints = Some(t);
                if t < want {
                    short_at = at;
                }
                t >= want
            };
            if whole {
                break true;
            }
            if last_progress.elapsed() > Duration::from_secs(120) {
                run.note = format!(
                    "synced by its metrics but stopped at {} {} with {} of the {want} \
                     endpoints DNATed, no progress for {:.0?}; the last of its log:\n{}",
                    c.0,
                    c.1,
                    run.endpoints.unwrap_or(0),
                    last_progress.elapsed(),
                    program.tail(20)
                );
                break false;
            }
        }
        if t0.elapsed() > set.cold_limit {
            run.note = format!(
                "not at its full state after {:.0?}: reached {} {} (no progress for {:.0?})",
                set.cold_limit,
                c.0,
                c.1,
                last_progress.elapsed()
            );
            break false;
        }
        std::thread::sleep(Duration::from_secs(1).max(cost * 2));
    };
    run.counts = polls.last().map_or((0, 0), |p| p.1);
    run.rss_cold = hwm_mib(pid);
    if finished {
        let first = polls
            .iter()
            .find(|p| p.1 == run.counts && p.0 > short_at)
            .expect("the final counts were polled");
        run.cold = Some(first.0);
        run.cold_cpu = tick_secs(first.2);
        println!(
            "beside: N={n} {}: full state ({}: {} / {}{}) {:.2} s after its start, {:.2} CPU s, VmHWM {:.1} MiB",
            who.label(),
            who.counted(),
            run.counts.0,
            run.counts.1,
            run.endpoints
                .map(|t| format!("; endpoints DNATed: {t} of {want}"))
                .unwrap_or_default(),
            first.0,
            run.cold_cpu,
            run.rss_cold
        );
        changes(cluster, who, n, set, &ns, &mut program, &mut run);
    } else {
        println!("beside: N={n} {}: {}", who.label(), run.note);
    }
    run.rss_peak = hwm_mib(pid);
    if set.dump && who != Who::Agent {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        println!(
            "beside: N={n} {}: its log ({} lines):\n{log}",
            who.label(),
            log.lines().count()
        );
        if who.nft() {
            println!(
                "beside: N={n} {}: its table:\n{}",
                who.label(),
                in_ns(&ns, &["nft", "list", "table", "ip", "kube-proxy"])
            );
        }
    }
    program.kill();
    // Cleared before the namespace goes, so the kernel's teardown of 10,000s of objects runs
    // here and not during the next program's cold sync.
    let _ = in_ns(&ns, &["ipvsadm", "-C"]);
    let _ = in_ns(&ns, &["nft", "flush", "ruleset"]);
    let _ = in_ns(&ns, &["ip", "link", "del", "kube-ipvs0"]);
    drop(forward);
    drop(ns);
    let quiet = wait_quiet();
    println!(
        "beside: N={n} {}: stopped; the VM was quiet again {quiet:.0?} later",
        who.label()
    );
    run
}

/// The change phase: up to `set.changes` endpoint changes of one Service, each timed from the
/// API write to the kernel showing it.
fn changes(
    cluster: &Cluster,
    who: Who,
    n: usize,
    set: &Settings,
    ns: &NodeNs,
    program: &mut Program,
    run: &mut Run,
) {
    let m = changed(n);
    let (svc_ns, svc_name) = id(m);
    // IPVS is polled with the command that shows the Service's real servers. nftables mode is
    // watched, not polled: a poll of its chain (`nft list chain`) loads the table's whole
    // cache, 14.7 s at N = 10000, longer than its changes take, while `nft monitor` prints
    // each rule as its transaction commits.
    let probe: Vec<String> = ["ipvsadm", "-Ln", "-t", &format!("{}:80", vip(m))]
        .map(String::from)
        .to_vec();
    let monitor = if who.nft() {
        let Some(monitor) = Monitor::start(ns) else {
            run.note.push_str("nft monitor never listened");
            return;
        };
        Some(monitor)
    } else {
        None
    };
    let pid = program.pid();
    let phase = Instant::now();
    let cpu0 = ticks(pid).unwrap_or(0);
    let mut window_ticks = 0u64;
    // For nftables mode the one cost is how long its monitor took to listen.
    let mut poll_costs: Vec<f64> = monitor.iter().map(|m| m.listen_ms).collect();
    // A fixed pseudo-random gap of 1-2 s between changes (no phase lock with periodic syncs).
    let mut rng: u32 = 0x9e37_79b9;
    for _ in 0..set.changes {
        if phase.elapsed() > set.change_limit || !program.running() {
            break;
        }
        let k = CHANGE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let address = v4([10, 200, 0, 0], k);
        let needle = format!("{address}:8080");
        let limit = set
            .change_limit
            .saturating_sub(phase.elapsed())
            .max(Duration::from_secs(60));
        let before = ticks(pid).unwrap_or(0);
        let (seen, t) = if let Some(monitor) = &monitor {
            monitor.drain();
            let t = Instant::now();
            cluster
                .apply(&[slice(m, Some(address))])
                .expect("the endpoint change");
            (monitor.until(address, limit), t)
        } else {
            // The poller starts before the write, in the program's namespace (its tools
            // inherit the namespace of the thread that starts them).
            let probe = probe.clone();
            let (ready_tx, ready) = std::sync::mpsc::channel();
            let watcher = ns.ns.spawn(move || {
                let _ = ready_tx.send(());
                let start = Instant::now();
                let mut costs = Vec::new();
                loop {
                    let p = Instant::now();
                    let out = Command::new(&probe[0])
                        .args(&probe[1..])
                        .output()
                        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                        .unwrap_or_default();
                    costs.push(p.elapsed().as_secs_f64() * 1e3);
                    if out.contains(&needle) {
                        return (Some(Instant::now()), costs);
                    }
                    if start.elapsed() > limit {
                        return (None, costs);
                    }
                }
            });
            let _ = ready.recv_timeout(Duration::from_secs(30));
            let t = Instant::now();
            cluster
                .apply(&[slice(m, Some(address))])
                .expect("the endpoint change");
            let (seen, costs) = watcher.join().expect("the watcher");
            poll_costs.extend(costs);
            (seen, t)
        };
        let seen = seen.map(|at| at.saturating_duration_since(t));
        window_ticks += ticks(pid).unwrap_or(0).saturating_sub(before);
        match seen {
            Some(d) => run.latencies.push(d.as_secs_f64() * 1e3),
            None => run.lost += 1,
        }
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        std::thread::sleep(Duration::from_millis(1000 + u64::from(rng % 1000)));
    }
    let done = run.latencies.len() + run.lost;
    run.change_phase = phase.elapsed().as_secs_f64();
    if done > 0 {
        let cpu = ticks(pid).unwrap_or(0).saturating_sub(cpu0);
        run.change_cpu_ms = tick_secs(cpu) * 1e3 / done as f64;
        run.change_window_cpu_ms = tick_secs(window_ticks) * 1e3 / done as f64;
    }
    run.poll_ms = percentile(&poll_costs, 0.5);
    if done < set.changes {
        let _ = write!(
            run.note,
            "{done} of {} changes within the change bound of {:.0?}",
            set.changes, set.change_limit
        );
    }
    if run.lost > 0 {
        let _ = write!(run.note, "; {} changes never shown in time", run.lost);
        // What the program said meanwhile is the first thing to read.
        println!(
            "beside: N={n} {}: {} changes never shown; the last of its log:\n{}",
            who.label(),
            run.lost,
            program.tail(40)
        );
    }
    println!(
        "beside: N={n} {}: {} changes of {svc_ns}/{svc_name}: median {:.1} ms, p99 {:.1} ms (poll {:.1} ms); CPU per change {:.1} ms (own window {:.1} ms) over {:.0} s{}",
        who.label(),
        run.latencies.len(),
        run.median(),
        run.p99(),
        run.poll_ms,
        run.change_cpu_ms,
        run.change_window_cpu_ms,
        run.change_phase,
        if run.note.is_empty() {
            String::new()
        } else {
            format!(" ({})", run.note)
        }
    );
}

// ---- the report ----

/// One figure of a run, for a row of the table.
type Figure = fn(&Run) -> f64;

/// The table of one N: each program's figures and the agent's ratios to each kube-proxy.
fn table(n: usize, seed: f64, runs: &BTreeMap<&'static str, Run>) -> String {
    let mut t = format!("\nS({n}, 5), seeded in {seed:.1} s\n\n| | ");
    let order: Vec<&str> = ["agent", "ipvs", "nftables", "nftables-exec"]
        .into_iter()
        .filter(|k| runs.contains_key(k))
        .collect();
    for k in &order {
        let _ = write!(t, "{k} | ");
    }
    let ratios: Vec<&str> = ["ipvs", "nftables", "nftables-exec"]
        .into_iter()
        .filter(|k| runs.contains_key(k) && runs.contains_key("agent"))
        .collect();
    for k in &ratios {
        let _ = write!(t, "agent / {k} | ");
    }
    t.push_str("\n|---|");
    for _ in 0..order.len() + ratios.len() {
        t.push_str("---|");
    }
    t.push('\n');
    let rows: [(&str, Figure); 9] = [
        ("cold sync, s", |r| r.cold.unwrap_or(f64::NAN)),
        ("cold sync CPU, s", |r| r.cold_cpu),
        ("change median, ms", Run::median),
        ("change p99, ms", Run::p99),
        ("CPU per change (phase), ms", |r| r.change_cpu_ms),
        ("CPU per change (own window), ms", |r| {
            r.change_window_cpu_ms
        }),
        ("RSS after cold sync, MiB", |r| r.rss_cold),
        ("peak RSS, MiB", |r| r.rss_peak),
        ("kernel poll, ms", |r| r.poll_ms),
    ];
    for (name, f) in rows {
        let _ = write!(t, "| {name} | ");
        for k in &order {
            let _ = write!(t, "{:.2} | ", f(&runs[k]));
        }
        for k in &ratios {
            let _ = write!(t, "{:.3} | ", f(&runs["agent"]) / f(&runs[k]));
        }
        t.push('\n');
    }
    let _ = write!(t, "| counts reached | ");
    for k in &order {
        let r = &runs[k];
        let _ = write!(t, "{} / {}", r.counts.0, r.counts.1);
        if let Some(e) = r.endpoints {
            let _ = write!(t, " ({e} endpoints DNATed)");
        }
        t.push_str(" | ");
    }
    for _ in &ratios {
        t.push_str(" | ");
    }
    t.push('\n');
    let _ = write!(t, "| changes measured | ");
    for k in &order {
        let _ = write!(t, "{} | ", runs[k].latencies.len());
    }
    for _ in &ratios {
        t.push_str(" | ");
    }
    t.push('\n');
    for k in &order {
        if !runs[k].note.is_empty() {
            let _ = writeln!(t, "\n{k}: {}", runs[k].note);
        }
    }
    t
}

/// The line `tests/bench.sh` merges into `bench/results.json`: the keys at 10,000
/// (null, and said so, when this run did not measure them) and every figure per N.
fn results_json(
    all: &BTreeMap<usize, BTreeMap<&'static str, Run>>,
    seeds: &BTreeMap<usize, f64>,
) -> String {
    let ratio = |other: &str, f: fn(&Run) -> f64| -> Value {
        let v = all
            .get(&10000)
            .and_then(|r| Some(f(r.get("agent")?) / f(r.get(other)?)))
            .filter(|v| v.is_finite());
        v.map_or(Value::Null, |v| json!((v * 1e4).round() / 1e4))
    };
    let cold = |r: &Run| r.cold.unwrap_or(f64::NAN);
    let mut out = json!({
        "kube_proxy_cold_ratio_10k": ratio("ipvs", cold),
        "kube_proxy_change_cpu_ratio_10k": ratio("ipvs", |r| r.change_cpu_ms),
        "kube_proxy_rss_ratio_10k": ratio("ipvs", |r| r.rss_peak),
        "nftables_cold_ratio_10k": ratio("nftables", cold),
        "nftables_change_latency_p99_ratio_10k": ratio("nftables", Run::p99),
        "nftables_change_cpu_ratio_10k": ratio("nftables", |r| r.change_cpu_ms),
        "nftables_rss_ratio_10k": ratio("nftables", |r| r.rss_peak),
        "beside_agent_peak_rss_mib_10k": all
            .get(&10000)
            .and_then(|r| r.get("agent"))
            .map(|r| r.rss_peak)
            .filter(|v| v.is_finite() && *v > 0.0)
            .map_or(Value::Null, |v| json!((v * 1e4).round() / 1e4)),
    });
    let nulls: Vec<&str> = out
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| v.is_null())
        .map(|(k, _)| k.as_str())
        .collect();
    if !nulls.is_empty() {
        println!(
            "beside: not measured in this run (null in the results): {} (needs N = 10000 with the agent and that kube-proxy, each reaching its full state)",
            nulls.join(", ")
        );
    }
    let mut sizes = serde_json::Map::new();
    for (n, runs) in all {
        let mut m: serde_json::Map<String, Value> = runs
            .iter()
            .map(|(k, r)| (k.to_string(), r.json()))
            .collect();
        m.insert(
            "seed_s".into(),
            json!(seeds.get(n).copied().unwrap_or(f64::NAN)),
        );
        sizes.insert(n.to_string(), Value::Object(m));
    }
    out["beside"] = Value::Object(sizes);
    format!("BESIDE-JSON {out}")
}

#[test]
#[ignore = "a benchmark of tens of minutes: tests/bench.sh --beside"]
fn beside_kube_proxy_ipvs_and_nftables_modes_and_the_agent_on_s_n_5() {
    let (_guard, cp, cluster, _ns) = connect();
    let set = settings();
    println!(
        "beside: kernel {}, sizes {:?}, {} changes (bound {:.0?} each), cold bound {:.0?}, programs {:?}, agent {}",
        lab::guest::kernel_release(),
        set.sizes,
        set.changes,
        set.change_limit,
        set.cold_limit,
        set.programs,
        set.agent.display()
    );
    cluster.clear().expect("clear");
    let node = scenario::parse(
        "beside",
        "description: beside\nnode: {addresses: [192.168.100.10/24], pod_cidrs: [10.244.0.0/24]}\n",
    )
    .expect("the node");
    cluster.apply_node(NODE, &node).expect("the Node");
    let mut seeded = 1; // default/kubernetes, the API server's own
    let mut all = BTreeMap::new();
    let mut seeds = BTreeMap::new();
    for &n in &set.sizes {
        assert!(
            n >= seeded,
            "PEERS_BESIDE_SIZES must grow: the Services of a size stay for the next"
        );
        let took = seed(&cluster, seeded, n);
        seeded = n;
        println!(
            "beside: S({n}, 5) in the API server: seeded in {took:.1?} ({SEED_PARALLEL} requests at a time)"
        );
        seeds.insert(n, took.as_secs_f64());
        let mut runs = BTreeMap::new();
        for &who in &set.programs {
            runs.insert(who.key(), run_one(&cp, &cluster, who, n, &set));
        }
        print!("{}", table(n, took.as_secs_f64(), &runs));
        all.insert(n, runs);
        // Every size so far, in case a long run is stopped.
        println!("{}", results_json(&all, &seeds));
    }
}

/// The endpoint count on a real table of kube-proxy 1.37.2 (`nft list table ip kube-proxy`,
/// `nft` 1.0.6, cut): a plain Service's map, the API server's lone DNAT, a session-affine
/// Service's endpoint chains (one counted, its service chain's jumps not), the hairpin rule
/// not; and the change probe's three forms.
#[test]
fn nftables_endpoints_are_counted_once_each() {
    let table = "\
table ip kube-proxy {
\tchain nat-postrouting {
\t\tct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin-connections masquerade fully-random
\t}
\tchain service-2QRHZV4L-default/kubernetes/tcp/https {
\t\tmeta l4proto tcp dnat to 10.0.2.2:39531
\t}
\tchain endpoint-WDGI77IV-ns0/svc3/tcp/__10.128.0.15/8080 {
\t\tupdate @affinity-WDGI77IV-ns0/svc3/tcp/__10.128.0.15/8080 { ip saddr }
\t\tmeta l4proto tcp dnat to 10.128.0.15:8080
\t}
\tchain service-JBT367TP-ns0/svc3/tcp/ {
\t\tip saddr @affinity-WDGI77IV-ns0/svc3/tcp/__10.128.0.15/8080 goto endpoint-WDGI77IV-ns0/svc3/tcp/__10.128.0.15/8080
\t\tnumgen random mod 1 vmap { 0 : goto endpoint-WDGI77IV-ns0/svc3/tcp/__10.128.0.15/8080 }
\t}
\tchain service-JXETZIMN-ns1/svc100/tcp/ {
\t\tmeta l4proto tcp dnat ip to numgen random mod 5 map { 0 : 10.128.1.244 . 8080, 1 : 10.128.1.245 . 8080, 2 : 10.128.1.246 . 8080, 3 : 10.128.1.247 . 8080, 4 : 10.200.0.5 . 8080 }
\t}
}
";
    assert_eq!(dnat_targets_of(table), 7);
    assert_eq!(
        dnat_targets_of(
            "meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 10.180.0.4 . 80 , 1 : 10.180.0.5 . 80 }"
        ),
        2
    );
    assert!(nft_shows(table, Ipv4Addr::new(10, 200, 0, 5)));
    assert!(nft_shows(table, Ipv4Addr::new(10, 128, 0, 15)));
    assert!(!nft_shows(table, Ipv4Addr::new(10, 200, 0, 50)));
    assert!(!nft_shows(table, Ipv4Addr::new(10, 128, 1, 24)));
}

/// The stored distribution: nearest-rank deciles, p99 and the slowest, beside the median and
/// p99 keys as before; null when no change was seen.
#[test]
fn the_change_percentiles_are_the_nearest_rank_deciles_p99_and_max() {
    let run = Run {
        latencies: (1..=100).rev().map(f64::from).collect(),
        ..Run::default()
    };
    let json = run.json();
    let p = &json["change_percentiles_ms"];
    for d in 1..=9 {
        assert_eq!(p[format!("p{}", d * 10)], json!(f64::from(d * 10)));
    }
    assert_eq!(p["p99"], json!(99.0));
    assert_eq!(p["max"], json!(100.0));
    assert_eq!(json["change_median_ms"], p["p50"]);
    assert_eq!(json["change_p99_ms"], p["p99"]);
    assert!(Run::default().json()["change_percentiles_ms"].is_null());
}
