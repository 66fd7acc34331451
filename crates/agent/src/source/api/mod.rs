//! The API-server source: list/watch of Services, EndpointSlices and the agent's own Node,
//! turned into [`Cluster`](crate::model::snapshot::cluster::Cluster) snapshots.
//!
//! Each kind has a kube-runtime [`watcher()`], selected on the server the way kube-proxy's
//! informers are: Services with [`SERVICE_SELECTOR`] and EndpointSlices with [`SLICE_SELECTOR`]
//! (`!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless`), the Node
//! with the field selector `metadata.name=<node>`. Every object is converted once per
//! `resourceVersion` by [`crate::k8s::convert`] when it arrives; a rejected one is logged
//! once, with the reason, and left out of the snapshots, and nothing here panics on what the
//! server sends.
//!
//! Level-triggered: an event only updates its store and marks the snapshot dirty; a fresh
//! [`Cluster`](crate::model::snapshot::cluster::Cluster) is built from the stores and
//! published on the `watch` channel at most once per [`Watches::coalesce`] period (a lone
//! event after a quiet period is published at once).
//! Nothing is published before every watcher has listed once, so the channel holds `None`
//! until the cache is complete; an empty cache never means "delete everything".
//!
//! The initial state (at start and at each relist) is streamed by the API server as watch
//! events (WatchList, [`initial`]), or listed when the server cannot stream or pages were
//! asked for. A relist (after a `410 Gone`, or when a page's continue token expired) fills a
//! separate buffer while the snapshots keep the previous, complete store; the buffer
//! replaces the store only when the state is whole (kube-runtime's
//! `Init`/`InitApply`/`InitDone`).
//!
//! # Client
//! [`client()`] builds a [`kube::Client`] the way kube-proxy's `--kubeconfig` and `--master`
//! do. kube (5.x) has no request rate limiter, so `--kube-api-qps` and `--kube-api-burst`
//! are a token bucket of our own on the client's tower stack (client-go's semantics: one
//! token per request, watches included). Little goes through it: after the three initial
//! lists, the agent makes one watch per kind every few minutes (and a relist after a
//! `410`), each behind kube-runtime's exponential backoff (0.8 s to 30 s, as client-go's
//! reflector; a `410 Gone` is a request to relist, not a failure, and is retried after the
//! first step whatever the backoff had reached). kube speaks JSON only: there is no protobuf
//! content type.
//!
//! # Layout
//! - `mod.rs`: [`Watches`], the loop that merges the three watches and publishes snapshots,
//!   and [`NodeLifecycle`].
//! - `client`: the client kube-proxy would build ([`ClientOptions`], [`config`], [`client()`]).
//! - `error`: what the source cannot do at all ([`Error`]).
//! - [`initial`]: how a watch gets its initial state, streamed (WatchList) or listed.
//! - `rate`: the client-side request rate limit (`--kube-api-qps`, `--kube-api-burst`).
//! - `stream`: the watch stream of one kind and its backoff (`410 Gone` relists at once).
//! - `watched`: the kinds watched and what each object becomes in the model.
//! - `store`: the converted objects of each kind and the snapshot's maps kept with them.
//! - `tests`: the stores without a server: relists, conversion once per version, change
//!   detection.

mod client;
mod error;
pub mod initial;
mod observe;
mod rate;
mod store;
mod stream;
#[cfg(test)]
mod tests;
mod watched;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;

pub use self::client::{ClientOptions, client, client_observed, config};
pub use self::error::{Error, Result};
pub use self::observe::ApiObserver;
use self::store::{Stores, Update};
use self::stream::{WatchResult, watch_kind};
use crate::model::snapshot::changes::Published;

/// The label selector of the Service watch, as kube-proxy's informer: Services of another
/// proxy stay on the server. (kube-proxy selects Services by this label alone; the
/// differential corpus showed it serving a Service labelled `service.kubernetes.io/headless`.)
pub const SERVICE_SELECTOR: &str = "!service.kubernetes.io/service-proxy-name";

/// The label selector of the EndpointSlice watch, as kube-proxy's informer: the slices of
/// headless Services stay on the server.
pub const SLICE_SELECTOR: &str = "!service.kubernetes.io/headless";

/// The taint the cluster autoscaler puts on a Node it is about to delete.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// The default [`Watches::coalesce`] period.
pub const DEFAULT_COALESCE: Duration = Duration::from_millis(100);

/// What the agent's Node says about its own end, read from the same watch as the snapshots.
/// kube-proxy's `/healthz` fails on a node in either state so that load balancers drain it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeLifecycle {
    /// The Node has a `deletionTimestamp`.
    pub deleting: bool,
    /// The Node carries the cluster autoscaler's [`TO_BE_DELETED_TAINT`].
    pub to_be_deleted: bool,
}

impl NodeLifecycle {
    fn of(node: &core::Node) -> Self {
        Self {
            deleting: node.metadata.deletion_timestamp.is_some(),
            to_be_deleted: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == TO_BE_DELETED_TAINT),
        }
    }
}

/// The API-server source: configure, then [`Watches::run`].
#[derive(Clone)]
pub struct Watches {
    client: Client,
    node_name: String,
    coalesce: Duration,
    page_size: Option<u32>,
    streaming: bool,
    silence: Duration,
    lifecycle: Option<Arc<watch::Sender<NodeLifecycle>>>,
    observer: Option<Arc<dyn ApiObserver>>,
}

impl Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watches")
            .field("node_name", &self.node_name)
            .field("coalesce", &self.coalesce)
            .field("page_size", &self.page_size)
            .field("streaming", &self.streaming)
            .finish_non_exhaustive()
    }
}

impl Watches {
    /// Watches for the node `node_name` through `client`.
    pub fn new(client: Client, node_name: impl Into<String>) -> Self {
        Self {
            client,
            node_name: node_name.into(),
            coalesce: DEFAULT_COALESCE,
            page_size: None,
            streaming: true,
            silence: initial::SILENCE,
            lifecycle: None,
            observer: None,
        }
    }

    /// Tells `observer` of each watch's events and errors, by kind.
    #[must_use]
    pub fn observer(mut self, observer: Arc<dyn ApiObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The least time between two published snapshots (default [`DEFAULT_COALESCE`]): a
    /// burst of events within it makes one snapshot.
    #[must_use]
    pub fn coalesce(mut self, period: Duration) -> Self {
        self.coalesce = period;
        self
    }

    /// Lists in pages of `limit` objects, each a consistent read from etcd. By default
    /// (`None`) a list is one `resourceVersion=0` request served from the API server's watch
    /// cache, as client-go's informers do: the cheap choice for a DaemonSet on thousands of
    /// nodes.
    #[must_use]
    pub fn page_size(mut self, limit: Option<u32>) -> Self {
        self.page_size = limit;
        self
    }

    /// Whether the initial state (at start and at each relist) comes as a watch that streams
    /// every object (`sendInitialEvents`, the API server's WatchList; the default) instead of
    /// a list: one object decoded at a time, never the whole list body and its decoded copy
    /// at once (10,000 Services and their slices: a peak of 31 MiB instead of 152 MiB, see
    /// `examples/source_rss.rs`). A server that cannot stream is listed instead (see
    /// [`initial`]). Pages ([`Watches::page_size`]) always list.
    #[must_use]
    pub fn streaming_lists(mut self, on: bool) -> Self {
        self.streaming = on;
        self
    }

    /// How long a streamed initial state may go silent before the server is taken for one
    /// that ignores `sendInitialEvents` and the kind is listed instead (default
    /// [`initial::SILENCE`]).
    #[must_use]
    pub fn stream_silence(mut self, silence: Duration) -> Self {
        self.silence = silence;
        self
    }

    /// Publishes the Node's [`NodeLifecycle`] on `sender` along with each snapshot.
    #[must_use]
    pub fn node_lifecycle(mut self, sender: watch::Sender<NodeLifecycle>) -> Self {
        self.lifecycle = Some(Arc::new(sender));
        self
    }

    /// The watchers' configuration when they list; streamed initial states are
    /// [`Watches::streams`].
    fn watcher_config(&self) -> watcher::Config {
        let config = watcher::Config {
            page_size: self.page_size,
            ..watcher::Config::default()
        };
        if self.page_size.is_none() {
            config.any_semantic()
        } else {
            config
        }
    }

    /// Whether the initial state is streamed: by default, unless pages were asked for (a
    /// streamed state has no pages).
    fn streams(&self) -> bool {
        self.streaming && self.page_size.is_none()
    }

    /// The watch of one kind: streamed initial states falling back to lists when the
    /// server cannot stream ([`initial::streamed_or_listed`]), or lists.
    fn watch<K>(&self, config: watcher::Config) -> BoxStream<'static, WatchResult<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let api = Api::all(self.client.clone());
        let stream = if self.streams() {
            initial::streamed_or_listed(api, config, self.silence)
        } else {
            watch_kind(api, config)
        };
        match self.observer.clone() {
            None => stream,
            Some(observer) => {
                let kind = observe::kind_of(&format!("/{}", K::plural(&()))).unwrap_or("other");
                stream
                    .inspect(move |r| match r {
                        Ok(_) => observer.watch_event(kind),
                        Err(e) => observer.watch_error(kind, observe::error_reason(e)),
                    })
                    .boxed()
            }
        }
    }

    /// Watches until every receiver of `snapshots` is gone, publishing `Some(snapshot)` once
    /// every watch has listed and after each change. Watch errors are logged and retried with
    /// backoff (kube-runtime recovers a dropped watch from its last `resourceVersion` and
    /// relists after a `410 Gone`); they never end the loop.
    pub async fn run(self, snapshots: watch::Sender<Option<Published>>) -> Result<()> {
        if self.node_name.is_empty() {
            return Err(Error::NoNodeName);
        }
        let config = self.watcher_config();
        let services = self
            .watch::<core::Service>(config.clone().labels(SERVICE_SELECTOR))
            .map(|e| Update::Service(Box::new(e)));
        let slices = self
            .watch::<discovery::EndpointSlice>(config.clone().labels(SLICE_SELECTOR))
            .map(|e| Update::Slice(Box::new(e)));
        let nodes = self
            .watch::<core::Node>(config.fields(&format!("metadata.name={}", self.node_name)))
            .map(|e| Update::Node(Box::new(e)));
        let mut updates = futures::stream::select(futures::stream::select(services, slices), nodes);

        let mut stores = Stores::default();
        let mut due: Option<Instant> = None;
        let mut last_publish: Option<Instant> = None;
        let mut published: Option<Published> = None;
        loop {
            let ready = stores.ready();
            let publish_at = due.filter(|_| ready);
            tokio::select! {
                biased;
                () = snapshots.closed() => return Ok(()),
                () = sleep_until(publish_at) => {
                    due = None;
                    last_publish = Some(Instant::now());
                    let cluster = stores.cluster();
                    // What changed since the last snapshot published, as the events said.
                    let changes = stores.take_changes();
                    if published.as_ref().map(|p| &*p.cluster) != Some(&cluster) {
                        let cluster = Arc::new(cluster);
                        debug!(
                            services = cluster.services.len(),
                            slices = cluster.slices.len(),
                            node = cluster.node.is_some(),
                            changed = changes.services().len(),
                            "publishing a cluster snapshot"
                        );
                        let next = match &published {
                            Some(last) => last.next(cluster, changes),
                            None => Published::first(cluster),
                        };
                        published = Some(next.clone());
                        snapshots.send_replace(Some(next));
                    }
                    if let Some(tx) = &self.lifecycle {
                        tx.send_if_modified(|l| {
                            let now = stores.lifecycle();
                            std::mem::replace(l, now) != now
                        });
                    }
                }
                update = updates.next() => {
                    let Some(update) = update else {
                        // kube-runtime's watchers never end; if they do, keep the last state.
                        return Ok(());
                    };
                    if stores.apply(update) && due.is_none() {
                        let now = Instant::now();
                        due = Some(match last_publish {
                            Some(last) => (last + self.coalesce).max(now),
                            None => now,
                        });
                    }
                }
            }
        }
    }
}

/// Watches the API server for `node_name`'s Services, EndpointSlices and Node with the
/// default settings, publishing snapshots on `snapshots` (see [`Watches::run`]).
pub async fn run(
    client: Client,
    node_name: String,
    snapshots: watch::Sender<Option<Published>>,
) -> Result<()> {
    Watches::new(client, node_name).run(snapshots).await
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
