//! The probes of `deploy/daemonset.yaml` ask the agent's health port for what it serves:
//! liveness on `/livez`, readiness on `/readyz`, which is 503 until the first complete sync.

use std::time::{Duration, SystemTime};

use kube_proxy_ipvs_agent::health::{ProxyHealth, handle};
use kube_proxy_ipvs_agent::web::Request;

/// The agent container's `probe` (`livenessProbe`, `readinessProbe`) as (path, port number).
fn probe(kind: &str) -> Option<(String, u64)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/daemonset.yaml");
    let text = std::fs::read_to_string(path).expect("deploy/daemonset.yaml");
    // Into JSON values, so that only this call names the YAML library.
    let daemonset: serde_json::Value = serde_saphyr::from_str(&text).expect("YAML");
    let containers = daemonset["spec"]["template"]["spec"]["containers"].as_array()?;
    let agent = containers
        .iter()
        .find(|c| c["name"].as_str() == Some("kube-proxy-ipvs"))?;
    let get = &agent[kind]["httpGet"];
    // The port by number, or by the name of one of the container's ports (the chart's way).
    let port = match get["port"].as_str() {
        Some(name) => agent["ports"]
            .as_array()?
            .iter()
            .find(|p| p["name"].as_str() == Some(name))?["containerPort"]
            .as_u64()?,
        None => get["port"].as_u64()?,
    };
    Some((get["path"].as_str()?.to_string(), port))
}

fn status(health: &ProxyHealth, path: &str) -> u16 {
    let request = Request {
        method: "GET".into(),
        path: path.into(),
    };
    handle(health, None, &request, SystemTime::now()).status
}

#[test]
fn the_daemonset_is_ready_only_after_the_first_complete_sync() {
    let (path, port) = probe("readinessProbe").expect("a readinessProbe on the agent");
    assert_eq!(port, 10256, "the healthz port");
    let mut health = ProxyHealth::new(Duration::from_secs(60));
    assert_eq!(status(&health, &path), 503, "{path} before any sync");
    health.synced_completely();
    assert_eq!(status(&health, &path), 200, "{path} once synced");
}

#[test]
fn the_daemonset_liveness_probe_ignores_node_eligibility() {
    let (path, port) = probe("livenessProbe").expect("a livenessProbe on the agent");
    assert_eq!(port, 10256);
    // A node being deleted must not restart the agent.
    let mut health = ProxyHealth::new(Duration::from_secs(60));
    health.sync_node(true, &[]);
    assert_eq!(status(&health, &path), 200, "{path}");
}
