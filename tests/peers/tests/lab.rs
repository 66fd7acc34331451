//! The differential corpus, run inside the lab VM (`cargo run -p lab -- test -p peers`): for
//! each scenario, upstream kube-proxy (IPVS mode) and the agent run as the same node in two
//! network namespaces against the host's real kube-apiserver, with the same objects and
//! flags; after they start and after each step, the kernel state each programmed is read with
//! the real tools and compared. A difference fails the scenario unless the README's "Where it
//! differs" lists it (see `peers::compare`).
//!
//! `PEERS_SCENARIOS` picks the scenarios: `ci` (default: those marked `ci: true`), `all`, or a
//! comma-separated list of file-stem prefixes.

mod api;
mod beside;
mod e2e;
mod node;
mod other_modes;
mod soak;
mod traffic;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use lab::controlplane::{ControlPlane, Forward};
use lab::guest::Netns;
use peers::compare::{self, Difference, Known};
use peers::implied;
use peers::scenario::{self, Scenario};
use peers::state::Sections;

use api::Cluster;
use node::{NodeNs, Program};
use traffic::Pods;

/// How long a program may take to start and sync under emulation.
const SYNC_LIMIT: Duration = Duration::from_secs(180);

/// The build directory of this test (target/PROFILE; the test is target/PROFILE/deps/lab-HASH).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/PROFILE")
        .to_path_buf()
}

/// The agent binary, built beside this test.
fn agent() -> PathBuf {
    profile_dir().join("kube-proxy-ipvs")
}

/// Upstream kube-proxy: built on the host by tests/peers/build.sh into target/peers and copied
/// into the guest at the same path.
fn kube_proxy() -> PathBuf {
    profile_dir()
        .parent()
        .expect("target")
        .join("peers/kube-proxy")
}

/// What one scenario came to.
struct Outcome {
    id: String,
    steps: usize,
    /// Per compared point (start, then each step): its name and differences.
    points: Vec<(String, Vec<Difference>)>,
    error: Option<String>,
    /// How long the scenario took, start to end.
    took: Duration,
    /// What its probes got, by step: kube-proxy's answers (the agent's where they differ).
    traffic: Vec<String>,
}

impl Outcome {
    fn unexplained<'a>(&'a self, known: &[Known]) -> Vec<(&'a str, &'a Difference)> {
        self.points
            .iter()
            .flat_map(|(p, d)| {
                compare::classify(d, known, &self.id)
                    .0
                    .into_iter()
                    .map(move |d| (p.as_str(), d))
            })
            .collect()
    }
}

/// The flags both programs get besides the scenario's, and the config file when there is one.
fn common_args(
    s: &Scenario,
    node: &str,
    kubeconfig: &Path,
    dir: &Path,
    who: &str,
) -> Result<Vec<String>> {
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--hostname-override={node}"),
        "--proxy-mode=ipvs".into(),
        "--healthz-bind-address=0.0.0.0:10256".into(),
        "--metrics-bind-address=127.0.0.1:10249".into(),
        // The conntrack table size is global to the kernel: neither program may touch it here.
        "--conntrack-max-per-core=0".into(),
        "--v=2".into(),
    ];
    if let Some(config) = &s.config {
        // A config file's fields win over flags in kube-proxy: the harness's own go into it.
        let mut v: serde_json::Value = serde_saphyr::from_str(config)?;
        let m = v.as_object_mut().context("config is not a mapping")?;
        type Map = serde_json::Map<String, serde_json::Value>;
        let set = |m: &mut Map, path: &[&str], value: serde_json::Value| {
            let mut cur = m;
            for k in &path[..path.len() - 1] {
                let e = cur
                    .entry(*k)
                    .or_insert_with(|| serde_json::Value::Object(Map::new()));
                cur = e.as_object_mut().expect("mapping");
            }
            cur.insert(path[path.len() - 1].into(), value);
        };
        set(
            m,
            &["clientConnection", "kubeconfig"],
            kubeconfig.display().to_string().into(),
        );
        set(m, &["hostnameOverride"], node.into());
        set(m, &["mode"], "ipvs".into());
        set(m, &["healthzBindAddress"], "0.0.0.0:10256".into());
        set(m, &["metricsBindAddress"], "127.0.0.1:10249".into());
        set(m, &["conntrack", "maxPerCore"], 0.into());
        let path = dir.join(format!("{who}-config.yaml"));
        std::fs::write(&path, serde_saphyr::to_string(&v)?)?;
        args.push(format!("--config={}", path.display()));
    }
    args.extend(s.flags.iter().cloned());
    Ok(args)
}

/// Both sides' state, read until each reads the same twice in a row (a sync may be in
/// flight), and their differences.
struct Compared {
    kube_proxy: Sections,
    agent: Sections,
    differences: Vec<Difference>,
}

/// Reads both sides until each reads the same twice in a row, then compares them; an error
/// when a reader failed.
fn settle_and_compare(kp: &NodeNs, ag: &NodeNs) -> Result<Compared> {
    let deadline = Instant::now() + Duration::from_secs(30);
    // Both sides read at once: each read is a dozen tool runs, slow under emulation.
    let both = || -> Result<(Sections, Sections)> {
        std::thread::scope(|s| {
            let k = s.spawn(|| kp.try_state());
            let a = ag.try_state();
            Ok((k.join().expect("reading kube-proxy's state")?, a?))
        })
    };
    let (mut k, mut a) = both()?;
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let (k2, a2) = both()?;
        let stable = k2 == k && a2 == a;
        (k, a) = (k2, a2);
        if stable || Instant::now() > deadline {
            let differences = compare::differences(&k, &a);
            return Ok(Compared {
                kube_proxy: k,
                agent: a,
                differences,
            });
        }
    }
}

/// The IP families (`true`: IPv6) of both the node's `eth0` addresses and its InternalIPs:
/// those every IPVS-mode proxy serves on this node.
fn families(s: &Scenario) -> BTreeSet<bool> {
    let eth0: BTreeSet<bool> = s.node.addresses.iter().map(|a| a.contains(':')).collect();
    s.internal_ips()
        .iter()
        .map(|a| a.contains(':'))
        .filter(|v6| eth0.contains(v6))
        .collect()
}

/// Checks each side against what the API server's objects imply ([`peers::implied`]): two
/// programs that wrote the same wrong state (both empty, both stale) compare equal.
fn check_implied(cluster: &Cluster, s: &Scenario, c: &Compared) -> Result<()> {
    let implied = implied::implied(
        &cluster.list_all("Service")?,
        &cluster.list_all("EndpointSlice")?,
        &families(s),
    );
    let mut problems = Vec::new();
    for (who, state) in [("kube-proxy", &c.kube_proxy), ("the agent", &c.agent)] {
        // Whatever the objects, an IPVS-mode proxy made its sets and its rules.
        let has = |section: &str, start: &str| {
            state
                .iter()
                .filter(|(name, _)| name.contains(section))
                .any(|(_, lines)| lines.iter().any(|l| l.contains(start)))
        };
        if !has("ipset", "create KUBE-") || !has("tables", "-A KUBE-") {
            problems.push(format!(
                "{who}: no KUBE- set or no KUBE- rule: an empty state"
            ));
        }
        for m in implied::missing(state, &implied) {
            problems.push(format!("{who}: {m}"));
        }
    }
    anyhow::ensure!(
        problems.is_empty(),
        "the state lacks what the API objects imply:\n{}",
        problems.join("\n")
    );
    Ok(())
}

/// Upstream kube-proxy and the agent running as one scenario's node, side by side.
struct Pair {
    kp: NodeNs,
    ag: NodeNs,
    kube_proxy: Option<Program>,
    agent: Option<Program>,
    node: String,
    /// The scenario's id (markers may be limited to scenarios).
    scenario: String,
    /// Each program's flags and the scenario's directory, for restarts.
    kp_args: Vec<String>,
    ag_args: Vec<String>,
    dir: PathBuf,
    restarts: usize,
    /// Each side's pods and outside client, when the scenario sends traffic.
    pods: Option<(Pods, Pods)>,
    /// The scenario as its node now is (steps change the node).
    now: Scenario,
    _kp_forward: Forward,
    ag_forward: Option<Forward>,
}

impl Pair {
    /// Creates the scenario's Node and objects, both namespaces, and starts both programs
    /// (the agent after a takeover run of kube-proxy in its namespace, when asked); returns
    /// once both have synced.
    fn start(
        cp: &ControlPlane,
        cluster: &Cluster,
        s: &Scenario,
        with_kube_proxy: bool,
    ) -> Result<Pair> {
        let node = format!("peers-{}", s.id);
        let dir = PathBuf::from("/tmp/peers").join(&s.id);
        std::fs::create_dir_all(&dir)?;
        cluster.clear()?;
        cluster.apply_node(&node, s)?;
        cluster.apply(&scenario::objects(&s.objects)?)?;
        let kp = NodeNs::new("kp", s);
        let ag = NodeNs::new("ag", s);
        let pods = (!s.pods.is_empty()).then(|| (Pods::start(&kp, s), Pods::start(&ag, s)));
        let kp_forward = cp.forward_into(kp.ns.name());
        let ag_forward = Some(cp.forward_into(ag.ns.name()));
        let kp_args = common_args(s, &node, &cp.kube_proxy_kubeconfig(), &dir, "kube-proxy")?;
        let ag_args = common_args(s, &node, &cp.agent_kubeconfig(), &dir, "agent")?;
        let kube_proxy_bin = &kube_proxy();
        if s.takeover {
            // The real kube-proxy programs the agent's namespace first and is stopped there.
            let t = SystemTime::now();
            let mode = s.takeover_mode.as_deref().unwrap_or("ipvs");
            let takeover_args: Vec<String> = scenario::flags_over(&kp_args, &s.takeover_flags)
                .iter()
                .map(|a| match a.as_str() {
                    "--proxy-mode=ipvs" => format!("--proxy-mode={mode}"),
                    _ => a.clone(),
                })
                .collect();
            let mut before = ag.start(
                kube_proxy_bin,
                &takeover_args,
                &dir.join("takeover-kube-proxy.log"),
            )?;
            // The other modes, alone in the namespace, may never report an IPv6 sync (the
            // scenarios' objects are IPv4).
            let family = (mode != "ipvs").then_some("IPv4");
            ag.wait_synced_of(&mut before, t, SYNC_LIMIT, family)?;
            before.kill();
            cluster.delete(&s.deleted_before_start)?;
        }
        for command in &s.foreign {
            kp.ns.sh(command);
            ag.ns.sh(command);
        }
        let t = SystemTime::now();
        let kube_proxy = if with_kube_proxy {
            Some(kp.start(kube_proxy_bin, &kp_args, &dir.join("kube-proxy.log"))?)
        } else {
            None
        };
        let agent = Some(ag.start(&agent(), &ag_args, &dir.join("agent.log"))?);
        let mut pair = Pair {
            kp,
            ag,
            kube_proxy,
            agent,
            node,
            scenario: s.id.clone(),
            kp_args,
            ag_args,
            dir,
            restarts: 0,
            pods,
            now: s.clone(),
            _kp_forward: kp_forward,
            ag_forward,
        };
        pair.wait_synced(t)?;
        Ok(pair)
    }

    /// Waits until each running program has synced after `t`.
    fn wait_synced(&mut self, t: SystemTime) -> Result<()> {
        if let Some(p) = &mut self.kube_proxy {
            self.kp.wait_synced(p, t, SYNC_LIMIT)?;
        }
        if let Some(p) = &mut self.agent {
            self.ag.wait_synced(p, t, SYNC_LIMIT)?;
        }
        Ok(())
    }

    /// Applies one step and waits until both have seen it and synced after it.
    fn step(&mut self, cluster: &Cluster, step: &scenario::Step) -> Result<()> {
        let (kp_mark, ag_mark) = (self.kp.sync_mark(), self.ag.sync_mark());
        let t = SystemTime::now();
        cluster.apply(&scenario::objects(&step.apply)?)?;
        cluster.delete(&step.delete)?;
        if !step.node_labels.is_empty() {
            cluster.label_node(&self.node, &step.node_labels)?;
        }
        if let Some(change) = &step.node {
            return self
                .change_node(cluster, change, t)
                .with_context(|| format!("step {:?}", step.name));
        }
        let mut waited = || {
            // A program restarted after the change reads it whole at its start; one that kept
            // running must have seen it.
            let asked = |who: &str| step.restart.iter().any(|r| r == who);
            let restart_at = SystemTime::now();
            if asked("kube-proxy") {
                self.restart_kube_proxy()?;
            }
            if asked("agent") {
                self.restart_agent()?;
            }
            if let Some(p) = &mut self.kube_proxy {
                if asked("kube-proxy") {
                    self.kp.wait_synced(p, restart_at, SYNC_LIMIT)?;
                } else if step.changes_objects() {
                    self.kp
                        .wait_synced_after_change(p, t, SYNC_LIMIT, kp_mark.clone())?;
                }
            }
            if let Some(p) = &mut self.agent {
                if asked("agent") {
                    self.ag.wait_synced(p, restart_at, SYNC_LIMIT)?;
                } else if step.changes_objects() {
                    self.ag
                        .wait_synced_after_change(p, t, SYNC_LIMIT, ag_mark.clone())?;
                }
            }
            anyhow::Ok(())
        };
        waited().with_context(|| format!("step {:?}", step.name))
    }

    /// The step's probes sent through both sides at once: the differences in what each
    /// answered (section `traffic`) and kube-proxy's lines (the agent's where they differ);
    /// an error when a side got fewer answers than a probe requires.
    fn traffic(&self, step: &scenario::Step) -> Result<(Vec<Difference>, Vec<String>)> {
        let Some((kp_pods, ag_pods)) = &self.pods else {
            return Ok((Vec::new(), Vec::new()));
        };
        let (k, a) = std::thread::scope(|scope| {
            let k = scope.spawn(|| {
                step.traffic
                    .iter()
                    .map(|p| kp_pods.probe(&self.kp, p))
                    .collect::<Vec<_>>()
            });
            let a: Vec<(String, usize)> = step
                .traffic
                .iter()
                .map(|p| ag_pods.probe(&self.ag, p))
                .collect();
            (k.join().expect("kube-proxy's side of the traffic"), a)
        });
        let mut problems = Vec::new();
        let mut shown = Vec::new();
        for ((p, (kl, kn)), (al, an)) in step.traffic.iter().zip(&k).zip(&a) {
            let want = p.answered.unwrap_or(p.requests);
            for (who, line, n) in [("kube-proxy", kl, kn), ("the agent", al, an)] {
                if *n != want {
                    problems.push(format!(
                        "{who}: {n} of {} answered, {want} wanted: {line}",
                        p.requests
                    ));
                }
            }
            shown.push(format!("kube-proxy: {kl}"));
            if al != kl {
                shown.push(format!("the agent:  {al}"));
            }
        }
        anyhow::ensure!(problems.is_empty(), "traffic:\n{}", problems.join("\n"));
        let lines = |v: &[(String, usize)]| v.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>();
        let diffs = compare::differences(
            &Sections::from([("traffic", lines(&k))]),
            &Sections::from([("traffic", lines(&a))]),
        );
        Ok((diffs, shown))
    }

    /// Changes the node (its addresses in both namespaces, its Node object), then, as a
    /// DaemonSet would, starts again whichever program exited over it, and waits until each
    /// has synced after the change.
    fn change_node(
        &mut self,
        cluster: &Cluster,
        change: &scenario::NodeChange,
        t: SystemTime,
    ) -> Result<()> {
        for a in &change.add_addresses {
            let nodad = if a.contains(':') { " nodad" } else { "" };
            for ns in [&self.kp, &self.ag] {
                ns.ns.sh(&format!("ip addr add {a} dev eth0{nodad}"));
            }
            self.now.node.addresses.push(a.clone());
        }
        if let Some(ips) = &change.internal_ips {
            self.now.node.internal_ips = Some(ips.clone());
        }
        if let Some(cidrs) = &change.pod_cidrs {
            self.now.node.pod_cidrs = cidrs.clone();
            cluster.delete_node(&self.node)?;
        }
        cluster.apply_node(&self.node, &self.now)?;
        // kube-proxy exits at once on the watch event; give either program time to.
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            let exited = |p: &mut Option<Program>| p.as_mut().is_some_and(|p| !p.running());
            if exited(&mut self.kube_proxy) || exited(&mut self.agent) {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        std::thread::sleep(Duration::from_secs(1));
        let restart_at = SystemTime::now();
        let kp_exited = self.kube_proxy.as_mut().is_some_and(|p| !p.running());
        let ag_exited = self.agent.as_mut().is_some_and(|p| !p.running());
        if kp_exited {
            println!(
                "peers: {}: kube-proxy exited over the node change; started again",
                self.scenario
            );
            self.restart_kube_proxy()?;
        }
        if ag_exited {
            println!(
                "peers: {}: the agent exited over the node change; started again",
                self.scenario
            );
            self.restart_agent()?;
        }
        if let Some(p) = &mut self.kube_proxy {
            self.kp
                .wait_synced(p, if kp_exited { restart_at } else { t }, SYNC_LIMIT)?;
        }
        if let Some(p) = &mut self.agent {
            self.ag
                .wait_synced(p, if ag_exited { restart_at } else { t }, SYNC_LIMIT)?;
        }
        Ok(())
    }

    /// Kills kube-proxy (SIGKILL: its state stays) and starts it again with its flags.
    fn restart_kube_proxy(&mut self) -> Result<()> {
        self.restarts += 1;
        let log = self.dir.join(format!("kube-proxy-{}.log", self.restarts));
        self.kube_proxy = Some(restarted(
            self.kube_proxy.take(),
            &self.kp,
            &kube_proxy(),
            &self.kp_args,
            &log,
        )?);
        Ok(())
    }

    /// Kills the agent (SIGKILL) and starts it again with its flags.
    fn restart_agent(&mut self) -> Result<()> {
        self.restarts += 1;
        let log = self.dir.join(format!("agent-{}.log", self.restarts));
        self.agent = Some(restarted(
            self.agent.take(),
            &self.ag,
            &agent(),
            &self.ag_args,
            &log,
        )?);
        Ok(())
    }

    /// Both sides' state once it has settled, and the differences.
    fn read(&self) -> Result<Compared> {
        settle_and_compare(&self.kp, &self.ag)
    }

    /// The differences once both sides' state has settled.
    fn compare(&self) -> Vec<Difference> {
        self.read()
            .unwrap_or_else(|e| panic!("reading the state: {e:#}"))
            .differences
    }

    /// Cuts the agent off from the API server (its forwarder and open connections closed).
    fn cut_agent(&mut self) {
        self.ag_forward = None;
    }

    /// Gives the agent its way to the API server back.
    fn reconnect_agent(&mut self, cp: &ControlPlane) {
        self.ag_forward = Some(cp.forward_into(self.ag.ns.name()));
    }

    /// Whether the agent still runs.
    fn agent_running(&mut self) -> bool {
        self.agent.as_mut().is_some_and(Program::running)
    }

    /// The agent's whole output so far (its debug lines fill any tail).
    fn agent_log(&self) -> String {
        self.agent
            .as_ref()
            .map(|a| a.tail(usize::MAX))
            .unwrap_or_default()
    }
}

/// `old` killed (SIGKILL: neither program removes its state on exit), then `program` started
/// again in `ns` with `args`, its output in `log`.
fn restarted(
    old: Option<Program>,
    ns: &NodeNs,
    program: &Path,
    args: &[String],
    log: &Path,
) -> Result<Program> {
    if let Some(p) = old {
        p.kill();
    }
    ns.start(program, args, log)
}

fn run_scenario(
    cp: &ControlPlane,
    cluster: &Cluster,
    s: &Scenario,
    out: &mut Outcome,
) -> Result<()> {
    let mut pair = Pair::start(cp, cluster, s, true)?;
    let point = |pair: &Pair, name: &str| -> Result<(String, Vec<Difference>)> {
        let c = pair.read().with_context(|| format!("at {name}"))?;
        check_implied(cluster, s, &c).with_context(|| format!("at {name}"))?;
        Ok((name.to_string(), c.differences))
    };
    out.points.push(point(&pair, "start")?);
    for step in &s.steps {
        pair.step(cluster, step)?;
        let (name, mut differences) = point(&pair, &step.name)?;
        let (traffic, shown) = pair
            .traffic(step)
            .with_context(|| format!("at {}", step.name))?;
        differences.extend(traffic);
        out.traffic
            .extend(shown.into_iter().map(|l| format!("{}: {l}", step.name)));
        out.points.push((name, differences));
        out.steps += 1;
    }
    Ok(())
}

fn selected(all: Vec<Scenario>) -> Vec<Scenario> {
    let which = std::env::var("PEERS_SCENARIOS").unwrap_or_else(|_| "ci".into());
    match which.as_str() {
        "all" => all,
        "ci" => all.into_iter().filter(|s| s.ci).collect(),
        list => {
            let prefixes: Vec<&str> = list.split(',').map(str::trim).collect();
            all.into_iter()
                .filter(|s| prefixes.iter().any(|p| s.id.starts_with(p)))
                .collect()
        }
    }
}

/// The results as Markdown: the table, then every difference with what explains it.
fn report(outcomes: &[Outcome], known: &[Known]) -> String {
    let mut t = String::from(
        "| scenario | steps | differences | verdict | time |\n|---|---|---|---|---|\n",
    );
    let mut details = String::new();
    for o in outcomes {
        let all: usize = o.points.iter().map(|(_, d)| d.len()).sum();
        let unexplained = o.unexplained(known);
        let mut ids = std::collections::BTreeMap::<String, usize>::new();
        for (_, d) in &o.points {
            for (id, n) in compare::classify(d, known, &o.id).1 {
                *ids.entry(id).or_default() += n;
            }
        }
        let listed: Vec<String> = ids.iter().map(|(id, n)| format!("{id} ×{n}")).collect();
        let verdict = match (&o.error, unexplained.is_empty()) {
            (Some(_), _) => "ERROR",
            (None, true) if all == 0 => "identical",
            (None, true) => "listed only",
            (None, false) => "DIFFERS",
        };
        let diffs = if listed.is_empty() {
            all.to_string()
        } else {
            format!("{all} ({})", listed.join(", "))
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {:.0} s |",
            o.id,
            o.steps,
            diffs,
            verdict,
            o.took.as_secs_f64()
        );
        if let Some(e) = &o.error {
            let _ = writeln!(details, "\n### {}: error\n\n```\n{e}\n```", o.id);
        }
        if !o.traffic.is_empty() {
            let _ = writeln!(details, "\n### {}: traffic\n\n```", o.id);
            for l in &o.traffic {
                let _ = writeln!(details, "{l}");
            }
            let _ = writeln!(details, "```");
        }
        if !unexplained.is_empty() {
            let _ = writeln!(details, "\n### {}: differences not listed\n\n```", o.id);
            for (point, d) in unexplained {
                let _ = writeln!(details, "{point}: {d}");
            }
            let _ = writeln!(details, "```");
        }
    }
    t + &details
}

/// One test at a time talks to the control plane: kube-proxy serves every Service of the
/// cluster, and the end-to-end tests restart the API server.
static CONTROL_PLANE: Mutex<()> = Mutex::new(());

/// What a test against the control plane starts with: the lock, the control plane, an admin
/// client, and the test's own namespace with a forwarder to the API server.
fn connect() -> (
    MutexGuard<'static, ()>,
    ControlPlane,
    Cluster,
    (Netns, Forward),
) {
    let guard = CONTROL_PLANE.lock().unwrap_or_else(|p| p.into_inner());
    let ns = Netns::fresh();
    let cp = ControlPlane::from_env().expect(
        "no control plane: LAB_CONTROL_PLANE is unset (`lab test` starts one when the peers package is tested)",
    );
    let forward = cp.forward_here();
    let cluster = Cluster::connect(&cp.admin_kubeconfig()).expect("admin client");
    cluster.ensure_namespace().expect("namespace");
    (guard, cp, cluster, (ns, forward))
}

/// Panics with every difference between kube-proxy and the agent that the README does not
/// list.
fn compare_clean(pair: &Pair, when: &str) {
    let known = compare::known(peers::embedded::README).expect("README's peers-diff markers");
    let diffs = pair.compare();
    let (left, _) = compare::classify(&diffs, &known, &pair.scenario);
    assert!(
        left.is_empty(),
        "{when}: differences the README does not list:\n{}",
        left.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// [`compare_clean`] once the two agree or `limit` has passed. After the agent's watches were
/// cut, its last sync proves nothing: a periodic sync can run before the relist brings the
/// changes, and no metric says a relist is pending. kube-proxy, which kept its watches, is
/// the reference the agent must reach.
fn compare_clean_within(pair: &Pair, when: &str, limit: Duration) {
    let known = compare::known(peers::embedded::README).expect("README's peers-diff markers");
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if compare::classify(&pair.compare(), &known, &pair.scenario)
            .0
            .is_empty()
        {
            return;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    compare_clean(pair, when);
}

#[test]
fn differential_corpus_kube_proxy_and_the_agent_program_the_same_state() {
    let (_guard, cp, cluster, _ns) = connect();
    let known = compare::known(peers::embedded::README).expect("README's peers-diff markers");
    let scenarios = selected(scenario::embedded().expect("the corpus"));
    assert!(!scenarios.is_empty(), "PEERS_SCENARIOS selects no scenario");

    let mut outcomes = Vec::new();
    for s in &scenarios {
        let started = Instant::now();
        let mut o = Outcome {
            id: s.id.clone(),
            steps: 0,
            points: Vec::new(),
            error: None,
            took: Duration::ZERO,
            traffic: Vec::new(),
        };
        if let Err(e) = run_scenario(&cp, &cluster, s, &mut o) {
            o.error = Some(format!("{e:#}"));
        }
        o.took = started.elapsed();
        println!("peers: {} done in {:.0?}", s.id, started.elapsed());
        // As it goes, for whoever watches a long run.
        print!("{}", report(std::slice::from_ref(&o), &known));
        outcomes.push(o);
    }
    let _ = cluster.clear();
    let text = report(&outcomes, &known);
    println!("=== peers results begin ===\n{text}=== peers results end ===");
    let bad: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.error.is_some() || !o.unexplained(&known).is_empty())
        .map(|o| o.id.as_str())
        .collect();
    assert!(
        bad.is_empty(),
        "scenarios with errors or unlisted differences: {bad:?}"
    );
}
