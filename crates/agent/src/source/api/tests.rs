//! Store semantics without a server: relists, conversion once per version, change detection.

use crate::model::snapshot::cluster::Cluster;
use std::sync::atomic::Ordering;

use kube::runtime::utils::Backoff;
use kube::runtime::watcher::Event;

use super::store::Store;
use super::stream::{RelistBackoff, asks_for_relist};
use super::*;
use crate::k8s::convert::SERVICE_PROXY_NAME_LABEL;
use crate::model::snapshot::cluster::{ServiceRef, SliceRef};

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
    store.models().map(|s| s.id.name.to_string()).collect()
}

#[test]
fn a_relist_keeps_the_previous_objects_until_it_is_done() {
    let mut store = Store::<core::Service>::default();
    assert!(!store.apply(Event::Init).any());
    assert!(
        !store
            .apply(Event::InitApply(service("a", "1", "10.96.0.1")))
            .any()
    );
    assert!(!store.listed, "not listed before InitDone");
    assert!(
        store.apply(Event::InitDone).any(),
        "the first list is a change"
    );
    assert_eq!(names(&store), ["a"]);

    // A 410 restarts the list: the store still answers with the old objects meanwhile.
    assert!(!store.apply(Event::Init).any());
    assert_eq!(names(&store), ["a"]);
    assert!(
        !store
            .apply(Event::InitApply(service("b", "5", "10.96.0.2")))
            .any()
    );
    assert_eq!(names(&store), ["a"]);
    assert!(store.apply(Event::InitDone).any());
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
        store.apply(e).any();
    }
    store.apply(Event::Init).any();
    store
        .apply(Event::InitApply(service("a", "1", "10.96.0.1")))
        .any();
    assert!(!store.apply(Event::InitDone).any());
    // A new version with the same meaning is not a change either.
    assert!(
        !store
            .apply(Event::Apply(service("a", "2", "10.96.0.1")))
            .any()
    );
    assert!(
        store
            .apply(Event::Apply(service("a", "3", "10.96.0.9")))
            .any()
    );
}

#[test]
fn a_relist_keeps_the_unchanged_objects_where_they_are() {
    let mut store = Store::<core::Service>::default();
    let key = |name: &str| ("default".to_string(), name.to_string());
    for e in [
        Event::Init,
        Event::InitApply(service("a", "1", "10.96.0.1")),
        Event::InitApply(service("b", "1", "10.96.0.2")),
        Event::InitApply(service("c", "1", "10.96.0.3")),
        Event::InitDone,
    ] {
        store.apply(e).any();
    }
    let a = store.live[&key("a")].clone();
    let version = store.live[&key("a")].version.as_ptr();
    store.apply(Event::Init).any();
    for s in [
        service("a", "1", "10.96.0.1"),
        service("b", "2", "10.96.0.9"),
        service("d", "1", "10.96.0.4"),
    ] {
        store.apply(Event::InitApply(s)).any();
    }
    assert!(
        store.relist.as_ref().is_some_and(|r| r.len() == 2),
        "only b's new version and d wait for the list's end"
    );
    assert!(store.apply(Event::InitDone).any());
    assert_eq!(names(&store), ["a", "b", "d"], "c was deleted meanwhile");
    let kept = &store.live[&key("a")];
    assert_eq!(kept.version.as_ptr(), version, "a's entry was made again");
    assert!(std::sync::Arc::ptr_eq(
        kept.model.as_ref().unwrap(),
        a.model.as_ref().unwrap()
    ));
    let b = store.live[&key("b")].model.as_ref().unwrap();
    assert_eq!(b.cluster_ips[0].to_string(), "10.96.0.9");
}

#[test]
fn a_list_interrupted_and_restarted_drops_the_partial_buffer() {
    let mut store = Store::<core::Service>::default();
    store.apply(Event::Init).any();
    store
        .apply(Event::InitApply(service("a", "1", "10.96.0.1")))
        .any();
    // The second page failed (expired continue token): the watcher starts over.
    store.apply(Event::Init).any();
    store
        .apply(Event::InitApply(service("b", "2", "10.96.0.2")))
        .any();
    store.apply(Event::InitDone).any();
    assert_eq!(names(&store), ["b"]);
}

#[test]
fn a_rejected_object_is_converted_and_logged_once_per_version() {
    let mut store = Store::<core::Service>::default();
    let bad = |v: &str| service("bad", v, "not-an-ip");
    store.apply(Event::Init).any();
    store.apply(Event::InitApply(bad("1"))).any();
    store
        .apply(Event::InitApply(service("good", "1", "10.96.0.1")))
        .any();
    assert!(store.apply(Event::InitDone).any());
    assert_eq!(store.rejected, 1);
    assert_eq!(names(&store), ["good"]);
    // The same version again (a relist) is not converted again.
    store.apply(Event::Init).any();
    store.apply(Event::InitApply(bad("1"))).any();
    store
        .apply(Event::InitApply(service("good", "1", "10.96.0.1")))
        .any();
    assert!(!store.apply(Event::InitDone).any());
    assert_eq!(store.rejected, 1);
    // A new version is, and it is still no change to the snapshot.
    assert!(!store.apply(Event::Apply(bad("2"))).any());
    assert_eq!(store.rejected, 2);
    // Fixed: it appears; deleted: it goes.
    assert!(
        store
            .apply(Event::Apply(service("bad", "3", "10.96.0.3")))
            .any()
    );
    assert_eq!(names(&store), ["bad", "good"]);
    assert!(
        store
            .apply(Event::Delete(service("bad", "4", "10.96.0.3")))
            .any()
    );
    assert!(
        !store
            .apply(Event::Delete(service("gone", "5", "10.96.0.5")))
            .any()
    );
}

#[test]
fn headless_and_foreign_services_are_left_out_without_a_rejection() {
    let mut stores = Stores::default();
    let mut foreign = service("foreign", "1", "10.96.0.1");
    foreign.metadata.labels = Some(
        [(SERVICE_PROXY_NAME_LABEL.to_owned(), "other".to_owned())]
            .into_iter()
            .collect(),
    );
    stores.apply(service_event(Event::Init));
    stores.apply(service_event(Event::InitApply(foreign.clone())));
    stores.apply(service_event(Event::InitApply(service(
        "headless", "1", "None",
    ))));
    stores.apply(service_event(Event::InitDone));
    assert_eq!(stores.services.rejected, 0);
    assert!(!stores.apply(service_event(Event::Apply(foreign))));
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

/// The snapshot as it was built before it was kept up to date: from every model of the
/// stores.
fn rebuilt(stores: &Stores) -> Cluster {
    Cluster {
        services: stores
            .services
            .models()
            .map(|s| (s.id.clone(), s.clone()))
            .collect(),
        slices: stores
            .slices
            .models()
            .map(|s| (s.id(), s.clone()))
            .collect(),
        node: stores.own_node().and_then(|n| n.node.clone()),
    }
}

fn slice(name: &str, service: &str, version: &str, address: &str) -> discovery::EndpointSlice {
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "namespace": "default", "name": name, "resourceVersion": version,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
        "ports": [{"port": 8080, "protocol": "TCP"}],
    }))
    .unwrap()
}

#[test]
fn the_snapshot_kept_one_object_at_a_time_is_the_one_the_stores_build() {
    let mut stores = Stores::default();
    let check = |stores: &mut Stores, update: Update, changes: bool| {
        let before = stores.cluster();
        assert_eq!(stores.apply(update), changes);
        let now = stores.cluster();
        assert_eq!(now, rebuilt(stores));
        if !changes {
            assert_eq!(now, before);
        }
    };
    check(&mut stores, service_event(Event::Init), false);
    for (name, ip) in [("a", "10.96.0.1"), ("b", "10.96.0.2"), ("c", "10.96.0.3")] {
        check(
            &mut stores,
            service_event(Event::InitApply(service(name, "1", ip))),
            false,
        );
    }
    check(&mut stores, service_event(Event::InitDone), true);
    check(&mut stores, slice_event(Event::Init), false);
    check(
        &mut stores,
        slice_event(Event::InitApply(slice("a-1", "a", "1", "10.244.0.2"))),
        false,
    );
    check(&mut stores, slice_event(Event::InitDone), true);
    assert_eq!(stores.cluster().services.len(), 3);
    assert_eq!(stores.cluster().slices.len(), 1);
    // A new object, a changed one, the same version again, a deletion.
    check(
        &mut stores,
        slice_event(Event::Apply(slice("b-1", "b", "2", "10.244.0.3"))),
        true,
    );
    check(
        &mut stores,
        slice_event(Event::Apply(slice("a-1", "a", "3", "10.244.0.4"))),
        true,
    );
    check(
        &mut stores,
        slice_event(Event::Apply(slice("a-1", "a", "3", "10.244.0.4"))),
        false,
    );
    check(
        &mut stores,
        service_event(Event::Apply(service("b", "4", "10.96.1.2"))),
        true,
    );
    check(
        &mut stores,
        service_event(Event::Delete(service("c", "5", "10.96.0.3"))),
        true,
    );
    check(
        &mut stores,
        service_event(Event::Delete(service("c", "5", "10.96.0.3"))),
        false,
    );
    // A Service that becomes headless leaves the snapshot's cluster IPs, not the snapshot.
    check(
        &mut stores,
        service_event(Event::Apply(service("a", "6", "None"))),
        true,
    );
    // A relist to another set of objects replaces the kind whole.
    check(&mut stores, slice_event(Event::Init), false);
    check(
        &mut stores,
        slice_event(Event::InitApply(slice("d-1", "d", "7", "10.244.0.5"))),
        false,
    );
    check(&mut stores, slice_event(Event::InitDone), true);
    let c = stores.cluster();
    assert_eq!(
        c.slices.keys().cloned().collect::<Vec<_>>(),
        [SliceRef::new("default", "d-1")]
    );
    assert_eq!(
        c.services.keys().map(|id| &*id.name).collect::<Vec<_>>(),
        ["a", "b"]
    );
}
