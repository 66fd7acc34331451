//! The scale benchmark: the agent against the kernel's own tools on the state
//! S(N, E), inside the lab VM (`tests/bench.sh`, which runs
//! `cargo run -p lab -- run --machine pc -- target/release/examples/scale ...`).
//!
//! For each N it generates N Services (10% NodePort, 2% with an external IP, 1% session-affine,
//! `default/kubernetes` first) with E = 5 ready endpoints each, and measures, every repetition
//! in a fresh network namespace with `lo` up:
//!
//! - **raw**: the stock tools loading the very state the agent's plan holds: `ipset restore`,
//!   `ip -batch` (the `kube-ipvs0` link and its addresses), `iptables-restore --noflush`,
//!   `ipvsadm -R`; then their dump (`ipvsadm -Sn`, `ipset save`, `ip addr show`); and, as the
//!   alternative design, `ip -batch` of `route add local VIP/32 table local` lines;
//! - **agent** (a child process, for its peak RSS): a cold sync with the library
//!   (`Syncer::new(Kernel::connect(..)).sync(cluster, true)`), time to first service (a probe
//!   thread connecting to `10.96.0.1:443` from the node until a real pod behind it answers),
//!   one-endpoint changes, no-op full resyncs, the dump tools on the agent's state, peak RSS.
//!
//! `scale [--quick | --full] [--sizes 1000,10000] [--reps R] [--changes C[,C...]] [--route]`
//! (one count of changes per size, the last repeating; `--route`, implied by `--full`, adds a
//! cold sync with `--vip-binding=route` per size); the last line, `RESULTS-JSON {...}`, is what
//! `tests/bench.sh` merges into `bench/results.json`; the child mode is
//! `scale agent N CHANGES`; `scale snapshot N CHANGES` times a change's cluster snapshot
//! alone (see [`snapshot`]); `scale estimation N CHANGES` asks whether the kernel's rate
//! estimation makes the change p99 grow with N (see [`estimation`]); `scale pass N PASSES`
//! times periodic full syncs that keep the desired state against those that build it whole
//! (see [`pass`]); `scale passes N PASSES [log] [KEY=VALUE...]` traces the RSS of periodic passes against the
//! lab's kernel (see [`periodic_passes`]); `scale pure N CHANGES` runs on any host, without the lab, and
//! times the pure stages of a change alone (see [`pure`]). Timings vary under emulation: compare the ratios, not the seconds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube_proxy_ipvs_agent::dataplane::kernel::Kernel;
use kube_proxy_ipvs_agent::dataplane::{Applied, Dataplane, Error, Observation, RealServers};
use kube_proxy_ipvs_agent::model::desired::iptables::restore_input;
use kube_proxy_ipvs_agent::model::desired::{Host, LocalAddress, desired, sysctls};
use kube_proxy_ipvs_agent::model::kernel::rolling::{Part, READ_SHARE};
use kube_proxy_ipvs_agent::model::kernel::{KernelState, LINK_NAME, SetKind, VsKey};
use kube_proxy_ipvs_agent::model::plan::{Op, Plan, plan};
use kube_proxy_ipvs_agent::model::snapshot::changes::Changes;
use kube_proxy_ipvs_agent::model::snapshot::cluster::{
    Cluster, Endpoint, EndpointPort, EndpointSlice, Family, Node, Protocol, Service, ServicePort,
    ServiceRef, ServiceType, SliceRef, TrafficPolicy,
};
use kube_proxy_ipvs_agent::model::snapshot::config::{LocalDetector, ProxyConfig};
use kube_proxy_ipvs_agent::sync::Syncer;
use lab::guest::{Netns, sh};
use lab::net::{Pod, bridge};

/// The system allocator, counting the bytes live and their peak once [`HEAP_COUNTING`] is set
/// (first thing in the `passes` child): the lab runs no heap profiler, and RSS alone does not
/// tell memory held from memory freed but kept by the allocator.
struct Heap;

static HEAP_COUNTING: AtomicBool = AtomicBool::new(false);
static HEAP_LIVE: AtomicUsize = AtomicUsize::new(0);
static HEAP_PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; the counts are plain atomics.
unsafe impl std::alloc::GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if HEAP_COUNTING.load(Ordering::Relaxed) {
            heap_grew(layout.size(), 0);
        }
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        if HEAP_COUNTING.load(Ordering::Relaxed) {
            heap_grew(new_size, layout.size());
        }
        // SAFETY: `ptr` came from `alloc` with `layout`, as `GlobalAlloc::realloc` requires.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        if HEAP_COUNTING.load(Ordering::Relaxed) {
            HEAP_LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Heap = Heap;

/// Counts `new` bytes live in place of `old`, and the peak.
fn heap_grew(new: usize, old: usize) {
    let live = HEAP_LIVE.fetch_add(new, Ordering::Relaxed) + new;
    HEAP_LIVE.fetch_sub(old, Ordering::Relaxed);
    HEAP_PEAK.fetch_max(live, Ordering::Relaxed);
}

/// The bytes live now and their peak since the last call, in MiB (the peak starts again
/// from what is live).
fn heap_mib() -> (f64, f64) {
    let live = HEAP_LIVE.load(Ordering::Relaxed);
    let peak = HEAP_PEAK.swap(live, Ordering::Relaxed);
    let mib = |b: usize| b as f64 / 1048576.0;
    (mib(live), mib(peak))
}

/// Endpoints per Service.
const E: usize = 5;
/// The node's own address (on a dummy `eth0`) and the pod bridge's.
const NODE_IP: &str = "192.168.100.1";
const GATEWAY: &str = "10.244.0.1";
/// The `kubernetes` Service, probed for the time to first service.
const FIRST_VIP: &str = "10.96.0.1:443";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("pure") {
        let n = args[1].parse().expect("N");
        let changes = args[2].parse().expect("CHANGES");
        // `alone`: only the changed-Services path (for a profile of it).
        pure(n, changes, args.get(3).map(String::as_str) == Some("alone"));
        return;
    }
    if args.first().map(String::as_str) == Some("heap") {
        // `cold`: the cold sync alone (for a profile of its peak).
        heap(
            args[1].parse().expect("N"),
            args.get(2).map(String::as_str) == Some("cold"),
        );
        return;
    }
    if args.first().map(String::as_str) == Some("snapshot") {
        snapshot(
            args[1].parse().expect("N"),
            args[2].parse().expect("CHANGES"),
        );
        return;
    }
    if args.first().map(String::as_str) == Some("pass") {
        pass(
            args[1].parse().expect("N"),
            args[2].parse().expect("PASSES"),
        );
        return;
    }
    if args.first().map(String::as_str) == Some("estimation") {
        estimation(
            args[1].parse().expect("N"),
            args[2].parse().expect("CHANGES"),
        );
        return;
    }
    if args.first().map(String::as_str) == Some("cold") {
        // The agent child's cold sync alone, its RSS traced over time (where the lab's peak
        // falls; `log` adds the dataplane's debug logs on the same clock).
        lab::guest::require_guest();
        if args.get(2).map(String::as_str) == Some("log") {
            enable_logs();
        }
        let n = args[1].parse().expect("N");
        let a = agent_run_with(n, 0, &[("SCALE_COLD_ONLY", "1"), ("SCALE_RSS_TRACE", "1")]);
        println!(
            "cold N={n}: {:.2} s, peak RSS {:.1} MiB (at the start {:.1})",
            a.f("cold"),
            a.f("rss_cold") / 1048576.0,
            a.f("rss_base") / 1048576.0
        );
        return;
    }
    if args.first().map(String::as_str) == Some("passes") {
        // Periodic passes after the cold sync, as the sync loop makes them (the read apart,
        // then the full sync that takes it in), the RSS traced: the memory a pass adds.
        // `KEY=VALUE` arguments go to the agent child's environment (glibc's `MALLOC_*`).
        lab::guest::require_guest();
        if args[3..].iter().any(|a| a == "log") {
            enable_logs();
        }
        let n = args[1].parse().expect("N");
        let passes: &str = &args[2];
        let mut env = vec![("SCALE_PASSES", passes), ("SCALE_RSS_TRACE", "1")];
        env.extend(args[3..].iter().filter_map(|a| a.split_once('=')));
        let a = agent_run_with(n, 0, &env);
        println!(
            "passes N={n}: peak RSS after the cold sync {:.1} MiB, after {passes} passes {:.1} MiB",
            a.f("rss_cold") / 1048576.0,
            a.f("rss_passes") / 1048576.0
        );
        return;
    }
    if args.first().map(String::as_str) == Some("agent") {
        let n = args[1].parse().expect("N");
        let changes = args[2].parse().expect("CHANGES");
        agent_child(n, changes);
        return;
    }
    let mut sizes = vec![1000, 10000];
    let mut reps = 1;
    let mut changes = vec![200];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => {
                sizes = vec![300];
                changes = vec![20];
            }
            // Debug logs of the dataplane (group and worker timings) from the agent children.
            "--log" => enable_logs(),
            // Each size also syncs cold with the VIPs as local routes.
            "--route" => ROUTE.store(true, Ordering::Relaxed),
            "--full" => {
                sizes = vec![1000, 10000, 50000];
                ROUTE.store(true, Ordering::Relaxed);
                changes = vec![200];
            }
            "--sizes" => {
                sizes = it
                    .next()
                    .expect("--sizes N,N")
                    .split(',')
                    .map(|s| s.parse().expect("a size"))
                    .collect()
            }
            "--reps" => reps = it.next().expect("--reps R").parse().expect("R"),
            "--changes" => {
                changes = it
                    .next()
                    .expect("--changes C[,C...]")
                    .split(',')
                    .map(|s| s.parse().expect("a count"))
                    .collect()
            }
            other => panic!("unknown argument {other}"),
        }
    }
    lab::guest::require_guest();
    let kernel = lab::guest::kernel_release();
    eprintln!("bench: kernel {kernel}, sizes {sizes:?}, {reps} repetition(s), changes {changes:?}");
    // A throwaway round first: the first use of each tool loads kernel modules (set types,
    // xtables matches, IPVS schedulers), which must not count against whoever runs first.
    let warm = raw_inputs(50, &{
        let want = desired(&cluster(50), &config(), &host());
        plan(&want.state, &KernelState::default(), &[])
    });
    raw_run(&warm.dir);
    agent_run(50, 2);
    let mut rows = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        // One count per size, the last one repeating.
        let c = changes[i.min(changes.len() - 1)];
        rows.push(measure(n, reps, c));
        // The table so far after every size: a long run that is stopped keeps what it has.
        print_table(&kernel, &rows);
    }
}

// ---- the state ----

fn v4(base: [u8; 4], offset: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::from(base)) + offset))
}

fn endpoint(address: IpAddr) -> Endpoint {
    Endpoint {
        address,
        ready: true,
        serving: true,
        terminating: false,
        node_name: Some(kube_proxy_ipvs_agent::model::snapshot::cluster::intern(
            "node-b",
        )),
        zone: None,
        hints: None,
    }
}

/// S(N, 5). Service 0 is `default/kubernetes` on 10.96.0.1:443 with the five real pods
/// 10.244.0.2-6:6443 of the agent child; the others have ClusterIP 10.96.0.1 + i, port 80,
/// endpoints in 10.128.0.0/9 port 8080; every 10th is a NodePort, every 50th has an external
/// IP (in 172.16.0.0/12), every 100th is session-affine.
fn cluster(n: usize) -> Cluster {
    let mut c = Cluster {
        node: Some(Node {
            name: "node-a".into(),
            addresses: vec![NODE_IP.parse().unwrap()],
            pod_cidrs: vec!["10.244.0.0/24".parse().unwrap()],
            labels: BTreeMap::new(),
        }),
        ..Cluster::default()
    };
    for i in 0..n {
        let (id, port, target) = if i == 0 {
            (ServiceRef::new("default", "kubernetes"), 443, 6443)
        } else {
            (
                ServiceRef::new(format!("ns{}", i / 100), format!("svc{i}")),
                80,
                8080,
            )
        };
        let node_port = (i % 10 == 5).then(|| 30000 + (i / 10) as u16);
        let service = Service {
            id: id.clone(),
            kind: if node_port.is_some() {
                ServiceType::NodePort
            } else {
                ServiceType::ClusterIp
            },
            cluster_ips: vec![v4([10, 96, 0, 1], i as u32)],
            ports: vec![ServicePort {
                name: String::new(),
                protocol: Protocol::Tcp,
                port,
                node_port,
            }],
            external_ips: if i % 50 == 7 {
                vec![v4([172, 16, 0, 0], i as u32)]
            } else {
                vec![]
            },
            load_balancer_ips: vec![],
            session_affinity: (i % 100 == 3).then_some(Duration::from_secs(10800)),
            external_traffic_policy: TrafficPolicy::Cluster,
            internal_traffic_policy: TrafficPolicy::Cluster,
            health_check_node_port: None,
            load_balancer_source_ranges: vec![],
            scheduler: None,
        };
        let endpoints = (0..E)
            .map(|j| {
                endpoint(if i == 0 {
                    v4([10, 244, 0, 2], j as u32)
                } else {
                    v4([10, 128, 0, 0], (i * E + j) as u32)
                })
            })
            .collect();
        let slice = EndpointSlice {
            name: format!("{}-x", id.name).into(),
            service: id.clone(),
            family: Family::V4,
            ports: vec![EndpointPort {
                name: String::new(),
                protocol: Protocol::Tcp,
                port: target,
            }],
            endpoints,
            trigger_time: None,
        };
        // Keyed as the source keys them: by clones of the objects' own names.
        c.slices.insert(slice.id(), Arc::new(slice));
        c.services.insert(id, Arc::new(service));
    }
    c
}

fn config() -> ProxyConfig {
    ProxyConfig {
        node_name: "node-a".into(),
        local_detector: LocalDetector::ClusterCidr(vec!["10.244.0.0/16".parse().unwrap()]),
        ..ProxyConfig::default()
    }
}

/// The host as the agent will observe it in a bench namespace.
fn host() -> Host {
    Host {
        addresses: vec![
            LocalAddress {
                interface: "lo".into(),
                address: "127.0.0.1".parse().unwrap(),
            },
            LocalAddress {
                interface: "eth0".into(),
                address: NODE_IP.parse().unwrap(),
            },
            LocalAddress {
                interface: "cni0".into(),
                address: GATEWAY.parse().unwrap(),
            },
        ],
    }
}

/// The node's interfaces: `eth0` with the node address, the pod bridge `cni0`.
fn node_interfaces() {
    sh(&format!(
        "ip link add eth0 type dummy && ip addr add {NODE_IP}/24 dev eth0 && ip link set eth0 up"
    ));
    bridge(GATEWAY);
}

// ---- the stock tools' inputs, from the agent's own plan from an empty kernel ----

struct RawInputs {
    dir: PathBuf,
    services: usize,
    destinations: usize,
    addresses: usize,
    set_entries: usize,
}

fn raw_inputs(n: usize, p: &Plan) -> RawInputs {
    let dir = PathBuf::from(format!("/tmp/bench-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut ipvs, mut sets, mut addrs, mut routes, mut rules) = (
        String::new(),
        String::new(),
        format!("link add {LINK_NAME} type dummy\n"),
        format!("link add {LINK_NAME} type dummy\n"),
        String::new(),
    );
    let mut r = RawInputs {
        dir: dir.clone(),
        services: 0,
        destinations: 0,
        addresses: 0,
        set_entries: 0,
    };
    let proto = |p: Protocol| match p {
        Protocol::Tcp => "-t",
        Protocol::Udp => "-u",
        Protocol::Sctp => "--sctp-service",
    };
    for op in &p.ops {
        match op {
            Op::CreateSet(name) => {
                let kind = name.kind();
                if kind == SetKind::BitmapPort {
                    writeln!(sets, "create {name} bitmap:port range 0-65535").unwrap();
                } else {
                    writeln!(
                        sets,
                        "create {name} {} family inet hashsize 1024 maxelem 65536",
                        kind.as_str()
                    )
                    .unwrap();
                }
            }
            Op::AddEntries { set, entries } => {
                for e in entries.iter() {
                    writeln!(sets, "add {set} {e}").unwrap();
                    r.set_entries += 1;
                }
            }
            Op::AddAddress(ip) => {
                writeln!(addrs, "addr add {ip}/32 dev {LINK_NAME}").unwrap();
                writeln!(
                    routes,
                    "route add local {ip}/32 dev {LINK_NAME} table local"
                )
                .unwrap();
                r.addresses += 1;
            }
            Op::WriteRules {
                rules: rs,
                missing_jumps,
                ..
            } => rules.push_str(&restore_input(rs, missing_jumps)),
            Op::AddService { key, service } => {
                let vip = SocketAddr::new(key.address, key.port);
                write!(
                    ipvs,
                    "-A {} {vip} -s {}",
                    proto(key.protocol),
                    service.scheduler
                )
                .unwrap();
                if let Some(t) = service.persistence {
                    write!(ipvs, " -p {}", t.as_secs()).unwrap();
                }
                ipvs.push('\n');
                r.services += 1;
            }
            Op::AddDestination {
                key,
                destination,
                weight,
            } => {
                let vip = SocketAddr::new(key.address, key.port);
                writeln!(
                    ipvs,
                    "-a {} {vip} -r {destination} -m -w {weight}",
                    proto(key.protocol)
                )
                .unwrap();
                r.destinations += 1;
            }
            _ => {}
        }
    }
    for (file, text) in [
        ("ipvs", ipvs),
        ("sets", sets),
        ("addrs", addrs),
        ("routes", routes),
        ("rules", rules),
    ] {
        std::fs::write(dir.join(file), text).unwrap();
    }
    r
}

/// Runs `script` with its output discarded and returns how long it took; panics on failure.
fn timed(script: &str) -> f64 {
    let t = Instant::now();
    let out = Command::new("/bin/sh")
        .args(["-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run /bin/sh");
    let s = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "`{script}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    s
}

#[derive(Debug, Default, Clone)]
struct Raw {
    ipset: f64,
    ip: f64,
    iptables: f64,
    ipvsadm: f64,
    dump_ipvsadm: f64,
    dump_ipset: f64,
    dump_ip: f64,
    routes: f64,
}

impl Raw {
    fn load(&self) -> f64 {
        self.ipset + self.ip + self.iptables + self.ipvsadm
    }
    fn dump(&self) -> f64 {
        self.dump_ipvsadm + self.dump_ipset + self.dump_ip
    }
}

/// Runs `f` on a new thread in a fresh network namespace, then gives the kernel time to tear
/// the namespace down before the next measurement.
fn in_fresh_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let out = std::thread::spawn(move || {
        let _ns = Netns::fresh();
        f()
    })
    .join()
    .expect("measurement thread");
    std::thread::sleep(Duration::from_secs(2));
    out
}

fn raw_run(dir: &Path) -> Raw {
    let d = dir.display().to_string();
    let mut raw = in_fresh_netns(move || {
        node_interfaces();
        let mut r = Raw {
            ipset: timed(&format!("ipset restore < {d}/sets")),
            ip: timed(&format!("ip -batch {d}/addrs")),
            ..Raw::default()
        };
        r.iptables = timed(&format!("iptables-restore --noflush --wait < {d}/rules"));
        r.ipvsadm = timed(&format!("ipvsadm -R < {d}/ipvs"));
        r.dump_ipvsadm = timed("ipvsadm -Sn");
        r.dump_ipset = timed("ipset save");
        r.dump_ip = timed(&format!("ip addr show dev {LINK_NAME}"));
        // Empty the namespace synchronously, so its teardown does not run under the next
        // measurement.
        timed(&format!("ipvsadm -C && ip link del {LINK_NAME}"));
        r
    });
    let d = dir.display().to_string();
    raw.routes = in_fresh_netns(move || {
        let t = timed(&format!("ip -batch {d}/routes"));
        timed(&format!("ip link del {LINK_NAME}"));
        t
    });
    raw
}

// ---- the agent, in a child process ----

/// The real kernel, with the time of its last `apply` (the kernel side of a sync, without the
/// pure stages).
struct Timed {
    kernel: Kernel,
    last_apply: Duration,
}

impl Dataplane for Timed {
    async fn observe(&mut self) -> Result<Observation, Error> {
        self.kernel.observe().await
    }

    async fn observe_part(&mut self, part: &Part) -> Result<(Observation, BTreeSet<VsKey>), Error> {
        self.kernel.observe_part(part).await
    }

    type Read = <Kernel as Dataplane>::Read;

    fn read_apart(
        &mut self,
        part: Option<Part>,
    ) -> futures::future::BoxFuture<'static, Result<Self::Read, Error>> {
        self.kernel.read_apart(part)
    }

    async fn finish_read(
        &mut self,
        read: Self::Read,
    ) -> Result<(Observation, BTreeSet<VsKey>), Error> {
        self.kernel.finish_read(read).await
    }

    async fn observe_real_servers(
        &mut self,
        keys: &[VsKey],
    ) -> Result<Vec<(VsKey, Option<RealServers>)>, Error> {
        self.kernel.observe_real_servers(keys).await
    }

    async fn apply(&mut self, plan: &Plan) -> Result<Applied, Error> {
        let t = Instant::now();
        let r = self.kernel.apply(plan).await;
        self.last_apply = t.elapsed();
        r
    }

    async fn clean_conntrack(
        &mut self,
        filter: &kube_proxy_ipvs_agent::model::desired::conntrack::ConntrackFilter,
    ) -> Result<Vec<kube_proxy_ipvs_agent::dataplane::conntrack::Cleaned>, Error> {
        self.kernel.clean_conntrack(filter).await
    }
}

/// S(N, 5) synced cold into an in-memory kernel, with the runtime that ran the sync.
fn in_memory(
    n: usize,
) -> (
    tokio::runtime::Runtime,
    Cluster,
    Syncer<kube_proxy_ipvs_agent::dataplane::memory::Memory>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = cluster(n);
    let memory = kube_proxy_ipvs_agent::dataplane::memory::Memory {
        host: host(),
        ..Default::default()
    };
    let mut syncer = Syncer::new(memory, config());
    rt.block_on(syncer.sync(&cluster, true)).expect("cold");
    (rt, cluster, syncer)
}

/// `scale pure N CHANGES`, on any host: the pure stages of one endpoint change at N
/// Services, through the sync loop's path (`Syncer::sync_changed`, only the changed Service
/// recomputed and planned) and through a whole recomputation (`Syncer::sync`), against an
/// in-memory kernel. Prints the medians and their ratio.
fn pure(n: usize, changes: usize, alone_only: bool) {
    let t = Instant::now();
    let (rt, mut cluster, mut syncer) = in_memory(n);
    let cold = t.elapsed().as_secs_f64();
    let keys: Vec<SliceRef> = cluster.slices.keys().cloned().collect();
    let (mut alone, mut whole) = (Vec::new(), Vec::new());
    for c in 0..changes {
        let changed = change_endpoint(&mut cluster, &keys, c, [10, 64, 0, 0]);
        let t = Instant::now();
        let r = if alone_only || c % 2 == 0 {
            rt.block_on(syncer.sync_changed(&cluster, &changed))
        } else {
            syncer.build_next();
            rt.block_on(syncer.sync(&cluster, false))
        }
        .expect("change");
        let took = t.elapsed().as_secs_f64();
        assert!(r.applied.failed.is_empty());
        if c % 2 == 0 {
            alone.push(took)
        } else {
            whole.push(took)
        }
    }
    slowest("pure", n, &alone);
    if whole.is_empty() {
        whole.push(f64::NAN);
    }
    let (a, w) = (median(&mut alone), median(&mut whole));
    println!(
        "pure N={n}: cold {cold:.3} s; one change, changed Services only: median {:.3} ms, p99 {:.3} ms; whole recomputation: median {:.3} ms; ratio {:.4}",
        a * 1e3,
        p99(&mut alone) * 1e3,
        w * 1e3,
        a / w
    );
}

/// `scale pass N PASSES`, on any host: periodic full syncs at N Services, each after one
/// endpoint change, against an in-memory kernel, in turn keeping the desired state (brought
/// to the cluster by the changed Service) and building it whole (as every eleventh pass does,
/// and every pass did before). Prints the median of each and their ratio: what a change that
/// comes during a pass waits for.
fn pass(n: usize, passes: usize) {
    let (rt, mut cluster, mut syncer) = in_memory(n);
    let keys: Vec<SliceRef> = cluster.slices.keys().cloned().collect();
    let (mut kept, mut built) = (Vec::new(), Vec::new());
    for c in 0..passes {
        let changed = change_endpoint(&mut cluster, &keys, c, [10, 64, 0, 0]);
        if c % 2 == 1 {
            syncer.build_next();
        }
        let t = Instant::now();
        let r = rt
            .block_on(syncer.sync_with(&cluster, true, &changed))
            .expect("pass");
        let took = t.elapsed().as_secs_f64();
        assert!(r.applied.failed.is_empty() && r.warnings.is_empty());
        if c % 2 == 1 { &mut built } else { &mut kept }.push(took);
    }
    let (k, b) = (median(&mut kept), median(&mut built));
    println!(
        "pass N={n}: a periodic pass after one change (in-memory kernel, its read included): the state kept, median {:.2} ms; built whole, median {:.2} ms; ratio {:.3} ({passes} passes)",
        k * 1e3,
        b * 1e3,
        k / b
    );
}

/// Change `c` of a run: one endpoint of one slice (spread over the cluster, never the API
/// server's) moves to an address in `base`'s /16. Returns the change as the API source
/// records it from the event: the slice as it was.
fn change_endpoint(cluster: &mut Cluster, keys: &[SliceRef], c: usize, base: [u8; 4]) -> Changes {
    let k = &keys[1 + (c * 7919) % (keys.len() - 1).max(1)];
    let old = cluster.slices.get(k).expect("a slice of the run").clone();
    let mut slice = (*old).clone();
    slice.endpoints[c % E] = endpoint(v4(base, c as u32));
    let new = Arc::new(slice);
    cluster.slices.insert(k.clone(), new.clone());
    let mut changes = Changes::default();
    changes.slice(k, Some(&old), Some(&new));
    changes
}

/// Prints the three slowest of `times` (seconds, in the order of the changes) with their
/// index: a p99 over few changes is its slowest one, and which one it was tells why.
fn slowest(what: &str, n: usize, times: &[f64]) {
    let mut order: Vec<usize> = (0..times.len()).collect();
    order.sort_by(|&a, &b| times[b].total_cmp(&times[a]));
    let top: Vec<String> = order
        .iter()
        .take(3)
        .map(|&i| format!("#{i} {:.2} ms", times[i] * 1e3))
        .collect();
    eprintln!("bench: N={n}: {what}: slowest changes {}", top.join(", "));
}

/// `scale snapshot N CHANGES`, on any host: what the source pays per change for the cluster
/// snapshot itself, outside the sync: the next snapshot made from the last with one slice
/// changed, the change recorded ([`Changes`]), and the last snapshot dropped. Prints the
/// median and p99 of the three together.
fn snapshot(n: usize, changes: usize) {
    let mut last = cluster(n);
    let keys: Vec<SliceRef> = last.slices.keys().cloned().collect();
    let mut times = Vec::new();
    for c in 0..changes {
        let t = Instant::now();
        let mut next = last.clone();
        let changed = change_endpoint(&mut next, &keys, c, [10, 64, 0, 0]);
        assert_eq!(changed.services().len(), 1);
        drop(std::mem::replace(&mut last, next));
        times.push(t.elapsed().as_secs_f64());
    }
    println!(
        "snapshot N={n}: one change's snapshot (copy, compare, drop): median {:.3} ms, p99 {:.3} ms",
        median(&mut times) * 1e3,
        p99(&mut times) * 1e3
    );
}

/// `scale heap N [cold]`, on any host, for a heap profiler (`heaptrack scale heap 10000`):
/// the sync loop's lifetime at N Services against a kernel that keeps nothing (as the real
/// one, whose state is not in the agent's memory): a cold sync, then (without `cold`) 20
/// endpoint changes synced alone. Prints peak RSS after each.
fn heap(n: usize, cold_only: bool) {
    /// A kernel that takes every operation and holds nothing.
    struct Sink(Host);
    impl Dataplane for Sink {
        async fn observe(&mut self) -> Result<Observation, Error> {
            Ok(Observation {
                state: KernelState::default(),
                host: self.0.clone(),
                traffic: Default::default(),
            })
        }
        async fn observe_part(
            &mut self,
            _: &Part,
        ) -> Result<(Observation, BTreeSet<VsKey>), Error> {
            Ok((self.observe().await?, BTreeSet::new()))
        }
        type Read = ();
        fn read_apart(
            &mut self,
            _: Option<Part>,
        ) -> futures::future::BoxFuture<'static, Result<(), Error>> {
            Box::pin(async { Ok(()) })
        }
        async fn finish_read(&mut self, (): ()) -> Result<(Observation, BTreeSet<VsKey>), Error> {
            Ok((self.observe().await?, BTreeSet::new()))
        }
        /// Nothing read: the removed real servers drain, their counts unknown.
        async fn observe_real_servers(
            &mut self,
            _: &[VsKey],
        ) -> Result<Vec<(VsKey, Option<RealServers>)>, Error> {
            Ok(Vec::new())
        }
        async fn apply(&mut self, plan: &Plan) -> Result<Applied, Error> {
            Ok(Applied {
                done: plan.ops.len(),
                ..Applied::default()
            })
        }
        async fn clean_conntrack(
            &mut self,
            _: &kube_proxy_ipvs_agent::model::desired::conntrack::ConntrackFilter,
        ) -> Result<Vec<kube_proxy_ipvs_agent::dataplane::conntrack::Cleaned>, Error> {
            Ok(Vec::new())
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mib = |b: u64| b as f64 / 1048576.0;
    let base = peak_rss();
    let mut cluster = cluster(n);
    let after_cluster = peak_rss();
    let mut syncer = Syncer::new(Sink(host()), config());
    // As the agent's own syncer.
    syncer.keep_plans(false);
    let report = rt.block_on(syncer.sync(&cluster, true)).expect("cold");
    drop(report);
    let after_cold = peak_rss();
    let mut line = format!(
        "heap N={n}: peak RSS, MiB: start {:.1}, cluster built {:.1}, cold sync {:.1}",
        mib(base),
        mib(after_cluster),
        mib(after_cold)
    );
    if !cold_only {
        let keys: Vec<SliceRef> = cluster.slices.keys().cloned().collect();
        for c in 0..20 {
            let changed = change_endpoint(&mut cluster, &keys, c, [10, 64, 0, 0]);
            rt.block_on(syncer.sync_changed(&cluster, &changed))
                .expect("change");
        }
        write!(line, ", 20 changes {:.1}", mib(peak_rss())).unwrap();
    }
    println!("{line}");
}

/// Prints this process's RSS (its anonymous part, and the heap when counted) to stderr each
/// time one moved by a MiB or more (looked at every 5 ms), with the uptime the debug logs carry (`SCALE_LOG`): which step of a
/// sync the peak falls in, where no heap profiler runs (the lab).
fn rss_trace() {
    let t0 = Instant::now();
    std::thread::spawn(move || {
        let (mut last, mut last_heap) = (0u64, 0usize);
        loop {
            let (rss, anon) = (status_kib("VmRSS:"), status_kib("RssAnon:"));
            // The heap, when counted (the `passes` child).
            let heap = HEAP_LIVE.load(Ordering::Relaxed);
            if rss.abs_diff(last) >= 1024 || heap.abs_diff(last_heap) >= 1 << 20 {
                eprintln!(
                    "rss: {:.3}s {:.1} MiB (anonymous {:.1}, heap {:.1})",
                    t0.elapsed().as_secs_f64(),
                    rss as f64 / 1024.0,
                    anon as f64 / 1024.0,
                    heap as f64 / 1048576.0
                );
                (last, last_heap) = (rss, heap);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
}

/// Reads `VmHWM` (peak RSS) of this process, in bytes.
fn peak_rss() -> u64 {
    status_kib("VmHWM:") * 1024
}

/// One `kB` field of this process's `/proc/self/status` (`key` with its colon); 0 if absent.
fn status_kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn p99(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() * 99).div_ceil(100)).saturating_sub(1)]
}

/// Tries `FIRST_VIP` from the node until a pod answers; returns the first answer's time.
fn probe(stop: Arc<AtomicBool>, t0: Instant) -> Option<f64> {
    let vip: SocketAddr = FIRST_VIP.parse().unwrap();
    let mut last = String::new();
    while !stop.load(Ordering::Relaxed) {
        let attempt = TcpStream::connect_timeout(&vip, Duration::from_millis(50));
        if LOG.load(Ordering::Relaxed) {
            let now = match &attempt {
                Ok(_) => "connected".to_string(),
                Err(e) => e.kind().to_string(),
            };
            if now != last {
                eprintln!("probe: {:.3}s {now}", t0.elapsed().as_secs_f64());
                last = now;
            }
        }
        if let Ok(mut s) = attempt {
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let mut line = String::new();
            if BufReader::new(&mut s).read_line(&mut line).is_ok() && line.starts_with("api") {
                return Some(t0.elapsed().as_secs_f64());
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

/// Asks the agent children for debug logs (they read `SCALE_LOG`).
fn enable_logs() {
    LOG.store(true, Ordering::Relaxed);
}

static LOG: AtomicBool = AtomicBool::new(false);
/// Whether each size also measures the cold sync with `--vip-binding=route`.
static ROUTE: AtomicBool = AtomicBool::new(false);

/// One agent run in a fresh namespace; prints one `RESULT key=value...` line.
fn agent_child(n: usize, changes: usize) {
    // As the agent's own main does, before any thread.
    kube_proxy_ipvs_agent::allocator::configure();
    if std::env::var_os("SCALE_PASSES").is_some() {
        HEAP_COUNTING.store(true, Ordering::Relaxed);
    }
    if std::env::var_os("SCALE_LOG").is_some() {
        LOG.store(true, Ordering::Relaxed);
        tracing_subscriber::fmt()
            .with_env_filter("kube_proxy_ipvs_agent=debug")
            .with_writer(std::io::stderr)
            .with_timer(tracing_subscriber::fmt::time::uptime())
            .init();
    }
    if std::env::var_os("SCALE_RSS_TRACE").is_some() {
        rss_trace();
    }
    let _ns = Netns::fresh();
    node_interfaces();
    let _pods: Vec<Pod> = (0..E)
        .map(|j| {
            Pod::start(
                &format!("api{j}"),
                &format!("10.244.0.{}", j + 2),
                GATEWAY,
                &[6443],
            )
        })
        .collect();
    let mut cluster = cluster(n);
    let config = config();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut out = String::from("RESULT");
    let mut put = |k: &str, v: String| write!(out, " {k}={v}").unwrap();
    let rss_before = peak_rss();
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let prober = {
        let stop = stop.clone();
        std::thread::spawn(move || probe(stop, t0))
    };
    let mut syncer = rt.block_on(async {
        let kernel = Kernel::connect(
            config.families.clone(),
            sysctls(&config).into_keys().collect(),
        )
        .await
        .expect("connect to the kernel");
        let mut kernel = kernel;
        if std::env::var_os("SCALE_ROUTE").is_some() {
            kernel
                .set_vip_binding(kube_proxy_ipvs_agent::model::snapshot::config::VipBinding::Route);
        }
        let mut syncer = Syncer::new(
            Timed {
                kernel,
                last_apply: Duration::ZERO,
            },
            config.clone(),
        );
        // As the agent's own syncer.
        syncer.keep_plans(false);
        syncer
    });
    let report = rt.block_on(syncer.sync(&cluster, true)).expect("cold sync");
    let cold = t0.elapsed().as_secs_f64();
    assert!(
        report.applied.failed.is_empty(),
        "cold sync failures: {:?}",
        &report.applied.failed[..report.applied.failed.len().min(5)]
    );
    // The first service answers at the latest a moment after the sync.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !prober.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let first = prober.join().unwrap();
    put("cold", format!("{cold:.4}"));
    put("first", first.map_or("none".into(), |f| format!("{f:.4}")));
    put("cold_ops", report.ops().to_string());
    put("cold_msgs", report.applied.messages.to_string());
    put("rss_cold", peak_rss().to_string());
    put("rss_base", rss_before.to_string());
    drop(report);
    if std::env::var_os("SCALE_COLD_ONLY").is_some() {
        drop(syncer);
        drop(rt);
        timed(&format!("ipvsadm -C && ip link del {LINK_NAME}"));
        println!("{out}");
        return;
    }

    // One endpoint change at a time, with the full state programmed.
    let keys: Vec<SliceRef> = cluster.slices.keys().cloned().collect();
    if let Some(passes) = std::env::var("SCALE_PASSES")
        .ok()
        .and_then(|p| p.parse().ok())
    {
        periodic_passes(&rt, &mut syncer, &mut cluster, &keys, passes);
        put("rss_passes", peak_rss().to_string());
        drop(syncer);
        drop(rt);
        timed(&format!("ipvsadm -C && ip link del {LINK_NAME}"));
        println!("{out}");
        return;
    }
    if std::env::var_os("SCALE_ESTIMATION_AB").is_some() {
        estimation_phases(&rt, &mut syncer, &mut cluster, &keys, changes, &mut put);
        drop(syncer);
        drop(rt);
        timed(&format!("ipvsadm -C && ip link del {LINK_NAME}"));
        println!("{out}");
        return;
    }
    let (mut times, mut msgs, mut pure, mut kernel) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let host = host();
    for c in 0..changes {
        let changed = change_endpoint(&mut cluster, &keys, c, [10, 64, 0, 0]);
        // As the sync loop does: the Services that changed since the last sync are known.
        let t = Instant::now();
        let r = rt
            .block_on(syncer.sync_changed(&cluster, &changed))
            .expect("change");
        times.push(t.elapsed().as_secs_f64());
        kernel.push(syncer.dataplane().last_apply.as_secs_f64());
        assert!(r.applied.failed.is_empty(), "{:?}", r.applied.failed);
        msgs.push(r.applied.messages as f64);
    }
    slowest("agent", n, &times);
    // The pure stages of a whole recomputation (the desired state, then the plan against the
    // state before the change), timed apart for one change in ten: among the timed changes,
    // the two whole states each made and freed (hundreds of MiB at N = 50000) slowed the
    // change after them, which made the change p99 there.
    for c in (0..changes).step_by(10) {
        let prev = desired(&cluster, &config, &host);
        let mut next = cluster.clone();
        change_endpoint(&mut next, &keys, c, [10, 96, 0, 0]);
        let t = Instant::now();
        let want = desired(&next, &config, &host);
        let _ = plan(&want.state, &prev.state, &[]);
        pure.push(t.elapsed().as_secs_f64());
    }
    put("chg_med", format!("{:.5}", median(&mut times)));
    put("chg_p99", format!("{:.5}", p99(&mut times)));
    put("chg_msgs", format!("{}", median(&mut msgs)));
    put("chg_pure_med", format!("{:.5}", median(&mut pure)));
    put("chg_kernel_med", format!("{:.5}", median(&mut kernel)));
    put("chg_kernel_p99", format!("{:.5}", p99(&mut kernel)));

    // No-op full resyncs (the kernel read back, nothing to change).
    // One full sync first: it deletes the real servers the changes left draining (weight 0,
    // no connections), so the timed ones change nothing.
    // As the loop's periodic pass: nothing changed since the last sync.
    let nothing = Changes::default();
    let _ = rt
        .block_on(syncer.sync_with(&cluster, true, &nothing))
        .expect("resync");
    // The whole read, as the dump tools read everything.
    syncer.set_read_share(usize::MAX);
    let mut noop = Vec::new();
    let mut noop_ops = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let r = rt
            .block_on(syncer.sync_with(&cluster, true, &nothing))
            .expect("resync");
        noop.push(t.elapsed().as_secs_f64());
        if r.ops() > 0 {
            eprintln!("bench: a no-op resync planned {:?}", r.op_counts);
        }
        noop_ops = noop_ops.max(r.ops());
    }
    put("noop_ops", noop_ops.to_string());
    put("noop", format!("{:.4}", median(&mut noop)));
    // The periodic pass as the loop makes it: the real servers of one share.
    syncer.set_read_share(READ_SHARE);
    let mut share = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        rt.block_on(syncer.sync_with(&cluster, true, &nothing))
            .expect("resync");
        share.push(t.elapsed().as_secs_f64());
    }
    let share = median(&mut share);
    eprintln!("bench: N={n}: periodic pass (one share of the real servers) median {share:.4} s");
    put("noop_share", format!("{share:.4}"));
    put("dump_ipvsadm", format!("{:.4}", timed("ipvsadm -Sn")));
    put("dump_ipset", format!("{:.4}", timed("ipset save")));
    put(
        "dump_ip",
        format!("{:.4}", timed(&format!("ip addr show dev {LINK_NAME}"))),
    );
    put("rss_peak", peak_rss().to_string());
    drop(syncer);
    drop(rt);
    timed(&format!("ipvsadm -C && ip link del {LINK_NAME}"));
    println!("{out}");
}

/// `passes` periodic passes as the sync loop makes them, each after one endpoint change: the
/// read of one share runs apart on the runtime, then the full sync takes it in. Prints the
/// heap of the IPVS service listing alone, then each pass's time, its heap (live and peak)
/// after the read and after the sync, and the RSS and its peak (the beside bench's peak comes
/// from these passes). `SCALE_TRIM=1` returns free memory to the kernel after each pass
/// (glibc's `malloc_trim`): a diagnosis, which lowers the RSS between passes, not the peak.
fn periodic_passes(
    rt: &tokio::runtime::Runtime,
    syncer: &mut Syncer<Timed>,
    cluster: &mut Cluster,
    keys: &[SliceRef],
    passes: usize,
) {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let (live, _) = heap_mib();
    eprintln!("after the cold sync: heap {live:.1} MiB");
    // The IPVS listing alone, keeping a key per service: what the dumps cost beside it.
    let listed = rt.block_on(async {
        let ipvs = ipvs_netlink::connect().await.expect("connect to IPVS");
        ipvs.services()
            .list_consistent_with(8, |s| s.key)
            .await
            .expect("list")
    });
    let (with, peak) = heap_mib();
    eprintln!(
        "the IPVS listing alone: {} services in {} dumps, keys only; heap {with:.1} MiB (peak {peak:.1})",
        listed.services.len(),
        listed.dumps
    );
    drop(listed);
    for p in 0..passes {
        let changed = change_endpoint(cluster, keys, p, [10, 64, 0, 0]);
        rt.block_on(syncer.sync_changed(cluster, &changed))
            .expect("change");
        let (before, _) = heap_mib();
        let t = Instant::now();
        rt.block_on(async {
            assert!(syncer.start_read(), "a read apart");
            syncer.read_end().await;
        });
        let (read, read_peak) = heap_mib();
        let r = rt
            .block_on(syncer.sync_with(cluster, true, &Changes::default()))
            .expect("pass");
        assert!(r.applied.failed.is_empty(), "{:?}", r.applied.failed);
        drop(r);
        if std::env::var_os("SCALE_TRIM").is_some() {
            // SAFETY: glibc's malloc_trim takes a plain integer and touches no memory of ours.
            unsafe { libc::malloc_trim(0) };
        }
        let (after, sync_peak) = heap_mib();
        eprintln!(
            "pass {p}: {:.2} s; heap, MiB: {before:.1} before, the read apart {read:.1} (peak {read_peak:.1}), the sync {after:.1} (peak {sync_peak:.1}); RSS {:.1} MiB, peak {:.1}",
            t.elapsed().as_secs_f64(),
            mib(status_kib("VmRSS:")),
            mib(status_kib("VmHWM:"))
        );
    }
}

#[derive(Debug, Default, Clone)]
struct Agent(BTreeMap<String, String>);

impl Agent {
    fn f(&self, k: &str) -> f64 {
        self.0
            .get(k)
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    }
}

/// `scale estimation N CHANGES`: whether the kernel's rate estimation is what makes the
/// change p99 grow with N. One agent child syncs S(N, 5) cold (VIPs as routes, for speed) and
/// makes CHANGES endpoint changes three times: with the estimation on, with it off
/// (`net.ipv4.vs.run_estimation = 0` in its namespace) and on again. Kernel 6.1 estimates
/// every virtual and real server's rates in one timer every 2 s, a walk of all of them in
/// softirq holding the lock that adding a real server takes (6.2 moved it to kthreads); the
/// agent itself never turns estimation off, since `ipvsadm --rate` reads it.
fn estimation(n: usize, changes: usize) {
    lab::guest::require_guest();
    eprintln!(
        "bench: kernel {}, N = {n}, {changes} changes per phase",
        lab::guest::kernel_release()
    );
    let a = agent_run_with(
        n,
        changes,
        &[("SCALE_ROUTE", "1"), ("SCALE_ESTIMATION_AB", "1")],
    );
    let f = |k: &str| a.f(k) * 1e3;
    println!(
        "N={n}: change median / p99, ms (kernel apply median / p99): estimation on {:.2} / {:.2} ({:.2} / {:.2}), off {:.2} / {:.2} ({:.2} / {:.2}), on again {:.2} / {:.2} ({:.2} / {:.2})",
        f("on_med"),
        f("on_p99"),
        f("on_kernel_med"),
        f("on_kernel_p99"),
        f("off_med"),
        f("off_p99"),
        f("off_kernel_med"),
        f("off_kernel_p99"),
        f("again_med"),
        f("again_p99"),
        f("again_kernel_med"),
        f("again_kernel_p99"),
    );
}

/// The three phases of [`estimation`], in the agent child after its cold sync.
fn estimation_phases(
    rt: &tokio::runtime::Runtime,
    syncer: &mut Syncer<Timed>,
    cluster: &mut Cluster,
    keys: &[SliceRef],
    changes: usize,
    put: &mut impl FnMut(&str, String),
) {
    let set = |on: bool| {
        std::fs::write(
            "/proc/sys/net/ipv4/vs/run_estimation",
            if on { "1" } else { "0" },
        )
        .expect("net.ipv4.vs.run_estimation")
    };
    let mut c = 0;
    for (phase, on) in [("on", true), ("off", false), ("again", true)] {
        set(on);
        let (mut times, mut kernel) = (Vec::new(), Vec::new());
        for _ in 0..changes {
            let changed = change_endpoint(cluster, keys, c, [10, 64, 0, 0]);
            let t = Instant::now();
            let r = rt
                .block_on(syncer.sync_changed(cluster, &changed))
                .expect("change");
            times.push(t.elapsed().as_secs_f64());
            kernel.push(syncer.dataplane().last_apply.as_secs_f64());
            assert!(r.applied.failed.is_empty(), "{:?}", r.applied.failed);
            c += 1;
        }
        put(
            &format!("{phase}_med"),
            format!("{:.5}", median(&mut times)),
        );
        put(&format!("{phase}_p99"), format!("{:.5}", p99(&mut times)));
        put(
            &format!("{phase}_kernel_med"),
            format!("{:.5}", median(&mut kernel)),
        );
        put(
            &format!("{phase}_kernel_p99"),
            format!("{:.5}", p99(&mut kernel)),
        );
    }
}

fn agent_run(n: usize, changes: usize) -> Agent {
    agent_run_with(n, changes, &[])
}

/// The cold sync alone with `--vip-binding=route` (the VIPs as local routes).
fn agent_run_route(n: usize) -> Agent {
    agent_run_with(n, 0, &[("SCALE_ROUTE", "1"), ("SCALE_COLD_ONLY", "1")])
}

fn agent_run_with(n: usize, changes: usize, env: &[(&str, &str)]) -> Agent {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.envs(env.iter().copied());
    if LOG.load(Ordering::Relaxed) {
        cmd.env("SCALE_LOG", "1");
    }
    let mut child = cmd
        .args(["agent", &n.to_string(), &changes.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the agent child");
    let mut text = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "agent child failed: {status}\n{text}");
    std::thread::sleep(Duration::from_secs(2));
    let line = text
        .lines()
        .find(|l| l.starts_with("RESULT"))
        .expect("a RESULT line");
    Agent(
        line.split_whitespace()
            .skip(1)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

// ---- one size ----

struct Row {
    n: usize,
    inputs: RawInputs,
    desired_s: f64,
    plan_s: f64,
    raw: Raw,
    agent: Agent,
    /// The cold sync with `--vip-binding=route`, when asked for (`--route`).
    route: Option<Agent>,
}

fn measure(n: usize, reps: usize, changes: usize) -> Row {
    let c = cluster(n);
    let cfg = config();
    let t = Instant::now();
    let want = desired(&c, &cfg, &host());
    let desired_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let p = plan(&want.state, &KernelState::default(), &[]);
    let plan_s = t.elapsed().as_secs_f64();
    for w in want.conflicts.iter().chain(&p.warnings) {
        eprintln!("bench: warning: {w}");
    }
    let inputs = raw_inputs(n, &p);
    drop((c, want, p));
    eprintln!(
        "bench: N={n}: {} virtual servers, {} destinations, {} addresses, {} set entries",
        inputs.services, inputs.destinations, inputs.addresses, inputs.set_entries
    );
    let mut raws = Vec::new();
    let mut agents = Vec::new();
    for rep in 0..reps {
        let r = raw_run(&inputs.dir);
        eprintln!("bench: N={n} rep {rep}: raw {r:?}");
        raws.push(r);
        let a = agent_run(n, changes);
        eprintln!("bench: N={n} rep {rep}: agent {:?}", a.0);
        agents.push(a);
    }
    let route = ROUTE.load(Ordering::Relaxed).then(|| {
        let a = agent_run_route(n);
        eprintln!("bench: N={n}: agent, --vip-binding=route {:?}", a.0);
        a
    });
    // The repetition with the median cold sync stands for the size.
    let mut order: Vec<usize> = (0..reps).collect();
    order.sort_by(|&a, &b| agents[a].f("cold").total_cmp(&agents[b].f("cold")));
    let mid = order[reps / 2];
    let mut raw_order: Vec<usize> = (0..reps).collect();
    raw_order.sort_by(|&a, &b| raws[a].load().total_cmp(&raws[b].load()));
    Row {
        n,
        inputs,
        desired_s,
        plan_s,
        raw: raws[raw_order[reps / 2]].clone(),
        agent: agents[mid].clone(),
        route,
    }
}

fn print_table(kernel: &str, rows: &[Row]) {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nkernel {kernel}; times in seconds (median repetition)\n"
    );
    let _ = writeln!(
        t,
        "| N | VS / dests / addrs / set entries | T_raw (ipset + ip + iptables + ipvsadm) | T_agent cold | ratio | desired + plan (pure) | first service | share | change med / p99 (ms) | a whole recomputation's pure stages / the change's kernel apply, med (ms) | kernel apply p99 (ms) | no-op resync | T_dump (ipvsadm -Sn + ipset save + ip addr) | ratio | peak RSS (MiB) | bytes/Service | msgs cold / change | ip -batch addr vs route local |"
    );
    let _ = writeln!(t, "|{}", "---|".repeat(18));
    for r in rows {
        let a = &r.agent;
        let rss = a.f("rss_cold");
        let first = a.f("first");
        let _ = writeln!(
            t,
            "| {} | {} / {} / {} / {} | {:.2} ({:.2} + {:.2} + {:.2} + {:.2}) | {:.2} | {:.2} | {:.2} + {:.2} | {:.2} | {:.0}% | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} | {:.2} | {:.2} ({:.2} + {:.2} + {:.2}) | {:.2} | {:.1} | {:.0} | {} / {} | {:.2} vs {:.2} |",
            r.n,
            r.inputs.services,
            r.inputs.destinations,
            r.inputs.addresses,
            r.inputs.set_entries,
            r.raw.load(),
            r.raw.ipset,
            r.raw.ip,
            r.raw.iptables,
            r.raw.ipvsadm,
            a.f("cold"),
            a.f("cold") / r.raw.load(),
            r.desired_s,
            r.plan_s,
            first,
            100.0 * first / a.f("cold"),
            1e3 * a.f("chg_med"),
            1e3 * a.f("chg_p99"),
            1e3 * a.f("chg_pure_med"),
            1e3 * a.f("chg_kernel_med"),
            1e3 * a.f("chg_kernel_p99"),
            a.f("noop"),
            a.f("dump_ipvsadm") + a.f("dump_ipset") + a.f("dump_ip"),
            a.f("dump_ipvsadm"),
            a.f("dump_ipset"),
            a.f("dump_ip"),
            a.f("noop") / (a.f("dump_ipvsadm") + a.f("dump_ipset") + a.f("dump_ip")),
            rss / 1048576.0,
            rss / r.n as f64,
            a.0.get("cold_msgs").map_or("?", String::as_str),
            a.0.get("chg_msgs").map_or("?", String::as_str),
            r.raw.ip,
            r.raw.routes,
        );
    }
    if let (Some(lo), Some(hi)) = (rows.first(), rows.last())
        && rows.len() > 1
    {
        let _ = writeln!(
            t,
            "\nchange p99 at N={} / N={}: {:.2} (kernel apply alone: {:.2}); marginal RSS ({} -> {}): {:.0} bytes/Service; raw dump at N={} in the raw namespace: {:.2} s",
            hi.n,
            lo.n,
            hi.agent.f("chg_p99") / lo.agent.f("chg_p99"),
            hi.agent.f("chg_kernel_p99") / lo.agent.f("chg_kernel_p99"),
            lo.n,
            hi.n,
            (hi.agent.f("rss_cold") - lo.agent.f("rss_cold")) / (hi.n - lo.n) as f64,
            hi.n,
            hi.raw.dump(),
        );
    }
    for r in rows {
        if let Some(route) = &r.route {
            let _ = writeln!(
                t,
                "N={}: cold sync with --vip-binding=route {:.2} s, T_raw {:.2} s: ratio {:.2} (with addresses: {:.2}); peak RSS {:.1} MiB",
                r.n,
                route.f("cold"),
                r.raw.load(),
                route.f("cold") / r.raw.load(),
                r.agent.f("cold") / r.raw.load(),
                route.f("rss_cold") / 1048576.0
            );
        }
    }
    let _ = writeln!(t, "{}", results_json(rows));
    print!("{t}");
    let _ = std::io::stdout().flush();
}

/// The line `tests/bench.sh` merges into `bench/results.json`: the keys (null when
/// this run did not measure them) and the raw figures of each size.
fn results_json(rows: &[Row]) -> String {
    let at = |n: usize| rows.iter().find(|r| r.n == n);
    let num = |v: Option<f64>| {
        v.filter(|v| v.is_finite())
            .map_or("null".to_string(), |v| format!("{v:.4}"))
    };
    let dump = |a: &Agent| a.f("dump_ipvsadm") + a.f("dump_ipset") + a.f("dump_ip");
    let mut o = String::from("RESULTS-JSON {");
    let _ = write!(
        o,
        "\"cold_sync_ratio_10k\": {}, \"first_service_share_10k\": {}, \"first_service_raw_ratio_10k\": {}, \"change_p99_ratio_50k_1k\": {}, \"noop_resync_ratio\": {}, \"rss_mib_10k\": {}, \"rss_mib_50k\": {}, \"cold_sync_ratio_50k_route\": {}, \"sizes\": {{",
        num(at(10000).map(|r| r.agent.f("cold") / r.raw.load())),
        num(at(10000).map(|r| r.agent.f("first") / r.agent.f("cold"))),
        num(at(10000).map(|r| r.agent.f("first") / r.raw.load())),
        num(at(50000)
            .zip(at(1000))
            .map(|(hi, lo)| hi.agent.f("chg_p99") / lo.agent.f("chg_p99"))),
        num(rows
            .iter()
            .map(|r| r.agent.f("noop") / dump(&r.agent))
            .reduce(f64::max)),
        num(at(10000).map(|r| r.agent.f("rss_cold") / 1048576.0)),
        num(at(50000).map(|r| r.agent.f("rss_cold") / 1048576.0)),
        num(at(50000).and_then(|r| r.route.as_ref().map(|a| a.f("cold") / r.raw.load()))),
    );
    for (i, r) in rows.iter().enumerate() {
        let a = &r.agent;
        let _ = write!(
            o,
            "{}\"{}\": {{\"t_raw_s\": {}, \"t_agent_cold_s\": {}, \"first_service_s\": {}, \"change_median_ms\": {}, \"change_p99_ms\": {}, \"noop_resync_s\": {}, \"t_dump_s\": {}, \"rss_cold_mib\": {}, \"rss_peak_mib\": {}, \"t_agent_cold_route_s\": {}}}",
            if i == 0 { "" } else { ", " },
            r.n,
            num(Some(r.raw.load())),
            num(Some(a.f("cold"))),
            num(Some(a.f("first"))),
            num(Some(1e3 * a.f("chg_med"))),
            num(Some(1e3 * a.f("chg_p99"))),
            num(Some(a.f("noop"))),
            num(Some(dump(a))),
            num(Some(a.f("rss_cold") / 1048576.0)),
            num(Some(a.f("rss_peak") / 1048576.0)),
            num(r.route.as_ref().map(|a| a.f("cold"))),
        );
    }
    o.push_str("}}");
    o
}
