//! Reliability: crash consistency. The agent is killed with SIGKILL at many points of a cold
//! sync of 10,000 Services (during its kernel writes: virtual and real servers, set entries,
//! addresses, rules), then started again, sometimes after a Service was removed while it was
//! dead: the kernel must end exactly as an uninterrupted run leaves it, with no leftover, no
//! duplicate and nothing missing.
//!
//! A cold sync of 10,000 Services takes over a minute in the lab (emulated CPU), a sixth of it
//! before the first kernel write: so the kills form a chain in one network namespace. Each run
//! resumes what the killed one left (observe, plan the rest, write) and is killed again. The
//! kill points are placed by the agent's own progress, not by time (its writes are far from
//! uniform in time: set entries and addresses go on worker threads beside the IPVS batches):
//! its debug log reports each group of operations applied and each IPVS batch sent, and kill
//! `k` lands inside step `(k + u) / points` of an uninterrupted run's steps (`u` random), so
//! the kills sweep the whole cold sync. Between kills the Services of [`removed_services`] come and
//! go, as a Service removed (or re-created) while the agent was dead. A last run goes to the
//! end, and its kernel state is compared with the reference, the uninterrupted run in a fresh
//! namespace.
//!
//! Wall time in the VM (release build), alone: about 45 s for the reference, 40 s per kill
//! (944 s in all). `RELIABILITY_CRASH_SERVICES` and `RELIABILITY_CRASH_POINTS` scale it down
//! (the test command runs 5,000 Services and 10 kills, to keep CI within its time); the
//! committed reliability table comes from the full run (CONTRIBUTING.md).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lab::guest::{Netns, sh};
use lab::report::Row;

use super::knob;
use crate::node::{AGENT, kernel_state};

/// Services in the cold sync: `RELIABILITY_CRASH_SERVICES`, else 10,000.
fn services() -> usize {
    knob("RELIABILITY_CRASH_SERVICES", 10_000)
}

/// Kill points: `RELIABILITY_CRASH_POINTS`, else 20 (the issue asks for at least 20).
fn points() -> u32 {
    knob("RELIABILITY_CRASH_POINTS", 20)
}

/// Services removed while the agent is dead: NodePorts with three endpoints (`i % 30 == 3`),
/// one early in the plan's order and one in the middle of the `n`.
fn removed_services(n: usize) -> [usize; 2] {
    [33, (n / 2).div_ceil(30) * 30 + 3]
}

/// What Service `i` is made of: every tenth a NodePort, every third three endpoints, every
/// fiftieth session-affine, every twentieth UDP. Endpoints are distinct across Services and
/// all on this node (so each has a hairpin entry).
struct Shape {
    node_port: Option<u16>,
    endpoints: usize,
    affinity: bool,
    udp: bool,
}

fn shape(i: usize) -> Shape {
    Shape {
        node_port: (i % 10 == 3).then(|| 30000 + (i / 10) as u16),
        endpoints: if i.is_multiple_of(3) { 3 } else { 1 },
        affinity: i % 50 == 7,
        udp: i % 20 == 9,
    }
}

fn cluster_ip(i: usize) -> String {
    format!("10.97.{}.{}", i / 250, i % 250 + 1)
}

fn endpoint_ip(i: usize, j: usize) -> String {
    let k = 3 * i + j;
    format!("10.244.{}.{}", k / 250 + 1, k % 250 + 1)
}

/// Service `i` and its EndpointSlice, as JSON (parsed several times faster than YAML, which
/// matters for an agent built without optimizations under emulation).
fn manifest(i: usize) -> [serde_json::Value; 2] {
    let s = shape(i);
    let proto = if s.udp { "UDP" } else { "TCP" };
    let mut port =
        serde_json::json!({"name": "p", "protocol": proto, "port": 80, "targetPort": 8080});
    let mut spec = serde_json::json!({"clusterIP": cluster_ip(i), "ports": [port.clone()]});
    if let Some(p) = s.node_port {
        port["nodePort"] = p.into();
        spec["ports"] = serde_json::json!([port]);
        spec["type"] = "NodePort".into();
    }
    if s.affinity {
        spec["sessionAffinity"] = "ClientIP".into();
    }
    let endpoints: Vec<serde_json::Value> = (0..s.endpoints)
        .map(|j| serde_json::json!({"addresses": [endpoint_ip(i, j)], "nodeName": "node-a"}))
        .collect();
    [
        serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("s{i}"), "namespace": "t"},
            "spec": spec,
        }),
        serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("s{i}-x"), "namespace": "t",
                "labels": {"kubernetes.io/service-name": format!("s{i}")}},
            "addressType": "IPv4",
            "ports": [{"name": "p", "protocol": proto, "port": 8080}],
            "endpoints": endpoints,
        }),
    ]
}

/// Services `ids` as one JSON `List`.
fn list(ids: impl Iterator<Item = usize>) -> String {
    let items: Vec<serde_json::Value> = ids.flat_map(manifest).collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// The counts an exact kernel state has for the Services `0..n` but `without`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    virtual_servers: usize,
    real_servers: usize,
    cluster_ips: usize,
    node_ports_tcp: usize,
    node_ports_udp: usize,
    hairpins: usize,
    owned: usize,
    addresses: usize,
}

fn desired_counts(n: usize, without: &[usize]) -> Counts {
    let mut c = Counts::default();
    for i in (0..n).filter(|i| !without.contains(i)) {
        let s = shape(i);
        let servers = 1 + usize::from(s.node_port.is_some());
        c.virtual_servers += servers;
        c.real_servers += servers * s.endpoints;
        c.cluster_ips += 1;
        match (s.node_port, s.udp) {
            (Some(_), false) => c.node_ports_tcp += 1,
            (Some(_), true) => c.node_ports_udp += 1,
            _ => {}
        }
        c.hairpins += s.endpoints;
        c.addresses += 1;
    }
    c.owned = c.virtual_servers;
    c
}

/// A kernel state as `kernel_state()` prints it, cut in its four parts.
struct State<'a> {
    ipvs: Vec<&'a str>,
    sets: Vec<&'a str>,
    rules: Vec<&'a str>,
    addresses: Vec<&'a str>,
}

fn parts(text: &str) -> State<'_> {
    let mut it = text.split("\n--\n");
    let mut next = || it.next().unwrap_or("").lines().collect::<Vec<_>>();
    let (ipvs, sets, rules) = (next(), next(), next());
    let addresses = next()
        .iter()
        .flat_map(|l| l.split_whitespace().skip(2))
        .collect();
    State {
        ipvs,
        sets,
        rules,
        addresses,
    }
}

/// The counts found in a kernel state, plus the virtual servers that are not claimed in
/// `KUBE-IPVS-OWNED` and the claims without a virtual server.
fn found_counts(s: &State) -> (Counts, usize) {
    let entries = |set: &str| {
        let prefix = format!("add {set} ");
        s.sets.iter().filter(|l| l.starts_with(&prefix)).count()
    };
    // `-A -t 10.97.0.1:80 -s rr` and `add KUBE-IPVS-OWNED 10.97.0.1,tcp:80`.
    let servers: BTreeSet<String> = s
        .ipvs
        .iter()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "-A").then_some(())?;
            let proto = match w.next()? {
                "-t" => "tcp",
                "-u" => "udp",
                _ => "sctp",
            };
            let (ip, port) = w.next()?.rsplit_once(':')?;
            Some(format!("{ip},{proto}:{port}"))
        })
        .collect();
    let claims: BTreeSet<String> = s
        .sets
        .iter()
        .filter_map(|l| l.strip_prefix("add KUBE-IPVS-OWNED "))
        .map(str::to_string)
        .collect();
    let unmatched = servers.symmetric_difference(&claims).count();
    let c = Counts {
        virtual_servers: s.ipvs.iter().filter(|l| l.starts_with("-A ")).count(),
        real_servers: s.ipvs.iter().filter(|l| l.starts_with("-a ")).count(),
        cluster_ips: entries("KUBE-CLUSTER-IP"),
        node_ports_tcp: entries("KUBE-NODE-PORT-TCP"),
        node_ports_udp: entries("KUBE-NODE-PORT-UDP"),
        hairpins: entries("KUBE-LOOP-BACK"),
        owned: claims.len(),
        addresses: s.addresses.len(),
    };
    (c, unmatched)
}

/// Lines that occur more often than in the reference (the kernel keys IPVS and sets, so only
/// rules can really repeat; all parts are checked anyway).
fn duplicates(got: &[&str], reference: &[&str]) -> Vec<String> {
    let count = |lines: &[&str]| {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for l in lines {
            *m.entry(l.to_string()).or_default() += 1;
        }
        m
    };
    let want = count(reference);
    count(got)
        .into_iter()
        .filter(|(l, n)| *n > want.get(l).copied().unwrap_or(1).max(1))
        .map(|(l, n)| format!("{n}x {l}"))
        .collect()
}

/// A set header without its hash size, which the kernel grows with the entries a set ever
/// held and never shrinks: not an object, and not the agent's to choose.
fn without_hashsize(line: &str) -> String {
    match line.split_once(" hashsize ") {
        Some((a, b)) if line.starts_with("create ") => {
            let rest = b.split_once(' ').map(|(_, r)| r).unwrap_or("");
            format!("{a} {rest}")
        }
        _ => line.to_string(),
    }
}

/// `(leftover, missing)`: lines only in `got`, lines only in `reference`.
fn difference(got: &str, reference: &str) -> (Vec<String>, Vec<String>) {
    let g: BTreeSet<String> = got.lines().map(without_hashsize).collect();
    let r: BTreeSet<String> = reference.lines().map(without_hashsize).collect();
    (
        g.difference(&r).map(|s| cut(s)).collect(),
        r.difference(&g).map(|s| cut(s)).collect(),
    )
}

/// A line short enough for a failure message.
fn cut(line: &str) -> String {
    line.chars().take(200).collect()
}

/// A small seeded PRNG (splitmix64): the kill points are random but reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The seed: `RELIABILITY_SEED` (a seed that does not parse fails the test), else the clock.
fn seed() -> u64 {
    lab::guest::knob("RELIABILITY_SEED", option_env!("RELIABILITY_SEED")).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    })
}

/// A fresh network namespace with a node address (a veth pair, both ends here) for the
/// NodePorts.
fn fresh_node() {
    Netns::fresh();
    sh(
        "ip link add n0 type veth peer name n1 && ip addr add 192.168.100.1/24 dev n0 && \
        ip link set n0 up && ip link set n1 up",
    );
}

struct Agent {
    dir: PathBuf,
}

/// What a run's debug log tells, line by line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// The kernel was read ("observed sets"): the plan is computed next.
    Observed,
    /// A step of the writes was done: a group of operations applied, or one IPVS batch of
    /// a group sent (the lines come after the step).
    Step,
    /// A sync was reported done: the cold sync is over.
    Synced,
}

/// A running agent whose debug log is followed on a thread.
struct Run {
    child: Child,
    events: mpsc::Receiver<(Event, Instant)>,
    /// What the log said so far, in order.
    seen: Vec<(Event, Instant)>,
}

impl Run {
    /// Waits until the log has said `event` `n` times; `false` when the run ended (or, for a
    /// daemon, reported its sync done) first.
    fn wait_for(&mut self, event: Event, n: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.count(Event::Synced) > 0 && event != Event::Synced {
                return false;
            }
            if self.count(event) >= n {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(e) => self.seen.push(e),
                Err(mpsc::RecvTimeoutError::Disconnected) => return false,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("the agent did not log {n} x {event:?} within {limit:?}")
                }
            }
        }
    }

    fn count(&self, event: Event) -> usize {
        self.seen.iter().filter(|(e, _)| *e == event).count()
    }

    fn first(&self, event: Event) -> Option<Instant> {
        self.seen.iter().find(|(e, _)| *e == event).map(|(_, t)| *t)
    }

    /// Kills the run and reaps it; then reads the rest of its log. `true` when the kill
    /// landed during the sync: the process was still running and had not reported its sync
    /// done before the kill.
    fn kill(&mut self) -> bool {
        let at = Instant::now();
        let _ = self.child.kill();
        let status = self.child.wait().expect("reap the agent");
        self.seen.extend(self.events.iter());
        let synced_before = self
            .seen
            .iter()
            .any(|(e, t)| *e == Event::Synced && *t <= at);
        status.code().is_none() && !synced_before
    }
}

impl Agent {
    fn command(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(AGENT);
        c.arg("--manifests")
            .arg(&self.dir)
            .args(["--hostname-override", "node-a"])
            .args(["--cluster-cidr", "10.244.0.0/16"])
            .args(["--nodeport-addresses", "192.168.100.0/24"])
            .args(extra);
        c
    }

    /// Starts the agent (`--once`, or the daemon) with its debug log followed.
    fn start(&self, daemon: bool) -> Run {
        let extra: &[&str] = if daemon { &[] } else { &["--once"] };
        let mut child = self
            .command(extra)
            .env("RUST_LOG", "kube_proxy_ipvs_agent=debug")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the agent");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, events) = mpsc::channel();
        std::thread::spawn(move || {
            let mut failed = Vec::new();
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let now = Instant::now();
                let event = if line.contains("observed sets") {
                    Event::Observed
                } else if line.contains("applied a group") || line.contains("sent an IPVS batch") {
                    Event::Step
                } else if line.contains("] \"synced\"") {
                    Event::Synced
                } else {
                    if line.contains("operation failed") && failed.len() < 5 {
                        failed.push(line);
                    }
                    continue;
                };
                let _ = tx.send((event, now));
            }
            for l in failed {
                println!("crash: agent: {l}");
            }
        });
        Run {
            child,
            events,
            seen: Vec::new(),
        }
    }

    /// Runs `--once` to the end; returns it with its whole log, and its start and end.
    fn complete(&self) -> (Run, Instant, Instant) {
        let t = Instant::now();
        let mut run = self.start(false);
        let status = run.child.wait().expect("wait for the agent");
        run.seen.extend(run.events.iter());
        assert!(status.success(), "agent --once failed: {status}");
        assert!(
            run.count(Event::Observed) > 0,
            "the agent ended before reading the kernel"
        );
        (run, t, Instant::now())
    }
}

/// The longest a run may take to reach a phase.
const LIMIT: Duration = Duration::from_secs(600);

/// What a kill left in the kernel, from cheap reads (no full dump of 10,000 servers):
/// virtual servers, real servers, set entries, addresses.
fn partial() -> [usize; 4] {
    let out = sh("grep -c -E '^(TCP|UDP|SCTP) ' /proc/net/ip_vs || true; \
        grep -c -- '->' /proc/net/ip_vs || true; \
        ipset list -t 2>/dev/null | awk '/^Number of entries/ {n += $4} END {print n + 0}'; \
        (ip -o addr show dev kube-ipvs0 2>/dev/null || true) | wc -l");
    let n: Vec<usize> = out
        .split_whitespace()
        .map(|w| w.parse().unwrap_or(0))
        .collect();
    [0, 1, 2, 3].map(|i| n.get(i).copied().unwrap_or(0))
}

#[test]
fn cold_sync_killed_at_many_points_converges_exactly() {
    let mut row = Row::new("crash", "kill -9 during a cold sync, restart");
    let started = Instant::now();
    let seed = seed();
    let (n, points) = (services(), points());
    let removed_ids = removed_services(n);
    assert!(
        removed_ids[1] < n,
        "RELIABILITY_CRASH_SERVICES={n}: too few Services"
    );
    // Runs in all (killed or finished) before the test gives up on landing its kills.
    let max_runs = 3 * points;
    println!(
        "crash: {n} Services, {points} kill points, seed {seed} (RELIABILITY_SEED={seed} to repeat these kill points)"
    );
    let mut rng = Rng(seed);

    let dir = std::env::temp_dir().join("agent-lab-crash-cold-sync");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kept = list((0..n).filter(|i| !removed_ids.contains(i)));
    let removed = list(removed_ids.into_iter());
    std::fs::write(dir.join("kept.json"), kept).unwrap();
    let agent = Agent { dir: dir.clone() };
    let removed_file = dir.join("removed.json");

    // The reference: an uninterrupted run without the removed Services, checked against the
    // counts the manifests call for. Its log gives the cold sync's shape: the steps of
    // operations it writes and how long each takes.
    fresh_node();
    let (run, start, end) = agent.complete();
    let observed = run.first(Event::Observed).expect("observed");
    let first_write = run.first(Event::Step).unwrap_or(observed);
    let steps = run.count(Event::Step);
    let writes = end - first_write;
    let per_step = writes / steps.max(1) as u32;
    let reference = kernel_state();
    let want = desired_counts(n, &removed_ids);
    let (counts, unmatched) = found_counts(&parts(&reference));
    assert_eq!(counts, want, "an uninterrupted run");
    assert_eq!(unmatched, 0, "virtual servers and claims differ");
    let rules: Vec<&str> = parts(&reference)
        .rules
        .into_iter()
        .filter(|l| l.starts_with("-A"))
        .collect();
    let dups = duplicates(&rules, &[]);
    assert!(dups.is_empty(), "duplicate rules: {dups:?}");
    assert!(
        steps >= 2 * points as usize,
        "the cold sync wrote only {steps} steps: too few for {points} kill points"
    );
    println!(
        "crash: reference run {:.1?} (kernel read after {:.1?}, plan {:.1?}, {steps} steps written in {writes:.1?}), \
         {} virtual servers, {} real servers; {:.1?} so far",
        end - start,
        observed - start,
        first_write - observed,
        want.virtual_servers,
        want.real_servers,
        started.elapsed()
    );

    // The chain: kill k lands in step ((k + u) / points) of the reference's sequence (u
    // uniform in [0, 1)), counted from the steps the runs before it completed, at a random
    // moment within that step: the kill points sweep the whole cold sync, in order. A run
    // killed resumes in the next: observe, plan what is left, write. The removed Services
    // come and go between kills. Should a run finish before its kill (a resumed plan can be
    // shorter than the reference's remainder), it is no kill point: the chain starts over in
    // a fresh namespace.
    fresh_node();
    let total = want.virtual_servers + want.real_servers + want.addresses;
    let mut kills: Vec<String> = Vec::new();
    let mut progress: Vec<f64> = Vec::new();
    let mut present = false;
    let mut done_steps = 0usize;
    let mut restarts = 0u32;
    let mut runs = 0u32;
    while (kills.len() as u32) < points {
        assert!(
            runs < max_runs,
            "{runs} runs landed only {} kill points",
            kills.len()
        );
        runs += 1;
        let k = kills.len() as u32;
        if present {
            std::fs::write(&removed_file, &removed).unwrap();
        } else {
            let _ = std::fs::remove_file(&removed_file);
        }
        present = !present;
        let t = Instant::now();
        let daemon = runs.is_multiple_of(2);
        let mode = if daemon { "daemon" } else { "--once" };
        let target = ((f64::from(k) + rng.unit()) * steps as f64 / f64::from(points)) as usize;
        // Kill during this run's step `nth` (1-based), after `nth - 1` of them were logged.
        let nth = target.saturating_sub(done_steps).max(2);
        let mut run = agent.start(daemon);
        let reached = run.wait_for(Event::Step, nth - 1, LIMIT);
        let within = per_step.mul_f64(rng.unit());
        if reached {
            std::thread::sleep(within);
        }
        // A run that ended (or reported its sync) before the kill is still stopped and reaped.
        let landed = run.kill() && reached;
        if !landed {
            println!(
                "crash: run {runs} ({mode}) finished after {} steps, before its kill in step {nth}; \
                 starting the chain over in a fresh namespace",
                run.count(Event::Step)
            );
            restarts += 1;
            fresh_node();
            done_steps = 0;
            continue;
        }
        done_steps += run.count(Event::Step);
        let [vs, rs, entries, addresses] = partial();
        let done = (vs + rs + addresses) as f64 / total as f64;
        println!(
            "crash: kill {k}: {mode} killed in its step {nth} (+{within:.1?}; target step {target} of {steps}), \
             left {vs} virtual servers, {rs} real servers, {entries} set entries, {addresses} addresses \
             (~{:.0}%); {:.1?}",
            done * 100.0,
            t.elapsed()
        );
        kills.push(format!("{mode} in step {nth} (+{within:.1?})"));
        progress.push(done);
    }
    let _ = std::fs::remove_file(&removed_file);
    let t = Instant::now();
    let (_, s0, s1) = agent.complete();
    let last = s1 - s0;
    let got = kernel_state();
    println!(
        "crash: the last run took {last:.1?}, reading the kernel {:.1?}",
        t.elapsed() - last
    );

    let (extra, lost) = difference(&got, &reference);
    let (g, r) = (parts(&got), parts(&reference));
    let dups: Vec<String> = [
        duplicates(&g.ipvs, &r.ipvs),
        duplicates(&g.sets, &r.sets),
        duplicates(&g.rules, &r.rules),
    ]
    .concat();
    let (counts, unmatched) = found_counts(&g);
    let elapsed = started.elapsed();
    println!(
        "crash: {} kills in {runs} runs ({restarts} chain restarts), {elapsed:.1?}",
        kills.len()
    );
    let (lo, hi) = progress
        .iter()
        .fold((1.0f64, 0.0f64), |(lo, hi), p| (lo.min(*p), hi.max(*p)));
    row.tried(format!(
        "{} kills (seed {seed}, --once and daemon alternately) at {:.0}%..{:.0}% of a cold sync of {n} Services \
         ({} virtual servers, {} real servers, {steps} steps of writes; {:.0?} uninterrupted), \
         {} Services removed and re-created while dead",
        kills.len(),
        lo * 100.0,
        hi * 100.0,
        want.virtual_servers,
        want.real_servers,
        end - start,
        removed_ids.len(),
    ));
    row.lost(format!(
        "{} leftover, {} duplicate, {} missing objects",
        extra.len(),
        dups.len(),
        lost.len()
    ));
    assert!(
        extra.is_empty() && lost.is_empty() && dups.is_empty() && counts == want && unmatched == 0,
        "after kills {kills:?}: {} leftover {:?}, {} missing {:?}, duplicates {dups:?}, counts {counts:?} (want {want:?}), \
         {unmatched} servers and claims unmatched",
        extra.len(),
        extra.iter().take(10).collect::<Vec<_>>(),
        lost.len(),
        lost.iter().take(10).collect::<Vec<_>>(),
    );
}

/// A kill while `iptables-restore` runs: the rules write dies with the agent. Were it left
/// running, it would commit after the agent's death, over whatever the next run wrote
/// meanwhile (the jumps into the built-in chains are inserted, not declared, so a late commit
/// doubles them). The tool is made slow by a wrapper in `PATH` that waits before it runs the
/// real one, so that the kill lands inside the write every time.
#[test]
fn a_rules_write_in_flight_dies_with_the_agent() {
    let node = crate::node::Node::new("orphan", 1);
    node.write("svc.yaml", &crate::node::many_services(3, None));
    let bin = std::env::temp_dir().join("agent-lab-slow-restore");
    let _ = std::fs::remove_dir_all(&bin);
    std::fs::create_dir_all(&bin).unwrap();
    let started = bin.join("started");
    for tool in [
        "iptables-nft-restore",
        "iptables-legacy-restore",
        "ip6tables-nft-restore",
        "ip6tables-legacy-restore",
    ] {
        let real = sh(&format!("command -v {tool}"));
        let script = format!(
            "#!/bin/sh\ntouch {}\nsleep 3\nexec {} \"$@\"\n",
            started.display(),
            real.trim()
        );
        let path = bin.join(tool);
        std::fs::write(&path, script).unwrap();
        sh(&format!("chmod +x {}", path.display()));
    }
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut agent = node
        .command(&["--once"])
        .env("PATH", path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the agent");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the agent never wrote its rules");
        assert!(
            agent.try_wait().unwrap().is_none(),
            "the agent ended before its rules write"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    agent.kill().unwrap();
    agent.wait().unwrap();
    // Longer than the wrapper waits: a write that survived the agent has committed by now.
    std::thread::sleep(Duration::from_secs(5));
    let rules = crate::node::kube_rules(&sh("iptables-save; ip6tables-save"));
    assert!(
        rules.is_empty(),
        "rules written after the agent was killed: {rules:#?}"
    );
    // And the next run, unhurried, makes each jump once.
    node.once(&[]);
    let jumps = sh("iptables-save -t nat | grep -c -- '-j KUBE-SERVICES$' || true");
    assert_eq!(
        jumps.trim(),
        "2",
        "PREROUTING and OUTPUT jump to KUBE-SERVICES once each"
    );
}
