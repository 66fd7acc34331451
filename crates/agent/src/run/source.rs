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
    pub events: Option<kube::Client>,
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
        let client = api::client(&options)
            .await
            .context("cannot build the API client")?;
        let events = daemon.then(|| {
            let event = crate::k8s::events::node_starting(&settings.node_name);
            tasks.spawn(crate::k8s::events::record(client.clone(), event));
            client.clone()
        });
        let (tx, snapshots) = watch::channel(None);
        let (life_tx, lifecycle) = watch::channel(api::NodeLifecycle::default());
        let watches = api::Watches::new(client, settings.node_name.clone())
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
