//! One lab node for the agent's kernel tests: a network namespace with pods on a bridge, an
//! outside client facing the node address, manifests in a directory and the real agent binary;
//! plus the manifests and kernel-state readers the tests share.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use lab::guest::{NamedNetns, Netns, sh};
use lab::net::{Pod, ask_tcp, bridge, client, within};

use crate::fake_apiserver;

/// The agent binary under test.
pub const AGENT: &str = env!("CARGO_BIN_EXE_kube-proxy-ipvs");
/// The node's address, facing the outside client.
pub const NODE_IP: &str = "192.168.100.1";

/// One node: its namespace, pods, an outside client and a manifest directory.
pub struct Node {
    _ns: Netns,
    /// The manifest directory the agent reads.
    pub dir: PathBuf,
    /// The pods, 10.244.0.2 upwards.
    pub pods: Vec<Pod>,
    /// The outside client's namespace.
    pub outside: NamedNetns,
}

impl Node {
    /// A node with `pods` pods (10.244.0.2, .3, ...) answering on 8080 and 5353.
    pub fn new(test: &str, pods: usize) -> Node {
        let ns = Netns::fresh();
        sh("modprobe br_netfilter && sysctl -qw net.bridge.bridge-nf-call-iptables=1");
        bridge("10.244.0.1");
        let pods = (0..pods)
            .map(|i| {
                Pod::start(
                    &format!("{test}-p{i}"),
                    &format!("10.244.0.{}", i + 2),
                    "10.244.0.1",
                    &[8080, 5353],
                )
            })
            .collect();
        let outside = client(&format!("{test}-out"), NODE_IP, "192.168.100.2");
        let dir = std::env::temp_dir().join(format!("agent-lab-{test}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Node {
            _ns: ns,
            dir,
            pods,
            outside,
        }
    }

    pub fn write(&self, file: &str, yaml: &str) {
        std::fs::write(self.dir.join(file), yaml).unwrap();
    }

    /// Writes the standard web and DNS Services ([`web_service`], [`dns_service`]) as
    /// `web.yaml` and `dns.yaml`.
    pub fn write_web_and_dns(&self) {
        self.write("web.yaml", &web_service());
        self.write("dns.yaml", &dns_service());
    }

    pub fn remove(&self, file: &str) {
        std::fs::remove_file(self.dir.join(file)).unwrap();
    }

    pub fn command(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(AGENT);
        c.arg("--manifests")
            .arg(&self.dir)
            .args(["--hostname-override", "node-a"]);
        if !extra.contains(&"--cluster-cidr") {
            c.args(["--cluster-cidr", "10.244.0.0/16"]);
        }
        c.args(extra);
        c
    }

    /// Runs the agent with `--once` and panics with its output unless it succeeds.
    pub fn once(&self, extra: &[&str]) -> Output {
        let out = self
            .command(&[&["--once"], extra].concat())
            .output()
            .expect("run the agent");
        assert!(
            out.status.success(),
            "agent failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    pub fn spawn(&self, extra: &[&str]) -> Child {
        self.command(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the agent")
    }

    pub fn ask_from_outside(&self, addr: &str) -> Result<String, String> {
        let addr: SocketAddr = addr.parse().unwrap();
        within(&self.outside, move || ask_tcp(addr))
    }

    pub fn ask_from_pod(&self, pod: usize, addr: &str) -> Result<String, String> {
        let addr: SocketAddr = addr.parse().unwrap();
        within(&self.pods[pod].ns, move || ask_tcp(addr))
    }
}

/// The standard web Service: NodePort 30080 on 10.96.0.10:80, to 8080 on pod 0 (node-a) and
/// pod 1 (node-b).
pub fn web_service() -> String {
    node_port_service("web", "10.96.0.10", 30080, &[(0, "node-a"), (1, "node-b")])
}

/// The standard DNS Service: 10.96.0.53:53/UDP, to 5353 on pod 1 (node-b).
pub fn dns_service() -> String {
    service("dns", "10.96.0.53", "", "UDP", 53, 5353, &[(1, "node-b")])
}

/// A Service and its EndpointSlice, as YAML. `endpoints` are (pod index, node name).
pub fn service(
    name: &str,
    cluster_ip: &str,
    extra_spec: &str,
    proto: &str,
    port: u16,
    target: u16,
    endpoints: &[(usize, &str)],
) -> String {
    let eps: String = endpoints
        .iter()
        .map(|(i, node)| {
            format!(
                "  - {{addresses: [10.244.0.{}], nodeName: {node}}}\n",
                i + 2
            )
        })
        .collect();
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: t}}\n\
         spec:\n  clusterIP: {cluster_ip}\n{extra_spec}  ports: [{{name: p, protocol: {proto}, port: {port}, targetPort: {target}}}]\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: {name}-x, namespace: t, labels: {{kubernetes.io/service-name: {name}}}}}\n\
         addressType: IPv4\nports: [{{name: p, protocol: {proto}, port: {target}}}]\nendpoints:\n{eps}"
    )
}

pub fn node_port_service(
    name: &str,
    cluster_ip: &str,
    node_port: u16,
    endpoints: &[(usize, &str)],
) -> String {
    service(
        name,
        cluster_ip,
        "  type: NodePort\n",
        "TCP",
        80,
        8080,
        endpoints,
    )
    .replace(
        "targetPort: 8080}]",
        &format!("targetPort: 8080, nodePort: {node_port}}}]"),
    )
}

pub fn names(n: usize, f: impl Fn() -> Result<String, String>) -> Vec<String> {
    (0..n)
        .map(|i| f().unwrap_or_else(|e| panic!("request {i}: {e}")))
        .collect()
}

/// Runs the fake API server on its own thread (in the test's namespace) until dropped. It
/// derefs to the [`fake_apiserver::FakeApiServer`], so a test can apply and delete objects and
/// inject faults while the agent runs.
pub struct ApiServer {
    /// The server's address.
    pub url: String,
    server: Option<std::sync::Arc<fake_apiserver::FakeApiServer>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ApiServer {
    /// Starts the server holding `objects`.
    pub fn start(objects: Vec<serde_json::Value>) -> ApiServer {
        let (server_tx, server_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let server = fake_apiserver::FakeApiServer::start().await;
                for o in objects {
                    server.apply(o);
                }
                server_tx.send(std::sync::Arc::new(server)).unwrap();
                let _ = stopped.await;
            });
        });
        let server = server_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("fake API server started");
        ApiServer {
            url: server.url(),
            server: Some(server),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl std::ops::Deref for ApiServer {
    type Target = fake_apiserver::FakeApiServer;

    fn deref(&self) -> &Self::Target {
        self.server
            .as_deref()
            .expect("the server runs until dropped")
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.server.take();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The kernel state that matters, in a comparable form: virtual servers, set contents and
/// headers (without the random hash seed), our rules.
pub fn kernel_state() -> String {
    let mut ipvs: Vec<String> = stable_ipvs_dump().lines().map(str::to_string).collect();
    ipvs.sort();
    // IPVS holds no two equal services or destinations: a repeated line is the listing's
    // (see `stable_ipvs_dump`).
    ipvs.dedup();
    let mut sets: Vec<String> = sh("ipset save")
        .lines()
        .map(|l| l.split(" initval ").next().unwrap_or(l).to_string())
        .collect();
    sets.sort();
    let rules = kube_rules(&sh("iptables-save"));
    // The link's name and state, then its addresses sorted: the order the kernel lists them
    // in is the order they were added, which a crash and a resumed sync may change.
    let link = sh("ip -br addr show kube-ipvs0");
    let mut words: Vec<&str> = link.split_whitespace().collect();
    let at = words.len().min(2);
    words[at..].sort_unstable();
    format!(
        "{}\n--\n{}\n--\n{}\n--\n{}",
        ipvs.join("\n"),
        sets.join("\n"),
        rules.join("\n"),
        words.join(" ")
    )
}

/// The lines of an `iptables-save` output that name a KUBE-* chain.
pub fn kube_rules(save: &str) -> Vec<String> {
    save.lines()
        .filter(|l| l.contains("KUBE-"))
        .map(str::to_string)
        .collect()
}

/// `ipvsadm -Sn`, read until two dumps in a row agree (as sorted sets of lines). A dump larger
/// than one netlink message is resumed by position, and the kernel counts that position over
/// the services of every network namespace: while another test changes IPVS in its own
/// namespace, a large dump can repeat or skip entries of ours (the kernel's objects are fine;
/// only their listing moves). A [`churn_elsewhere`] pauses while this reads; other tests do
/// not, so the dump returned has its repeated lines dropped (a valid dump has none).
pub fn stable_ipvs_dump() -> String {
    let _reading = Settling::start();
    let normal = |dump: &str| {
        let mut lines: Vec<&str> = dump.lines().collect();
        lines.sort_unstable();
        lines.dedup();
        lines.join("\n")
    };
    let mut last = sh("ipvsadm -Sn");
    for _ in 0..20 {
        let now = sh("ipvsadm -Sn");
        if normal(&now) == normal(&last) {
            let mut seen = std::collections::HashSet::new();
            return now
                .lines()
                .filter(|l| seen.insert(*l))
                .map(|l| format!("{l}\n"))
                .collect();
        }
        last = now;
    }
    panic!("ipvsadm -Sn never gave the same dump twice in a row");
}

/// Tests reading a settled dump right now ([`stable_ipvs_dump`]).
static SETTLING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts one reader in [`SETTLING`] while it lives.
struct Settling;

impl Settling {
    fn start() -> Settling {
        SETTLING.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Settling
    }
}

impl Drop for Settling {
    fn drop(&mut self) {
        SETTLING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// GETs `path` from `addr` and returns the status code and body.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    try_http_get(addr, path).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

/// GETs `path` from `addr`: the status code and body, or why there is none (nothing
/// listening yet, a cut answer).
pub fn try_http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    lab::net::http_get(addr, path)
}

/// Runs the agent with `args` to its end and checks that it succeeded; its output.
pub fn run_agent(args: &[&str]) -> Output {
    let out = Command::new(AGENT).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "kube-proxy-ipvs {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs one `--once` sync of node-a from the (fake) API server at `url` and checks that it
/// succeeded.
pub fn once_from_api(url: &str) -> Output {
    run_agent(&[
        "--master",
        url,
        "--hostname-override",
        "node-a",
        "--cluster-cidr",
        "10.244.0.0/16",
        "--once",
    ])
}

/// Runs the agent's `--cleanup` for node-a and checks that it succeeded.
pub fn cleanup() {
    run_agent(&["--hostname-override", "node-a", "--cleanup"]);
}

/// `n` ClusterIP Services `s0..` on 10.97.x.y:80 with one endpoint each, as one manifest.
pub fn many_services(n: usize, skip: Option<usize>) -> String {
    services_where(n, |i| Some(i) != skip)
}

/// The Services of [`many_services`] whose index `keep` accepts.
pub fn services_where(n: usize, keep: impl Fn(usize) -> bool) -> String {
    (0..n)
        .filter(|i| keep(*i))
        .map(|i| {
            service(
                &format!("s{i}"),
                &format!("10.97.{}.{}", i / 250, i % 250 + 1),
                "",
                "TCP",
                80,
                8080,
                &[(0, "node-a")],
            ) + "\n---\n"
        })
        .collect()
}

/// Another namespace adding and clearing 300 virtual servers over and over
/// ([`lab::churn::IpvsChurn`]), pausing while a test reads a [`stable_ipvs_dump`]: the churn
/// is for the agent's dumps, not the tests' (a 10,000-service dump might never settle).
pub fn churn_elsewhere() -> lab::churn::IpvsChurn {
    lab::churn::IpvsChurn::start(300, || {
        SETTLING.load(std::sync::atomic::Ordering::SeqCst) > 0
    })
}

/// Asserts that `got` is the kernel state `want`; when it is not, says what differs (see
/// [`state_difference`]) in the panic and in `row`'s "lost" cell (CI shows the summary table,
/// not always the panic message).
pub fn assert_state(row: &mut lab::report::Row, context: &str, got: &str, want: &str) {
    if got != want {
        let difference = state_difference(got, want);
        row.lost(format!("{context}: {difference}"));
        panic!("{context}: {difference}");
    }
}

/// What differs between two [`kernel_state`]s, line by line, for a failure message: the
/// lines only in `got`, those only in `want` and those repeated a different number of times
/// (at most 10 of each), or that they hold the same objects in another order (the addresses
/// of `kube-ipvs0` are one line).
pub fn state_difference(got: &str, want: &str) -> String {
    use std::collections::BTreeMap;
    let count = |s: &str| {
        let mut c: BTreeMap<String, usize> = BTreeMap::new();
        for l in s.lines() {
            *c.entry(l.chars().take(160).collect()).or_default() += 1;
        }
        c
    };
    let (g, w) = (count(got), count(want));
    let extra: Vec<&String> = g.keys().filter(|l| !w.contains_key(*l)).collect();
    let missing: Vec<&String> = w.keys().filter(|l| !g.contains_key(*l)).collect();
    let repeated: Vec<String> = g
        .iter()
        .filter_map(|(l, n)| {
            let m = w.get(l)?;
            (m != n).then(|| format!("{n}x (want {m}x) {l}"))
        })
        .collect();
    fn words(s: &str) -> Vec<&str> {
        let mut w: Vec<&str> = s.split_whitespace().collect();
        w.sort();
        w
    }
    if extra.is_empty() && missing.is_empty() && repeated.is_empty() && words(got) == words(want) {
        return "the same objects in another order".into();
    }
    format!(
        "{} extra line(s) {:?}; {} missing line(s) {:?}; {} repeated differently {:?}",
        extra.len(),
        extra.iter().take(10).collect::<Vec<_>>(),
        missing.len(),
        missing.iter().take(10).collect::<Vec<_>>(),
        repeated.len(),
        repeated.iter().take(10).collect::<Vec<_>>()
    )
}

/// Whether `line` opens a klog line (`I1126 08:25:47.909783 ...`): a severity letter and the
/// month and day; any other line of the agent's text log continues a multi-line value.
pub fn is_log_header(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 5 && b"IWEF".contains(&b[0]) && b[1..5].iter().all(u8::is_ascii_digit)
}

/// The events of a klog text log, one string each, as the agent wrote them: a multi-line
/// value's lines (`key=<` ... `>`) joined to their line, and Go's quoting of `"` and `\`
/// undone, so that a message or a reason can be matched as the code spells it.
pub fn log_events(log: &str) -> Vec<String> {
    let mut events: Vec<String> = Vec::new();
    for line in log.lines() {
        match events.last_mut() {
            Some(last) if !is_log_header(line) => {
                last.push('\n');
                last.push_str(line);
            }
            _ => events.push(line.to_string()),
        }
    }
    events
        .into_iter()
        .map(|e| e.replace("\\\"", "\"").replace("\\\\", "\\"))
        .collect()
}
