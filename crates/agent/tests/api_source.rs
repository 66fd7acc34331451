//! The API-server source against a fake API server that speaks the real list/watch protocol:
//! the real kube client and kube-runtime watchers, real HTTP, real JSON. Each test ends with
//! the kernel plan the agent would apply (pure: `desired` + `plan`).

mod fake_apiserver;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_apiserver::objects::{label, node, service, slice};
use fake_apiserver::{FakeApiServer, Resource};
use kube_proxy_ipvs_agent::model::desired::{Host, LocalAddress, desired};
use kube_proxy_ipvs_agent::model::kernel::KernelState;
use kube_proxy_ipvs_agent::model::plan::plan;
use kube_proxy_ipvs_agent::model::snapshot::changes::{Changes, Published};
use kube_proxy_ipvs_agent::model::snapshot::cluster::{Cluster, ServiceRef};
use kube_proxy_ipvs_agent::model::snapshot::config::ProxyConfig;
use kube_proxy_ipvs_agent::source::api::{
    self, ClientOptions, NodeLifecycle, SERVICE_SELECTOR, SLICE_SELECTOR, Watches,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const NODE: &str = "node-a";
const WAIT: Duration = Duration::from_secs(15);

/// The source under test, with every snapshot it published.
struct Agent {
    snapshots: watch::Receiver<Option<Published>>,
    published: Arc<Mutex<Vec<Published>>>,
    source: JoinHandle<Result<(), api::Error>>,
    recorder: JoinHandle<()>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.source.abort();
        self.recorder.abort();
    }
}

impl Agent {
    fn start(watches: Watches) -> Self {
        let (tx, snapshots) = watch::channel(None);
        let mut rx = tx.subscribe();
        let published = Arc::new(Mutex::new(Vec::new()));
        let recorder = tokio::spawn({
            let published = published.clone();
            async move {
                while rx.changed().await.is_ok() {
                    let snapshot = rx.borrow_and_update().clone();
                    published
                        .lock()
                        .unwrap()
                        .push(snapshot.expect("None is never published after Some"));
                }
            }
        });
        Self {
            snapshots,
            published,
            source: tokio::spawn(watches.run(tx)),
            recorder,
        }
    }

    fn of(server: &FakeApiServer) -> Self {
        Self::start(Watches::new(server.client(), NODE))
    }

    /// Waits for a snapshot that satisfies `ok`.
    async fn until(&mut self, what: &str, ok: impl Fn(&Cluster) -> bool) -> Arc<Cluster> {
        let found = tokio::time::timeout(WAIT, async {
            loop {
                if let Some(c) = self.snapshots.borrow_and_update().clone()
                    && ok(&c.cluster)
                {
                    return c.cluster;
                }
                self.snapshots
                    .changed()
                    .await
                    .expect("the source is running");
            }
        })
        .await;
        match found {
            Ok(c) => c,
            Err(_) => panic!(
                "no snapshot {what} within {WAIT:?}; last: {:?}",
                self.snapshots.borrow()
            ),
        }
    }

    fn published(&self) -> Vec<Arc<Cluster>> {
        self.published
            .lock()
            .unwrap()
            .iter()
            .map(|p| p.cluster.clone())
            .collect()
    }

    /// The snapshots published, with the changes each says it holds.
    fn published_with_changes(&self) -> Vec<Published> {
        self.published.lock().unwrap().clone()
    }
}

/// Every snapshot published says what changed since the one before it as a diff of the two
/// finds it (or more: a change undone between two snapshots is named too), with each
/// changed object as the snapshot before held it: what the sync takes out of its state.
fn assert_told_what_changed(agent: &Agent) {
    let published = agent.published_with_changes();
    for pair in published.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        let told = after
            .changes_since(before.generation())
            .expect("the log reaches one snapshot back");
        let diff = Changes::between(&before.cluster, &after.cluster);
        assert!(
            diff.services().is_subset(told.services()),
            "told {:?}, the diff finds {:?}",
            told.services(),
            diff.services()
        );
        assert!(
            !diff.node_changed() || told.node_changed(),
            "the Node changed"
        );
        let services = told.services();
        for id in services {
            assert_eq!(
                told.old_service(id, &after.cluster),
                before.cluster.services.get(id),
                "{id} as it was"
            );
        }
        let now = after.cluster.slices_of_services(services);
        let old = told.old_slices(&now);
        let was = before.cluster.slices_of_services(services);
        for id in services {
            assert_eq!(old.of(id), was.of(id), "{id}'s slices as they were");
        }
    }
}

/// Waits until `ok` holds (polling), failing the test after [`WAIT`].
async fn eventually(what: &str, ok: impl Fn() -> bool) {
    let start = tokio::time::Instant::now();
    while !ok() {
        assert!(start.elapsed() < WAIT, "not {what} within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const KINDS: [Resource; 3] = [
    Resource::Services,
    Resource::EndpointSlices,
    Resource::Nodes,
];

/// Waits until every kind has made `n` watch requests, and a little more for the server to
/// start streaming them.
async fn watching(server: &FakeApiServer, n: usize) {
    eventually(&format!("watching ({n} watch requests per kind)"), || {
        KINDS.iter().all(|r| server.watches(*r) >= n)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
}

fn services(c: &Cluster) -> Vec<String> {
    c.services.keys().map(|s| s.name.to_string()).collect()
}

fn has_service(name: &str) -> impl Fn(&Cluster) -> bool {
    let id = ServiceRef::new("default", name);
    move |c| c.services.contains_key(&id)
}

fn endpoints(c: &Cluster, service: &str) -> BTreeSet<IpAddr> {
    c.slices_of(&ServiceRef::new("default", service))
        .flat_map(|s| s.endpoints.iter().map(|e| e.address))
        .collect()
}

fn ips(list: &[&str]) -> BTreeSet<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn config() -> ProxyConfig {
    ProxyConfig {
        node_name: NODE.into(),
        ..ProxyConfig::default()
    }
}

fn host() -> Host {
    Host {
        addresses: vec![LocalAddress {
            interface: "eth0".into(),
            address: "192.168.1.10".parse().unwrap(),
        }],
    }
}

/// The IPVS part of the plan from `observed` to what `cluster` wants, one line per
/// operation (`add service 10.96.0.10:80/tcp rr`, `add 10.244.0.2:8080 to ... weight 1`).
fn ipvs_plan(cluster: &Cluster, observed: &KernelState) -> Vec<String> {
    let want = desired(cluster, &config(), &host());
    plan(&want.state, observed, &[])
        .ops
        .iter()
        .map(ToString::to_string)
        .filter(|op| {
            [
                "add service",
                "delete service",
                "add 10.",
                "remove 10.",
                "set 10.",
            ]
            .iter()
            .any(|p| op.starts_with(p))
        })
        .collect()
}

fn state_of(cluster: &Cluster) -> KernelState {
    desired(cluster, &config(), &host()).state
}

/// web (10.96.0.10:80 -> two pods on 8080), the Node, and what kube-proxy must not see.
fn populate(server: &FakeApiServer) {
    server.apply(service("web", "10.96.0.10", &[80]));
    server.apply(slice(
        "web",
        "abc",
        8080,
        &[("10.244.0.2", NODE), ("10.244.1.2", "node-b")],
    ));
    server.apply(node(NODE, "192.168.1.10", "10.244.0.0/24"));
    server.apply(node("node-b", "192.168.1.11", "10.244.1.0/24"));
    // Another proxy's Service and a headless Service's slice: the selectors keep them away.
    server.apply(label(
        service("other", "10.96.0.20", &[80]),
        "service.kubernetes.io/service-proxy-name",
        "other-proxy",
    ));
    server.apply(label(
        slice("db", "xyz", 5432, &[("10.244.0.9", NODE)]),
        "service.kubernetes.io/headless",
        "",
    ));
}

#[tokio::test]
async fn initial_list_publishes_one_complete_snapshot() {
    let server = FakeApiServer::start().await;
    populate(&server);
    let mut agent = Agent::of(&server);
    let c = agent.until("with web", has_service("web")).await;

    assert_eq!(services(&c), ["web"]);
    assert_eq!(endpoints(&c, "web"), ips(&["10.244.0.2", "10.244.1.2"]));
    let node = c.node.as_ref().expect("the own Node");
    assert_eq!(node.name, NODE);
    assert_eq!(node.pod_cidrs, ["10.244.0.0/24".parse().unwrap()]);
    assert_eq!(
        agent.published().len(),
        1,
        "one snapshot for the initial lists"
    );

    // The selectors are kube-proxy's, applied on the server; lists come from the watch cache.
    let requests = server.requests();
    for r in requests
        .iter()
        .filter(|r| r.resource != Some(Resource::Nodes))
    {
        let want = if r.resource == Some(Resource::Services) {
            SERVICE_SELECTOR
        } else {
            SLICE_SELECTOR
        };
        assert_eq!(r.query.get("labelSelector").map(String::as_str), Some(want));
    }
    for r in requests
        .iter()
        .filter(|r| r.resource == Some(Resource::Nodes))
    {
        assert_eq!(
            r.query.get("fieldSelector").map(String::as_str),
            Some("metadata.name=node-a")
        );
    }
    for r in requests.iter().filter(|r| !r.is_watch()) {
        assert_eq!(
            r.query.get("resourceVersion").map(String::as_str),
            Some("0")
        );
    }

    assert_eq!(
        ipvs_plan(&c, &KernelState::default()),
        [
            "add service 10.96.0.10:80/tcp rr",
            "add 10.244.0.2:8080 to 10.96.0.10:80/tcp weight 1",
            "add 10.244.1.2:8080 to 10.96.0.10:80/tcp weight 1",
        ]
    );
}

#[tokio::test]
async fn watch_events_add_modify_and_delete() {
    let server = FakeApiServer::start().await;
    populate(&server);
    let mut agent = Agent::of(&server);
    let first = agent.until("with web", has_service("web")).await;

    // Added: a new Service and its slice.
    server.apply(service("api", "10.96.0.11", &[443]));
    server.apply(slice("api", "a1", 8443, &[("10.244.0.3", NODE)]));
    let added = agent
        .until("with api's endpoint", |c| {
            endpoints(c, "api") == ips(&["10.244.0.3"])
        })
        .await;
    assert_eq!(
        ipvs_plan(&added, &state_of(&first)),
        [
            "add service 10.96.0.11:443/tcp rr",
            "add 10.244.0.3:8443 to 10.96.0.11:443/tcp weight 1",
        ]
    );

    // Modified: web's pod on node-b is replaced; the old one drains at weight 0 (TCP).
    server.apply(slice(
        "web",
        "abc",
        8080,
        &[("10.244.0.2", NODE), ("10.244.1.7", "node-b")],
    ));
    let modified = agent
        .until("with web's new pod", |c| {
            endpoints(c, "web").contains(&"10.244.1.7".parse().unwrap())
        })
        .await;
    assert_eq!(
        ipvs_plan(&modified, &state_of(&added)),
        [
            "add 10.244.1.7:8080 to 10.96.0.10:80/tcp weight 1",
            "set 10.244.1.2:8080 of 10.96.0.10:80/tcp weight 0",
        ]
    );

    // Deleted: api goes; and web, labelled for another proxy, leaves the selection (the
    // server sends DELETED).
    server.delete(Resource::Services, "default", "api");
    server.apply(label(
        service("web", "10.96.0.10", &[80]),
        "service.kubernetes.io/service-proxy-name",
        "other-proxy",
    ));
    let deleted = agent
        .until("without services", |c| c.services.is_empty())
        .await;
    assert_eq!(
        ipvs_plan(&deleted, &state_of(&modified)),
        [
            "delete service 10.96.0.10:80/tcp",
            "delete service 10.96.0.11:443/tcp",
        ]
    );
    assert_eq!(server.lists(Resource::Services), 1, "no relist was needed");
}

#[tokio::test]
async fn bookmarks_let_a_reconnect_resume_without_a_relist() {
    let server = FakeApiServer::start().await;
    populate(&server);
    let mut agent = Agent::of(&server);
    agent.until("with web", has_service("web")).await;
    watching(&server, 1).await;

    // Changes no watch of this agent sees move the resourceVersion on.
    for i in 0..5 {
        server.apply(label(
            node("node-b", "192.168.1.11", "10.244.1.0/24"),
            "round",
            &i.to_string(),
        ));
    }
    server.bookmark();
    // Let the watchers read the bookmark before the history they would need is compacted.
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.compact();
    server.drop_watches();
    server.apply(service("late", "10.96.0.12", &[80]));
    let c = agent.until("with late", has_service("late")).await;

    assert_eq!(services(&c), ["late", "web"]);
    watching(&server, 2).await;
    for r in KINDS {
        assert_eq!(server.lists(r), 1, "{r:?} resumed from its bookmark");
    }
}

#[tokio::test]
async fn gone_relists_and_converges_without_publishing_a_partial_snapshot() {
    let server = FakeApiServer::start().await;
    populate(&server);
    for i in 1..=4 {
        server.apply(service(&format!("s{i}"), &format!("10.96.1.{i}"), &[80]));
    }
    let mut agent = Agent::of(&server);
    let before = agent.until("with s4", has_service("s4")).await;
    assert_eq!(services(&before), ["s1", "s2", "s3", "s4", "web"]);
    watching(&server, 1).await;

    // The Service watch is told 410 Gone and its relist is slow; meanwhile the Services
    // change (missed by the dead watch) and a slice changes (seen live, so a snapshot is
    // published while the Service relist is in progress).
    server.set_delay(Duration::from_millis(1200));
    server.gone_for(Resource::Services);
    server.delete(Resource::Services, "default", "s1");
    server.apply(service("s5", "10.96.1.5", &[80]));
    server.apply(slice("web", "abc", 8080, &[("10.244.0.2", NODE)]));
    let during = agent
        .until("with web's single pod", |c| {
            endpoints(c, "web") == ips(&["10.244.0.2"])
        })
        .await;
    assert_eq!(
        services(&during),
        services(&before),
        "during the relist the previous Services are kept"
    );
    server.set_delay(Duration::ZERO);

    let after = agent.until("with s5", has_service("s5")).await;
    assert_eq!(services(&after), ["s2", "s3", "s4", "s5", "web"]);
    assert_eq!(server.lists(Resource::Services), 2);
    assert_eq!(server.lists(Resource::EndpointSlices), 1);
    let old: BTreeSet<_> = services(&before).into_iter().collect();
    let new: BTreeSet<_> = services(&after).into_iter().collect();
    for c in agent.published() {
        let seen: BTreeSet<_> = services(&c).into_iter().collect();
        assert!(
            seen == old || seen == new,
            "a snapshot with services {seen:?} is neither the old nor the new list"
        );
    }
    assert_eq!(
        ipvs_plan(&after, &state_of(&during)),
        [
            "add service 10.96.1.5:80/tcp rr",
            "delete service 10.96.1.1:80/tcp",
        ]
    );
    // The relist's changes are told too, by one diff of the list it replaced.
    assert_told_what_changed(&agent);
}

#[tokio::test]
async fn an_expired_continue_token_restarts_the_list_from_the_first_page() {
    let server = FakeApiServer::start().await;
    populate(&server);
    for i in 1..=4 {
        server.apply(service(&format!("s{i}"), &format!("10.96.1.{i}"), &[80]));
    }
    // The second page of the first Service list fails: etcd compacted in between.
    server.expire_next_pages(1);
    let mut agent = Agent::start(Watches::new(server.client(), NODE).page_size(Some(2)));
    let c = agent
        .until("with Services", |c| !c.services.is_empty())
        .await;

    assert_eq!(services(&c), ["s1", "s2", "s3", "s4", "web"]);
    assert_eq!(
        agent.published().len(),
        1,
        "the first page alone was never published"
    );
    // Pages: 2 (the second expired) + 3 for Services; no resourceVersion=0 with pages.
    assert_eq!(server.lists(Resource::Services), 5);
    assert!(
        server.requests().iter().filter(|r| !r.is_watch()).all(|r| r
            .query
            .get("limit")
            .map(String::as_str)
            == Some("2")
            && !r.query.contains_key("resourceVersion"))
    );
}

#[tokio::test]
async fn a_dropped_connection_reconnects_from_the_last_version() {
    let server = FakeApiServer::start().await;
    populate(&server);
    let mut agent = Agent::of(&server);
    agent.until("with web", has_service("web")).await;
    watching(&server, 1).await;

    server.drop_watches();
    server.apply(slice("web", "abc", 8080, &[("10.244.0.5", NODE)]));
    let c = agent
        .until("with web's new pod", |c| {
            endpoints(c, "web") == ips(&["10.244.0.5"])
        })
        .await;
    watching(&server, 2).await;
    for r in KINDS {
        assert_eq!(server.lists(r), 1, "{r:?} resumed without a relist");
    }
    assert_eq!(
        ipvs_plan(&c, &KernelState::default()),
        [
            "add service 10.96.0.10:80/tcp rr",
            "add 10.244.0.5:8080 to 10.96.0.10:80/tcp weight 1",
        ]
    );
}

#[tokio::test]
async fn a_slow_server_gives_no_snapshot_before_every_list_is_done() {
    let server = FakeApiServer::start().await;
    populate(&server);
    server.set_delay(Duration::from_millis(800));
    let mut agent = Agent::of(&server);

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        agent.snapshots.borrow().is_none(),
        "nothing before the lists"
    );
    let c = agent.until("with web", has_service("web")).await;
    assert_eq!(services(&c), ["web"]);
    assert!(c.node.is_some());
    assert_eq!(agent.published().len(), 1);
}

#[tokio::test]
async fn a_failing_list_is_retried_and_nothing_is_published_meanwhile() {
    let server = FakeApiServer::start().await;
    populate(&server);
    // The first request (whichever kind) fails with a Status body.
    server.fail_next(&[500]);
    let mut agent = Agent::of(&server);
    let c = agent.until("with web", has_service("web")).await;
    assert!(c.node.is_some());
    assert_eq!(endpoints(&c, "web").len(), 2);
    assert_eq!(agent.published().len(), 1);
    let lists: usize = KINDS.into_iter().map(|r| server.lists(r)).sum();
    assert_eq!(lists, 4, "three lists and one retry");
}

#[tokio::test]
async fn a_burst_of_events_is_coalesced() {
    let server = FakeApiServer::start().await;
    populate(&server);
    let mut agent =
        Agent::start(Watches::new(server.client(), NODE).coalesce(Duration::from_millis(300)));
    agent.until("with web", has_service("web")).await;

    for i in 0..40 {
        server.apply(service(&format!("b{i}"), &format!("10.96.2.{i}"), &[80]));
    }
    let c = agent
        .until("with the burst", |c| c.services.len() == 41)
        .await;
    assert_eq!(c.services.len(), 41);
    let published = agent.published().len();
    assert!(
        published <= 4,
        "40 events made {published} snapshots (initial included)"
    );
    assert_told_what_changed(&agent);
}

#[tokio::test]
async fn each_snapshot_says_what_changed_since_the_one_before() {
    let server = FakeApiServer::start().await;
    populate(&server);
    server.apply(service("api", "10.96.0.11", &[80]));
    let mut agent = Agent::of(&server);
    agent.until("with api", has_service("api")).await;
    // web's slice is relabelled to api; then to a Service that does not exist yet, which
    // is made; web is deleted while its slices stay, and made again; the Node moves.
    let relabelled = |to: &str| {
        label(
            slice("web", "abc", 8080, &[("10.244.0.2", NODE)]),
            "kubernetes.io/service-name",
            to,
        )
    };
    server.apply(relabelled("api"));
    agent
        .until("web's slice under api", |c| endpoints(c, "api").len() == 1)
        .await;
    server.apply(relabelled("later"));
    agent
        .until("api without it", |c| endpoints(c, "api").is_empty())
        .await;
    server.apply(service("later", "10.96.0.12", &[80]));
    agent.until("later made", has_service("later")).await;
    server.delete(Resource::Services, "default", "web");
    agent.until("web gone", |c| !has_service("web")(c)).await;
    server.apply(service("web", "10.96.0.10", &[80]));
    agent.until("web again", has_service("web")).await;
    server.apply(node(NODE, "192.168.1.20", "10.244.0.0/24"));
    agent
        .until("the Node moved", |c| {
            c.node
                .as_ref()
                .is_some_and(|n| n.addresses.iter().any(|a| a.to_string() == "192.168.1.20"))
        })
        .await;
    let published = agent.published_with_changes();
    assert!(published.len() >= 7, "{} snapshots", published.len());
    let last = published.last().unwrap();
    assert!(
        last.changes_since(last.generation() - 1)
            .unwrap()
            .node_changed()
    );
    assert_told_what_changed(&agent);
}

#[tokio::test]
async fn node_deletion_and_autoscaler_taint_are_reported() {
    let server = FakeApiServer::start().await;
    populate(&server);
    let (tx, mut lifecycle) = watch::channel(NodeLifecycle::default());
    let mut agent = Agent::start(Watches::new(server.client(), NODE).node_lifecycle(tx));
    agent.until("with web", has_service("web")).await;
    assert_eq!(*lifecycle.borrow_and_update(), NodeLifecycle::default());

    let mut tainted = node(NODE, "192.168.1.10", "10.244.0.0/24");
    tainted["spec"]["taints"] = serde_json::json!([
        {"key": api::TO_BE_DELETED_TAINT, "value": "1700000000", "effect": "NoSchedule"}
    ]);
    server.apply(tainted);
    tokio::time::timeout(WAIT, lifecycle.wait_for(|l| l.to_be_deleted))
        .await
        .expect("the taint is reported in time")
        .expect("the source is running");
    assert!(!lifecycle.borrow().deleting);
    // The Node's model did not change: no new snapshot for it.
    assert_eq!(agent.published().len(), 1);
}

#[tokio::test]
async fn a_client_from_a_kubeconfig_reaches_the_server() {
    let server = FakeApiServer::start().await;
    populate(&server);
    let dir = std::env::temp_dir().join(format!("kpi-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: nobody\n\
             users:\n- name: nobody\n  user: {{}}\n",
            server.url()
        ),
    )
    .unwrap();
    let options = ClientOptions {
        kubeconfig: Some(path.clone()),
        qps: 5.0,
        burst: 10,
        ..ClientOptions::default()
    };
    let config = api::config(&options).await.expect("kubeconfig read");
    assert_eq!(config.cluster_url.to_string(), format!("{}/", server.url()));

    // --master overrides the kubeconfig's server.
    let overridden = api::config(&ClientOptions {
        kubeconfig: Some(path.clone()),
        master: Some("https://10.0.0.1:6443".into()),
        ..ClientOptions::default()
    })
    .await
    .unwrap();
    assert_eq!(overridden.cluster_url.to_string(), "https://10.0.0.1:6443/");

    let client = api::client(&options).await.expect("a client");
    let mut agent = Agent::start(Watches::new(client, NODE));
    agent.until("with web", has_service("web")).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_qps_limit_spaces_the_requests() {
    let server = FakeApiServer::start().await;
    populate(&server);
    let client = api::client(&ClientOptions {
        master: Some(server.url()),
        qps: 4.0,
        burst: 1,
        ..ClientOptions::default()
    })
    .await
    .unwrap();
    let start = tokio::time::Instant::now();
    let mut agent = Agent::start(Watches::new(client, NODE));
    agent.until("with web", has_service("web")).await;
    // Three lists with one token and four more per second: the last one waits 0.5 s.
    assert!(
        start.elapsed() >= Duration::from_millis(450),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn master_alone_and_errors() {
    let server = FakeApiServer::start().await;
    populate(&server);
    let client = api::client(&ClientOptions {
        master: Some(server.url()),
        ..ClientOptions::default()
    })
    .await
    .expect("a client of --master");
    let (tx, mut rx) = watch::channel(None);
    let source = tokio::spawn(api::run(client, NODE.into(), tx));
    tokio::time::timeout(WAIT, rx.wait_for(|c| c.is_some()))
        .await
        .expect("a snapshot in time")
        .expect("the source is running");
    drop(rx);
    // With no receiver left, the source ends.
    tokio::time::timeout(WAIT, source)
        .await
        .expect("the source ends")
        .expect("no panic")
        .expect("no error");

    assert!(matches!(
        api::config(&ClientOptions {
            master: Some("http://[::1".into()),
            ..ClientOptions::default()
        })
        .await,
        Err(api::Error::Master { .. })
    ));
    assert!(matches!(
        api::config(&ClientOptions {
            kubeconfig: Some("/nonexistent/kubeconfig".into()),
            ..ClientOptions::default()
        })
        .await,
        Err(api::Error::Kubeconfig { .. })
    ));
    let (tx, _rx) = watch::channel(None);
    assert!(matches!(
        api::run(server.client(), String::new(), tx).await,
        Err(api::Error::NoNodeName)
    ));
}

/// Waits until the Service watch streams (a 410 reaches it).
async fn open_watch(server: &FakeApiServer) {
    eventually("the Service watch open", || {
        server.wait_for_watches(&[Resource::Services], Duration::ZERO)
    })
    .await;
}

/// The requests for `resource` that were lists (not watches).
fn plain_lists(server: &FakeApiServer, resource: Resource) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.resource == Some(resource) && !r.is_watch())
        .count()
}

#[tokio::test]
async fn the_initial_state_is_streamed_and_nothing_is_listed() {
    let server = FakeApiServer::start().await;
    populate(&server);
    let mut agent = Agent::of(&server);
    let c = agent.until("with web", has_service("web")).await;
    assert_eq!(services(&c), ["web"]);
    assert!(c.node.is_some());
    assert_eq!(
        agent.published().len(),
        1,
        "nothing before the end bookmarks"
    );
    for r in KINDS {
        assert_eq!(plain_lists(&server, r), 0, "{r:?} was listed");
        assert_eq!(server.lists(r), 1, "{r:?}: one streamed initial state");
    }
    // A relist after a 410 is streamed too.
    open_watch(&server).await;
    server.gone_for(Resource::Services);
    server.apply(service("s5", "10.96.1.5", &[80]));
    agent.until("with s5", has_service("s5")).await;
    assert_eq!(server.lists(Resource::Services), 2);
    assert_eq!(plain_lists(&server, Resource::Services), 0);
}

#[tokio::test]
async fn a_server_that_refuses_to_stream_is_listed() {
    let server = FakeApiServer::start().await;
    populate(&server);
    server.refuse_streaming_lists();
    let mut agent = Agent::of(&server);
    let c = agent.until("with web", has_service("web")).await;
    assert_eq!(services(&c), ["web"]);
    assert!(c.node.is_some());
    for r in KINDS {
        assert_eq!(
            plain_lists(&server, r),
            1,
            "{r:?} listed once after the refusal"
        );
    }
    // Listed for good: a relist after a 410 does not try streaming again.
    let streamed = |s: &FakeApiServer| {
        s.requests()
            .iter()
            .filter(|r| r.streams_initial_state())
            .count()
    };
    let before = streamed(&server);
    open_watch(&server).await;
    server.gone_for(Resource::Services);
    server.apply(service("s5", "10.96.1.5", &[80]));
    agent.until("with s5", has_service("s5")).await;
    assert_eq!(plain_lists(&server, Resource::Services), 2);
    assert_eq!(streamed(&server), before);
}

#[tokio::test]
async fn a_server_that_ignores_streaming_is_listed_after_its_silence() {
    let server = FakeApiServer::start().await;
    populate(&server);
    server.ignore_streaming_lists();
    let mut agent = Agent::start(
        Watches::new(server.client(), NODE).stream_silence(Duration::from_millis(500)),
    );
    let c = agent.until("with web", has_service("web")).await;
    assert_eq!(services(&c), ["web"]);
    assert!(c.node.is_some());
    assert_eq!(
        agent.published().len(),
        1,
        "the objects streamed without an end were never published alone"
    );
    for r in KINDS {
        assert_eq!(plain_lists(&server, r), 1, "{r:?} listed after the silence");
    }
}

#[tokio::test]
async fn a_streamed_initial_state_cut_short_is_never_published() {
    let server = FakeApiServer::start().await;
    populate(&server);
    for i in 1..=6 {
        server.apply(service(&format!("s{i}"), &format!("10.96.1.{i}"), &[80]));
    }
    server.truncate_next_lists(1);
    let mut agent = Agent::of(&server);
    let c = agent
        .until("with every Service", |c| c.services.len() == 7)
        .await;
    assert!(c.node.is_some());
    for snapshot in agent.published() {
        assert_eq!(snapshot.services.len(), 7, "a partial state was published");
    }
    let cut = KINDS.into_iter().map(|r| server.lists(r)).sum::<usize>();
    assert_eq!(cut, 4, "three streamed states and the one cut short, again");
}

/// How long the watches take to be renewed after the server cuts them: from the cut to a
/// new watch request of every kind.
async fn renewal(server: &FakeApiServer, limit: Duration) -> Option<Duration> {
    let before: Vec<usize> = KINDS.iter().map(|r| server.watches(*r)).collect();
    let cut = tokio::time::Instant::now();
    server.drop_watches();
    while !KINDS
        .iter()
        .zip(&before)
        .all(|(r, n)| server.watches(*r) > *n)
    {
        if cut.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Some(cut.elapsed())
}

/// A refused scheduler on `n` Services, as the sync reports them.
fn refused_events(n: usize) -> Vec<k8s_openapi::api::events::v1::Event> {
    use kube_proxy_ipvs_agent::model::desired::scheduler::{Refusal, Why};
    (0..n)
        .map(|i| {
            kube_proxy_ipvs_agent::k8s::events::scheduler_refused(
                NODE,
                &Refusal {
                    service: ServiceRef::new("tenant", format!("svc-{i}")),
                    asked: "lblc".into(),
                    instead: "rr".into(),
                    why: Why::LoadsUnderLock,
                },
            )
        })
        .collect()
}

/// 1,000 refused Services do not hold up the watches: their events go through the event
/// lane, on a client of its own and within a budget per reason, so the watches are renewed
/// at once (within 1 s) after the events were queued. The same events posted on the
/// watches' client, one request each, as the agent used to post them, put its token bucket
/// (kube-proxy's qps 5, burst 10) about 200 s in debt, and the renewal waits: the second half
/// shows that this test can fail.
#[tokio::test]
async fn a_thousand_refused_services_do_not_delay_a_watch_renewal() {
    use kube_proxy_ipvs_agent::k8s::event_lane::EventLane;
    let server = FakeApiServer::start().await;
    populate(&server);
    let options = ClientOptions {
        master: Some(server.url()),
        qps: 5.0,
        burst: 10,
        ..ClientOptions::default()
    };
    let watches_client = api::client(&options).await.unwrap();
    let mut agent = Agent::start(Watches::new(watches_client.clone(), NODE));
    agent.until("with web", has_service("web")).await;
    watching(&server, 1).await;
    let quiet = renewal(&server, WAIT).await.expect("renewed");
    watching(&server, 2).await;

    let (lane, post) = EventLane::new(api::client(&options).await.unwrap(), NODE.into());
    let poster = tokio::spawn(post);
    for event in refused_events(1000) {
        lane.record(event);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let with_lane = renewal(&server, WAIT).await;
    watching(&server, 3).await;
    let posted = server
        .requests()
        .iter()
        .filter(|r| r.path.contains("/events"))
        .count();

    // As before: each event posted at once on the watches' client.
    for event in refused_events(1000) {
        let api: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(watches_client.clone(), "tenant");
        tokio::spawn(async move {
            let _ = api.create(&kube::api::PostParams::default(), &event).await;
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shared = renewal(&server, Duration::from_secs(10)).await;
    eprintln!(
        "watch renewal: {quiet:?} with no events, {with_lane:?} with 1,000 events on the lane ({posted} posted), {shared:?} with them on the watches' client (None: more than 10 s)"
    );
    poster.abort();
    let with_lane = with_lane.expect("the watches were not renewed with the events queued");
    assert!(
        with_lane < Duration::from_secs(1),
        "the renewal waited {with_lane:?} behind the events"
    );
    assert!(
        posted <= 1 + kube_proxy_ipvs_agent::k8s::event_lane::PER_REASON as usize,
        "{posted} events posted one by one"
    );
    assert!(
        shared.is_none_or(|d| d > Duration::from_secs(5)),
        "events on the watches' client did not delay the renewal ({shared:?}): the check cannot fail"
    );
}

/// The API client's requests and each watch's health are exported: client-go's
/// `rest_client_requests_total` and `rest_client_request_duration_seconds` with its labels,
/// the last time each kind's watch got through, and its errors by reason, so that an agent cut
/// off from the API server (still syncing its last state) can be told from a healthy one.
#[tokio::test]
async fn api_requests_and_watch_health_are_in_the_metrics() {
    use kube_proxy_ipvs_agent::metrics::{ApiMetrics, Metrics};
    use kube_proxy_ipvs_agent::model::snapshot::cluster::Family;
    let server = FakeApiServer::start().await;
    populate(&server);
    let api_metrics = ApiMetrics::default();
    let observer: Arc<dyn api::ApiObserver> = Arc::new(api_metrics.clone());
    let options = ClientOptions {
        master: Some(server.url()),
        ..ClientOptions::default()
    };
    let client = api::client_observed(&options, Some(observer.clone()))
        .await
        .unwrap();
    let mut agent = Agent::start(Watches::new(client, NODE).observer(observer));
    agent.until("with web", has_service("web")).await;
    watching(&server, 1).await;
    let metrics = Metrics::new(&[Family::V4], false).with_api(&api_metrics);
    let text = metrics.render();
    let host = server.url().trim_start_matches("http://").to_string();
    let sample = |text: &str, name: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    let ok = format!("rest_client_requests_total{{code=\"200\",method=\"GET\",host=\"{host}\"}}");
    assert!(
        sample(&text, &ok).is_some_and(|n| n >= 3.0),
        "{ok} missing:\n{text}"
    );
    assert!(
        text.contains(&format!(
            "rest_client_request_duration_seconds_bucket{{le=\"0.005\",verb=\"GET\",host=\"{host}\"}}"
        )) || text.contains(&format!(
            "rest_client_request_duration_seconds_count{{verb=\"GET\",host=\"{host}\"}}"
        )),
        "{text}"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for kind in ["Service", "EndpointSlice", "Node"] {
        let name =
            format!("kube_proxy_ipvs_api_watch_last_success_timestamp_seconds{{kind=\"{kind}\"}}");
        let at = sample(&text, &name).unwrap_or_else(|| panic!("{name} missing:\n{text}"));
        assert!((now - at).abs() < 30.0, "{name} = {at}, now {now}");
        let errors = format!(
            "kube_proxy_ipvs_api_watch_errors_total{{kind=\"{kind}\",reason=\"watch-start\"}}"
        );
        assert_eq!(sample(&text, &errors), Some(0.0), "{errors}:\n{text}");
    }
    // The server refuses the renewed watches: errors are counted, by kind and reason.
    server.fail_next(&[500, 500, 500]);
    server.drop_watches();
    let failed = |text: &str| {
        ["Service", "EndpointSlice", "Node"]
            .iter()
            .map(|kind| {
                sample(
                    text,
                    &format!(
                        "kube_proxy_ipvs_api_watch_errors_total{{kind=\"{kind}\",reason=\"watch-start\"}}"
                    ),
                )
                .unwrap_or(0.0)
            })
            .sum::<f64>()
    };
    eventually("watch errors counted", || failed(&metrics.render()) >= 1.0).await;
    let text = metrics.render();
    let refused =
        format!("rest_client_requests_total{{code=\"500\",method=\"GET\",host=\"{host}\"}}");
    assert!(
        sample(&text, &refused).is_some_and(|n| n >= 1.0),
        "{refused}:\n{text}"
    );
}
