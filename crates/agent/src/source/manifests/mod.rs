//! `--manifests PATH`: the cluster read from YAML or JSON files instead of an API server.
//!
//! A path is one file or a directory of `*.yaml`, `*.yml` and `*.json` files (hidden files
//! left out, so a ConfigMap mount's `..data` is not read twice), read in name order. A YAML
//! file can hold several `---` documents; any document can be a `List` (as
//! `kubectl get -o yaml` prints) or a typed list such as `ServiceList`. v1 Services,
//! discovery.k8s.io/v1 EndpointSlices and v1 Nodes are converted with
//! [`crate::k8s::convert`]; other kinds are ignored with a debug note.
//!
//! Bad input never stops the rest: a document that is not YAML, an object that does not
//! deserialize or does not validate, a second object with the same name, each ends up in
//! [`Loaded::rejected`] with where it came from and why, and is logged as a warning.
//!
//! [`watch`] polls the files' modification times and wakes the sync loop when they change;
//! the loop then calls [`load`] again (level-triggered: nothing is diffed here).
//!
//! # Layout
//! One file, with `tests`: the loading of files and documents, and what is rejected and why.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use crate::k8s::convert;
use crate::model::snapshot::cluster::{Cluster, ServiceRef, SliceRef};

/// What [`load`] could not do at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path (or, for a directory, its listing) cannot be read.
    #[error("cannot read manifests at {path}")]
    Read {
        /// The path given.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// A `Result` whose error is this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The result of reading a manifest path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The Services, EndpointSlices and own Node that were read and validated.
    pub cluster: Cluster,
    /// Each object or document left out: where it was (file, line, kind and name when
    /// known) and why.
    pub rejected: Vec<(String, Rejection)>,
}

/// Why an object or document is left out; the text is the warning's `reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// A file that cannot be read.
    #[error("cannot read: {0}")]
    Read(String),
    /// A JSON file that does not parse.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// A YAML document that does not parse.
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// A document that is not a mapping.
    #[error("not an object (expected apiVersion, kind, metadata...)")]
    NotAnObject,
    /// An object without `apiVersion` or `kind`.
    #[error("apiVersion and kind are required")]
    NoTypeMeta,
    /// A `...List` whose `items` is not a list.
    #[error("{kind}: items is not a list")]
    ItemsNotAList {
        /// The list's kind.
        kind: String,
    },
    /// A second object of the same kind and name: the first is kept.
    #[error("duplicate of the {kind} at {first}, which is kept")]
    Duplicate {
        /// `Service`, `EndpointSlice` or `Node`.
        kind: &'static str,
        /// Where the kept one was read.
        first: String,
    },
    /// An object that does not decode as its kind.
    #[error("invalid {kind}: {message}")]
    Decode {
        /// Its kind.
        kind: String,
        /// The decoder's message.
        message: String,
    },
    /// An object the model cannot take.
    #[error(transparent)]
    Invalid(convert::Reason),
}

impl Rejection {
    /// The variant's name in kebab-case (`not-an-object`), or the model's reason's
    /// ([`convert::Reason::kind`]): a stable machine key for the log (`rejection=`) and for
    /// tests, unlike the text.
    pub fn kind(&self) -> &'static str {
        match self {
            Rejection::Read(_) => "read",
            Rejection::Json(_) => "json",
            Rejection::Yaml(_) => "yaml",
            Rejection::NotAnObject => "not-an-object",
            Rejection::NoTypeMeta => "no-type-meta",
            Rejection::ItemsNotAList { .. } => "items-not-a-list",
            Rejection::Duplicate { .. } => "duplicate",
            Rejection::Decode { .. } => "decode",
            Rejection::Invalid(reason) => reason.kind(),
        }
    }

    /// The path of the field at fault, when the model named one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Rejection::Invalid(reason) => Some(reason.field()),
            _ => None,
        }
    }
}

/// Reads every manifest at `path` (a file or a directory); `node_name` picks the Node that
/// becomes [`Cluster::node`].
///
/// Only a path that cannot be read at all is an error: everything wrong inside the files is
/// reported in [`Loaded::rejected`] and the other objects are kept. When two objects have
/// the same kind, namespace and name, the first one read is kept.
pub fn load(path: &Path, node_name: &str) -> Result<Loaded> {
    let files = manifest_files(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut loader = Loader::new(node_name);
    for file in files {
        let name = file.display().to_string();
        match std::fs::read_to_string(&file) {
            Ok(text) => loader.file(&name, &text, is_json(&file)),
            Err(e) => loader.reject(name, Rejection::Read(e.to_string())),
        }
    }
    Ok(loader.finish())
}

/// Reads manifests from text, as [`load`] reads one file named `origin` (YAML, which
/// includes JSON).
pub fn load_str(origin: &str, text: &str, node_name: &str) -> Loaded {
    let mut loader = Loader::new(node_name);
    loader.file(origin, text, false);
    loader.finish()
}

/// Reads manifests from JSON text, as [`load`] reads one `*.json` file named `origin`
/// (a single object or a `List`, without YAML's `---` documents).
pub fn load_json_str(origin: &str, text: &str, node_name: &str) -> Loaded {
    let mut loader = Loader::new(node_name);
    loader.file(origin, text, true);
    loader.finish()
}

/// Polls `path` every `period` and sends `()` on `changed` when a manifest file appears,
/// disappears or changes (modification time or size), or when `path` itself does.
///
/// A wake-up already waiting in the channel is enough (the receiver reloads everything), so
/// a full channel is not an error. Returns when the receiver is dropped. The checks are a
/// few `stat` calls, done on the runtime's thread.
pub async fn watch(path: PathBuf, period: Duration, changed: mpsc::Sender<()>) {
    let mut last = fingerprint(&path);
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = changed.closed() => return,
        }
        let now = fingerprint(&path);
        if now == last {
            continue;
        }
        tracing::debug!(path = %path.display(), "manifests changed");
        last = now;
        match changed.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) => {}
            Err(TrySendError::Closed(())) => return,
        }
    }
}

/// What [`watch`] compares: each file with its modification time and size (`None` when it
/// cannot be read), the path itself first.
type Fingerprint = Vec<(PathBuf, Option<(Option<SystemTime>, u64)>)>;

fn fingerprint(path: &Path) -> Fingerprint {
    let stamp = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.modified().ok(), m.len()))
    };
    let mut out = vec![(path.to_owned(), stamp(path))];
    if path.is_dir()
        && let Ok(files) = manifest_files(path)
    {
        out.extend(files.into_iter().map(|f| {
            let s = stamp(&f);
            (f, s)
        }));
    }
    out
}

/// The manifest files at `path`: the path itself when it is a file, otherwise its
/// `*.yaml`, `*.yml` and `*.json` files that are not hidden, sorted by name.
fn manifest_files(path: &Path) -> io::Result<Vec<PathBuf>> {
    if !std::fs::metadata(path)?.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let wanted = [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| name.ends_with(ext));
        if name.starts_with('.') || !wanted {
            continue;
        }
        // Follows symlinks, as a ConfigMap volume's files are.
        let file = entry.path();
        if std::fs::metadata(&file).is_ok_and(|m| m.is_file()) {
            files.push(file);
        }
    }
    files.sort();
    Ok(files)
}

fn is_json(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
}

/// Where an object came from, for messages: `file:line`, then `items[i]` within lists.
#[derive(Debug, Clone)]
struct Origin {
    file: String,
    line: usize,
    items: Vec<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        for i in &self.items {
            write!(f, " items[{i}]")?;
        }
        Ok(())
    }
}

struct Loader<'a> {
    node_name: &'a str,
    cluster: Cluster,
    rejected: Vec<(String, Rejection)>,
    /// Where each kept object was read, to name it when a duplicate turns up.
    services_at: BTreeMap<ServiceRef, String>,
    slices_at: BTreeMap<SliceRef, String>,
    node_at: Option<String>,
}

impl<'a> Loader<'a> {
    fn new(node_name: &'a str) -> Self {
        Self {
            node_name,
            cluster: Cluster::default(),
            rejected: Vec::new(),
            services_at: BTreeMap::new(),
            slices_at: BTreeMap::new(),
            node_at: None,
        }
    }

    fn finish(self) -> Loaded {
        Loaded {
            cluster: self.cluster,
            rejected: self.rejected,
        }
    }

    fn reject(&mut self, object: String, reason: Rejection) {
        tracing::warn!(%object, %reason, rejection = reason.kind(), "manifest rejected");
        self.rejected.push((object, reason));
    }

    fn file(&mut self, file: &str, text: &str, json: bool) {
        if json {
            let origin = Origin {
                file: file.to_owned(),
                line: 1,
                items: Vec::new(),
            };
            match serde_json::from_str::<Value>(text) {
                Ok(value) => self.value(&origin, value, None),
                Err(e) => self.reject(origin.to_string(), Rejection::Json(e.to_string())),
            }
            return;
        }
        for (line, doc) in documents(text) {
            let origin = Origin {
                file: file.to_owned(),
                line,
                items: Vec::new(),
            };
            match serde_saphyr::from_str::<Value>(doc) {
                Ok(Value::Null) => {}
                Ok(value) => self.value(&origin, value, None),
                Err(e) => self.reject(origin.to_string(), Rejection::Yaml(e.to_string())),
            }
        }
    }

    /// One object; `implied` is the (apiVersion, kind) of a typed list's items, which the
    /// API leaves out of each item.
    fn value(&mut self, origin: &Origin, mut value: Value, implied: Option<(&str, &str)>) {
        let Value::Object(map) = &mut value else {
            self.reject(origin.to_string(), Rejection::NotAnObject);
            return;
        };
        if let Some((api_version, kind)) = implied {
            map.entry("apiVersion")
                .or_insert_with(|| Value::from(api_version));
            map.entry("kind").or_insert_with(|| Value::from(kind));
        }
        let api_version = map.get("apiVersion").and_then(Value::as_str);
        let kind = map.get("kind").and_then(Value::as_str);
        let (Some(api_version), Some(kind)) = (api_version, kind) else {
            let object = describe(origin, kind.unwrap_or("object"), map);
            self.reject(object, Rejection::NoTypeMeta);
            return;
        };
        let (api_version, kind) = (api_version.to_owned(), kind.to_owned());
        match (api_version.as_str(), kind.as_str()) {
            ("v1", "Service") => self.service(origin, value),
            ("discovery.k8s.io/v1", "EndpointSlice") => self.slice(origin, value),
            ("v1", "Node") => self.node(origin, value),
            (_, list) if list.ends_with("List") => self.list(origin, &api_version, list, value),
            _ => {
                let object = describe(origin, &kind, map);
                tracing::debug!(%object, %api_version, "manifest of another kind ignored");
            }
        }
    }

    fn list(&mut self, origin: &Origin, api_version: &str, kind: &str, mut value: Value) {
        let items = match value.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items,
            Some(Value::Null) | None => Vec::new(),
            Some(_) => {
                let kind = kind.to_string();
                self.reject(origin.to_string(), Rejection::ItemsNotAList { kind });
                return;
            }
        };
        let implied = match (api_version, kind) {
            ("v1", "ServiceList") => Some(("v1", "Service")),
            ("v1", "NodeList") => Some(("v1", "Node")),
            ("discovery.k8s.io/v1", "EndpointSliceList") => {
                Some(("discovery.k8s.io/v1", "EndpointSlice"))
            }
            _ => None,
        };
        for (i, item) in items.into_iter().enumerate() {
            let mut origin = origin.clone();
            origin.items.push(i);
            self.value(&origin, item, implied);
        }
    }

    fn service(&mut self, origin: &Origin, value: Value) {
        let Some((object, svc)) = self.parse::<core::Service>(origin, "Service", value) else {
            return;
        };
        match convert::service(&svc) {
            Ok(Some(svc)) => {
                if let Some(first) = self.services_at.get(&svc.id) {
                    let first = first.clone();
                    let kind = "Service";
                    self.reject(object, Rejection::Duplicate { kind, first });
                    return;
                }
                self.services_at.insert(svc.id.clone(), origin.to_string());
                self.cluster.services.insert(svc.id.clone(), Arc::new(svc));
            }
            Ok(None) => tracing::debug!(%object, "Service not for kube-proxy, skipped"),
            Err(e) => self.reject(object, Rejection::Invalid(*e.reason)),
        }
    }

    fn slice(&mut self, origin: &Origin, value: Value) {
        let parsed = self.parse::<discovery::EndpointSlice>(origin, "EndpointSlice", value);
        let Some((object, slice)) = parsed else {
            return;
        };
        match convert::endpoint_slice(&slice) {
            Ok(Some(slice)) => {
                let key = slice.id();
                if let Some(first) = self.slices_at.get(&key) {
                    let first = first.clone();
                    let kind = "EndpointSlice";
                    self.reject(object, Rejection::Duplicate { kind, first });
                    return;
                }
                self.slices_at.insert(key.clone(), origin.to_string());
                self.cluster.slices.insert(key, Arc::new(slice));
            }
            Ok(None) => tracing::debug!(%object, "EndpointSlice not for kube-proxy, skipped"),
            Err(e) => self.reject(object, Rejection::Invalid(*e.reason)),
        }
    }

    fn node(&mut self, origin: &Origin, value: Value) {
        let Some((object, node)) = self.parse::<core::Node>(origin, "Node", value) else {
            return;
        };
        // Every Node is validated, so that a typo in another node's manifest is seen too,
        // but only this node's is kept.
        match convert::node(&node) {
            Ok(node) if node.name == self.node_name => {
                if let Some(first) = &self.node_at {
                    let first = first.clone();
                    let kind = "Node";
                    self.reject(object, Rejection::Duplicate { kind, first });
                    return;
                }
                self.node_at = Some(origin.to_string());
                self.cluster.node = Some(node);
            }
            Ok(other) => tracing::debug!(node = %other.name, "Node of another name ignored"),
            Err(e) => self.reject(object, Rejection::Invalid(*e.reason)),
        }
    }

    /// Deserializes an API object, or rejects it with the serde error.
    fn parse<T: k8s_openapi::serde::de::DeserializeOwned>(
        &mut self,
        origin: &Origin,
        kind: &str,
        value: Value,
    ) -> Option<(String, T)> {
        let object = match &value {
            Value::Object(map) => describe(origin, kind, map),
            _ => origin.to_string(),
        };
        match serde_json::from_value(value) {
            Ok(parsed) => Some((object, parsed)),
            Err(e) => {
                let (kind, message) = (kind.to_string(), e.to_string());
                self.reject(object, Rejection::Decode { kind, message });
                None
            }
        }
    }
}

/// `origin Kind namespace/name`, as far as the metadata tells (a namespaced kind without a
/// namespace is in `default`, as `kubectl apply` would put it).
fn describe(origin: &Origin, kind: &str, map: &serde_json::Map<String, Value>) -> String {
    let meta = map.get("metadata");
    let field = |f: &str| {
        meta.and_then(|m| m.get(f))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    // Names of rejected objects can hold anything, newlines included: one log line each.
    let name = convert::printable(field("name").unwrap_or("<unnamed>"));
    let namespace = field("namespace").map(convert::printable);
    let kind = &*convert::printable(kind);
    match (kind, namespace) {
        ("Node", _) => format!("{origin} {kind} {name}"),
        (_, Some(ns)) => format!("{origin} {kind} {ns}/{name}"),
        (_, None) if kind == "Service" || kind == "EndpointSlice" => {
            format!("{origin} {kind} {}/{name}", convert::DEFAULT_NAMESPACE)
        }
        (_, None) => format!("{origin} {kind} {name}"),
    }
}

/// Splits YAML text into its `---`-separated documents, each with the line it starts on, so
/// that a syntax error in one document leaves the others readable. A marker is `---` at the
/// start of a line, alone or followed by a space (whatever follows belongs to the new
/// document), which the YAML spec does not allow inside a document's content; `...` ends a
/// document.
fn documents(text: &str) -> Vec<(usize, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut docs = Vec::new();
    let mut start = 0;
    let mut start_line = 1;
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        let rest = bare.strip_prefix("---");
        let is_start = rest.is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']));
        let is_end = bare == "...";
        if is_start || is_end {
            docs.push((start_line, &text[start..offset]));
            // Content on the marker's line belongs to the new document.
            let inline = rest.is_some_and(|r| !r.trim().is_empty());
            start = if inline {
                offset + 3
            } else {
                offset + line.len()
            };
            start_line = if inline { i + 1 } else { i + 2 };
        }
        offset += line.len();
    }
    docs.push((start_line, &text[start..]));
    docs.retain(|(_, doc)| !doc.trim().is_empty());
    docs
}

#[cfg(test)]
mod tests;
