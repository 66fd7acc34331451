//! Reliability: API server faults. The real agent binary watches the fake API server over
//! HTTP (`--master`) while the server goes away for minutes, answers `410 Gone`, cuts its
//! watches, fails lists midway and sends a burst of 10,000 events. Throughout, a sampler reads
//! `ipvsadm -Sn` every 50 ms and a prober connects to the Services from outside the node: no
//! virtual server may disappear or lose its real servers because a watch restarted or a list
//! failed, and the agent converges once the server is back.
//!
//! Wall time in the lab VM (TCG, these 4 tests at a time): the outage test lasts the outage
//! (300 s; `RELIABILITY_OUTAGE_SECS` shortens it) plus about a minute; the others 1 to 4
//! minutes each (the burst is the longest: about 75 s to send, 130 s to converge).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lab::guest::sh;
use lab::net::ask_tcp;
use lab::report::Row;
use serde_json::Value;

use crate::fake_apiserver::objects::{node as node_object, service, slice};
use crate::fake_apiserver::{Outage, Resource};
use crate::node::{
    AGENT, ApiServer, NODE_IP, Node, cleanup, http_get, kernel_state, once_from_api,
};

/// The port of every test Service, and of its endpoints.
const PORT: u16 = 8080;

/// How many VIPs the prober connects to per round.
const PROBES: usize = 8;

/// One test Service and its endpoints (pod indexes), as the server holds them.
#[derive(Debug, Clone)]
struct Svc {
    name: String,
    ip: String,
    pods: Vec<usize>,
}

impl Svc {
    /// Service `s<i>` on 10.98.x.y.
    fn new(i: usize, pods: Vec<usize>) -> Svc {
        Svc {
            name: format!("s{i}"),
            ip: format!("10.98.{}.{}", i / 250, i % 250 + 1),
            pods,
        }
    }

    fn vip(&self) -> SocketAddr {
        format!("{}:{PORT}", self.ip).parse().unwrap()
    }

    /// The `ipvsadm -Sn` key of its virtual server.
    fn key(&self) -> String {
        format!("-t {}", self.vip())
    }

    /// Its real servers, as `ipvsadm -Sn` prints them.
    fn reals(&self) -> BTreeSet<String> {
        self.pods
            .iter()
            .map(|p| format!("{}:{PORT}", pod_ip(*p)))
            .collect()
    }

    fn service(&self) -> Value {
        service(&self.name, &self.ip, &[PORT])
    }

    fn slice(&self) -> Value {
        let ips: Vec<String> = self.pods.iter().map(|p| pod_ip(*p)).collect();
        let endpoints: Vec<(&str, &str)> = ips.iter().map(|ip| (ip.as_str(), "node-a")).collect();
        slice(&self.name, "a", PORT, &endpoints)
    }

    /// Adds or replaces it on the server.
    fn apply(&self, server: &ApiServer) {
        server.apply(self.service());
        server.apply(self.slice());
    }

    /// Deletes it from the server.
    fn delete(&self, server: &ApiServer) {
        server.delete(Resource::Services, "default", &self.name);
        server.delete(
            Resource::EndpointSlices,
            "default",
            &format!("{}-a", self.name),
        );
    }
}

fn pod_ip(pod: usize) -> String {
    format!("10.244.0.{}", pod + 2)
}

/// The server's objects for `svcs`, with the agent's Node.
fn objects(svcs: &[Svc]) -> Vec<Value> {
    let mut objects: Vec<Value> = svcs.iter().flat_map(|s| [s.service(), s.slice()]).collect();
    objects.push(node_object("node-a", NODE_IP, "10.244.0.0/24"));
    objects
}

/// Virtual servers and their real servers of positive weight (a removed endpoint may drain at
/// weight 0 while it has connections).
type Ipvs = BTreeMap<String, BTreeSet<String>>;

fn parse_ipvs(text: &str) -> Ipvs {
    let mut ipvs = Ipvs::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["-A", proto, vip, ..] => {
                ipvs.entry(format!("{proto} {vip}")).or_default();
            }
            ["-a", proto, vip, "-r", real, ..] => {
                let weight = words
                    .iter()
                    .position(|w| *w == "-w")
                    .and_then(|i| words.get(i + 1))
                    .and_then(|w| w.parse::<u32>().ok())
                    .unwrap_or(0);
                let reals = ipvs.entry(format!("{proto} {vip}")).or_default();
                if weight > 0 {
                    reals.insert(real.to_string());
                }
            }
            _ => {}
        }
    }
    ipvs
}

fn ipvs_now() -> Ipvs {
    parse_ipvs(&sh("ipvsadm -Sn"))
}

/// Reads the IPVS table over generic netlink, in-process, so that it can be sampled every
/// 50 ms on a loaded VM (`/proc/net/ip_vs` skips entries when read in several chunks; a
/// process per sample is too slow under emulation).
struct NetlinkReader {
    runtime: tokio::runtime::Runtime,
    handle: ipvs_netlink::Handle,
}

impl NetlinkReader {
    /// Connects in the calling thread's namespace.
    fn new() -> NetlinkReader {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let handle = runtime
            .block_on(ipvs_netlink::connect())
            .expect("IPVS over netlink");
        NetlinkReader { runtime, handle }
    }

    fn read(&self) -> Ipvs {
        use futures::TryStreamExt;
        let handle = &self.handle;
        self.runtime.block_on(async {
            // Consistent: another test's namespace adding or deleting services would make a
            // plain dump of 40 or more services repeat or skip ours (a false bad sample).
            let services: Vec<ipvs_netlink::Service> = handle
                .services()
                .list_consistent(8)
                .await
                .expect("list services");
            let mut ipvs = Ipvs::new();
            for svc in services {
                let dests: Vec<ipvs_netlink::Destination> = handle
                    .destinations(&svc.key)
                    .dump()
                    .try_collect()
                    .await
                    .unwrap_or_default();
                ipvs.insert(
                    svc.key.to_string(),
                    dests
                        .iter()
                        .filter(|d| d.weight > 0)
                        .map(|d| std::net::SocketAddr::new(d.address, d.port).to_string())
                        .collect(),
                );
            }
            ipvs
        })
    }
}

fn expected(svcs: &[Svc]) -> Ipvs {
    svcs.iter().map(|s| (s.key(), s.reals())).collect()
}

/// The agent binary watching the fake server; killed when dropped.
struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    fn start(node: &Node, server: &ApiServer, extra: &[&str]) -> Agent {
        let log = node.dir.join("agent.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(AGENT)
            .args(["--master", &server.url, "--hostname-override", "node-a"])
            .args(["--cluster-cidr", "10.244.0.0/16"])
            .args(extra)
            .env("RUST_LOG", "info,kube_proxy_ipvs_agent::source=debug")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start the agent");
        Agent { child, log }
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The agent's peak resident set (VmHWM), in MiB.
    fn peak_rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib / 1024)
    }

    /// The last lines of its log, for failure messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn count_in_log(&self, needle: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .count()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls until `ok`, at most `bound` (a correctness bound: "converges"); returns how long it
/// took, or panics with `what`, the last IPVS state and the agent's log.
fn converge(agent: &Agent, what: &str, bound: Duration, want: &Ipvs) -> Duration {
    let start = Instant::now();
    loop {
        let now = ipvs_now();
        if &now == want {
            return start.elapsed();
        }
        if start.elapsed() > bound {
            let missing: Vec<_> = want
                .iter()
                .filter(|(k, v)| now.get(*k) != Some(v))
                .collect();
            let extra: Vec<_> = now.keys().filter(|k| !want.contains_key(*k)).collect();
            panic!(
                "{what}: not converged within {bound:?}\nwanted and not there: {missing:?}\n\
                 there and not wanted: {extra:?}\nipvsadm -Sn:\n{}\n\
                 agent log:\n{}",
                sh("ipvsadm -Sn | head -40"),
                agent.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the sampler and the prober check for one virtual server.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// Exactly these real servers of positive weight, at every sample.
    Exactly(BTreeSet<String>),
    /// Present with at least one real server of positive weight (it is being changed).
    NotEmpty,
}

/// The virtual servers being watched, shared with the sampler and prober threads.
#[derive(Clone, Default)]
struct Watched(Arc<Mutex<BTreeMap<String, (SocketAddr, Expect)>>>);

impl Watched {
    fn of(svcs: &[Svc]) -> Watched {
        let w = Watched::default();
        for s in svcs {
            w.set(s, Expect::Exactly(s.reals()));
        }
        w
    }

    fn set(&self, svc: &Svc, expect: Expect) {
        self.0
            .lock()
            .unwrap()
            .insert(svc.key(), (svc.vip(), expect));
    }

    fn forget(&self, svc: &Svc) {
        self.0.lock().unwrap().remove(&svc.key());
    }

    fn snapshot(&self) -> BTreeMap<String, (SocketAddr, Expect)> {
        self.0.lock().unwrap().clone()
    }
}

/// What a sampler or prober saw: how many checks, how many failed, the first failures.
#[derive(Debug, Default)]
struct Seen {
    checks: usize,
    failed: usize,
    first: Vec<String>,
}

impl Seen {
    fn fail(&mut self, what: String) {
        self.failed += 1;
        if self.first.len() < 5 {
            self.first.push(what);
        }
    }
}

/// A thread checking the watched virtual servers until stopped.
struct Checker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Seen>>,
}

impl Checker {
    /// Reads the IPVS table every 50 ms (in the test's namespace: the thread inherits it).
    fn sampler(watched: &Watched) -> Checker {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (stop, watched) = (stop.clone(), watched.clone());
            move || {
                let mut seen = Seen::default();
                let started = Instant::now();
                let reader = NetlinkReader::new();
                while !stop.load(Ordering::Relaxed) {
                    let want = watched.snapshot();
                    let have = reader.read();
                    seen.checks += 1;
                    for (key, (_, expect)) in want {
                        let reals = have.get(&key);
                        let ok = match (&expect, reals) {
                            (_, None) => false,
                            (Expect::Exactly(w), Some(r)) => w == r,
                            (Expect::NotEmpty, Some(r)) => !r.is_empty(),
                        };
                        if !ok {
                            seen.fail(format!(
                                "{:?}: {key} is {reals:?}, want {expect:?}",
                                started.elapsed()
                            ));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                seen
            }
        });
        Checker {
            stop,
            thread: Some(thread),
        }
    }

    /// Connects to [`PROBES`] of the watched VIPs (in turn) from outside the node once per
    /// `period`; an answer must come from one of the expected pods.
    fn prober(node: &Node, watched: &Watched, period: Duration) -> Checker {
        let stop = Arc::new(AtomicBool::new(false));
        let names: BTreeMap<String, String> = node
            .pods
            .iter()
            .map(|p| (format!("{}:{PORT}", p.ip), p.name.clone()))
            .collect();
        let thread = node.outside.spawn({
            let (stop, watched) = (stop.clone(), watched.clone());
            move || {
                let mut seen = Seen::default();
                let started = Instant::now();
                let mut offset = 0;
                while !stop.load(Ordering::Relaxed) {
                    let round = Instant::now();
                    // At most PROBES VIPs a round, in turn: the VM is shared with other tests.
                    let all: Vec<_> = watched.snapshot().into_iter().collect();
                    let picked: Vec<_> = all
                        .iter()
                        .cycle()
                        .skip(offset)
                        .take(all.len().min(PROBES))
                        .cloned()
                        .collect();
                    offset = (offset + PROBES) % all.len().max(1);
                    for (key, (vip, expect)) in picked {
                        seen.checks += 1;
                        match (ask_tcp(vip), expect) {
                            (Err(e), _) => {
                                seen.fail(format!("{:?}: {key}: {e}", started.elapsed()))
                            }
                            (Ok(name), Expect::Exactly(reals)) => {
                                if !reals.iter().any(|r| names.get(r) == Some(&name)) {
                                    seen.fail(format!(
                                        "{:?}: {key} answered {name}, want one of {reals:?}",
                                        started.elapsed()
                                    ));
                                }
                            }
                            (Ok(_), Expect::NotEmpty) => {}
                        }
                    }
                    std::thread::sleep(period.saturating_sub(round.elapsed()));
                }
                seen
            }
        });
        Checker {
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("finished once")
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn assert_clean(what: &str, seen: &Seen, agent: &Agent) {
    assert!(
        seen.checks > 0 && seen.failed == 0,
        "{what}: {} of {} checks failed, first: {:#?}\nagent log:\n{}",
        seen.failed,
        seen.checks,
        seen.first,
        agent.log_tail()
    );
}

/// `/healthz`'s status code; 0 when three tries in a row got no answer (each waits 5 s: the
/// VM is shared with other tests).
fn healthz() -> u16 {
    (0..3)
        .find_map(|_| std::panic::catch_unwind(|| http_get("127.0.0.1:10256", "/healthz").0).ok())
        .unwrap_or(0)
}

#[test]
fn an_api_server_outage_keeps_the_last_good_state_and_converges_after() {
    let secs: u64 = super::knob("RELIABILITY_OUTAGE_SECS", 300);
    let outage = Duration::from_secs(secs);
    let mut row = Row::new("api", "outage of the API server");
    let node = Node::new("outage", 3);
    let mut svcs: Vec<Svc> = (0..10)
        .map(|i| Svc::new(i, vec![i % 3, (i + 1) % 3]))
        .collect();
    let server = ApiServer::start(objects(&svcs));
    let mut agent = Agent::start(
        &node,
        &server,
        &[
            "--healthz-bind-address",
            "127.0.0.1:10256",
            "--ipvs-sync-period",
            "10s",
        ],
    );
    converge(
        &agent,
        "the first sync",
        Duration::from_secs(60),
        &expected(&svcs),
    );
    let before = kernel_state();
    let watched = Watched::of(&svcs);
    let sampler = Checker::sampler(&watched);
    let prober = Checker::prober(&node, &watched, Duration::from_secs(1));

    // Down: first refusing connections, then hanging every request. Meanwhile "etcd" changes:
    // s3 is deleted, s5 moves to another pod, s10 is added.
    let down = Instant::now();
    server.outage(Outage::Refuse);
    let (gone, moved) = (svcs.remove(3), 4);
    gone.delete(&server);
    svcs[moved].pods = vec![1];
    svcs[moved].apply(&server);
    let added = Svc::new(10, vec![2]);
    added.apply(&server);
    svcs.push(added.clone());
    let (mut state_checks, mut state_changed, mut unhealthy) = (0, 0, 0);
    let mut hanging = false;
    while down.elapsed() < outage {
        std::thread::sleep(Duration::from_secs(5).min(outage.saturating_sub(down.elapsed())));
        if !hanging && down.elapsed() >= outage / 2 {
            server.outage(Outage::Hang);
            hanging = true;
        }
        assert!(
            agent.alive(),
            "the agent exited during the outage:\n{}",
            agent.log_tail()
        );
        state_checks += 1;
        if kernel_state() != before {
            state_changed += 1;
        }
        if healthz() != 200 {
            unhealthy += 1;
        }
    }
    // etcd compacted while the server was away: the watches resume with a 410 and relist.
    watched.forget(&gone);
    watched.set(&svcs[moved], Expect::NotEmpty);
    server.compact();
    server.end_outage();
    let converged = converge(
        &agent,
        "the changes made during the outage",
        Duration::from_secs(60),
        &expected(&svcs),
    );
    watched.set(&svcs[moved], Expect::Exactly(svcs[moved].reals()));
    watched.set(&added, Expect::Exactly(added.reals()));
    std::thread::sleep(Duration::from_secs(3));
    let samples = sampler.finish();
    let probes = prober.finish();
    let refused_gone = node.ask_from_outside(&gone.vip().to_string()).is_err();
    row.tried(format!(
        "outage {secs} s ({} s refused, {} s hanging), {} deleted, {} moved and {} added \
         meanwhile; {} probes of {} VIPs, {} IPVS samples, {state_checks} kernel-state checks",
        secs / 2,
        secs - secs / 2,
        gone.name,
        svcs[moved].name,
        added.name,
        probes.checks,
        svcs.len() - 1,
        samples.checks
    ));
    row.lost(format!(
        "{} failed probes, {} bad samples, {state_changed} kernel-state changes and \
         {unhealthy} unhealthy /healthz during the outage; converged {:.1} s after return",
        probes.failed,
        samples.failed,
        converged.as_secs_f64()
    ));
    assert_eq!(
        state_changed,
        0,
        "the kernel state changed during the outage:\n{}",
        agent.log_tail()
    );
    assert_eq!(unhealthy, 0, "/healthz failed during the outage");
    assert_clean("the IPVS samples", &samples, &agent);
    assert_clean("the probes", &probes, &agent);
    assert!(refused_gone, "the deleted Service still answers");
    assert!(agent.alive(), "{}", agent.log_tail());
}

/// One way to make the watches restart.
type Fault = (&'static str, fn(&ApiServer));

#[test]
fn watch_restarts_and_gone_never_remove_a_service() {
    let mut row = Row::new("api", "410 Gone and dropped watches");
    let node = Node::new("gone", 3);
    let mut svcs: Vec<Svc> = (0..40)
        .map(|i| Svc::new(i, vec![i % 3, (i + 1) % 3]))
        .collect();
    let server = ApiServer::start(objects(&svcs));
    let agent = Agent::start(&node, &server, &[]);
    converge(
        &agent,
        "the first sync",
        Duration::from_secs(60),
        &expected(&svcs),
    );
    // s0 changes in every round (proving the restarted watch delivers); the others must not
    // move at any sample.
    let watched = Watched::of(&svcs);
    watched.set(&svcs[0], Expect::NotEmpty);
    let sampler = Checker::sampler(&watched);
    let prober = Checker::prober(&node, &watched, Duration::from_secs(1));
    // Slow answers widen the window in which a relist is in progress.
    server.set_delay(Duration::from_millis(200));
    let faults: [Fault; 6] = [
        ("410 Gone on every watch", |s| s.gone()),
        ("every watch cut mid-stream", |s| s.drop_watches()),
        ("410 Gone on the Service watch", |s| {
            s.gone_for(Resource::Services)
        }),
        ("compaction, then watches cut (resume answers 410)", |s| {
            s.compact();
            s.drop_watches();
        }),
        ("410 Gone on the EndpointSlice watch", |s| {
            s.gone_for(Resource::EndpointSlices)
        }),
        ("410 Gone, then the relist's bodies cut short", |s| {
            s.truncate_next_lists(2);
            s.gone();
        }),
    ];
    let lists_before = server.lists(Resource::Services) + server.lists(Resource::EndpointSlices);
    let mut slowest = Duration::ZERO;
    for (round, (what, fault)) in faults.iter().enumerate() {
        // A watch being re-opened after the last round, from the current resourceVersion,
        // would not be told of the fault: wait until both are streaming.
        assert!(
            server.wait_for_watches(
                &[Resource::Services, Resource::EndpointSlices],
                Duration::from_secs(30)
            ),
            "{what}: the agent does not watch every resource"
        );
        fault(&server);
        svcs[0].pods = vec![round % 3];
        server.apply(svcs[0].slice());
        let took = converge(&agent, what, Duration::from_secs(60), &expected(&svcs));
        slowest = slowest.max(took);
    }
    server.set_delay(Duration::ZERO);
    let relists =
        server.lists(Resource::Services) + server.lists(Resource::EndpointSlices) - lists_before;
    let samples = sampler.finish();
    let probes = prober.finish();
    row.tried(format!(
        "{} watch restarts ({relists} relists) under 40 Services, one changed each time; \
         {} IPVS samples, {} probes",
        faults.len(),
        samples.checks,
        probes.checks
    ));
    row.lost(format!(
        "{} bad samples, {} failed probes; each change converged within {:.1} s",
        samples.failed,
        probes.failed,
        slowest.as_secs_f64()
    ));
    assert_clean("the IPVS samples", &samples, &agent);
    assert_clean("the probes", &probes, &agent);
    // Four of the faults make the agent relist both kinds or one, the truncated ones twice.
    assert!(relists >= 6, "only {relists} relists");
    assert!(agent.count_in_log("relisting") >= 4, "{}", agent.log_tail());
}

#[test]
fn a_list_failing_midway_is_never_published() {
    const PAGE: &str = "7";
    let mut row = Row::new("api", "partial lists (pages of 7)");
    let node = Node::new("pages", 3);
    let mut svcs: Vec<Svc> = (0..60)
        .map(|i| Svc::new(i, vec![i % 3, (i + 1) % 3]))
        .collect();
    let server = ApiServer::start(objects(&svcs));
    let agent = Agent::start(&node, &server, &["--api-list-page-size", PAGE]);
    converge(
        &agent,
        "the first sync",
        Duration::from_secs(60),
        &expected(&svcs),
    );
    let paged = server
        .requests()
        .iter()
        .any(|r| r.query.contains_key("continue"));
    assert!(paged, "the agent did not list in pages");
    let watched = Watched::of(&svcs);
    watched.set(&svcs[0], Expect::NotEmpty);
    let sampler = Checker::sampler(&watched);
    let prober = Checker::prober(&node, &watched, Duration::from_secs(1));
    let faults: [Fault; 5] = [
        ("a page after the first expired (410)", |s| {
            s.expire_next_pages(1)
        }),
        ("a page after the first failing with 500", |s| {
            s.fail_next_pages(&[500])
        }),
        ("three pages in a row failing (500, 503, 429)", |s| {
            s.fail_next_pages(&[500, 503, 429])
        }),
        ("list bodies cut short on the wire", |s| {
            s.truncate_next_lists(3)
        }),
        // Slow pages, and the tokens forgotten while the relist is under way (below).
        ("continue tokens forgotten mid-list", |s| {
            s.set_delay(Duration::from_millis(300))
        }),
    ];
    let mut slowest = Duration::ZERO;
    let mut extra_lists = 0;
    for (round, (what, fault)) in faults.iter().enumerate() {
        // The fault must reach every watch: one being re-opened, from the current
        // resourceVersion, would not be told and its resource not relisted.
        assert!(
            server.wait_for_watches(
                &[
                    Resource::Services,
                    Resource::EndpointSlices,
                    Resource::Nodes
                ],
                Duration::from_secs(30)
            ),
            "{what}: the agent does not watch every resource"
        );
        let lists = all_lists(&server);
        // Each relist must also bring a deletion and a change made after the fault.
        fault(&server);
        server.gone();
        if round == 4 {
            std::thread::sleep(Duration::from_millis(1500));
            server.expire_continue_tokens();
        }
        let doomed = svcs.remove(svcs.len() - 1);
        watched.forget(&doomed);
        doomed.delete(&server);
        svcs[0].pods = vec![round % 3];
        server.apply(svcs[0].slice());
        let took = converge(&agent, what, Duration::from_secs(90), &expected(&svcs));
        server.set_delay(Duration::ZERO);
        slowest = slowest.max(took);
        // A clean relist is 2 x ceil(n / 7) pages and the Node's one; a failed one needs more.
        let n = svcs.len() + 1;
        let clean = 2 * n.div_ceil(7) + 1;
        let made = all_lists(&server) - lists;
        assert!(
            round == 4 || made > clean,
            "{what}: {made} list requests, no more than a clean relist ({clean})"
        );
        extra_lists += made.saturating_sub(clean);
    }
    let samples = sampler.finish();
    let probes = prober.finish();
    row.tried(format!(
        "{} relists of 60 Services in pages of {PAGE} failing midway ({extra_lists} list \
         requests beyond clean relists), a Service deleted and one changed each time; {} \
         IPVS samples, {} probes",
        faults.len(),
        samples.checks,
        probes.checks
    ));
    row.lost(format!(
        "{} bad samples, {} failed probes; converged within {:.1} s each time",
        samples.failed,
        probes.failed,
        slowest.as_secs_f64()
    ));
    assert_clean("the IPVS samples", &samples, &agent);
    assert_clean("the probes", &probes, &agent);
}

fn all_lists(server: &ApiServer) -> usize {
    [
        Resource::Services,
        Resource::EndpointSlices,
        Resource::Nodes,
    ]
    .into_iter()
    .map(|r| server.lists(r))
    .sum()
}

/// [`kernel_state`] with kube-ipvs0's addresses sorted: the order they were added in is not
/// part of the state.
fn comparable(state: &str) -> String {
    state
        .lines()
        .map(|l| match l.strip_prefix("kube-ipvs0") {
            Some(rest) => {
                let mut words: Vec<&str> = rest.split_whitespace().collect();
                words.sort_unstable();
                format!("kube-ipvs0 {}", words.join(" "))
            }
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_burst_of_ten_thousand_events_converges() {
    const N: usize = 500;
    const CHANGES: usize = 18;
    let mut row = Row::new("api", "burst of 10,000 events");
    let node = Node::new("burst", 3);
    // One Service first, to know the agent is up and synced.
    let first = Svc::new(N, vec![0]);
    let server = ApiServer::start(objects(std::slice::from_ref(&first)));
    let mut agent = Agent::start(&node, &server, &["--ipvs-sync-period", "10s"]);
    converge(
        &agent,
        "the first sync",
        Duration::from_secs(60),
        &expected(std::slice::from_ref(&first)),
    );
    // 500 Services and their slices created, then each slice changed 18 times.
    let started = Instant::now();
    let mut svcs: Vec<Svc> = (0..N).map(|i| Svc::new(i, vec![i % 3])).collect();
    let rv_before = server.resource_version();
    for s in &svcs {
        s.apply(&server);
    }
    for step in 1..=CHANGES {
        for (i, s) in svcs.iter_mut().enumerate() {
            s.pods = if step == CHANGES {
                vec![i % 3, (i + 1) % 3]
            } else {
                vec![(i + step) % 3]
            };
            server.apply(s.slice());
        }
    }
    let events = server.resource_version() - rv_before;
    let sent = started.elapsed();
    eprintln!("burst: {events} events sent in {sent:?}");
    svcs.push(first);
    let converged = converge(
        &agent,
        "the burst",
        Duration::from_secs(300),
        &expected(&svcs),
    );
    assert!(agent.alive(), "{}", agent.log_tail());
    // Replaced endpoints drain at weight 0 and go at a later sync once without connections
    // (none had any): wait for them, then the state is final.
    let drained = Instant::now();
    while sh("ipvsadm -Sn").contains(" -w 0") {
        assert!(
            drained.elapsed() < Duration::from_secs(120),
            "real servers of weight 0 without connections were never deleted:\n{}",
            agent.log_tail()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let peak = agent.peak_rss_mib();
    let running = comparable(&kernel_state());
    // The same objects in one --once run from a clean node give exactly the same kernel state.
    drop(agent);
    cleanup();
    assert_eq!(sh("ipvsadm -Sn"), "");
    once_from_api(&server.url);
    let fresh = comparable(&kernel_state());
    let mut failed = 0;
    for s in svcs[..N].iter().step_by(N / 20) {
        let want: BTreeSet<String> = s.pods.iter().map(|p| node.pods[*p].name.clone()).collect();
        match node.ask_from_outside(&s.vip().to_string()) {
            Ok(name) if want.contains(&name) => {}
            _ => failed += 1,
        }
    }
    row.tried(format!(
        "{events} events ({N} Services and slices created, each slice changed {CHANGES} times) \
         sent in {:.1} s to a running agent; 20 probes",
        sent.as_secs_f64()
    ));
    row.lost(format!(
        "converged {:.1} s after the last event, peak RSS {peak} MiB; {} kernel-state \
         differences from a --once run; {failed} failed probes",
        converged.as_secs_f64(),
        usize::from(running != fresh)
    ));
    assert_eq!(events, 10_000);
    let only = |a: &str, b: &str| -> Vec<String> {
        let b: BTreeSet<&str> = b.lines().collect();
        a.lines()
            .filter(|l| !b.contains(l))
            .map(str::to_owned)
            .collect()
    };
    assert!(
        running == fresh,
        "the running agent's state differs from a --once run of the same objects:\n\
         only in the running agent's: {:?}\nonly in --once's: {:?}",
        only(&running, &fresh),
        only(&fresh, &running)
    );
    assert_eq!(failed, 0);
}
