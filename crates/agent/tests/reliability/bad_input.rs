//! Reliability: bad input. The whole malformed-object corpus (`tests/bad_input/corpus.yaml`,
//! shared with the host test `tests/bad_input.rs`) in the manifest directory beside good
//! Services: the running agent logs each rejection naming the object, stays up and healthy,
//! the kernel holds exactly what the good Services alone make, they answer traffic, and a
//! Service added afterwards is programmed too.
//!
//! Wall time in the VM: about 30 s.

use std::process::Stdio;
use std::time::{Duration, Instant};

use lab::guest::sh;
use lab::net::ask_udp;
use lab::report::Row;

use crate::node::*;

#[path = "../bad_input/corpus.rs"]
mod corpus;

fn good(node: &Node) {
    node.write("good-web.yaml", &web_service());
    node.write("good-dns.yaml", &dns_service());
    node.write(
        "good-api.yaml",
        &service("api", "10.96.0.20", "", "TCP", 443, 8080, &[(0, "node-a")]),
    );
}

/// [`kernel_state`] with kube-ipvs0's addresses sorted (they are listed in the order bound).
fn state() -> String {
    if !sh("ip link show kube-ipvs0 2>/dev/null || true").contains("kube-ipvs0") {
        return "no kube-ipvs0".into();
    }
    let full = kernel_state();
    let (rest, link) = full.rsplit_once("\n--\n").expect("kernel_state's sections");
    let mut words: Vec<&str> = link.split_whitespace().collect();
    words[2..].sort_unstable();
    format!("{rest}\n--\n{}", words.join(" "))
}

/// Waits until the kernel holds `want` (or panics with the agent's log after `limit`).
fn converge(want: &str, limit: Duration, agent: &mut std::process::Child, log: &std::path::Path) {
    let start = Instant::now();
    loop {
        if state() == want {
            return;
        }
        if let Ok(Some(exit)) = agent.try_wait() {
            panic!(
                "the agent exited ({exit}):\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            start.elapsed() < limit,
            "the kernel did not reach the good Services' state in {limit:?}:\n{}\n-- want --\n{want}",
            state()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_corpus_of_malformed_objects_is_rejected_by_name_and_disturbs_nothing() {
    let expected = corpus::expectations();
    let mut row = Row::new(
        "bad input",
        "malformed Services and EndpointSlices beside good ones",
    );
    row.tried(format!("{} malformed objects", expected.len()));
    let node = Node::new("badin", 2);

    // What the good Services alone make, with a Service that comes later.
    good(&node);
    node.write(
        "late.yaml",
        &service("late", "10.96.0.30", "", "TCP", 80, 8080, &[(1, "node-b")]),
    );
    node.once(&[]);
    let with_late = state();
    node.remove("late.yaml");
    node.once(&[]);
    let reference = state();
    cleanup();

    node.write(corpus::FILE, &corpus::text());
    let log_path = node.dir.join("agent.log");
    // Outside the manifest directory's *.yaml pattern, so it is never read as a manifest.
    let log = std::fs::File::create(&log_path).unwrap();
    let mut agent = node
        .command(&["--healthz-bind-address", "127.0.0.1:10256"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the agent");
    converge(&reference, Duration::from_secs(120), &mut agent, &log_path);

    // The good Services answer, over TCP from outside (ClusterIP and NodePort), from a pod,
    // and over UDP.
    let mut sent = 0;
    let mut failed = Vec::new();
    for addr in ["10.96.0.10:80", "192.168.100.1:30080", "10.96.0.20:443"] {
        for _ in 0..4 {
            sent += 1;
            if let Err(e) = node.ask_from_outside(addr) {
                failed.push(format!("{addr}: {e}"));
            }
        }
    }
    for _ in 0..2 {
        sent += 1;
        if let Err(e) = node.ask_from_pod(0, "10.96.0.10:80") {
            failed.push(format!("pod -> 10.96.0.10:80: {e}"));
        }
        sent += 1;
        if let Err(e) = ask_udp("10.96.0.53:53".parse().unwrap()) {
            failed.push(format!("10.96.0.53:53/udp: {e}"));
        }
    }

    // The agent keeps working: a Service added now is programmed.
    node.write(
        "late.yaml",
        &service("late", "10.96.0.30", "", "TCP", 80, 8080, &[(1, "node-b")]),
    );
    converge(&with_late, Duration::from_secs(60), &mut agent, &log_path);
    sent += 1;
    if let Err(e) = node.ask_from_outside("10.96.0.30:80") {
        failed.push(format!("10.96.0.30:80: {e}"));
    }
    let healthz = std::panic::catch_unwind(|| http_get("127.0.0.1:10256", "/healthz"));
    let alive = agent.try_wait().unwrap().is_none();
    let _ = agent.kill();
    let _ = agent.wait();
    let text = std::fs::read_to_string(&log_path).unwrap();

    let events = crate::node::log_events(&text);
    let rejections: Vec<&str> = events
        .iter()
        .map(String::as_str)
        .filter(|l| l.contains(" rejection=\""))
        .collect();
    let missing: Vec<String> = expected
        .iter()
        .filter(|e| !rejections.iter().any(|l| e.matches_line(l)))
        .map(|e| format!("{e:?}"))
        .collect();
    let panics = text.matches("panicked").count();
    row.lost(format!(
        "{} good Services disturbed ({} of {sent} requests failed), {} of {} rejected by name, {panics} panics",
        usize::from(!failed.is_empty()),
        failed.len(),
        expected.len() - missing.len(),
        expected.len()
    ));
    assert!(alive, "the agent died:\n{text}");
    let (code, body) = healthz.expect("/healthz answers");
    assert_eq!(code, 200, "/healthz: {body}");
    assert!(failed.is_empty(), "requests failed: {failed:#?}");
    assert!(
        missing.is_empty(),
        "not rejected by name: {missing:#?}\n-- log --\n{text}"
    );
    assert_eq!(panics, 0, "{text}");
}
