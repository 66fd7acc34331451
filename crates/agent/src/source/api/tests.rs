//! Store semantics without a server: relists, conversion once per version, change detection.

use super::*;
use crate::k8s::convert::SERVICE_PROXY_NAME_LABEL;

fn service(name: &str, version: &str, cluster_ip: &str) -> core::Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": "default", "name": name, "resourceVersion": version},
        "spec": {"clusterIP": cluster_ip, "ports": [{"port": 80}]},
    }))
    .unwrap()
}

fn node(version: &str, taints: serde_json::Value, deleting: bool) -> core::Node {
    let mut meta = serde_json::json!({"name": "node-a", "resourceVersion": version});
    if deleting {
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z".into();
    }
    serde_json::from_value(serde_json::json!({
        "metadata": meta,
        "spec": {"taints": taints, "podCIDRs": ["10.244.0.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.10"}]},
    }))
    .unwrap()
}

fn service_event(e: Event<core::Service>) -> Update {
    Update::Service(Box::new(Ok(e)))
}

fn slice_event(e: Event<discovery::EndpointSlice>) -> Update {
    Update::Slice(Box::new(Ok(e)))
}

fn node_event(e: Event<core::Node>) -> Update {
    Update::Node(Box::new(Ok(e)))
}

fn names(store: &Store<core::Service>) -> Vec<String> {
    store.models().map(|s| s.id.name.clone()).collect()
}

#[test]
fn a_relist_keeps_the_previous_objects_until_it_is_done() {
    let mut store = Store::<core::Service>::default();
    assert!(!store.apply(Event::Init));
    assert!(!store.apply(Event::InitApply(service("a", "1", "10.96.0.1"))));
    assert!(!store.listed, "not listed before InitDone");
    assert!(store.apply(Event::InitDone), "the first list is a change");
    assert_eq!(names(&store), ["a"]);

    // A 410 restarts the list: the store still answers with the old objects meanwhile.
    assert!(!store.apply(Event::Init));
    assert_eq!(names(&store), ["a"]);
    assert!(!store.apply(Event::InitApply(service("b", "5", "10.96.0.2"))));
    assert_eq!(names(&store), ["a"]);
    assert!(store.apply(Event::InitDone));
    assert_eq!(
        names(&store),
        ["b"],
        "a was deleted while the watch was gone"
    );
}

#[test]
fn a_relist_with_the_same_objects_is_not_a_change() {
    let mut store = Store::<core::Service>::default();
    for e in [
        Event::Init,
        Event::InitApply(service("a", "1", "10.96.0.1")),
        Event::InitDone,
    ] {
        store.apply(e);
    }
    store.apply(Event::Init);
    store.apply(Event::InitApply(service("a", "1", "10.96.0.1")));
    assert!(!store.apply(Event::InitDone));
    // A new version with the same meaning is not a change either.
    assert!(!store.apply(Event::Apply(service("a", "2", "10.96.0.1"))));
    assert!(store.apply(Event::Apply(service("a", "3", "10.96.0.9"))));
}

#[test]
fn a_list_interrupted_and_restarted_drops_the_partial_buffer() {
    let mut store = Store::<core::Service>::default();
    store.apply(Event::Init);
    store.apply(Event::InitApply(service("a", "1", "10.96.0.1")));
    // The second page failed (expired continue token): the watcher starts over.
    store.apply(Event::Init);
    store.apply(Event::InitApply(service("b", "2", "10.96.0.2")));
    store.apply(Event::InitDone);
    assert_eq!(names(&store), ["b"]);
}

#[test]
fn a_rejected_object_is_converted_and_logged_once_per_version() {
    let mut store = Store::<core::Service>::default();
    let bad = |v: &str| service("bad", v, "not-an-ip");
    store.apply(Event::Init);
    store.apply(Event::InitApply(bad("1")));
    store.apply(Event::InitApply(service("good", "1", "10.96.0.1")));
    assert!(store.apply(Event::InitDone));
    assert_eq!(store.rejected, 1);
    assert_eq!(names(&store), ["good"]);
    // The same version again (a relist) is not converted again.
    store.apply(Event::Init);
    store.apply(Event::InitApply(bad("1")));
    store.apply(Event::InitApply(service("good", "1", "10.96.0.1")));
    assert!(!store.apply(Event::InitDone));
    assert_eq!(store.rejected, 1);
    // A new version is, and it is still no change to the snapshot.
    assert!(!store.apply(Event::Apply(bad("2"))));
    assert_eq!(store.rejected, 2);
    // Fixed: it appears; deleted: it goes.
    assert!(store.apply(Event::Apply(service("bad", "3", "10.96.0.3"))));
    assert_eq!(names(&store), ["bad", "good"]);
    assert!(store.apply(Event::Delete(service("bad", "4", "10.96.0.3"))));
    assert!(!store.apply(Event::Delete(service("gone", "5", "10.96.0.5"))));
}

#[test]
fn headless_and_foreign_services_are_left_out_without_a_rejection() {
    let mut store = Store::<core::Service>::default();
    let mut foreign = service("foreign", "1", "10.96.0.1");
    foreign.metadata.labels = Some(
        [(SERVICE_PROXY_NAME_LABEL.to_owned(), "other".to_owned())]
            .into_iter()
            .collect(),
    );
    store.apply(Event::Init);
    store.apply(Event::InitApply(foreign.clone()));
    store.apply(Event::InitApply(service("headless", "1", "None")));
    store.apply(Event::InitDone);
    assert_eq!(store.rejected, 0);
    assert!(!store.apply(Event::Apply(foreign)));
    let stores = Stores {
        services: store,
        ..Stores::default()
    };
    let c = stores.cluster();
    assert!(
        !c.services
            .contains_key(&ServiceRef::new("default", "foreign"))
    );
    assert!(
        c.services[&ServiceRef::new("default", "headless")]
            .cluster_ips
            .is_empty()
    );
}

#[test]
fn node_lifecycle_follows_deletion_and_the_autoscaler_taint() {
    let taint = serde_json::json!([{"key": TO_BE_DELETED_TAINT, "effect": "NoSchedule"}]);
    let other = serde_json::json!([{"key": "dedicated", "effect": "NoSchedule"}]);
    assert_eq!(
        NodeLifecycle::of(&node("1", other.clone(), false)),
        NodeLifecycle::default()
    );
    assert_eq!(
        NodeLifecycle::of(&node("1", taint, false)),
        NodeLifecycle {
            deleting: false,
            to_be_deleted: true
        }
    );
    assert_eq!(
        NodeLifecycle::of(&node("1", other.clone(), true)),
        NodeLifecycle {
            deleting: true,
            to_be_deleted: false
        }
    );

    // A lifecycle change alone changes the store (so it gets published), not the cluster.
    let mut stores = Stores::default();
    stores.apply(node_event(Event::Init));
    stores.apply(node_event(Event::InitApply(node(
        "1",
        other.clone(),
        false,
    ))));
    assert!(stores.apply(node_event(Event::InitDone)));
    let before = stores.cluster();
    assert_eq!(before.node.as_ref().unwrap().name, "node-a");
    assert!(stores.apply(node_event(Event::Apply(node("2", other, true)))));
    assert_eq!(stores.cluster(), before);
    assert!(stores.lifecycle().deleting);
}

#[test]
fn stores_are_ready_only_when_every_kind_has_listed() {
    let mut stores = Stores::default();
    for done in [service_event(Event::InitDone), slice_event(Event::InitDone)] {
        stores.apply(done);
        assert!(!stores.ready());
    }
    stores.apply(node_event(Event::InitDone));
    assert!(stores.ready());
    assert_eq!(stores.cluster(), Cluster::default());
}

fn status(code: u16) -> Box<kube::core::Status> {
    Box::new(kube::core::Status::failure("gone", "Expired").with_code(code))
}

#[test]
fn a_410_is_a_relist_request_and_other_errors_are_failures() {
    assert!(asks_for_relist(&watcher::Error::WatchError(status(410))));
    assert!(asks_for_relist(&watcher::Error::InitialListFailed(
        kube::Error::Api(status(410))
    )));
    assert!(!asks_for_relist(&watcher::Error::WatchError(status(500))));
    assert!(!asks_for_relist(&watcher::Error::InitialListFailed(
        kube::Error::Api(status(503))
    )));
    assert!(!asks_for_relist(&watcher::Error::NoResourceVersion));
}

#[test]
fn after_a_410_the_relist_waits_one_first_step_and_the_backoff_goes_on() {
    let mut backoff = RelistBackoff::default();
    // An outage: the steps grow to the 30 s cap (60 s with jitter).
    let steps: Vec<Duration> = (0..8).map(|_| backoff.next().unwrap()).collect();
    assert!(steps[7] >= Duration::from_secs(30), "{steps:?}");
    // The resumed watch answers 410: the relist comes after a first step...
    backoff.gone.store(true, Ordering::Relaxed);
    let relist = backoff.next().unwrap();
    assert!(
        relist >= Duration::from_millis(800) && relist <= Duration::from_millis(1600),
        "{relist:?}"
    );
    // ...and a failure after it still backs off from where the backoff was.
    assert!(backoff.next().unwrap() >= Duration::from_secs(30));
    backoff.reset();
    assert!(backoff.next().unwrap() <= Duration::from_millis(1600));
}
