//! Bad input: the malformed-object corpus (`tests/bad_input/corpus.yaml`, shared with the lab
//! test). Each object is rejected with a message naming it and what is wrong; the good
//! Services beside them are served as if the corpus were not there; nothing panics.

#[path = "bad_input/corpus.rs"]
mod corpus;

use kube_proxy_ipvs_agent::model::desired::{Host, desired};
use kube_proxy_ipvs_agent::model::snapshot::config::ProxyConfig;
use kube_proxy_ipvs_agent::source::manifests::load_str;

/// Two good Services in their own namespace, with their slices.
const GOOD: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: good}\n\
spec: {clusterIP: 10.96.0.100, ports: [{name: http, port: 80, targetPort: 8080}]}\n---\n\
apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
metadata: {name: web-a, namespace: good, labels: {kubernetes.io/service-name: web}}\n\
addressType: IPv4\nports: [{name: http, port: 8080}]\nendpoints: [{addresses: [10.244.0.2]}, {addresses: [10.244.0.3]}]\n---\n\
apiVersion: v1\nkind: Service\nmetadata: {name: dns, namespace: good}\n\
spec: {clusterIP: 10.96.0.53, ports: [{name: dns, protocol: UDP, port: 53, targetPort: 5353}]}\n---\n\
apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
metadata: {name: dns-a, namespace: good, labels: {kubernetes.io/service-name: dns}}\n\
addressType: IPv4\nports: [{name: dns, protocol: UDP, port: 5353}]\nendpoints: [{addresses: [10.244.0.3]}]\n";

fn config() -> ProxyConfig {
    ProxyConfig {
        node_name: "node-a".into(),
        ..ProxyConfig::default()
    }
}

#[test]
fn every_bad_object_is_rejected_by_name_and_the_good_services_survive() {
    let text = corpus::text();
    let expected = corpus::expectations();
    let documents = text.split("\n---\n").count();
    assert_eq!(
        documents,
        expected.len(),
        "every corpus document needs its `# expect:` line"
    );
    let loaded = load_str(corpus::FILE, &format!("{GOOD}---\n{text}"), "node-a");
    for e in &expected {
        let hits = loaded
            .rejected
            .iter()
            .filter(|(object, reason)| e.matches(object, reason.kind(), reason.field()))
            .count();
        assert_eq!(
            hits, 1,
            "{e:?} matched {hits} rejections; rejected: {:#?}",
            loaded.rejected
        );
    }
    assert_eq!(
        loaded.rejected.len(),
        expected.len(),
        "rejections nobody expected: {:#?}",
        loaded.rejected
    );

    // The cluster is exactly the good half: the desired state is the one without the corpus.
    let alone = load_str("good.yaml", GOOD, "node-a");
    assert!(alone.rejected.is_empty(), "{:?}", alone.rejected);
    assert_eq!(loaded.cluster, alone.cluster);
    let with = desired(&loaded.cluster, &config(), &Host::default());
    let without = desired(&alone.cluster, &config(), &Host::default());
    assert_eq!(with.state, without.state);
    let web = with
        .state
        .services
        .iter()
        .find(|(k, _)| k.address.to_string() == "10.96.0.100")
        .expect("the good Service is served");
    assert_eq!(web.1.destinations.len(), 2);
}

#[test]
fn the_corpus_as_json_lists_is_rejected_the_same_way() {
    // The same objects through the JSON reader, as `kubectl get -o json` would list them:
    // every YAML document that is an object becomes one item.
    let items: Vec<serde_json::Value> = corpus::text()
        .split("\n---\n")
        .filter_map(|doc| serde_saphyr::from_str::<serde_json::Value>(doc).ok())
        .filter(serde_json::Value::is_object)
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let dir = std::env::temp_dir().join(format!("bad-input-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("corpus.json");
    std::fs::write(&file, list.to_string()).unwrap();
    let loaded = kube_proxy_ipvs_agent::source::manifests::load(&file, "node-a").unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        loaded.cluster.services.is_empty(),
        "{:?}",
        loaded.cluster.services.keys().collect::<Vec<_>>()
    );
    assert!(
        loaded.cluster.slices.is_empty(),
        "{:?}",
        loaded.cluster.slices.keys().collect::<Vec<_>>()
    );
    assert_eq!(loaded.rejected.len(), items.len(), "{:#?}", loaded.rejected);
}
