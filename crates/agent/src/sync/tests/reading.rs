//! The read of a periodic pass made apart: changes sync while it runs, and the pass that
//! takes it in ends where a sync from scratch does, whatever the read saw of those changes.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use tokio::sync::watch;

use crate::dataplane::memory::{Memory, ReadGate};
use crate::model::fixtures::{cluster, config, eps, host, svc};
use crate::model::incremental::tests::{Change, apply, change};
use crate::model::kernel::KernelState;
use crate::model::plan::Op;
use crate::model::snapshot::changes::Changes;
use crate::model::snapshot::cluster::{Cluster, Protocol};
use crate::sync::{Periods, Syncer, run};

/// `n` Services `s0..`, each on its own ClusterIP with the ready endpoints `endpoints(i)`.
fn services(n: usize, endpoints: impl Fn(usize) -> Vec<String>) -> Cluster {
    let (services, slices) = (0..n)
        .map(|i| {
            let name = format!("s{i}");
            let service = svc(&name).cluster_ip(&format!("10.96.1.{i}")).tcp(80);
            let slice = endpoints(i)
                .iter()
                .fold(eps(&name, "", Protocol::Tcp, 8080), |s, a| {
                    s.ready(a, "other")
                });
            (service, slice)
        })
        .unzip();
    cluster(services, slices)
}

/// A kernel the agent never touched, whose reads made apart wait for `gate`.
fn gated(gate: &ReadGate) -> Memory {
    Memory {
        host: host(),
        gate: Some(gate.clone()),
        ..Memory::default()
    }
}

/// The kernel a new agent programs for `c` from scratch.
async fn from_scratch(c: &Cluster) -> KernelState {
    let mut fresh = Syncer::new(
        Memory {
            host: host(),
            ..Memory::default()
        },
        config(),
    );
    fresh.sync(c, true).await.unwrap();
    std::mem::take(&mut fresh.dataplane().state)
}

/// What the loop reported of one sync, and whether the periodic read had been let go then.
#[derive(Debug, Clone)]
struct Seen {
    full: bool,
    ops: Vec<String>,
    failed: usize,
    drift: u64,
    released: bool,
}

#[tokio::test(start_paused = true)]
async fn a_change_during_the_read_of_a_periodic_pass_is_programmed_before_the_read_ends() {
    // Ten Services, their real servers read in shares of four: a rolling pass.
    let before = services(10, |i| {
        vec![format!("10.244.1.{i}"), format!("10.244.2.{i}")]
    });
    // s0 gains a real server, s1 loses one, s3 is gone and s10 is new.
    let mut after = services(11, |i| match i {
        0 => vec![
            "10.244.1.0".into(),
            "10.244.2.0".into(),
            "10.244.3.0".into(),
        ],
        1 => vec!["10.244.1.1".into()],
        _ => vec![format!("10.244.1.{i}"), format!("10.244.2.{i}")],
    });
    after.services = after
        .services
        .iter()
        .filter(|(id, _)| &*id.name != "s3")
        .map(|(id, s)| (id.clone(), s.clone()))
        .collect();
    let gate = ReadGate::closed();
    let mut syncer = Syncer::new(gated(&gate), config());
    syncer.set_read_share(4);
    let periods = Periods {
        sync: Duration::from_secs(30),
        min_sync: Duration::from_secs(1),
    };
    let (tx, rx) = watch::channel(super::first(before));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let released = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let driver = {
        let (gate, released, seen, after) =
            (gate.clone(), released.clone(), seen.clone(), after.clone());
        async move {
            // The timer starts the periodic pass's read at 30 s; it waits at the gate.
            gate.wait_started(1).await;
            super::publish(&tx, after);
            tokio::time::sleep(Duration::from_secs(5)).await;
            {
                let seen = seen.lock().unwrap();
                assert_eq!(seen.len(), 2, "the first sync and the change: {seen:?}");
                assert!(!seen[1].full && seen[1].failed == 0, "{seen:?}");
                assert!(!seen[1].ops.is_empty());
            }
            released.store(true, Ordering::SeqCst);
            gate.open();
            tokio::time::sleep(Duration::from_secs(5)).await;
            stop_tx.send(()).unwrap();
            tx
        }
    };
    let run_loop = run(
        &mut syncer,
        rx,
        periods,
        async { stop_rx.await.unwrap_or(()) },
        |r| {
            seen.lock().unwrap().push(Seen {
                full: r.full,
                ops: r.plan.ops.iter().map(Op::to_string).collect(),
                failed: r.applied.failed.len(),
                drift: r.drift.total(),
                released: released.load(Ordering::SeqCst),
            })
        },
        |_| {},
    );
    let (_tx, ()) = tokio::join!(driver, run_loop);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:#?}");
    assert!(seen[0].full);
    // The change went in while the read was held, on its own...
    assert!(!seen[1].full && !seen[1].released, "{seen:#?}");
    assert!(
        seen[1]
            .ops
            .contains(&"add 10.244.3.0:8080 to 10.96.1.0:80/tcp weight 1".to_string()),
        "{seen:#?}"
    );
    // ...and the pass, though its read saw none of it, found nothing to do and no drift.
    assert!(seen[2].full && seen[2].released, "{seen:#?}");
    assert_eq!(
        (seen[2].ops.len(), seen[2].failed, seen[2].drift),
        (0, 0, 0),
        "{seen:#?}"
    );
    assert_eq!(gate.started(), 1);
    assert_eq!(syncer.dataplane().state, from_scratch(&after).await);
    let kernel = syncer.dataplane().state.clone();
    assert_eq!(syncer.shadow().unwrap().state, kernel);
}

#[tokio::test]
async fn a_failed_change_gives_the_read_up_and_the_pass_reads_the_kernel_whole() {
    let c = services(6, |i| vec![format!("10.244.1.{i}")]);
    let gate = ReadGate::closed();
    let mut s = Syncer::new(gated(&gate), config());
    s.set_read_share(2);
    s.sync(&c, true).await.unwrap();
    assert!(s.start_read());
    let more = services(6, |i| {
        vec![format!("10.244.1.{i}"), format!("10.244.2.{i}")]
    });
    s.dataplane().refuse = vec!["add 10.244.2.0:8080".into()];
    let changed = Changes::between(&c, &more);
    let r = s.sync_changed(&more, &changed).await.unwrap();
    assert_eq!(r.applied.failed.len(), 1);
    assert!(!s.reading(), "given up with the shadow");
    assert!(!s.start_read(), "no shadow to sync changes against");
    s.dataplane().refuse.clear();
    let observed = s.dataplane().observed;
    let r = s.sync(&more, true).await.unwrap();
    assert!(r.applied.failed.is_empty() && r.unread == 0);
    assert_eq!(s.dataplane().observed, observed + 1);
    assert_eq!(s.dataplane().state, from_scratch(&more).await);
}

#[tokio::test]
async fn a_drain_that_starts_during_the_read_does_not_end_on_counts_read_before_it() {
    let two = services(1, |_| vec!["10.244.1.0".into(), "10.244.2.0".into()]);
    let gate = ReadGate::closed();
    let mut s = Syncer::new(gated(&gate), config());
    s.sync(&two, true).await.unwrap();
    // The read finds 10.244.2.0 idle; then a connection opens, and its endpoint goes.
    assert!(s.start_read());
    let busy: crate::model::kernel::RealServer = "10.244.2.0:8080".parse().unwrap();
    let vs = s.dataplane().state.services.values_mut().next().unwrap();
    vs.connections.insert(
        busy,
        crate::model::kernel::Connections {
            active: 1,
            inactive: 0,
        },
    );
    let one = services(1, |_| vec!["10.244.1.0".into()]);
    let changed = Changes::between(&two, &one);
    let r = s.sync_changed(&one, &changed).await.unwrap();
    assert_eq!(r.draining, 1, "{:?}", r.plan.ops);
    gate.open();
    // The pass does not take the count read before the drain for the last word.
    let r = s.sync(&one, true).await.unwrap();
    assert!(r.plan.is_empty(), "{:?}", r.plan.ops);
    assert_eq!(r.draining, 1);
    let vs = s.dataplane().state.services.values().next().unwrap();
    assert_eq!(vs.destinations.get(&busy), Some(&0));
    // Once a read finds it idle, it goes.
    s.dataplane()
        .state
        .services
        .values_mut()
        .next()
        .unwrap()
        .connections
        .clear();
    assert!(s.start_read());
    let r = s.sync(&one, true).await.unwrap();
    assert_eq!(r.draining, 0, "{:?}", r.plan.ops);
    assert_eq!(s.dataplane().state, from_scratch(&one).await);
}

/// The kernel as a read running beside `ops` may find it: each virtual server, set, rule
/// family, sysctl and address as it was after some number of them (`picks`, cycled).
fn seen_by_a_read(pre: &KernelState, ops: &[Op], picks: &[u16]) -> KernelState {
    let mut states = vec![pre.clone()];
    for op in ops {
        let mut next = states.last().unwrap().clone();
        next.apply(op).unwrap_or_else(|e| panic!("{op}: {e}"));
        states.push(next);
    }
    let mut pick = picks
        .iter()
        .cycle()
        .map(|p| &states[usize::from(*p) % states.len()]);
    let mut pick = move || pick.next().unwrap();
    let mut seen = KernelState {
        link: pick().link,
        ..KernelState::default()
    };
    let keys: BTreeSet<_> = states
        .iter()
        .flat_map(|s| s.services.keys().copied())
        .collect();
    for key in keys {
        if let Some(vs) = pick().services.get(&key) {
            seen.services.insert(key, vs.clone());
        }
    }
    let names: BTreeSet<_> = states.iter().flat_map(|s| s.sets.keys().cloned()).collect();
    for name in names {
        if let Some(set) = pick().sets.get(&name) {
            seen.sets.insert(name, set.clone());
        }
    }
    let addresses: BTreeSet<_> = states
        .iter()
        .flat_map(|s| s.addresses.iter().copied())
        .collect();
    for ip in addresses {
        if pick().addresses.contains(&ip) {
            seen.addresses.insert(ip);
        }
    }
    let families: BTreeSet<_> = states
        .iter()
        .flat_map(|s| s.rules.keys().copied())
        .collect();
    for family in families {
        if let Some(rules) = pick().rules.get(&family) {
            seen.rules.insert(family, rules.clone());
        }
    }
    let keys: BTreeSet<_> = states
        .iter()
        .flat_map(|s| s.sysctls.keys().cloned())
        .collect();
    for key in keys {
        if let Some(value) = pick().sysctls.get(&key) {
            seen.sysctls.insert(key, value.clone());
        }
    }
    seen
}

/// Syncs each batch of `changes` alone, as the loop does between full passes.
async fn sync_changes(s: &mut Syncer<Memory>, cl: &mut Cluster, changes: &[Vec<Change>]) {
    for batch in changes {
        let mut events = Changes::default();
        for c in batch {
            apply(cl, c, &mut events);
        }
        let r = s.sync_changed(cl, &events).await.unwrap();
        assert!(r.applied.failed.is_empty(), "{:?}", r.plan.ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn a_pass_whose_read_runs_beside_changes_ends_where_a_sync_from_scratch_does(
        start in proptest::collection::vec(change(), 0..10),
        during in proptest::collection::vec(proptest::collection::vec(change(), 1..3), 0..6),
        later in proptest::collection::vec(proptest::collection::vec(change(), 1..3), 0..3),
        share in 1..6usize,
        picks in proptest::collection::vec(any::<u16>(), 1..64),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let mut cl = cluster(vec![], vec![]);
            for c in &start {
                apply(&mut cl, c, &mut Changes::default());
            }
            let gate = ReadGate::closed();
            let mut s = Syncer::new(gated(&gate), config());
            s.set_read_share(share);
            s.sync(&cl, true).await.unwrap();
            // The periodic pass starts its read; changes sync while it is held.
            let pre = s.dataplane().state.clone();
            let plans = s.dataplane().applied.len();
            assert!(s.start_read());
            sync_changes(&mut s, &mut cl, &during).await;
            assert!(s.reading());
            let ops: Vec<Op> = s.dataplane().applied[plans..]
                .iter()
                .flat_map(|p| p.ops.iter().cloned())
                .collect();
            gate.show(seen_by_a_read(&pre, &ops, &picks));
            gate.open();
            let r = s.sync(&cl, true).await.unwrap();
            // Whatever the read saw of them, the changes are known: nothing to redo, no drift.
            assert!(r.full && r.applied.failed.is_empty(), "{:?}", r.applied.failed);
            assert!(r.drift.is_empty(), "{} after {:?}", r.drift, r.plan.ops);
            assert!(r.plan.is_empty(), "{:?}", r.plan.ops);
            sync_changes(&mut s, &mut cl, &later).await;
            assert_eq!(&s.dataplane().state, &from_scratch(&cl).await);
            let kernel = s.dataplane().state.clone();
            assert_eq!(&s.shadow().unwrap().state, &kernel);
        });
    }
}
