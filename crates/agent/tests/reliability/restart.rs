//! Reliability: restart without disruption. The agent runs as a daemon while traffic flows
//! through ClusterIP and NodePort Services (long-lived connections echoing a line every
//! 100 ms, and a new short connection every 20 ms, from outside the node and from a pod); it
//! is stopped with SIGTERM and started again, killed with SIGKILL and started again, replaced
//! by a copy of its binary at another path (a DaemonSet rolling update), and restarted after a
//! Service changed while it was down. No connection may be refused, reset or lose an echo.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lab::guest::{NamedNetns, sh};
use lab::net::{ask_tcp, client, echo, open_tcp};
use lab::report::Row;

use crate::node::{AGENT, NODE_IP, Node, node_port_service, service, try_http_get};

const METRICS: &str = "127.0.0.1:10249";
const CLUSTER_IP: &str = "10.96.0.10:80";
const NODE_PORT: u16 = 30080;
/// The Service whose endpoints change while the agent is down.
const CHANGED_IP: &str = "10.96.0.12:80";

/// The daemon, from binary `bin`, on `node`'s manifests, with a short full-sync period.
fn start(bin: &Path, node: &Node) -> Child {
    Command::new(bin)
        .arg("--manifests")
        .arg(&node.dir)
        .args(["--hostname-override", "node-a"])
        .args(["--cluster-cidr", "10.244.0.0/16"])
        .args(["--ipvs-sync-period", "5s", "--ipvs-min-sync-period", "0s"])
        .args(["--metrics-bind-address", METRICS])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()))
}

/// GETs `/metrics`, or `None` while nothing answers.
fn metrics() -> Option<String> {
    try_http_get(METRICS, "/metrics").ok().map(|(_, body)| body)
}

/// Waits until the daemon reports a completed sync (its duration histogram counts one).
fn wait_synced(agent: &mut Child) -> Duration {
    let t = Instant::now();
    loop {
        if let Some(status) = agent.try_wait().unwrap() {
            panic!("the agent exited: {status}");
        }
        let synced = metrics().is_some_and(|m| {
            m.lines().any(|l| {
                l.strip_prefix("kubeproxy_sync_proxy_rules_duration_seconds_count")
                    .and_then(|v| v.split_whitespace().last()?.parse::<f64>().ok())
                    .is_some_and(|n| n >= 1.0)
            })
        });
        if synced {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(180),
            "the agent did not finish a sync within 180 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops the daemon with `signal` and waits for it to exit.
fn stop(agent: &mut Child, signal: i32) {
    let pid = libc::pid_t::try_from(agent.id()).expect("a pid");
    // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet (so the pid
    // cannot have been reused); it takes no pointers.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
    let t = Instant::now();
    while agent.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the agent did not exit within 30 s of signal {signal}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the traffic saw during one scenario.
#[derive(Debug, Default)]
struct Counts {
    new_tried: usize,
    new_refused: usize,
    new_failed: usize,
    long_lived: usize,
    long_reset: usize,
    echoes: usize,
    echoes_lost: usize,
    errors: Vec<String>,
}

impl Counts {
    fn lost(&self) -> bool {
        self.new_refused + self.new_failed + self.long_reset + self.echoes_lost > 0
    }
}

#[derive(Default)]
struct Shared {
    new_tried: AtomicUsize,
    new_refused: AtomicUsize,
    new_failed: AtomicUsize,
    long_reset: AtomicUsize,
    echoes: AtomicUsize,
    echoes_lost: AtomicUsize,
    errors: std::sync::Mutex<Vec<String>>,
}

impl Shared {
    fn error(&self, e: String) {
        let mut errors = self.errors.lock().unwrap();
        if errors.len() < 10 {
            errors.push(e);
        }
    }
}

/// Traffic through the Services while a scenario runs.
struct Traffic {
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    long_lived: usize,
}

impl Traffic {
    /// Starts the traffic: for each of `sources` (two namespaces and the addresses they use), 4
    /// long-lived connections (round robin over the addresses) from the first namespace and a
    /// stream of new ones from the second; returns once every long-lived connection is open
    /// and has echoed once.
    fn start(sources: &[(&NamedNetns, &NamedNetns, Vec<SocketAddr>)], pods: &[String]) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::default());
        let pods: Arc<Vec<String>> = Arc::new(pods.to_vec());
        let mut threads = Vec::new();
        let mut long_lived = 0;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        for (ns, short_ns, addrs) in sources {
            for c in 0..4 {
                let addr = addrs[c % addrs.len()];
                let (stop, shared, pods, ready) =
                    (stop.clone(), shared.clone(), pods.clone(), ready_tx.clone());
                long_lived += 1;
                threads.push(ns.spawn(move || {
                    let (name, mut conn) = match open_tcp(addr) {
                        Ok((name, conn)) if pods.contains(&name) => (name, conn),
                        other => {
                            let _ =
                                ready.send(Err(format!("open {addr}: {:?}", other.map(|x| x.0))));
                            return;
                        }
                    };
                    let local = conn.get_ref().local_addr().map(|a| a.to_string());
                    let tag = format!("{addr} from {} to {name}", local.unwrap_or_default());
                    let mut seq = 0u64;
                    let mut first = true;
                    loop {
                        let line = format!("{addr} #{seq}");
                        seq += 1;
                        shared.echoes.fetch_add(1, Ordering::Relaxed);
                        match echo(&mut conn, &line) {
                            Ok(back) if back == line => {}
                            other => {
                                shared.echoes_lost.fetch_add(1, Ordering::Relaxed);
                                shared.long_reset.fetch_add(1, Ordering::Relaxed);
                                shared.error(format!("long-lived {tag} at {line:?}: {other:?}"));
                                if first {
                                    let _ = ready.send(Err("first echo".into()));
                                }
                                return;
                            }
                        }
                        if first {
                            first = false;
                            let _ = ready.send(Ok(()));
                        }
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }));
            }
            let addrs = addrs.clone();
            let (stop, shared, pods) = (stop.clone(), shared.clone(), pods.clone());
            threads.push(short_ns.spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let addr = addrs[i % addrs.len()];
                    i += 1;
                    shared.new_tried.fetch_add(1, Ordering::Relaxed);
                    match ask_tcp(addr) {
                        Ok(name) if pods.contains(&name) => {}
                        Ok(name) => {
                            shared.new_failed.fetch_add(1, Ordering::Relaxed);
                            shared.error(format!("new {addr}: answered {name:?}"));
                        }
                        Err(e) if e.contains("refused") => {
                            shared.new_refused.fetch_add(1, Ordering::Relaxed);
                            shared.error(format!("new: {e}"));
                        }
                        Err(e) => {
                            shared.new_failed.fetch_add(1, Ordering::Relaxed);
                            shared.error(format!("new: {e}"));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }));
        }
        for _ in 0..long_lived {
            let r = ready_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("a long-lived connection opened");
            r.unwrap_or_else(|e| panic!("before the scenario: {e}"));
        }
        Traffic {
            stop,
            shared,
            threads,
            long_lived,
        }
    }

    /// Stops the traffic and returns what it saw.
    fn finish(self) -> Counts {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("a traffic thread");
        }
        let s = &self.shared;
        Counts {
            new_tried: s.new_tried.load(Ordering::Relaxed),
            new_refused: s.new_refused.load(Ordering::Relaxed),
            new_failed: s.new_failed.load(Ordering::Relaxed),
            long_lived: self.long_lived,
            long_reset: s.long_reset.load(Ordering::Relaxed),
            echoes: s.echoes.load(Ordering::Relaxed),
            echoes_lost: s.echoes_lost.load(Ordering::Relaxed),
            errors: s.errors.lock().unwrap().clone(),
        }
    }
}

fn manifests(node: &Node, changed_endpoints: &[(usize, &str)]) {
    let both = [(0, "node-a"), (1, "node-a")];
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &both),
    );
    node.write(
        "np.yaml",
        &node_port_service("np", "10.96.0.11", NODE_PORT, &both),
    );
    node.write(
        "changed.yaml",
        &service(
            "changed",
            "10.96.0.12",
            "",
            "TCP",
            80,
            8080,
            changed_endpoints,
        ),
    );
}

#[test]
fn restarts_upgrades_and_kills_lose_no_connection() {
    // Pods 0 and 1 serve; pod 2 is only a client.
    let node = Node::new("rrestart", 3);
    let both = [(0, "node-a"), (1, "node-a")];
    manifests(&node, &both);
    let pods: Vec<String> = node.pods[..2].iter().map(|p| p.name.clone()).collect();
    let node_port: SocketAddr = format!("{NODE_IP}:{NODE_PORT}").parse().unwrap();
    let cluster_ip: SocketAddr = CLUSTER_IP.parse().unwrap();
    let changed: SocketAddr = CHANGED_IP.parse().unwrap();
    // From outside: the ClusterIP (routed to the node), the NodePort and the Service that
    // changes; from the pods: the ClusterIP (pod 1 itself included, hairpin) and the one that
    // changes. Pod 1 holds the long-lived connections and pod 2 makes the new ones: pod traffic
    // is not masqueraded, and a new connection from the same pod could reuse a long-lived
    // one's source port towards another Service on the same endpoint, two flows with one
    // address pair at the endpoint (an IPVS property, not a restart's doing).
    // The same holds outside the node, masquerade or not: IPVS finds a reply's connection by
    // client and real server alone, so a short connection that shares a long-lived one's
    // source port (Linux shares ephemeral ports between different destinations) and lands on
    // the same pod through another Service could take the long-lived one's replies. The short
    // ones come from a second outside client.
    let outside2 = client("rrestart-out2", "192.168.101.1", "192.168.101.2");
    let sources: Vec<(&NamedNetns, &NamedNetns, Vec<SocketAddr>)> = vec![
        (
            &node.outside,
            &outside2,
            vec![cluster_ip, node_port, changed],
        ),
        (
            &node.pods[1].ns,
            &node.pods[2].ns,
            vec![cluster_ip, changed],
        ),
    ];
    let upgraded = std::env::temp_dir().join(format!("kube-proxy-ipvs-v2-{}", std::process::id()));
    std::fs::copy(AGENT, &upgraded).expect("copy the agent binary");

    let mut agent = start(Path::new(AGENT), &node);
    let first = wait_synced(&mut agent);
    println!("restart: the first sync done {first:.1?} after start");

    let started = Instant::now();
    type Scenario<'a> = (&'a str, i32, &'a Path, Option<&'a [(usize, &'a str)]>);
    let scenarios: [Scenario; 4] = [
        ("SIGTERM restart", libc::SIGTERM, Path::new(AGENT), None),
        ("kill -9 restart", libc::SIGKILL, Path::new(AGENT), None),
        ("binary upgrade", libc::SIGTERM, &upgraded, None),
        (
            "restart with a Service changed while down",
            libc::SIGTERM,
            &upgraded,
            Some(&[(1, "node-a")]),
        ),
    ];
    for (scenario, signal, bin, change) in scenarios {
        let mut row = Row::new("restart", scenario);
        let t = Instant::now();
        let traffic = Traffic::start(&sources, &pods);
        std::thread::sleep(Duration::from_secs(1));
        stop(&mut agent, signal);
        if let Some(endpoints) = change {
            manifests(&node, endpoints);
        }
        // The DaemonSet's gap between the old pod and the new one.
        std::thread::sleep(Duration::from_secs(1));
        agent = start(bin, &node);
        let synced = wait_synced(&mut agent);
        // Traffic goes on past a full sync of the new agent.
        std::thread::sleep(Duration::from_secs(6));
        let c = traffic.finish();
        let took = t.elapsed();
        println!("restart: {scenario}: synced {synced:.1?} after start, {took:.1?} in all: {c:?}");
        row.tried(format!(
            "{} new connections (every 20 ms), {} long-lived connections echoing {} lines (every 100 ms), over {:.0?}",
            c.new_tried, c.long_lived, c.echoes, took
        ));
        row.lost(format!(
            "{} refused, {} failed, {} reset, {} echoes lost",
            c.new_refused, c.new_failed, c.long_reset, c.echoes_lost
        ));
        if c.lost() {
            // What the kernel holds of the broken flows (their client ports are in the errors).
            let ports: Vec<String> = c
                .errors
                .iter()
                .filter_map(|e| e.split(" from ").nth(1)?.split(' ').next())
                .filter_map(|a| a.rsplit_once(':').map(|(_, p)| p.to_string()))
                .collect();
            for p in ports {
                println!(
                    "restart: flow from port {p}:\n{}{}",
                    sh(&format!("ipvsadm -Lnc | grep ':{p} ' || true")),
                    sh(&format!(
                        "conntrack -L 2>/dev/null | grep 'sport={p} ' || true"
                    ))
                );
            }
            println!(
                "restart: {}",
                sh(
                    "sysctl -a 2>/dev/null | grep -E 'net.ipv4.vs.(conn_reuse|expire|conntrack)' || true"
                )
            );
        }
        // Fail here, with the row alive, so the table says FAILED for this scenario.
        assert!(!c.lost(), "{scenario}: {c:?}; first errors: {:?}", c.errors);
        drop(row);
        if change.is_some() {
            // Only pod 1 answers the changed Service now.
            let answers: Vec<String> = (0..6)
                .map(|_| node.ask_from_outside(CHANGED_IP).unwrap())
                .collect();
            assert!(
                answers.iter().all(|a| *a == pods[1]),
                "the change made while the agent was down is not in effect: {answers:?}"
            );
        }
    }
    println!("restart: 4 scenarios in {:.1?}", started.elapsed());
    stop(&mut agent, libc::SIGTERM);
    let _ = std::fs::remove_file(&upgraded);
}
