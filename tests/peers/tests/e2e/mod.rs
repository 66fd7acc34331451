//! End to end against the real API server: its restart, an etcd compaction that makes the
//! agent's watch too old (a real `410 Gone`), a burst of 5,000 objects, the Node deleted and
//! made again, a health-check node port another program holds. Each ends with the agent's kernel state right: the same as upstream
//! kube-proxy's beside it where kube-proxy can be beside it, else counted with the real tools.

use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime};

use peers::scenario::{self, Scenario};

use super::{Pair, compare_clean, compare_clean_within, connect};

/// A small scenario written here: a NodePort and a ClusterIP Service with endpoints.
fn base(id: &str) -> Scenario {
    let text = r#"
description: end-to-end base
objects: |
  apiVersion: v1
  kind: Service
  metadata: {name: web}
  spec:
    type: NodePort
    clusterIP: 10.96.200.10
    ports: [{name: http, port: 80, targetPort: 8080, nodePort: 31080}]
  ---
  apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
  addressType: IPv4
  ports: [{name: http, port: 8080, protocol: TCP}]
  endpoints:
  - {addresses: [10.244.1.2], conditions: {ready: true}}
  - {addresses: [10.244.1.3], conditions: {ready: true}}
  ---
  apiVersion: v1
  kind: Service
  metadata: {name: db}
  spec:
    clusterIP: 10.96.200.20
    ports: [{name: sql, port: 5432}]
"#;
    scenario::parse(id, text).expect("the base scenario")
}

/// A Service and its slice with one endpoint, numbered `i`, as a step's YAML.
fn numbered(i: usize, endpoint_octet: u8) -> String {
    let (a, b) = (i / 250, i % 250 + 1);
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: s{i}}}\nspec:\n  clusterIP: 10.96.{}.{b}\n  ports: [{{name: p, port: 80, targetPort: 8080}}]\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: s{i}-1, labels: {{kubernetes.io/service-name: s{i}}}}}\naddressType: IPv4\n\
         ports: [{{name: p, port: 8080, protocol: TCP}}]\nendpoints:\n- {{addresses: [10.244.{}.{endpoint_octet}], conditions: {{ready: true}}}}\n---\n",
        100 + a,
        a
    )
}

#[test]
fn e2e_the_agent_follows_the_api_server_through_its_restart() {
    let (_guard, cp, cluster, _ns) = connect();
    let s = base("e2e-restart");
    let mut pair = Pair::start(&cp, &cluster, &s, true).expect("start");
    cp.stop_apiserver().expect("stop the API server");
    std::thread::sleep(Duration::from_secs(15));
    cp.start_apiserver().expect("start the API server");
    // Changes made once it is back must arrive through the watches the restart broke.
    let step = scenario::Step {
        name: "after the restart".into(),
        apply: numbered(1, 9),
        delete: vec!["Service/db".into()],
        node_labels: Default::default(),
        restart: vec![],
        traffic: vec![],
        node: None,
    };
    pair.step(&cluster, &step)
        .expect("the change after the restart");
    compare_clean_within(
        &pair,
        "after the API server's restart",
        Duration::from_secs(90),
    );
    assert!(
        pair.ag.state()["ipvs"]
            .iter()
            .any(|l| l.contains("10.96.100.2:80"))
    );
}

#[test]
fn e2e_a_watch_made_too_old_by_a_compaction_relists() {
    let (_guard, cp, cluster, _ns) = connect();
    let s = base("e2e-compaction");
    let mut pair = Pair::start(&cp, &cluster, &s, true).expect("start");
    // The agent loses the API server; kube-proxy keeps it.
    pair.cut_agent();
    let mut changes = String::new();
    for i in 0..60 {
        changes.push_str(&numbered(i, 7));
    }
    cluster
        .apply(&scenario::objects(&changes).unwrap())
        .unwrap();
    // Enough writes to push the agent's resourceVersion out of the watch cache's window too,
    // then etcd compacted past it.
    for round in 0..4 {
        let mut again = String::new();
        for i in 0..60 {
            again.push_str(&numbered(i, 10 + round));
        }
        cluster.apply(&scenario::objects(&again).unwrap()).unwrap();
    }
    cluster.delete(&["Service/db".into()]).unwrap();
    cp.compact_etcd().expect("compact etcd");
    // A restarted API server's watch cache starts at etcd's current revision, so the agent's
    // resourceVersion is too old for it whatever the timing. Without the restart the cache
    // keeps at least 75 s of events and serves the old version when the run is fast (CI).
    cp.stop_apiserver().expect("stop the API server");
    cp.start_apiserver().expect("start the API server");
    let t = SystemTime::now();
    pair.reconnect_agent(&cp);
    pair.wait_synced(t)
        .expect("both synced after the reconnection");
    compare_clean_within(&pair, "after the compaction", Duration::from_secs(90));
    // The agent's own warning for the watch error, not any "410" (timestamps hold some).
    let log = pair.agent_log();
    let failures: Vec<&str> = log.lines().filter(|l| l.contains("watch failed")).collect();
    assert!(
        failures.iter().any(|l| ["code: 410", "too old", "Expired"]
            .iter()
            .any(|w| l.contains(w))),
        "the agent's watch never met a 410; its watch failures:\n{}",
        failures.join("\n")
    );
}

#[test]
fn e2e_a_burst_of_objects_is_programmed_whole() {
    // Services, each with one slice: `PEERS_BURST_SERVICES`, else 2,500 (5,000 objects).
    let n: usize = lab::guest::knob("PEERS_BURST_SERVICES", None).unwrap_or(2500);
    // `numbered` puts Service i at 10.96.(100 + i / 250): the count below reads 10.96.1xx.
    assert!(
        (1..=25_000).contains(&n),
        "PEERS_BURST_SERVICES={n}: between 1 and 25,000"
    );
    let (_guard, cp, cluster, _ns) = connect();
    let s = base("e2e-burst");
    // The agent alone: upstream kube-proxy under emulation would take the run's whole budget.
    let mut pair = Pair::start(&cp, &cluster, &s, false).expect("start");
    let started = Instant::now();
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&numbered(i, 5));
    }
    let t = SystemTime::now();
    cluster
        .apply_concurrently(&scenario::objects(&text).unwrap(), 16)
        .expect("the burst");
    let created = started.elapsed();
    pair.wait_synced(t).expect("synced after the burst");
    // Settled: every Service has its virtual server and its one real server.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let ipvs = pair.ag.state().remove("ipvs").unwrap_or_default();
        let servers = ipvs
            .iter()
            .filter(|l| l.starts_with("-A -t 10.96.1"))
            .count();
        let reals = ipvs
            .iter()
            .filter(|l| l.starts_with("-a -t 10.96.1"))
            .count();
        if servers == n && reals == n {
            println!(
                "burst: {} objects created in {created:.1?}, programmed in {:.1?}",
                2 * n,
                started.elapsed()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after the burst: {servers} of {n} virtual servers, {reals} of {n} real servers"
        );
        std::thread::sleep(Duration::from_secs(5));
    }
    cluster.clear().unwrap();
}

#[test]
fn e2e_the_node_deleted_and_made_again() {
    let (_guard, cp, cluster, _ns) = connect();
    let mut s = base("e2e-node");
    s.node
        .labels
        .insert("topology.kubernetes.io/zone".into(), "a".into());
    // kube-proxy exits when its Node is deleted (its NodeManager); the agent stays up and
    // keeps serving: it runs alone here.
    let mut pair = Pair::start(&cp, &cluster, &s, false).expect("start");
    let before = pair.ag.state();
    cluster.delete_node(&pair.node).expect("delete the Node");
    std::thread::sleep(Duration::from_secs(10));
    assert!(
        pair.agent_running(),
        "the agent exited when its Node was deleted:\n{}",
        pair.agent_log()
    );
    let during = pair.ag.state();
    assert_eq!(
        before["ipvs"], during["ipvs"],
        "virtual servers changed while the Node was gone"
    );
    // Made again with another zone: its labels are followed.
    let t = SystemTime::now();
    s.node
        .labels
        .insert("topology.kubernetes.io/zone".into(), "b".into());
    cluster.apply_node(&pair.node, &s).expect("the Node again");
    let step = scenario::Step {
        name: "a change after the Node came back".into(),
        apply: numbered(3, 4),
        delete: vec![],
        node_labels: Default::default(),
        restart: vec![],
        traffic: vec![],
        node: None,
    };
    pair.step(&cluster, &step).expect("the change");
    pair.wait_synced(t).expect("synced");
    let after = pair.ag.state()["ipvs"].clone();
    let mut missing = String::new();
    for want in [
        "-A -t 10.96.200.10:80",
        "-A -t 10.96.100.4:80",
        "-a -t 10.96.100.4:80 -r 10.244.0.4:8080",
    ] {
        if !after.iter().any(|l| l.starts_with(want)) {
            let _ = writeln!(missing, "{want}");
        }
    }
    assert!(
        missing.is_empty(),
        "missing after the Node came back:\n{missing}\nipvs:\n{after:#?}"
    );
}

/// A load balancer with `externalTrafficPolicy: Local`, health-checked on `port`, with a
/// ready endpoint on the node `peers-e2e-hc` (the Node of scenario id `e2e-hc`).
fn health_checked(port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: hc-held}}\nspec:\n  type: LoadBalancer\n  clusterIP: 10.96.201.10\n\
         \x20 ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 31201}}]\n  externalTrafficPolicy: Local\n  healthCheckNodePort: {port}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: hc-held-1, labels: {{kubernetes.io/service-name: hc-held}}}}\naddressType: IPv4\n\
         ports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints:\n- {{addresses: [10.244.201.2], conditions: {{ready: true}}, nodeName: peers-e2e-hc}}\n"
    )
}

#[test]
fn e2e_a_health_check_port_another_program_holds_is_an_event_on_its_service() {
    let (_guard, cp, cluster, _ns) = connect();
    // The nodes start with other Services; the load balancer comes once its health-check
    // port is held (a Service's health-check port cannot change).
    let s = base("e2e-hc");
    let mut pair = Pair::start(&cp, &cluster, &s, true).expect("start");
    let held = 32202;
    let holders = [pair.kp.hold_port(held), pair.ag.hold_port(held)];
    let step = scenario::Step {
        name: "a load balancer whose health-check port is held".into(),
        apply: health_checked(held),
        delete: vec![],
        node_labels: Default::default(),
        restart: vec![],
        traffic: vec![],
        node: None,
    };
    pair.step(&cluster, &step).expect("the load balancer");
    // Each program reports it once on the Service, kube-proxy as "kube-proxy".
    let deadline = Instant::now() + Duration::from_secs(60);
    let events = loop {
        let events = cluster
            .service_events("hc-held", "FailedToStartServiceHealthcheck")
            .expect("events");
        let from = |c: &str| events.iter().any(|(rc, _)| rc == c);
        if (from("kube-proxy") && from("kube-proxy-ipvs")) || Instant::now() > deadline {
            break events;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    let ours: Vec<&String> = events
        .iter()
        .filter(|(c, _)| c == "kube-proxy-ipvs")
        .map(|(_, n)| n)
        .collect();
    assert!(
        events.iter().any(|(c, _)| c == "kube-proxy") && ours.len() == 1,
        "want one event from each program, got {events:#?}\nagent:\n{}",
        pair.agent_log()
    );
    assert!(
        ours[0].contains(&format!("on port {held}")) && ours[0].contains("hc-held"),
        "{}",
        ours[0]
    );
    // Released, the port is bound at a later retry on both sides, and the states agree.
    drop(holders);
    let deadline = Instant::now() + Duration::from_secs(120);
    let want = format!("0.0.0.0:{held}");
    let bound = |ns: &super::node::NodeNs| ns.state()["health-check-listeners"].contains(&want);
    while !(bound(&pair.kp) && bound(&pair.ag)) {
        assert!(
            Instant::now() < deadline,
            "the released port was not bound by both in 120 s:\nagent:\n{}",
            pair.agent_log()
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    compare_clean(&pair, "after the port was released");
}
