//! The health-check node ports of `externalTrafficPolicy: Local` load balancers, following
//! the snapshots on the addresses each sync finds for them.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::watch;
use tracing::warn;

use super::source::Snapshots;
use super::tasks::Tasks;
use crate::health::{Health, ServiceHealthServers};
use crate::k8s::event_lane::EventLane;
use crate::model::desired::HealthCheckAddresses;
use crate::model::snapshot::cluster::{Cluster, Family, ServiceRef};

/// What the health-check node ports follow.
pub struct HealthCheckPorts {
    /// The cluster, whose load balancers name the ports.
    pub snapshots: Snapshots,
    /// Whether the proxy is healthy, which every port tells.
    pub health: Health,
    /// The node, whose endpoints are the local ones.
    pub node: String,
    /// The families served.
    pub families: Vec<Family>,
    /// Where a port that cannot be bound is reported (API server only).
    pub events: Option<EventLane>,
    /// How often a port that could not be bound is tried again.
    pub retry_period: Duration,
}

/// Starts the ports' follower on `tasks`. It opens nothing before the first sync has sent
/// the addresses to listen on through the returned sender.
pub fn start(
    ports: HealthCheckPorts,
    tasks: &Tasks,
) -> watch::Sender<Option<HealthCheckAddresses>> {
    let (addresses_tx, addresses) = watch::channel(None);
    let follower = Follower {
        servers: ServiceHealthServers::new(Default::default(), ports.health),
        node: ports.node,
        families: ports.families,
        events: ports.events,
        reported: BTreeSet::new(),
    };
    tasks.spawn(follower.run(ports.snapshots, addresses, ports.retry_period));
    addresses_tx
}

/// A port that failed, by family, port and Service.
type Failing = (Family, u16, ServiceRef);

/// The ports' servers and what has been said of those that could not be bound.
struct Follower {
    servers: ServiceHealthServers,
    node: String,
    families: Vec<Family>,
    events: Option<EventLane>,
    /// Ports already reported, so a port that stays unbindable is one event, not one per
    /// change.
    reported: BTreeSet<Failing>,
}

impl Follower {
    /// Follows `changes` and `addresses` until either is gone.
    async fn run(
        mut self,
        mut changes: Snapshots,
        mut addresses: watch::Receiver<Option<HealthCheckAddresses>>,
        retry_period: Duration,
    ) {
        loop {
            let current = addresses.borrow_and_update().clone();
            if let Some(current) = current {
                self.servers.set_addresses(current);
                let cluster = changes
                    .borrow_and_update()
                    .as_ref()
                    .map(|p| p.cluster.clone());
                self.sync(cluster.as_deref());
            }
            // A port that failed is tried again at the sync period, as kube-proxy's syncs
            // retry it, even when nothing changes.
            let retry = async {
                if self.reported.is_empty() {
                    std::future::pending().await
                } else {
                    tokio::time::sleep(retry_period).await
                }
            };
            tokio::select! {
                r = changes.changed() => if r.is_err() { break },
                r = addresses.changed() => if r.is_err() { break },
                () = retry => {}
            }
        }
    }

    /// Makes the ports those of `cluster`'s load balancers, and reports each port that cannot
    /// be bound once per failing spell.
    fn sync(&mut self, cluster: Option<&Cluster>) {
        let wanted = cluster
            .map(|c| {
                crate::model::snapshot::endpoints::health_checks(c, &self.node, &self.families)
            })
            .unwrap_or_default();
        let mut failing = BTreeSet::new();
        for (check, e) in self.servers.sync(&wanted) {
            let key = (check.family, check.port, check.service.clone());
            failing.insert(key.clone());
            if self.reported.contains(&key) {
                continue;
            }
            warn!(port = check.port, family = ?check.family, service = %check.service, error = %e, "FailedToStartServiceHealthcheck");
            if let Some(events) = &self.events {
                events.record(crate::k8s::events::health_check_failed(
                    &self.node,
                    &check.service,
                    check.port,
                    &e.to_string(),
                ));
            }
        }
        self.reported = failing;
    }
}
