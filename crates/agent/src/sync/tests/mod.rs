//! Tests of the sync loop: syncs against the in-memory dataplane, the loop with paused time.
//!
//! # Layout
//! - `reading`: the reads of a periodic pass made apart, while changes sync.
//! - `failures`: the loop over a kernel that refuses, its backoff and the verdicts that block
//!   the agent.

mod failures;
mod reading;

use std::sync::Arc;

use tokio::sync::watch;

use super::*;
use crate::dataplane::memory::Memory;
use crate::model::desired::warning::Warning as ModelWarning;
use crate::model::desired::{Host, desired};
use crate::model::fixtures::{added_vips, cluster, eps, kubernetes, svc};
use crate::model::incremental::REBUILD_EVERY;
use crate::model::kernel::sets::named;
use crate::model::kernel::{KernelState, Table};
use crate::model::plan::Op;
use crate::model::snapshot::changes::Published;
use crate::model::snapshot::cluster::{Protocol, ServiceRef, SliceRef};

/// The first snapshot a source publishes.
fn first(c: Cluster) -> Option<Published> {
    Some(Published::first(Arc::new(c)))
}

/// Publishes `c` on `tx` as a source does, with what changed since the snapshot before.
fn publish(tx: &watch::Sender<Option<Published>>, c: Cluster) {
    let next = match &*tx.borrow() {
        Some(last) => last.next(Arc::new(c.clone()), Changes::between(&last.cluster, &c)),
        None => Published::first(Arc::new(c)),
    };
    tx.send_replace(Some(next));
}

/// `default/web` on 10.96.0.10:80 with ready endpoints on another node.
fn web(endpoints: &[&str]) -> Cluster {
    let slice = endpoints
        .iter()
        .fold(eps("web", "", Protocol::Tcp, 8080), |s, a| {
            s.ready(a, "other")
        });
    cluster(
        vec![svc("web").cluster_ip("10.96.0.10").tcp(80)],
        vec![slice],
    )
}

/// `web` with the API server's Service, `default/kubernetes` on 10.96.0.1:443.
fn with_kubernetes(mut c: Cluster) -> Cluster {
    let (api, slice) = kubernetes("cp");
    let api = cluster(vec![api], vec![slice]);
    c.services.extend(api.services);
    c.slices.extend(api.slices);
    c
}

#[tokio::test]
async fn a_full_sync_reports_the_counts_of_its_own_virtual_servers_by_service_port() {
    let c = cluster(
        vec![
            svc("web")
                .cluster_ip("10.96.0.10")
                .port("http", Protocol::Tcp, 80)
                .port("dns", Protocol::Udp, 53)
                .node_port(30053),
        ],
        vec![
            eps("web", "http", Protocol::Tcp, 8080).ready("10.244.1.5", "other"),
            eps("web", "dns", Protocol::Udp, 53).ready("10.244.1.5", "other"),
        ],
    );
    let vs = |a: &str, protocol, port| VsKey {
        address: a.parse().unwrap(),
        protocol,
        port,
    };
    let http = vs("10.96.0.10", Protocol::Tcp, 80);
    let node_dns = vs("192.168.1.10", Protocol::Udp, 30053);
    let foreign = vs("10.1.1.1", Protocol::Tcp, 80);
    let counted = |n| Traffic {
        connections: n,
        in_packets: 2 * n,
        out_packets: 3 * n,
        in_bytes: 4 * n,
        out_bytes: 5 * n,
    };
    let mut s = Syncer::new(
        Memory {
            host: crate::model::fixtures::host(),
            ..Memory::default()
        },
        ProxyConfig::default(),
    );
    // The first sync makes the virtual servers; the kernel counts on them afterwards.
    s.sync(&c, true).await.unwrap();
    let mut foreign_vs = s.dataplane().state.services[&http].clone();
    foreign_vs.destinations = Default::default();
    s.dataplane().state.services.insert(foreign, foreign_vs);
    s.dataplane().traffic = [
        (http, counted(1)),
        (node_dns, counted(7)),
        (foreign, counted(9)),
    ]
    .into();
    let r = s.sync(&c, true).await.unwrap();
    let traffic = r.traffic.expect("a full sync reports the counts");
    let found: Vec<_> = traffic
        .iter()
        .map(|t| (t.key, &*t.service.name, t.port_name.as_str(), t.traffic))
        .collect();
    // Ours only, each with its Service port: the node port's by its node port.
    assert!(
        found.contains(&(http, "web", "http", counted(1))),
        "{found:?}"
    );
    assert!(
        found.contains(&(node_dns, "web", "dns", counted(7))),
        "{found:?}"
    );
    assert!(!found.iter().any(|f| f.0 == foreign), "{found:?}");
    let changed = s.sync(&c, false).await.unwrap();
    assert_eq!(changed.traffic, None, "a partial sync reads no counts");
}

#[tokio::test]
async fn a_change_looks_at_its_own_services_refusals_and_keeps_the_others() {
    let mut c = cluster(
        vec![
            svc("web").cluster_ip("10.96.0.10").tcp(80),
            svc("api").cluster_ip("10.96.0.11").tcp(80),
        ],
        vec![
            eps("web", "", Protocol::Tcp, 8080).ready("10.244.0.2", "node-b"),
            eps("api", "", Protocol::Tcp, 8080).ready("10.244.0.3", "node-b"),
        ],
    );
    let set = |c: &mut Cluster, name: &str, sched: Option<&str>| {
        let before = c.clone();
        let id = ServiceRef::new("default", name);
        Arc::make_mut(c.services.get_mut(&id).unwrap()).scheduler = sched.map(Into::into);
        Changes::between(&before, c)
    };
    let refused = |r: &Report| {
        r.scheduler_refusals
            .iter()
            .map(|r| r.service.to_string())
            .collect::<Vec<_>>()
    };
    set(&mut c, "web", Some("lblc"));
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    let r = s.sync(&c, true).await.unwrap();
    assert_eq!(refused(&r), ["default/web"]);
    // api's change: its refusal is new, web's stands and is not told again.
    let changed = set(&mut c, "api", Some("lblcr"));
    let r = s.sync_changed(&c, &changed).await.unwrap();
    assert!(!r.full);
    assert_eq!(refused(&r), ["default/api"]);
    // web's ends, then starts again: a new spell.
    let changed = set(&mut c, "web", None);
    assert!(refused(&s.sync_changed(&c, &changed).await.unwrap()).is_empty());
    let changed = set(&mut c, "web", Some("lblc"));
    let r = s.sync_changed(&c, &changed).await.unwrap();
    assert_eq!(refused(&r), ["default/web"]);
    // A full sync looks at every Service and finds what the changes kept: nothing new.
    let r = s.sync(&c, true).await.unwrap();
    assert!(refused(&r).is_empty(), "{:?}", refused(&r));
}

#[tokio::test]
async fn a_refused_scheduler_is_programmed_as_the_nodes_and_reported_once_per_spell() {
    let mut c = web(&["10.244.0.2"]);
    let set = |c: &mut Cluster, sched: Option<&str>| {
        let id = c.services.keys().next().unwrap().clone();
        Arc::make_mut(c.services.get_mut(&id).unwrap()).scheduler = sched.map(Into::into);
    };
    set(&mut c, Some("lblc"));
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    let r = s.sync(&c, true).await.unwrap();
    let vs: Vec<_> = s.dataplane().state.services.values().collect();
    assert_eq!(vs.len(), 1);
    assert_eq!(vs[0].scheduler, "rr", "the node's scheduler, not lblc");
    assert_eq!(r.scheduler_refusals.len(), 1);
    assert_eq!(r.scheduler_refusals[0].asked, "lblc");
    assert!(
        r.warnings
            .iter()
            .any(|w| matches!(w, Warning::Model(ModelWarning::SchedulerRefused(r)) if &*r.service.name == "web" && r.asked == "lblc")),
        "{:?}",
        r.warnings
    );
    // Still refused: not reported again.
    let r = s.sync(&c, true).await.unwrap();
    assert!(r.scheduler_refusals.is_empty() && r.warnings.is_empty());
    // Ended (the annotation changed), then back: a new spell, reported again.
    set(&mut c, Some("sh"));
    let r = s.sync(&c, true).await.unwrap();
    assert!(r.scheduler_refusals.is_empty());
    assert_eq!(
        s.dataplane()
            .state
            .services
            .values()
            .next()
            .unwrap()
            .scheduler,
        "sh"
    );
    set(&mut c, Some("lblcr"));
    let r = s.sync(&c, true).await.unwrap();
    assert_eq!(r.scheduler_refusals.len(), 1);
    // Allowed by the operator: programmed as asked.
    let allowed = ProxyConfig {
        allowed_schedulers: ["lblcr".to_string()].into(),
        ..ProxyConfig::default()
    };
    let mut s = Syncer::new(Memory::default(), allowed);
    let r = s.sync(&c, true).await.unwrap();
    assert!(r.scheduler_refusals.is_empty());
    assert_eq!(
        s.dataplane()
            .state
            .services
            .values()
            .next()
            .unwrap()
            .scheduler,
        "lblcr"
    );
}

#[tokio::test]
async fn a_change_synced_alone_programs_what_a_whole_sync_does() {
    let mut c = with_kubernetes(web(&["10.244.0.2"]));
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    s.sync(&c, true).await.unwrap();
    let before = c.clone();
    let key = slice_key_of(&c, "web");
    let slice = Arc::make_mut(c.slices.get_mut(&key).unwrap());
    let mut endpoint = slice.endpoints[0].clone();
    endpoint.address = "10.244.0.9".parse().unwrap();
    slice.endpoints.push(endpoint);
    let changed = Changes::between(&before, &c);
    assert_eq!(
        changed.services(),
        &BTreeSet::from([ServiceRef::new("default", "web")])
    );
    let r = s.sync_changed(&c, &changed).await.unwrap();
    assert!(!r.full);
    let ops: Vec<String> = r.plan.ops.iter().map(|o| o.to_string()).collect();
    assert_eq!(ops, ["add 10.244.0.9:8080 to 10.96.0.10:80/tcp weight 1"]);
    let mut whole = Syncer::new(Memory::default(), ProxyConfig::default());
    whole.sync(&c, true).await.unwrap();
    assert_eq!(s.dataplane().state, whole.dataplane().state);
    // Nothing changed: nothing planned, and the next full sync finds no drift.
    let r = s.sync_changed(&c, &Changes::default()).await.unwrap();
    assert!(r.plan.is_empty());
    let r = s.sync(&c, true).await.unwrap();
    assert!(r.plan.is_empty() && r.drift.is_empty());
}

#[tokio::test]
async fn the_first_sync_programs_the_api_server_service_before_the_rest() {
    let c = with_kubernetes(web(&["10.244.0.2"]));
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    let r = s.sync(&c, false).await.unwrap();
    let applied = &s.dataplane().applied;
    assert_eq!(applied.len(), 2, "{applied:#?}");
    assert_eq!(added_vips(&applied[0]), ["10.96.0.1:443"]);
    assert_eq!(added_vips(&applied[1]), ["10.96.0.10:80"]);
    // The report covers both, each operation once.
    assert_eq!(added_vips(&r.plan), ["10.96.0.1:443", "10.96.0.10:80"]);
    assert_eq!(r.applied.done, applied[0].ops.len() + applied[1].ops.len());
    assert_eq!(
        s.dataplane().state,
        desired(&c, &ProxyConfig::default(), &Host::default()).state
    );

    // A restarted agent finds it all programmed: one full read, nothing applied.
    let kernel = std::mem::take(&mut s.dataplane().state);
    let mut again = Syncer::new(
        Memory {
            state: kernel,
            ..Memory::default()
        },
        ProxyConfig::default(),
    );
    let r = again.sync(&c, true).await.unwrap();
    assert!(r.plan.is_empty(), "{:?}", r.plan.ops);
    assert!(again.dataplane().applied.is_empty());
    // Later syncs never take the priority path again.
    again.sync(&web(&["10.244.0.2"]), false).await.unwrap();
    again.sync(&c, false).await.unwrap();
    let applied = &again.dataplane().applied;
    assert_eq!(applied.len(), 2, "{applied:#?}");
    assert!(added_vips(&applied[1]).contains(&"10.96.0.1:443".to_string()));
}

#[tokio::test]
async fn a_refused_priority_service_reads_the_kernel_again_and_the_full_sync_reports_it() {
    let c = with_kubernetes(web(&["10.244.0.2"]));
    let kernel = Memory {
        refuse: vec!["10.96.0.1:443".into()],
        ..Memory::default()
    };
    let mut s = Syncer::new(kernel, ProxyConfig::default());
    let r = s.sync(&c, false).await.unwrap();
    assert_eq!(s.dataplane().observed, 2, "read again after the failure");
    assert_eq!(s.dataplane().applied.len(), 2);
    // Only the full plan's refusals are reported, once each.
    let failed: Vec<String> = r
        .applied
        .failures(&r.plan)
        .map(|(op, _)| op.to_string())
        .collect();
    assert!(!failed.is_empty());
    assert_eq!(
        failed.len(),
        r.applied.failed.len(),
        "every index in the plan"
    );
    assert!(
        failed.iter().all(|op| op.contains("10.96.0.1:443")),
        "{failed:?}"
    );
    let unique: BTreeSet<&String> = failed.iter().collect();
    assert_eq!(unique.len(), failed.len(), "{failed:?}");
    assert_eq!(added_vips(&r.plan), ["10.96.0.1:443", "10.96.0.10:80"]);
    assert!(s.dataplane().state.services.keys().any(|k| k.port == 80));
}

#[tokio::test]
async fn incremental_syncs_read_the_kernel_only_when_full() {
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    let r = s.sync(&web(&["10.244.0.2"]), false).await.unwrap();
    assert!(r.full, "the first sync reads the kernel");
    let r = s
        .sync(&web(&["10.244.0.2", "10.244.0.3"]), false)
        .await
        .unwrap();
    assert!(!r.full);
    assert_eq!(r.plan.ops.len(), 1, "{:?}", r.plan.ops);
    assert!(matches!(r.plan.ops[0], Op::AddDestination { .. }));
    assert_eq!(s.dataplane().observed, 1);
    // Nothing changed: nothing sent.
    let r = s
        .sync(&web(&["10.244.0.2", "10.244.0.3"]), true)
        .await
        .unwrap();
    assert!(r.plan.is_empty(), "{:?}", r.plan.ops);
    assert_eq!(s.dataplane().observed, 2);
}

#[tokio::test]
async fn a_full_sync_repairs_drift() {
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
    // Someone deletes our service behind our back.
    s.dataplane().state.services.clear();
    let r = s.sync(&web(&["10.244.0.2"]), false).await.unwrap();
    assert!(r.plan.is_empty(), "an incremental sync trusts its record");
    let r = s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
    assert!(
        r.plan
            .ops
            .iter()
            .any(|o| matches!(o, Op::AddService { .. })),
        "{:?}",
        r.plan.ops
    );
    // Nothing in the cluster changed: the service and its real server were drift.
    assert_eq!(r.drift.total(), 2, "{:?}", r.plan.ops);
    assert_eq!(
        r.drift.to_string(),
        "1 real_server (10.244.0.2:8080 of 10.96.0.10:80/tcp missing), \
         1 virtual_server (10.96.0.10:80/tcp missing)"
    );
    // A change of the cluster is not drift.
    let r = s
        .sync(&web(&["10.244.0.2", "10.244.0.3"]), true)
        .await
        .unwrap();
    assert!(r.drift.is_empty(), "{:?}", r.drift);
    assert!(
        r.set_sizes
            .iter()
            .any(|(n, len)| n == "KUBE-CLUSTER-IP" && *len == 1),
        "{:?}",
        r.set_sizes
    );
}

#[tokio::test]
async fn a_plan_that_moves_into_the_shadow_is_reported_by_its_counts_and_a_failed_one_whole() {
    let mut kept = Syncer::new(Memory::default(), ProxyConfig::default());
    let mut moved = Syncer::new(Memory::default(), ProxyConfig::default());
    moved.keep_plans(false);
    for c in [
        with_kubernetes(web(&["10.244.0.2"])),
        with_kubernetes(web(&["10.244.0.2", "10.244.0.3"])),
    ] {
        let a = kept.sync(&c, true).await.unwrap();
        let b = moved.sync(&c, true).await.unwrap();
        assert!(b.plan.is_empty() && !a.plan.is_empty());
        assert_eq!(b.op_counts, crate::model::plan::op_kind::count(&a.plan.ops));
        assert_eq!(b.ops(), a.plan.ops.len() as u64);
        assert_eq!(moved.shadow(), kept.shadow());
        assert_eq!(moved.dataplane().state, kept.dataplane().state);
    }
    // A failure keeps the plan whole, its failures pointing into it.
    moved.dataplane().refuse = vec!["add 10.244.0.4:8080".into()];
    let r = moved
        .sync(&with_kubernetes(web(&["10.244.0.2", "10.244.0.4"])), false)
        .await
        .unwrap();
    assert_eq!(r.plan.ops.len() as u64, r.ops());
    let failed: Vec<String> = r
        .applied
        .failures(&r.plan)
        .map(|(op, _)| op.to_string())
        .collect();
    assert_eq!(
        failed,
        ["add 10.244.0.4:8080 to 10.96.0.10:80/tcp weight 1"]
    );
}

#[tokio::test]
async fn full_syncs_keep_the_state_changes_brought_and_build_it_whole_every_eleventh() {
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    let (one, two) = (web(&["10.244.0.2"]), web(&["10.244.0.2", "10.244.0.3"]));
    s.sync(&one, true).await.unwrap();
    // A full sync after a change brings the kept state to the cluster by the change: its
    // real server goes in, and the state is not built again.
    let r = s
        .sync_with(&two, true, &Changes::between(&one, &two))
        .await
        .unwrap();
    assert_eq!(r.plan.ops.len(), 1, "{:?}", r.plan.ops);
    assert_eq!(s.incremental.kept_passes(), 1);
    // A fault that left the kept state wrong (a virtual server missing from it): the
    // passes that keep it plan from it, until the one that builds it whole finds the
    // fault, says so and repairs the kernel.
    let vip: VsKey = VsKey {
        address: "10.96.0.10".parse().unwrap(),
        protocol: Protocol::Tcp,
        port: 80,
    };
    let kept = s.incremental.desired_mut().unwrap();
    kept.state.services.remove(&vip);
    let mut found = None;
    for pass in 2..=REBUILD_EVERY + 1 {
        let r = s.sync_with(&two, true, &Changes::default()).await.unwrap();
        let has_vip = s.dataplane().state.services.contains_key(&vip);
        if r.warnings
            .iter()
            .any(|w| matches!(w, Warning::Model(ModelWarning::Diverged)))
        {
            assert!(has_vip, "the build repairs the kernel");
            found = Some(pass);
            break;
        }
        assert!(!has_vip, "pass {pass} planned from the kept state");
    }
    assert_eq!(found, Some(REBUILD_EVERY + 1));
    assert_eq!(s.incremental.kept_passes(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_node_change_reads_the_kernel_and_the_hosts_addresses_again() {
    let (tx, rx) = watch::channel(None);
    let mut syncer = Syncer::new(Memory::default(), ProxyConfig::default());
    let periods = Periods {
        sync: Duration::from_secs(3600),
        min_sync: Duration::from_secs(1),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let moved = |c: Cluster| {
        let mut node = crate::model::fixtures::node_in(None);
        node.addresses = vec!["192.168.51.10".parse().unwrap()];
        Cluster {
            node: Some(node),
            ..c
        }
    };
    let driver = async move {
        publish(&tx, web(&["10.244.0.2"]));
        tokio::time::sleep(Duration::from_secs(5)).await;
        // An endpoint change: synced against the shadow, no read.
        publish(&tx, web(&["10.244.0.2", "10.244.0.3"]));
        tokio::time::sleep(Duration::from_secs(5)).await;
        // The Node's address moves: the host's addresses are read again.
        publish(&tx, moved(web(&["10.244.0.2", "10.244.0.3"])));
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop_tx.send(()).unwrap();
        tx
    };
    let mut fulls = Vec::new();
    let run_loop = run(
        &mut syncer,
        rx,
        periods,
        async { stop_rx.await.unwrap_or(()) },
        |r| fulls.push(r.full),
        |_| {},
    );
    let (_tx, ()) = tokio::join!(driver, run_loop);
    assert_eq!(fulls, [true, false, true]);
    assert_eq!(syncer.dataplane().observed, 2);
}

#[tokio::test(start_paused = true)]
async fn no_kernel_change_before_the_first_snapshot_and_debounced_after() {
    let (tx, rx) = watch::channel(None);
    let mut syncer = Syncer::new(Memory::default(), ProxyConfig::default());
    let periods = Periods {
        sync: Duration::from_secs(30),
        min_sync: Duration::from_secs(1),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let driver = async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        publish(&tx, web(&["10.244.0.2"]));
        // A burst of changes inside one min-sync period...
        for n in 3..8 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let eps: Vec<String> = (2..n).map(|i| format!("10.244.0.{i}")).collect();
            let refs: Vec<&str> = eps.iter().map(String::as_str).collect();
            publish(&tx, web(&refs));
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop_tx.send(()).unwrap();
        tx
    };
    let mut reports = Vec::new();
    let run_loop = run(
        &mut syncer,
        rx,
        periods,
        async { stop_rx.await.unwrap_or(()) },
        |r| reports.push(r.plan.ops.len()),
        |_| {},
    );
    let (_tx, ()) = tokio::join!(driver, run_loop);
    // ...is applied in at most two syncs: the first snapshot, then the rest together.
    assert!(reports.len() <= 2, "{reports:?}");
    assert_eq!(
        syncer
            .dataplane()
            .state
            .services
            .values()
            .next()
            .unwrap()
            .destinations
            .len(),
        5
    );
    // Nothing was applied while the snapshot was None.
    assert!(syncer.dataplane().applied.iter().all(|p| !p.is_empty()));
}

fn conns(active: u32, inactive: u32) -> crate::model::kernel::Connections {
    crate::model::kernel::Connections { active, inactive }
}

#[tokio::test(start_paused = true)]
async fn a_removed_real_server_goes_at_once_when_idle_and_drains_while_busy() {
    let vip = crate::model::kernel::VsKey {
        address: "10.96.0.10".parse().unwrap(),
        protocol: Protocol::Tcp,
        port: 80,
    };
    let gone: crate::model::kernel::RealServer = "10.244.0.3:8080".parse().unwrap();
    let two = || web(&["10.244.0.2", "10.244.0.3"]);
    let one = || web(&["10.244.0.2"]);
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    s.sync(&two(), true).await.unwrap();
    // Idle: deleted by the change's own sync, which read that virtual server alone.
    let r = s.sync(&one(), false).await.unwrap();
    let deleted = Op::DelDestination {
        key: vip,
        destination: gone,
    };
    assert_eq!(r.plan.ops, std::slice::from_ref(&deleted));
    assert_eq!((r.draining, r.recheck_in), (0, None));
    assert_eq!(s.dataplane().observed, 1);
    assert_eq!(s.dataplane().real_server_reads, [vec![vip]]);
    // Busy: weight 0, and it drains until the bound at the latest.
    s.sync(&two(), false).await.unwrap();
    let kernel_vs = s.dataplane().state.services.get_mut(&vip).unwrap();
    kernel_vs.connections.insert(gone, conns(1, 0));
    let r = s.sync(&one(), false).await.unwrap();
    let drained = Op::UpdateDestination {
        key: vip,
        destination: gone,
        weight: 0,
    };
    assert_eq!(r.plan.ops, std::slice::from_ref(&drained));
    assert_eq!(r.draining, 1);
    assert_eq!(r.recheck_in, Some(Duration::from_secs(15 * 60)));
    tokio::time::advance(Duration::from_secs(60)).await;
    let r = s.sync(&one(), true).await.unwrap();
    assert!(r.plan.is_empty(), "{:?}", r.plan.ops);
    assert_eq!(r.recheck_in, Some(Duration::from_secs(14 * 60)));
    // It closes: the next sync that reads it deletes it.
    let kernel_vs = s.dataplane().state.services.get_mut(&vip).unwrap();
    kernel_vs.connections.insert(gone, conns(0, 0));
    let r = s.sync(&one(), false).await.unwrap();
    assert_eq!(r.plan.ops, [deleted]);
    assert_eq!((r.draining, r.recheck_in), (0, None));
    assert_eq!(s.dataplane().observed, 2);
    // The read fails: it drains with unknown counts, and the kernel is read at once.
    s.sync(&two(), false).await.unwrap();
    s.dataplane().unavailable = true;
    let r = s.sync(&one(), false).await.unwrap();
    assert_eq!(r.plan.ops, [drained]);
    assert_eq!((r.draining, r.recheck_in), (1, Some(Duration::ZERO)));
    assert!(
        r.warnings
            .iter()
            .any(|w| matches!(w, Warning::UnreadConnections(_))),
        "{:?}",
        r.warnings
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_ends_at_the_bound_and_a_returning_endpoint_keeps_its_connections() {
    let vip = crate::model::kernel::VsKey {
        address: "10.96.0.10".parse().unwrap(),
        protocol: Protocol::Tcp,
        port: 80,
    };
    let gone: crate::model::kernel::RealServer = "10.244.0.3:8080".parse().unwrap();
    let config = ProxyConfig {
        graceful_termination_timeout: Duration::from_secs(120),
        ..ProxyConfig::default()
    };
    let mut s = Syncer::new(Memory::default(), config);
    s.sync(&web(&["10.244.0.2", "10.244.0.3"]), true)
        .await
        .unwrap();
    s.dataplane()
        .state
        .services
        .get_mut(&vip)
        .unwrap()
        .connections
        .insert(gone, conns(3, 1));
    s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
    // It comes back: weight 1 again, in place.
    let r = s
        .sync(&web(&["10.244.0.2", "10.244.0.3"]), false)
        .await
        .unwrap();
    assert_eq!(
        r.plan.ops,
        [Op::UpdateDestination {
            key: vip,
            destination: gone,
            weight: 1
        }]
    );
    assert_eq!(r.draining, 0);
    // It goes again and its connections never end: deleted at the bound, without a read.
    let r = s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
    assert_eq!(r.recheck_in, Some(Duration::from_secs(120)));
    tokio::time::advance(Duration::from_secs(119)).await;
    assert!(
        s.sync(&web(&["10.244.0.2"]), false)
            .await
            .unwrap()
            .plan
            .is_empty()
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    let r = s.sync(&web(&["10.244.0.2"]), false).await.unwrap();
    assert_eq!(
        r.plan.ops,
        [Op::DelDestination {
            key: vip,
            destination: gone
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn a_restart_keeps_undesired_weight_0_destinations_draining() {
    let vip = crate::model::kernel::VsKey {
        address: "10.96.0.10".parse().unwrap(),
        protocol: Protocol::Tcp,
        port: 80,
    };
    let mut first = Syncer::new(Memory::default(), ProxyConfig::default());
    first
        .sync(&web(&["10.244.0.2", "10.244.0.3"]), true)
        .await
        .unwrap();
    let vs = first.dataplane().state.services.get_mut(&vip).unwrap();
    vs.connections
        .insert("10.244.0.3:8080".parse().unwrap(), conns(2, 0));
    first.sync(&web(&["10.244.0.2"]), false).await.unwrap();
    // A new agent over the same kernel: the draining one has connections, and another
    // wanted one was left at weight 0 by someone.
    let mut kernel = first.dataplane().clone();
    let vs = kernel.state.services.get_mut(&vip).unwrap();
    vs.destinations
        .insert("10.244.0.2:8080".parse().unwrap(), 0);
    let mut s = Syncer::new(kernel, ProxyConfig::default());
    let r = s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
    assert_eq!(
        r.plan.ops,
        [Op::UpdateDestination {
            key: vip,
            destination: "10.244.0.2:8080".parse().unwrap(),
            weight: 1
        }]
    );
    assert_eq!(r.draining, 1);
}

/// `web` with its one port on UDP 53.
fn dns(endpoints: &[&str]) -> Cluster {
    let mut c = web(endpoints);
    c.services = c
        .services
        .iter()
        .map(|(id, s)| {
            let mut s = (**s).clone();
            s.ports[0].protocol = Protocol::Udp;
            s.ports[0].port = 53;
            (id.clone(), Arc::new(s))
        })
        .collect();
    c.slices = c
        .slices
        .iter()
        .map(|(key, s)| {
            let mut s = (**s).clone();
            s.ports[0].protocol = Protocol::Udp;
            (key.clone(), Arc::new(s))
        })
        .collect();
    c
}

/// The key of the first slice of the Service named `name`.
fn slice_key_of(c: &Cluster, name: &str) -> SliceRef {
    c.slices
        .iter()
        .find(|(_, s)| &*s.service.name == name)
        .unwrap()
        .0
        .clone()
}

#[tokio::test]
async fn conntrack_is_cleaned_when_udp_endpoints_change() {
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    // The first sync cleans what an earlier run may have left.
    s.sync(&dns(&["10.244.0.2"]), false).await.unwrap();
    assert_eq!(s.dataplane().conntrack_cleanups.len(), 1);
    // Unchanged, or a TCP change: no pass.
    s.sync(&dns(&["10.244.0.2"]), true).await.unwrap();
    s.sync(&web(&["10.244.0.2"]), false).await.unwrap();
    s.sync(&web(&["10.244.0.3"]), false).await.unwrap();
    assert_eq!(s.dataplane().conntrack_cleanups.len(), 1);
    // The UDP endpoint moves: one pass, after the real servers changed.
    s.sync(&dns(&["10.244.0.2"]), false).await.unwrap();
    let cleanups = s.dataplane().conntrack_cleanups.len();
    let r = s.sync(&dns(&["10.244.0.3"]), false).await.unwrap();
    assert!(!r.plan.is_empty());
    let last = s.dataplane().conntrack_cleanups.last().unwrap().clone();
    assert_eq!(s.dataplane().conntrack_cleanups.len(), cleanups + 1);
    let vip: std::net::SocketAddr = "10.96.0.10:53".parse().unwrap();
    assert!(last.is_stale(Protocol::Udp, vip, "10.244.0.2:8080".parse().unwrap()));
    assert!(!last.is_stale(Protocol::Udp, vip, "10.244.0.3:8080".parse().unwrap()));
    // No endpoint left: one more pass, in which every flow to the VIP is stale (kube-proxy
    // 1.37: a one-way sender would stay sent to the deleted pod).
    s.sync(&dns(&[]), false).await.unwrap();
    assert_eq!(s.dataplane().conntrack_cleanups.len(), cleanups + 2);
    let last = s.dataplane().conntrack_cleanups.last().unwrap().clone();
    assert!(last.is_stale(Protocol::Udp, vip, "10.244.0.3:8080".parse().unwrap()));
    // And no pass again while nothing changes.
    s.sync(&dns(&[]), false).await.unwrap();
    assert_eq!(s.dataplane().conntrack_cleanups.len(), cleanups + 2);
}

#[tokio::test(start_paused = true)]
async fn the_loop_removes_an_idle_real_server_without_reading_the_whole_kernel() {
    let (tx, rx) = watch::channel(first(web(&["10.244.0.2", "10.244.0.3"])));
    let mut syncer = Syncer::new(Memory::default(), ProxyConfig::default());
    let periods = Periods {
        sync: Duration::from_secs(30),
        min_sync: Duration::from_secs(1),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let driver = async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        publish(&tx, web(&["10.244.0.2"]));
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop_tx.send(()).unwrap();
        tx
    };
    let mut reports = Vec::new();
    let run_loop = run(
        &mut syncer,
        rx,
        periods,
        async { stop_rx.await.unwrap_or(()) },
        |r| reports.push((r.full, r.plan.ops.len(), r.draining)),
        |_| {},
    );
    let (_tx, ()) = tokio::join!(driver, run_loop);
    // The first sync, then the removal, which finds it idle and deletes it: no drain, and
    // no full read of the kernel until the sync period.
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert_eq!(reports[1], (false, 1, 0));
    assert_eq!(syncer.dataplane().observed, 1);
}

/// `n` Services `s0..`, each on its own ClusterIP with two ready endpoints.
fn many(n: usize) -> Cluster {
    let (services, slices) = (0..n)
        .map(|i| {
            let name = format!("s{i}");
            let service = svc(&name).cluster_ip(&format!("10.96.1.{i}")).tcp(80);
            let slice = eps(&name, "", Protocol::Tcp, 8080)
                .ready(&format!("10.244.1.{i}"), "other")
                .ready(&format!("10.244.2.{i}"), "other");
            (service, slice)
        })
        .unzip();
    cluster(services, slices)
}

#[tokio::test]
async fn periodic_passes_read_the_real_servers_of_one_share_each_and_repair_them_in_turn() {
    let c = many(10);
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    s.set_read_share(4);
    // The first sync reads everything.
    let r = s.sync(&c, true).await.unwrap();
    assert_eq!(r.unread, 0);
    // Someone deletes one real server of every virtual server behind the agent's back.
    for vs in s.dataplane().state.services.values_mut() {
        let first = *vs.destinations.keys().next().unwrap();
        vs.destinations.remove(&first);
    }
    // Each pass reads one of the three shares and repairs what it read, nothing else.
    let mut repaired = 0;
    for pass in 0..3 {
        let r = s.sync(&c, true).await.unwrap();
        assert_eq!(
            r.unread + r.plan.ops.len(),
            10,
            "pass {pass}: {:?}",
            r.plan.ops
        );
        assert!(
            r.unread > 0 && r.unread < 10,
            "pass {pass} read all or nothing"
        );
        assert!(
            r.plan
                .ops
                .iter()
                .all(|op| matches!(op, Op::AddDestination { .. })),
            "{:?}",
            r.plan.ops
        );
        repaired += r.plan.ops.len();
    }
    // One round repaired every virtual server, each once; the kernel is whole again.
    assert_eq!(repaired, 10);
    let want = desired(&c, &ProxyConfig::default(), &Host::default());
    assert_eq!(s.dataplane().state.services, want.state.services);
    // An endpoint change between passes still goes in at once, against the shadow.
    let r = s.sync(&many(11), false).await.unwrap();
    assert!(!r.plan.is_empty());
}

#[tokio::test]
async fn a_periodic_pass_reads_the_draining_and_the_unknown_virtual_servers_whole() {
    let c = many(10);
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    s.set_read_share(4);
    s.sync(&c, true).await.unwrap();
    // s0 loses a busy endpoint: it drains.
    let mut fewer = c.clone();
    let key = slice_key_of(&fewer, "s0");
    Arc::make_mut(fewer.slices.get_mut(&key).unwrap())
        .endpoints
        .pop();
    let s0 = *s
        .dataplane()
        .state
        .services
        .keys()
        .find(|k| k.address == "10.96.1.0".parse::<std::net::IpAddr>().unwrap())
        .unwrap();
    let busy: crate::model::kernel::RealServer = "10.244.2.0:8080".parse().unwrap();
    let vs = s.dataplane().state.services.get_mut(&s0).unwrap();
    vs.connections.insert(busy, conns(1, 0));
    let r = s.sync(&fewer, false).await.unwrap();
    assert_eq!(r.draining, 1);
    // Someone else makes a virtual server: the pass reads its real servers too.
    let foreign = crate::model::kernel::VsKey {
        address: "192.0.2.1".parse().unwrap(),
        protocol: Protocol::Tcp,
        port: 80,
    };
    let mut theirs = crate::model::kernel::VirtualServer {
        scheduler: "rr".into(),
        ..Default::default()
    };
    theirs
        .destinations
        .insert("192.0.2.2:80".parse().unwrap(), 1);
    s.dataplane().state.services.insert(foreign, theirs);
    // Three passes: in each, the draining one is read (it goes once idle)...
    for pass in 0..3 {
        let r = s.sync(&fewer, true).await.unwrap();
        assert_eq!(r.draining, 1, "pass {pass}");
    }
    let vs = s.dataplane().state.services.get_mut(&s0).unwrap();
    vs.connections.clear();
    let r = s.sync(&fewer, true).await.unwrap();
    assert_eq!(
        r.plan.ops,
        [Op::DelDestination {
            key: s0,
            destination: busy
        }]
    );
    // ...and the foreign one's real servers were read at the first pass that did not
    // select it (the shadow had nothing to keep for it), not taken as none.
    assert!(r.unread > 0);
    let reads = &s.dataplane().real_server_reads;
    assert!(
        reads.iter().any(|keys| keys.contains(&foreign)),
        "{reads:?}"
    );
}

/// Tampers with the in-memory kernel, then runs a full sync of an unchanged cluster.
async fn repair(
    s: &mut Syncer<Memory>,
    c: &Cluster,
    tamper: impl FnOnce(&mut KernelState),
) -> Report {
    tamper(&mut s.dataplane().state);
    s.sync(c, true).await.unwrap()
}

fn counts(d: &Drift) -> Vec<(DriftKind, u64)> {
    d.counts.iter().map(|(k, n)| (*k, *n)).collect()
}

#[tokio::test]
async fn drift_is_counted_by_kind_and_only_once() {
    use crate::model::snapshot::cluster::Family;
    let c = cluster(
        vec![
            svc("web").cluster_ip("10.96.0.10").tcp(80),
            svc("api").cluster_ip("10.96.0.11").tcp(443),
        ],
        vec![
            eps("web", "", Protocol::Tcp, 8080)
                .ready("10.244.0.2", "other")
                .ready("10.244.0.3", "other"),
            eps("api", "", Protocol::Tcp, 8443).ready("10.244.0.4", "other"),
        ],
    );
    let web = crate::model::kernel::VsKey {
        address: "10.96.0.10".parse().unwrap(),
        protocol: Protocol::Tcp,
        port: 80,
    };
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    s.sync(&c, true).await.unwrap();
    let clean = s.dataplane().state.clone();
    /// What is done, the tampering, the drift expected by kind.
    type Case = (
        &'static str,
        Box<dyn FnOnce(&mut KernelState)>,
        Vec<(DriftKind, u64)>,
    );
    let cases: Vec<Case> = vec![
        (
            "ipvsadm -D",
            Box::new(move |k| {
                k.services.remove(&web);
            }),
            vec![(DriftKind::RealServer, 2), (DriftKind::VirtualServer, 1)],
        ),
        (
            "ipvsadm -e -w 5",
            Box::new(move |k| {
                let vs = k.services.get_mut(&web).unwrap();
                vs.destinations
                    .insert("10.244.0.3:8080".parse().unwrap(), 5);
            }),
            vec![(DriftKind::RealServer, 1)],
        ),
        (
            "ipset flush",
            Box::new(|k| {
                k.sets
                    .get_mut(&named("KUBE-CLUSTER-IP"))
                    .unwrap()
                    .entries
                    .clear()
            }),
            vec![(DriftKind::SetEntry, 2)],
        ),
        (
            "ipset destroy",
            Box::new(|k| {
                k.sets.remove(&named("KUBE-IPVS-OWNED"));
            }),
            vec![(DriftKind::Set, 1), (DriftKind::SetEntry, 2)],
        ),
        (
            "ipset add",
            Box::new(|k| {
                let set = k.sets.get_mut(&named("KUBE-CLUSTER-IP")).unwrap();
                set.entries.insert(crate::model::kernel::SetEntry::IpPort(
                    "10.96.9.9".parse().unwrap(),
                    Protocol::Tcp,
                    9,
                ));
            }),
            vec![(DriftKind::SetEntry, 1)],
        ),
        (
            "iptables -X",
            Box::new(|k| {
                let r = k.rules.get_mut(&Family::V4).unwrap();
                let chain = (Table::Nat, "KUBE-POSTROUTING".to_string());
                r.chains.remove(&chain);
                r.rules
                    .retain(|(_, rule)| !rule.starts_with("-A KUBE-POSTROUTING "));
                r.jumps.retain(|j| j.target != "KUBE-POSTROUTING");
            }),
            vec![(DriftKind::Chain, 1), (DriftKind::Jump, 1)],
        ),
        (
            "iptables -F",
            Box::new(|k| {
                let r = k.rules.get_mut(&Family::V4).unwrap();
                r.rules
                    .retain(|(_, rule)| !rule.starts_with("-A KUBE-FORWARD "));
            }),
            vec![(DriftKind::Chain, 1)],
        ),
        (
            "ip addr del",
            Box::new(|k| {
                k.addresses.remove(&"10.96.0.11".parse().unwrap());
            }),
            vec![(DriftKind::Address, 1)],
        ),
        (
            "ip link del",
            Box::new(|k| {
                k.link = false;
                k.addresses.clear();
            }),
            vec![(DriftKind::Address, 2), (DriftKind::Link, 1)],
        ),
        (
            "sysctl -w",
            Box::new(|k| {
                k.sysctls.insert("net/ipv4/vs/conntrack".into(), "0".into());
            }),
            vec![(DriftKind::Sysctl, 1)],
        ),
    ];
    for (what, tamper, want) in cases {
        let r = repair(&mut s, &c, tamper).await;
        assert_eq!(counts(&r.drift), want, "{what}: {}", r.drift);
        assert_eq!(s.dataplane().state, clean, "{what} repaired");
        // Repaired: the next full sync finds nothing, so the drift is reported once.
        let r = s.sync(&c, true).await.unwrap();
        assert!(r.drift.is_empty(), "{what} again: {}", r.drift);
    }
    // The log line names what was repaired.
    let r = repair(&mut s, &c, |k| {
        k.sysctls.insert("net/ipv4/vs/conntrack".into(), "0".into());
        k.addresses.clear();
    })
    .await;
    assert_eq!(
        r.drift.to_string(),
        "2 address (10.96.0.10 missing, 10.96.0.11 missing), \
         1 sysctl (net/ipv4/vs/conntrack 0 -> 1)"
    );
}

#[tokio::test]
async fn retries_and_changes_are_not_drift() {
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    // The first sync of a new agent makes everything: not drift.
    let r = s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
    assert!(!r.plan.is_empty());
    assert!(r.drift.is_empty());
    // The kernel refuses the new real server: the retries are not drift either...
    s.dataplane().refuse = vec!["add 10.244.0.3:8080".into()];
    let two = web(&["10.244.0.2", "10.244.0.3"]);
    let r = s.sync(&two, false).await.unwrap();
    assert_eq!(r.applied.failed.len(), 1);
    let r = s.sync(&two, true).await.unwrap();
    assert_eq!(r.applied.failed.len(), 1);
    assert!(r.drift.is_empty(), "{}", r.drift);
    s.dataplane().refuse.clear();
    let r = s.sync(&two, true).await.unwrap();
    assert!(r.applied.failed.is_empty() && !r.plan.is_empty());
    assert!(r.drift.is_empty(), "{}", r.drift);
    // ...and a drain that starts, or ends, is the agent's own doing.
    let busy: crate::model::kernel::RealServer = "10.244.0.3:8080".parse().unwrap();
    let vs = s.dataplane().state.services.values_mut().next().unwrap();
    vs.connections.insert(busy, conns(1, 0));
    let r = s.sync(&web(&["10.244.0.2"]), false).await.unwrap();
    assert_eq!(r.draining, 1);
    let vs = s.dataplane().state.services.values_mut().next().unwrap();
    vs.connections.clear();
    let r = s.sync(&web(&["10.244.0.2"]), true).await.unwrap();
    assert_eq!(r.draining, 0, "{:?}", r.plan.ops);
    assert!(r.drift.is_empty(), "{}", r.drift);
    // Once settled, someone else's change is.
    let r = repair(&mut s, &web(&["10.244.0.2"]), |k| k.addresses.clear()).await;
    assert_eq!(counts(&r.drift), [(DriftKind::Address, 1)]);
}

/// A sync that fails before it computes (its read of the kernel refused) leaves its changes
/// to the next one: a slice relabelled to another Service in the failed sync's snapshot is
/// served by that Service after the next sync of changes, which names a third Service only.
#[tokio::test]
async fn a_sync_that_fails_before_computing_leaves_its_changes_to_the_next() {
    let c0 = cluster(
        vec![
            svc("a").cluster_ip("10.96.0.10").tcp(80),
            svc("b").cluster_ip("10.96.0.11").tcp(80),
        ],
        vec![eps("a", "", Protocol::Tcp, 8080).ready("10.244.0.2", "other")],
    );
    let mut s = Syncer::new(Memory::default(), ProxyConfig::default());
    s.sync(&c0, true).await.unwrap();
    let mut c1 = c0.clone();
    let key = slice_key_of(&c1, "a");
    Arc::make_mut(c1.slices.get_mut(&key).unwrap()).service = ServiceRef::new("default", "b");
    s.dataplane().unavailable = true;
    assert!(
        s.sync_with(&c1, true, &Changes::between(&c0, &c1))
            .await
            .is_err()
    );
    s.dataplane().unavailable = false;
    let mut c2 = c1.clone();
    let d = svc("d").cluster_ip("10.96.0.12").tcp(80).0;
    c2.services.insert(d.id.clone(), Arc::new(d));
    s.sync_with(&c2, true, &Changes::between(&c1, &c2))
        .await
        .unwrap();
    let changes = Changes::between(&c2, &c2);
    let r = s.sync_changed(&c2, &changes).await.unwrap();
    assert!(r.plan.is_empty(), "{:?}", r.plan.ops);
    assert_eq!(
        s.incremental.desired().unwrap().state,
        desired(&c2, &ProxyConfig::default(), &s.shadow().unwrap().host).state
    );
    let b = s
        .dataplane()
        .state
        .services
        .iter()
        .find(|(k, _)| k.port == 80 && k.address.to_string() == "10.96.0.11");
    assert_eq!(
        b.map(|(_, vs)| vs.destinations.len()),
        Some(1),
        "b serves the slice"
    );
}
