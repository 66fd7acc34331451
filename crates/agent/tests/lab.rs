//! Kernel tests of the agent, run inside the lab VM (`cargo run -p lab -- test -p
//! kube-proxy-ipvs-agent`). Each test is a node of its own (a fresh network namespace) with
//! pods on a bridge, an outside client facing the node address, manifests in a directory and
//! the real agent binary; results are checked with real traffic and with the real `ipvsadm`,
//! `ipset` and `iptables-save`.

mod fake_apiserver;
mod history;
mod node;
mod reliability;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use lab::guest::{sh, try_sh};
use lab::net::{ask_tcp, ask_udp, ask_udp_from, echo, open_tcp, within};

use node::*;

#[test]
fn cluster_ip_node_port_and_hairpin_carry_traffic() {
    let node = Node::new("traffic", 2);
    node.write("web.yaml", &web_service());
    node.once(&[]);

    // rr over two pods alternates, from outside the node...
    let outside = names(4, || node.ask_from_outside("10.96.0.10:80"));
    assert_ne!(outside[0], outside[1], "{outside:?}");
    assert_eq!(outside[0], outside[2], "{outside:?}");
    // ...on the NodePort of the node's address...
    let np = names(2, || node.ask_from_outside(&format!("{NODE_IP}:30080")));
    assert_ne!(np[0], np[1], "{np:?}");
    // ...from the node itself (the VIP is its source address: masqueraded, kube-proxy #63241)...
    let host = names(2, || ask_tcp("10.96.0.10:80".parse().unwrap()));
    assert_ne!(host[0], host[1], "{host:?}");
    // ...and from a pod to its own Service, reaching itself too (KUBE-LOOP-BACK).
    let hairpin = names(4, || node.ask_from_pod(0, "10.96.0.10:80"));
    assert!(hairpin.contains(&node.pods[0].name), "{hairpin:?}");
    assert!(hairpin.contains(&node.pods[1].name), "{hairpin:?}");
}

#[test]
fn kernel_objects_match_kube_proxy_with_the_real_tools() {
    let node = Node::new("objects", 2);
    node.write_web_and_dns();
    node.write(
        "sctp.yaml",
        &service(
            "sig",
            "10.96.0.60",
            "",
            "SCTP",
            3868,
            3868,
            &[(0, "node-a")],
        ),
    );
    node.once(&[]);

    let ipvs = sh("ipvsadm -Sn");
    for line in [
        "-A -t 10.96.0.10:80 -s rr",
        "-a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 1",
        "-a -t 10.96.0.10:80 -r 10.244.0.3:8080 -m -w 1",
        "-A -t 192.168.100.1:30080 -s rr",
        "-A -u 10.96.0.53:53 -s rr",
        "-a -u 10.96.0.53:53 -r 10.244.0.3:5353 -m -w 1",
        "-A --sctp-service 10.96.0.60:3868 -s rr",
        "-a --sctp-service 10.96.0.60:3868 -r 10.244.0.2:3868 -m -w 1",
    ] {
        assert!(
            ipvs.lines().any(|l| l == line),
            "missing {line:?} in:\n{ipvs}"
        );
    }
    let sets = sh("ipset save");
    for line in [
        "add KUBE-CLUSTER-IP 10.96.0.10,tcp:80",
        "add KUBE-CLUSTER-IP 10.96.0.53,udp:53",
        "add KUBE-CLUSTER-IP 10.96.0.60,sctp:3868",
        "add KUBE-NODE-PORT-TCP 30080",
        "add KUBE-LOOP-BACK 10.244.0.2,tcp:8080,10.244.0.2",
        "add KUBE-IPVS-IPS 10.96.0.10",
        "create KUBE-NODE-PORT-TCP bitmap:port range 0-65535",
    ] {
        assert!(
            sets.lines().any(|l| l.starts_with(line)),
            "missing {line:?} in:\n{sets}"
        );
    }
    // Only local endpoints go into the hairpin set.
    assert!(!sets.contains("add KUBE-LOOP-BACK 10.244.0.3"), "{sets}");
    let rules = sh("iptables-save");
    for line in [
        "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
        "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING",
        "-A INPUT -m comment --comment \"kubernetes ipvs access filter\" -j KUBE-IPVS-FILTER",
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
    ] {
        assert!(
            rules.lines().any(|l| l == line),
            "missing {line:?} in:\n{rules}"
        );
    }
    assert_eq!(
        sh("ip -br addr show kube-ipvs0").split_whitespace().nth(1),
        Some("DOWN")
    );
    // A second run with nothing changed sends nothing.
    let again = node.once(&["-v", "2"]);
    let log = String::from_utf8_lossy(&again.stderr);
    assert!(log.contains("ops=0"), "{log}");
}

#[test]
fn udp_service_answers() {
    let node = Node::new("udp", 1);
    node.write(
        "dns.yaml",
        &service("dns", "10.96.0.53", "", "UDP", 53, 5353, &[(0, "node-a")]),
    );
    node.once(&[]);
    let vip: SocketAddr = "10.96.0.53:53".parse().unwrap();
    assert_eq!(
        within(&node.outside, move || ask_udp(vip)),
        Ok(node.pods[0].name.clone())
    );
}

#[test]
fn session_affinity_and_sh_stick_to_one_pod_per_client() {
    let node = Node::new("sticky", 3);
    let all = [(0, "node-a"), (1, "node-a"), (2, "node-a")];
    node.write(
        "sticky.yaml",
        &service(
            "sticky",
            "10.96.0.11",
            "  sessionAffinity: ClientIP\n",
            "TCP",
            80,
            8080,
            &all,
        ),
    );
    node.write(
        "hashed.yaml",
        &service("hashed", "10.96.0.12", "", "TCP", 80, 8080, &all).replacen(
            "namespace: t}",
            "namespace: t, annotations: {kube-proxy-ipvs.io/scheduler: sh}}",
            1,
        ),
    );
    node.once(&[]);
    assert!(sh("ipvsadm -Sn").contains("-A -t 10.96.0.11:80 -s rr -p 10800"));
    assert!(sh("ipvsadm -Sn").contains("-A -t 10.96.0.12:80 -s sh"));
    for vip in ["10.96.0.11:80", "10.96.0.12:80"] {
        let got = names(5, || node.ask_from_outside(vip));
        assert!(got.iter().all(|n| *n == got[0]), "{vip}: {got:?}");
        // From the node itself (another client address) it sticks as well.
        let host = names(3, || ask_tcp(vip.parse().unwrap()));
        assert!(host.iter().all(|n| *n == host[0]), "{vip}: {host:?}");
    }
}

#[test]
fn host_ports_are_not_reachable_on_a_vip() {
    let node = Node::new("filter", 1);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    node.once(&[]);
    // A host service on every address, like sshd.
    let listener = std::net::TcpListener::bind("0.0.0.0:2222").unwrap();
    std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            use std::io::Write;
            let _ = (&c).write_all(b"host\n");
        }
    });
    assert_eq!(
        node.ask_from_outside(&format!("{NODE_IP}:2222")),
        Ok("host".into()),
        "the host service works"
    );
    let err = node.ask_from_outside("10.96.0.10:2222").unwrap_err();
    assert!(
        err.contains("refused"),
        "KUBE-IPVS-FILTER must reject it: {err}"
    );
    assert!(node.ask_from_outside("10.96.0.10:80").is_ok());
}

#[test]
fn foreign_ipvs_services_survive_syncs_and_cleanup() {
    let node = Node::new("foreign", 1);
    sh("ipvsadm -A -t 192.0.2.50:80 -s wlc && ipvsadm -a -t 192.0.2.50:80 -r 192.0.2.51:80 -g");
    sh("ipset create FOREIGN hash:ip && iptables -t nat -N FOREIGN-CHAIN");
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    node.write(
        "old.yaml",
        &service("old", "10.96.0.20", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    node.once(&[]);
    assert!(sh("ipvsadm -Sn").contains("10.96.0.20:80"));
    // A Service goes away: ours is deleted, the foreign one stays.
    node.remove("old.yaml");
    node.once(&[]);
    let ipvs = sh("ipvsadm -Sn");
    assert!(!ipvs.contains("10.96.0.20"), "{ipvs}");
    assert!(!sh("ip addr show kube-ipvs0").contains("10.96.0.20"));
    assert!(
        ipvs.contains("-A -t 192.0.2.50:80 -s wlc") && ipvs.contains("-r 192.0.2.51:80 -g"),
        "{ipvs}"
    );
    // --cleanup removes all of ours and nothing else.
    cleanup();
    let ipvs = sh("ipvsadm -Sn");
    assert_eq!(
        ipvs.lines().filter(|l| l.starts_with("-A")).count(),
        1,
        "{ipvs}"
    );
    assert!(ipvs.contains("192.0.2.50:80"));
    let sets = sh("ipset list -n");
    assert_eq!(sets.trim(), "FOREIGN");
    let rules = sh("iptables-save");
    assert!(!rules.contains("KUBE-"), "{rules}");
    assert!(rules.contains(":FOREIGN-CHAIN"));
    let (link_left, _) = try_sh("ip link show kube-ipvs0");
    assert!(!link_left, "kube-ipvs0 must be gone");
}

#[test]
fn restarts_and_changes_keep_established_connections() {
    let node = Node::new("restart", 2);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    node.once(&[]);
    let vip: SocketAddr = "10.96.0.10:80".parse().unwrap();
    let (name, mut conn) = within(&node.outside, move || open_tcp(vip)).unwrap();
    assert_eq!(name, node.pods[0].name);
    // Restart with nothing changed, then with a second endpoint added.
    node.once(&[]);
    node.write(
        "web.yaml",
        &service(
            "web",
            "10.96.0.10",
            "",
            "TCP",
            80,
            8080,
            &[(0, "node-a"), (1, "node-a")],
        ),
    );
    node.once(&[]);
    assert_eq!(echo(&mut conn, "still there"), Ok("still there".into()));
}

#[test]
fn a_bad_service_is_skipped_and_the_others_work() {
    let node = Node::new("bad", 1);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    node.write(
        "bad.yaml",
        &service("bad", "10.96.0.300", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    node.write(
        "bad2.yaml",
        &service("bad2", "10.96.0.31", "", "ICMP", 80, 8080, &[(0, "node-a")]),
    );
    let out = node.once(&[]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("t/bad") && log.contains("10.96.0.300"),
        "{log}"
    );
    assert!(log.contains("t/bad2") && log.contains("ICMP"), "{log}");
    assert_eq!(
        node.ask_from_outside("10.96.0.10:80"),
        Ok(node.pods[0].name.clone())
    );
}

#[test]
fn dry_run_prints_the_plan_and_touches_nothing() {
    let node = Node::new("dryrun", 1);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    let out = node.command(&["--dry-run"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(plan.contains("add service 10.96.0.10:80/tcp rr"), "{plan}");
    assert!(plan.contains("-A KUBE-POSTROUTING"), "{plan}");
    assert_eq!(sh("ipvsadm -Sn"), "");
    assert_eq!(sh("ipset list -n"), "");
    assert!(!try_sh("ip link show kube-ipvs0").0);
}

#[test]
fn a_running_agent_applies_manifest_changes() {
    let node = Node::new("running", 2);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    let mut agent = node.spawn(&["--ipvs-min-sync-period", "0s"]);
    let wait_for = |what: &str, want: &dyn Fn(&str) -> bool| {
        let start = Instant::now();
        loop {
            let ipvs = sh("ipvsadm -Sn");
            if want(&ipvs) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "timed out waiting for {what}:\n{ipvs}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_for("the first sync", &|s| s.contains("-r 10.244.0.2:8080"));
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(1, "node-a")]),
    );
    wait_for("the endpoint change", &|s| {
        s.contains("-r 10.244.0.3:8080") && !s.contains("-r 10.244.0.2:8080")
    });
    assert_eq!(
        node.ask_from_outside("10.96.0.10:80"),
        Ok(node.pods[1].name.clone())
    );
    let _ = agent.kill();
    let _ = agent.wait();
}

#[test]
fn external_and_load_balancer_ips_carry_traffic() {
    let node = Node::new("external", 1);
    let svc = service(
        "lb",
        "10.96.0.40",
        "  type: LoadBalancer\n  externalIPs: [198.51.100.7]\n",
        "TCP",
        80,
        8080,
        &[(0, "node-a")],
    )
    .replace("targetPort: 8080}]", "targetPort: 8080, nodePort: 30040}]")
    .replacen(
        "---\n",
        "status: {loadBalancer: {ingress: [{ip: 203.0.113.7}]}}\n---\n",
        1,
    );
    node.write("lb.yaml", &svc);
    node.once(&[]);
    let addrs = sh("ip -br addr show kube-ipvs0");
    assert!(
        addrs.contains("198.51.100.7/32") && addrs.contains("203.0.113.7/32"),
        "{addrs}"
    );
    let sets = sh("ipset save");
    assert!(
        sets.contains("add KUBE-EXTERNAL-IP 198.51.100.7,tcp:80"),
        "{sets}"
    );
    assert!(
        sets.contains("add KUBE-LOAD-BALANCER 203.0.113.7,tcp:80"),
        "{sets}"
    );
    for vip in [
        "198.51.100.7:80",
        "203.0.113.7:80",
        "192.168.100.1:30040",
        "10.96.0.40:80",
    ] {
        assert_eq!(
            node.ask_from_outside(vip),
            Ok(node.pods[0].name.clone()),
            "{vip}"
        );
    }
}

#[test]
fn the_api_server_source_programs_what_the_manifests_program() {
    use fake_apiserver::objects::{node as node_object, service as service_object, slice};
    let node = Node::new("api", 2);
    let objects = vec![
        service_object("web", "10.96.0.10", &[8080]),
        slice(
            "web",
            "a",
            8080,
            &[("10.244.0.2", "node-a"), ("10.244.0.3", "node-b")],
        ),
        service_object("other", "10.96.0.11", &[8080]),
        slice("other", "a", 8080, &[("10.244.0.3", "node-a")]),
        node_object("node-a", NODE_IP, "10.244.0.0/24"),
    ];
    for (i, o) in objects.iter().enumerate() {
        let mut o = o.clone();
        o["apiVersion"] = if o["kind"] == "EndpointSlice" {
            "discovery.k8s.io/v1"
        } else {
            "v1"
        }
        .into();
        node.write(&format!("o{i}.json"), &o.to_string());
    }
    node.once(&[]);
    let from_manifests = kernel_state();
    cleanup();
    assert_eq!(sh("ipvsadm -Sn"), "");

    let server = ApiServer::start(objects);
    once_from_api(&server.url);
    let from_api = kernel_state();
    assert_eq!(from_api, from_manifests);
    assert!(
        from_api.contains("-a -t 10.96.0.11:8080 -r 10.244.0.3:8080 -m -w 1"),
        "{from_api}"
    );
    assert_eq!(
        node.ask_from_outside("10.96.0.11:8080"),
        Ok(node.pods[1].name.clone())
    );
}

#[test]
fn healthz_livez_and_metrics_answer_with_kube_proxys_shapes() {
    let node = Node::new("health", 1);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    let mut agent = node.spawn(&[
        "--healthz-bind-address",
        "127.0.0.1:10256",
        "--metrics-bind-address",
        "127.0.0.1:10249",
    ]);
    let start = Instant::now();
    let (code, body) = loop {
        let (ok, _) = try_sh("ipvsadm -Sn | grep -q 10.96.0.10");
        if ok {
            let got = std::panic::catch_unwind(|| http_get("127.0.0.1:10256", "/healthz"));
            if let Ok(got) = got {
                break got;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the agent did not come up"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(code, 200, "{body}");
    for key in ["\"lastUpdated\"", "\"currentTime\"", "\"nodeEligible\""] {
        assert!(body.contains(key), "/healthz body lacks {key}: {body}");
    }
    let (code, body) = http_get("127.0.0.1:10256", "/livez");
    assert_eq!(code, 200, "{body}");
    // Programmed: ready once the sync that programmed it has reported.
    let ready = Instant::now();
    while try_http_get("127.0.0.1:10256", "/readyz").ok() != Some((200, "ok".into())) {
        assert!(
            ready.elapsed() < Duration::from_secs(10),
            "/readyz is not 200 after the first sync"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, metrics) = http_get("127.0.0.1:10249", "/metrics");
    assert_eq!(code, 200);
    for name in [
        "# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
    ] {
        assert!(metrics.contains(name), "/metrics lacks {name}:\n{metrics}");
    }
    assert_eq!(
        http_get("127.0.0.1:10249", "/proxyMode"),
        (200, "ipvs".into())
    );
    let _ = agent.kill();
    let _ = agent.wait();
}

/// One probe of a health port: when it was sent (since the lock was taken), how long the
/// answer took, and its status (`None`: no answer within the client's 5 s).
struct Probe {
    at: Duration,
    took: Duration,
    status: Option<u16>,
}

/// The probes as a table, with the median and longest answer times first.
fn probe_table(probes: &[(Probe, Probe)]) -> String {
    let mut took: Vec<Duration> = probes.iter().flat_map(|(h, p)| [h.took, p.took]).collect();
    took.sort();
    let Some(max) = took.last() else {
        return "no probe".into();
    };
    let mut out = format!(
        "{} probes each of /healthz and the health-check port, answered in {:.1?} (median), {max:.1?} (longest)\n",
        probes.len(),
        took[took.len() / 2]
    );
    for (h, p) in probes {
        out.push_str(&format!(
            "{:>6.2?} healthz {:?} in {:.1?}, port {:?} in {:.1?}\n",
            h.at, h.status, h.took, p.status, p.took
        ));
    }
    out
}

fn probe(addr: &str, path: &str, since: Instant) -> Probe {
    let at = since.elapsed();
    let t = Instant::now();
    let status = try_http_get(addr, path).ok().map(|(code, _)| code);
    Probe {
        at,
        took: t.elapsed(),
        status,
    }
}

/// Another program holding the xtables lock longer than the health timeout stalls only the
/// agent's `iptables-restore`, which gives up after 5 s (`-w 5`, kube-proxy's bound) and is
/// retried at the next sync: `/healthz` and a health-check node port answer at once
/// throughout, 200 until a change has waited the health timeout (2 × the 3 s sync period)
/// without being programmed, then 503, and 200 again once the lock is released and the
/// rules are written. Each test's agent has a lock file of its own (`XTABLES_LOCKFILE`, read
/// by iptables itself), so that the lab's other tests, running at the same time, are not held.
#[test]
fn health_ports_answer_while_another_program_holds_the_xtables_lock() {
    let node = Node::new("xlock", 1);
    // A legacy node (the kubelet's canary chain there): iptables-nft takes no lock.
    sh("iptables-legacy -w -t mangle -N KUBE-KUBELET-CANARY");
    let lock_path = "/run/xtables-lab-xlock.lock";
    let web = service(
        "web",
        "10.96.0.10",
        "  type: LoadBalancer\n  externalTrafficPolicy: Local\n  healthCheckNodePort: 32054\n",
        "TCP",
        80,
        8080,
        &[(0, "node-a")],
    )
    .replace("targetPort: 8080}]", "targetPort: 8080, nodePort: 31084}]");
    node.write("web.yaml", &web);
    let log_path = std::env::temp_dir().join("agent-lab-xlock.log");
    let mut agent = node
        .command(&[
            "--healthz-bind-address",
            "127.0.0.1:10256",
            "--ipvs-sync-period",
            "3s",
            "--ipvs-min-sync-period",
            "0s",
        ])
        .env("XTABLES_LOCKFILE", lock_path)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("start the agent");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let (healthz, port) = ("127.0.0.1:10256", "127.0.0.1:32054");
    let start = Instant::now();
    // The health-check port opens after the first sync.
    while !(matches!(try_http_get(healthz, "/healthz"), Ok((200, _)))
        && matches!(try_http_get(port, "/"), Ok((200, _))))
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the agent did not come up:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        sh("iptables-legacy-save -t nat").contains("-A KUBE-POSTROUTING"),
        "not a legacy node:\n{}",
        log()
    );

    // Take the agent's lock, then change its rules behind its back through another lock
    // file: the next full sync must rewrite them, and so wait for the lock.
    let lock = std::fs::File::create(lock_path).unwrap();
    lock.lock().unwrap();
    let held = Instant::now();
    sh(
        "XTABLES_LOCKFILE=/run/xtables-lab-xlock-other.lock iptables-legacy -w -t nat -F KUBE-POSTROUTING",
    );
    let mut probes: Vec<(Probe, Probe)> = Vec::new();
    let sample = |probes: &mut Vec<(Probe, Probe)>| {
        probes.push((probe(healthz, "/healthz", held), probe(port, "/", held)));
        std::thread::sleep(Duration::from_millis(250));
    };
    // The first write that gave up on the lock, as iptables-legacy-restore says it.
    while !log().contains("holding the xtables lock") {
        assert!(
            held.elapsed() < Duration::from_secs(30),
            "no write gave up waiting for the lock:\n{}\n{}",
            probe_table(&probes),
            log()
        );
        sample(&mut probes);
    }
    let gave_up = held.elapsed();
    // A change now waits behind the lock; past the health timeout (6 s) the node is
    // unhealthy.
    node.write(
        "other.yaml",
        &service("other", "10.96.0.11", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    let changed = held.elapsed();
    while held.elapsed() < changed + Duration::from_secs(12) {
        sample(&mut probes);
    }
    // What the public port says of a node stuck behind the lock.
    let stuck_body = try_http_get(healthz, "/healthz").map(|(_, body)| body);
    lock.unlock().unwrap();
    let released = held.elapsed();
    let mut recovered = None;
    while held.elapsed() < released + Duration::from_secs(30) {
        let (h, p) = (probe(healthz, "/healthz", held), probe(port, "/", held));
        if h.status == Some(200) && p.status == Some(200) {
            recovered = Some(h.at - released);
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let _ = agent.kill();
    let _ = agent.wait();
    let log = log();

    let table = probe_table(&probes);
    eprintln!(
        "xtables lock held {released:.1?}; the first write gave up at {gave_up:.1?}; change at {changed:.1?}; healthy again {recovered:.1?} after the release; {table}"
    );
    let max = probes
        .iter()
        .flat_map(|(h, p)| [h.took, p.took])
        .max()
        .unwrap_or_default();
    assert!(
        probes
            .iter()
            .all(|(h, p)| h.status.is_some() && p.status.is_some()),
        "a probe got no answer while the lock was held:\n{table}"
    );
    assert!(
        max < Duration::from_secs(2),
        "a probe waited {max:?}:\n{table}"
    );
    // Nothing was waiting to be programmed before the change: healthy.
    assert!(
        probes
            .iter()
            .filter(|(h, _)| h.at < changed)
            .all(|(h, p)| h.status == Some(200) && p.status == Some(200)),
        "unhealthy before anything waited:\n{table}"
    );
    // The change has waited longer than the health timeout (with a sync's slack): 503, on the
    // proxy's port and on the load balancer's.
    let late: Vec<_> = probes
        .iter()
        .filter(|(h, _)| h.at > changed + Duration::from_secs(8))
        .collect();
    assert!(!late.is_empty(), "{table}");
    assert!(
        late.iter()
            .all(|(h, p)| h.status == Some(503) && p.status == Some(503)),
        "still healthy with a change stuck behind the lock:\n{table}"
    );
    assert!(
        recovered.is_some(),
        "not healthy again after the release:\n{table}\n{log}"
    );
    assert!(
        log.contains("Stopped waiting after 5s"),
        "the wait was not bounded by -w 5:\n{log}"
    );
    assert!(
        sh("iptables-legacy-save -t nat").contains("-A KUBE-POSTROUTING"),
        "the rules were not written again"
    );
    assert!(sh("ipvsadm -Sn").contains("10.96.0.11:80"));
    // kube-proxy's body; the reason stays in the log.
    let body = stuck_body.expect("/healthz answered");
    let v: serde_json::Value = serde_json::from_str(&body).expect(&body);
    assert_eq!(v["nodeEligible"], true, "{body}");
    assert!(!body.contains("xtables"), "{body}");
}

/// Slow clients from another host cannot shut the health ports: while 2,000 connections
/// from the outside namespace hold the health server and 2,000 a health-check node port,
/// each sending a request head it never finishes and opened again whenever the agent cuts
/// it, a kubelet-style probe from the node (1 s to answer, as kubelet's default
/// `timeoutSeconds`) gets its answer from both, 50 times in a row. The servers used to take
/// 256 connections and leave the rest in the kernel's accept queue, so the probe waited
/// behind the held ones and kubelet restarted the agent.
#[test]
fn health_ports_answer_the_node_while_slow_clients_hold_them() {
    const HELD: usize = 2000;
    let node = Node::new("slowloris", 1);
    let web = service(
        "web",
        "10.96.0.10",
        "  type: LoadBalancer\n  externalTrafficPolicy: Local\n  healthCheckNodePort: 32055\n",
        "TCP",
        80,
        8080,
        &[(0, "node-a")],
    )
    .replace("targetPort: 8080}]", "targetPort: 8080, nodePort: 31085}]");
    node.write("web.yaml", &web);
    // This process holds 4,000 sockets at once (the agent inherits the limit).
    lab::guest::raise_open_files(65536);
    let mut agent = node.spawn(&["--healthz-bind-address", "0.0.0.0:10256"]);
    let (healthz, port) = ("127.0.0.1:10256", "127.0.0.1:32055");
    let start = Instant::now();
    while !(matches!(try_http_get(healthz, "/livez"), Ok((200, _)))
        && matches!(try_http_get(port, "/"), Ok((200, _))))
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the agent did not come up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let holders: Vec<_> = [10256u16, 32055]
        .into_iter()
        .map(|p| {
            let stop = std::sync::Arc::clone(&stop);
            let target: SocketAddr = format!("{NODE_IP}:{p}").parse().unwrap();
            node.outside.spawn(move || hold_slowly(target, HELD, &stop))
        })
        .collect();
    // Every connection opened once (2,000 at 200 a second) before the probes start.
    std::thread::sleep(Duration::from_secs(12));
    let mut probes = Vec::new();
    let probing = Instant::now();
    for _ in 0..50 {
        for addr in [healthz, port] {
            let path = if addr == healthz { "/livez" } else { "/" };
            let t = Instant::now();
            let got = probe_within(addr, path, Duration::from_secs(1));
            probes.push((addr, t.elapsed(), got, t - probing));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let opened: Vec<usize> = holders.into_iter().map(|h| h.join().unwrap()).collect();
    let alive = agent.try_wait().unwrap().is_none();
    let _ = agent.kill();
    let _ = agent.wait();

    let mut took: Vec<Duration> = probes.iter().map(|(_, t, _, _)| *t).collect();
    took.sort();
    let summary = format!(
        "{} probes, answered in {:.1?} (median), {:.1?} (longest); the slow clients opened {opened:?} connections",
        probes.len(),
        took[took.len() / 2],
        took[took.len() - 1]
    );
    eprintln!("{summary}");
    assert!(alive, "the agent died under the slow clients");
    assert!(
        opened.iter().all(|&n| n >= HELD),
        "the slow clients never held {HELD} connections: {summary}"
    );
    let failed: Vec<_> = probes
        .iter()
        .filter(|(_, _, got, _)| !matches!(got, Ok(200)))
        .collect();
    assert!(
        failed.is_empty(),
        "{summary}; {} of {} probes failed, the first: {:?}",
        failed.len(),
        probes.len(),
        &failed[..failed.len().min(8)]
    );
}

/// Keeps `count` connections to `target` open, each with an unfinished request head, and
/// opens a new one whenever one is closed, until `stop`; how many it opened in all.
fn hold_slowly(target: SocketAddr, count: usize, stop: &std::sync::atomic::AtomicBool) -> usize {
    use std::io::{Read, Write};
    let mut held: Vec<std::net::TcpStream> = Vec::with_capacity(count);
    let mut opened = 0;
    let connect = || -> Option<std::net::TcpStream> {
        let mut s =
            std::net::TcpStream::connect_timeout(&target, Duration::from_millis(200)).ok()?;
        s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n").ok()?;
        s.set_nonblocking(true).ok()?;
        Some(s)
    };
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        // Those the agent closed go; the rest stay.
        let mut buf = [0u8; 256];
        held.retain_mut(
            |s| matches!(s.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        );
        // At most 20 new ones a round, 200 a second: all 2,000 refilled every 10 s, the
        // header timeout, as a client bent on holding the port would. (A flood of connections
        // faster than the agent can accept them overflows the kernel's accept queue, which
        // drops every SYN alike, the probe's too: no server can sort that out.)
        let mut round = 0;
        while held.len() < count && round < 20 && !stop.load(std::sync::atomic::Ordering::Relaxed) {
            round += 1;
            match connect() {
                Some(s) => {
                    held.push(s);
                    opened += 1;
                }
                None => break,
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    opened
}

/// A kubelet-style HTTP probe: the status code, or why there is none within `timeout`
/// (connecting and the whole answer included).
fn probe_within(addr: &str, path: &str, timeout: Duration) -> Result<u16, String> {
    use std::io::{Read, Write};
    let deadline = Instant::now() + timeout;
    let target: SocketAddr = addr.parse().unwrap();
    let mut s = std::net::TcpStream::connect_timeout(&target, timeout)
        .map_err(|e| format!("connect: {e}"))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.37\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no answer within {timeout:?}"));
        }
        s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status in {:?}", String::from_utf8_lossy(&answer)))
}

/// Every metric family on `/metrics` gets samples once what it measures has happened, and
/// those this test makes happen are above zero: a metric registered but never recorded (the
/// network-programming latency and the IPVS connections gauge were) fails here.
#[test]
fn every_metric_is_fed_when_what_it_measures_happens() {
    let node = Node::new("metrics", 1);
    let objects = |trigger: Option<&str>, dns_endpoints: &[(usize, &str)]| {
        let mut web = service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]);
        if let Some(t) = trigger {
            web = web.replace(
                "metadata: {name: web-x, namespace: t, labels:",
                &format!(
                    "metadata: {{name: web-x, namespace: t, annotations: \
                     {{endpoints.kubernetes.io/last-change-trigger-time: '{t}'}}, labels:"
                ),
            );
        }
        [
            web,
            service("dns", "10.96.0.53", "", "UDP", 53, 5353, dns_endpoints),
            // Endpoints on another node only: a Local Service without local endpoints.
            service(
                "local",
                "10.96.0.60",
                "  type: NodePort\n  externalTrafficPolicy: Local\n",
                "TCP",
                80,
                8080,
                &[(0, "node-b")],
            ),
        ]
        .join("\n---\n")
    };
    node.write("svc.yaml", &objects(None, &[(0, "node-a")]));
    let mut agent = node.spawn(&[
        "--healthz-bind-address",
        "127.0.0.1:10256",
        "--metrics-bind-address",
        "127.0.0.1:10249",
        "--ipvs-sync-period",
        "2s",
        "--ipvs-service-metrics",
    ]);
    let start = Instant::now();
    while !(try_sh("ipvsadm -Sn | grep -q 10.96.0.10").0
        && try_http_get("127.0.0.1:10256", "/healthz").is_ok())
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the agent did not come up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Health probes, a connection IPVS tracks, an EndpointSlice change stamped with its
    // trigger time (after the agent's start), a UDP endpoint removed (a conntrack pass), a
    // virtual server deleted behind the agent's back (drift).
    http_get("127.0.0.1:10256", "/healthz");
    http_get("127.0.0.1:10256", "/livez");
    assert_eq!(
        node.ask_from_outside("10.96.0.10:80"),
        Ok(node.pods[0].name.clone())
    );
    // RFC 3339 with microseconds (the lab's busybox `date` has no `%N`).
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    node.write("svc.yaml", &objects(Some(&now), &[]));
    sh("ipvsadm -D -t 10.96.0.60:80");
    let provoked = [
        "kubeproxy_sync_proxy_rules_duration_seconds",
        "kubeproxy_network_programming_duration_seconds",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "kubeproxy_sync_proxy_rules_endpoint_changes_total",
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
        "kubeproxy_proxy_healthz_total",
        "kubeproxy_proxy_livez_total",
        "kubeproxy_conntrack_reconciler_sync_duration_seconds",
        "kube_proxy_ipvs_operations_total",
        "kube_proxy_ipvs_syncs_total",
        "kube_proxy_ipvs_drift_repaired_total",
        "kube_proxy_ipvs_connections",
        "kube_proxy_ipvs_ipset_entries",
        "kube_proxy_ipvs_service_connections_total",
        "kube_proxy_ipvs_service_in_packets_total",
        "kube_proxy_ipvs_service_out_packets_total",
        "kube_proxy_ipvs_service_in_bytes_total",
        "kube_proxy_ipvs_service_out_bytes_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "kube_proxy_ipvs_heap_inuse_bytes",
        "process_start_time_seconds",
        "kubernetes_build_info",
    ];
    let deadline = Instant::now() + Duration::from_secs(40);
    let (families, unfed) = loop {
        let (code, text) = http_get("127.0.0.1:10249", "/metrics");
        assert_eq!(code, 200);
        let families = metric_families(&text);
        let unfed: Vec<String> = families
            .iter()
            .filter(|(_, values)| values.is_empty())
            .map(|(name, _)| format!("{name}: no sample"))
            .chain(
                provoked
                    .iter()
                    .filter_map(|name| match families.get(*name) {
                        None => Some(format!("{name}: not exposed")),
                        Some(v) if !v.iter().any(|x| *x > 0.0) => {
                            Some(format!("{name}: only zeros"))
                        }
                        Some(_) => None,
                    }),
            )
            .collect();
        if unfed.is_empty() || Instant::now() > deadline {
            break (families, unfed);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(
        unfed.is_empty(),
        "metrics never fed after 40 s: {unfed:#?}\n(families: {:?})",
        families.keys().collect::<Vec<_>>()
    );
}

/// With `--ipvs-service-metrics`, the kernel's counters of a Service's virtual server grow on
/// `/metrics` as requests go through it (read at each full sync, here every second), under
/// the Service port's labels; a virtual server that is not the agent's has no series, and
/// `/configz` shows the setting.
#[test]
fn ipvs_service_counters_grow_as_traffic_goes_through_the_service() {
    let node = Node::new("svcstats", 1);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    // Someone else's virtual server: never labelled as a Service.
    sh("ipvsadm -A -t 10.1.1.1:80 -s rr");
    let mut agent = node.spawn(&[
        "--metrics-bind-address",
        "127.0.0.1:10249",
        "--ipvs-sync-period",
        "1s",
        "--ipvs-service-metrics",
    ]);
    let web = "{namespace=\"t\",service=\"web\",port_name=\"p\",protocol=\"TCP\",address=\"10.96.0.10:80\"}";
    let read = |name: &str| -> Option<u64> {
        let (_, text) = try_http_get("127.0.0.1:10249", "/metrics").ok()?;
        let line = format!("kube_proxy_ipvs_service_{name}_total{web} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&line))?
            .parse()
            .ok()
    };
    let counters = [
        "connections",
        "in_packets",
        "out_packets",
        "in_bytes",
        "out_bytes",
    ];
    let all = || counters.map(read);
    // The first full sync lists the new virtual server with nothing counted yet.
    let start = Instant::now();
    let before = loop {
        if let [Some(a), Some(b), Some(c), Some(d), Some(e)] = all() {
            break [a, b, c, d, e];
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no kube_proxy_ipvs_service_* series for web: {:?}",
            try_http_get("127.0.0.1:10249", "/metrics")
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for _ in 0..3 {
        assert_eq!(
            node.ask_from_outside("10.96.0.10:80"),
            Ok(node.pods[0].name.clone())
        );
    }
    let start = Instant::now();
    let after = loop {
        let now = all().map(|v| v.unwrap_or(0));
        // Three connections more, and each of them moved packets and bytes both ways.
        if now[0] >= before[0] + 3 && (1..5).all(|i| now[i] >= before[i] + 3) {
            break now;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the counters did not grow: before {before:?}, now {now:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let (_, text) = http_get("127.0.0.1:10249", "/metrics");
    let (_, configz) = http_get("127.0.0.1:10249", "/configz");
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(
        after[3] > after[1] && after[4] > after[2],
        "bytes below packets: {after:?}"
    );
    assert!(
        !text.contains("address=\"10.1.1.1:80\""),
        "a foreign virtual server got a series:\n{text}"
    );
    let v: serde_json::Value = serde_json::from_str(&configz).expect(&configz);
    let c = &v["kubeproxy.config.k8s.io"];
    assert_eq!(c["ipvs"]["serviceMetrics"], true, "{configz}");
    assert_eq!(c["ipvs"]["syncPeriod"], "1s", "{configz}");
    assert_eq!(c["metricsBindAddress"], "127.0.0.1:10249", "{configz}");
}

/// The metric families of an exposition (`# TYPE` lines) with their samples' values
/// (a histogram's `_count`s only).
fn metric_families(text: &str) -> std::collections::BTreeMap<String, Vec<f64>> {
    let mut families: std::collections::BTreeMap<String, (String, Vec<f64>)> =
        std::collections::BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                families.insert(name.to_string(), (kind.to_string(), Vec::new()));
            }
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN);
        let family = families
            .get(name)
            .map(|_| name)
            .or_else(|| name.strip_suffix("_count"))
            .or_else(|| name.strip_suffix("_bucket"))
            .or_else(|| name.strip_suffix("_sum"));
        if let Some((kind, values)) = family.and_then(|f| families.get_mut(f)) {
            let counted = kind != "histogram" || name.ends_with("_count");
            if counted {
                values.push(value);
            }
        }
    }
    families.into_iter().map(|(k, (_, v))| (k, v)).collect()
}

#[test]
fn a_dual_stack_service_answers_on_both_families() {
    let node = Node::new("dual", 1);
    let pod = node.pods[0].ns.name().to_string();
    let out = node.outside.name().to_string();
    // IPv6 beside IPv4: the bridge, the pod, the outside client. IPv6 forwarding is the
    // node's to set (its CNI or its setup), as kube-proxy leaves it alone.
    sh("sysctl -qw net.ipv6.conf.all.forwarding=1");
    sh("ip addr add fd00:244::1/64 dev cni0 nodad");
    sh(&format!(
        "ip -n {pod} addr add fd00:244::2/64 dev eth0 nodad && ip -n {pod} route add default via fd00:244::1"
    ));
    let host_end = sh("ip -o link show | grep -o 'lveth[0-9]*@if[0-9]*' | tail -1");
    let host_end = host_end
        .trim()
        .split('@')
        .next()
        .unwrap_or_default()
        .to_string();
    sh(&format!("ip addr add fd00:100::1/64 dev {host_end} nodad"));
    sh(&format!(
        "ip -n {out} addr add fd00:100::2/64 dev eth0 nodad && ip -n {out} route add default via fd00:100::1"
    ));
    let yaml = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: t}\n\
        spec: {clusterIP: 10.96.0.10, clusterIPs: [10.96.0.10, 'fd00:96::10'], ipFamilies: [IPv4, IPv6], \
        ipFamilyPolicy: RequireDualStack, ports: [{name: p, protocol: TCP, port: 80, targetPort: 8080}]}\n---\n\
        apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
        metadata: {name: web-v4, namespace: t, labels: {kubernetes.io/service-name: web}}\n\
        addressType: IPv4\nports: [{name: p, protocol: TCP, port: 8080}]\n\
        endpoints: [{addresses: [10.244.0.2], nodeName: node-a}]\n---\n\
        apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
        metadata: {name: web-v6, namespace: t, labels: {kubernetes.io/service-name: web}}\n\
        addressType: IPv6\nports: [{name: p, protocol: TCP, port: 8080}]\n\
        endpoints: [{addresses: ['fd00:244::2'], nodeName: node-a}]\n";
    node.write("web.yaml", yaml);
    node.once(&["--cluster-cidr", "10.244.0.0/16,fd00:244::/64"]);
    let ipvs = sh("ipvsadm -Sn");
    assert!(ipvs.contains("-A -t [fd00:96::10]:80 -s rr"), "{ipvs}");
    assert!(
        ipvs.contains("-a -t [fd00:96::10]:80 -r [fd00:244::2]:8080 -m -w 1"),
        "{ipvs}"
    );
    let sets = sh("ipset save");
    assert!(
        sets.contains("add KUBE-6-CLUSTER-IP fd00:96::10,tcp:80"),
        "{sets}"
    );
    assert!(
        sets.contains("create KUBE-6-LOAD-BALANCER-SOURCE-CID hash:ip,port,net family inet6"),
        "{sets}"
    );
    let rules6 = sh("ip6tables-save");
    assert!(
        rules6.contains("-A KUBE-SERVICES -s ::1/128 -j RETURN"),
        "{rules6}"
    );
    assert!(sh("ip -br addr show kube-ipvs0").contains("fd00:96::10/128"));
    assert_eq!(
        node.ask_from_outside("[fd00:96::10]:80"),
        Ok(node.pods[0].name.clone())
    );
    assert_eq!(
        node.ask_from_outside("10.96.0.10:80"),
        Ok(node.pods[0].name.clone())
    );
    // `--cleanup` without flags removes both families' state, as kube-proxy's cleanup does.
    cleanup();
    assert!(
        !sh("ipvsadm -Sn").contains("fd00:"),
        "IPv6 virtual servers left"
    );
    assert!(!sh("ipset list -n").contains("KUBE-"), "sets left");
    assert!(
        kube_rules(&sh("ip6tables-save")).is_empty(),
        "ip6tables chains left"
    );
}

#[test]
fn a_removed_endpoint_drains_its_open_connection_then_goes() {
    use std::io::Write;

    let node = Node::new("drain", 2);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    let mut agent = node.spawn(&["--ipvs-min-sync-period", "0s", "--ipvs-sync-period", "2s"]);
    let wait_for = |what: &str, want: &dyn Fn(&str) -> bool| {
        let start = Instant::now();
        loop {
            let ipvs = sh("ipvsadm -Sn");
            if want(&ipvs) {
                return ipvs;
            }
            assert!(
                start.elapsed() < Duration::from_secs(40),
                "timed out waiting for {what}:\n{ipvs}\n{}",
                sh("ipvsadm -Ln")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let old = "-a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m";
    wait_for("the first sync", &|s| s.contains(&format!("{old} -w 1")));
    let vip: SocketAddr = "10.96.0.10:80".parse().unwrap();
    let (name, mut conn) = within(&node.outside, move || open_tcp(vip)).unwrap();
    assert_eq!(name, node.pods[0].name);

    // The endpoint moves to the other pod: the old real server stays, at weight 0.
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(1, "node-a")]),
    );
    wait_for("the drain", &|s| {
        s.contains(&format!("{old} -w 0")) && s.contains("-r 10.244.0.3:8080 -m -w 1")
    });
    // Several full syncs later (each reads the connection counts) it is still there, the open
    // connection still works, and new connections go to the new pod only.
    std::thread::sleep(Duration::from_secs(5));
    assert!(sh("ipvsadm -Sn").contains(&format!("{old} -w 0")));
    assert_eq!(echo(&mut conn, "still there"), Ok("still there".into()));
    assert_eq!(
        names(4, || node.ask_from_outside("10.96.0.10:80")),
        vec![node.pods[1].name.clone(); 4]
    );

    // The connection ends. Closing with an unread echo pending makes the kernel reset it, so
    // IPVS forgets it after its CLOSE timeout (10 s) instead of TIME_WAIT's 2 minutes.
    conn.get_mut().write_all(b"bye\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(conn);
    wait_for("the drained real server to go", &|s| !s.contains(old));
    assert!(sh("ipvsadm -Sn").contains("-r 10.244.0.3:8080 -m -w 1"));
    let _ = agent.kill();
    let _ = agent.wait();
}

#[test]
fn a_udp_flow_moves_to_the_new_endpoint_at_once() {
    let node = Node::new("ctudp", 2);
    let dns = |pod: usize| service("dns", "10.96.0.53", "", "UDP", 53, 5353, &[(pod, "node-a")]);
    node.write("dns.yaml", &dns(0));
    node.once(&[]);
    let vip: SocketAddr = "10.96.0.53:53".parse().unwrap();
    let ask = || {
        within(&node.outside, move || {
            ask_udp_from(40053, vip, Duration::from_secs(2))
        })
    };
    // One client flow (a fixed source port, as a resolver's) reaches pod A...
    for _ in 0..3 {
        assert_eq!(ask(), Ok(node.pods[0].name.clone()));
    }
    assert!(sh("conntrack -L -p udp --orig-port-src 40053 2>/dev/null").contains("10.244.0.2"));
    // Entries the kernel does not end by itself (IPVS ends those of its own connections to a
    // deleted real server, `expire_nodest_conn`): one to the VIP answered by A, to be deleted,
    // and two to keep (answered by B; another port of the VIP).
    let insert = |sport: u16, dport: u16, reply: &str| {
        sh(&format!(
            "conntrack -I -p udp -s 192.168.100.2 -d 10.96.0.53 --sport {sport} --dport {dport} \
             --reply-src {reply} --reply-dst 192.168.100.2 --reply-port-src 5353 \
             --reply-port-dst {sport} --timeout 120 2>&1"
        ))
    };
    insert(41000, 53, "10.244.0.2");
    insert(41001, 53, "10.244.0.3");
    insert(41002, 54, "10.244.0.2");
    let listed = || sh("conntrack -L -p udp -d 10.96.0.53 2>/dev/null");
    assert!(listed().contains("sport=41000"), "{}", listed());
    // ...the Service moves to pod B (A still runs, so only the agent can move the flow)...
    node.write("dns.yaml", &dns(1));
    let out = node.once(&[]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("conntrack reconciled"), "{log}");
    let left = listed();
    assert!(!left.contains("sport=41000"), "{left}");
    assert!(
        left.contains("sport=41001") && left.contains("sport=41002"),
        "{left}"
    );
    // ...and the flow's very next datagram is answered by B: the entry to A was deleted
    // (without that, IPVS drops it and only a later one reaches B, kube-proxy #71514).
    assert_eq!(ask(), Ok(node.pods[1].name.clone()));
    assert_eq!(ask(), Ok(node.pods[1].name.clone()));
}

#[test]
fn an_unknown_scheduler_is_refused_at_start_and_init_only_sets_up_the_host() {
    let node = Node::new("probe", 1);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    let out = node
        .command(&["--once", "--ipvs-scheduler", "nosuch"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("\"nosuch\"") && log.contains("ip_vs_nosuch"),
        "{log}"
    );
    assert_eq!(
        sh("ipvsadm -Sn"),
        "",
        "nothing is programmed with a bad scheduler"
    );

    sh("sysctl -qw net.ipv4.vs.conntrack=0");
    let out = node.command(&["--init-only"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sh("sysctl -n net.ipv4.vs.conntrack").trim(), "1");
    assert_eq!(sh("ipvsadm -Sn"), "", "--init-only programs no Service");
}

#[test]
fn a_sync_killed_at_any_point_converges_without_leftovers() {
    const N: usize = 300;
    let node = Node::new("crash", 1);
    let clean = || {
        cleanup();
        assert_eq!(sh("ipvsadm -Sn"), "");
    };
    // The state an uninterrupted run reaches once Service s7 is gone.
    node.write("svc.yaml", &many_services(N, Some(7)));
    node.once(&[]);
    let reference = kernel_state();
    clean();
    let started = Instant::now();
    node.write("svc.yaml", &many_services(N, None));
    node.once(&[]);
    let cold = started.elapsed();
    clean();
    let mut row = lab::report::Row::new("crash", "kill -9 during a cold sync of 300 Services");
    row.tried(format!(
        "8 kills (--once) at 0/8..7/8 of a {cold:.1?} cold sync, s7 removed while dead"
    ));
    // Kill the agent at points spread over a cold sync, remove s7, run again: exactly the
    // reference, whatever the crash left (s7's half-made objects included).
    for step in 0..8u32 {
        node.write("svc.yaml", &many_services(N, None));
        let mut agent = node.spawn(&["--once"]);
        std::thread::sleep(cold * step / 8);
        let _ = Command::new("kill")
            .args(["-9", &agent.id().to_string()])
            .status();
        let _ = agent.wait();
        node.write("svc.yaml", &many_services(N, Some(7)));
        node.once(&[]);
        assert_state(
            &mut row,
            &format!("killed {:?} into a {cold:?} cold sync", cold * step / 8),
            &kernel_state(),
            &reference,
        );
        clean();
    }
    row.lost("0 differences from an uninterrupted run after each of 8 kills");
}

/// While another network namespace adds and clears virtual servers, IPVS dumps of this one
/// repeat and skip entries; the agent lists until two dumps agree, so a sync still deletes
/// every leftover and a cleanup leaves nothing (with a single dump, leftovers stay).
#[test]
fn leftovers_are_deleted_while_another_namespace_changes_ipvs() {
    const N: usize = 300;
    let node = Node::new("churn", 1);
    // Every third Service goes away in the second sync.
    let fewer = services_where(N, |i| i % 3 != 0);
    node.write("svc.yaml", &fewer);
    node.once(&[]);
    let reference = kernel_state();
    cleanup();
    let mut row = lab::report::Row::new(
        "kernel hazard",
        "another namespace adding and deleting virtual servers during our dumps",
    );
    row.tried("6 rounds under churn in another namespace");
    let churn = churn_elsewhere();
    // Plain `ipvsadm -Sn` dumps that differ from a settled one: the churn's effect.
    let (mut plain, mut disturbed) = (0, 0);
    for round in 0..6 {
        node.write("svc.yaml", &many_services(N, None));
        node.once(&[]);
        let settled = stable_ipvs_dump();
        for _ in 0..5 {
            plain += 1;
            if sh("ipvsadm -Sn") != settled {
                disturbed += 1;
            }
        }
        node.write("svc.yaml", &fewer);
        node.once(&[]);
        assert_state(
            &mut row,
            &format!(
                "round {round}, after the sync that deletes {} Services",
                N / 3
            ),
            &kernel_state(),
            &reference,
        );
        cleanup();
        let left = stable_ipvs_dump();
        assert!(left.is_empty(), "round {round}, after --cleanup: {left}");
    }
    let rounds = churn.stop();
    row.tried(format!(
        "6 rounds: a sync of {N} Services, a sync deleting {}, a cleanup; meanwhile {rounds} rounds \
         of 300 virtual servers added and cleared in another namespace ({disturbed} of {plain} \
         plain ipvsadm dumps of ours wrong)",
        N / 3
    ));
    row.lost("0 leftovers, 0 missing (a single dump per sync left 64 leftovers)");
    assert!(rounds > 0, "the other namespace never changed IPVS");
}

/// An add of a virtual server the observation missed (a dump that skipped it) is not a
/// failure: the existing server is set to the planned settings, and its real servers too.
#[test]
fn adding_a_virtual_server_that_exists_sets_it() {
    use kube_proxy_ipvs_agent::dataplane::Dataplane;
    use kube_proxy_ipvs_agent::dataplane::kernel::Kernel;
    use kube_proxy_ipvs_agent::model::kernel::{VirtualServer, VsKey};
    use kube_proxy_ipvs_agent::model::plan::{Op, Plan};
    use kube_proxy_ipvs_agent::model::snapshot::cluster::{Family, Protocol};

    let _ns = lab::guest::Netns::fresh();
    sh(
        "ipvsadm -A -t 10.96.0.10:80 -s wrr && ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 3",
    );
    let key = VsKey {
        address: "10.96.0.10".parse().unwrap(),
        protocol: Protocol::Tcp,
        port: 80,
    };
    let plan = Plan {
        ops: vec![
            Op::AddService {
                key,
                service: Box::new(VirtualServer {
                    scheduler: "rr".into(),
                    ..VirtualServer::default()
                }),
            },
            Op::AddDestination {
                key,
                destination: "10.244.0.2:8080".parse().unwrap(),
                weight: 1,
            },
        ],
        warnings: Vec::new(),
    };
    let applied = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut kernel = Kernel::connect(vec![Family::V4], Vec::new())
                .await
                .expect("connect");
            kernel.apply(&plan).await.expect("apply")
        });
    assert!(applied.failed.is_empty(), "{:?}", applied.failed);
    assert_eq!(applied.done, 2);
    assert_eq!(
        sh("ipvsadm -Sn"),
        "-A -t 10.96.0.10:80 -s rr\n-a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 1\n"
    );
}

/// The targeted read of a sync that removes real servers: the named virtual servers' real
/// servers with their weights and connection counts. IPVS answers for a virtual server it
/// does not hold (deleted behind the agent's back) as for one without real servers, with no
/// error: the plan then adds real servers to it, which fails and makes the kernel read whole.
#[test]
fn the_real_servers_of_named_virtual_servers_are_read_alone() {
    use kube_proxy_ipvs_agent::dataplane::Dataplane;
    use kube_proxy_ipvs_agent::dataplane::kernel::Kernel;
    use kube_proxy_ipvs_agent::model::kernel::VsKey;
    use kube_proxy_ipvs_agent::model::snapshot::cluster::{Family, Protocol};

    let _ns = lab::guest::Netns::fresh();
    sh("ipvsadm -A -t 10.96.0.10:80 -s rr \
        && ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 1 \
        && ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.3:8080 -m -w 0 \
        && ipvsadm -A -t 10.96.0.12:80 -s rr \
        && ipvsadm -a -t 10.96.0.12:80 -r 10.244.0.9:8080 -m -w 1");
    let key = |ip: &str| VsKey {
        address: ip.parse().unwrap(),
        protocol: Protocol::Tcp,
        port: 80,
    };
    let read = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut kernel = Kernel::connect(vec![Family::V4], Vec::new())
                .await
                .expect("connect");
            kernel
                .observe_real_servers(&[key("10.96.0.10"), key("10.96.0.11")])
                .await
                .expect("read")
        });
    assert_eq!(read.len(), 2, "{read:?}");
    assert_eq!(read[0].0, key("10.96.0.10"));
    let found = read[0].1.as_ref().expect("10.96.0.10 is in the kernel");
    let weights: Vec<(SocketAddr, u32)> = found
        .destinations
        .iter()
        .map(|(a, w)| (a.socket_addr(), *w))
        .collect();
    assert_eq!(
        weights,
        [
            ("10.244.0.2:8080".parse().unwrap(), 1),
            ("10.244.0.3:8080".parse().unwrap(), 0)
        ]
    );
    assert_eq!(found.connections.len(), 2);
    assert!(found.connections.values().all(|c| c.is_idle()));
    assert_eq!(read[1].0, key("10.96.0.11"));
    let missing = read[1].1.as_ref().map(|r| r.destinations.len());
    assert!(matches!(missing, None | Some(0)), "{read:?}");
}

/// The first sync programs the API server's and the DNS Service alone before the rest of a
/// cold node: right after its first apply the kernel holds those two virtual servers and no
/// other, and both answer real requests (TCP from the node itself, which needs the
/// masquerade rules and sets too; UDP from outside); then the full state follows.
#[test]
fn the_api_server_and_dns_services_answer_before_the_rest_is_programmed() {
    use kube_proxy_ipvs_agent::dataplane::conntrack::Cleaned;
    use kube_proxy_ipvs_agent::dataplane::kernel::Kernel;
    use kube_proxy_ipvs_agent::dataplane::{Applied, Dataplane, Error, Observation, RealServers};
    use kube_proxy_ipvs_agent::model::desired::conntrack::ConntrackFilter;
    use kube_proxy_ipvs_agent::model::desired::sysctls;
    use kube_proxy_ipvs_agent::model::kernel::VsKey;
    use kube_proxy_ipvs_agent::model::plan::Plan;
    use kube_proxy_ipvs_agent::model::snapshot::config::{LocalDetector, ProxyConfig};
    use kube_proxy_ipvs_agent::source::manifests::load_str;
    use kube_proxy_ipvs_agent::sync::Syncer;

    /// What the kernel held and answered right after the first apply.
    struct FirstApply {
        dump: String,
        api: Result<String, String>,
        dns: Result<String, String>,
    }

    struct Watched<'a> {
        kernel: Kernel,
        node: &'a Node,
        first: Option<FirstApply>,
    }

    impl Dataplane for Watched<'_> {
        async fn observe(&mut self) -> Result<Observation, Error> {
            self.kernel.observe().await
        }

        async fn observe_part(
            &mut self,
            part: &kube_proxy_ipvs_agent::model::kernel::rolling::Part,
        ) -> Result<(Observation, std::collections::BTreeSet<VsKey>), Error> {
            self.kernel.observe_part(part).await
        }

        type Read = <Kernel as Dataplane>::Read;

        fn read_apart(
            &mut self,
            part: Option<kube_proxy_ipvs_agent::model::kernel::rolling::Part>,
        ) -> futures::future::BoxFuture<'static, Result<Self::Read, Error>> {
            self.kernel.read_apart(part)
        }

        async fn finish_read(
            &mut self,
            read: Self::Read,
        ) -> Result<(Observation, std::collections::BTreeSet<VsKey>), Error> {
            self.kernel.finish_read(read).await
        }

        async fn observe_real_servers(
            &mut self,
            keys: &[VsKey],
        ) -> Result<Vec<(VsKey, Option<RealServers>)>, Error> {
            self.kernel.observe_real_servers(keys).await
        }

        async fn apply(&mut self, plan: &Plan) -> Result<Applied, Error> {
            let applied = self.kernel.apply(plan).await;
            if self.first.is_none() {
                let dns: SocketAddr = "10.96.0.10:53".parse().unwrap();
                self.first = Some(FirstApply {
                    dump: stable_ipvs_dump(),
                    api: ask_tcp("10.96.0.1:443".parse().unwrap()),
                    dns: within(&self.node.outside, move || ask_udp(dns)),
                });
            }
            applied
        }

        async fn clean_conntrack(
            &mut self,
            filter: &ConntrackFilter,
        ) -> Result<Vec<Cleaned>, Error> {
            self.kernel.clean_conntrack(filter).await
        }
    }

    const OTHERS: usize = 2000;
    let node = Node::new("priority", 2);
    let api = service(
        "kubernetes",
        "10.96.0.1",
        "",
        "TCP",
        443,
        8080,
        &[(0, "cp")],
    )
    .replace("namespace: t", "namespace: default");
    let dns = service(
        "kube-dns",
        "10.96.0.10",
        "",
        "UDP",
        53,
        5353,
        &[(1, "node-a")],
    )
    .replace("namespace: t", "namespace: kube-system");
    let manifests = format!("{}\n---\n{api}\n---\n{dns}", many_services(OTHERS, None));
    let loaded = load_str("priority.yaml", &manifests, "node-a");
    assert!(loaded.rejected.is_empty(), "{:?}", loaded.rejected);
    assert_eq!(loaded.cluster.services.len(), OTHERS + 2);
    let config = ProxyConfig {
        node_name: "node-a".into(),
        local_detector: LocalDetector::ClusterCidr(vec!["10.244.0.0/16".parse().unwrap()]),
        ..ProxyConfig::default()
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (first, last_dump, resync) = rt.block_on(async {
        let kernel = Kernel::connect(
            config.families.clone(),
            sysctls(&config).into_keys().collect(),
        )
        .await
        .expect("connect");
        let mut syncer = Syncer::new(
            Watched {
                kernel,
                node: &node,
                first: None,
            },
            config.clone(),
        );
        let report = syncer.sync(&loaded.cluster, true).await.expect("cold sync");
        assert!(
            report.applied.failed.is_empty(),
            "{:?}",
            report.applied.failed
        );
        let dump = stable_ipvs_dump();
        let resync = syncer
            .sync(&loaded.cluster, true)
            .await
            .expect("full resync");
        let first = syncer.dataplane().first.take().expect("an apply");
        (first, dump, resync)
    });

    let services = |dump: &str| -> Vec<String> {
        dump.lines()
            .filter(|l| l.starts_with("-A"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        services(&first.dump),
        ["-A -t 10.96.0.1:443 -s rr", "-A -u 10.96.0.10:53 -s rr"],
        "{}",
        first.dump
    );
    assert!(
        first
            .dump
            .contains("-a -t 10.96.0.1:443 -r 10.244.0.2:8080 -m -w 1")
            && first
                .dump
                .contains("-a -u 10.96.0.10:53 -r 10.244.0.3:5353 -m -w 1"),
        "{}",
        first.dump
    );
    assert_eq!(
        first.api,
        Ok(node.pods[0].name.clone()),
        "the API server's Service from the node"
    );
    assert_eq!(
        first.dns,
        Ok(node.pods[1].name.clone()),
        "the DNS Service from outside"
    );
    // Then everything, converged: a full resync finds nothing to do.
    assert_eq!(services(&last_dump).len(), OTHERS + 2);
    assert!(resync.plan.is_empty(), "{:?}", resync.plan.ops);
    cleanup();
}

/// The agent's VIP routes on `kube-ipvs0` (`--vip-binding=route`), one line per route.
fn vip_routes() -> String {
    sh("ip route show table local dev kube-ipvs0 proto 194")
}

/// `kube-ipvs0`'s IPv4 addresses.
fn vip_addresses() -> String {
    sh("ip -4 -br addr show dev kube-ipvs0")
}

#[test]
fn vip_routes_carry_cluster_ip_and_hairpin_traffic_without_addresses() {
    let node = Node::new("viproute", 2);
    node.write("web.yaml", &web_service());
    node.once(&["--vip-binding", "route"]);

    // The VIP is a local route through kube-ipvs0 (still down), not an address.
    let routes = vip_routes();
    assert!(
        routes.contains("local 10.96.0.10 ") && routes.contains("metric 1024"),
        "{routes}"
    );
    assert!(
        !vip_addresses().contains("10.96.0.10"),
        "{}",
        vip_addresses()
    );
    let link = sh("ip -br link show kube-ipvs0");
    assert!(link.contains("DOWN"), "{link}");
    // The sets are the same as with addresses.
    let sets = sh("ipset save");
    assert!(
        sets.contains("add KUBE-CLUSTER-IP 10.96.0.10,tcp:80"),
        "{sets}"
    );

    // rr over two pods alternates, from outside the node...
    let outside = names(4, || node.ask_from_outside("10.96.0.10:80"));
    assert_ne!(outside[0], outside[1], "{outside:?}");
    assert_eq!(outside[0], outside[2], "{outside:?}");
    // ...from the node itself (the VIP is still the source address the kernel picks)...
    let host = names(2, || ask_tcp("10.96.0.10:80".parse().unwrap()));
    assert_ne!(host[0], host[1], "{host:?}");
    // ...and from a pod to its own Service, reaching itself too.
    let hairpin = names(4, || node.ask_from_pod(0, "10.96.0.10:80"));
    assert!(hairpin.contains(&node.pods[0].name), "{hairpin:?}");
    assert!(hairpin.contains(&node.pods[1].name), "{hairpin:?}");

    // A second run changes nothing; a Service removed takes its route with it.
    node.once(&["--vip-binding", "route"]);
    assert_eq!(vip_routes(), routes);
    node.write(
        "db.yaml",
        &service("db", "10.96.0.11", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    node.once(&["--vip-binding", "route"]);
    assert!(
        vip_routes().contains("local 10.96.0.11 "),
        "{}",
        vip_routes()
    );
    node.remove("db.yaml");
    node.once(&["--vip-binding", "route"]);
    assert_eq!(vip_routes(), routes);

    // --cleanup (which knows nothing of the binding) removes the routes with the link.
    cleanup();
    let left = sh("ip route show table local");
    assert!(!left.contains("10.96.0."), "{left}");
}

#[test]
fn strict_arp_keeps_vip_routes_from_answering_arp() {
    let node = Node::new("viparp", 1);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    // The outside client asks for the VIP on its own link (by ARP) instead of via the node.
    let out = node.outside.name().to_string();
    sh(&format!("ip -n {out} route add 10.96.0.10/32 dev eth0"));
    let on_link = |node: &Node| {
        sh(&format!("ip -n {out} neigh flush dev eth0"));
        let answer = node.ask_from_outside("10.96.0.10:80");
        let neigh = sh(&format!("ip -n {out} neigh show 10.96.0.10 dev eth0"));
        (answer, neigh)
    };
    // Without strict ARP, the node answers ARP for any local address, routes included
    // (as for addresses on kube-ipvs0: why MetalLB asks for strict ARP).
    node.once(&["--vip-binding", "route"]);
    let (answer, neigh) = on_link(&node);
    assert_eq!(answer, Ok(node.pods[0].name.clone()), "{neigh}");
    assert!(neigh.contains("lladdr"), "{neigh}");
    // With it (arp_ignore=1), only addresses of the asking interface are answered.
    node.once(&["--vip-binding", "route", "--ipvs-strict-arp"]);
    assert_eq!(sh("sysctl -n net.ipv4.conf.all.arp_ignore").trim(), "1");
    let (answer, neigh) = on_link(&node);
    assert!(answer.is_err(), "{answer:?}");
    assert!(!neigh.contains("lladdr"), "{neigh}");
    // Through the node (routed, no ARP for the VIP) it still answers.
    sh(&format!("ip -n {out} route del 10.96.0.10/32 dev eth0"));
    assert_eq!(
        node.ask_from_outside("10.96.0.10:80"),
        Ok(node.pods[0].name.clone())
    );
}

#[test]
fn a_node_switches_vip_binding_both_ways_under_an_established_connection() {
    let node = Node::new("vipswitch", 2);
    node.write(
        "web.yaml",
        &service("web", "10.96.0.10", "", "TCP", 80, 8080, &[(0, "node-a")]),
    );
    node.write(
        "db.yaml",
        &service("db", "10.96.0.11", "", "TCP", 80, 8080, &[(1, "node-a")]),
    );
    node.once(&[]);
    assert!(
        vip_addresses().contains("10.96.0.10/32"),
        "{}",
        vip_addresses()
    );
    assert!(vip_routes().is_empty(), "{}", vip_routes());
    let vip: SocketAddr = "10.96.0.10:80".parse().unwrap();
    let (name, conn) = within(&node.outside, move || open_tcp(vip)).unwrap();
    assert_eq!(name, node.pods[0].name);
    // The connection talks all along, so a moment without the VIP would show as an error
    // or a stall (a lost segment waits for a retransmission).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let talker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut conn = conn;
            let (mut n, mut slowest) = (0u32, Duration::ZERO);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let line = format!("ping {n}");
                assert_eq!(echo(&mut conn, &line), Ok(line.clone()), "after {n} echoes");
                slowest = slowest.max(t.elapsed());
                n += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            (conn, n, slowest)
        })
    };
    let check = |binding: &str| {
        let routes = vip_routes();
        let addresses = vip_addresses();
        for ip in ["10.96.0.10", "10.96.0.11"] {
            if binding == "route" {
                assert!(routes.contains(&format!("local {ip} ")), "{routes}");
                assert!(!addresses.contains(ip), "{addresses}");
            } else {
                assert!(addresses.contains(&format!("{ip}/32")), "{addresses}");
                assert!(!routes.contains(ip), "{routes}");
            }
        }
        // No bridge route is left on lo.
        let bridges = sh("ip route show table local dev lo proto 194");
        assert!(bridges.is_empty(), "{bridges}");
        assert_eq!(
            node.ask_from_outside("10.96.0.11:80"),
            Ok(node.pods[1].name.clone())
        );
    };
    node.once(&["--vip-binding", "route"]);
    check("route");
    node.once(&["--vip-binding", "address"]);
    check("address");
    node.once(&["--vip-binding", "route"]);
    check("route");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut conn, n, slowest) = talker.join().unwrap();
    assert_eq!(echo(&mut conn, "still there"), Ok("still there".into()));
    assert!(n > 0);
    // A retransmission after a lost segment waits at least 200 ms; the echoes are a few
    // milliseconds even under emulation.
    assert!(
        slowest < Duration::from_millis(200),
        "the slowest of {n} echoes took {slowest:?}"
    );
}
