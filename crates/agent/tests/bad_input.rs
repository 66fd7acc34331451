//! Bad input: a corpus of malformed Services and EndpointSlices. Each one is rejected with a
//! message naming the object and what is wrong; the good Service beside them is still served;
//! nothing panics.

use kube_proxy_ipvs_agent::model::config::ProxyConfig;
use kube_proxy_ipvs_agent::model::desired::{Host, desired};
use kube_proxy_ipvs_agent::source::manifests::load_str;

fn svc(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: bad}}\nspec: {spec}\n---\n"
    )
}

fn slice(name: &str, service: &str, body: &str) -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: {name}, namespace: bad, labels: {{kubernetes.io/service-name: {service}}}}}\n{body}\n---\n"
    )
}

/// A Service name over the 63 characters a DNS label may have.
const LONG: &str = "a-service-name-far-longer-than-the-sixty-three-characters-a-dns-label-may-have";

/// (object name, manifest, a fragment the rejection must contain)
fn corpus() -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            LONG,
            svc(LONG, "{clusterIP: 10.96.0.11, ports: [{port: 80}]}"),
            "metadata.name",
        ),
        (
            "bad-ip",
            svc("bad-ip", "{clusterIP: 10.96.0.300, ports: [{port: 80}]}"),
            "10.96.0.300",
        ),
        (
            "port-zero",
            svc("port-zero", "{clusterIP: 10.96.0.2, ports: [{port: 0}]}"),
            "port",
        ),
        (
            "port-big",
            svc("port-big", "{clusterIP: 10.96.0.3, ports: [{port: 65536}]}"),
            "65536",
        ),
        (
            "proto",
            svc(
                "proto",
                "{clusterIP: 10.96.0.4, ports: [{port: 80, protocol: ICMP}]}",
            ),
            "ICMP",
        ),
        (
            "families",
            svc(
                "families",
                "{clusterIP: 10.96.0.5, clusterIPs: [10.96.0.5, 10.96.0.6], ports: [{port: 80}]}",
            ),
            "clusterIPs",
        ),
        (
            "dup-ports",
            svc(
                "dup-ports",
                "{clusterIP: 10.96.0.7, ports: [{name: a, port: 80}, {name: b, port: 80}]}",
            ),
            "80",
        ),
        (
            "no-spec",
            "apiVersion: v1\nkind: Service\nmetadata: {name: no-spec, namespace: bad}\n---\n"
                .to_string(),
            "spec",
        ),
        (
            "bad-node-port",
            svc(
                "bad-node-port",
                "{type: NodePort, clusterIP: 10.96.0.8, ports: [{port: 80, nodePort: 70000}]}",
            ),
            "nodePort",
        ),
        (
            "bad-affinity",
            svc(
                "bad-affinity",
                "{clusterIP: 10.96.0.9, sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 0}}, ports: [{port: 80}]}",
            ),
            "timeoutSeconds",
        ),
        (
            "bad-range",
            svc(
                "bad-range",
                "{type: LoadBalancer, clusterIP: 10.96.0.10, loadBalancerSourceRanges: [not-a-cidr], ports: [{port: 80, nodePort: 30010}]}",
            ),
            "not-a-cidr",
        ),
        (
            "good-x",
            slice(
                "good-x",
                "good",
                "addressType: IPv4\nports: [{port: 8080}]\nendpoints: [{addresses: [10.244.0.999]}]",
            ),
            "10.244.0.999",
        ),
        (
            "mixed",
            slice(
                "mixed",
                "good",
                "addressType: IPv4\nports: [{port: 8080}]\nendpoints: [{addresses: ['fd00::1']}]",
            ),
            "fd00::1",
        ),
        (
            "no-service",
            slice(
                "no-service",
                "",
                "addressType: IPv4\nports: [{port: 8080}]\nendpoints: []",
            )
            .replace("labels: {kubernetes.io/service-name: }", "labels: {}"),
            "kubernetes.io/service-name",
        ),
    ]
}

#[test]
fn every_bad_object_is_rejected_by_name_and_the_good_service_survives() {
    let mut text = svc(
        "good",
        "{clusterIP: 10.96.0.100, ports: [{port: 80, targetPort: 8080}]}",
    );
    text.push_str(&slice(
        "good-a",
        "good",
        "addressType: IPv4\nports: [{port: 8080}]\nendpoints: [{addresses: [10.244.0.2]}]",
    ));
    // 10,000 endpoints in one slice: large, but valid.
    let many: Vec<String> = (0..10_000)
        .map(|i| {
            format!(
                "{{addresses: [10.{}.{}.{}]}}",
                100 + i / 65536,
                (i / 256) % 256,
                i % 256
            )
        })
        .collect();
    text.push_str(&svc(
        "big",
        "{clusterIP: 10.96.0.101, ports: [{port: 80, targetPort: 8080}]}",
    ));
    text.push_str(&slice(
        "big-a",
        "big",
        &format!(
            "addressType: IPv4\nports: [{{port: 8080}}]\nendpoints: [{}]",
            many.join(", ")
        ),
    ));
    // A document that is not YAML at all, and one of an unknown shape.
    text.push_str("apiVersion: v1\nkind: Service\nmetadata: {name: [unclosed\n---\n");
    text.push_str("just a string\n---\n");
    for (_, manifest, _) in corpus() {
        text.push_str(&manifest);
    }
    let loaded = load_str("corpus.yaml", &text, "node-a");
    for (name, _, fragment) in corpus() {
        let found = loaded
            .rejected
            .iter()
            .find(|(object, _)| object.contains(&format!("bad/{name}")));
        let (object, reason) = found
            .unwrap_or_else(|| panic!("{name} was not rejected; rejected: {:#?}", loaded.rejected));
        assert!(
            reason.contains(fragment) || object.contains(fragment),
            "{name}: the reason does not say what is wrong ({fragment:?}): {object}: {reason}"
        );
    }
    // The two unparsable documents are reported too, by place.
    assert!(
        loaded
            .rejected
            .iter()
            .filter(|(o, _)| o.starts_with("corpus.yaml"))
            .count()
            >= corpus().len() + 2
    );
    let d = desired(
        &loaded.cluster,
        &ProxyConfig {
            node_name: "node-a".into(),
            ..ProxyConfig::default()
        },
        &Host::default(),
    );
    let good = d
        .state
        .services
        .iter()
        .find(|(k, _)| k.address.to_string() == "10.96.0.100")
        .expect("the good Service is served");
    assert_eq!(good.1.destinations.len(), 1);
    let big = d
        .state
        .services
        .iter()
        .find(|(k, _)| k.address.to_string() == "10.96.0.101")
        .expect("the big Service is served");
    assert_eq!(big.1.destinations.len(), 10_000);
}
