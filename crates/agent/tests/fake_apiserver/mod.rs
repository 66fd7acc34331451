//! A fake Kubernetes API server that speaks the real list/watch protocol over HTTP/1.1, for
//! tests that point the real kube client at it.
//!
//! It serves Services (`/api/v1/services`), EndpointSlices
//! (`/apis/discovery.k8s.io/v1/endpointslices`) and Nodes (`/api/v1/nodes`), cluster-wide
//! or in one namespace (`/api/v1/namespaces/NS/services`), as the API server does:
//! - one global `resourceVersion` counter (etcd's revision) stamped on every object;
//! - lists: `{"kind": "ServiceList", "metadata": {"resourceVersion": ..}, "items": [..]}`,
//!   with `labelSelector` (`k`, `!k`, `k=v`, `k==v`, `k!=v`, comma-separated),
//!   `fieldSelector` (`metadata.name`, `metadata.namespace`, `=` and `!=`), and pages with
//!   `limit` and `continue` (a consistent snapshot per list; an expired token answers HTTP
//!   410 `Expired`, as etcd's compaction does);
//! - watches (`?watch=true&resourceVersion=N`): newline-delimited JSON events in a chunked
//!   response, ADDED / MODIFIED / DELETED replayed from the history after `N` then live,
//!   an object leaving (entering) the selector sent as DELETED (ADDED), BOOKMARK events on
//!   demand when `allowWatchBookmarks=true`, `timeoutSeconds` honoured, and an ERROR event
//!   with a `410 Gone` Status for a `resourceVersion` older than the compacted history;
//! - streamed initial state (`sendInitialEvents=true`, WatchList): the objects as ADDED
//!   events, then a BOOKMARK annotated `k8s.io/initial-events-end`, then live events
//!   ([`FakeApiServer::refuse_streaming_lists`] answers such watches 422, as a server without
//!   the feature does);
//! - faults: [`FakeApiServer::gone`] (compacts the history and sends every open watch a 410),
//!   [`FakeApiServer::drop_watches`] (cuts every open watch mid-stream, without the final
//!   chunk), [`FakeApiServer::set_delay`] (a slow server), [`FakeApiServer::fail_next`]
//!   (HTTP errors with a Status body), [`FakeApiServer::fail_next_pages`] (errors on the
//!   pages after the first, mid-list), [`FakeApiServer::expire_continue_tokens`],
//!   [`FakeApiServer::truncate_next_lists`] (a list body, or a streamed initial state, cut
//!   short) and
//!   [`FakeApiServer::outage`] (the server refuses connections, or hangs every request,
//!   until [`FakeApiServer::end_outage`]).
//!
//! Every request is recorded ([`FakeApiServer::requests`]) so a test can assert what the
//! client asked for. Each response closes its connection (`Connection: close`).
//!
//! Used by several test crates, each with a part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

/// The kinds of object served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    /// v1 Services.
    Services,
    /// discovery.k8s.io/v1 EndpointSlices.
    EndpointSlices,
    /// v1 Nodes (cluster-scoped).
    Nodes,
}

impl Resource {
    fn kind(self) -> &'static str {
        match self {
            Resource::Services => "Service",
            Resource::EndpointSlices => "EndpointSlice",
            Resource::Nodes => "Node",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Resource::Services | Resource::Nodes => "v1",
            Resource::EndpointSlices => "discovery.k8s.io/v1",
        }
    }

    fn of_kind(kind: &str) -> Option<Self> {
        match kind {
            "Service" => Some(Resource::Services),
            "EndpointSlice" => Some(Resource::EndpointSlices),
            "Node" => Some(Resource::Nodes),
            _ => None,
        }
    }

    /// Parses a request path into the resource and an optional namespace.
    fn of_path(path: &str) -> Option<(Self, Option<String>)> {
        let rest = path
            .strip_prefix("/api/v1/")
            .or_else(|| path.strip_prefix("/apis/discovery.k8s.io/v1/"))?;
        let core = path.starts_with("/api/v1/");
        let (ns, plural) = match rest.split('/').collect::<Vec<_>>()[..] {
            [plural] => (None, plural),
            ["namespaces", ns, plural] => (Some(ns.to_owned()), plural),
            _ => return None,
        };
        let resource = match (core, plural) {
            (true, "services") => Resource::Services,
            (true, "nodes") if ns.is_none() => Resource::Nodes,
            (false, "endpointslices") => Resource::EndpointSlices,
            _ => return None,
        };
        Some((resource, ns))
    }
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Request {
    /// The resource asked for.
    pub resource: Option<Resource>,
    /// The path, without the query.
    pub path: String,
    /// The decoded query parameters.
    pub query: BTreeMap<String, String>,
}

impl Request {
    /// Whether it is a watch.
    pub fn is_watch(&self) -> bool {
        matches!(
            self.query.get("watch").map(String::as_str),
            Some("true" | "1")
        )
    }

    /// Whether it asks for the whole state: a list (or one of its pages), or a watch that
    /// streams the initial state first (`sendInitialEvents=true`, the API server's WatchList).
    pub fn is_initial_state(&self) -> bool {
        !self.is_watch() || self.streams_initial_state()
    }

    /// Whether it is a watch with `sendInitialEvents=true`.
    pub fn streams_initial_state(&self) -> bool {
        self.is_watch()
            && self
                .query
                .get("sendInitialEvents")
                .is_some_and(|v| v == "true")
    }
}

/// What open watches are told.
#[derive(Debug, Clone)]
enum Signal {
    /// An object changed.
    Change(Arc<Change>),
    /// Send a BOOKMARK at this resourceVersion.
    Bookmark(u64),
    /// Send the watches of this resource (all when None) a 410 Gone and end them.
    Gone(Option<Resource>),
    /// Cut the connection without ending the response.
    Drop,
}

/// How the server is down during an [`FakeApiServer::outage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// Nothing listens on the port: connections are refused.
    Refuse,
    /// Connections are accepted and requests read, but never answered (a partition or an
    /// overloaded server); they are closed, unanswered, when the outage ends.
    Hang,
}

/// One change to an object, as kept in the history.
#[derive(Debug)]
struct Change {
    rv: u64,
    resource: Resource,
    /// The object before the change (None for an addition).
    before: Option<Value>,
    /// The object after the change (None for a deletion).
    after: Option<Value>,
}

type Key = (Resource, String, String);

struct State {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: Vec<Arc<Change>>,
    /// Watches from a resourceVersion below this get a 410.
    oldest: u64,
    pages: HashMap<String, (u64, Vec<Value>)>,
    next_token: u64,
    delay: Duration,
    failures: Vec<u16>,
    page_failures: Vec<u16>,
    expire_pages: usize,
    truncate_lists: usize,
    refuse_streaming: bool,
    ignore_streaming: bool,
    requests: Vec<Request>,
    /// Watches streaming events now (their backlog sent), by resource.
    watching: BTreeMap<Resource, usize>,
}

/// The fake server; it stops when dropped.
pub struct FakeApiServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    signals: broadcast::Sender<Signal>,
    outage: watch::Sender<Option<Outage>>,
    accept: Mutex<Option<JoinHandle<()>>>,
    runtime: tokio::runtime::Handle,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if let Some(accept) = self
            .accept
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            accept.abort();
        }
        let _ = self.signals.send(Signal::Drop);
        // Hung requests are let go.
        self.outage.send_replace(None);
    }
}

impl FakeApiServer {
    /// Starts a server on a free port of 127.0.0.1.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(Mutex::new(State {
            rv: 1,
            objects: BTreeMap::new(),
            history: Vec::new(),
            oldest: 0,
            pages: HashMap::new(),
            next_token: 0,
            delay: Duration::ZERO,
            failures: Vec::new(),
            page_failures: Vec::new(),
            expire_pages: 0,
            truncate_lists: 0,
            refuse_streaming: false,
            ignore_streaming: false,
            requests: Vec::new(),
            watching: BTreeMap::new(),
        }));
        let (signals, _) = broadcast::channel(4096);
        let (outage, _) = watch::channel(None);
        let server = Self {
            addr,
            state,
            signals,
            outage,
            accept: Mutex::new(None),
            runtime: tokio::runtime::Handle::current(),
        };
        server.listen(listener);
        server
    }

    /// Serves connections from `listener` until the outage or the drop.
    fn listen(&self, listener: TcpListener) {
        let state = self.state.clone();
        let signals = self.signals.clone();
        let outage = self.outage.clone();
        let accept = self.runtime.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let conn = Connection {
                    state: state.clone(),
                    signals: signals.clone(),
                    outage: outage.subscribe(),
                };
                tokio::spawn(conn.serve(stream));
            }
        });
        *self.accept.lock().unwrap_or_else(|e| e.into_inner()) = Some(accept);
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client configuration for this server (plain HTTP, no credentials).
    pub fn config(&self) -> kube::Config {
        kube::Config::new(self.url().parse().expect("a URL"))
    }

    /// A kube client of this server.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("a client")
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates or replaces an object (its `kind` says which resource), stamping a new
    /// resourceVersion; open watches get ADDED or MODIFIED. Returns the resourceVersion.
    pub fn apply(&self, mut object: Value) -> u64 {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let resource = Resource::of_kind(&kind).unwrap_or_else(|| panic!("unknown kind {kind}"));
        object["apiVersion"] = resource.api_version().into();
        let mut state = self.state();
        state.rv += 1;
        let rv = state.rv;
        object["metadata"]["resourceVersion"] = rv.to_string().into();
        let key = key_of(resource, &object);
        let before = state.objects.insert(key, object.clone());
        self.record(
            &mut state,
            Change {
                rv,
                resource,
                before,
                after: Some(object),
            },
        );
        rv
    }

    /// Deletes an object; open watches get DELETED. Returns the resourceVersion, or `None`
    /// when there was no such object.
    pub fn delete(&self, resource: Resource, namespace: &str, name: &str) -> Option<u64> {
        let mut state = self.state();
        let mut object =
            state
                .objects
                .remove(&(resource, namespace.to_owned(), name.to_owned()))?;
        state.rv += 1;
        let rv = state.rv;
        // The API server sends the object as it was, with the deletion's resourceVersion.
        object["metadata"]["resourceVersion"] = rv.to_string().into();
        self.record(
            &mut state,
            Change {
                rv,
                resource,
                before: Some(object),
                after: None,
            },
        );
        Some(rv)
    }

    fn record(&self, state: &mut State, change: Change) {
        let change = Arc::new(change);
        state.history.push(change.clone());
        let _ = self.signals.send(Signal::Change(change));
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.state().rv
    }

    /// Sends every open watch that asked for bookmarks a BOOKMARK at the current
    /// resourceVersion.
    pub fn bookmark(&self) {
        let rv = self.state().rv;
        let _ = self.signals.send(Signal::Bookmark(rv));
    }

    /// Compacts the history: a watch from any resourceVersion before now answers 410.
    pub fn compact(&self) {
        let mut state = self.state();
        state.oldest = state.rv;
        state.history.clear();
    }

    /// Compacts the history and sends every open watch an ERROR event with a `410 Gone`
    /// Status, then ends it: the client must relist.
    pub fn gone(&self) {
        self.compact();
        let _ = self.signals.send(Signal::Gone(None));
    }

    /// As [`FakeApiServer::gone`], but only the watches of `resource` are told.
    pub fn gone_for(&self, resource: Resource) {
        self.compact();
        let _ = self.signals.send(Signal::Gone(Some(resource)));
    }

    /// Cuts every open watch connection mid-stream.
    pub fn drop_watches(&self) {
        let _ = self.signals.send(Signal::Drop);
    }

    /// Delays every response (head and first byte) by `delay`.
    pub fn set_delay(&self, delay: Duration) {
        self.state().delay = delay;
    }

    /// Answers the next requests with these HTTP status codes (and a Status body), one each.
    pub fn fail_next(&self, codes: &[u16]) {
        self.state().failures.extend_from_slice(codes);
    }

    /// Answers the next requests for a page after the first (those with a continue token)
    /// with these HTTP status codes, one each: a list that fails midway.
    pub fn fail_next_pages(&self, codes: &[u16]) {
        self.state().page_failures.extend_from_slice(codes);
    }

    /// Answers the next `n` list requests (pages included) with a `200 OK` whose body stops
    /// halfway, the connection closed: a list cut on the wire.
    pub fn truncate_next_lists(&self, n: usize) {
        self.state().truncate_lists += n;
    }

    /// Takes the server down: every open watch is cut, then, until [`FakeApiServer::end_outage`],
    /// connections are refused ([`Outage::Refuse`]: nothing listens on the port) or every
    /// request hangs unanswered ([`Outage::Hang`]). Changes made meanwhile are kept, as etcd
    /// keeps them while the API server is away. A new outage replaces the current one.
    pub fn outage(&self, how: Outage) {
        // Requests hung by an earlier Hang are let go (closed unanswered) by the change.
        self.outage.send_replace(Some(how));
        if how == Outage::Refuse
            && let Some(accept) = self.accept.lock().unwrap_or_else(|e| e.into_inner()).take()
        {
            accept.abort();
        }
        let _ = self.signals.send(Signal::Drop);
    }

    /// Ends the outage: the server listens again on the same address; hung requests are
    /// closed unanswered (the client retries them).
    pub fn end_outage(&self) {
        self.outage.send_replace(None);
        let accept = self.accept.lock().unwrap_or_else(|e| e.into_inner());
        if accept.as_ref().is_some_and(|a| !a.is_finished()) {
            return;
        }
        drop(accept);
        // The aborted accept loop drops its listener on the runtime's thread: retry the bind
        // until the port is free again.
        let mut tries = 0;
        let listener = loop {
            match std::net::TcpListener::bind(self.addr) {
                Ok(l) => break l,
                Err(_) if tries < 200 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("cannot listen on {} again: {e}", self.addr),
            }
        };
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let _guard = self.runtime.enter();
        let listener = TcpListener::from_std(listener).expect("a tokio listener");
        self.listen(listener);
    }

    /// Forgets every list's continue token: the next page answers 410 Expired.
    pub fn expire_continue_tokens(&self) {
        self.state().pages.clear();
    }

    /// Answers the next `n` page requests (those with a continue token) with 410 Expired, as
    /// if etcd compacted the list's revision between two pages.
    pub fn expire_next_pages(&self, n: usize) {
        self.state().expire_pages += n;
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state().requests.clone()
    }

    /// How many requests for the whole state of `resource` were made: lists (pages
    /// included) and watches streaming the initial state.
    pub fn lists(&self, resource: Resource) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.resource == Some(resource) && r.is_initial_state())
            .count()
    }

    /// Answers watches that ask for the initial state (`sendInitialEvents=true`) with a
    /// `422 Invalid`, as an API server without the WatchList feature does.
    pub fn refuse_streaming_lists(&self) {
        self.state().refuse_streaming = true;
    }

    /// Serves watches that ask for the initial state as a server too old to know
    /// `sendInitialEvents` does: the objects as ADDED events, but never the end bookmark.
    pub fn ignore_streaming_lists(&self) {
        self.state().ignore_streaming = true;
    }

    /// Waits until each of `resources` has a watch streaming events (one that a
    /// [`FakeApiServer::gone`] now reaches); `false` after `limit`.
    pub fn wait_for_watches(&self, resources: &[Resource], limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let open = |r: &Resource| self.state().watching.get(r).copied().unwrap_or(0) > 0;
            if resources.iter().all(open) {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How many watch requests were made for `resource`.
    pub fn watches(&self, resource: Resource) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.resource == Some(resource) && r.is_watch())
            .count()
    }
}

fn key_of(resource: Resource, object: &Value) -> Key {
    let meta = &object["metadata"];
    let ns = match resource {
        Resource::Nodes => String::new(),
        _ => meta["namespace"].as_str().unwrap_or("default").to_owned(),
    };
    (
        resource,
        ns,
        meta["name"].as_str().unwrap_or_default().to_owned(),
    )
}

/// A label or field selector requirement.
#[derive(Debug, Clone)]
enum Requirement {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
}

impl Requirement {
    fn parse_all(selector: &str) -> Vec<Requirement> {
        selector
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                if let Some((k, v)) = s.split_once("!=") {
                    Requirement::NotEquals(k.trim().into(), v.trim().into())
                } else if let Some((k, v)) = s.split_once("==").or_else(|| s.split_once('=')) {
                    Requirement::Equals(k.trim().into(), v.trim().into())
                } else if let Some(k) = s.strip_prefix('!') {
                    Requirement::NotExists(k.trim().into())
                } else {
                    Requirement::Exists(s.into())
                }
            })
            .collect()
    }

    fn matches(&self, lookup: impl Fn(&str) -> Option<String>) -> bool {
        match self {
            Requirement::Exists(k) => lookup(k).is_some(),
            Requirement::NotExists(k) => lookup(k).is_none(),
            Requirement::Equals(k, v) => lookup(k).as_deref() == Some(v.as_str()),
            Requirement::NotEquals(k, v) => lookup(k).as_deref() != Some(v.as_str()),
        }
    }
}

/// What a request selects.
#[derive(Debug, Clone)]
struct Selection {
    resource: Resource,
    namespace: Option<String>,
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
}

impl Selection {
    fn matches(&self, resource: Resource, object: &Value) -> bool {
        if resource != self.resource {
            return false;
        }
        let meta = &object["metadata"];
        if let Some(ns) = &self.namespace
            && meta["namespace"].as_str() != Some(ns)
        {
            return false;
        }
        let label = |k: &str| meta["labels"][k].as_str().map(str::to_owned);
        let field = |k: &str| match k {
            "metadata.name" => meta["name"].as_str().map(str::to_owned),
            "metadata.namespace" => meta["namespace"].as_str().map(str::to_owned),
            _ => None,
        };
        self.labels.iter().all(|r| r.matches(label)) && self.fields.iter().all(|r| r.matches(field))
    }

    /// The event a watch of this selection sends for a change, if any.
    fn event(&self, change: &Change) -> Option<Value> {
        let was = change
            .before
            .as_ref()
            .is_some_and(|o| self.matches(change.resource, o));
        let is = change
            .after
            .as_ref()
            .is_some_and(|o| self.matches(change.resource, o));
        let (kind, object) = match (was, is, &change.after) {
            (false, true, Some(after)) => ("ADDED", after.clone()),
            (true, true, Some(after)) => ("MODIFIED", after.clone()),
            (true, false, Some(after)) => ("DELETED", after.clone()),
            (true, _, None) => ("DELETED", change.before.clone()?),
            _ => return None,
        };
        Some(json!({"type": kind, "object": object}))
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        410 => "Gone",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Percent-decoding of a query component (`+` is a space).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match std::str::from_utf8(bytes.get(i + 1..i + 3).unwrap_or_default())
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(b) => {
                    out.push(b);
                    i += 2;
                }
                None => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Connection {
    state: Arc<Mutex<State>>,
    signals: broadcast::Sender<Signal>,
    outage: watch::Receiver<Option<Outage>>,
}

impl Connection {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn serve(self, mut stream: TcpStream) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.len() > 64 * 1024 {
                return;
            }
        }
        let head = String::from_utf8_lossy(&buf).into_owned();
        let line = head.lines().next().unwrap_or_default();
        let mut parts = line.split(' ');
        let method = parts.next().unwrap_or_default();
        let target = parts.next().unwrap_or_default();
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let query: BTreeMap<String, String> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (decode(k), decode(v))
            })
            .collect();
        let parsed = Resource::of_path(path);
        let request = Request {
            resource: parsed.as_ref().map(|(r, _)| *r),
            path: path.to_owned(),
            query,
        };
        let down = *self.outage.borrow();
        match down {
            // Keep the request unanswered while the server hangs, then close.
            Some(Outage::Hang) => {
                let mut outage = self.outage.clone();
                let _ = outage.wait_for(|o| *o != Some(Outage::Hang)).await;
                return;
            }
            // Accepted just before the listener closed.
            Some(Outage::Refuse) => return,
            None => {}
        }
        let (delay, failure) = {
            let mut state = self.state();
            state.requests.push(request.clone());
            let failure = (!state.failures.is_empty()).then(|| state.failures.remove(0));
            (state.delay, failure)
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if let Some(code) = failure {
            let body = status(code, reason_phrase(code), "injected failure");
            return respond(&mut stream, code, &body).await;
        }
        if method != "GET" {
            let body = status(405, "MethodNotAllowed", "only GET is served");
            return respond(&mut stream, 405, &body).await;
        }
        let Some((resource, namespace)) = parsed else {
            let body = status(404, "NotFound", &format!("no resource at {path}"));
            return respond(&mut stream, 404, &body).await;
        };
        let selection = Selection {
            resource,
            namespace,
            labels: Requirement::parse_all(
                request
                    .query
                    .get("labelSelector")
                    .map_or("", String::as_str),
            ),
            fields: Requirement::parse_all(
                request
                    .query
                    .get("fieldSelector")
                    .map_or("", String::as_str),
            ),
        };
        if request.streams_initial_state() && self.state().refuse_streaming {
            let body = status(
                422,
                "Invalid",
                "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: \
                 sendInitialEvents is forbidden for watch unless the WatchList feature gate \
                 is enabled",
            );
            return respond(&mut stream, 422, &body).await;
        }
        if request.is_watch() {
            self.watch(stream, &request, selection).await;
        } else {
            let (code, body) = self.list(&request, &selection);
            let truncate = {
                let mut state = self.state();
                let truncate = state.truncate_lists > 0;
                state.truncate_lists = state.truncate_lists.saturating_sub(1);
                truncate
            };
            if truncate {
                respond_truncated(&mut stream, code, &body).await;
            } else {
                respond(&mut stream, code, &body).await;
            }
        }
    }

    fn list(&self, request: &Request, selection: &Selection) -> (u16, Value) {
        let mut state = self.state();
        let limit = request
            .query
            .get("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|l| *l > 0);
        if request.query.contains_key("continue") && !state.page_failures.is_empty() {
            let code = state.page_failures.remove(0);
            return (
                code,
                status(code, reason_phrase(code), "injected failure mid-list"),
            );
        }
        let (rv, mut items) = match request.query.get("continue") {
            Some(token) => match state.pages.remove(token).filter(|_| {
                let expire = state.expire_pages > 0;
                state.expire_pages = state.expire_pages.saturating_sub(1);
                !expire
            }) {
                Some(page) => page,
                None => {
                    let message = "The provided continue parameter is too old to display a \
                                   consistent list result. You can start a new list without \
                                   the continue parameter.";
                    return (410, status(410, "Expired", message));
                }
            },
            None => (
                state.rv,
                state
                    .objects
                    .iter()
                    .filter(|((r, _, _), o)| selection.matches(*r, o))
                    .map(|(_, o)| o.clone())
                    .collect(),
            ),
        };
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if let Some(limit) = limit
            && items.len() > limit
        {
            let rest = items.split_off(limit);
            state.next_token += 1;
            let token = format!("page-{}", state.next_token);
            metadata["continue"] = token.clone().into();
            metadata["remainingItemCount"] = rest.len().into();
            state.pages.insert(token, (rv, rest));
        }
        // The API server leaves kind and apiVersion out of list items.
        for item in &mut items {
            if let Some(map) = item.as_object_mut() {
                map.remove("kind");
                map.remove("apiVersion");
            }
        }
        let resource = selection.resource;
        let body = json!({
            "kind": format!("{}List", resource.kind()),
            "apiVersion": resource.api_version(),
            "metadata": metadata,
            "items": items,
        });
        (200, body)
    }

    async fn watch(&self, mut stream: TcpStream, request: &Request, selection: Selection) {
        let bookmarks = request
            .query
            .get("allowWatchBookmarks")
            .is_some_and(|b| b == "true");
        let timeout = request
            .query
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map_or(Duration::from_secs(1800), Duration::from_secs);
        let from = request
            .query
            .get("resourceVersion")
            .map(String::as_str)
            .unwrap_or_default();
        // Subscribe and read the backlog under the lock, so no change falls in between.
        let (mut live, backlog) = {
            let state = self.state();
            let live = self.signals.subscribe();
            let backlog: Result<Vec<Value>, u64> = match from.parse::<u64>() {
                Ok(rv) if rv != 0 && rv < state.oldest => Err(rv),
                Ok(rv) if rv != 0 => Ok(state
                    .history
                    .iter()
                    .filter(|c| c.rv > rv)
                    .filter_map(|c| selection.event(c))
                    .collect()),
                // "" or "0": start with the current state, as synthetic ADDED events.
                _ => Ok(state
                    .objects
                    .iter()
                    .filter(|((r, _, _), o)| selection.matches(*r, o))
                    .map(|(_, o)| json!({"type": "ADDED", "object": o}))
                    .collect()),
            };
            let mut backlog = backlog.map_err(|rv| {
                let message = format!("too old resource version: {rv} ({})", state.oldest);
                json!({"type": "ERROR", "object": status(410, "Expired", &message)})
            });
            // A streamed initial state ends with a bookmark that says so.
            if request.streams_initial_state()
                && !state.ignore_streaming
                && let Ok(events) = &mut backlog
            {
                events.push(json!({
                    "type": "BOOKMARK",
                    "object": {
                        "kind": selection.resource.kind(),
                        "apiVersion": selection.resource.api_version(),
                        "metadata": {
                            "resourceVersion": state.rv.to_string(),
                            "annotations": {"k8s.io/initial-events-end": "true"},
                        },
                    },
                }));
            }
            (live, backlog)
        };
        // A streamed initial state counts as a list for truncate_next_lists: half of it is
        // sent, then the connection closes.
        let truncate = request.streams_initial_state() && {
            let mut state = self.state();
            let truncate = state.truncate_lists > 0;
            state.truncate_lists = state.truncate_lists.saturating_sub(1);
            truncate
        };
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                    Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let backlog = match backlog {
            Ok(events) => events,
            Err(gone) => {
                let _ = send_event(&mut stream, &gone).await;
                let _ = stream.write_all(b"0\r\n\r\n").await;
                return;
            }
        };
        let sent = if truncate {
            &backlog[..backlog.len() / 2]
        } else {
            &backlog[..]
        };
        for event in sent {
            if send_event(&mut stream, event).await.is_err() {
                return;
            }
        }
        if truncate {
            return;
        }
        let _streaming = Streaming::start(&self.state, selection.resource);
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut outage = self.outage.clone();
        loop {
            let signal = tokio::select! {
                () = &mut deadline => break,
                // An outage cuts the watch, even one that started as it began.
                _ = outage.wait_for(Option::is_some) => return,
                s = live.recv() => s,
            };
            let event = match signal {
                Ok(Signal::Change(change)) => match selection.event(&change) {
                    Some(e) => e,
                    None => continue,
                },
                Ok(Signal::Bookmark(rv)) if bookmarks => json!({
                    "type": "BOOKMARK",
                    "object": {
                        "kind": selection.resource.kind(),
                        "apiVersion": selection.resource.api_version(),
                        "metadata": {"resourceVersion": rv.to_string()},
                    },
                }),
                Ok(Signal::Bookmark(_)) => continue,
                Ok(Signal::Gone(Some(r))) if r != selection.resource => continue,
                Ok(Signal::Gone(_)) => {
                    let event = json!({
                        "type": "ERROR",
                        "object": status(410, "Expired", "too old resource version"),
                    });
                    let _ = send_event(&mut stream, &event).await;
                    break;
                }
                // A lagging watcher is cut, as the API server does with slow ones.
                Ok(Signal::Drop) | Err(_) => return,
            };
            if send_event(&mut stream, &event).await.is_err() {
                return;
            }
        }
        let _ = stream.write_all(b"0\r\n\r\n").await;
    }
}

/// Counts a watch in [`State::watching`] while it lives.
struct Streaming {
    state: Arc<Mutex<State>>,
    resource: Resource,
}

impl Streaming {
    fn start(state: &Arc<Mutex<State>>, resource: Resource) -> Streaming {
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        *s.watching.entry(resource).or_default() += 1;
        Streaming {
            state: state.clone(),
            resource,
        }
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = s.watching.get_mut(&self.resource) {
            *n = n.saturating_sub(1);
        }
    }
}

async fn send_event(stream: &mut TcpStream, event: &Value) -> std::io::Result<()> {
    let mut line = event.to_string();
    line.push('\n');
    let chunk = format!("{:x}\r\n{line}\r\n", line.len());
    stream.write_all(chunk.as_bytes()).await?;
    stream.flush().await
}

async fn respond(stream: &mut TcpStream, code: u16, body: &Value) {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        reason_phrase(code),
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// As [`respond`], but the body stops halfway and the connection closes.
async fn respond_truncated(stream: &mut TcpStream, code: u16, body: &Value) {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        reason_phrase(code),
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(&body.as_bytes()[..body.len() / 2]).await;
    let _ = stream.shutdown().await;
}

/// Object builders for tests.
pub mod objects {
    use serde_json::{Value, json};

    /// A ClusterIP Service `default/NAME` with TCP ports (named `p<port>` when several).
    pub fn service(name: &str, cluster_ip: &str, ports: &[u16]) -> Value {
        let ports: Vec<Value> = ports
            .iter()
            .map(|p| {
                let mut port = json!({"port": p, "protocol": "TCP", "targetPort": p});
                if ports.len() > 1 {
                    port["name"] = format!("p{p}").into();
                }
                port
            })
            .collect();
        json!({
            "kind": "Service",
            "metadata": {"namespace": "default", "name": name, "uid": format!("uid-{name}")},
            "spec": {
                "type": "ClusterIP",
                "clusterIP": cluster_ip,
                "clusterIPs": [cluster_ip],
                "ipFamilies": ["IPv4"],
                "ports": ports,
                "sessionAffinity": "None",
            },
        })
    }

    /// An EndpointSlice `default/SERVICE-SUFFIX` of one unnamed TCP port with ready
    /// endpoints `(address, node)`.
    pub fn slice(service: &str, suffix: &str, port: u16, endpoints: &[(&str, &str)]) -> Value {
        let endpoints: Vec<Value> = endpoints
            .iter()
            .map(|(ip, node)| {
                json!({
                    "addresses": [ip],
                    "conditions": {"ready": true, "serving": true, "terminating": false},
                    "nodeName": node,
                })
            })
            .collect();
        json!({
            "kind": "EndpointSlice",
            "metadata": {
                "namespace": "default",
                "name": format!("{service}-{suffix}"),
                "labels": {
                    "kubernetes.io/service-name": service,
                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                },
            },
            "addressType": "IPv4",
            "ports": [{"name": "", "port": port, "protocol": "TCP"}],
            "endpoints": endpoints,
        })
    }

    /// A Node with an InternalIP and a pod CIDR.
    pub fn node(name: &str, internal_ip: &str, pod_cidr: &str) -> Value {
        json!({
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
            "status": {"addresses": [
                {"type": "InternalIP", "address": internal_ip},
                {"type": "Hostname", "address": name},
            ]},
        })
    }

    /// Sets a label on an object.
    pub fn label(mut object: Value, key: &str, value: &str) -> Value {
        object["metadata"]["labels"][key] = value.into();
        object
    }
}
