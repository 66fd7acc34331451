//! Reliability: injection. Service names, namespaces, port names and annotations full of
//! hostile strings (iptables-restore and ipset-restore syntax, `COMMIT`, newlines, quotes,
//! shell substitutions, control characters, unicode, 10,000 characters) go through the
//! manifest source and through the API server source. The agent's every output must be that
//! of a twin cluster with benign strings: the `--dry-run` plan and iptables-restore input, and
//! after a real sync `iptables-save` (both backends' full output), `ipset save`, `ipvsadm -Sn`
//! and kube-ipvs0, byte for byte. Objects whose names are hostile are rejected (one log line
//! each, naming them); a hostile scheduler annotation costs its Service only its own scheduler
//! (served with the node's, as its benign twin annotated `rr` is); hostile port names and
//! annotation values are carried along and change nothing.
//!
//! Wall time in the VM: about 40 s.

use std::process::{Command, Output};

use lab::guest::try_sh;
use lab::report::Row;
use serde_json::{Value, json};

use crate::fake_apiserver::objects::node as node_object;
use crate::node::*;

/// A file a shell substitution in the corpus would create.
const CANARY_FILE: &str = "/tmp/kube-proxy-ipvs-injected";

fn hostile() -> Vec<String> {
    let mut h: Vec<String> = [
        "web\n-A KUBE-SERVICES -j ACCEPT",
        "COMMIT",
        "\nCOMMIT\n*filter\n-I INPUT 1 -j ACCEPT\nCOMMIT\n",
        "\"; iptables -F; echo \"",
        "$(touch /tmp/kube-proxy-ipvs-injected)",
        "`touch /tmp/kube-proxy-ipvs-injected`",
        "a b c",
        "name;reboot",
        "'quoted' \"double\"",
        "--match-set KUBE-CLUSTER-IP dst -j ACCEPT",
        "add KUBE-CLUSTER-IP 10.96.9.9,tcp:1\ncreate EVIL hash:ip",
        "-A -t 10.96.9.9:80 -s rr",
        "сервис-ünïcødé-🚀",
        "bell\u{7}esc\u{1b}[31mred\u{8}\r\tdel\u{7f}",
        "x-",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    h.push("x".repeat(10_000));
    h
}

fn service_json(
    name: &str,
    namespace: &str,
    ip: &str,
    ports: Vec<Value>,
    annotations: Value,
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"clusterIP": ip, "ports": ports},
    })
}

fn slice_json(name: &str, namespace: &str, service: &str, ports: Vec<Value>) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": ports,
        "endpoints": [{"addresses": ["10.244.0.2"], "nodeName": "node-a"}],
    })
}

/// The cluster: a plain Service, and a Service with one port per string (named by it) and one
/// annotation per string; with `evil`, the strings are the hostile ones and the cluster also
/// holds, for each string, a Service named by it, a Service in a namespace named by it and a
/// Service whose scheduler annotation is it (benign: `rr`, the node's), with an EndpointSlice
/// each. Returns the objects and how many the agent must reject.
fn cluster(evil: bool) -> (Vec<Value>, usize) {
    let strings: Vec<String> = if evil {
        hostile()
    } else {
        (0..hostile().len()).map(|i| format!("p{i}")).collect()
    };
    let mut objects = vec![
        service_json(
            "web",
            "t",
            "10.96.0.10",
            vec![json!({"name": "http", "port": 80, "targetPort": 8080})],
            json!({}),
        ),
        slice_json(
            "web-a",
            "t",
            "web",
            vec![json!({"name": "http", "port": 8080})],
        ),
    ];
    let ports: Vec<Value> = strings
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"name": s, "port": 80 + i, "targetPort": 8080}))
        .collect();
    let slice_ports: Vec<Value> = strings
        .iter()
        .map(|s| json!({"name": s, "port": 8080}))
        .collect();
    let notes: serde_json::Map<String, Value> = strings
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("example.com/note-{i}"), Value::from(s.as_str())))
        .collect();
    objects.push(service_json(
        "named",
        "t",
        "10.96.0.40",
        ports,
        Value::Object(notes),
    ));
    objects.push(slice_json("named-a", "t", "named", slice_ports));
    let mut rejected = 0;
    if evil {
        for (i, s) in strings.iter().enumerate() {
            let port = || vec![json!({"name": "http", "port": 80, "targetPort": 8080})];
            let slice_port = || vec![json!({"name": "http", "port": 8080})];
            // Named by the string (the slice points at it by label, which is rejected too
            // when the string is not a label value).
            objects.push(service_json(
                s,
                "t",
                &format!("10.96.1.{}", i + 1),
                port(),
                json!({}),
            ));
            // In a namespace named by it.
            objects.push(service_json(
                "ns",
                s,
                &format!("10.96.2.{}", i + 1),
                port(),
                json!({}),
            ));
            objects.push(slice_json(&format!("ns-{i}"), s, "ns", slice_port()));
            rejected += 3;
        }
    }
    // With it as its scheduler: refused, so served with the node's, as `rr` is.
    for (i, s) in strings.iter().enumerate() {
        let name = format!("sched-{i}");
        let scheduler = if evil { s.as_str() } else { "rr" };
        objects.push(service_json(
            &name,
            "t",
            &format!("10.96.3.{}", i + 1),
            vec![json!({"name": "http", "port": 80, "targetPort": 8080})],
            json!({"kube-proxy-ipvs.io/scheduler": scheduler}),
        ));
        objects.push(slice_json(
            &format!("{name}-a"),
            "t",
            &name,
            vec![json!({"name": "http", "port": 8080})],
        ));
    }
    let mut node = node_object("node-a", NODE_IP, "10.244.0.0/24");
    node["apiVersion"] = "v1".into();
    objects.push(node);
    (objects, rejected)
}

fn write_cluster(node: &Node, objects: &[Value]) {
    let _ = std::fs::remove_file(node.dir.join("cluster.json"));
    node.write(
        "cluster.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string(),
    );
}

/// Everything the agent wrote, in full: both iptables backends' whole tables (without the
/// timestamps of their comment lines), the sets, IPVS and kube-ipvs0.
fn everything() -> String {
    let save = |tool: &str| {
        try_sh(tool)
            .1
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!(
        "{}\n-- iptables-nft-save --\n{}\n-- iptables-legacy-save --\n{}\n-- ip6tables-nft-save --\n{}",
        kernel_state(),
        save("iptables-nft-save"),
        save("iptables-legacy-save"),
        save("ip6tables-nft-save")
    )
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// The rejections in a log, and the lines that do not start like a log line does (klog's
/// severity and date): what a raw newline from a name would make.
fn log_lines(log: &str) -> (usize, Vec<String>) {
    let rejected = log.lines().filter(|l| l.contains(" rejection=\"")).count();
    let stray = log
        .lines()
        .filter(|l| !is_log_header(l))
        .map(|l| l.chars().take(120).collect())
        .collect();
    (rejected, stray)
}

fn api_once(objects: Vec<Value>) -> Output {
    let server = ApiServer::start(objects);
    Command::new(AGENT)
        .args([
            "--master",
            &server.url,
            "--hostname-override",
            "node-a",
            "--cluster-cidr",
            "10.244.0.0/16",
            "--once",
        ])
        .output()
        .unwrap()
}

#[test]
fn hostile_names_ports_and_annotations_change_nothing_but_their_own_entries() {
    let mut row = Row::new(
        "injection",
        "hostile names, namespaces, port names, annotations",
    );
    let strings = hostile();
    let _ = std::fs::remove_file(CANARY_FILE);
    let node = Node::new("inject", 1);
    let (benign, _) = cluster(false);
    let (evil, must_reject) = cluster(true);
    row.tried(format!(
        "{} hostile strings as Service and namespace names, scheduler annotations ({must_reject} objects to reject), port names and annotations; manifests and API server",
        strings.len()
    ));

    // The plan and the iptables-restore input, without touching the kernel.
    write_cluster(&node, &benign);
    let dry_benign = node.command(&["--dry-run"]).output().unwrap();
    assert!(dry_benign.status.success(), "{}", text(&dry_benign.stderr));
    write_cluster(&node, &evil);
    let dry_evil = node.command(&["--dry-run"]).output().unwrap();
    assert!(dry_evil.status.success(), "{}", text(&dry_evil.stderr));
    let plan = text(&dry_benign.stdout);
    assert!(
        plan.contains("*nat") && plan.contains("10.96.0.40:94/tcp"),
        "{plan}"
    );
    assert_eq!(
        text(&dry_evil.stdout),
        plan,
        "the hostile cluster's plan differs"
    );

    // The kernel after a real sync: benign, then (from scratch) hostile.
    write_cluster(&node, &benign);
    let out = node.once(&[]);
    let reference = everything();
    assert!(
        reference.contains("-A -t 10.96.0.40:94 -s rr"),
        "{reference}"
    );
    let (_, stray) = log_lines(&text(&out.stderr));
    assert!(stray.is_empty(), "{stray:#?}");
    cleanup();
    write_cluster(&node, &evil);
    let out = node.once(&[]);
    let from_manifests = everything();
    let (rejected, stray) = log_lines(&text(&out.stderr));

    // Through the API server too (its conversion is the same; the transport is JSON).
    cleanup();
    let objects: Vec<Value> = evil
        .iter()
        .cloned()
        .map(|mut o| {
            o.as_object_mut().unwrap().remove("apiVersion");
            o
        })
        .collect();
    let api = api_once(objects);
    assert!(api.status.success(), "{}", text(&api.stderr));
    let from_api = everything();
    let (api_rejected, api_stray) = log_lines(&text(&api.stderr));

    // Traffic through the Service with the hostile port names, first and last port.
    let answers: Vec<Result<String, String>> = ["10.96.0.40:80", "10.96.0.40:95", "10.96.0.10:80"]
        .iter()
        .map(|a| node.ask_from_outside(a))
        .collect();
    let injected_file = std::path::Path::new(CANARY_FILE).exists();
    let differ = |a: &str| {
        a.lines()
            .filter(|l| !reference.lines().any(|r| r == *l))
            .count()
    };
    row.lost(format!(
        "{} of {} kernel lines differ (manifests), {} (API); {rejected} and {api_rejected} rejections logged for {must_reject}; {} stray log lines; shell substitutions run: {}",
        differ(&from_manifests),
        reference.lines().count(),
        differ(&from_api),
        stray.len() + api_stray.len(),
        usize::from(injected_file)
    ));
    assert_eq!(
        from_manifests, reference,
        "the hostile cluster's kernel state differs"
    );
    assert_eq!(
        from_api, reference,
        "the hostile cluster's kernel state differs (API)"
    );
    assert!(!injected_file, "a shell ran a substitution from the corpus");
    assert!(
        stray.is_empty(),
        "log lines broken by hostile names: {stray:#?}"
    );
    assert!(
        api_stray.is_empty(),
        "log lines broken by hostile names: {api_stray:#?}"
    );
    assert_eq!(rejected, must_reject, "rejections:\n{}", text(&out.stderr));
    let refused = text(&out.stderr)
        .lines()
        .filter(|l| l.contains(" warning=\"not-a-scheduler\""))
        .count();
    assert_eq!(
        refused,
        strings.len(),
        "scheduler refusals:\n{}",
        text(&out.stderr)
    );
    assert_eq!(
        api_rejected,
        must_reject,
        "rejections:\n{}",
        text(&api.stderr)
    );
    for (addr, answer) in ["10.96.0.40:80", "10.96.0.40:95", "10.96.0.10:80"]
        .iter()
        .zip(&answers)
    {
        assert_eq!(answer.as_deref(), Ok(node.pods[0].name.as_str()), "{addr}");
    }
}
