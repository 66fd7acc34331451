//! Reliability: drift repair. A running agent (`--ipvs-sync-period 3s`) holds three Services
//! with traffic while its kernel state is tampered with from outside, one kind at a time: a
//! virtual server deleted, a real server re-weighted, sets flushed, destroyed or given a
//! foreign entry, chains flushed or deleted, jumps deleted, addresses and `kube-ipvs0` itself
//! removed, an IPVS sysctl reset. For each, the kernel must be back to exactly its state before
//! the tampering by the first full sync after it, which starts within one sync period (the
//! bound adds that sync's own duration, read from the agent's histogram), traffic must
//! answer, `kube_proxy_ipvs_drift_repaired_total{kind}` must have gone up by the objects
//! repaired and nothing else, and the agent's log must hold exactly one drift warning for it:
//! the sync after the repair finds nothing left to repair.
//!
//! Every tampering is done right after a full sync has been reported, so the measured repair
//! time is the worst case: a whole period. Each kind is a row of the summary table; a failed
//! kind does not stop the others (the test fails at the end, naming them). The agent logs at
//! `-v 4`, so that a failure shows what each sync read and applied. Wall time in the VM:
//! about 12 s per kind (wait for a full sync, a period to the repair, one more period to see
//! it is not logged again), 13 kinds: 2 min 45 s.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use lab::guest::{sh, try_sh};
use lab::net::{ask_udp, within};
use lab::report::Row;

use crate::node::{NODE_IP, Node, kernel_state, node_port_service, service, try_http_get};

/// The agent's `--ipvs-sync-period`.
const PERIOD: Duration = Duration::from_secs(3);
/// What the emulated CPU may add to the waits (a full sync is reported, then the test sees
/// it, tampers, and polls for the next one); the repairing sync's own duration (reading the
/// kernel back and applying the repair: 0.5 to 2.5 s under TCG, an `iptables-restore` alone
/// takes over a second, more on a loaded machine) is measured and added to the bound.
const MARGIN: Duration = Duration::from_secs(3);
/// The slack between the tampering and the repairing sync's start beyond one period: the
/// test's polling (50 ms) and the metrics' scrape.
const SLACK: Duration = Duration::from_millis(1500);
/// Where the agent serves its metrics (inside the test's network namespace).
const METRICS: &str = "127.0.0.1:10249";
/// The text of the agent's drift warning.
const WARNING: &str = "repaired kernel state changed outside the agent";

/// The agent, killed when dropped, with its log in a file.
struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    fn start(node: &Node) -> Agent {
        let log = std::env::temp_dir().join("agent-lab-drift.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = node
            .command(&[
                "--ipvs-sync-period",
                "3s",
                "--metrics-bind-address",
                METRICS,
                "-v",
                "4",
            ])
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start the agent");
        Agent { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The drift warnings logged so far.
    fn warnings(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(WARNING))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `/metrics`, or `None` while the server does not answer.
fn metrics() -> Option<String> {
    try_http_get(METRICS, "/metrics").ok().map(|(_, body)| body)
}

/// The value of the series `name{labels}` (`labels` as printed, without braces).
fn series(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse::<f64>().ok())
}

/// Full syncs reported so far.
fn full_syncs() -> u64 {
    metrics()
        .and_then(|t| series(&t, "kube_proxy_ipvs_syncs_total", "type=\"full\""))
        .map(|v| v as u64)
        .unwrap_or(0)
}

/// Seconds spent in syncs so far: the sum of kube-proxy's sync duration histogram.
fn sync_seconds() -> f64 {
    let text = metrics().expect("/metrics answers");
    series(
        &text,
        "kubeproxy_sync_proxy_rules_duration_seconds_sum",
        "ip_family=\"IPv4\"",
    )
    .expect("the sync duration histogram")
}

/// `kube_proxy_ipvs_drift_repaired_total` by kind.
fn drift_metric() -> BTreeMap<String, u64> {
    let text = metrics().expect("/metrics answers");
    let prefix = "kube_proxy_ipvs_drift_repaired_total{kind=\"";
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|rest| {
            let (kind, value) = rest.split_once("\"} ")?;
            Some((kind.to_string(), value.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// Polls `check` every 50 ms until it holds or `limit` passes; returns how long it took.
fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if check() {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for the next full sync to be reported and returns the count of full syncs.
fn next_full_sync() -> u64 {
    let before = full_syncs();
    let mut now = before;
    wait_until(2 * PERIOD + MARGIN, || {
        now = full_syncs();
        now > before
    })
    .unwrap_or_else(|| panic!("no full sync within {:?}", 2 * PERIOD + MARGIN));
    now
}

/// The agent's sysctls that a tampering may change.
const SYSCTLS: [&str; 4] = [
    "net/ipv4/vs/conntrack",
    "net/ipv4/vs/expire_nodest_conn",
    "net/ipv4/vs/expire_quiescent_template",
    "net/ipv4/ip_forward",
];

/// [`kernel_state`] with `kube-ipvs0`'s addresses sorted (a re-made link binds them in another
/// order) and the agent's sysctls; says so when `kube-ipvs0` is missing.
fn state() -> String {
    let (ok, out) = try_sh("ip -br addr show kube-ipvs0");
    if !ok {
        return format!("no kube-ipvs0: {out}");
    }
    let full = kernel_state();
    let (rest, link) = full.rsplit_once("\n--\n").expect("sections");
    let mut head: Vec<&str> = link.split_whitespace().collect();
    let mut addresses = head.split_off(2.min(head.len()));
    addresses.sort_unstable();
    let sysctls: Vec<String> = SYSCTLS
        .iter()
        .map(|k| {
            let v = std::fs::read_to_string(Path::new("/proc/sys").join(k)).unwrap_or_default();
            format!("{k}={}", v.trim())
        })
        .collect();
    format!(
        "{rest}\n--\n{} {}\n--\n{}",
        head.join(" "),
        addresses.join(" "),
        sysctls.join("\n")
    )
}

/// Entries of the set `name` (0 when it does not exist).
fn set_len(name: &str) -> u64 {
    let (_, out) = try_sh(&format!("ipset save {name}"));
    out.lines().filter(|l| l.starts_with("add ")).count() as u64
}

/// Addresses on `kube-ipvs0`.
fn addresses() -> u64 {
    sh("ip -br addr show kube-ipvs0").split_whitespace().count() as u64 - 2
}

/// One kind of tampering: the row's scenario, the shell commands, and the drift expected by
/// kind (worked out before tampering).
struct Tamper {
    scenario: &'static str,
    commands: Vec<&'static str>,
    expect: Box<dyn Fn() -> Vec<(&'static str, u64)>>,
}

fn tamper(
    scenario: &'static str,
    commands: &[&'static str],
    expect: impl Fn() -> Vec<(&'static str, u64)> + 'static,
) -> Tamper {
    Tamper {
        scenario,
        commands: commands.to_vec(),
        expect: Box::new(expect),
    }
}

fn tampers() -> Vec<Tamper> {
    vec![
        tamper(
            "ipvsadm -D of a virtual server",
            &["ipvsadm -D -t 10.96.0.10:80"],
            || vec![("virtual_server", 1), ("real_server", 2)],
        ),
        tamper(
            "ipvsadm -e of a real server's weight",
            &["ipvsadm -e -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 5"],
            || vec![("real_server", 1)],
        ),
        tamper(
            "ipset flush KUBE-CLUSTER-IP",
            &["ipset flush KUBE-CLUSTER-IP"],
            || vec![("set_entry", set_len("KUBE-CLUSTER-IP"))],
        ),
        tamper(
            "ipset add of a foreign entry to KUBE-CLUSTER-IP",
            &["ipset add KUBE-CLUSTER-IP 10.96.9.9,tcp:9"],
            || vec![("set_entry", 1)],
        ),
        tamper(
            "ipset destroy KUBE-IPVS-OWNED (no rule matches it)",
            &["ipset destroy KUBE-IPVS-OWNED"],
            || vec![("set", 1), ("set_entry", set_len("KUBE-IPVS-OWNED"))],
        ),
        tamper(
            "ipset destroy KUBE-NODE-PORT-TCP after deleting the rule that matches it",
            &[
                "iptables -t nat -D KUBE-NODE-PORT -p tcp -m comment --comment \
                 \"Kubernetes nodeport TCP port for masquerade purpose\" \
                 -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ",
                "ipset destroy KUBE-NODE-PORT-TCP",
            ],
            || {
                vec![
                    ("set", 1),
                    ("set_entry", set_len("KUBE-NODE-PORT-TCP")),
                    ("chain", 1),
                ]
            },
        ),
        tamper(
            "iptables -D of the PREROUTING -> KUBE-SERVICES jump",
            &["iptables -t nat -D PREROUTING -m comment --comment \
               \"kubernetes service portals\" -j KUBE-SERVICES"],
            || vec![("jump", 1)],
        ),
        tamper(
            "iptables -F + -X of KUBE-POSTROUTING after deleting its POSTROUTING jump",
            &[
                "iptables -t nat -D POSTROUTING -m comment --comment \
                 \"kubernetes postrouting rules\" -j KUBE-POSTROUTING",
                "iptables -t nat -F KUBE-POSTROUTING",
                "iptables -t nat -X KUBE-POSTROUTING",
            ],
            || vec![("chain", 1), ("jump", 1)],
        ),
        tamper(
            "iptables -F + -X of KUBE-LOAD-BALANCER (nothing jumps to it)",
            &[
                "iptables -t nat -F KUBE-LOAD-BALANCER",
                "iptables -t nat -X KUBE-LOAD-BALANCER",
            ],
            || vec![("chain", 1)],
        ),
        tamper(
            "iptables -F of KUBE-FORWARD (filter)",
            &["iptables -t filter -F KUBE-FORWARD"],
            || vec![("chain", 1)],
        ),
        tamper(
            "ip addr del of a ClusterIP from kube-ipvs0",
            &["ip addr del 10.96.0.11/32 dev kube-ipvs0"],
            || vec![("address", 1)],
        ),
        tamper(
            "ip link del kube-ipvs0",
            &["ip link del kube-ipvs0"],
            || vec![("link", 1), ("address", addresses())],
        ),
        tamper(
            "sysctl net.ipv4.vs.conntrack=0",
            &["echo 0 > /proc/sys/net/ipv4/vs/conntrack"],
            || vec![("sysctl", 1)],
        ),
    ]
}

/// Every Service answers: the web ClusterIP and its NodePort, the api ClusterIP (TCP) from
/// outside the node, the dns ClusterIP (UDP) from the node.
fn traffic(node: &Node) -> Result<(), String> {
    let pods: Vec<String> = node.pods.iter().map(|p| p.name.clone()).collect();
    let tcp = [
        "10.96.0.10:80".to_string(),
        format!("{NODE_IP}:30080"),
        "10.96.0.11:80".to_string(),
    ];
    for addr in tcp {
        let name = node.ask_from_outside(&addr)?;
        if !pods.contains(&name) {
            return Err(format!("{addr} answered {name:?}"));
        }
    }
    let dns: SocketAddr = "10.96.0.53:53".parse().unwrap();
    let name = within(&node.outside, move || ask_udp(dns))?;
    if name != pods[1] {
        return Err(format!("{dns} answered {name:?}"));
    }
    Ok(())
}

/// Runs one tampering against the agent and checks its repair; fills in `row`.
fn check(node: &Node, agent: &Agent, reference: &str, t: &Tamper, row: &mut Row) {
    row.tried(t.commands.join("; "));
    // A kind that failed before may leave its repair to a later sync.
    let settled = wait_until(3 * PERIOD, || state() == reference);
    assert!(settled.is_some(), "the kernel was not settled before");
    let expect: BTreeMap<String, u64> = (t.expect)()
        .into_iter()
        .map(|(k, n)| (k.to_string(), n))
        .collect();
    // Right after a full sync: the next one is a whole period away.
    let synced = next_full_sync();
    let spent_before = sync_seconds();
    let metric_before = drift_metric();
    let warnings_before = agent.warnings().len();
    let log_before = agent.log().len();
    for c in &t.commands {
        sh(c);
    }
    let tampered_at = Instant::now();
    let tampered = state();
    assert!(
        tampered != reference || full_syncs() > synced,
        "the tampering changed nothing"
    );
    // The first full sync after the tampering must repair it all: once it is reported, the
    // kernel is back to the reference.
    let limit = 2 * PERIOD + 2 * MARGIN;
    wait_until(limit, || full_syncs() > synced)
        .unwrap_or_else(|| panic!("no full sync within {limit:?} after the tampering"));
    let repaired = tampered_at.elapsed();
    // The repairing sync's own duration (the only sync in between: nothing else changes).
    let took = Duration::from_secs_f64((sync_seconds() - spent_before).max(0.0));
    let after = state();
    assert!(
        after == reference,
        "the first full sync after the tampering did not repair it:\nwant:\n{reference}\n\
         have:\n{after}\nlog since:\n{}",
        &agent.log()[log_before..]
    );
    // Within one period the repairing sync starts; it is done once it has run.
    assert!(
        repaired <= PERIOD + took + SLACK,
        "repaired in {repaired:?}: more than one sync period ({PERIOD:?}) + the sync itself \
         ({took:?}) + {SLACK:?}; log since:\n{}",
        &agent.log()[log_before..]
    );
    traffic(node).unwrap_or_else(|e| panic!("traffic after the repair: {e}"));
    // The sync after the repairing one is reported too: it found nothing.
    wait_until(limit, || full_syncs() >= synced + 2)
        .unwrap_or_else(|| panic!("no second full sync after the repair within {limit:?}"));
    let metric_after = drift_metric();
    let delta: BTreeMap<String, u64> = metric_after
        .iter()
        .map(|(k, v)| {
            let before = metric_before.get(k).copied().unwrap_or(0);
            (k.clone(), v.saturating_sub(before))
        })
        .filter(|(_, d)| *d > 0)
        .collect();
    assert_eq!(delta, expect, "drift metric by kind: {metric_after:?}");
    let warnings = agent.warnings();
    let new = &warnings[warnings_before..];
    assert_eq!(new.len(), 1, "drift warnings: {new:#?}");
    for (kind, n) in &expect {
        assert!(
            new[0].contains(&format!("{n} {kind}")),
            "the warning does not name {n} {kind}: {}",
            new[0]
        );
    }
    let metric: Vec<String> = expect.iter().map(|(k, n)| format!("{k} +{n}")).collect();
    row.lost(format!(
        "repaired by the next full sync, {:.1} s after (period {} s; the sync took {:.1} s), \
         metric {}, logged once",
        repaired.as_secs_f64(),
        PERIOD.as_secs(),
        took.as_secs_f64(),
        metric.join(", ")
    ));
    eprintln!("drift: {}: {}", t.scenario, new[0]);
}

#[test]
fn tampered_kernel_state_is_repaired_within_a_sync_period_counted_and_logged_once() {
    let node = Node::new("drift", 2);
    node.write(
        "web.yaml",
        &node_port_service("web", "10.96.0.10", 30080, &[(0, "node-a"), (1, "node-a")]),
    );
    node.write(
        "api.yaml",
        &service("api", "10.96.0.11", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    node.write(
        "dns.yaml",
        &service("dns", "10.96.0.53", "", "UDP", 53, 5353, &[(1, "node-a")]),
    );
    let agent = Agent::start(&node);
    wait_until(Duration::from_secs(30), || {
        sh("ipvsadm -Sn").contains("10.96.0.53") && metrics().is_some()
    })
    .unwrap_or_else(|| panic!("the agent did not come up:\n{}", agent.log()));
    // Settled: a full sync after the first one found the kernel as the agent left it.
    next_full_sync();
    next_full_sync();
    let reference = state();
    traffic(&node).unwrap_or_else(|e| panic!("traffic before any tampering: {e}"));
    assert!(
        agent.warnings().is_empty(),
        "drift before any tampering: {:#?}",
        agent.warnings()
    );
    // A set that a rule matches cannot be destroyed from outside: only the sets no rule
    // matches (KUBE-IPVS-OWNED, empty ones) or whose rules were deleted first.
    let (destroyed, why) = try_sh("ipset destroy KUBE-CLUSTER-IP");
    assert!(!destroyed, "a set in use was destroyed");
    assert!(why.contains("in use"), "{why}");

    let mut failed = Vec::new();
    for t in tampers() {
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut row = Row::new("drift", t.scenario);
            check(&node, &agent, &reference, &t, &mut row);
        }));
        if outcome.is_err() {
            failed.push(t.scenario);
        }
    }
    assert!(failed.is_empty(), "not repaired as required: {failed:#?}");
    assert_eq!(
        agent.warnings().len(),
        tampers().len(),
        "one drift warning per tampering"
    );
}
