//! The API-server source: list/watch of Services, EndpointSlices and the agent's own Node,
//! turned into [`Cluster`] snapshots.
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
//! [`Cluster`] is built from the stores and published on the `watch` channel at most once per
//! [`Watches::coalesce`] period (a lone event after a quiet period is published at once).
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
//! [`client`] builds a [`kube::Client`] the way kube-proxy's `--kubeconfig` and `--master`
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
//! - [`initial`]: how a watch gets its initial state, streamed (WatchList) or listed.
//! - `rate`: the client-side request rate limit (`--kube-api-qps`, `--kube-api-burst`).
//! - `tests`: the stores without a server: relists, conversion once per version, change
//!   detection.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use kube::api::Api;
use kube::client::ClientBuilder;
use kube::config::{Config, InClusterError, KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::runtime::WatchStreamExt;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use self::rate::RateLimitLayer;
use crate::k8s::convert::{self, ConvertError};
use crate::model::snapshot::cluster::{self, Cluster, ObjectMap, ServiceRef, SliceRef};

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

/// What the API-server source cannot do at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Neither `--kubeconfig` nor `--master` was given and the agent is not in a pod.
    #[error(
        "cannot read the in-cluster configuration (outside a pod, give --kubeconfig or --master)"
    )]
    InCluster(#[source] InClusterError),
    /// The `--kubeconfig` file cannot be read or used.
    #[error("cannot use the kubeconfig {path}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: KubeconfigError,
    },
    /// `--master` is not a URL.
    #[error("--master {url:?} is not a URL")]
    Master {
        /// The value given.
        url: String,
        /// Why.
        #[source]
        source: http::uri::InvalidUri,
    },
    /// The client cannot be built from the configuration (TLS setup, for instance).
    #[error("cannot build the API client")]
    Client(#[source] kube::Error),
    /// The Node watch needs the node's name.
    #[error("the node name is empty: the API source watches the agent's own Node by name")]
    NoNodeName,
}

/// A `Result` whose error is this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where the API server is and how to reach it: kube-proxy's `--kubeconfig`, `--master`,
/// `--kube-api-qps` and `--kube-api-burst`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientOptions {
    /// `--kubeconfig`: a kubeconfig file (its current context).
    pub kubeconfig: Option<PathBuf>,
    /// `--master`: the API server's URL, overriding the kubeconfig's server.
    pub master: Option<String>,
    /// `--kube-api-qps`: requests per second (kube-proxy's default is 5); zero or less
    /// means no limit.
    pub qps: f32,
    /// `--kube-api-burst`: requests allowed at once above `qps` (kube-proxy's default 10).
    pub burst: u32,
}

/// The client configuration kube-proxy would use: with neither option, the pod's
/// service-account (in-cluster) configuration; with `kubeconfig`, that file's current
/// context; `master` overrides the server URL (and alone gives an unauthenticated client of
/// that URL).
pub async fn config(options: &ClientOptions) -> Result<Config> {
    let master = options
        .master
        .as_deref()
        .filter(|m| !m.is_empty())
        .map(|url| {
            url.parse::<http::Uri>().map_err(|source| Error::Master {
                url: url.to_owned(),
                source,
            })
        })
        .transpose()?;
    let kubeconfig = options
        .kubeconfig
        .as_deref()
        .filter(|p| !p.as_os_str().is_empty());
    let mut config = match (kubeconfig, master.clone()) {
        (None, None) => Config::incluster().map_err(Error::InCluster)?,
        (None, Some(url)) => Config::new(url),
        (Some(path), _) => from_kubeconfig(path).await?,
    };
    if let Some(url) = master {
        config.cluster_url = url;
    }
    Ok(config)
}

async fn from_kubeconfig(path: &Path) -> Result<Config> {
    let failed = |source| Error::Kubeconfig {
        path: path.to_owned(),
        source,
    };
    let file = Kubeconfig::read_from(path).map_err(failed)?;
    Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(failed)
}

/// A client built from [`config`], its requests limited to `qps` and `burst` as client-go
/// limits kube-proxy's.
pub async fn client(options: &ClientOptions) -> Result<Client> {
    let config = config(options).await?;
    let builder = ClientBuilder::try_from(config).map_err(Error::Client)?;
    Ok(if options.qps > 0.0 {
        builder
            .with_layer(&RateLimitLayer::new(options.qps, options.burst))
            .build()
    } else {
        builder.build()
    })
}

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
        }
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
        if self.streams() {
            initial::streamed_or_listed(api, config, self.silence)
        } else {
            watch_kind(api, config)
        }
    }

    /// Watches until every receiver of `snapshots` is gone, publishing `Some(snapshot)` once
    /// every watch has listed and after each change. Watch errors are logged and retried with
    /// backoff (kube-runtime recovers a dropped watch from its last `resourceVersion` and
    /// relists after a `410 Gone`); they never end the loop.
    pub async fn run(self, snapshots: watch::Sender<Option<Arc<Cluster>>>) -> Result<()> {
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
        let mut published: Option<Arc<Cluster>> = None;
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
                    if published.as_deref() != Some(&cluster) {
                        let cluster = Arc::new(cluster);
                        debug!(
                            services = cluster.services.len(),
                            slices = cluster.slices.len(),
                            node = cluster.node.is_some(),
                            "publishing a cluster snapshot"
                        );
                        published = Some(cluster.clone());
                        snapshots.send_replace(Some(cluster));
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
    snapshots: watch::Sender<Option<Arc<Cluster>>>,
) -> Result<()> {
    Watches::new(client, node_name).run(snapshots).await
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

type WatchResult<K> = Result<Event<K>, watcher::Error>;

/// The watch of one kind with its backoff.
fn watch_kind<K>(api: Api<K>, config: watcher::Config) -> BoxStream<'static, WatchResult<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let backoff = RelistBackoff::default();
    let gone = backoff.gone.clone();
    watcher(api, config)
        .inspect(move |item| {
            if let Err(e) = item
                && asks_for_relist(e)
            {
                gone.store(true, Ordering::Relaxed);
            }
        })
        .backoff(backoff)
        .boxed()
}

/// Whether a watcher error is the server's `410 Gone`/`Expired` (a watch from a compacted
/// resourceVersion, an expired continue token): a request to relist, not a failure.
fn asks_for_relist(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// kube-runtime's default backoff (0.8 s doubling to 30 s, jittered, reset by any event),
/// except after a `410 Gone`: the relist then starts after a first step (0.8 to 1.6 s) instead
/// of the next one. After an outage the backoff is at its maximum, and the resumed watch's
/// 410 would otherwise add a second 30 to 60 s before the relist that brings the changes.
#[derive(Default)]
struct RelistBackoff {
    inner: DefaultBackoff,
    /// Set by the stream when the error about to be backed off from is a 410.
    gone: Arc<AtomicBool>,
}

impl Iterator for RelistBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.gone.swap(false, Ordering::Relaxed) {
            // A fresh sequence's first step: jittered like the others, the inner one untouched
            // (if the relist fails too, the backoff goes on from where it was).
            return DefaultBackoff::default().next();
        }
        self.inner.next()
    }
}

impl Backoff for RelistBackoff {
    fn reset(&mut self) {
        self.inner.reset();
    }
}

/// One item from one of the three watchers (boxed: the API objects are large and unequal).
enum Update {
    Service(Box<WatchResult<core::Service>>),
    Slice(Box<WatchResult<discovery::EndpointSlice>>),
    Node(Box<WatchResult<core::Node>>),
}

/// An API type the source watches, with its conversion to the model.
trait Watched: Resource + Clone + Debug {
    /// What one object becomes.
    type Model: Clone + PartialEq + Debug;
    /// The kind's name in logs.
    const KIND: &'static str;
    /// The object's model (`None` when it is left out) and, when rejected, why.
    fn convert(&self) -> (Option<Self::Model>, Option<ConvertError>);
}

fn from_result<M>(r: Result<Option<M>, ConvertError>) -> (Option<M>, Option<ConvertError>) {
    match r {
        Ok(m) => (m, None),
        Err(e) => (None, Some(e)),
    }
}

impl Watched for core::Service {
    // Shared with every snapshot: an object is held once, however many snapshots hold it.
    type Model = Arc<cluster::Service>;
    const KIND: &'static str = "Service";
    fn convert(&self) -> (Option<Self::Model>, Option<ConvertError>) {
        from_result(convert::service(self).map(|m| m.map(Arc::new)))
    }
}

impl Watched for discovery::EndpointSlice {
    type Model = Arc<cluster::EndpointSlice>;
    const KIND: &'static str = "EndpointSlice";
    fn convert(&self) -> (Option<Self::Model>, Option<ConvertError>) {
        from_result(convert::endpoint_slice(self).map(|m| m.map(Arc::new)))
    }
}

/// The own Node's model and lifecycle: the lifecycle is known even when the rest is rejected.
#[derive(Debug, Clone, PartialEq)]
struct OwnNode {
    node: Option<cluster::Node>,
    lifecycle: NodeLifecycle,
}

impl Watched for core::Node {
    type Model = OwnNode;
    const KIND: &'static str = "Node";
    fn convert(&self) -> (Option<Self::Model>, Option<ConvertError>) {
        let lifecycle = NodeLifecycle::of(self);
        let (node, rejected) = match convert::node(self) {
            Ok(n) => (Some(n), None),
            Err(e) => (None, Some(e)),
        };
        (Some(OwnNode { node, lifecycle }), rejected)
    }
}

/// Namespace (empty for a Node) and name.
type Key = (String, String);

/// One object as converted, with the version it was converted at.
#[derive(Debug, Clone)]
struct Entry<M> {
    version: String,
    model: Option<M>,
}

/// The converted objects of one kind.
#[derive(Debug)]
struct Store<K: Watched> {
    /// What the snapshots are built from.
    live: BTreeMap<Key, Entry<K::Model>>,
    /// A relist in progress: replaces `live` at `InitDone`.
    relist: Option<BTreeMap<Key, Entry<K::Model>>>,
    /// Whether a list has completed once.
    listed: bool,
    /// How many object versions were rejected.
    rejected: u64,
}

impl<K: Watched> Default for Store<K> {
    fn default() -> Self {
        Self {
            live: BTreeMap::new(),
            relist: None,
            listed: false,
            rejected: 0,
        }
    }
}

impl<K: Watched> Store<K> {
    fn key(obj: &K) -> Key {
        (obj.namespace().unwrap_or_default(), obj.name_any())
    }

    /// The entry for `obj`, reusing the live one when its version is the same, so each
    /// version is converted (and a rejection logged) once.
    fn entry(&mut self, key: &Key, obj: &K) -> Entry<K::Model> {
        let version = obj.resource_version().unwrap_or_default();
        if !version.is_empty()
            && let Some(e) = self.live.get(key).filter(|e| e.version == version)
        {
            return e.clone();
        }
        let (model, rejected) = obj.convert();
        if let Some(e) = rejected {
            self.rejected += 1;
            warn!(version = %version, reason = %e.reason, rejection = e.reason.kind(), "{}: left out", e.object);
        } else if model.is_none() {
            debug!(kind = K::KIND, namespace = %key.0, name = %key.1, "not proxied");
        }
        Entry { version, model }
    }

    /// Applies one watcher event, and says what of the snapshot it changed.
    fn apply(&mut self, event: Event<K>) -> Changed<K::Model> {
        match event {
            Event::Init => {
                if self.listed {
                    info!(
                        kind = K::KIND,
                        "relisting; snapshots keep the previous list"
                    );
                }
                self.relist = Some(BTreeMap::new());
                Changed::Nothing
            }
            Event::InitApply(obj) => {
                let key = Self::key(&obj);
                let entry = self.entry(&key, &obj);
                self.relist.get_or_insert_default().insert(key, entry);
                Changed::Nothing
            }
            Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let old = std::mem::replace(&mut self.live, listed);
                let first = !self.listed;
                self.listed = true;
                if first {
                    debug!(kind = K::KIND, objects = self.live.len(), "listed");
                }
                if first || !same_models(&old, &self.live) {
                    Changed::All
                } else {
                    Changed::Nothing
                }
            }
            Event::Apply(obj) => {
                let key = Self::key(&obj);
                let entry = self.entry(&key, &obj);
                let old = self.live.get(&key).and_then(|e| e.model.clone());
                let new = entry.model.clone();
                self.live.insert(key, entry);
                Changed::one(old, new)
            }
            Event::Delete(obj) => {
                let old = self.live.remove(&Self::key(&obj)).and_then(|e| e.model);
                Changed::one(old, None)
            }
        }
    }

    fn models(&self) -> impl Iterator<Item = &K::Model> {
        self.live.values().filter_map(|e| e.model.as_ref())
    }
}

fn same_models<M: PartialEq>(a: &BTreeMap<Key, Entry<M>>, b: &BTreeMap<Key, Entry<M>>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, ea), (kb, eb))| ka == kb && ea.model == eb.model)
}

/// What one watcher event changed of the snapshot.
#[derive(Debug)]
enum Changed<M> {
    Nothing,
    /// One object's model: made (`old` none), changed, or gone (`new` none).
    One {
        old: Option<M>,
        new: Option<M>,
    },
    /// Maybe every model of the kind (a list or relist).
    All,
}

impl<M: PartialEq> Changed<M> {
    fn one(old: Option<M>, new: Option<M>) -> Self {
        if old == new {
            Changed::Nothing
        } else {
            Changed::One { old, new }
        }
    }

    fn any(&self) -> bool {
        !matches!(self, Changed::Nothing)
    }
}

/// Brings one of the snapshot's maps to what `changed` says, keying each model by `key`.
fn follow<K: Ord + Clone, V>(
    map: &mut ObjectMap<K, V>,
    changed: &Changed<Arc<V>>,
    key: impl Fn(&V) -> K,
    all: impl FnOnce() -> ObjectMap<K, V>,
) {
    match changed {
        Changed::Nothing => {}
        Changed::One { old, new } => {
            if let Some(old) = old {
                map.remove(&key(old));
            }
            if let Some(new) = new {
                map.insert(key(new), new.clone());
            }
        }
        Changed::All => *map = all(),
    }
}

/// The three stores, and the snapshot's maps kept up to date with them one object at a time
/// (a snapshot then costs a clone of two persistent maps, not a rebuild of the cluster).
#[derive(Default)]
struct Stores {
    services: Store<core::Service>,
    slices: Store<discovery::EndpointSlice>,
    nodes: Store<core::Node>,
    snapshot_services: ObjectMap<ServiceRef, cluster::Service>,
    snapshot_slices: ObjectMap<SliceRef, cluster::EndpointSlice>,
}

impl Stores {
    fn ready(&self) -> bool {
        self.services.listed && self.slices.listed && self.nodes.listed
    }

    /// Applies one update; true when the snapshot changes.
    fn apply(&mut self, update: Update) -> bool {
        match update {
            Update::Service(e) => {
                let changed = apply_result(&mut self.services, *e);
                let store = &self.services;
                follow(
                    &mut self.snapshot_services,
                    &changed,
                    |s| s.id.clone(),
                    || store.models().map(|s| (s.id.clone(), s.clone())).collect(),
                );
                changed.any()
            }
            Update::Slice(e) => {
                let changed = apply_result(&mut self.slices, *e);
                let store = &self.slices;
                follow(
                    &mut self.snapshot_slices,
                    &changed,
                    cluster::EndpointSlice::id,
                    || store.models().map(|s| (s.id(), s.clone())).collect(),
                );
                changed.any()
            }
            Update::Node(e) => apply_result(&mut self.nodes, *e).any(),
        }
    }

    fn own_node(&self) -> Option<&OwnNode> {
        self.nodes.models().next()
    }

    fn lifecycle(&self) -> NodeLifecycle {
        self.own_node().map(|n| n.lifecycle).unwrap_or_default()
    }

    /// The snapshot: two persistent maps cloned, and the Node.
    fn cluster(&self) -> Cluster {
        Cluster {
            services: self.snapshot_services.clone(),
            slices: self.snapshot_slices.clone(),
            node: self.own_node().and_then(|n| n.node.clone()),
        }
    }
}

fn apply_result<K: Watched>(store: &mut Store<K>, event: WatchResult<K>) -> Changed<K::Model> {
    match event {
        Ok(event) => store.apply(event),
        Err(e) => {
            warn!(kind = K::KIND, error = %e, "watch failed; retrying with backoff");
            Changed::Nothing
        }
    }
}

pub mod initial;
mod rate;
#[cfg(test)]
mod tests;
