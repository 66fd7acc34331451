use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::k8s::convert::Reason;
use crate::model::snapshot::cluster::Family;

/// A fresh, empty directory under the system's temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "kube-proxy-ipvs-manifests-{}-{n}-{what}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn service_doc(name: &str, ip: &str, port: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n  clusterIP: {ip}\n  ports: [{{port: {port}}}]\n"
    )
}

const SLICE: &str = "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{port: 8080}]
endpoints:
- addresses: [10.244.1.2]
  nodeName: node-a
";

const NODES: &str = "apiVersion: v1
kind: Node
metadata: {name: node-b}
status: {addresses: [{type: InternalIP, address: 192.168.1.11}]}
---
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {zone: z1}}
spec: {podCIDRs: [10.244.1.0/24]}
status: {addresses: [{type: InternalIP, address: 192.168.1.10}]}
";

const CONFIGMAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: b}\n";

fn names(loaded: &Loaded) -> Vec<String> {
    loaded
        .cluster
        .services
        .keys()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn multi_document_file() {
    let text = format!(
        "# the web app\n---\n{}---\n{SLICE}---\n---\n{NODES}---\n{CONFIGMAP}...\n",
        service_doc("web", "10.96.0.10", "80")
    );
    let loaded = load_str("app.yaml", &text, "node-a");
    assert_eq!(loaded.rejected, []);
    assert_eq!(names(&loaded), ["shop/web"]);
    let web = &loaded.cluster.services[&ServiceRef::new("shop", "web")];
    assert_eq!(web.cluster_ips, vec![ip("10.96.0.10")]);
    let slice = &loaded.cluster.slices[&SliceRef::new("shop", "web-1")];
    assert_eq!(slice.service, ServiceRef::new("shop", "web"));
    assert_eq!(slice.family, Family::V4);
    let node = loaded.cluster.node.as_ref().expect("node-a is read");
    assert_eq!(node.name, "node-a");
    assert_eq!(node.addresses, vec![ip("192.168.1.10")]);
    assert_eq!(node.labels["zone"], "z1");
}

#[test]
fn no_node_of_that_name_leaves_the_node_unknown() {
    let loaded = load_str("nodes.yaml", NODES, "node-z");
    assert_eq!(loaded.cluster.node, None);
    assert!(loaded.rejected.is_empty());
}

#[test]
fn one_bad_service_among_good_ones_is_rejected_alone() {
    let text = [
        service_doc("a", "10.96.0.1", "80"),
        service_doc("bad-port", "10.96.0.2", "0"),
        service_doc("b", "10.96.0.3", "443"),
        service_doc("bad-ip", "10.96.0.999", "80"),
        service_doc("c", "10.96.0.4", "53"),
    ]
    .join("---\n");
    let loaded = load_str("svcs.yaml", &text, "node-a");
    assert_eq!(names(&loaded), ["shop/a", "shop/b", "shop/c"]);
    assert_eq!(
        loaded.rejected,
        vec![
            (
                "svcs.yaml:8 Service shop/bad-port".to_owned(),
                Rejection::Invalid(Reason::BadPort {
                    field: "spec.ports[0].port".into(),
                    value: 0
                })
            ),
            (
                "svcs.yaml:22 Service shop/bad-ip".to_owned(),
                Rejection::Invalid(Reason::BadIp {
                    field: "spec.clusterIPs[0]".into(),
                    value: "10.96.0.999".into()
                })
            ),
        ]
    );
}

#[test]
fn malformed_documents_and_objects_never_stop_the_others() {
    let text = format!(
        "{}---\nkind: Service\nmetadata: {{name: x\n---\n{}---\n- just\n- a list\n---\nkind: Service\nmetadata: {{name: nokind}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: typo, namespace: shop}}\nspec: {{ports: [{{port: eighty}}]}}\n---\n{}",
        service_doc("a", "10.96.0.1", "80"),
        service_doc("b", "10.96.0.2", "80"),
        service_doc("c", "10.96.0.3", "80"),
    );
    let loaded = load_str("mixed.yaml", &text, "node-a");
    assert_eq!(names(&loaded), ["shop/a", "shop/b", "shop/c"]);
    let rejected: Vec<&str> = loaded.rejected.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(
        rejected,
        [
            "mixed.yaml:8",
            "mixed.yaml:18",
            "mixed.yaml:21 Service default/nokind",
            "mixed.yaml:24 Service shop/typo",
        ]
    );
    let reasons: Vec<&Rejection> = loaded.rejected.iter().map(|(_, r)| r).collect();
    assert!(
        matches!(
            reasons[..],
            [
                Rejection::Yaml(_),
                Rejection::NotAnObject,
                Rejection::NoTypeMeta,
                Rejection::Decode { kind, .. },
            ] if kind == "Service"
        ),
        "{reasons:?}"
    );
}

#[test]
fn skipped_services_are_neither_kept_nor_rejected() {
    let text = "apiVersion: v1
kind: Service
metadata:
  name: other
  labels: {service.kubernetes.io/service-proxy-name: cilium}
spec: {clusterIP: 10.96.0.5, ports: [{port: 80}]}
";
    let loaded = load_str("other.yaml", text, "node-a");
    assert!(loaded.cluster.services.is_empty());
    assert!(loaded.rejected.is_empty());
}

#[test]
fn lists_and_typed_lists() {
    let text = format!(
        "apiVersion: v1
kind: List
items:
- {}
- {}
---
apiVersion: v1
kind: ServiceList
items:
- metadata: {{name: typed, namespace: shop}}
  spec: {{clusterIP: 10.96.0.3, ports: [{{port: 80}}]}}
- metadata: {{name: bad, namespace: shop}}
  spec: {{clusterIP: 10.96.0.4, ports: [{{port: 80, protocol: ICMP}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSliceList
items:
- metadata: {{name: typed-1, namespace: shop, labels: {{kubernetes.io/service-name: typed}}}}
  addressType: IPv4
  endpoints: [{{addresses: [10.244.0.9]}}]
",
        serde_json::to_string(
            &serde_saphyr::from_str::<Value>(&service_doc("a", "10.96.0.1", "80")).unwrap()
        )
        .unwrap(),
        serde_json::to_string(&serde_saphyr::from_str::<Value>(SLICE).unwrap()).unwrap(),
    );
    let loaded = load_str("list.yaml", &text, "node-a");
    assert_eq!(names(&loaded), ["shop/a", "shop/typed"]);
    assert_eq!(loaded.cluster.slices.len(), 2);
    assert_eq!(
        loaded.rejected,
        vec![(
            "list.yaml:7 items[1] Service shop/bad".to_owned(),
            Rejection::Invalid(Reason::UnknownProtocol {
                field: "spec.ports[0].protocol".into(),
                value: "ICMP".into()
            })
        )]
    );
}

#[test]
fn duplicates_keep_the_first() {
    let text = [
        service_doc("web", "10.96.0.1", "80"),
        service_doc("web", "10.96.0.2", "80"),
        SLICE.to_owned(),
        SLICE.to_owned(),
        NODES.to_owned(),
        NODES.to_owned(),
    ]
    .join("---\n");
    let loaded = load_str("dup.yaml", &text, "node-a");
    let web = &loaded.cluster.services[&ServiceRef::new("shop", "web")];
    assert_eq!(web.cluster_ips, vec![ip("10.96.0.1")]);
    let reasons: Vec<(&str, &str)> = loaded
        .rejected
        .iter()
        .filter_map(|(_, r)| match r {
            Rejection::Duplicate { kind, first } => Some((*kind, first.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("Service", "dup.yaml:1"),
            ("EndpointSlice", "dup.yaml:15"),
            ("Node", "dup.yaml:44"),
        ]
    );
    assert_eq!(loaded.rejected.len(), 3, "{:?}", loaded.rejected);
}

#[test]
fn a_directory_is_read_in_name_order() {
    let dir = TempDir::new("dir");
    dir.write("b-services.yml", &service_doc("web", "10.96.0.2", "80"));
    dir.write("a-services.yaml", &service_doc("web", "10.96.0.1", "80"));
    dir.write("c-slice.json", &{
        let v: Value = serde_saphyr::from_str(SLICE).unwrap();
        serde_json::to_string_pretty(&v).unwrap()
    });
    dir.write("d-nodes.yaml", NODES);
    dir.write("e-broken.json", "{\"apiVersion\": ");
    dir.write(".hidden.yaml", &service_doc("hidden", "10.96.0.9", "80"));
    dir.write("README.md", "not a manifest");
    std::fs::create_dir(dir.0.join("sub.yaml")).unwrap();

    let loaded = load(&dir.0, "node-a").unwrap();
    assert_eq!(names(&loaded), ["shop/web"]);
    let web = &loaded.cluster.services[&ServiceRef::new("shop", "web")];
    assert_eq!(
        web.cluster_ips,
        vec![ip("10.96.0.1")],
        "a- is read before b-"
    );
    assert_eq!(loaded.cluster.slices.len(), 1);
    assert!(loaded.cluster.node.is_some());
    let rejected: Vec<String> = loaded
        .rejected
        .iter()
        .map(|(o, _)| {
            o.strip_prefix(&format!("{}/", dir.0.display()))
                .unwrap_or(o)
                .to_owned()
        })
        .collect();
    assert_eq!(
        rejected,
        ["b-services.yml:1 Service shop/web", "e-broken.json:1"]
    );
    assert!(
        matches!(loaded.rejected[1].1, Rejection::Json(_)),
        "{:?}",
        loaded.rejected
    );
}

#[test]
fn a_single_file_and_a_missing_path() {
    let dir = TempDir::new("file");
    let file = dir.write("web.txt", &service_doc("web", "10.96.0.1", "80"));
    let loaded = load(&file, "node-a").unwrap();
    assert_eq!(names(&loaded), ["shop/web"]);

    let missing = dir.0.join("nowhere");
    let err = load(&missing, "node-a").unwrap_err();
    assert!(matches!(&err, Error::Read { path, .. } if *path == missing));
}

#[test]
fn documents_split_on_markers_with_their_lines() {
    let text = "\u{feff}a: 1\n---\nb: 2\n--- {c: 3}\n...\nd: 4\n---x: 5\n---\n\n";
    let docs = documents(text);
    assert_eq!(
        docs,
        vec![
            (1, "a: 1\n"),
            (3, "b: 2\n"),
            (4, " {c: 3}\n"),
            (6, "d: 4\n---x: 5\n"),
        ]
    );
}

async fn next_change(rx: &mut mpsc::Receiver<()>) -> bool {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .is_ok()
}

#[tokio::test]
async fn watch_wakes_on_changes_and_stops_with_its_receiver() {
    let dir = TempDir::new("watch");
    dir.write("a.yaml", &service_doc("a", "10.96.0.1", "80"));
    let (tx, mut rx) = mpsc::channel(1);
    let task = tokio::spawn(watch(dir.0.clone(), Duration::from_millis(10), tx));

    // Nothing changed: no wake-up.
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(rx.try_recv().is_err());

    dir.write("a.yaml", &service_doc("a", "10.96.0.1", "8080"));
    assert!(next_change(&mut rx).await, "a changed file wakes");

    dir.write("b.yaml", &service_doc("b", "10.96.0.2", "80"));
    assert!(next_change(&mut rx).await, "a new file wakes");

    std::fs::remove_file(dir.0.join("a.yaml")).unwrap();
    assert!(next_change(&mut rx).await, "a removed file wakes");

    drop(rx);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("watch returns once its receiver is gone")
        .unwrap();
}

#[test]
fn odd_input_is_rejected_never_a_panic() {
    let cases = [
        "apiVersion: v1\nkind: Service\nmetadata: web\n",
        "apiVersion: v1\nkind: Service\nmetadata: {name: [1, 2]}\nspec: []\n",
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 99999999999}]}\n",
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{}]}\n",
        "apiVersion: v1\nkind: Node\n",
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s}\n",
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints: [{addresses: 10.0.0.1}]\n",
        "apiVersion: v1\nkind: List\nitems: {a: 1}\n",
        "apiVersion: 1\nkind: true\n",
        "{? [a]: b}\n",
        "\"just a string\"\n",
        "key: [unclosed\n",
        "apiVersion: v1\nkind: ServiceList\nitems: [1, null, {metadata: {name: x}}]\n",
    ];
    for text in cases {
        let loaded = load_str("odd.yaml", text, "node-a");
        assert_eq!(loaded.cluster, Cluster::default(), "{text}");
        assert!(!loaded.rejected.is_empty(), "{text}");
    }
}
