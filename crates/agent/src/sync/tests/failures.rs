//! The loop over a kernel that refuses: a refused Service retried with backoff while the agent
//! stays unblocked, one failure explained, and the verdicts that block the agent.

use std::time::Duration;

use tokio::sync::watch;

use super::super::{Blocked, Explained};
use super::super::{Periods, Syncer, run};
use crate::dataplane::Error;
use crate::dataplane::memory::Memory;
use crate::model::fixtures::{cluster, config, eps, svc};
use crate::model::snapshot::cluster::Protocol;

/// Runs the loop on two Services (10.96.0.10 and .11) for `secs` of paused time over a
/// kernel that refuses the operations containing one of `refuse`; returns the number of
/// syncs, the last `on_blocked` verdict and the kernel.
async fn run_for(
    secs: u64,
    refuse: &[&str],
    unavailable: bool,
) -> (usize, Vec<Option<Blocked>>, Memory) {
    let c = cluster(
        vec![
            svc("web").cluster_ip("10.96.0.10").tcp(80),
            svc("api").cluster_ip("10.96.0.11").tcp(80),
        ],
        vec![
            eps("web", "", Protocol::Tcp, 8080).ready("10.244.0.2", "node-a"),
            eps("api", "", Protocol::Tcp, 8080).ready("10.244.0.3", "node-a"),
        ],
    );
    let (_tx, rx) = watch::channel(super::first(c));
    let memory = Memory {
        refuse: refuse.iter().map(|s| s.to_string()).collect(),
        unavailable,
        ..Memory::default()
    };
    let mut syncer = Syncer::new(memory, config());
    let periods = Periods {
        sync: Duration::from_secs(30),
        min_sync: Duration::from_secs(1),
    };
    let mut syncs = 0;
    let mut blocked = Vec::new();
    run(
        &mut syncer,
        rx,
        periods,
        tokio::time::sleep(Duration::from_secs(secs)),
        |_| syncs += 1,
        |b| blocked.push(b.cloned()),
    )
    .await;
    (blocked.len(), blocked, syncer.dataplane().clone())
}

#[tokio::test(start_paused = true)]
async fn one_refused_service_is_retried_with_backoff_and_the_agent_stays_unblocked() {
    let (passes, blocked, kernel) = run_for(62, &["10.96.0.11"], false).await;
    // Retries at 1, 2, 4, 8, 16 and 30 s after each failing pass: t = 0, 1, 3, 7, 15, 31, 61.
    assert_eq!(passes, 7, "{blocked:?}");
    assert!(blocked.iter().all(Option::is_none), "{blocked:?}");
    assert_eq!(
        kernel.state.services.len(),
        1,
        "the good Service is programmed"
    );
    assert_eq!(kernel.observed, 7, "every retry reads the kernel again");
}

#[tokio::test]
async fn a_refused_virtual_server_is_one_failure_explained() {
    let c = cluster(
        vec![svc("web").cluster_ip("10.96.0.10").tcp(80)],
        vec![eps("web", "", Protocol::Tcp, 8080).ready("10.244.0.2", "node-a")],
    );
    let memory = Memory {
        refuse: vec!["10.96.0.10:80".into()],
        ..Memory::default()
    };
    let mut syncer = Syncer::new(memory, config());
    // The in-memory kernel refuses IPVS operations with ENOENT, as IPVS does without the
    // scheduler's module.
    let report = syncer.sync(&c, true).await.unwrap();
    let f = super::super::failures::failures(&report);
    assert_eq!(f.len(), 1, "the real server's failure is folded: {f:?}");
    assert!(f[0].0.starts_with("add service 10.96.0.10:80"), "{f:?}");
    assert!(
        matches!(&f[0].1, Explained::NoScheduler { scheduler, .. } if scheduler == "rr"),
        "{f:?}"
    );
    assert!(
        report.applied.failed.len() >= 2,
        "{:?}",
        report.applied.failed
    );
}

#[tokio::test(start_paused = true)]
async fn a_kernel_that_refuses_every_service_blocks_the_agent() {
    let (_, blocked, kernel) = run_for(10, &["add service"], false).await;
    let last = blocked.last().cloned().flatten().expect("blocked");
    assert!(
        matches!(
            last,
            Blocked::NoVirtualServer {
                failed: 2,
                desired: 2,
                ..
            }
        ),
        "{last:?}"
    );
    assert!(kernel.state.services.is_empty());
    assert!(kernel.state.link, "what can be made is made");
}

#[tokio::test(start_paused = true)]
async fn an_unreadable_kernel_blocks_the_agent_and_is_retried_with_backoff() {
    let (passes, blocked, kernel) = run_for(20, &[], true).await;
    assert_eq!(passes, 5, "t = 0, 1, 3, 7, 15");
    assert_eq!(kernel.observed, 5);
    assert!(
        blocked.iter().all(|b| matches!(
            b,
            Some(Blocked::Sync(e)) if matches!(
                &*e.0,
                Error::Request { what, source } if what == "list IPVS services"
                    && matches!(source.ipvs(), Some(ipvs_netlink::Error::FamilyMissing(_)))
            )
        )),
        "{blocked:?}"
    );
}
