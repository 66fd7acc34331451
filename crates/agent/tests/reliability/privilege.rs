//! Reliability: least privilege. The agent runs with exactly the capabilities deploy/README.md
//! documents (CAP_NET_ADMIN and CAP_NET_RAW), as uid 0 with nothing else in its bounding set
//! and as an unprivileged uid with the two as ambient capabilities, and programs exactly what
//! a full root run programs; with a documented capability dropped it stops with an error that
//! says which.
//!
//! Kernel modules: the lab's /init loads only `ip_vs`, `nf_conntrack` and `dummy`; everything
//! else (schedulers, ipset types, xt matches, iptables tables) is loaded by the kernel on
//! demand, and other tests may have done so already. So the test unloads one scheduler module
//! that no other test uses (`ip_vs_ovf`), gives one Service that scheduler, and checks that
//! the capped agent's request got it loaded: the kernel's on-demand loader runs modprobe with
//! its own privileges, so the agent needs no CAP_SYS_MODULE.
//!
//! Wall time in the VM: about 40 s.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lab::guest::{sh, try_sh};
use lab::report::Row;

use crate::node::*;

/// The capabilities deploy/README.md grants, in setpriv's spelling.
const DOCUMENTED: &str = "net_admin,net_raw";
/// CAP_NET_ADMIN (12) and CAP_NET_RAW (13) as /proc/PID/status prints a capability set.
const DOCUMENTED_MASK: &str = "0000000000003000";
/// An unprivileged uid and gid (nobody).
const NOBODY: &str = "65534";

/// How a run is confined.
#[derive(Clone, Copy, Debug)]
enum Confinement {
    /// uid 0, bounding set limited to `caps`, no inheritable capabilities, no new privileges.
    Root(&'static str),
    /// uid and gid 65534 with `caps` in the inheritable, ambient and bounding sets.
    Nobody(&'static str),
}

impl Confinement {
    fn setpriv_args(self) -> Vec<String> {
        let set = |caps: &str| {
            std::iter::once("-all".to_string())
                .chain(
                    caps.split(',')
                        .filter(|c| !c.is_empty())
                        .map(|c| format!("+{c}")),
                )
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut args: Vec<String> = Vec::new();
        match self {
            Confinement::Root(caps) => {
                args.extend(["--inh-caps".into(), "-all".into()]);
                args.extend(["--bounding-set".into(), set(caps)]);
            }
            Confinement::Nobody(caps) => {
                args.extend(
                    ["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups"].map(String::from),
                );
                args.extend(["--inh-caps".into(), set(caps)]);
                args.extend(["--ambient-caps".into(), set(caps)]);
                args.extend(["--bounding-set".into(), set(caps)]);
            }
        }
        args.push("--no-new-privs".into());
        args
    }
}

/// The agent under `setpriv` with `extra` arguments.
fn confined(node: &Node, how: Confinement, extra: &[&str]) -> Command {
    let base = node.command(extra);
    let mut c = Command::new("setpriv");
    c.args(how.setpriv_args())
        .arg("--")
        .arg(AGENT)
        .args(base.get_args());
    c
}

fn once(node: &Node, how: Confinement) -> Output {
    confined(node, how, &["--once"])
        .output()
        .expect("run setpriv")
}

/// The kernel state, with the KUBE- rules of both iptables backends (the plain `iptables` of
/// the lab is nft; a legacy node's rules are only in `iptables-legacy-save`).
fn state() -> String {
    let legacy: Vec<String> = try_sh("iptables-legacy-save")
        .1
        .lines()
        .filter(|l| l.contains("KUBE-") && !l.contains("KUBE-KUBELET-CANARY"))
        .map(str::to_string)
        .collect();
    // Until the agent has made kube-ipvs0 there is nothing to compare (and kernel_state
    // needs the link).
    let main = if try_sh("ip link show kube-ipvs0").0 {
        kernel_state()
    } else {
        "no kube-ipvs0".to_string()
    };
    format!("{main}\n-- legacy --\n{}", legacy.join("\n"))
}

/// `--cleanup`, which must leave no IPVS service.
fn clean() {
    cleanup();
    assert_eq!(sh("ipvsadm -Sn"), "", "cleanup left IPVS services");
}

/// Sends requests through each Service (ClusterIP and NodePort from outside, UDP from the
/// node); returns how many failed.
fn traffic(node: &Node) -> (usize, usize) {
    let mut failed = 0;
    let mut sent = 0;
    for addr in ["10.96.0.10:80", "192.168.100.1:30080", "10.96.0.12:80"] {
        for _ in 0..2 {
            sent += 1;
            if node.ask_from_outside(addr).is_err() {
                failed += 1;
            }
        }
    }
    sent += 1;
    if lab::net::ask_udp("10.96.0.53:53".parse().unwrap()).is_err() {
        failed += 1;
    }
    (sent, failed)
}

fn services(node: &Node) {
    node.write_web_and_dns();
    node.write(
        "ovf.yaml",
        &service("ovf", "10.96.0.12", "", "TCP", 80, 8080, &[(0, "node-a")]).replacen(
            "metadata: {name: ovf, namespace: t}",
            "metadata: {name: ovf, namespace: t, annotations: {kube-proxy-ipvs.io/scheduler: ovf}}",
            1,
        ),
    );
}

/// Runs the confined agent as a daemon until the kernel holds `reference`, checks the
/// process's identity and capability sets and its /healthz, then stops it. Returns its log.
fn daemon_reaches(node: &Node, how: Confinement, reference: &str, uid: &str) -> String {
    let log_path = node.dir.join(format!("agent-{uid}.log"));
    let log = std::fs::File::create(&log_path).unwrap();
    let mut agent = confined(node, how, &["--healthz-bind-address", "127.0.0.1:10256"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the confined agent");
    let start = Instant::now();
    loop {
        if state() == reference {
            break;
        }
        if let Ok(Some(exit)) = agent.try_wait() {
            panic!(
                "the agent ({how:?}) exited ({exit}):\n{}",
                std::fs::read_to_string(&log_path).unwrap()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the agent ({how:?}) did not reach the root run's state in 60 s:\n{}\n-- root run --\n{reference}\n-- log --\n{}",
            state(),
            std::fs::read_to_string(&log_path).unwrap()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // The process really is what setpriv made it (the agent itself, not setpriv: it execs).
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.id())).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    assert_eq!(field("Uid"), vec![uid; 4], "{status}");
    assert!(
        field("Name")
            .first()
            .is_some_and(|n| n.starts_with("kube-proxy")),
        "{status}"
    );
    for set in ["CapPrm", "CapEff", "CapBnd"] {
        assert_eq!(
            field(set),
            vec![DOCUMENTED_MASK],
            "{set} of {how:?}:\n{status}"
        );
    }
    let healthz = std::panic::catch_unwind(|| http_get("127.0.0.1:10256", "/healthz"));
    let _ = agent.kill();
    let _ = agent.wait();
    let (code, body) = healthz.expect("/healthz answers");
    assert_eq!(code, 200, "/healthz of {how:?}: {body}");
    std::fs::read_to_string(&log_path).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_agent_needs_only_net_admin_and_net_raw_and_says_when_one_is_missing() {
    let mut row = Row::new(
        "privilege",
        "only CAP_NET_ADMIN + CAP_NET_RAW (uid 0 and uid 65534)",
    );
    let node = Node::new("priv", 2);
    services(&node);
    let mut runs = 0;
    let (mut sent, mut failed) = (0, 0);
    let mut count = |node: &Node| {
        let (s, f) = traffic(node);
        sent += s;
        failed += f;
        f
    };

    // nf_tables node (the lab's plain iptables). The reference: a full root run.
    node.once(&[]);
    let reference = state();
    assert!(
        reference.contains("-A -t 10.96.0.12:80 -s ovf"),
        "{reference}"
    );
    assert_eq!(count(&node), 0, "the root run does not carry traffic");
    clean();
    // Nothing else in the suite uses the ovf scheduler: unload it, so that the capped run
    // has to get it loaded.
    let (unloaded, why) = try_sh("modprobe -r ip_vs_ovf");
    assert!(
        unloaded && !std::path::Path::new("/sys/module/ip_vs_ovf").exists(),
        "cannot unload ip_vs_ovf: {why}"
    );

    // uid 0 with only the documented capabilities.
    runs += 1;
    let log = daemon_reaches(&node, Confinement::Root(DOCUMENTED), &reference, "0");
    assert!(
        std::path::Path::new("/sys/module/ip_vs_ovf").exists(),
        "the kernel did not load ip_vs_ovf on the capped agent's request"
    );
    assert!(!logged_an_error(&log) && !log.contains("panicked"), "{log}");
    assert_eq!(
        count(&node),
        0,
        "the capped root run does not carry traffic"
    );
    clean();

    // An unprivileged uid with the two as ambient capabilities (nf_tables only: see below).
    runs += 1;
    let log = daemon_reaches(&node, Confinement::Nobody(DOCUMENTED), &reference, NOBODY);
    assert!(!logged_an_error(&log) && !log.contains("panicked"), "{log}");
    assert_eq!(count(&node), 0, "the uid 65534 run does not carry traffic");
    clean();

    // Without CAP_NET_ADMIN nothing can be programmed, and the agent says so.
    runs += 1;
    let out = once(&node, Confinement::Root("net_raw"));
    let why = stderr(&out);
    assert!(!out.status.success(), "ran without CAP_NET_ADMIN:\n{why}");
    assert!(
        why.contains("Operation not permitted") || why.contains("Permission denied"),
        "no clear error without CAP_NET_ADMIN:\n{why}"
    );
    assert_eq!(sh("ipvsadm -Sn"), "");
    let refused_admin = why
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_string();

    // An iptables-legacy node: the kubelet's canary chain lives in the legacy tables.
    sh("iptables-legacy -t mangle -N KUBE-KUBELET-CANARY");
    node.once(&[]);
    let legacy_reference = state();
    assert!(
        legacy_reference.contains("-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN"),
        "the root run did not write the legacy tables:\n{legacy_reference}"
    );
    clean();
    runs += 1;
    let out = once(&node, Confinement::Root(DOCUMENTED));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(state(), legacy_reference, "{}", stderr(&out));
    assert_eq!(
        count(&node),
        0,
        "the capped legacy run does not carry traffic"
    );
    clean();
    // iptables-legacy needs CAP_NET_RAW even to read its tables: without it the agent must
    // not guess nf_tables, it must stop and name the capability.
    runs += 1;
    let out = once(&node, Confinement::Root("net_admin"));
    let why = stderr(&out);
    assert!(
        !out.status.success(),
        "ran on legacy without CAP_NET_RAW:\n{why}"
    );
    assert!(
        why.contains("CAP_NET_RAW"),
        "no clear error without CAP_NET_RAW:\n{why}"
    );
    assert!(
        !try_sh("iptables-nft-save | grep -q KUBE-").0,
        "rules went to nf_tables"
    );
    // As uid 65534 the legacy tables cannot even be listed (/proc/net/ip_tables_names is
    // root's), and the xtables lock is root's: the agent warns that its backend is a guess.
    runs += 1;
    let out = once(&node, Confinement::Nobody(DOCUMENTED));
    let why = stderr(&out);
    assert!(
        why.contains("warning=\"iptables-backend-guess\""),
        "no warning as uid 65534 on a legacy node:\n{why}"
    );

    let objects = reference.lines().filter(|l| !l.starts_with("--")).count();
    row.tried(format!(
        "{runs} confined runs: uid 0 with {DOCUMENTED} on nf_tables and legacy, uid 65534 with them ambient, each one dropped; {sent} requests"
    ));
    row.lost(format!(
        "0 of {objects} kernel objects differ from a root run, {failed} of {sent} requests failed; no NET_ADMIN: \"{}\"; no NET_RAW on legacy: refused by name",
        refused_admin
            .trim_start_matches("kube-proxy-ipvs: ")
            .chars()
            .take(100)
            .collect::<String>()
    ));
    assert_eq!(failed, 0);
}

/// Whether the agent's klog-format log has an error line (`E` and the date: `E1126 08:25:47`).
fn logged_an_error(log: &str) -> bool {
    log.lines().any(|l| {
        l.starts_with('E')
            && l.get(1..5)
                .is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()))
    })
}
