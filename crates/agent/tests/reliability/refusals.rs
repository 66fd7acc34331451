//! Kernel refusals: a scheduler whose module is missing, an ipset at its maxelem. The agent
//! logs a clear error once, retries with backoff, stays up and healthy for what it could
//! program, and `/healthz` says so when it cannot program anything; once the kernel accepts
//! again, it converges without a restart.

use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lab::guest::{sh, try_sh};
use lab::report::Row;

use crate::node::{Node, http_get, service, try_http_get};

/// Serializes the tests that hide a kernel module (modules are global to the VM).
static MODULES: Mutex<()> = Mutex::new(());

/// A scheduler no other test uses, so hiding its module disturbs nothing else.
const SCHEDULER: &str = "fo";

/// Moves `ip_vs_<name>`'s module file away (unloading it first), so that neither the agent
/// nor the kernel's `request_module` can load it; puts it back when dropped.
struct HiddenModule {
    file: String,
    hidden: String,
}

impl HiddenModule {
    fn hide(name: &str) -> HiddenModule {
        let module = format!("ip_vs_{name}");
        let file = sh(&format!(
            "find /lib/modules/$(uname -r) -name '{module}.ko*' | head -1"
        ))
        .trim()
        .to_string();
        assert!(!file.is_empty(), "no {module} module in the image");
        let _ = try_sh(&format!("modprobe -r {module}"));
        assert!(
            !std::fs::read_to_string("/proc/modules")
                .unwrap()
                .lines()
                .any(|l| l.starts_with(&format!("{module} "))),
            "{module} is still loaded (in use?)"
        );
        let hidden = format!("/tmp/{module}.hidden");
        std::fs::rename(&file, &hidden).unwrap();
        HiddenModule { file, hidden }
    }

    fn restore(&self) {
        if Path::new(&self.hidden).exists() {
            std::fs::rename(&self.hidden, &self.file).unwrap();
        }
    }
}

impl Drop for HiddenModule {
    fn drop(&mut self) {
        self.restore();
    }
}

/// The agent as a daemon with /healthz on 127.0.0.1:10256, its log in a file.
struct Daemon {
    child: Child,
    log: std::path::PathBuf,
}

impl Daemon {
    fn start(node: &Node, name: &str, extra: &[&str]) -> Daemon {
        let log = std::env::temp_dir().join(format!("refusals-{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let mut args = vec![
            "--healthz-bind-address",
            "127.0.0.1:10256",
            "--ipvs-sync-period",
            "30s",
            "--ipvs-min-sync-period",
            "1s",
        ];
        args.extend_from_slice(extra);
        let child = node
            .command(&args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start the agent");
        Daemon { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The number of log lines containing every one of `parts`.
    fn lines_with(&self, parts: &[&str]) -> usize {
        self.log()
            .lines()
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .count()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn healthz(&self) -> Option<(u16, String)> {
        std::panic::catch_unwind(|| http_get("127.0.0.1:10256", "/healthz")).ok()
    }

    /// `kube_proxy_ipvs_blocked` on 127.0.0.1:10249 (`None` when it cannot be read).
    fn blocked_metric(&self) -> Option<String> {
        let (_, text) = try_http_get("127.0.0.1:10249", "/metrics").ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("kube_proxy_ipvs_blocked "))
            .map(str::to_string)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` every 200 ms until it holds, for at most `limit`; returns how long it took.
fn until(limit: Duration, what: &str, log: impl Fn() -> String, f: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "{what}: not within {limit:?}; agent log:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    start.elapsed()
}

fn has_vs(vip: &str) -> bool {
    sh("ipvsadm -Sn").contains(vip)
}

#[test]
fn a_missing_scheduler_module_fails_its_services_only_and_blocks_when_it_is_the_default() {
    let _modules = MODULES.lock().unwrap_or_else(|e| e.into_inner());
    let mut row = Row::new("kernel refusal", "scheduler module missing");
    let node = Node::new("refuse-mod", 2);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    let annotated = service("fo", "10.96.0.11", "", "TCP", 80, 8080, &[(1, "node-a")]).replace(
        "metadata: {name: fo, namespace: t}",
        &format!(
            "metadata: {{name: fo, namespace: t, annotations: {{kube-proxy-ipvs.io/scheduler: {SCHEDULER}}}}}"
        ),
    );
    assert!(annotated.contains("annotations"));
    node.write("fo.yaml", &annotated);
    let hidden = HiddenModule::hide(SCHEDULER);

    // 1. One Service asks for the missing scheduler: the others are served, /healthz is 200,
    // the refusal is logged once and retried with backoff.
    let mut agent = Daemon::start(&node, "per-service", &[]);
    let log = || agent.log();
    until(Duration::from_secs(30), "web programmed", log, || {
        has_vs("10.96.0.10:80")
    });
    let watched = Instant::now();
    std::thread::sleep(Duration::from_secs(12));
    let window = watched.elapsed();
    assert!(agent.alive(), "the agent died:\n{}", agent.log());
    assert_eq!(
        node.ask_from_outside("10.96.0.10:80"),
        Ok(node.pods[0].name.clone())
    );
    assert!(!has_vs("10.96.0.11:80"));
    let (code, body) = agent.healthz().expect("/healthz answers");
    assert_eq!(code, 200, "healthy for what it could program: {body}");
    let refusals = agent.lines_with(&["the kernel refused", "10.96.0.11:80"]);
    assert_eq!(refusals, 1, "logged once:\n{}", agent.log());
    assert!(
        agent.lines_with(&[
            "10.96.0.11:80",
            &format!("module ip_vs_{SCHEDULER} available")
        ]) == 1,
        "the error names the scheduler:\n{}",
        agent.log()
    );
    // Passes with a failure: at 0, 1, 3, 7 (and 15) s with backoff; 12 or more without.
    let attempts = agent
        .log()
        .lines()
        .filter(|l| l.contains("] \"synced\"") && !l.contains("failed=0"))
        .count();
    assert!(
        (2..=6).contains(&attempts),
        "{attempts} attempts in {window:?}:\n{}",
        agent.log()
    );
    // The module comes back: the next retry programs the Service, no restart needed.
    hidden.restore();
    let took = until(
        Duration::from_secs(40),
        "fo programmed after the module returned",
        || agent.log(),
        || has_vs("10.96.0.11:80"),
    );
    assert_eq!(
        node.ask_from_outside("10.96.0.11:80"),
        Ok(node.pods[1].name.clone())
    );
    assert!(
        agent.lines_with(&["no longer failing"]) >= 1,
        "{}",
        agent.log()
    );
    drop(agent);
    row.tried(format!(
        "annotation scheduler {SCHEDULER} without ip_vs_{SCHEDULER}: {attempts} attempts in {window:.0?} (backoff), logged once"
    ));

    // 2. The default scheduler is the missing one: nothing can be programmed; the agent
    // stays up and /healthz is 503 (kube-proxy's body: the reason goes to the log and
    // /metrics, not to the public port), until the module returns.
    let out = node.command(&["--cleanup"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hidden = HiddenModule::hide(SCHEDULER);
    node.remove("fo.yaml");
    let mut agent = Daemon::start(
        &node,
        "default",
        &[
            "--ipvs-scheduler",
            SCHEDULER,
            "--metrics-bind-address",
            "127.0.0.1:10249",
        ],
    );
    until(
        Duration::from_secs(30),
        "/healthz 503 without the reason, blocked on /metrics",
        || agent.log(),
        || {
            matches!(agent.healthz(), Some((503, body)) if !body.contains(SCHEDULER) && !body.contains("error"))
                && agent.blocked_metric().as_deref() == Some("1")
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(agent.alive(), "the agent must stay up:\n{}", agent.log());
    assert!(!has_vs("10.96.0.10:80"));
    assert_eq!(
        agent.lines_with(&[" blocked=\"no-virtual-server\"", SCHEDULER]),
        1,
        "logged once, with the reason:\n{}",
        agent.log()
    );
    hidden.restore();
    let recovered = until(
        Duration::from_secs(40),
        "recovered after the module returned",
        || agent.log(),
        || {
            has_vs("10.96.0.10:80")
                && matches!(agent.healthz(), Some((200, _)))
                && agent.blocked_metric().as_deref() == Some("0")
        },
    );
    assert_eq!(
        node.ask_from_outside("10.96.0.10:80"),
        Ok(node.pods[0].name.clone())
    );
    row.lost(format!(
        "0 other Services disturbed; per-Service: programmed {took:.1?} after the module returned; default: /healthz 503 (the reason in the log and /metrics), 200 again {recovered:.1?} after"
    ));
}

#[test]
fn an_ipset_at_its_maxelem_fails_its_entries_only() {
    let mut row = Row::new("kernel refusal", "ipset at maxelem");
    let node = Node::new("refuse-full", 1);
    const N: usize = 8;
    for i in 0..N {
        node.write(
            &format!("s{i}.yaml"),
            &service(
                &format!("s{i}"),
                &format!("10.96.1.{}", i + 1),
                "",
                "TCP",
                80,
                8080,
                &[(0, "node-a")],
            ),
        );
    }
    // Someone made the set before us, the right type but far too small.
    sh("ipset create KUBE-CLUSTER-IP hash:ip,port maxelem 3");
    let mut agent = Daemon::start(&node, "full", &[]);
    until(
        Duration::from_secs(30),
        "every Service programmed",
        || agent.log(),
        || (0..N).all(|i| has_vs(&format!("10.96.1.{}:80", i + 1))),
    );
    std::thread::sleep(Duration::from_secs(8));
    assert!(agent.alive(), "the agent died:\n{}", agent.log());
    // The Services whose entry fits are served; the others are refused by KUBE-IPVS-FILTER
    // (their VIP:port is in no allowed set), as with kube-proxy.
    let fits: Vec<usize> = (0..N)
        .filter(|i| {
            sh(&format!(
                "ipset test KUBE-CLUSTER-IP 10.96.1.{},tcp:80 2>/dev/null && echo y || true",
                i + 1
            ))
            .contains('y')
        })
        .collect();
    assert_eq!(fits.len(), 3, "the set holds what fits");
    for i in &fits {
        assert_eq!(
            node.ask_from_outside(&format!("10.96.1.{}:80", i + 1)),
            Ok(node.pods[0].name.clone()),
            "{}",
            agent.log()
        );
    }
    let (code, body) = agent.healthz().expect("/healthz answers");
    assert_eq!(code, 200, "{body}");
    // A refusal is the warning that carries the operation and the kernel's error (`err`) as keys.
    let refused = |l: &&str| {
        l.starts_with('W')
            && l.contains(" op=\"")
            && l.contains(" err=\"")
            && l.contains("KUBE-CLUSTER-IP")
    };
    let log = agent.log();
    let refusals = log.lines().filter(refused).count();
    assert_eq!(refusals, 1, "logged once:\n{log}");
    let line = log.lines().find(refused).unwrap();
    assert!(
        line.to_lowercase().contains("full") || line.contains("maxelem"),
        "the error says the set is full: {line}"
    );
    row.tried(format!(
        "KUBE-CLUSTER-IP made beforehand with maxelem 3, {N} Services"
    ));
    row.lost(format!(
        "the {} Services that fit served, /healthz 200, logged once: {}",
        fits.len(),
        line.split("error=").nth(1).unwrap_or(line).trim()
    ));
}

/// `ip_vs_lblc` is loaded by the agent before IPVS would load it. IPVS loads a missing
/// scheduler's module under its global mutex, and `lblc`'s init waits for any namespace
/// teardown in progress, which can wait for that mutex: the kernel hangs for good
/// (`tests/lab/repro/ipvs-module-deadlock.sh` shows it; its window, the first few hundred ms of
/// a teardown, is too short to hit from a whole agent run, so this test checks the guard, not
/// the hang). With the module unloaded, the agent must load it itself (and say so) and
/// program the Service; a second run after a cleanup, the module loaded, must not try again.
#[test]
fn the_lblc_module_is_loaded_by_the_agent_before_ipvs_needs_it() {
    let _modules = MODULES.lock().unwrap_or_else(|e| e.into_inner());
    let mut row = Row::new(
        "kernel hazard",
        "lblc module not loaded (IPVS would load it under its lock)",
    );
    let node = Node::new("lblc", 1);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    let _ = try_sh("modprobe -r ip_vs_lblc");
    assert!(
        !Path::new("/sys/module/ip_vs_lblc").exists(),
        "ip_vs_lblc is in use: the test cannot unload it"
    );

    let run = || {
        let started = Instant::now();
        let mut agent = node
            .command(&["--once", "--ipvs-scheduler", "lblc"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the agent");
        let limit = Duration::from_secs(120);
        while agent.try_wait().unwrap().is_none() {
            if started.elapsed() > limit {
                let stacks = sh(&format!(
                    "for t in /proc/{}/task/*; do cat $t/stack; done 2>/dev/null | head -40",
                    agent.id()
                ));
                panic!("the agent hung for {limit:?}:\n{stacks}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let took = started.elapsed();
        let out = agent.wait_with_output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "agent failed: {log}");
        (log, took)
    };
    // The preloader's two lines carry the module's key: an info (I) when it loaded the
    // module, a warning (W) when it could not.
    let preloaded = |log: &str, severity: char| {
        log.lines()
            .any(|l| l.starts_with(severity) && l.contains(" module=\"ip_vs_lblc\""))
    };
    let (log, took) = run();
    assert!(
        preloaded(&log, 'I'),
        "the agent did not load ip_vs_lblc itself:\n{log}"
    );
    assert!(Path::new("/sys/module/ip_vs_lblc").exists());
    assert!(
        sh("ipvsadm -Sn").contains("-A -t 10.96.0.10:80 -s lblc"),
        "the Service is not programmed with lblc"
    );
    // Its Service gone, the next run asks IPVS for lblc again.
    crate::node::cleanup();
    let (again, _) = run();
    assert!(
        !preloaded(&again, 'I') && !preloaded(&again, 'W'),
        "the module was loaded: nothing to do\n{again}"
    );
    row.tried("--ipvs-scheduler lblc with ip_vs_lblc unloaded; then again, loaded");
    row.lost(format!(
        "the agent loaded ip_vs_lblc itself and finished in {:.1} s; the second run left it alone",
        took.as_secs_f64()
    ));
}

/// A tenant's Service annotated with `lblc`, its module unloaded: IPVS would load it under its
/// lock (the hang above), so the agent refuses the annotation, serves the Service with the
/// node's scheduler, says why, and leaves the module unloaded. Allowed by the operator
/// (`--ipvs-allowed-schedulers`), the same Service gets `lblc`.
#[test]
fn a_services_lblc_annotation_is_refused_unless_the_operator_allows_it() {
    let _modules = MODULES.lock().unwrap_or_else(|e| e.into_inner());
    let mut row = Row::new(
        "kernel hazard",
        "a Service annotated lblc, its module not loaded",
    );
    let node = Node::new("lblcannot", 1);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]).replacen(
            "metadata: {name: web, namespace: t}",
            "metadata: {name: web, namespace: t, annotations: {kube-proxy-ipvs.io/scheduler: lblc}}",
            1,
        ),
    );
    let _ = try_sh("modprobe -r ip_vs_lblc");
    assert!(
        !Path::new("/sys/module/ip_vs_lblc").exists(),
        "ip_vs_lblc is in use: the test cannot unload it"
    );
    let run = |extra: &[&str]| {
        let out = node
            .command(&[&["--once"], extra].concat())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("run the agent");
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "agent failed: {log}");
        log
    };

    let log = run(&[]);
    let saved = sh("ipvsadm -Sn");
    assert!(
        saved.contains("-A -t 10.96.0.10:80 -s rr"),
        "not served with the node's scheduler:\n{saved}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains(" warning=\"loads-under-lock\"")
                && l.contains("Service t/web:")
                && l.contains(r#"\"lblc\""#)),
        "the refusal is not logged with its remedy:\n{log}"
    );
    assert!(
        !Path::new("/sys/module/ip_vs_lblc").exists(),
        "ip_vs_lblc was loaded for a refused annotation"
    );

    crate::node::cleanup();
    let log = run(&["--ipvs-allowed-schedulers", "lblc"]);
    let saved = sh("ipvsadm -Sn");
    assert!(
        saved.contains("-A -t 10.96.0.10:80 -s lblc"),
        "allowed, the Service does not get lblc:\n{saved}\n{log}"
    );
    row.tried("kube-proxy-ipvs.io/scheduler: lblc, ip_vs_lblc unloaded; then allowed by flag");
    row.lost("none: served with rr and the refusal logged, module left unloaded; allowed, lblc");
}

/// Services annotated `ftp` and `pe_sip`: no schedulers, but asked for them IPVS would load
/// `ip_vs_ftp` (with `nf_nat`) and `ip_vs_pe_sip` (with `nf_conntrack_sip`) under its lock and
/// still fail the add. The agent serves both with the node's scheduler, says why, and no such
/// module is loaded afterwards; a third Service with a real scheduler keeps it.
#[test]
fn services_annotated_with_names_that_are_no_scheduler_get_the_nodes_and_load_nothing() {
    let _modules = MODULES.lock().unwrap_or_else(|e| e.into_inner());
    let mut row = Row::new(
        "kernel hazard",
        "Services annotated with names that are no scheduler (ftp, pe_sip)",
    );
    let node = Node::new("notsched", 1);
    let annotated = |name: &str, vip: &str, annotation: &str| {
        service(name, vip, "", "TCP", 80, 8080, &[(0, "node-a")]).replacen(
            &format!("metadata: {{name: {name}, namespace: t}}"),
            &format!("metadata: {{name: {name}, namespace: t, annotations: {{{annotation}}}}}"),
            1,
        )
    };
    node.write(
        "ftp.yaml",
        &annotated("ftp", "10.96.0.21", "kube-proxy-ipvs.io/scheduler: ftp"),
    );
    node.write(
        "sip.yaml",
        &annotated(
            "sip",
            "10.96.0.22",
            "kube-router.io/service.scheduler: pe_sip",
        ),
    );
    node.write(
        "hashed.yaml",
        &annotated("hashed", "10.96.0.23", "kube-proxy-ipvs.io/scheduler: sh"),
    );
    let modules = ["ip_vs_ftp", "ip_vs_pe_sip"];
    for module in modules {
        // The test proves something only if the kernel could load the module.
        assert!(
            !sh(&format!(
                "find /lib/modules/$(uname -r) -name '{module}.ko*' | head -1"
            ))
            .trim()
            .is_empty(),
            "no {module} module in the image: nothing to prove"
        );
        let _ = try_sh(&format!("modprobe -r {module}"));
        assert!(
            !Path::new(&format!("/sys/module/{module}")).exists(),
            "{module} is in use: the test cannot unload it"
        );
    }

    let out = node
        .command(&["--once"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run the agent");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "agent failed: {log}");
    let saved = sh("ipvsadm -Sn");
    for (vip, scheduler) in [
        ("10.96.0.21", "rr"),
        ("10.96.0.22", "rr"),
        ("10.96.0.23", "sh"),
    ] {
        assert!(
            saved.contains(&format!("-A -t {vip}:80 -s {scheduler}")),
            "{vip} not served with {scheduler}:\n{saved}\n{log}"
        );
    }
    let refused = log
        .lines()
        .filter(|l| l.contains(" warning=\"not-a-scheduler\""))
        .count();
    assert_eq!(refused, 2, "the refusals are not logged once each:\n{log}");
    let loaded: Vec<&str> = modules
        .into_iter()
        .filter(|m| Path::new(&format!("/sys/module/{m}")).exists())
        .collect();
    assert!(
        loaded.is_empty(),
        "loaded for a refused annotation: {loaded:?}"
    );
    crate::node::cleanup();
    row.tried("kube-proxy-ipvs.io/scheduler: ftp and kube-router.io/service.scheduler: pe_sip, their modules unloaded, beside a Service annotated sh");
    row.lost(format!(
        "none: both served with rr, {refused} refusals logged, no module loaded; sh kept"
    ));
}
