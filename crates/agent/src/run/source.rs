//! Where the cluster comes from: manifest files, reloaded when they change, or the API
//! server's watches.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::watch;
use tracing::{info, warn};

use super::tasks::Tasks;
use crate::cli::Settings;
use crate::k8s::event_lane::EventLane;
use crate::metrics::ApiMetrics;
use crate::model::snapshot::changes::{Changes, Published};
use crate::model::snapshot::cluster::Cluster;
use crate::source::{api, manifests};

/// Snapshots of the cluster, each with what changed into it: `None` until the source has
/// listed everything once.
pub type Snapshots = watch::Receiver<Option<Published>>;

/// Where the cluster comes from: manifests, or the API server (which also tells the Node's
/// lifecycle and takes the agent's events).
pub struct Source {
    /// The cluster as the source last listed it.
    pub snapshots: Snapshots,
    /// The Node being deleted or drained (API server only).
    pub lifecycle: Option<watch::Receiver<api::NodeLifecycle>>,
    /// Where events go (API server, long-running proxy only).
    pub events: Option<EventLane>,
    /// The API client's requests and the watches' health (API server only).
    pub api_metrics: Option<ApiMetrics>,
}

impl Source {
    /// Starts reading the manifests or watching the API server, on `tasks`. A `daemon` (the
    /// long-running proxy) records its start as an event on its Node and keeps a client for
    /// later events.
    pub async fn start(settings: &Settings, daemon: bool, tasks: &Tasks) -> anyhow::Result<Source> {
        if let Some(path) = &settings.args.manifests {
            return Ok(Source {
                snapshots: manifest_source(path.clone(), settings.node_name.clone(), tasks)?,
                lifecycle: None,
                events: None,
                api_metrics: None,
            });
        }
        if !daemon {
            info!("waiting for the API server's first complete list");
        }
        let kp = &settings.kube_proxy;
        let options = api::ClientOptions {
            kubeconfig: Some(kp.client_connection.kubeconfig.clone())
                .filter(|k| !k.is_empty())
                .map(Into::into),
            master: settings.args.master.clone(),
            qps: kp.client_connection.qps,
            burst: u32::try_from(kp.client_connection.burst).unwrap_or(0),
        };
        let api_metrics = ApiMetrics::default();
        let observer: Arc<dyn api::ApiObserver> = Arc::new(api_metrics.clone());
        let client = api::client_observed(&options, Some(observer.clone()))
            .await
            .context("cannot build the API client")?;
        let events = if daemon {
            // A client of their own: events never spend the watches' request budget.
            let client = api::client_observed(&options, Some(observer.clone()))
                .await
                .context("cannot build the events' API client")?;
            let (lane, post) = EventLane::new(client, settings.node_name.clone());
            tasks.spawn(post);
            lane.record(crate::k8s::events::node_starting(&settings.node_name));
            Some(lane)
        } else {
            None
        };
        let (tx, snapshots) = watch::channel(None);
        let (life_tx, lifecycle) = watch::channel(api::NodeLifecycle::default());
        let watches = api::Watches::new(client, settings.node_name.clone())
            .observer(observer)
            .node_lifecycle(life_tx)
            .page_size(Some(settings.args.api_list_page_size).filter(|n| *n > 0));
        tasks.spawn(async move {
            if let Err(e) = watches.run(tx).await {
                warn!(error = %e, "the API source stopped");
            }
        });
        Ok(Source {
            snapshots,
            lifecycle: Some(lifecycle),
            events,
            api_metrics: Some(api_metrics),
        })
    }
}

/// Waits for the source's first complete snapshot.
pub async fn first_snapshot(snapshots: &mut Snapshots) -> anyhow::Result<Arc<Cluster>> {
    let first = snapshots
        .wait_for(Option::is_some)
        .await
        .map_err(|_| anyhow::anyhow!("the source stopped before its first list"))?;
    match first.clone() {
        Some(p) => Ok(p.cluster),
        None => bail!("the source gave no snapshot"),
    }
}

/// Loads the manifests once and, on `tasks`, reloads them whenever the path changes; what
/// changed is one diff of the two loads.
fn manifest_source(path: PathBuf, node: String, tasks: &Tasks) -> anyhow::Result<Snapshots> {
    let first = Published::first(Arc::new(load(&path, &node)?));
    let (tx, rx) = watch::channel(Some(first.clone()));
    let (changed_tx, mut changes) = tokio::sync::mpsc::channel(1);
    tasks.spawn(manifests::watch(
        path.clone(),
        Duration::from_millis(500),
        changed_tx,
    ));
    tasks.spawn(async move {
        let mut last = first;
        while changes.recv().await.is_some() {
            match load(&path, &node) {
                Ok(c) => {
                    let changed = Changes::between(&last.cluster, &c);
                    if changed.is_empty() {
                        continue;
                    }
                    last = last.next(Arc::new(c), changed);
                    let _ = tx.send(Some(last.clone()));
                }
                Err(e) => warn!(error = %e, "manifests not reloaded"),
            }
        }
    });
    Ok(rx)
}

/// Loads the manifests (rejected objects are logged by the loader).
fn load(path: &Path, node: &str) -> anyhow::Result<Cluster> {
    let loaded =
        manifests::load(path, node).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(loaded.cluster)
}
